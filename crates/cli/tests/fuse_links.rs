//! Hard links and the three times through a real FUSE mount (issue 44): `ln`, `tar` of a
//! tree with hard links, data and modes shared by every name, the file kept until its
//! last name goes; `touch -a` and a change time that follows chmod.
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
use common::mount::{sh, sh_fails, Mount};
use common::Cluster;

#[test]
fn hard_links_share_one_file_until_its_last_name_goes() {
    let test = "hard_links_share_one_file_until_its_last_name_goes";
    // Encrypted by default, as `maat up` makes it: the lockbox follows the inode.
    let cluster = Cluster::start_encrypting(2, &[]);
    let home = cluster.admin_home();
    let Some(m) = Mount::new(&cluster, &home, test) else {
        return;
    };
    let mnt = m.point.display().to_string();
    sh(&format!(
        "mkdir {mnt}/d && printf 'first\\n' > {mnt}/a && ln {mnt}/a {mnt}/d/b"
    ));
    // One inode: same number, two names, whichever name is asked.
    let shown = sh(&format!("stat -c '%i %h' {mnt}/a {mnt}/d/b"));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "{shown}");
    assert_eq!(lines[0], lines[1], "{shown}");
    assert!(lines[0].ends_with(" 2"), "{shown}");
    // Data written through one name is read through the other, and so is a mode.
    sh(&format!(
        "printf 'second\\n' >> {mnt}/d/b && chmod 640 {mnt}/a"
    ));
    assert_eq!(
        std::fs::read_to_string(m.path("a")).unwrap(),
        "first\nsecond\n"
    );
    assert_eq!(sh(&format!("stat -c '%a' {mnt}/d/b")), "640\n");
    // A directory has one name; an existing name is not replaced.
    let refused = sh_fails(&format!("ln {mnt}/d {mnt}/e"));
    assert!(refused.contains("not allowed"), "{refused}");
    let refused = sh_fails(&format!("ln {mnt}/a {mnt}/d/b"));
    assert!(refused.contains("exists"), "{refused}");
    // Removing one name keeps the file, for the mount and for the CLI.
    sh(&format!("rm {mnt}/a"));
    assert_eq!(sh(&format!("stat -c '%h' {mnt}/d/b")), "1\n");
    assert_eq!(
        cluster.ok(&home, &["cat", "/d/b"], None),
        b"first\nsecond\n"
    );
    // The CLI makes one too (`maat ln` without `-s`), seen through the mount.
    cluster.ok(&home, &["ln", "/d/b", "/c"], None);
    assert_eq!(
        std::fs::read_to_string(m.path("c")).unwrap(),
        "first\nsecond\n"
    );
    assert_eq!(sh(&format!("stat -c '%h' {mnt}/c")), "2\n");
    // rename(2) over a file replaces it in one step; over one of two names, that name.
    sh(&format!("echo new > {mnt}/n && mv {mnt}/n {mnt}/c"));
    assert_eq!(
        sh(&format!("cat {mnt}/c {mnt}/d/b")),
        "new\nfirst\nsecond\n"
    );
    assert_eq!(sh(&format!("stat -c '%h' {mnt}/d/b")), "1\n");
    sh(&format!("rm {mnt}/c && ln {mnt}/d/b {mnt}/c"));
    // The last name takes the file with it.
    sh(&format!("rm {mnt}/d/b {mnt}/c"));
    let gone = cluster.fails(&home, &["cat", "/c"], None);
    assert!(
        gone.contains("NoSuchFile") || gone.contains("no such"),
        "{gone}"
    );

    // tar keeps hard links both ways.
    let src = cluster.dir.path().join("tree");
    sh(&format!(
        "mkdir -p {s}/x && echo one > {s}/x/f && ln {s}/x/f {s}/g && \
         tar -C {s} -cf {s}.tar . && mkdir {mnt}/t && tar -C {mnt}/t -xf {s}.tar",
        s = src.display()
    ));
    assert_eq!(sh(&format!("stat -c '%h' {mnt}/t/g {mnt}/t/x/f")), "2\n2\n");
    sh(&format!(
        "tar -C {mnt}/t -cf {mnt}/t.tar . && mkdir {s}.back && tar -C {s}.back -xf {mnt}/t.tar",
        s = src.display()
    ));
    assert_eq!(
        sh(&format!("stat -c '%h' {}.back/g", src.display())),
        "2\n",
        "the tar made on the mount recorded the link"
    );
}

#[test]
fn access_and_change_times_are_kept() {
    let test = "access_and_change_times_are_kept";
    let cluster = Cluster::start(1, &[]);
    let home = cluster.admin_home();
    let Some(m) = Mount::new(&cluster, &home, test) else {
        return;
    };
    let mnt = m.point.display().to_string();
    sh(&format!(
        "echo x > {mnt}/f && touch -m -d @1000000 {mnt}/f && touch -a -d @2000000 {mnt}/f"
    ));
    assert_eq!(sh(&format!("stat -c '%X %Y' {mnt}/f")), "2000000 1000000\n");
    let ctime = |p: &str| -> u64 {
        sh(&format!("stat -c '%Z' {mnt}/{p}"))
            .trim()
            .parse()
            .unwrap()
    };
    let before = ctime("f");
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    sh(&format!("chmod 600 {mnt}/f"));
    assert!(ctime("f") > before, "chmod moves the change time");
    assert_eq!(
        sh(&format!("stat -c '%X %Y' {mnt}/f")),
        "2000000 1000000\n",
        "and neither of the others"
    );
}
