//! The namespace at the MDS: who may remove or rename what (the sticky bit, issue 40),
//! which names may be made, and the modes new entries get.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{add_users, call, mds, MemStore, T0};

use maat_mds::ADMIN_UID;
use maat_proto::msg::{Access, ErrorCode, MdsRequest, MdsResponse};

const ALICE: u64 = 100;
const BOB: u64 = 101;

fn create(m: &maat_mds::Mds<&MemStore>, uid: u64, path: &str, mode: u16) {
    call(
        m,
        uid,
        MdsRequest::Open {
            path: path.into(),
            access: Access::ReadWrite,
            create: Some(mode),
        },
        T0 + 10,
    )
    .unwrap();
}

fn admin_mkdir(m: &maat_mds::Mds<&MemStore>, path: &str, mode: u16) {
    call(
        m,
        ADMIN_UID,
        MdsRequest::Mkdir {
            path: path.into(),
            mode,
            parents: false,
            partition: None,
        },
        T0 + 5,
    )
    .unwrap();
}

fn mode_of(m: &maat_mds::Mds<&MemStore>, path: &str) -> u16 {
    match call(
        m,
        ADMIN_UID,
        MdsRequest::Stat { path: path.into() },
        T0 + 20,
    )
    .unwrap()
    {
        MdsResponse::Stat(s) => s.mode,
        other => panic!("{other:?}"),
    }
}

/// Issue 40, item 7: in a shared 0777 directory anyone deleted anyone's files, and
/// `chmod 1777` lost its sticky bit. The bit is kept, and in a sticky directory only the
/// file's owner, the directory's owner or the administrator removes or renames a file.
#[test]
fn a_sticky_directory_lets_only_owners_remove_or_rename() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    let admin = |r| call(&m, ADMIN_UID, r, T0 + 5);
    admin(MdsRequest::Mkdir {
        path: "/tmp".into(),
        mode: 0o777,
        parents: false,
        partition: None,
    })
    .unwrap();
    admin(MdsRequest::Chmod {
        path: "/tmp".into(),
        mode: 0o1777,
    })
    .unwrap();
    assert_eq!(mode_of(&m, "/tmp"), 0o1777);
    for name in ["a", "b", "c"] {
        create(&m, ALICE, &format!("/tmp/{name}"), 0o666);
    }
    let refused = |r: Result<MdsResponse, maat_proto::msg::WireError>| {
        let e = r.unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
        assert!(e.detail.contains("sticky"), "{e:?}");
    };
    refused(call(
        &m,
        BOB,
        MdsRequest::Unlink {
            path: "/tmp/a".into(),
        },
        T0 + 30,
    ));
    refused(call(
        &m,
        BOB,
        MdsRequest::Rename {
            from: "/tmp/a".into(),
            to: "/tmp/mine".into(),
        },
        T0 + 30,
    ));
    // Bob's own file, alice's by alice, anyone's by the administrator.
    create(&m, BOB, "/tmp/bobs", 0o644);
    call(
        &m,
        BOB,
        MdsRequest::Unlink {
            path: "/tmp/bobs".into(),
        },
        T0 + 40,
    )
    .unwrap();
    call(
        &m,
        ALICE,
        MdsRequest::Unlink {
            path: "/tmp/a".into(),
        },
        T0 + 40,
    )
    .unwrap();
    call(
        &m,
        ADMIN_UID,
        MdsRequest::Rename {
            from: "/tmp/b".into(),
            to: "/tmp/moved".into(),
        },
        T0 + 40,
    )
    .unwrap();
    // Without the bit, the directory's write permission is enough, as before.
    admin(MdsRequest::Chmod {
        path: "/tmp".into(),
        mode: 0o777,
    })
    .unwrap();
    call(
        &m,
        BOB,
        MdsRequest::Unlink {
            path: "/tmp/c".into(),
        },
        T0 + 50,
    )
    .unwrap();
}

