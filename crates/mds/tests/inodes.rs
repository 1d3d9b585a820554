//! The inode at the MDS (issue 44): hard links (one inode under several names, its
//! permissions and objects the inode's whatever name it is reached by, gone with its last
//! name), a change time that follows POSIX, and setuid and setgid cleared by a writer.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{add_users, call, mds, MemStore, T0};

use maat_mds::{MetaStore, ADMIN_UID};
use maat_proto::msg::{
    Access, ErrorCode, FileStat, MdsRequest, MdsResponse, SetTime, StatMore, WireError,
};

const ALICE: u64 = 100;
const BOB: u64 = 101;

type M<'a> = maat_mds::Mds<&'a MemStore>;

fn ok(m: &M, uid: u64, r: MdsRequest, at: u64) -> MdsResponse {
    call(m, uid, r, at).unwrap()
}

fn refused(m: &M, uid: u64, r: MdsRequest, at: u64) -> ErrorCode {
    let e: WireError = call(m, uid, r, at).unwrap_err();
    e.code
}

fn stat(m: &M, path: &str) -> (FileStat, StatMore) {
    match ok(m, ADMIN_UID, MdsRequest::StatFull { path: path.into() }, T0) {
        MdsResponse::StatFull { stat, more } => (stat, more),
        other => panic!("{other:?}"),
    }
}

fn link(from: &str, to: &str) -> MdsRequest {
    MdsRequest::HardLink {
        from: from.into(),
        to: to.into(),
    }
}

fn unlink(path: &str) -> MdsRequest {
    MdsRequest::Unlink { path: path.into() }
}

/// A store with /w (0777), alice's file /w/f (0640) and her directory /w/d.
fn setup(store: &MemStore) -> M<'_> {
    add_users(store, &["alice", "bob"]);
    let m = mds(store);
    let mkdir = |path: &str, mode| MdsRequest::Mkdir {
        path: path.into(),
        mode,
        parents: false,
        partition: None,
    };
    ok(&m, ADMIN_UID, mkdir("/w", 0o777), T0);
    ok(
        &m,
        ADMIN_UID,
        MdsRequest::Chmod {
            path: "/w".into(),
            mode: 0o777,
        },
        T0,
    );
    ok(
        &m,
        ALICE,
        MdsRequest::Open {
            path: "/w/f".into(),
            access: Access::ReadWrite,
            create: Some(0o640),
        },
        T0 + 10,
    );
    ok(&m, ALICE, mkdir("/w/d", 0o755), T0 + 10);
    m
}

#[test]
fn one_inode_under_several_names_goes_with_its_last() {
    let store = MemStore::default();
    let m = setup(&store);
    let (f, more) = stat(&m, "/w/f");
    assert_eq!(more.nlink, 1);
    let (linked, more) = match ok(&m, ALICE, link("/w/f", "/w/d/g"), T0 + 20) {
        MdsResponse::StatFull { stat, more } => (stat, more),
        other => panic!("{other:?}"),
    };
    assert_eq!(linked.id, f.id, "the new name is the same inode");
    assert_eq!(more.nlink, 2, "the answer has the new count");
    let (g, more) = stat(&m, "/w/d/g");
    assert_eq!((g.id, more.nlink), (f.id, 2));
    assert_eq!(stat(&m, "/w/f").1.nlink, 2);
    assert_eq!(
        stat(&m, "/w/d").0.mtime,
        T0 + 20,
        "the directory that gained a name changed"
    );

    // Permissions are the inode's: a chmod through one name shows through the other.
    ok(
        &m,
        ALICE,
        MdsRequest::Chmod {
            path: "/w/d/g".into(),
            mode: 0o644,
        },
        T0 + 30,
    );
    assert_eq!(stat(&m, "/w/f").0.mode, 0o644);

    // Removing one name removes only the name: nothing for the client to delete.
    assert_eq!(ok(&m, ALICE, unlink("/w/f"), T0 + 40), MdsResponse::Ok);
    assert_eq!(
        refused(
            &m,
            ADMIN_UID,
            MdsRequest::StatFull {
                path: "/w/f".into()
            },
            T0 + 41
        ),
        ErrorCode::NoSuchFile
    );
    let (g, more) = stat(&m, "/w/d/g");
    assert_eq!((g.id, more.nlink, more.ctime), (f.id, 1, T0 + 40));
    // Bob may read it by the name left, as the inode says.
    ok(
        &m,
        BOB,
        MdsRequest::Open {
            path: "/w/d/g".into(),
            access: Access::Read,
            create: None,
        },
        T0 + 45,
    );
    // The last name goes with the inode: the answer lets the remover delete the objects.
    match ok(&m, ALICE, unlink("/w/d/g"), T0 + 50) {
        MdsResponse::Opened { stat, .. } => assert_eq!(stat.id, f.id),
        other => panic!("the last name's removal answers a capability: {other:?}"),
    }
    assert!((&store).inode(f.id).unwrap().is_none(), "the inode is gone");
}

