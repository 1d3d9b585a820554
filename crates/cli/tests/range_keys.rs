//! SPEC H6 end to end on a real cluster: an owner grants byte ranges of an encrypted file;
//! a grantee reads them and decrypts nothing else, even with raw access to the object
//! files; the KDS refuses keys outside the permit, without it, under a tampered or
//! another user's permit; revocation stops new opens; the slice policy gives member i
//! slice i; the CLI (`maat keys`, `maat cat --range`, `--key-level`) does the same.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, content, object_file, Cluster};
use maat_client::{Client, ClientError, OpenFlags};
use maat_proto::encrypted::{self, LeafKeys, StripeContext};
use maat_proto::msg::{Access, ErrorCode, STRIPE_UNIT_BYTES};

const MIB: u64 = 1 << 20;

fn put(c: &mut Client, path: &str, data: &[u8]) {
    c.put_with(&mut &data[..], data.len() as u64, path, None, &mut |_| {})
        .unwrap();
}

fn read(c: &mut Client, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, ClientError> {
    let handle = c.open_file(path, OpenFlags::READ)?;
    c.read_file_at(&handle, offset, len as usize)
}

fn users(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A cluster with alice (owner of a 2 MiB encrypted file, mode 0600), bob and carol.
fn setup() -> (Cluster, Client, Client, Client, Vec<u8>) {
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
    let data = content(7, 2 * MIB as usize);
    put(&mut alice, "/home/alice/f", &data);
    alice.chmod("/home/alice/f", 0o600).unwrap();
    (cluster, alice, bob, carol, data)
}

#[test]
fn a_user_granted_the_first_mib_reads_it_and_decrypts_nothing_else() {
    let (cluster, alice, mut bob, mut carol, data) = setup();
    let f = "/home/alice/f";
    assert_eq!(code(read(&mut bob, f, 0, 10)), ErrorCode::PermissionDenied);

    // Only the owner grants, only whole blocks, only on encrypted files.
    assert_eq!(
        code(carol.keys_grant(f, &users(&["carol"]), &[(0, MIB)])),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(alice.keys_grant(f, &users(&["bob"]), &[(0, MIB + 1)])),
        ErrorCode::InvalidArgument
    );
    alice
        .put_with(
            &mut &b"y"[..],
            1,
            "/home/alice/plain",
            Some(false),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(
        code(alice.keys_grant("/home/alice/plain", &users(&["bob"]), &[(0, MIB)])),
        ErrorCode::InvalidArgument
    );
    alice.keys_grant(f, &users(&["bob"]), &[(0, MIB)]).unwrap();
    alice
        .keys_grant(f, &users(&["carol"]), &[(MIB, 2 * MIB)])
        .unwrap();

    // Bob reads his megabyte, in pieces that cross stripes too.
    assert_eq!(read(&mut bob, f, 0, MIB).unwrap(), data[..MIB as usize]);
    assert_eq!(
        read(&mut bob, f, 300_000, 400_000).unwrap(),
        data[300_000..700_000]
    );
    // Not a byte past it: the read names the first block he has no key for.
    let e = read(&mut bob, f, MIB - 5, 10).unwrap_err();
    assert!(matches!(e, ClientError::Integrity { .. }), "{e}");
    assert!(
        e.to_string().contains("block 16 ") && e.to_string().contains("no key granted"),
        "{e}"
    );
    assert!(matches!(
        bob.get(f, &mut Vec::new(), &mut |_| {}),
        Err(ClientError::Integrity { .. })
    ));
    // A grant reads; it never writes.
    assert_eq!(
        code(bob.open(f, Access::ReadWrite, None)),
        ErrorCode::PermissionDenied
    );

    // What Bob holds covers his range only, and opens only those objects on the OSDs'
    // disks: raw access to the rest gives him ciphertext he cannot open.
    let opened = bob.open(f, Access::Read, None).unwrap();
    let id = opened.stat.id;
    let (shape, keys) = bob.range_keys_held(id, 1).unwrap();
    for k in &keys {
        let (a, b) = shape.bytes_under(k.node).unwrap();
        assert!(b <= MIB, "a key for bytes {a}..{b}");
    }
    let crypt = opened.stat.crypt.clone().unwrap();
    for stripe in 0..4u32 {
        let raw = std::fs::read(object_file(&cluster.data(), id, stripe)).unwrap();
        let context = StripeContext {
            file: id,
            tree_version: 1,
            stripe,
            generation: crypt.generation(stripe),
        };
        let mut leaf_keys = LeafKeys::new(&shape, &keys).unwrap();
        let opened = encrypted::open_stripe(&mut leaf_keys, &context, raw, 0);
        let at = (u64::from(stripe) * STRIPE_UNIT_BYTES) as usize;
        if u64::from(stripe) * STRIPE_UNIT_BYTES < MIB {
            assert_eq!(opened.unwrap(), data[at..at + STRIPE_UNIT_BYTES as usize]);
        } else {
            assert_eq!(opened.unwrap_err().reason, "has no key granted");
        }
    }

    // The KDS: every key of the file under Bob's capability is refused...
    assert_eq!(
        code(bob.request_keys_batch(std::slice::from_ref(&opened), 0)),
        ErrorCode::PermissionDenied
    );
    // ...and so are his keys without the permit, with a permit changed by a byte,
    // with Carol's permit, and Bob's capability and permit under Carol's ticket.
    let mut without = opened.clone();
    without.stat.key_ranges = None;
    assert_eq!(
        code(bob.request_file_keys(&without)),
        ErrorCode::PermissionDenied
    );
    let mut widened = opened.clone();
    let permit = widened.stat.key_ranges.as_mut().unwrap();
    let at = permit.len() - 64 - 1; // the last byte of the last range's end
    permit[at] ^= 0x01;
    assert_eq!(
        code(bob.request_file_keys(&widened)),
        ErrorCode::BadSignature
    );
    let carols = carol.open(f, Access::Read, None).unwrap();
    let mut swapped = opened.clone();
    swapped.stat.key_ranges = carols.stat.key_ranges.clone();
    assert_eq!(
        code(bob.request_file_keys(&swapped)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(code(carol.request_file_keys(&opened)), ErrorCode::WrongUser);
    // The sound request is granted (the refusals above were for what they changed).
    assert!(bob.request_file_keys(&opened).unwrap() >= 1);
    assert_eq!(read(&mut carol, f, MIB, MIB).unwrap(), data[MIB as usize..]);

    // A capability of another kind gets no keys: with the file writable by others, Bob's
    // write open hands him a write-only capability, which the KDS refuses outright (it
    // would otherwise name the whole file); his range still reads.
    alice.chmod(f, 0o602).unwrap();
    let write_only = bob.open(f, Access::ReadWrite, None).unwrap();
    assert!(write_only.stat.key_ranges.is_none());
    assert_eq!(
        code(bob.request_file_keys(&write_only)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(read(&mut bob, f, 0, 10).unwrap(), data[..10]);
    alice.chmod(f, 0o600).unwrap();

    // An administrator's revocation of Bob (SPEC M9) stops his range opens too.
    let admin = cluster.admin_client();
    admin.revoke(&users(&["bob"]), &[]).unwrap();
    assert_eq!(code(bob.open_file(f, OpenFlags::READ)), ErrorCode::Revoked);

    // The owner lists and withdraws; Bob's next open is refused, Carol's still works.
    let list = alice.keys_list(f).unwrap();
    assert_eq!(list.len(), 2);
    assert!(list
        .iter()
        .any(|g| g.user == "bob" && g.ranges == vec![(0, MIB)]));
    alice.keys_revoke(f, &users(&["bob"])).unwrap();
    assert_eq!(code(read(&mut bob, f, 0, 10)), ErrorCode::PermissionDenied);
    assert_eq!(
        read(&mut carol, f, MIB, 10).unwrap(),
        data[MIB as usize..MIB as usize + 10]
    );
    assert_eq!(alice.keys_list(f).unwrap().len(), 1);
}

#[test]
fn the_slice_policy_gives_member_i_slice_i_and_a_revoked_slot_moves_no_other() {
    let (_cluster, mut alice, mut bob, mut carol, _) = setup();
    let f = "/home/alice/s";
    let data = content(9, 3 * MIB as usize);
    put(&mut alice, f, &data);
    alice.chmod(f, 0o600).unwrap();
    alice
        .keys_grant_slices(f, &users(&["alice", "bob", "carol"]))
        .unwrap();
    let slice = |i: usize| &data[i * MIB as usize..(i + 1) * MIB as usize];
    assert_eq!(read(&mut bob, f, MIB, MIB).unwrap(), slice(1));
    assert_eq!(read(&mut carol, f, 2 * MIB, MIB).unwrap(), slice(2));
    assert!(matches!(
        read(&mut bob, f, 2 * MIB, 1),
        Err(ClientError::Integrity { .. })
    ));
    assert!(matches!(
        read(&mut carol, f, 0, 1),
        Err(ClientError::Integrity { .. })
    ));
    let list = alice.keys_list(f).unwrap();
    assert!(list
        .iter()
        .any(|g| g.user == "bob" && g.slice == Some((1, 3))));

    alice.keys_revoke(f, &users(&["bob"])).unwrap();
    assert_eq!(code(read(&mut bob, f, MIB, 1)), ErrorCode::PermissionDenied);
    assert_eq!(read(&mut carol, f, 2 * MIB, MIB).unwrap(), slice(2));
}

#[test]
fn the_cli_grants_reads_a_range_at_a_chosen_key_level_and_revokes() {
    let (cluster, _alice, _bob, _carol, data) = setup();
    let f = "/home/alice/f";
    let (alice, bob) = (cluster.home("alice"), cluster.home("bob"));
    cluster.ok(
        &alice,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice-pass-1\n"),
    );
    cluster.ok(
        &bob,
        &["login", "bob", "--passphrase-stdin"],
        Some(b"bob-pass-123\n"),
    );
    let e = cluster.fails(
        &alice,
        &["keys", "grant", f, "--to", "bob", "--range", "0..1000"],
        None,
    );
    assert!(e.contains("65536-byte blocks"), "{e}");
    cluster.ok(
        &alice,
        &["keys", "grant", f, "--to", "bob", "--range", "64KiB..1MiB"],
        None,
    );
    let listed = String::from_utf8(cluster.ok(&alice, &["keys", "list", f], None)).unwrap();
    assert_eq!(listed.trim(), "bob\t65536..1048576");
    // The minimal cover of the grant (level 0), and one key per block (the leaf level).
    for level in ["0", "9"] {
        let out = cluster.ok(
            &bob,
            &["--key-level", level, "cat", f, "--range", "100000..1MiB"],
            None,
        );
        assert_eq!(out, data[100_000..MIB as usize], "level {level}");
    }
    let e = cluster.fails(&bob, &["cat", f, "--range", "0..10"], None);
    assert!(
        e.contains("block 0 ") && e.contains("no key granted"),
        "{e}"
    );
    cluster.ok(&alice, &["keys", "revoke", f, "--from", "bob"], None);
    let e = cluster.fails(&bob, &["cat", f, "--range", "64KiB..1MiB"], None);
    assert!(e.to_lowercase().contains("permission"), "{e}");
}
