//! Small new files stored under reserved ids, then linked (`MdsRequest::Reserve`,
//! `Link`): one signature per 64 puts, the data reads back through other clients, and a
//! put to an existing path goes through an open without leaving an object behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, counter, Cluster};
use maat_proto::capability::{Capability, Files};
use maat_proto::msg::{Access, ErrorCode};
use maat_proto::signed::Unverified;
use std::path::Path;

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let path = e.unwrap().path();
                    if path.is_dir() {
                        files_under(&path)
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn small_new_files_cost_one_signature_per_reservation_and_read_back() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("alice", "alice passphrase", None);
    let admin = cluster.admin_client();
    let alice = cluster.user_client("alice", "alice passphrase");
    let files: Vec<Vec<u8>> = (0..100usize)
        .map(|i| format!("file {i} ").repeat(i + 1).into_bytes())
        .collect();
    // The first put reserves 64 ids (and meets the OSD: a session, which the MDS may
    // sign a ticket for); the next 100 use its other 63 and 37 of one more block.
    alice
        .put(&mut &b"first"[..], 5, "/home/alice/first", &mut |_| {})
        .unwrap();
    let signed = counter(&admin, "mds", "signatures_made");
    let verified = counter(&admin, "osd", "signatures_verified");
    for (i, data) in files.iter().enumerate() {
        let stat = alice
            .put(
                &mut &data[..],
                data.len() as u64,
                &format!("/home/alice/f{i}"),
                &mut |_| {},
            )
            .unwrap();
        assert_eq!(stat.size, data.len() as u64);
    }
    // One more block: one signature, verified once. (Through opens, 100 puts cost 100
    // signatures and 100 verifications.) The MDS also signs its answers to the
    // daemons' revocation polls meanwhile, so its count is a bound; the capabilities
    // alice holds for her files say exactly what was issued.
    assert!(counter(&admin, "mds", "signatures_made") - signed <= 3);
    assert_eq!(counter(&admin, "osd", "signatures_verified") - verified, 1);
    let mut held = std::collections::BTreeMap::new();
    for i in 0..files.len() {
        let opened = alice
            .open(&format!("/home/alice/f{i}"), Access::Read, None)
            .unwrap();
        let cap = Unverified::<Capability>::decode(&opened.capability)
            .unwrap()
            .unverified_body()
            .clone();
        let Files::Range { first, count } = cap.files else {
            panic!("f{i}: {:?}", cap.files)
        };
        assert!(opened.stat.id >= first.0 && opened.stat.id < first.0 + u64::from(count));
        *held.entry(cap.id).or_insert(0) += 1;
    }
    let mut shares: Vec<u32> = held.into_values().collect();
    shares.sort_unstable();
    assert_eq!(shares, [37, 63]);
    // Another client of alice's (no kept opens) reads every file back.
    let again = cluster.user_client("alice", "alice passphrase");
    for (i, data) in files.iter().enumerate() {
        let path = format!("/home/alice/f{i}");
        assert_eq!(again.stat(&path).unwrap().size, data.len() as u64);
        let mut out = Vec::new();
        again.get(&path, &mut out, &mut |_| {}).unwrap();
        assert_eq!(&out, data, "{path}");
    }
}

#[test]
fn a_put_to_an_existing_path_goes_through_an_open_and_leaves_no_object_behind() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("alice", "alice passphrase", None);
    let alice = cluster.user_client("alice", "alice passphrase");
    let first = alice
        .put(&mut &b"first"[..], 5, "/home/alice/x", &mut |_| {})
        .unwrap();
    let objects = cluster.data().join("osd-1/objects");
    assert_eq!(files_under(&objects), 1);
    // A second client holds no open of x: it tries a reserved id, the link is refused,
    // its object goes, and the put overwrites x through an open.
    let other = cluster.user_client("alice", "alice passphrase");
    let second = other
        .put(&mut &b"second!"[..], 7, "/home/alice/x", &mut |_| {})
        .unwrap();
    assert_eq!(second.id, first.id);
    let mut out = Vec::new();
    alice.forget_opens();
    alice.get("/home/alice/x", &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, b"second!");
    assert_eq!(
        files_under(&objects),
        1,
        "an object was left under a reserved id"
    );
}