#[test]
fn links_are_refused_where_link_2_refuses_them() {
    let store = MemStore::default();
    let m = setup(&store);
    // Not of a directory; not over an existing name; not from nothing.
    assert_eq!(
        refused(&m, ALICE, link("/w/d", "/w/e"), T0 + 20),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        refused(&m, ALICE, link("/w/f", "/w/d"), T0 + 20),
        ErrorCode::AlreadyExists
    );
    assert_eq!(
        refused(&m, ALICE, link("/w/none", "/w/e"), T0 + 20),
        ErrorCode::NoSuchFile
    );
    // Bob may not write in alice's directory /w/d.
    ok(
        &m,
        ALICE,
        MdsRequest::Chmod {
            path: "/w/f".into(),
            mode: 0o666,
        },
        T0 + 21,
    );
    assert_eq!(
        refused(&m, BOB, link("/w/f", "/w/d/mine"), T0 + 22),
        ErrorCode::PermissionDenied
    );
    // protected_hardlinks: bob, who may only read alice's file, may not give it a name
    // of his (it would keep her file alive after she removed it).
    ok(
        &m,
        ALICE,
        MdsRequest::Chmod {
            path: "/w/f".into(),
            mode: 0o644,
        },
        T0 + 23,
    );
    assert_eq!(
        refused(&m, BOB, link("/w/f", "/w/bobs"), T0 + 24),
        ErrorCode::PermissionDenied
    );
    assert!(matches!(
        call(&m, BOB, MdsRequest::Stat { path: "/w/bobs".into() }, T0 + 25),
        Err(e) if e.code == ErrorCode::NoSuchFile
    ));
    // ...but may when he may read and write it, as Linux allows.
    ok(
        &m,
        ALICE,
        MdsRequest::Chmod {
            path: "/w/f".into(),
            mode: 0o666,
        },
        T0 + 26,
    );
    ok(&m, BOB, link("/w/f", "/w/bobs"), T0 + 27);
    assert_eq!(stat(&m, "/w/bobs").0.owner, "alice", "the inode stays hers");
    // A failed link changed nothing.
    assert_eq!(stat(&m, "/w/f").1.nlink, 2);
}

#[test]
fn renaming_onto_another_name_of_the_same_inode_does_nothing() {
    let store = MemStore::default();
    let m = setup(&store);
    ok(&m, ALICE, link("/w/f", "/w/g"), T0 + 20);
    ok(
        &m,
        ALICE,
        MdsRequest::Rename {
            from: "/w/f".into(),
            to: "/w/g".into(),
        },
        T0 + 30,
    );
    // rename(2): both names stay.
    assert_eq!(stat(&m, "/w/f").1.nlink, 2);
    assert_eq!(stat(&m, "/w/g").1.nlink, 2);
}

