//! SPEC H7 end to end on a real cluster: after `keys revoke` and a rekey, a range key the
//! revoked user took away opens no object of the file (on the OSDs' disks), while the
//! owner and the remaining grantees read everything as before; an interrupted rekey
//! leaves a file of two key trees that reads and writes correctly and resumes; the MDS
//! refuses a rekey by anyone but the owner and any lockbox that is not the next version
//! of this file's tree; `maat keys rekey` and `maat stat` do the same from the shell.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, content, object_file, Cluster};
use maat_client::{Client, OpenFlags};
use maat_crypto::kht::{KhtShape, RangeKey};
use maat_proto::encrypted::{self, FileCrypt, LeafKeys, StripeContext};
use maat_proto::horus::Lockbox;
use maat_proto::msg::{Access, ErrorCode, MdsRequest, STRIPE_UNIT_BYTES};
use std::ops::ControlFlow;
use std::path::Path;

const MIB: u64 = 1 << 20;
const WRITE: OpenFlags = OpenFlags {
    write: true,
    create: None,
    exclusive: false,
    truncate: false,
};
const F: &str = "/home/alice/f";

fn put(c: &mut Client, path: &str, data: &[u8]) {
    c.put_with(&mut &data[..], data.len() as u64, path, None, &mut |_| {})
        .unwrap();
}

fn read(c: &mut Client, path: &str, offset: u64, len: u64) -> Vec<u8> {
    let handle = c.open_file(path, OpenFlags::READ).unwrap();
    c.read_file_at(&handle, offset, len as usize).unwrap()
}

