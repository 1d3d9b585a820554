//! `maat mount` with real tools on a real FUSE mount: cp, cat, ls -l, dd, mv, rm, mkdir -p,
//! Python's open, a random sequence of writes, truncates and reads compared with the same
//! sequence on a local directory, and refusals that come from the MDS.
//!
//! Skipped, with a message in the test output, where /dev/fuse or fusermount3 is missing
//! or mounting is not permitted (set MAAT_REQUIRE_FUSE to make that a failure).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::mount::{python, sh, sh_fails, skip, Mount};
use common::Cluster;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Issue 44: an existing file opened with `O_TRUNC` and written shorter (`cp small big`,
/// `echo ab > f`) kept nothing (the kernel truncates by path, then writes through the
/// open, whose stale size made it merge into a removed stripe). Encrypted and plain,
/// within a stripe and across several; read back through the CLI.
#[test]
fn o_trunc_rewrites_shorter_keep_the_new_bytes_encrypted_and_plain() {
    let test = "o_trunc_rewrites_shorter_keep_the_new_bytes_encrypted_and_plain";
    let cluster = Cluster::start_encrypting(3, &[]);
    let home = cluster.admin_home();
    let Some(m) = Mount::new(&cluster, &home, test) else {
        return;
    };
    let mnt = m.point.display().to_string();
    let bytes = |n: usize, seed: u32| -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(31) ^ seed) as u8)
            .collect()
    };
    for (plain, flag) in [(false, "--encrypt"), (true, "--no-encrypt")] {
        for (old, new) in [(200_000, 3), (2_000_000, 1_000_000), (1_500_000, 4_096)] {
            let name = format!("t-{plain}-{old}-{new}");
            let src = cluster.dir.path().join(format!("{name}.old"));
            std::fs::write(&src, bytes(old, 1)).unwrap();
            cluster.ok(
                &home,
                &["put", flag, src.to_str().unwrap(), &format!("/{name}")],
                None,
            );
            let shown = cluster.ok(&home, &["stat", &format!("/{name}")], None);
            assert_eq!(
                String::from_utf8_lossy(&shown).contains("sealed end to end"),
                !plain,
                "{name}: {}",
                String::from_utf8_lossy(&shown)
            );
            let after = bytes(new, 2);
            let dst = cluster.dir.path().join(format!("{name}.new"));
            std::fs::write(&dst, &after).unwrap();
            // cp opens the existing file O_WRONLY|O_TRUNC and writes the shorter bytes.
            sh(&format!("cp {} {mnt}/{name}", dst.display()));
            let got = cluster.ok(&home, &["cat", &format!("/{name}")], None);
            assert_eq!(got.len(), new, "{name}: size after the rewrite");
            assert!(got == after, "{name}: other bytes after the rewrite");
            assert!(
                std::fs::read(m.path(&name)).unwrap() == after,
                "{name}: mount"
            );
        }
    }
    // The shell's own redirection, as the issue saw it.
    let name = "echo";
    sh(&format!("head -c 200000 /dev/urandom > {mnt}/{name}"));
    sh(&format!("echo ab > {mnt}/{name}"));
    assert_eq!(cluster.ok(&home, &["cat", "/echo"], None), b"ab\n");
}