/// Issue 40, item 6: names held newlines and terminal escapes (fake `ls` entries,
/// terminal titles set by another user). No entry, user or group is made with a control
/// character in its name; one that exists (from before) can still be removed.
#[test]
fn names_with_control_characters_are_not_made() {
    let store = MemStore::default();
    add_users(&store, &["alice"]);
    let m = mds(&store);
    call(
        &m,
        ADMIN_UID,
        MdsRequest::Mkdir {
            path: "/w".into(),
            mode: 0o777,
            parents: false,
            partition: None,
        },
        T0 + 1,
    )
    .unwrap();
    for bad in [
        "a\nb",
        "x\u{1b}]0;owned\u{7}",
        "tab\there",
        "del\u{7f}",
        "c1\u{9b}2J",
    ] {
        let path = format!("/{bad}");
        let refused = |r: Result<MdsResponse, maat_proto::msg::WireError>, what: &str| {
            let e = r.unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{what} {bad:?}: {e:?}");
        };
        refused(
            call(
                &m,
                ADMIN_UID,
                MdsRequest::Mkdir {
                    path: path.clone(),
                    mode: 0o755,
                    parents: false,
                    partition: None,
                },
                T0 + 5,
            ),
            "mkdir",
        );
        refused(
            call(
                &m,
                ALICE,
                MdsRequest::Open {
                    path: format!("/w/{bad}"),
                    access: Access::ReadWrite,
                    create: Some(0o644),
                },
                T0 + 5,
            ),
            "create",
        );
        create(&m, ALICE, "/w/plain", 0o644);
        refused(
            call(
                &m,
                ALICE,
                MdsRequest::Rename {
                    from: "/w/plain".into(),
                    to: format!("/w/{bad}"),
                },
                T0 + 6,
            ),
            "rename",
        );
        call(
            &m,
            ALICE,
            MdsRequest::Unlink {
                path: "/w/plain".into(),
            },
            T0 + 7,
        )
        .unwrap();
        refused(
            call(
                &m,
                ADMIN_UID,
                MdsRequest::GroupAdd { name: bad.into() },
                T0 + 8,
            ),
            "group",
        );
    }
    // An entry with such a name made before the rule (straight in the store) is reached,
    // renamed and removed.
    let home = match call(
        &m,
        ADMIN_UID,
        MdsRequest::Stat { path: "/w".into() },
        T0 + 9,
    )
    .unwrap()
    {
        MdsResponse::Stat(s) => s.id,
        other => panic!("{other:?}"),
    };
    create(&m, ALICE, "/w/old", 0o644);
    let id = match call(
        &m,
        ALICE,
        MdsRequest::Stat {
            path: "/w/old".into(),
        },
        T0 + 9,
    )
    .unwrap()
    {
        MdsResponse::Stat(s) => s.id,
        other => panic!("{other:?}"),
    };
    {
        use maat_mds::store::{Batch, MetaStore, Op};
        let mut b = Batch::default();
        b.push(Op::DeleteEntry {
            parent: home,
            name: "old".into(),
        });
        b.push(Op::PutEntry {
            parent: home,
            name: "bad\nname".into(),
            child: id,
        });
        (&store).commit(b).unwrap();
    }
    call(
        &m,
        ALICE,
        MdsRequest::Rename {
            from: "/w/bad\nname".into(),
            to: "/w/fixed".into(),
        },
        T0 + 10,
    )
    .unwrap();
    call(
        &m,
        ALICE,
        MdsRequest::Unlink {
            path: "/w/fixed".into(),
        },
        T0 + 11,
    )
    .unwrap();
}