#[test]
fn the_change_time_follows_every_change_and_the_access_time_is_settable() {
    let store = MemStore::default();
    let m = setup(&store);
    let (f, more) = stat(&m, "/w/f");
    assert_eq!(
        (f.mtime, more.atime, more.ctime),
        (T0 + 10, T0 + 10, T0 + 10)
    );
    let times = |p: &str| {
        let (s, more) = stat(&m, p);
        (s.mtime, more.atime, more.ctime)
    };
    let chmod = |mode| MdsRequest::Chmod {
        path: "/w/f".into(),
        mode,
    };
    ok(&m, ALICE, chmod(0o660), T0 + 20);
    assert_eq!(
        times("/w/f"),
        (T0 + 10, T0 + 10, T0 + 20),
        "chmod: ctime only"
    );
    ok(
        &m,
        ADMIN_UID,
        MdsRequest::Chown {
            path: "/w/f".into(),
            owner: Some("alice".into()),
            group: None,
        },
        T0 + 30,
    );
    assert_eq!(times("/w/f").2, T0 + 30, "chown moves ctime");
    let set = |atime, mtime| MdsRequest::SetTimes {
        path: "/w/f".into(),
        atime,
        mtime,
    };
    ok(&m, ALICE, set(Some(SetTime::At(5_000)), None), T0 + 40);
    assert_eq!(times("/w/f"), (T0 + 10, 5_000, T0 + 40));
    ok(
        &m,
        ALICE,
        set(Some(SetTime::At(6_000)), Some(SetTime::At(7_000))),
        T0 + 50,
    );
    assert_eq!(times("/w/f"), (7_000, 6_000, T0 + 50));
    // Bob may write it as anyone may, but set no time other than now.
    ok(&m, ALICE, chmod(0o666), T0 + 55);
    assert_eq!(
        refused(&m, BOB, set(Some(SetTime::At(1)), None), T0 + 60),
        ErrorCode::PermissionDenied,
        "an access time other than now is the owner's to set"
    );
    assert_eq!(
        times("/w/f"),
        (7_000, 6_000, T0 + 55),
        "a refusal changed nothing"
    );
    ok(
        &m,
        BOB,
        set(Some(SetTime::Now), Some(SetTime::Now)),
        T0 + 70,
    );
    assert_eq!(times("/w/f"), (T0 + 70, T0 + 70, T0 + 70));
    ok(&m, ALICE, chmod(0o600), T0 + 75);
    assert_eq!(
        refused(&m, BOB, set(Some(SetTime::Now), None), T0 + 80),
        ErrorCode::PermissionDenied,
        "now needs write permission"
    );
    // A rename moves the inode's ctime and keeps its mtime; the directory's both move.
    ok(
        &m,
        ALICE,
        MdsRequest::Rename {
            from: "/w/f".into(),
            to: "/w/d/f".into(),
        },
        T0 + 90,
    );
    assert_eq!(times("/w/d/f"), (T0 + 70, T0 + 70, T0 + 90));
    let (_, dir_more) = stat(&m, "/w/d");
    assert_eq!(
        (stat(&m, "/w/d").0.mtime, dir_more.ctime),
        (T0 + 90, T0 + 90)
    );
    // A write (its size record) moves mtime and ctime.
    let id = stat(&m, "/w/d/f").0.id;
    ok(
        &m,
        ALICE,
        MdsRequest::SetSize {
            path: "/w/d/f".into(),
            file: id,
            size: 3,
        },
        T0 + 100,
    );
    assert_eq!(times("/w/d/f"), (T0 + 100, T0 + 70, T0 + 100));
}

/// chmod/12 of pjdfstest: a write by a non-owner clears setuid and setgid, which the
/// kernel asks for as a chmod by the writer. A writer may clear them and nothing else.
#[test]
fn a_writer_may_clear_setuid_and_setgid_and_nothing_else() {
    let store = MemStore::default();
    let m = setup(&store);
    let chmod = |mode| MdsRequest::Chmod {
        path: "/w/f".into(),
        mode,
    };
    let mode = || stat(&m, "/w/f").0.mode & 0o7777;
    ok(&m, ALICE, chmod(0o6666), T0 + 20);
    // Bob may write it: he may clear the bits, one or both...
    ok(&m, BOB, chmod(0o2666), T0 + 30);
    assert_eq!(mode(), 0o2666);
    // ...but not set one, or change any other bit while at it.
    for (wanted, why) in [
        (0o6666, "setting setuid"),
        (0o0644, "clearing write bits"),
        (0o0667, "adding execute"),
    ] {
        assert_eq!(
            refused(&m, BOB, chmod(wanted), T0 + 40),
            ErrorCode::PermissionDenied,
            "{why}"
        );
    }
    ok(&m, BOB, chmod(0o0666), T0 + 50);
    assert_eq!(mode(), 0o0666);
    // A user who may not write the file may not clear them either.
    ok(&m, ALICE, chmod(0o6644), T0 + 60);
    assert_eq!(
        refused(&m, BOB, chmod(0o0644), T0 + 70),
        ErrorCode::PermissionDenied
    );
    assert_eq!(mode(), 0o6644);
}