#[test]
fn unix_tools_work_on_a_mount() {
    // Encrypted by default, as `maat up` makes it.
    let cluster = Cluster::start_encrypting(3, &[]);
    let Some(m) = Mount::new(
        &cluster,
        &cluster.admin_home(),
        "unix_tools_work_on_a_mount",
    ) else {
        return;
    };
    let local = cluster.dir.path().join("local.bin");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(&local, &data).unwrap();
    let mnt = m.point.display().to_string();

    sh(&format!("mkdir -p {mnt}/a/b/c"));
    sh(&format!("cp {} {mnt}/a/b/c/data.bin", local.display()));
    sh(&format!("cmp {} {mnt}/a/b/c/data.bin", local.display()));
    // What the mount wrote is what `maat get` reads: sizes were recorded at close.
    let got = cluster.ok(&cluster.admin_home(), &["cat", "/a/b/c/data.bin"], None);
    assert!(got == data, "maat cat differs from what cp wrote");

    let listing = sh(&format!("ls -l {mnt}/a/b/c"));
    assert!(
        listing.contains("-rw-r--r--")
            && listing.contains("3000000")
            && listing.contains("data.bin"),
        "{listing}"
    );

    sh(&format!("echo hello > {mnt}/a/hello.txt"));
    assert_eq!(sh(&format!("cat {mnt}/a/hello.txt")), "hello\n");
    sh(&format!("echo more >> {mnt}/a/hello.txt"));
    assert_eq!(sh(&format!("cat {mnt}/a/hello.txt")), "hello\nmore\n");

    sh(&format!(
        "dd if=/dev/zero of={mnt}/a/dd.bin bs=64k count=40 status=none"
    ));
    assert_eq!(
        std::fs::metadata(m.path("a/dd.bin")).unwrap().len(),
        40 * 65536
    );
    sh(&format!(
        "printf XY | dd of={mnt}/a/dd.bin bs=1 seek=100 conv=notrunc status=none"
    ));
    let dd = std::fs::read(m.path("a/dd.bin")).unwrap();
    assert_eq!(dd.len(), 40 * 65536);
    assert_eq!(&dd[99..103], b"\0XY\0");

    sh(&format!("mv {mnt}/a/hello.txt {mnt}/a/b/moved.txt"));
    assert!(!m.path("a/hello.txt").exists());
    assert_eq!(sh(&format!("cat {mnt}/a/b/moved.txt")), "hello\nmore\n");
    // mv over an existing file replaces it, as rename(2) does.
    sh(&format!("mv {mnt}/a/dd.bin {mnt}/a/b/moved.txt"));
    assert_eq!(
        std::fs::metadata(m.path("a/b/moved.txt")).unwrap().len(),
        40 * 65536
    );

    let py = "import sys; p = sys.argv[1]\n\
              with open(p, 'w') as f: f.write('written by python\\n')\n\
              with open(p) as f: print(f.read(), end='')\n\
              with open(p, 'r+b') as f: f.seek(8); f.write(b'BY'); f.seek(0); print(f.read().decode(), end='')";
    assert_eq!(
        python(py, &m.path("a/py.txt")),
        "written by python\nwritten BY python\n"
    );

    // A file renamed while open (write to a temporary name, os.replace, then close)
    // records its size under the new name.
    let py = "import os, sys; d = sys.argv[1]\n\
              with open(d + '/tmp', 'wb') as f:\n    f.write(b'z' * 70000); os.replace(d + '/tmp', d + '/final')";
    python(py, &m.path("a"));
    let got = cluster.ok(&cluster.admin_home(), &["cat", "/a/final"], None);
    assert_eq!(got.len(), 70000, "size of a file renamed while open");

    sh(&format!(
        "rm {mnt}/a/b/c/data.bin {mnt}/a/b/moved.txt {mnt}/a/py.txt {mnt}/a/final"
    ));
    let err = sh_fails(&format!("rmdir {mnt}/a/b"));
    assert!(err.contains("not empty"), "{err}");
    sh(&format!("rmdir {mnt}/a/b/c {mnt}/a/b {mnt}/a"));
    assert!(!m.path("a").exists());
    // Mounted nosuid and nodev unless asked (issue 44): setuid bits stored in Maat are
    // never honoured for programs run from the mount.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(mnt.as_str()))
        .unwrap();
    let options: Vec<&str> = line.split(' ').nth(3).unwrap().split(',').collect();
    assert!(
        options.contains(&"nosuid") && options.contains(&"nodev"),
        "{line}"
    );
    // Device nodes: the administrator's (this mount), never opened (nodev).
    sh(&format!("mknod {mnt}/blk b 1 2 && mknod {mnt}/chr c 1 3"));
    let listing = sh(&format!("ls -l {mnt}/blk {mnt}/chr"));
    assert!(
        listing.lines().any(|l| l.starts_with('b')) && listing.lines().any(|l| l.starts_with('c')),
        "{listing}"
    );
    sh_fails(&format!("head -c 1 {mnt}/chr"));
    sh(&format!("rm {mnt}/blk {mnt}/chr"));
    // Hard links: `fuse_links.rs`; symbolic links: the permissions test.
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

#[test]
fn random_writes_truncates_and_reads_match_a_local_directory() {
    let cluster = Cluster::start_encrypting(3, &[]);
    let test = "random_writes_truncates_and_reads_match_a_local_directory";
    let Some(m) = Mount::new(&cluster, &cluster.admin_home(), test) else {
        return;
    };
    let local_dir = cluster.dir.path().join("model");
    std::fs::create_dir_all(&local_dir).unwrap();
    let stripe = 512 * 1024u64;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..3 {
        let name = format!("f{round}");
        let open = |p: PathBuf| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .unwrap()
        };
        let ours = open(m.path(&name));
        let theirs = open(local_dir.join(&name));
        for step in 0..40 {
            let size = theirs.metadata().unwrap().len();
            match rng.below(10) {
                0..=4 => {
                    let offset = rng.below(size + stripe / 2);
                    let len = 1 + rng.below(stripe + 1000) as usize;
                    let byte = (step * 13 + round) as u8;
                    let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                    ours.write_all_at(&data, offset).unwrap();
                    theirs.write_all_at(&data, offset).unwrap();
                }
                5..=6 => {
                    let to = rng.below(size + stripe);
                    ours.set_len(to).unwrap();
                    theirs.set_len(to).unwrap();
                }
                _ => {
                    let offset = rng.below(size + 10);
                    let len = rng.below(2 * stripe) as usize;
                    let mut a = vec![0u8; len];
                    let mut b = vec![0u8; len];
                    let n = read_full(&ours, &mut a, offset);
                    let k = read_full(&theirs, &mut b, offset);
                    assert_eq!(n, k, "round {round} step {step}: read length at {offset}");
                    assert!(
                        a[..n] == b[..k],
                        "round {round} step {step}: bytes at {offset}"
                    );
                }
            }
            assert_eq!(
                ours.metadata().unwrap().len(),
                theirs.metadata().unwrap().len(),
                "round {round} step {step}: size"
            );
        }
        drop(ours);
        drop(theirs);
        let want = std::fs::read(local_dir.join(&name)).unwrap();
        assert!(
            std::fs::read(m.path(&name)).unwrap() == want,
            "round {round}: reread"
        );
        let got = cluster.ok(&cluster.admin_home(), &["cat", &format!("/{name}")], None);
        assert!(got == want, "round {round}: maat cat after close");
    }
}