/// Issue 40, item 4: new files were 0644 and homes 0755, so every user could read (and
/// get KDS keys for) every other user's files. The MDS applies each user's umask (077
/// for a new user unless the operator chose otherwise) to every mode a create or mkdir
/// asks for, whatever the client; each user reads and changes their own.
#[test]
fn each_users_umask_clears_bits_of_everything_they_create() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    let umask = |uid, set| match call(&m, uid, MdsRequest::Umask { set }, T0 + 2).unwrap() {
        MdsResponse::Umask(u) => u,
        other => panic!("{other:?}"),
    };
    // The suite's users start with 0 (`add_users`); alice takes the shipped default.
    assert_eq!(umask(ALICE, None), 0);
    assert_eq!(umask(ALICE, Some(0o077)), 0o077);
    assert_eq!(umask(ALICE, None), 0o077);
    call(
        &m,
        ADMIN_UID,
        MdsRequest::Mkdir {
            path: "/w".into(),
            mode: 0o777,
            parents: false,
            partition: None,
        },
        T0 + 3,
    )
    .unwrap();
    // The administrator's umask is its own (0 here).
    assert_eq!(mode_of(&m, "/w"), 0o777);
    create(&m, ALICE, "/w/a", 0o644);
    assert_eq!(mode_of(&m, "/w/a"), 0o600);
    call(
        &m,
        ALICE,
        MdsRequest::Mkdir {
            path: "/w/d".into(),
            mode: 0o1775,
            parents: false,
            partition: None,
        },
        T0 + 4,
    )
    .unwrap();
    assert_eq!(
        mode_of(&m, "/w/d"),
        0o1700,
        "the sticky bit is not a permission bit"
    );
    // Bob, umask 0, gets what he asks for; chmod is never masked.
    create(&m, BOB, "/w/b", 0o644);
    assert_eq!(mode_of(&m, "/w/b"), 0o644);
    call(
        &m,
        ALICE,
        MdsRequest::Chmod {
            path: "/w/a".into(),
            mode: 0o644,
        },
        T0 + 5,
    )
    .unwrap();
    assert_eq!(mode_of(&m, "/w/a"), 0o644);
    // And bob cannot read alice's private file while he can read her shared one.
    create(&m, ALICE, "/w/private", 0o644);
    let e = call(
        &m,
        BOB,
        MdsRequest::Open {
            path: "/w/private".into(),
            access: Access::Read,
            create: None,
        },
        T0 + 6,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    call(
        &m,
        BOB,
        MdsRequest::Open {
            path: "/w/a".into(),
            access: Access::Read,
            create: None,
        },
        T0 + 6,
    )
    .unwrap();
    // A umask is permission bits only.
    let e = call(&m, ALICE, MdsRequest::Umask { set: Some(0o1000) }, T0 + 7).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(umask(ALICE, Some(0o022)), 0o022);
    create(&m, ALICE, "/w/shared", 0o644);
    assert_eq!(mode_of(&m, "/w/shared"), 0o644);
}