/// mknod/11 of pjdfstest: a device node shows the number it was made with.
#[test]
fn a_device_node_shows_its_number() {
    let store = MemStore::default();
    let m = setup(&store);
    let rdev = (4 << 8) | 7;
    ok(
        &m,
        ADMIN_UID,
        MdsRequest::Mknod {
            path: "/w/tty".into(),
            mode: maat_proto::msg::S_IFCHR | 0o600,
            rdev,
        },
        T0 + 20,
    );
    assert_eq!(stat(&m, "/w/tty").1.rdev, rdev);
    assert_eq!(stat(&m, "/w/f").1.rdev, 0);
}

/// open(2) with O_CREAT | O_EXCL in one step (issue 44): the client asked whether the
/// name existed, then created, so two creators could both succeed (lock files).
#[test]
fn an_exclusive_create_makes_the_file_or_refuses() {
    let store = MemStore::default();
    let m = setup(&store);
    let excl = |path: &str, access| MdsRequest::OpenExclusive {
        path: path.into(),
        access,
        mode: 0o644,
        sealed: false,
    };
    match ok(&m, BOB, excl("/w/lock", Access::ReadWrite), T0 + 20) {
        MdsResponse::Opened { stat, .. } => assert_eq!(stat.owner, "bob"),
        other => panic!("{other:?}"),
    }
    for who in [BOB, ALICE] {
        assert_eq!(
            refused(&m, who, excl("/w/lock", Access::ReadWrite), T0 + 30),
            ErrorCode::AlreadyExists
        );
    }
    assert_eq!(
        refused(&m, ALICE, excl("/w/f", Access::Read), T0 + 30),
        ErrorCode::AlreadyExists,
        "an existing file, whoever made it"
    );
    // Created encrypted only for a read-write open; and where the user may create.
    let sealed_read = MdsRequest::OpenExclusive {
        path: "/w/s".into(),
        access: Access::Read,
        mode: 0o644,
        sealed: true,
    };
    assert_eq!(
        refused(&m, BOB, sealed_read, T0 + 40),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        refused(&m, BOB, excl("/w/d/x", Access::ReadWrite), T0 + 40),
        ErrorCode::PermissionDenied
    );
}

/// `SetAttr` (a mount's setattr in one request): every change under its own rule, all
/// or none, answering the attributes after.
#[test]
fn set_attr_changes_all_or_nothing_and_answers_the_attributes() {
    let store = MemStore::default();
    let m = setup(&store);
    let set = |mode, owner: Option<&str>, mtime| MdsRequest::SetAttr {
        path: "/w/f".into(),
        mode,
        owner: owner.map(str::to_string),
        group: None,
        atime: None,
        mtime,
    };
    match ok(
        &m,
        ALICE,
        set(Some(0o600), None, Some(SetTime::At(9_000))),
        T0 + 20,
    ) {
        MdsResponse::StatFull { stat, more } => {
            assert_eq!((stat.mode, stat.mtime, more.ctime), (0o600, 9_000, T0 + 20));
        }
        other => panic!("{other:?}"),
    }
    // Alice may set her mode but not give the file away: nothing changes.
    assert_eq!(
        refused(&m, ALICE, set(Some(0o644), Some("bob"), None), T0 + 30),
        ErrorCode::PermissionDenied
    );
    let (f, more) = stat(&m, "/w/f");
    assert_eq!(
        (f.mode, f.owner.as_str(), more.ctime),
        (0o600, "alice", T0 + 20)
    );
    // Bob, no owner: neither a mode nor a time of his choosing.
    for r in [
        set(Some(0o777), None, None),
        set(None, None, Some(SetTime::At(1))),
    ] {
        assert_eq!(refused(&m, BOB, r, T0 + 40), ErrorCode::PermissionDenied);
    }
    // The administrator may do all at once.
    ok(
        &m,
        ADMIN_UID,
        set(Some(0o640), Some("bob"), Some(SetTime::Now)),
        T0 + 50,
    );
    let (f, more) = stat(&m, "/w/f");
    assert_eq!(
        (f.mode, f.owner.as_str(), f.mtime, more.ctime),
        (0o640, "bob", T0 + 50, T0 + 50)
    );
}