/// A sequential reader gets the next read-ahead window fetched on a thread of its own
/// while the kernel copies the current one (`maat-fuse`). A write through the same file
/// into the window being fetched must still be read back: the fetch is dropped.
#[test]
fn a_write_into_the_window_read_ahead_is_read_back() {
    let cluster = Cluster::start_encrypting(2, &[]);
    let test = "a_write_into_the_window_read_ahead_is_read_back";
    let Some(m) = Mount::new(&cluster, &cluster.admin_home(), test) else {
        return;
    };
    let mib = 1024 * 1024;
    let mut want = common::content(9, 12 * mib);
    std::fs::write(m.path("seq"), &want).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("seq"))
        .unwrap();
    // A sequential read of the first MiB: the mount reads 4 MiB ahead and starts
    // fetching the 4 MiB after that; give the fetch time to finish.
    let mut buf = vec![0u8; mib];
    assert_eq!(read_full(&f, &mut buf, 0), mib);
    assert!(buf[..] == want[..mib]);
    std::thread::sleep(Duration::from_millis(500));
    // A write into the prefetched window, then a read of that window.
    let new: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&new, 5 * mib as u64 + 123).unwrap();
    want[5 * mib + 123..5 * mib + 123 + new.len()].copy_from_slice(&new);
    let mut window = vec![0u8; 4 * mib];
    assert_eq!(read_full(&f, &mut window, 4 * mib as u64), 4 * mib);
    assert!(
        window[..] == want[4 * mib..8 * mib],
        "the window read back lacks the write"
    );
    // And the whole file, sequentially, through a new open.
    drop(f);
    assert!(std::fs::read(m.path("seq")).unwrap() == want);
}