#[test]
fn small_encrypted_files_link_with_their_lockbox_and_read_back_through_the_kds() {
    let cluster = Cluster::start_encrypting(1, &[]);
    cluster.add_user("alice", "alice passphrase", None);
    let alice = cluster.user_client("alice", "alice passphrase");
    let secret = b"a secret that never reaches an OSD in clear".repeat(10);
    let mut ids = Vec::new();
    for i in 0..3 {
        let path = format!("/home/alice/s{i}");
        let stat = alice
            .put(&mut &secret[..], secret.len() as u64, &path, &mut |_| {})
            .unwrap();
        assert!(stat.encrypted, "{path}");
        ids.push(stat.id);
        // Stored under a reserved id: the capability alice keeps names a range.
        let opened = alice.open(&path, Access::Read, None).unwrap();
        let cap = Unverified::<Capability>::decode(&opened.capability).unwrap();
        assert!(matches!(cap.unverified_body().files, Files::Range { .. }));
        // The method of encrypted files here (the partition has ALLDATA).
        assert_eq!(
            cap.unverified_body().protection,
            maat_proto::protection::Protection::CmdRsp
        );
    }
    assert_eq!(ids.windows(2).filter(|w| w[1] == w[0] + 1).count(), 2);
    // The KDS gives keys under the range capability for a lockbox of an id in its range,
    // and not for bob's file's lockbox (an id outside it).
    let kept = alice.open("/home/alice/s0", Access::Read, None).unwrap();
    assert!(alice.request_file_keys(&kept).unwrap() >= 1);
    cluster.add_user("bob", "bob passphrase", None);
    let bob = cluster.user_client("bob", "bob passphrase");
    bob.put(
        &mut &secret[..],
        secret.len() as u64,
        "/home/bob/b",
        &mut |_| {},
    )
    .unwrap();
    bob.forget_opens();
    let bobs = bob.open("/home/bob/b", Access::Read, None).unwrap();
    let mut swapped = kept.clone();
    swapped.stat.crypt = bobs.stat.crypt.clone();
    assert_eq!(
        code(alice.request_file_keys(&swapped)),
        maat_proto::msg::ErrorCode::WrongFile
    );
    // Another client of alice's asks the MDS and the KDS, and decrypts.
    let again = cluster.user_client("alice", "alice passphrase");
    for i in 0..3 {
        let mut out = Vec::new();
        again
            .get(&format!("/home/alice/s{i}"), &mut out, &mut |_| {})
            .unwrap();
        assert_eq!(out, secret);
    }
    // The OSD holds ciphertext only.
    let mut clear = 0;
    let mut stack = vec![cluster.data().join("osd-1/objects")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .unwrap()
                .windows(16)
                .any(|w| w == &secret[..16])
            {
                clear += 1;
            }
        }
    }
    assert_eq!(clear, 0);
}

#[test]
fn removing_a_file_put_here_signs_nothing_and_a_replaced_path_is_removed_the_usual_way() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("alice", "alice passphrase", None);
    let admin = cluster.admin_client();
    let alice = cluster.user_client("alice", "alice passphrase");
    let objects = cluster.data().join("osd-1/objects");
    for i in 0..10 {
        alice
            .put(
                &mut &b"data"[..],
                4,
                &format!("/home/alice/r{i}"),
                &mut |_| {},
            )
            .unwrap();
    }
    assert_eq!(files_under(&objects), 10);
    // alice holds each file's write capability (the reservation's): the MDS unlinks
    // and signs nothing, and her objects go under that capability.
    let signed = counter(&admin, "mds", "signatures_made");
    for i in 0..5 {
        alice.unlink(&format!("/home/alice/r{i}")).unwrap();
    }
    assert_eq!(counter(&admin, "mds", "signatures_made"), signed);
    assert_eq!(files_under(&objects), 5);

    // Another client removes r5 and puts a new file there: alice's kept capability is
    // for the old file, so the MDS refuses her held unlink (nothing removed) and she
    // unlinks the usual way, removing the new file's object, not a stale one.
    let other = cluster.user_client("alice", "alice passphrase");
    other.unlink("/home/alice/r5").unwrap();
    other
        .put(&mut &b"new"[..], 3, "/home/alice/r5", &mut |_| {})
        .unwrap();
    assert_eq!(files_under(&objects), 5);
    alice.unlink("/home/alice/r5").unwrap();
    assert_eq!(
        code(other.stat("/home/alice/r5")),
        maat_proto::msg::ErrorCode::NoSuchFile
    );
    assert_eq!(files_under(&objects), 4);
}