/// rename(2) over a file in one commit (`RenameReplace`): the mount removed the target
/// first, so a crash in between lost it. The replaced file's last name takes it (the
/// answer lets the caller delete its objects); a file with other names keeps them.
#[test]
fn rename_replaces_a_file_in_one_step() {
    let store = MemStore::default();
    let m = setup(&store);
    let create = |uid, path: &str| {
        ok(
            &m,
            uid,
            MdsRequest::Open {
                path: path.into(),
                access: Access::ReadWrite,
                create: Some(0o644),
            },
            T0 + 15,
        )
    };
    let replace = |from: &str, to: &str| MdsRequest::RenameReplace {
        from: from.into(),
        to: to.into(),
    };
    create(ALICE, "/w/new");
    let (old, _) = stat(&m, "/w/f");
    let (new, _) = stat(&m, "/w/new");
    // Plain Rename still refuses, for clients that remove first.
    assert_eq!(
        refused(
            &m,
            ALICE,
            MdsRequest::Rename {
                from: "/w/new".into(),
                to: "/w/f".into()
            },
            T0 + 20
        ),
        ErrorCode::AlreadyExists
    );
    match ok(&m, ALICE, replace("/w/new", "/w/f"), T0 + 30) {
        MdsResponse::Opened { stat, .. } => assert_eq!(stat.id, old.id, "the replaced file"),
        other => panic!("{other:?}"),
    }
    assert_eq!(stat(&m, "/w/f").0.id, new.id);
    assert!(
        (&store).inode(old.id).unwrap().is_none(),
        "the old inode is gone"
    );
    // A target with another name keeps it.
    create(ALICE, "/w/a");
    ok(&m, ALICE, link("/w/f", "/w/d/keep"), T0 + 40);
    assert_eq!(
        ok(&m, ALICE, replace("/w/a", "/w/f"), T0 + 50),
        MdsResponse::Ok
    );
    assert_eq!(stat(&m, "/w/d/keep").0.id, new.id);
    assert_eq!(stat(&m, "/w/d/keep").1.nlink, 1);
    // The sticky bit protects the target too: bob may not replace alice's file.
    ok(
        &m,
        ADMIN_UID,
        MdsRequest::Chmod {
            path: "/w".into(),
            mode: 0o1777,
        },
        T0 + 60,
    );
    create(BOB, "/w/bobs");
    assert_eq!(
        refused(&m, BOB, replace("/w/bobs", "/w/f"), T0 + 70),
        ErrorCode::PermissionDenied
    );
    assert_eq!(stat(&m, "/w/f").0.owner, "alice", "nothing changed");
    assert_eq!(stat(&m, "/w/bobs").0.owner, "bob");
}