/// Issue 44: rename(2) lets a directory replace an empty directory (in one commit),
/// refuses a non-empty one (ENOTEMPTY), and a directory and a file never replace each
/// other (ENOTDIR, EISDIR); a file over a file stays refused (its objects would stay).
#[test]
fn a_directory_replaces_an_empty_directory_and_nothing_else() {
    let store = MemStore::default();
    add_users(&store, &["alice"]);
    let m = mds(&store);
    admin_mkdir(&m, "/w", 0o777);
    let as_alice = |r| call(&m, ALICE, r, T0 + 30);
    let mkdir = |path: &str| MdsRequest::Mkdir {
        path: path.into(),
        mode: 0o755,
        parents: true,
        partition: None,
    };
    let rename = |from: &str, to: &str| MdsRequest::Rename {
        from: from.into(),
        to: to.into(),
    };
    let home = "/w";
    for d in ["src/inner", "empty", "full/x"] {
        as_alice(mkdir(&format!("{home}/{d}"))).unwrap();
    }
    create(&m, ALICE, &format!("{home}/file"), 0o644);
    create(&m, ALICE, &format!("{home}/other"), 0o644);
    let code = |r: Result<MdsResponse, maat_proto::msg::WireError>| r.unwrap_err().code;
    let at = |p: &str| format!("{home}/{p}");
    assert_eq!(
        code(as_alice(rename(&at("src"), &at("full")))),
        ErrorCode::NotEmpty
    );
    assert_eq!(
        code(as_alice(rename(&at("src"), &at("file")))),
        ErrorCode::NotADirectory
    );
    assert_eq!(
        code(as_alice(rename(&at("file"), &at("empty")))),
        ErrorCode::IsADirectory
    );
    assert_eq!(
        code(as_alice(rename(&at("file"), &at("other")))),
        ErrorCode::AlreadyExists
    );
    as_alice(rename(&at("src"), &at("empty"))).unwrap();
    // The moved directory, with its entry, is at the new name; the old name is gone.
    let entries = |p: &str| match as_alice(MdsRequest::Readdir { path: p.into() }) {
        Ok(MdsResponse::Entries(e)) => e.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(entries(&at("empty")), vec!["inner".to_string()]);
    let mut names = entries(home);
    names.sort();
    assert_eq!(names, vec!["empty", "file", "full", "other"]);
}

/// Issue 44: a modification time set by its owner (utimensat, `cp -a`, `rsync -a`), to now
/// by a writer too; a directory's time follows its entries; a rename moves no time but
/// the directories'.
#[test]
fn times_are_set_by_their_owner_and_directories_follow_their_entries() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    admin_mkdir(&m, "/w", 0o777);
    let mtime = |p: &str| match call(&m, ADMIN_UID, MdsRequest::Stat { path: p.into() }, T0) {
        Ok(MdsResponse::Stat(s)) => s.mtime,
        other => panic!("{other:?}"),
    };
    let set = |uid, path: &str, mtime, at| {
        call(
            &m,
            uid,
            MdsRequest::SetMtime {
                path: path.into(),
                mtime,
            },
            at,
        )
    };
    create(&m, ALICE, "/w/f", 0o666);
    assert_eq!(mtime("/w"), T0 + 10, "the directory took the create's time");
    set(ALICE, "/w/f", Some(1_000), T0 + 20).unwrap();
    assert_eq!(mtime("/w/f"), 1_000);
    // Bob may write the file, so he may set now, but no other time.
    assert_eq!(
        set(BOB, "/w/f", Some(2_000), T0 + 30).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    set(BOB, "/w/f", None, T0 + 40).unwrap();
    assert_eq!(mtime("/w/f"), T0 + 40);
    create(&m, ALICE, "/w/private", 0o600);
    assert_eq!(
        set(BOB, "/w/private", None, T0 + 50).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    // A rename keeps the file's time and moves the directories'.
    set(ALICE, "/w/f", Some(3_000), T0 + 60).unwrap();
    call(
        &m,
        ALICE,
        MdsRequest::Rename {
            from: "/w/f".into(),
            to: "/w/g".into(),
        },
        T0 + 70,
    )
    .unwrap();
    assert_eq!(mtime("/w/g"), 3_000);
    assert_eq!(mtime("/w"), T0 + 70);
    call(
        &m,
        ALICE,
        MdsRequest::Unlink {
            path: "/w/g".into(),
        },
        T0 + 80,
    )
    .unwrap();
    assert_eq!(mtime("/w"), T0 + 80);
}

/// Issue 44: symbolic links are entries that name a path; the MDS stores, lists and
/// removes them, never follows or opens one, and makes them under a file's rules.
#[test]
fn symbolic_links_are_made_read_and_removed_but_never_opened() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    admin_mkdir(&m, "/w", 0o755);
    call(
        &m,
        ADMIN_UID,
        MdsRequest::Chown {
            path: "/w".into(),
            owner: Some("alice".into()),
            group: None,
        },
        T0 + 5,
    )
    .unwrap();
    create(&m, ALICE, "/w/file", 0o644);
    let file_mode = mode_of(&m, "/w/file");
    let link = |uid, path: &str, target: &str| {
        call(
            &m,
            uid,
            MdsRequest::Symlink {
                path: path.into(),
                target: target.into(),
            },
            T0 + 40,
        )
    };
    match link(ALICE, "/w/l", "file").unwrap() {
        MdsResponse::Stat(s) => {
            assert!(s.is_symlink() && !s.is_dir, "{s:?}");
            assert_eq!((s.mode, s.size), (maat_proto::msg::S_IFLNK | 0o777, 4));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        call(
            &m,
            BOB,
            MdsRequest::Readlink {
                path: "/w/l".into()
            },
            T0 + 50
        )
        .unwrap(),
        MdsResponse::Link("file".into())
    );
    let code = |r: Result<MdsResponse, maat_proto::msg::WireError>| r.unwrap_err().code;
    // Never opened: the client follows it.
    assert_eq!(
        code(call(
            &m,
            ALICE,
            MdsRequest::Open {
                path: "/w/l".into(),
                access: Access::Read,
                create: None
            },
            T0 + 50
        )),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(call(
            &m,
            ALICE,
            MdsRequest::Readlink {
                path: "/w/file".into()
            },
            T0 + 50
        )),
        ErrorCode::InvalidArgument
    );
    assert_eq!(code(link(ALICE, "/w/l", "x")), ErrorCode::AlreadyExists);
    assert_eq!(code(link(ALICE, "/w/e", "")), ErrorCode::InvalidArgument);
    assert_eq!(
        code(link(ALICE, "/w/z", "a\0b")),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(link(
            ALICE,
            "/w/long",
            &"x".repeat(maat_proto::msg::SYMLINK_TARGET_BYTES_MAX + 1)
        )),
        ErrorCode::InvalidArgument
    );
    // Bob may not write alice's 0755 directory: no link of his there.
    assert_eq!(code(link(BOB, "/w/b", "file")), ErrorCode::PermissionDenied);
    call(
        &m,
        ALICE,
        MdsRequest::Unlink {
            path: "/w/l".into(),
        },
        T0 + 60,
    )
    .unwrap();
    assert_eq!(
        code(call(
            &m,
            ALICE,
            MdsRequest::Readlink {
                path: "/w/l".into()
            },
            T0 + 70
        )),
        ErrorCode::NoSuchFile
    );
    // The file it pointed to is untouched.
    assert_eq!(mode_of(&m, "/w/file"), file_mode);
}

/// Issue 44: FIFOs and sockets' names are entries of their own type, holding no data at
/// the MDS (each machine's kernel serves them); device nodes are the administrator's.
#[test]
fn fifos_and_sockets_are_entries_and_devices_are_the_administrators() {
    let store = MemStore::default();
    add_users(&store, &["alice"]);
    let m = mds(&store);
    admin_mkdir(&m, "/w", 0o777);
    let mknod = |path: &str, mode| {
        call(
            &m,
            ALICE,
            MdsRequest::Mknod {
                path: path.into(),
                mode,
                rdev: 0,
            },
            T0 + 10,
        )
    };
    use maat_proto::msg::{S_IFIFO, S_IFMT, S_IFSOCK};
    for (path, kind) in [("/w/fifo", S_IFIFO), ("/w/sock", S_IFSOCK)] {
        match mknod(path, kind | 0o640).unwrap() {
            MdsResponse::Stat(s) => {
                assert_eq!(s.mode & S_IFMT, kind, "{s:?}");
                assert_eq!(s.mode & 0o777 & !0o640, 0, "{s:?}");
                assert!(!s.is_symlink() && !s.is_dir && s.size == 0);
            }
            other => panic!("{other:?}"),
        }
        let open = call(
            &m,
            ALICE,
            MdsRequest::Open {
                path: path.into(),
                access: Access::ReadWrite,
                create: None,
            },
            T0 + 20,
        );
        assert_eq!(open.unwrap_err().code, ErrorCode::InvalidArgument);
    }
    assert!(call(
        &m,
        ALICE,
        MdsRequest::Stat {
            path: "/w/fifo".into()
        },
        T0 + 20
    )
    .is_ok_and(|r| matches!(r, MdsResponse::Stat(s) if s.is_fifo())));
    // A plain file by this request: refused; devices: the administrator's only.
    for kind in [0o100000u16, 0] {
        assert_eq!(
            mknod("/w/dev", kind | 0o600).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
    for kind in [maat_proto::msg::S_IFBLK, maat_proto::msg::S_IFCHR] {
        assert_eq!(
            mknod("/w/dev", kind | 0o600).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
    }
    let made = call(
        &m,
        ADMIN_UID,
        MdsRequest::Mknod {
            path: "/w/blk".into(),
            mode: maat_proto::msg::S_IFBLK | 0o600,
            rdev: 0x0102,
        },
        T0 + 10,
    );
    assert!(matches!(made, Ok(MdsResponse::Stat(s)) if s.is_device() == Some(true)));
    assert_eq!(
        mknod("/w/fifo", S_IFIFO | 0o600).unwrap_err().code,
        ErrorCode::AlreadyExists
    );
    call(
        &m,
        ALICE,
        MdsRequest::Unlink {
            path: "/w/fifo".into(),
        },
        T0 + 30,
    )
    .unwrap();
}

/// Issue 44: access(2) gets the decision an open or a write would: per user, the
/// administrator's execute only where some execute bit is set, a mask past 7 refused.
#[test]
fn access_answers_what_an_open_would() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    admin_mkdir(&m, "/w", 0o777);
    create(&m, ALICE, "/w/f", 0o640);
    let access = |uid, mask| {
        call(
            &m,
            uid,
            MdsRequest::Access {
                path: "/w/f".into(),
                mask,
            },
            T0 + 20,
        )
        .map_err(|e| e.code)
    };
    let mode = mode_of(&m, "/w/f");
    assert_eq!(access(ALICE, 6), Ok(MdsResponse::Ok), "mode {mode:o}");
    assert_eq!(access(ALICE, 1), Err(ErrorCode::PermissionDenied));
    assert_eq!(access(BOB, 0), Ok(MdsResponse::Ok));
    for (uid, mask, access_mode) in [
        (BOB, 4, Access::Read),
        (BOB, 6, Access::ReadWrite),
        (ALICE, 6, Access::ReadWrite),
    ] {
        let open = call(
            &m,
            uid,
            MdsRequest::Open {
                path: "/w/f".into(),
                access: access_mode,
                create: None,
            },
            T0 + 20,
        );
        assert_eq!(
            access(uid, mask).is_ok(),
            open.is_ok(),
            "{uid} {mask} {mode:o}"
        );
    }
    assert_eq!(access(ADMIN_UID, 6), Ok(MdsResponse::Ok));
    assert_eq!(access(ADMIN_UID, 1), Err(ErrorCode::PermissionDenied));
    assert_eq!(access(ALICE, 8), Err(ErrorCode::InvalidArgument));
}

/// Issue 41: a partition's copies per object are chosen by the administrator at creation
/// (1 to 7), and every user may ask every partition's count (to place every copy).
#[test]
fn partitions_keep_the_copies_the_administrator_chose_and_anyone_may_ask() {
    let store = MemStore::default();
    let m = mds(&store);
    add_users(&store, &["alice"]);
    let create = |uid: u64, name: &str, replicas: u8| {
        call(
            &m,
            uid,
            MdsRequest::PartitionCreateReplicated {
                name: name.into(),
                protection: maat_proto::protection::Protection::AllData,
                replicas,
            },
            T0 + 10,
        )
    };
    assert!(create(ADMIN_UID, "three", 3).is_ok());
    assert!(create(ADMIN_UID, "seven", 7).is_ok());
    for bad in [0, 8, 255] {
        assert_eq!(
            create(ADMIN_UID, "bad", bad).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad} copies"
        );
    }
    assert_eq!(
        create(ALICE, "mine", 2).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    // The old request makes one copy.
    call(
        &m,
        ADMIN_UID,
        MdsRequest::PartitionCreate {
            name: "one".into(),
            protection: maat_proto::protection::Protection::AllData,
        },
        T0 + 10,
    )
    .unwrap();
    let MdsResponse::Placement(placement) =
        call(&m, ALICE, MdsRequest::Placement, T0 + 20).unwrap()
    else {
        panic!("not Placement")
    };
    let all = placement.partitions;
    let default = all.iter().find(|(n, _)| n == "default").map(|(_, c)| *c);
    // The test MDS makes `default` with one copy (its config says so).
    assert_eq!(default, Some(1));
    for (name, copies) in [("three", 3u8), ("seven", 7), ("one", 1)] {
        assert!(all.contains(&(name.to_string(), copies)), "{name}: {all:?}");
    }
    assert!(!all.iter().any(|(n, _)| n == "bad" || n == "mine"));
}

/// rename(2): moving a directory to another parent rewrites its `..`, so it takes write
/// permission on the directory itself, not only on the two parents (pjdfstest
/// rename/09: bob moved the administrator's directory out of his own sticky directory).
/// Renaming it within its parent does not.
#[test]
fn moving_a_directory_to_another_parent_takes_write_permission_on_it() {
    let store = MemStore::default();
    add_users(&store, &["alice", "bob"]);
    let m = mds(&store);
    for dir in ["/from", "/to"] {
        admin_mkdir(&m, dir, 0o777);
    }
    admin_mkdir(&m, "/from/theirs", 0o755);
    let rename = |uid, from: &str, to: &str| {
        call(
            &m,
            uid,
            MdsRequest::Rename {
                from: from.into(),
                to: to.into(),
            },
            T0 + 30,
        )
    };
    let e = rename(BOB, "/from/theirs", "/to/mine").unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
    assert_eq!(mode_of(&m, "/from/theirs"), 0o755);
    rename(BOB, "/from/theirs", "/from/renamed").unwrap();
    call(
        &m,
        ADMIN_UID,
        MdsRequest::Chmod {
            path: "/from/renamed".into(),
            mode: 0o777,
        },
        T0 + 31,
    )
    .unwrap();
    rename(BOB, "/from/renamed", "/to/mine").unwrap();
    assert_eq!(mode_of(&m, "/to/mine"), 0o777);
}