/// Issue 45 (E5, SPEC M6): an open that creates a file takes a reserved id too, so a
/// process creating many files in a directory is given one capability per block of ids,
/// not one per file (IOR's creates); it writes them through the open, others read them
/// back, and a create of an existing path opens that file. With grouping off (the
/// papers' baseline) nothing is reserved and every create has a capability of its own.
#[test]
fn opens_that_create_files_take_reserved_ids_unless_grouping_is_off() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("alice", "alice passphrase", None);
    let admin = cluster.admin_client();
    let alice = cluster.user_client("alice", "alice passphrase");
    let create = |path: &str, data: &[u8]| {
        let opened = alice.open(path, Access::ReadWrite, Some(0o644)).unwrap();
        alice.write_at(&opened, 0, data.to_vec()).unwrap();
        alice.set_size(path, &opened, data.len() as u64).unwrap();
        opened
    };
    // The first create reserves a block, and its write meets the OSD with its
    // capability once.
    create("/home/alice/first", b"first");
    let verified = counter(&admin, "osd", "signatures_verified");
    let mut ids = Vec::new();
    for i in 0..20 {
        let opened = create(
            &format!("/home/alice/c{i}"),
            format!("created {i}").as_bytes(),
        );
        let cap = Unverified::<Capability>::decode(&opened.capability)
            .unwrap()
            .unverified_body()
            .clone();
        assert!(
            matches!(cap.files, Files::Range { first, count }
                if opened.stat.id >= first.0 && opened.stat.id < first.0 + u64::from(count)),
            "c{i}: {:?}",
            cap.files
        );
        ids.push(opened.stat.id);
    }
    // No capability was verified for the 20 files: they went under the block's.
    assert_eq!(counter(&admin, "osd", "signatures_verified") - verified, 0);
    // Another client of alice's (no kept opens) reads them back.
    let reader = cluster.user_client("alice", "alice passphrase");
    let read = |path: &str| {
        let mut out = Vec::new();
        reader.get(path, &mut out, &mut |_| {}).unwrap();
        out
    };
    for (i, id) in ids.iter().enumerate() {
        let path = format!("/home/alice/c{i}");
        assert_eq!(read(&path), format!("created {i}").as_bytes());
        assert_eq!(reader.stat(&path).unwrap().id, *id);
    }
    // A create of an existing path opens it: same file, its data untouched until
    // written.
    let asked = alice.client_stats().requests;
    let again = alice
        .open("/home/alice/c3", Access::ReadWrite, Some(0o644))
        .unwrap();
    assert_eq!(again.stat.id, ids[3]);
    // In one round trip, as an `Open` (`OpenOrLink`), not a link refused then an open.
    assert_eq!(alice.client_stats().requests - asked, 1);
    assert_eq!(read("/home/alice/c3"), b"created 3");
    // Removing them goes under the block's capability, which the MDS hands back: no
    // capability signed, none verified (the OSD knows the block's).
    let verified = counter(&admin, "osd", "signatures_verified");
    for i in 10..15 {
        alice.unlink(&format!("/home/alice/c{i}")).unwrap();
        let gone = reader.stat(&format!("/home/alice/c{i}"));
        assert_eq!(code(gone), ErrorCode::NoSuchFile);
    }
    assert_eq!(counter(&admin, "osd", "signatures_verified") - verified, 0);
    // Grouping off: every create is a capability of its own, verified at its write.
    admin.set_grouping("none").unwrap();
    let alice = cluster.user_client("alice", "alice passphrase");
    // Its first write meets the OSD (a session, with what that verifies).
    let warm = alice
        .open("/home/alice/n-warm", Access::ReadWrite, Some(0o644))
        .unwrap();
    alice.write_at(&warm, 0, b"warm".to_vec()).unwrap();
    let verified = counter(&admin, "osd", "signatures_verified");
    for i in 0..5 {
        let path = format!("/home/alice/n{i}");
        let opened = alice.open(&path, Access::ReadWrite, Some(0o644)).unwrap();
        alice.write_at(&opened, 0, b"plain".to_vec()).unwrap();
        let cap = Unverified::<Capability>::decode(&opened.capability)
            .unwrap()
            .unverified_body()
            .clone();
        assert!(
            !matches!(cap.files, Files::Range { .. }),
            "n{i}: {:?}",
            cap.files
        );
    }
    assert_eq!(counter(&admin, "osd", "signatures_verified") - verified, 5);
}