/// rename/24 of pjdfstest: a directory's link count is 2 and one per subdirectory,
/// through mkdir (-p), rmdir and renames; a store from before the counts were kept has
/// them counted at the MDS's start.
#[test]
fn a_directory_counts_its_subdirectories_in_its_links() {
    let store = MemStore::default();
    let m = setup(&store);
    let links = |m: &M, p: &str| stat(m, p).1.nlink;
    let mkdir = |path: &str, parents| MdsRequest::Mkdir {
        path: path.into(),
        mode: 0o755,
        parents,
        partition: None,
    };
    let rename = |from: &str, to: &str| MdsRequest::Rename {
        from: from.into(),
        to: to.into(),
    };
    // /w holds d (and the file f).
    assert_eq!(links(&m, "/w"), 3);
    assert_eq!(links(&m, "/w/d"), 2);
    ok(&m, ALICE, mkdir("/w/d/a/b/c", true), T0 + 20);
    let three = |m: &M, [a, b, c]: [&str; 3]| (links(m, a), links(m, b), links(m, c));
    assert_eq!(three(&m, ["/w/d", "/w/d/a", "/w/d/a/b"]), (3, 3, 3));
    assert_eq!(links(&m, "/w/d/a/b/c"), 2);
    ok(&m, ALICE, mkdir("/w/e", false), T0 + 30);
    assert_eq!(links(&m, "/w"), 4);
    // Moving a directory to another parent moves one link; within one, none.
    ok(&m, ALICE, rename("/w/d/a/b/c", "/w/e/c"), T0 + 40);
    assert_eq!((links(&m, "/w/d/a/b"), links(&m, "/w/e")), (2, 3));
    ok(&m, ALICE, rename("/w/e/c", "/w/e/c2"), T0 + 50);
    assert_eq!(links(&m, "/w/e"), 3);
    // Over an empty directory: the replaced one's link goes.
    ok(&m, ALICE, mkdir("/w/e/empty", false), T0 + 60);
    assert_eq!(links(&m, "/w/e"), 4);
    ok(&m, ALICE, rename("/w/e/c2", "/w/e/empty"), T0 + 70);
    assert_eq!(links(&m, "/w/e"), 3);
    ok(&m, ALICE, rename("/w/d/a", "/w/e/empty"), T0 + 80);
    assert_eq!((links(&m, "/w/d"), links(&m, "/w/e")), (2, 3));
    ok(
        &m,
        ALICE,
        MdsRequest::Rmdir {
            path: "/w/e/empty/b".into(),
        },
        T0 + 90,
    );
    assert_eq!(links(&m, "/w/e/empty"), 2);
    assert_eq!(links(&m, "/"), 4, "/ holds home and w");

    // A store from before: every directory at 1, no marker. The next start counts.
    let mut batch = maat_mds::Batch::default();
    for id in 1..40 {
        if let Some(mut i) = (&store).inode(id).unwrap() {
            if i.is_dir {
                i.nlink = 1;
                batch.push(maat_mds::Op::PutInode(i));
            }
        }
    }
    batch.push(maat_mds::Op::DeleteMeta("directory_links".into()));
    (&store).commit(batch).unwrap();
    let again = mds(&store);
    assert_eq!(three(&again, ["/", "/w", "/w/e"]), (4, 4, 3));
    assert_eq!(links(&again, "/w/e/empty"), 2);
}

/// Inode numbers come from blocks the MDS takes from the store's counter (issue 42:
/// several instances over one database must never hand out one id twice): an MDS opened
/// again on the same store never hands out an id its predecessor had, used or not.
#[test]
fn inode_numbers_are_never_handed_out_twice_across_a_restart() {
    let store = MemStore::default();
    let mkdir = |path: String| MdsRequest::Mkdir {
        path,
        mode: 0o755,
        parents: false,
        partition: None,
    };
    let mut seen = std::collections::BTreeSet::new();
    for run in 0..3 {
        let m = mds(&store);
        // More than one block in a run, and a part of one left over at its end.
        for i in 0..(maat_mds::INODE_IDS_PER_ALLOCATION + 5) {
            let path = format!("/r{run}-{i}");
            ok(&m, ADMIN_UID, mkdir(path.clone()), T0);
            let id = stat(&m, &path).0.id;
            assert!(seen.insert(id), "inode {id} handed out twice (run {run})");
        }
    }
    // The counter in the store is past every id handed out.
    let stored = (&store).meta("next_inode").unwrap().unwrap();
    let next = u64::from_be_bytes(stored.try_into().unwrap());
    assert!(
        seen.iter().all(|id| *id < next),
        "counter {next} behind {seen:?}"
    );
}

/// Issue 42: the leader lease as a store held by one process keeps it (in `meta`, timed
/// by the caller's clock): granted, renewed under its token, refused to another until
/// it runs out, then passed on under a greater token.
#[test]
fn the_default_lease_passes_on_only_when_its_time_ran_out() {
    let store = MemStore::default();
    let s = &store;
    let lease = |who: &str, now: u64| s.lease("leader", who, 100, now).unwrap();
    let a = lease("a", 1_000);
    assert!(a.granted && a.token == 1, "{a:?}");
    assert!(lease("a", 1_050).granted);
    let b = lease("b", 1_100);
    assert!(!b.granted && b.holder == "a" && b.token == 1, "{b:?}");
    // a renewed at 1,050: its grant lasts until 1,150.
    let b = lease("b", 1_151);
    assert!(b.granted && b.token == 2, "{b:?}");
    let a = lease("a", 1_152);
    assert!(!a.granted && a.holder == "b" && a.token == 2, "{a:?}");
}