/// Issue 44: a program's path is at most PATH_MAX, but the absolute path a mount sends
/// the MDS may be longer (a relative path under a deep directory, pjdfstest's `*/03.t`):
/// a file 5,000 bytes deep is made, read and removed.
#[test]
fn absolute_paths_longer_than_path_max_resolve() {
    let cluster = Cluster::start(1, &[]);
    let test = "absolute_paths_longer_than_path_max_resolve";
    let Some(m) = Mount::new(&cluster, &cluster.admin_home(), test) else {
        return;
    };
    let out = python(
        "import os, sys\n\
         os.chdir(sys.argv[1])\n\
         for _ in range(25):\n    os.mkdir('d' * 200)\n    os.chdir('d' * 200)\n\
         open('f', 'w').write('deep')\n\
         print(len(os.getcwd()) > 5000, open('f').read())\n\
         os.unlink('f')",
        &m.point,
    );
    assert_eq!(out, "True deep\n", "{out}");
    let deep = format!("/{}", vec!["d".repeat(200); 25].join("/"));
    let listing = cluster.ok(&cluster.admin_home(), &["ls", &deep], None);
    assert!(listing.is_empty(), "{}", String::from_utf8_lossy(&listing));
}

fn read_full(f: &std::fs::File, buf: &mut [u8], offset: u64) -> usize {
    let mut done = 0;
    while done < buf.len() {
        let n = f.read_at(&mut buf[done..], offset + done as u64).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    done
}

#[test]
fn permissions_on_a_mount_are_the_mds_decisions() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("fbob", "fbob passphrase", None);
    let bob_home = cluster.home("fbob");
    cluster.ok(
        &bob_home,
        &["login", "fbob", "--passphrase-stdin"],
        Some(b"fbob passphrase\n"),
    );
    let admin = cluster.admin_home();
    cluster.ok(&admin, &["mkdir", "/shared"], None);
    cluster.ok(
        &admin,
        &["put", "-", "/shared/private"],
        Some(b"admin only"),
    );
    cluster.ok(&admin, &["chmod", "600", "/shared/private"], None);
    cluster.ok(
        &admin,
        &["put", "-", "/shared/public"],
        Some(b"for everyone"),
    );

    let test = "permissions_on_a_mount_are_the_mds_decisions";
    let Some(m) = Mount::new(&cluster, &bob_home, test) else {
        return;
    };
    let mnt = m.point.display().to_string();
    assert_eq!(sh(&format!("cat {mnt}/shared/public")), "for everyone");
    // The mount shows bob as every file's owner, yet the MDS refuses: the refusal is
    // the MDS's, not the kernel's reading of the mode bits.
    let err = sh_fails(&format!("cat {mnt}/shared/private"));
    assert!(err.contains("Permission denied"), "{err}");
    let err = sh_fails(&format!("echo x > {mnt}/shared/new"));
    assert!(err.contains("Permission denied"), "{err}");
    let err = sh_fails(&format!("rm {mnt}/shared/public"));
    assert!(err.contains("Permission denied"), "{err}");
    // access(2) answers what the MDS would decide (issue 44: it always said yes).
    let out = python(
        "import os, sys\n\
         d = sys.argv[1]\n\
         print([os.access(os.path.join(d, p), m) for p, m in [\n\
             ('private', os.R_OK), ('public', os.R_OK), ('public', os.W_OK),\n\
             ('public', os.X_OK), ('private', os.F_OK), ('nothing', os.F_OK)]])",
        &m.path("shared"),
    );
    assert_eq!(out, "[False, True, False, False, True, False]\n", "{out}");
    let err = sh_fails(&format!("chmod 666 {mnt}/shared/private"));
    assert!(
        err.contains("Permission denied") || err.contains("not permitted"),
        "{err}"
    );
    // rename(2) of a directory over an empty one replaces it; over a non-empty one,
    // ENOTEMPTY.
    let out = python(
        "import os, sys\n\
         d = sys.argv[1]\n\
         for p in ('src/in', 'empty', 'full/x'): os.makedirs(os.path.join(d, p))\n\
         try:\n    os.rename(os.path.join(d, 'src'), os.path.join(d, 'full'))\n\
         except OSError as e: print(e.strerror)\n\
         os.rename(os.path.join(d, 'src'), os.path.join(d, 'empty'))\n\
         print(sorted(os.listdir(d)), os.listdir(os.path.join(d, 'empty')))",
        &m.path("home/fbob"),
    );
    assert!(out.contains("Directory not empty"), "{out}");
    assert!(out.contains("['in']") && !out.contains("'src'"), "{out}");

    // Times (issue 44): touch -d and cp -p keep the time asked; a directory's time moves
    // with its entries; rsync -a (when installed) sends nothing the second time.
    let home = m.path("home/fbob").display().to_string();
    sh(&format!(
        "mkdir {home}/t && touch -d @1000000000 {home}/t/old"
    ));
    assert_eq!(sh(&format!("stat -c %Y {home}/t/old")).trim(), "1000000000");
    sh(&format!("touch -d @1100000000 {home}/t"));
    sh(&format!("echo x > {home}/t/new"));
    let dir_time: u64 = sh(&format!("stat -c %Y {home}/t")).trim().parse().unwrap();
    assert!(
        dir_time > 1_100_000_000,
        "the directory's time did not move"
    );
    let local = cluster.dir.path().join("times");
    std::fs::create_dir_all(local.join("sub")).unwrap();
    std::fs::write(local.join("sub/a"), b"aaa").unwrap();
    sh(&format!("touch -d @1200000000 {}/sub/a", local.display()));
    sh(&format!("cp -p {}/sub/a {home}/t/copied", local.display()));
    assert_eq!(
        sh(&format!("stat -c %Y {home}/t/copied")).trim(),
        "1200000000"
    );
    if Command::new("rsync").arg("--version").output().is_ok() {
        let sync = format!(
            "rsync -a --stats {}/ {home}/synced/ | grep 'files transferred'",
            local.display()
        );
        let first = sh(&sync);
        assert!(first.contains(": 1"), "{first}");
        let second = sh(&sync);
        assert!(second.contains(": 0"), "rsync sent again: {second}");
    } else {
        skip(
            test,
            "rsync is not installed: its second-run check did not run",
        );
    }

    // A file removed while open stays usable through its descriptor, out of sight,
    // and goes with its last close (issue 44: it was ENOENT/EIO at once).
    let out = python(
        "import os, sys\n\
         d = sys.argv[1]\n\
         p = os.path.join(d, 'scratch')\n\
         fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)\n\
         os.write(fd, b'before ')\n\
         os.unlink(p)\n\
         print(os.path.exists(p), [n for n in os.listdir(d) if 'scratch' in n or n.startswith('.maat')])\n\
         os.write(fd, b'after')\n\
         print(os.pread(fd, 100, 0).decode(), os.fstat(fd).st_size)\n\
         os.close(fd)",
        &m.path("home/fbob"),
    );
    assert_eq!(out, "False []\nbefore after 12\n", "{out}");
    let listing = String::from_utf8(cluster.ok(&bob_home, &["ls", "/home/fbob"], None)).unwrap();
    assert!(!listing.contains("maat-unlinked"), "{listing}");

    // Symbolic links (issue 44): made and read through the mount and the CLI, followed
    // by the kernel to files and directories, removed without their targets; a
    // virtualenv (links to the interpreter and lib64 -> lib) works on the mount.
    sh(&format!(
        "cd {home} && mkdir -p real/sub && echo linked > real/sub/f && ln -s real/sub/f lf \
         && ln -s real rd && ln -s /nowhere dangling"
    ));
    assert_eq!(sh(&format!("cat {home}/lf")), "linked\n");
    assert_eq!(sh(&format!("readlink {home}/lf")), "real/sub/f\n");
    assert_eq!(sh(&format!("ls {home}/rd/sub")), "f\n");
    assert!(sh(&format!("ls -l {home}/lf")).starts_with('l'));
    sh_fails(&format!("cat {home}/dangling"));
    cluster.ok(
        &bob_home,
        &["ln", "-s", "real/sub/f", "/home/fbob/cli-link"],
        None,
    );
    assert_eq!(sh(&format!("cat {home}/cli-link")), "linked\n");
    assert_eq!(
        cluster.ok(&bob_home, &["readlink", "/home/fbob/lf"], None),
        b"real/sub/f\n"
    );
    let listing =
        String::from_utf8(cluster.ok(&bob_home, &["ls", "-l", "/home/fbob"], None)).unwrap();
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('l') && l.ends_with("lf")),
        "{listing}"
    );
    sh(&format!("rm {home}/lf {home}/rd && cat {home}/real/sub/f"));
    sh(&format!(
        "python3 -m venv --without-pip {home}/venv && {home}/venv/bin/python -c 'import sys; print(sys.prefix)'"
    ));

    // A FIFO and a socket's name (issue 44): entries of their type, served by this
    // machine's kernel (a writer and a reader meet through the FIFO on the mount).
    let out = python(
        "import os, socket, stat, sys, threading\n\
         d = sys.argv[1]\n\
         f = os.path.join(d, 'pipe')\n\
         os.mkfifo(f, 0o600)\n\
         def write():\n    with open(f, 'w') as w: w.write('through the pipe')\n\
         t = threading.Thread(target=write); t.start()\n\
         with open(f) as r: print(r.read())\n\
         t.join()\n\
         s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(d, 'sock')); s.close()\n\
         print(stat.S_ISFIFO(os.stat(f).st_mode), stat.S_ISSOCK(os.stat(os.path.join(d, 'sock')).st_mode))\n\
         os.mknod(os.path.join(d, 'plain'), 0o600 | stat.S_IFREG)\n\
         print(stat.S_ISREG(os.stat(os.path.join(d, 'plain')).st_mode))",
        &m.path("home/fbob"),
    );
    assert_eq!(out, "through the pipe\nTrue True\nTrue\n", "{out}");
    let listing =
        String::from_utf8(cluster.ok(&bob_home, &["ls", "-l", "/home/fbob"], None)).unwrap();
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('p') && l.ends_with("pipe"))
            && listing
                .lines()
                .any(|l| l.starts_with('s') && l.ends_with("sock")),
        "{listing}"
    );

    // A name past 255 bytes: POSIX's ENAMETOOLONG, for a lookup and a create alike.
    let long = "n".repeat(256);
    for cmd in [
        format!("ls {mnt}/home/fbob/{long}"),
        format!("echo x > {mnt}/home/fbob/{long}"),
    ] {
        let err = sh_fails(&cmd);
        assert!(err.contains("File name too long"), "{cmd}: {err}");
    }
    sh(&format!("echo x > {mnt}/home/fbob/{}", "n".repeat(255)));

    // Bob's own directory works.
    sh(&format!(
        "echo mine > {mnt}/home/fbob/note && cat {mnt}/home/fbob/note"
    ));

    // Issue 44: a file created without write permission (git's objects, tar's read-only
    // files) is written through the descriptor that created it, then has its mode.
    let made = m.path("home/fbob/ro");
    python(
        "import os, sys\n\
         fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444)\n\
         os.write(fd, b'read-only now')\n\
         os.close(fd)",
        &made,
    );
    assert_eq!(
        cluster.ok(&bob_home, &["cat", "/home/fbob/ro"], None),
        b"read-only now"
    );
    let listing = sh(&format!("ls -l {}", made.display()));
    assert!(listing.starts_with("-r--r--r--"), "{listing}");
    let err = sh_fails(&format!("echo more >> {}", made.display()));
    assert!(err.contains("Permission denied"), "{err}");
    // With a mode that has owner write, nothing changes at close.
    python(
        "import os, sys\n\
         fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o640)\n\
         os.write(fd, b'x')\n\
         os.close(fd)",
        &m.path("home/fbob/rw"),
    );
    let listing = sh(&format!("ls -l {}", m.path("home/fbob/rw").display()));
    assert!(listing.starts_with("-rw-r-----"), "{listing}");
}
