//! Issue 44: one mount for many local users (`maat mount --many-users --idmap`). Each
//! local uid acts as its own Maat login, found in its own home; owners show as local ids
//! through the identity map; a uid without a trustworthy home is refused.
//!
//! Needs root (to switch uids with setpriv) besides FUSE; skipped, saying so in the test
//! output, where either is missing (MAAT_REQUIRE_FUSE makes that a failure).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::mount::{sh, skip, Mount};
use common::Cluster;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const ALICE: u32 = 50_001;
const BOB: u32 = 50_002;
/// Holds bob's session, in a home its group may write: trusted by nobody.
const PLANTED: u32 = 50_003;
/// Has no home at all.
const STRANGER: u32 = 50_009;
/// Own homes holding a symbolic link, and a hard link, to bob's session file.
const SYMLINKER: u32 = 50_004;
const HARDLINKER: u32 = 50_005;

/// Runs a shell command line as local user `uid` (its own group, no others); returns
/// (success, standard output, standard error).
fn sh_as(uid: u32, cmd: &str) -> (bool, String, String) {
    sh_as_in(uid, uid, cmd)
}

/// As [`sh_as`], with group `gid`.
fn sh_as_in(uid: u32, gid: u32, cmd: &str) -> (bool, String, String) {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "sh",
            "-c",
            cmd,
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok_as(uid: u32, cmd: &str) -> String {
    let (ok, out, err) = sh_as(uid, cmd);
    assert!(ok, "`{cmd}` as {uid} failed: {err}");
    out
}

fn refused_as(uid: u32, cmd: &str) -> String {
    let (ok, _, err) = sh_as(uid, cmd);
    assert!(!ok, "`{cmd}` as {uid} unexpectedly succeeded");
    err
}

/// A home for local `uid` under `homes`, logged in as Maat user `name`, owned by `uid`
/// with `mode`.
fn home_for(cluster: &Cluster, homes: &Path, uid: u32, name: &str, pass: &str, mode: u32) {
    let home = homes.join(uid.to_string());
    std::fs::create_dir_all(&home).unwrap();
    cluster.ok(
        &home,
        &["login", name, "--passphrase-stdin"],
        Some(format!("{pass}\n").as_bytes()),
    );
    sh(&format!("chown -R {uid}:{uid} {}", home.display()));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether this test can act as other local users (says why not, once, if it cannot).
fn can_switch_users(test: &str) -> bool {
    let root = rustix::process::getuid().is_root();
    if !root || Command::new("setpriv").arg("--help").output().is_err() {
        skip(
            test,
            "not root, or no setpriv (util-linux): cannot act as other local users",
        );
        return false;
    }
    true
}

/// A cluster with Maat users ua (local ALICE) and ub (local BOB, and PLANTED's home in
/// a group-writable directory), and the administrator's many-user mount of `/` with the
/// identity map of the two; `None` (said why) where that cannot be tested.
fn many_user_mount(test: &str) -> Option<(Cluster, Mount)> {
    if !can_switch_users(test) {
        return None;
    }
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("ua", "ua passphrase", None);
    cluster.add_user("ub", "ub passphrase", None);
    // The local users must reach the mount point inside the test's directory.
    std::fs::set_permissions(cluster.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let homes = cluster.dir.path().join("homes");
    home_for(&cluster, &homes, ALICE, "ua", "ua passphrase", 0o700);
    home_for(&cluster, &homes, BOB, "ub", "ub passphrase", 0o700);
    home_for(&cluster, &homes, PLANTED, "ub", "ub passphrase", 0o770);
    let bobs = homes.join(BOB.to_string()).join("session.json");
    for (uid, hard) in [(SYMLINKER, false), (HARDLINKER, true)] {
        let home = homes.join(uid.to_string());
        std::fs::create_dir_all(&home).unwrap();
        if hard {
            std::fs::hard_link(&bobs, home.join("session.json")).unwrap();
        } else {
            std::os::unix::fs::symlink(&bobs, home.join("session.json")).unwrap();
        }
        // The directory and a symbolic link itself are the user's; a hard link is
        // bob's file (one inode), which the user cannot change.
        sh(&format!(
            "chown -h {uid}:{uid} {0} {0}/session.json",
            home.display()
        ));
        if hard {
            sh(&format!("chown {BOB}:{BOB} {}", bobs.display()));
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let map = cluster.dir.path().join("idmap");
    std::fs::write(
        &map,
        format!(
            "# local id, Maat name\nuser 0 admin\ngroup 0 admin\n\
             user {ALICE} ua\ngroup {ALICE} ua\nuser {BOB} ub\ngroup {BOB} ub\n"
        ),
    )
    .unwrap();
    let pattern = format!("{}/{{uid}}", homes.display());
    let options = [
        "--many-users",
        "--homes",
        pattern.as_str(),
        "--idmap",
        map.to_str().unwrap(),
    ];
    let m = Mount::with(&cluster, &cluster.admin_home(), test, &options)?;
    Some((cluster, m))
}

#[test]
fn each_local_user_acts_as_their_own_login_on_a_many_user_mount() {
    let test = "each_local_user_acts_as_their_own_login_on_a_many_user_mount";
    let Some((cluster, m)) = many_user_mount(test) else {
        return;
    };
    let mnt = m.point.display().to_string();

    // Alice writes in her Maat home as herself: the file is ua's, shown as her uid.
    ok_as(ALICE, &format!("echo from alice > {mnt}/home/ua/f"));
    assert_eq!(
        ok_as(ALICE, &format!("stat -c %u:%g {mnt}/home/ua/f")).trim(),
        format!("{ALICE}:{ALICE}")
    );
    let stored = cluster.ok(&cluster.admin_home(), &["stat", "/home/ua/f"], None);
    let stored = String::from_utf8_lossy(&stored);
    assert!(stored.contains("ua"), "{stored}");
    assert_eq!(
        cluster.ok(&cluster.admin_home(), &["cat", "/home/ua/f"], None),
        b"from alice\n"
    );
    // Bob is bob at the MDS: he reads alice's file while she lets everyone, not after
    // she closed it to others (the test cluster's umask is 000).
    assert_eq!(ok_as(BOB, &format!("cat {mnt}/home/ua/f")), "from alice\n");
    ok_as(ALICE, &format!("chmod 600 {mnt}/home/ua/f"));
    let err = refused_as(BOB, &format!("cat {mnt}/home/ua/f"));
    assert!(err.contains("Permission denied"), "{err}");
    ok_as(BOB, &format!("echo from bob > {mnt}/home/ub/g"));
    // utimensat(2) as the MDS decides it: "now" needs write permission, a time given
    // explicitly is the owner's alone (EPERM).
    let err = refused_as(ALICE, &format!("touch {mnt}/home/ub/g"));
    assert!(err.contains("Permission denied"), "{err}");
    ok_as(BOB, &format!("chmod 666 {mnt}/home/ub/g"));
    ok_as(ALICE, &format!("touch {mnt}/home/ub/g"));
    let err = refused_as(ALICE, &format!("touch -d @1000000000 {mnt}/home/ub/g"));
    assert!(err.contains("not permitted"), "{err}");
    ok_as(BOB, &format!("touch -d @1000000000 {mnt}/home/ub/g"));
    // chmod(2) of another's file is EPERM; a FIFO in a directory one may not write,
    // EACCES (the administrator's alone is a device node: EPERM).
    let err = refused_as(ALICE, &format!("chmod 600 {mnt}/home/ub/g"));
    assert!(err.contains("not permitted"), "{err}");
    let err = refused_as(ALICE, &format!("mkfifo {mnt}/home/ub/p"));
    assert!(err.contains("Permission denied"), "{err}");
    // A file removed while open has no link left: fstat says nlink 0.
    let nlink = ok_as(
        ALICE,
        &format!(
            "python3 -c \"import os; f = open('{mnt}/home/ua/gone', 'w'); \
             os.unlink('{mnt}/home/ua/gone'); print(os.fstat(f.fileno()).st_nlink)\""
        ),
    );
    assert_eq!(nlink.trim(), "0");
    // A uid with no home, one whose home another account may write (it holds bob's
    // valid session), and ones whose own homes link to bob's session act for nobody.
    for uid in [STRANGER, PLANTED, SYMLINKER, HARDLINKER] {
        let err = refused_as(uid, &format!("ls {mnt}/"));
        assert!(err.contains("Permission denied"), "{uid}: {err}");
    }
    // chown takes local ids through the map: alice may not give her file away; the
    // administrator (root, who mounted) may; an id with no Maat name is refused.
    let err = refused_as(ALICE, &format!("chown {BOB} {mnt}/home/ua/f"));
    assert!(err.contains("not permitted"), "{err}");
    sh(&format!("chown {BOB}:{BOB} {mnt}/home/ua/f"));
    assert_eq!(
        sh(&format!("stat -c %u:%g {mnt}/home/ua/f")).trim(),
        format!("{BOB}:{BOB}")
    );
    let err = common::mount::sh_fails(&format!("chown 777 {mnt}/home/ua/f"));
    assert!(err.contains("Invalid argument"), "{err}");
    // A new entry takes the process's group, as on Linux, when the user belongs to it
    // in Maat; a local group the Maat user is not in is no proof, and Maat's choice
    // (the user's own group) stands.
    cluster.ok(
        &cluster.admin_home(),
        &["admin", "group", "member", "add", "ub", "ua"],
        None,
    );
    let (ok, _, err) = sh_as_in(
        ALICE,
        BOB,
        &format!("mkdir {mnt}/home/ua/d && touch {mnt}/home/ua/d/in-b"),
    );
    assert!(ok, "{err}");
    let (ok, _, err) = sh_as_in(ALICE, STRANGER, &format!("touch {mnt}/home/ua/d/own"));
    assert!(ok, "{err}");
    assert_eq!(
        sh(&format!(
            "stat -c %g {mnt}/home/ua/d {mnt}/home/ua/d/in-b {mnt}/home/ua/d/own"
        ))
        .split_whitespace()
        .collect::<Vec<_>>(),
        [BOB.to_string(), BOB.to_string(), ALICE.to_string()]
    );
    // Names the map lacks show as the overflow id.
    cluster.add_user("uc", "uc passphrase", None);
    assert_eq!(
        sh(&format!("stat -c %u:%g {mnt}/home/uc")).trim(),
        "65534:65534"
    );
}

/// Issue 44, "everyday work on the mount as an ordinary user": git, tar with modes, times,
/// symbolic and hard links, cp -a, rsync -a twice (the second sends nothing), sqlite3 with
/// WAL, make with a C compiler and a Python venv with `pip install` of a wheel, as local
/// user ALICE in her Maat home. A tool that is not installed is skipped, saying so.
#[test]
fn everyday_tools_work_for_an_ordinary_user() {
    let test = "everyday_tools_work_for_an_ordinary_user";
    let Some((_cluster, m)) = many_user_mount(test) else {
        return;
    };
    let home = m.path("home/ua").display().to_string();
    let steps: [(&str, &str, &str); 7] = [
        (
            "git",
            "git init -q repo && cd repo && echo hello > a && mkdir sub && echo x > sub/b \
             && git add . && git commit -qm one && echo more >> a && git commit -qam two \
             && git gc -q && git fsck --no-progress 2>/dev/null && cd .. && git clone -q repo clone \
             && git -C clone log --oneline | wc -l",
            "2",
        ),
        (
            "tar",
            "mkdir src && echo data > src/f && chmod 640 src/f && ln -s f src/link \
             && ln src/f src/hard && touch -d @1000000000 src/f && tar cf t.tar src \
             && mkdir x && tar xf t.tar -C x \
             && echo $(stat -c '%a %Y %h' x/src/f) $(readlink x/src/link)",
            "640 1000000000 2 f",
        ),
        (
            "cp",
            "cp -a src cpa && stat -c '%a %Y' cpa/f",
            "640 1000000000",
        ),
        (
            "rsync",
            "rsync -a src/ r/ && rsync -ai src/ r/ | wc -l",
            "0",
        ),
        (
            "sqlite3",
            "sqlite3 db 'pragma journal_mode=wal; create table t(x); \
             insert into t values(1),(2);' >/dev/null && sqlite3 db 'select count(*) from t'",
            "2",
        ),
        (
            "make",
            "mkdir proj && cd proj && printf 'int main(void){return 7;}\\n' > m.c \
             && printf 'm: m.c\\n\\tcc -o m m.c\\n' > Makefile && make -s; ./m; echo $?",
            "7",
        ),
        (
            // A venv and `pip install` of a pure-Python package, offline: a wheel made
            // here (the issue's own example downloads one).
            "python3",
            "python3 -c \"import zipfile; z = zipfile.ZipFile('hello-1.0-py3-none-any.whl', 'w'); \
             d = 'hello-1.0.dist-info/'; z.writestr('hello.py', 'X = 42'); \
             z.writestr(d + 'METADATA', 'Metadata-Version: 2.1\\nName: hello\\nVersion: 1.0\\n'); \
             z.writestr(d + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'); \
             z.writestr(d + 'RECORD', ''.join(f + ',,\\n' for f in ['hello.py', d + 'METADATA', d + 'WHEEL', d + 'RECORD'])); \
             z.close()\" && python3 -m venv venv && venv/bin/pip install -q --no-index \
             --disable-pip-version-check hello-1.0-py3-none-any.whl \
             && venv/bin/python -c 'import hello; print(hello.X)'",
            "42",
        ),
    ];
    for (tool, script, want) in steps {
        let present = Command::new("sh")
            .args(["-c", &format!("command -v {tool} && command -v cc")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !present {
            skip(
                &format!("{test} ({tool})"),
                &format!("{tool} or cc is not installed"),
            );
            continue;
        }
        let out = ok_as(
            ALICE,
            &format!(
                "cd {home} && export HOME={home} GIT_CONFIG_GLOBAL=/dev/null \
                      GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a \
                      GIT_COMMITTER_EMAIL=a@b && {script}"
            ),
        );
        assert_eq!(out.trim(), want, "{tool}");
    }
}