fn users(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A cluster with alice (owner of an encrypted file of `len` bytes, mode 0600), bob and
/// carol.
fn setup(len: usize) -> (Cluster, Client, Client, Client, Vec<u8>) {
    let cluster = Cluster::start_encrypting(2, &[]);
    for (u, p) in [
        ("alice", "alice-pass-1"),
        ("bob", "bob-pass-123"),
        ("carol", "carol-pass-1"),
    ] {
        cluster.add_user(u, p, None);
    }
    let mut alice = cluster.user_client("alice", "alice-pass-1");
    let bob = cluster.user_client("bob", "bob-pass-123");
    let carol = cluster.user_client("carol", "carol-pass-1");
    let data = content(11, len);
    put(&mut alice, F, &data);
    alice.chmod(F, 0o600).unwrap();
    (cluster, alice, bob, carol, data)
}

/// The file's crypt record and tree version as its owner's open shows them now.
fn crypt_now(c: &mut Client) -> (u64, FileCrypt, u32, u64) {
    // (A fresh open, never the client's cache of read opens.)
    let handle = c.open_file(F, OpenFlags::READ).unwrap();
    let stat = handle.stat();
    let crypt = stat.crypt.clone().unwrap();
    let version = Lockbox::decode(&crypt.lockbox).unwrap().tree_version;
    (stat.id, crypt, version, stat.size)
}

/// Opens stripe `stripe` of the object files with `keys` as of tree `version`.
fn open_raw(
    data: &Path,
    id: u64,
    crypt: &FileCrypt,
    stripe: u32,
    version: u32,
    (shape, keys): &(KhtShape, Vec<RangeKey>),
) -> Result<Vec<u8>, encrypted::BlockFailure> {
    let raw = std::fs::read(object_file(data, id, stripe)).unwrap();
    let context = StripeContext {
        file: id,
        tree_version: version,
        stripe,
        generation: crypt.generation(stripe),
    };
    let mut leaf_keys = LeafKeys::new(shape, keys).unwrap();
    encrypted::open_stripe(&mut leaf_keys, &context, raw, 0)
}

#[test]
fn after_revoke_and_rekey_the_old_range_key_decrypts_nothing_the_file_holds() {
    let len = 3 * MIB as usize + 1000;
    let (cluster, mut alice, mut bob, mut carol, data) = setup(len);
    alice.keys_grant(F, &users(&["bob"]), &[(0, MIB)]).unwrap();
    alice
        .keys_grant(F, &users(&["carol"]), &[(MIB, 2 * MIB)])
        .unwrap();
    assert_eq!(read(&mut bob, F, 0, MIB), data[..MIB as usize]);
    let (id, crypt, version, _) = crypt_now(&mut alice);
    assert_eq!(version, 1);
    let taken = bob.range_keys_held(id, 1).unwrap();
    // What Bob took away opens his stripes on the OSDs' disks (so the checks below can
    // fail)...
    for stripe in 0..2u32 {
        let at = (u64::from(stripe) * STRIPE_UNIT_BYTES) as usize;
        assert_eq!(
            open_raw(&cluster.data(), id, &crypt, stripe, 1, &taken).unwrap(),
            data[at..at + STRIPE_UNIT_BYTES as usize]
        );
    }

    // Bob also keeps the capability and key-range permit of one open, good for minutes.
    let bobs = bob.open(F, Access::Read, None).unwrap();
    assert!(bob.request_file_keys(&bobs).unwrap() >= 1);

    // ...until his grant is revoked and the file rekeyed. (A write handle Alice opened
    // before the rekey, for the end.)
    let mut stale = alice.open_file(F, WRITE).unwrap();
    alice.keys_revoke(F, &users(&["bob"])).unwrap();
    let mut calls = Vec::new();
    let report = alice
        .rekey(F, false, &mut |done, total| {
            calls.push((done, total));
            ControlFlow::Continue(())
        })
        .unwrap();
    let stripes = len.div_ceil(STRIPE_UNIT_BYTES as usize) as u32;
    assert_eq!(
        (
            report.tree_version,
            report.new_tree,
            report.stripes,
            report.remaining
        ),
        (2, true, stripes, 0)
    );
    assert_eq!(report.bytes, len as u64);
    assert_eq!(calls.first(), Some(&(0, stripes)));
    assert_eq!(calls.last(), Some(&(stripes, stripes)));

    // The MDS forgot tree 1: nothing names it any more.
    let (_, crypt, version, size) = crypt_now(&mut alice);
    assert_eq!((version, size), (2, len as u64));
    assert!(
        crypt.earlier.is_empty() && crypt.versions.is_empty(),
        "{crypt:?}"
    );
    // Not a stripe opens with Bob's keys, as tree 1 or as tree 2.
    for stripe in 0..stripes {
        for as_version in [1, 2] {
            let opened = open_raw(&cluster.data(), id, &crypt, stripe, as_version, &taken);
            let Err(e) = opened else {
                panic!("stripe {stripe} opens with the revoked key as tree {as_version}")
            };
            let expected = if stripe < 2 {
                "fails authentication (tampered, rolled back, or not this file's)"
            } else {
                "has no key granted"
            };
            assert_eq!(e.reason, expected, "stripe {stripe} as tree {as_version}");
        }
    }
    // Nor does the permit he kept get him the new tree's keys of his old range, with the
    // new lockbox (not secret to the file's readers) put in its place: it names tree 1.
    let mut with_new_lockbox = bobs.clone();
    with_new_lockbox.stat.crypt = Some(crypt.clone());
    let e = bob.request_file_keys(&with_new_lockbox).unwrap_err();
    assert!(e.to_string().contains("key tree 1"), "{e}");
    assert_eq!(code::<usize>(Err(e)), ErrorCode::PermissionDenied);
    // Bob gets no key of the new tree (no capability at all); the others read as before.
    assert_eq!(
        code(bob.open_file(F, OpenFlags::READ)),
        ErrorCode::PermissionDenied
    );
    let mut all = Vec::new();
    alice.forget_file_keys();
    alice.get(F, &mut all, &mut |_| {}).unwrap();
    assert_eq!(all, data);
    assert_eq!(
        read(&mut carol, F, MIB, MIB),
        data[MIB as usize..2 * MIB as usize]
    );
    let (_, carols) = carol.range_keys_held(id, 2).unwrap();
    assert!(!carols.is_empty());

    // The handle opened before the rekey seals under tree 1, which the MDS no longer
    // keeps: recording what it wrote is refused, and the stripe it sent fails reads,
    // naming its first block, rather than returning bytes.
    let stripe = vec![7u8; STRIPE_UNIT_BYTES as usize];
    alice.write_file_at(&mut stale, 0, &stripe).unwrap();
    let e = alice.flush_file(&mut stale).unwrap_err();
    assert!(e.to_string().contains("key tree 1"), "{e}");
    assert_eq!(code::<()>(Err(e)), ErrorCode::WrongFile);
    let h = alice.open_file(F, OpenFlags::READ).unwrap();
    let e = alice.read_file_at(&h, 0, 10).unwrap_err();
    assert!(e.to_string().contains("block 0 "), "{e}");
}

#[test]
fn an_interrupted_rekey_leaves_a_file_of_two_trees_that_reads_writes_and_resumes() {
    // 11 stripes: a rekey rewrites 8 per window; it is stopped after the first.
    let len = 5 * MIB as usize + 4321;
    let (_cluster, mut alice, _bob, mut carol, mut data) = setup(len);
    alice
        .keys_grant(F, &users(&["carol"]), &[(4 * MIB, 5 * MIB)])
        .unwrap();
    let mut stale = alice.open_file(F, WRITE).unwrap();
    let report = alice
        .rekey(F, false, &mut |done, _| {
            if done > 0 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(
        (report.tree_version, report.stripes, report.remaining),
        (2, 8, 3)
    );
    let (_, crypt, version, _) = crypt_now(&mut alice);
    assert_eq!(version, 2);
    assert_eq!(crypt.stripes_on_earlier(11), vec![(8..11, 1)]);
    assert!(crypt.earlier_lockbox(1).is_some());

    // Readers use both trees: the owner reads it all; Carol, granted stripes 8 and 9
    // (still under tree 1), gets tree-1 keys for them from the KDS under her permit.
    let mut all = Vec::new();
    alice.forget_file_keys();
    alice.get(F, &mut all, &mut |_| {}).unwrap();
    assert_eq!(all, data);
    assert_eq!(
        read(&mut carol, F, 4 * MIB, MIB),
        data[4 * MIB as usize..5 * MIB as usize]
    );
    // A write into a stripe still under tree 1 (part of it: the rest is read with tree
    // 1 and the whole stripe sealed under tree 2).
    let at = 4 * MIB + 100_000;
    let mut h = alice.open_file(F, WRITE).unwrap();
    alice
        .write_file_at(&mut h, at, b"written meanwhile")
        .unwrap();
    alice.flush_file(&mut h).unwrap();
    data[at as usize..at as usize + 17].copy_from_slice(b"written meanwhile");
    // A writer that opened the file before the rekey seals stripe 2 (rewritten already)
    // under tree 1, which the MDS still keeps: recorded under tree 1, for the rekey to
    // rewrite again.
    let whole = content(12, STRIPE_UNIT_BYTES as usize);
    alice
        .write_file_at(&mut stale, 2 * STRIPE_UNIT_BYTES, &whole)
        .unwrap();
    alice.flush_file(&mut stale).unwrap();
    data[2 * STRIPE_UNIT_BYTES as usize..3 * STRIPE_UNIT_BYTES as usize].copy_from_slice(&whole);
    let (_, crypt, _, _) = crypt_now(&mut alice);
    assert_eq!(crypt.stripes_on_earlier(11), vec![(2..3, 1), (9..11, 1)]);
    let mut all = Vec::new();
    alice.get(F, &mut all, &mut |_| {}).unwrap();
    assert_eq!(all, data);

    // Resumed: the rest, under the same tree; tree 1 then goes.
    let report = alice
        .rekey(F, true, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(
        (
            report.tree_version,
            report.new_tree,
            report.stripes,
            report.remaining
        ),
        (2, false, 3, 0)
    );
    let (_, crypt, _, _) = crypt_now(&mut alice);
    assert!(crypt.earlier.is_empty());
    let mut all = Vec::new();
    alice.get(F, &mut all, &mut |_| {}).unwrap();
    assert_eq!(all, data);
    carol.forget_file_keys();
    assert_eq!(
        read(&mut carol, F, 4 * MIB, MIB),
        data[4 * MIB as usize..5 * MIB as usize]
    );
}

#[test]
fn the_mds_refuses_rekeys_by_others_and_lockboxes_that_are_not_the_next_tree() {
    let (cluster, mut alice, bob, _carol, data) = setup(MIB as usize);
    // Bob may write the file, but it is not his: his new tree is refused.
    alice.chmod(F, 0o666).unwrap();
    assert_eq!(
        code(bob.rekey(F, false, &mut |_, _| ControlFlow::Continue(()))),
        ErrorCode::PermissionDenied
    );
    let (id, crypt, _, _) = crypt_now(&mut alice);
    let shape = Lockbox::decode(&crypt.lockbox).unwrap().shape;
    let anyone = maat_crypto::seal::SealingSecretKey::generate(&mut maat_crypto::OsRng);
    let boxed = |file: u64, version: u32, shape: KhtShape| {
        Lockbox::seal(
            maat_proto::FileId(file),
            version,
            shape,
            &maat_crypto::Secret32::from_bytes([5; 32]),
            &anyone.public_key(),
            &anyone.public_key(),
            &mut maat_crypto::OsRng,
        )
        .unwrap()
        .encode()
    };
    let rekey = |lockbox: Vec<u8>| {
        alice.mds_call(MdsRequest::Rekey {
            path: F.into(),
            file: id,
            lockbox,
        })
    };
    // The same version again (a replayed rekey), one skipped, another file's, another
    // shape, garbage.
    for (lockbox, expected) in [
        (boxed(id, 1, shape.clone()), ErrorCode::WrongFile),
        (boxed(id, 3, shape.clone()), ErrorCode::WrongFile),
        (boxed(id + 1, 2, shape.clone()), ErrorCode::WrongFile),
        (
            boxed(id, 2, KhtShape::default_shape()),
            ErrorCode::WrongFile,
        ),
        (vec![1, 2, 3], ErrorCode::Malformed),
    ] {
        assert_eq!(code(rekey(lockbox)), expected);
    }
    // A plaintext file has no tree to renew.
    alice
        .put_with(
            &mut &b"p"[..],
            1,
            "/home/alice/plain",
            Some(false),
            &mut |_| {},
        )
        .unwrap();
    let plain = alice.open("/home/alice/plain", Access::Read, None).unwrap();
    assert_eq!(
        code(alice.mds_call(MdsRequest::Rekey {
            path: "/home/alice/plain".into(),
            file: plain.stat.id,
            lockbox: boxed(plain.stat.id, 2, shape.clone()),
        })),
        ErrorCode::InvalidArgument
    );
    // Nothing above changed the file.
    let (_, after, version, _) = crypt_now(&mut alice);
    assert_eq!((version, after), (1, crypt));

    // From the shell: rekey, then stat shows the new tree; rekeyed again, the file still
    // reads; there is nothing to resume.
    let home = cluster.home("alice");
    cluster.ok(
        &home,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice-pass-1\n"),
    );
    let out = String::from_utf8(cluster.ok(&home, &["keys", "rekey", F], None)).unwrap();
    assert!(
        out.contains("new key tree version 2") && out.contains("re-encrypted 2 stripes"),
        "{out}"
    );
    let stat = String::from_utf8(cluster.ok(&home, &["stat", F], None)).unwrap();
    assert!(stat.contains("key tree version 2"), "{stat}");
    assert!(!stat.contains("rekey in progress"), "{stat}");
    let out = String::from_utf8(cluster.ok(&home, &["keys", "rekey", F], None)).unwrap();
    assert!(out.contains("new key tree version 3"), "{out}");
    assert_eq!(cluster.ok(&home, &["cat", F], None), data);
    let e = cluster.fails(&home, &["keys", "rekey", "--resume", F], None);
    assert!(e.contains("no rekey in progress"), "{e}");
    let e = cluster.fails(&home, &["keys", "rekey", "/home/alice/plain"], None);
    assert!(e.contains("not encrypted"), "{e}");
}
