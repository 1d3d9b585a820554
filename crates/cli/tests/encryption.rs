//! SPEC H3–H5 end to end on a real cluster: encrypted files round-trip; no OSD or MDS
//! byte reveals their content or keys; a block flipped or rolled back on an OSD's disk
//! fails the read naming the block; the KDS hands keys only to users a capability names,
//! for files the capability names, from lockboxes it can open; clients fail over from a
//! dead KDS, and a restarted one (no state) serves at once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, content, object_file, signal, Cluster, Held};
use maat_client::{Client, ClientError};
use maat_proto::msg::{Access, ErrorCode, MdsRequest, MdsResponse};
use maat_proto::protection::Protection;
use std::path::{Path, PathBuf};

fn put(c: &mut Client, path: &str, data: &[u8], encrypt: Option<bool>) {
    c.put_with(
        &mut &data[..],
        data.len() as u64,
        path,
        encrypt,
        &mut |_| {},
    )
    .unwrap();
}

fn get(c: &mut Client, path: &str) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {})?;
    Ok(out)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every byte stored under the directories of `data` whose name starts with `prefix`.
fn stored_bytes(data: &Path, prefix: &str) -> Vec<u8> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(data).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) && e.path().is_dir() {
            files_under(&e.path(), &mut files);
        }
    }
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect()
}

/// How many 32-byte windows of `secret` appear in `haystack`.
fn leaked(secret: &[u8], haystack: &[u8]) -> usize {
    let windows: std::collections::HashSet<&[u8]> = haystack.windows(32).collect();
    secret
        .chunks_exact(32)
        .filter(|w| windows.contains(w))
        .count()
}

/// The protection method a capability names.
fn method_of(capability: &[u8]) -> Protection {
    maat_proto::signed::Unverified::<maat_proto::capability::Capability>::decode(capability)
        .unwrap()
        .unverified_body()
        .protection
}

#[test]
fn encrypted_files_round_trip_and_no_osd_or_mds_byte_reveals_them() {
    let cluster = Cluster::start_encrypting(3, &[]);
    let mut c = cluster.admin_client();
    let secret = content(1, 1_300_000);
    put(&mut c, "/secret", &secret, None);
    assert_eq!(get(&mut c, "/secret").unwrap(), secret);
    let stat = c.stat("/secret").unwrap();
    assert!(stat.encrypted);
    // ALLDATA's MAC over data is replaced by the blocks' own authentication, from the
    // first write on: the open that made the file encrypted carries the new method.
    assert_eq!(stat.protection, Protection::CmdRsp);
    let mut fresh = c.open("/fresh", Access::ReadWrite, Some(0o644)).unwrap();
    assert_eq!(method_of(&fresh.capability), Protection::AllData);
    c.make_encrypted("/fresh", &mut fresh).unwrap();
    assert!(fresh.stat.encrypted);
    assert_eq!(method_of(&fresh.capability), Protection::CmdRsp);
    // The control: a file stored unencrypted is visible on the OSDs' disks.
    let plain = content(2, 300_000);
    put(&mut c, "/plain", &plain, Some(false));
    assert!(!c.stat("/plain").unwrap().encrypted);

    let osd_bytes = stored_bytes(&cluster.data(), "osd-");
    assert!(leaked(&plain, &osd_bytes) > 0, "the scan finds plaintext");
    assert_eq!(
        leaked(&secret, &osd_bytes),
        0,
        "an OSD holds encrypted file bytes in clear"
    );

    // The MDS stores the lockbox but no key: neither the root key nor a level-0 key
    // appears in its database or key directory.
    let opened = c.open("/secret", Access::Read, None).unwrap();
    let lockbox = opened.stat.crypt.clone().unwrap().lockbox;
    let root = c.open_lockbox_as_owner(&lockbox).unwrap();
    let mds_bytes = [
        stored_bytes(&cluster.data(), "mds"),
        stored_bytes(&cluster.data(), "mds-keys"),
    ]
    .concat();
    assert!(
        mds_bytes.windows(lockbox.len()).any(|w| w == lockbox),
        "lockbox stored"
    );
    let shape = maat_proto::encrypted::file_shape();
    let level0 = shape
        .node_key_from_root(&root, maat_crypto::kht::Node { level: 0, index: 0 })
        .unwrap();
    for key in [root.expose(), level0.expose()] {
        assert!(
            !mds_bytes.windows(32).any(|w| w == key),
            "a file key is readable in the MDS's store"
        );
    }
    // Nor do the MDS's own secrets open it: every key file of the MDS, tried as the
    // KDS's X25519 key on the lockbox (both its KDS box and, under the owner's key, its
    // keyed KDS box), opens nothing.
    let boxed = maat_proto::lockbox::Lockbox::decode(&lockbox).unwrap();
    let owner = boxed
        .owner_key()
        .cloned()
        .expect("new files get keyed lockboxes");
    let mut tried = 0;
    for name in ["signing.key", "sealing.key", "decoy.key"] {
        let path = cluster.data().join("mds-keys").join(name);
        let secret = maat_crypto::seal::SealingSecretKey::from_bytes(
            maat_server::read_key_file(&path).unwrap(),
        );
        assert!(
            boxed.open_as_kds(&secret).is_err(),
            "{name} opens the lockbox"
        );
        let keyed = maat_proto::lockbox::KdsLockboxKey::new(&secret, &owner).unwrap();
        assert!(
            boxed.open_keyed_as_kds(&keyed).is_err(),
            "{name} opens the keyed box"
        );
        tried += 1;
    }
    assert_eq!(tried, 3);
    // The control: the KDS's own key (derived from its seed as `KdsSecrets::from_seed`
    // does) opens it, so the attempts above were made the right way.
    let seed = maat_server::read_key_file(&cluster.data().join("kds-keys/kds.key")).unwrap();
    let kds = maat_crypto::kdf::hkdf_sha256(b"maat/kds/v1", &seed, &[b"sealing"]).unwrap();
    let kds = maat_crypto::seal::SealingSecretKey::from_bytes(*kds.expose());
    let keyed = maat_proto::lockbox::KdsLockboxKey::new(&kds, &owner).unwrap();
    assert_eq!(
        boxed.open_keyed_as_kds(&keyed).unwrap().root_key.expose(),
        root.expose()
    );
    // The owner's own box opens to the key the KDS derives from: what it grants decrypts.
    assert!(c.request_file_keys(&opened).unwrap() >= 1);
}

#[test]
fn a_flipped_or_rolled_back_block_on_an_osd_fails_the_read_naming_it() {
    // One copy of each object: the damaged copy is the only one (with more, the read
    // goes to another copy: `replication.rs`).
    let cluster = Cluster::start_encrypting(2, &["--replicas", "1"]);
    let mut c = cluster.admin_client();
    let v1 = content(3, 1_200_000);
    put(&mut c, "/f", &v1, None);
    let id = c.stat("/f").unwrap().id;
    let object = object_file(&cluster.data(), id, 1);
    let old = std::fs::read(&object).unwrap();

    // Byte 100 of block 5 of stripe 1 (64 KiB leaves: block 8 + 5 of the file).
    let mut flipped = old.clone();
    flipped[5 * (65536 + 40) + 100] ^= 0x20;
    std::fs::write(&object, &flipped).unwrap();
    let e = get(&mut c, "/f").unwrap_err();
    assert!(matches!(e, ClientError::Integrity { .. }), "{e}");
    assert!(e.to_string().contains("block 13 "), "{e}");
    std::fs::write(&object, &old).unwrap();
    assert_eq!(get(&mut c, "/f").unwrap(), v1);

    // Rewritten: the stripe now holds a newer generation. Putting the old, valid
    // ciphertext back (a rollback) is detected.
    let v2 = content(4, 1_200_000);
    put(&mut c, "/f", &v2, None);
    assert_eq!(get(&mut c, "/f").unwrap(), v2);
    let new = std::fs::read(&object).unwrap();
    std::fs::write(&object, &old).unwrap();
    let e = get(&mut c, "/f").unwrap_err();
    assert!(
        matches!(e, ClientError::Integrity { .. }),
        "rollback not detected: {e}"
    );
    assert!(e.to_string().contains("block 8 "), "{e}");
    std::fs::write(&object, &new).unwrap();
    assert_eq!(get(&mut c, "/f").unwrap(), v2);

    // A stripe cut short of what the size promises names its first missing block.
    std::fs::write(&object, &new[..3 * (65536 + 40)]).unwrap();
    let e = get(&mut c, "/f").unwrap_err();
    assert!(e.to_string().contains("block 11 "), "{e}");
}

#[test]
fn the_kds_gives_keys_only_to_named_users_for_named_files_from_sound_lockboxes() {
    let cluster = Cluster::start_encrypting(1, &[]);
    cluster.add_user("alice", "alice-pass-1", None);
    cluster.add_user("bob", "bob-pass-123", None);
    let mut alice = cluster.user_client("alice", "alice-pass-1");
    let mut bob = cluster.user_client("bob", "bob-pass-123");
    put(&mut alice, "/home/alice/a", b"alice's first secret", None);
    put(&mut alice, "/home/alice/b", b"alice's second secret", None);
    alice.chmod("/home/alice/a", 0o600).unwrap();
    let a = alice.open("/home/alice/a", Access::Read, None).unwrap();
    let b = alice.open("/home/alice/b", Access::Read, None).unwrap();
    let kds_ops = |c: &mut Client| {
        ["key_agreements", "signatures_made", "seals", "unseals"]
            .map(|name| kds_counter(c, "kds 1", name).unwrap())
    };
    let before = kds_ops(&mut alice);
    assert!(alice.request_file_keys(&a).unwrap() >= 1);
    assert!(alice.request_file_keys(&b).unwrap() >= 1);
    assert!(alice.request_file_keys(&a).unwrap() >= 1);
    // Keyed grants and keyed lockboxes: one X25519 agreement for Alice's login and one
    // for her lockboxes' owner key, then no public-key operation per grant or lockbox (a
    // signed grant costs a seal and a signature each, a sealed lockbox an unseal).
    let after = kds_ops(&mut alice);
    assert_eq!(
        [0, 1, 2, 3].map(|i| after[i] - before[i]),
        [2, 0, 0, 0],
        "KDS agreements, signatures, seals and unseals for three grants of two lockboxes"
    );
    // A lockbox of before keyed lockboxes (sealed, 0x0f) still opens at the KDS.
    let mut old = a.clone();
    let crypt = old.stat.crypt.as_mut().unwrap();
    let root = alice.open_lockbox_as_owner(&crypt.lockbox).unwrap();
    let kds_key = alice.cluster_map().unwrap().kds_keys.unwrap().sealing_key;
    let anyone = maat_crypto::seal::SealingSecretKey::generate(&mut maat_crypto::OsRng);
    crypt.lockbox = maat_proto::horus::Lockbox::seal(
        maat_proto::FileId(a.stat.id),
        1,
        maat_proto::encrypted::file_shape(),
        &root,
        &maat_crypto::seal::SealingPublicKey(kds_key),
        &anyone.public_key(),
        &mut maat_crypto::OsRng,
    )
    .unwrap()
    .encode();
    assert!(alice.request_file_keys(&old).unwrap() >= 1);
    // A keyed lockbox naming another owner key (so the KDS derives another key) does not
    // open.
    let mut other_owner = a.clone();
    let crypt = other_owner.stat.crypt.as_mut().unwrap();
    let at = crypt.lockbox.len() - 2 * maat_proto::horus::KEYED_LOCKBOX_BOX_BYTES - 32;
    crypt.lockbox[at..at + 32].copy_from_slice(&anyone.public_key().0);
    assert_eq!(
        code(alice.request_file_keys(&other_owner)),
        ErrorCode::BadMac
    );

    // Bob presents Alice's capability and lockbox with his own ticket.
    assert_eq!(code(bob.request_file_keys(&a)), ErrorCode::WrongUser);

    // Alice presents file b's lockbox with file a's capability.
    let mut swapped = a.clone();
    swapped.stat.crypt = b.stat.crypt.clone();
    assert_eq!(
        code(alice.request_file_keys(&swapped)),
        ErrorCode::WrongFile
    );

    // A lockbox whose KDS box was changed does not open.
    let mut tampered = a.clone();
    let crypt = tampered.stat.crypt.as_mut().unwrap();
    let at = crypt.lockbox.len() - 100;
    crypt.lockbox[at] ^= 1;
    assert_eq!(code(alice.request_file_keys(&tampered)), ErrorCode::BadMac);

    // A forged capability (a byte of its signature changed) is refused.
    let mut forged = a.clone();
    let last = forged.capability.len() - 1;
    forged.capability[last] ^= 1;
    assert_eq!(
        code(alice.request_file_keys(&forged)),
        ErrorCode::BadSignature
    );

    // And the file itself reads for Alice, not for Bob (the MDS refuses him the open).
    assert_eq!(
        get(&mut alice, "/home/alice/a").unwrap(),
        b"alice's first secret"
    );
    assert_eq!(
        code(get(&mut bob, "/home/alice/a")),
        ErrorCode::PermissionDenied
    );
}

/// The KDS counter `name` of instance `kds` (`kds N`, N from 1 in the cluster map).
/// What requests cost of counter `name` at daemon `kds` (none if it reports no such
/// counter): less the catch-up's `NAME_background` part.
fn kds_counter(c: &mut Client, kds: &str, name: &str) -> Option<u64> {
    let stats: Vec<_> = c
        .daemon_stats()
        .unwrap()
        .into_iter()
        .filter(|s| s.daemon == kds)
        .collect();
    stats
        .iter()
        .any(|s| s.counters.iter().any(|(k, _)| k == name))
        .then(|| maat_proto::msg::DaemonStats::request_share(&stats, kds, name))
}

#[test]
fn clients_fail_over_from_a_dead_kds_and_a_restarted_one_serves_at_once() {
    let cluster = Cluster::start_encrypting(1, &["--kds", "2"]);
    let mut c = cluster.admin_client();
    assert_eq!(c.cluster_map().unwrap().kds.len(), 2);
    let kds = ["kds 1".to_string(), "kds 2".to_string()];
    // Four files: with two instances, key requests for them start at each in turn.
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("/f{i}"), content(20 + i, 600_000)))
        .collect();
    for (path, data) in &files {
        put(&mut c, path, data, None);
    }
    let read_all = |c: &mut Client| {
        c.forget_file_keys();
        for (path, data) in &files {
            assert_eq!(&get(c, path).unwrap(), data, "{path}");
        }
    };
    read_all(&mut c);
    for address in &kds {
        assert!(
            kds_counter(&mut c, address, "grants").unwrap() >= 1,
            "{address} served"
        );
    }

    // The supervisor (`maat up`) is held, so a killed KDS stays down (and released
    // however the test ends).
    let up = cluster.local.supervisor_pid();
    let _held = Held::stop(up);
    signal("-KILL", cluster.pid("kds-1"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    read_all(&mut c);
    assert!(
        kds_counter(&mut c, &kds[0], "grants").is_none(),
        "kds-1 is down"
    );

    // Released, the supervisor restarts it: empty caches, the same key file. With the
    // other instance down, every key request now lands on the restarted one.
    let old = cluster.pid("kds-1");
    signal("-CONT", up);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while cluster.pid("kds-1") == old || kds_counter(&mut c, &kds[0], "requests").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "kds-1 was not restarted"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    signal("-STOP", up);
    signal("-KILL", cluster.pid("kds-2"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    read_all(&mut c);
    let grants = kds_counter(&mut c, &kds[0], "grants").unwrap();
    signal("-CONT", up);
    assert_eq!(
        grants,
        files.len() as u64,
        "the restarted KDS served every file"
    );
}

#[test]
fn deep_key_levels_ask_per_window_or_prefetch_and_every_level_reads_the_same() {
    let cluster = Cluster::start_encrypting(1, &[]);
    let mut c = cluster.admin_client();
    let data = content(30, 3 * 1024 * 1024 + 1000);
    put(&mut c, "/deep", &data, None);
    let kds = "kds 1";
    let grants_for = |c: &mut Client, level: u8, prefetch: u64| {
        c.set_key_level(level);
        c.set_key_prefetch(prefetch);
        c.forget_file_keys();
        let before = kds_counter(c, kds, "grants").unwrap();
        assert_eq!(get(c, "/deep").unwrap(), data, "level {level}");
        kds_counter(c, kds, "grants").unwrap() - before
    };
    // Level 0: one key covers any file. Level 3 (64 keys) still covers every byte a
    // file may hold in one request.
    assert_eq!(grants_for(&mut c, 0, 0), 1);
    assert_eq!(grants_for(&mut c, 3, 0), 1);
    // Leaf keys: one request per read window (one OSD: two 512 KiB stripes in flight,
    // so 7 stripes make 4 windows), or one when prefetching reaches past the end.
    assert_eq!(grants_for(&mut c, 9, 0), 4);
    assert_eq!(grants_for(&mut c, 9, 8 << 20), 1);
    assert_eq!(grants_for(&mut c, 9, 1 << 20), 2);
}

/// A lockbox naming `file` and tree `version`, sealed to a key nobody here holds (the
/// MDS checks what a box names; it cannot open it).
fn lockbox_naming(file: u64, version: u32) -> Vec<u8> {
    let anyone = maat_crypto::seal::SealingSecretKey::generate(&mut maat_crypto::OsRng);
    maat_proto::horus::Lockbox::seal(
        maat_proto::FileId(file),
        version,
        maat_proto::encrypted::file_shape(),
        &maat_crypto::Secret32::from_bytes([9; 32]),
        &anyone.public_key(),
        &anyone.public_key(),
        &mut maat_crypto::OsRng,
    )
    .unwrap()
    .encode()
}

#[test]
fn a_file_created_encrypted_takes_its_first_lockbox_with_its_size_from_its_owner_only() {
    let cluster = Cluster::start_encrypting(2, &[]);
    cluster.add_user("alice", "alice-pass-1", None);
    cluster.add_user("bob", "bob-pass-123", None);
    let mut alice = cluster.user_client("alice", "alice-pass-1");
    let mut bob = cluster.user_client("bob", "bob-pass-123");
    let path = "/home/alice/p";
    let open_sealed = |c: &mut Client| {
        let answer = c.mds_call(MdsRequest::OpenSealed {
            path: path.into(),
            access: Access::ReadWrite,
            create: Some(0o666),
        });
        match answer.unwrap() {
            MdsResponse::Opened {
                stat, capability, ..
            } => (stat, capability),
            other => panic!("expected an open, got {other:?}"),
        }
    };
    // Created encrypted, its lockbox to come: under the encrypted files' method from the
    // first write, and nothing readable yet.
    let (stat, capability) = open_sealed(&mut alice);
    let id = stat.id;
    assert!(stat.encrypted && stat.crypt.as_ref().unwrap().is_pending());
    assert_eq!(method_of(&capability), Protection::CmdRsp);
    assert_eq!(get(&mut alice, path).unwrap(), b"");
    assert_eq!(get(&mut bob, path).unwrap(), b"");
    let with_lockbox = |size: u64, lockbox: Vec<u8>| MdsRequest::SetSizeLockbox {
        path: path.into(),
        file: id,
        size,
        written: vec![(0, 1, 7)],
        lockbox,
    };
    // Bob may write the file (0666) but it is not his; a size without the lockbox, a box
    // of another file or of a later tree, garbage: all refused, and nothing changed.
    assert_eq!(
        code(bob.mds_call(with_lockbox(10, lockbox_naming(id, 1)))),
        ErrorCode::PermissionDenied
    );
    for request in [
        MdsRequest::SetSize {
            path: path.into(),
            file: id,
            size: 10,
        },
        MdsRequest::SetSizeSealed {
            path: path.into(),
            file: id,
            size: 10,
            tree_version: 1,
            written: vec![(0, 1, 7)],
        },
    ] {
        assert_eq!(code(alice.mds_call(request)), ErrorCode::InvalidArgument);
    }
    for (lockbox, expected) in [
        (lockbox_naming(id + 1, 1), ErrorCode::WrongFile),
        (lockbox_naming(id, 2), ErrorCode::WrongFile),
        (vec![1, 2, 3], ErrorCode::Malformed),
    ] {
        assert_eq!(code(alice.mds_call(with_lockbox(10, lockbox))), expected);
    }
    assert_eq!(alice.stat(path).unwrap().size, 0);
    assert_eq!(
        code(alice.keys_grant(path, &["bob".to_string()], &[(0, 1 << 20)])),
        ErrorCode::InvalidArgument
    );

    // The owner's next put finishes it (a writer that stopped before its size leaves a
    // file its owner can always put again) and it reads back, for Bob too (his read
    // open of the file while it was being written was not kept).
    let data = content(3, 200_000);
    put(&mut alice, path, &data, None);
    assert_eq!(get(&mut alice, path).unwrap(), data);
    assert_eq!(get(&mut bob, path).unwrap(), data);
    assert!(!alice
        .open(path, Access::Read, None)
        .unwrap()
        .stat
        .crypt
        .unwrap()
        .is_pending());
    // A second first lockbox (a writer that lost the race, or a replay) is refused, of
    // an empty file too.
    assert_eq!(
        code(alice.mds_call(with_lockbox(10, lockbox_naming(id, 1)))),
        ErrorCode::AlreadyExists
    );
    assert_eq!(get(&mut alice, path).unwrap(), data);
    let empty = "/home/alice/empty";
    put(&mut alice, empty, b"", None);
    let opened = alice.open(empty, Access::Read, None).unwrap();
    let first = opened.stat.crypt.unwrap().lockbox;
    assert_eq!(
        code(alice.mds_call(MdsRequest::SetSizeLockbox {
            path: empty.into(),
            file: opened.stat.id,
            size: 0,
            written: Vec::new(),
            lockbox: lockbox_naming(opened.stat.id, 1),
        })),
        ErrorCode::AlreadyExists
    );
    let now = alice.open(empty, Access::ReadWrite, None).unwrap();
    assert_eq!(now.stat.crypt.unwrap().lockbox, first);

    // A put of a new encrypted file costs as many requests as a plaintext one (an open
    // and a size update at the MDS, the stripes at the OSDs), counted by the client
    // (the daemons' counters also count each other's requests).
    let requests = |c: &Client| c.client_stats().requests;
    let mds_requests = |c: &mut Client, name: &str, encrypt: bool| {
        let before = requests(c);
        put(c, name, &data, Some(encrypt));
        let sent = requests(c) - before;
        assert_eq!(c.stat(name).unwrap().encrypted, encrypt);
        sent
    };
    // (Each kind's first put also reserves ids for the next 63: counted after that.)
    mds_requests(&mut alice, "/home/alice/plain0", false);
    mds_requests(&mut alice, "/home/alice/sealed0", true);
    let plain = mds_requests(&mut alice, "/home/alice/plain", false);
    let sealed = mds_requests(&mut alice, "/home/alice/sealed", true);
    assert_eq!(
        sealed, plain,
        "requests of an encrypted put and of a plaintext one"
    );

    // A file handle opened for writing without create finishes a file whose lockbox is
    // to come, as a put does.
    let handled = "/home/alice/h";
    alice
        .mds_call(MdsRequest::OpenSealed {
            path: handled.into(),
            access: Access::ReadWrite,
            create: Some(0o644),
        })
        .unwrap();
    let write = maat_client::OpenFlags {
        write: true,
        create: None,
        exclusive: false,
        truncate: false,
    };
    let mut handle = alice.open_file(handled, write).unwrap();
    alice.write_file_at(&mut handle, 0, b"by handle").unwrap();
    alice.flush_file(&mut handle).unwrap();
    assert_eq!(get(&mut bob, handled).unwrap(), b"by handle");

    // A file a handle creates costs the MDS one request more than a put of a new file
    // (an open that creates it, and its lockbox with the size, where the put stores
    // under a reserved id and links once), as a plaintext one does; one closed
    // unwritten is finished too.
    let create = maat_client::OpenFlags {
        create: Some(0o644),
        ..write
    };
    let handle_requests = |c: &mut Client, name: &str, data: &[u8]| {
        let before = requests(c);
        let mut handle = c.open_file(name, create).unwrap();
        if !data.is_empty() {
            c.write_file_at(&mut handle, 0, data).unwrap();
        }
        c.flush_file(&mut handle).unwrap();
        requests(c) - before
    };
    let by_handle = handle_requests(&mut alice, "/home/alice/hs", b"sealed by handle");
    assert_eq!(
        by_handle,
        plain + 1,
        "requests of an encrypted file a handle made and of a put"
    );
    assert_eq!(
        get(&mut bob, "/home/alice/hs").unwrap(),
        b"sealed by handle"
    );
    handle_requests(&mut alice, "/home/alice/empty-h", b"");
    let opened = alice
        .open("/home/alice/empty-h", Access::Read, None)
        .unwrap();
    assert!(opened.stat.encrypted && !opened.stat.crypt.unwrap().is_pending());
}

/// A reader that fails at once.
struct Failing;

impl std::io::Read for Failing {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("the input failed"))
    }
}

#[test]
fn a_put_that_fails_before_recording_its_lockbox_leaves_no_key_to_seal_a_later_write() {
    let cluster = Cluster::start_encrypting(1, &[]);
    let mut first = cluster.admin_client();
    let mut second = cluster.admin_client();
    // The first put of /f makes a root key and fails before its lockbox is recorded;
    // another client of the same user then stores /f under a lockbox of its own.
    assert!(first
        .put_with(&mut Failing, 100, "/f", None, &mut |_| {})
        .is_err());
    put(&mut second, "/f", b"from the second client", None);
    // The first client writes /f again: it must seal under the file's lockbox (the
    // second's), not the root key of its failed put, or nobody else could read it.
    put(&mut first, "/f", b"from the first client", None);
    second.forget_file_keys();
    assert_eq!(get(&mut second, "/f").unwrap(), b"from the first client");
}

/// SPEC M5 for a file a put creates encrypted: the put's open, with the crypt record the
/// MDS recorded (first lockbox, the generations written) and the keys the writer made,
/// serves its reads: no MDS open, no KDS request. Were the record the client keeps wrong,
/// the read would fail its blocks and open again at the MDS, which the miss count shows.
#[test]
fn a_writer_reads_back_its_new_encrypted_file_without_the_mds_or_the_kds() {
    let cluster = Cluster::start_encrypting(2, &[]);
    cluster.add_user("alice", "alice-pass-1", None);
    let mut alice = cluster.user_client("alice", "alice-pass-1");
    let path = "/home/alice/e";
    let data = content(7, 1_100_000);
    put(&mut alice, path, &data, Some(true));
    assert!(alice.stat(path).unwrap().encrypted);
    let grants = kds_counter(&mut alice, "kds 1", "grants").unwrap();
    let before = alice.client_stats();
    assert_eq!(get(&mut alice, path).unwrap(), data);
    let after = alice.client_stats();
    assert_eq!(
        after.capability_cache_hits,
        before.capability_cache_hits + 1
    );
    assert_eq!(
        after.capability_cache_misses,
        before.capability_cache_misses
    );
    assert_eq!(kds_counter(&mut alice, "kds 1", "grants").unwrap(), grants);
    // A rewrite of the now existing file is opened again at the MDS for reading.
    let shorter = content(8, 5000);
    put(&mut alice, path, &shorter, None);
    let before = alice.client_stats();
    assert_eq!(get(&mut alice, path).unwrap(), shorter);
    assert_eq!(
        alice.client_stats().capability_cache_misses,
        before.capability_cache_misses + 1
    );
}

/// `maat put` encrypts new files by default on a cluster that does (SPEC H3), and
/// `--no-encrypt` stores one in clear; `maat stat` says which.
#[test]
fn the_cli_encrypts_by_default_and_no_encrypt_opts_out() {
    let cluster = Cluster::start_encrypting(1, &[]);
    let home = cluster.admin_home();
    let (sealed, clear) = (b"sealed bytes, ".repeat(20), b"clear bytes, ".repeat(20));
    cluster.ok(&home, &["put", "-", "/sealed"], Some(&sealed));
    cluster.ok(&home, &["put", "--no-encrypt", "-", "/clear"], Some(&clear));
    let stat = |path: &str| String::from_utf8(cluster.ok(&home, &["stat", path], None)).unwrap();
    assert!(
        stat("/sealed").contains("encrypted: yes"),
        "{}",
        stat("/sealed")
    );
    assert!(
        stat("/clear").contains("encrypted: no"),
        "{}",
        stat("/clear")
    );
    assert_eq!(cluster.ok(&home, &["cat", "/sealed"], None), sealed);
    assert_eq!(cluster.ok(&home, &["cat", "/clear"], None), clear);
    let osd_bytes = stored_bytes(&cluster.data(), "osd-");
    assert!(
        leaked(&clear, &osd_bytes) > 0,
        "the clear file is on disk in clear"
    );
    assert_eq!(leaked(&sealed, &osd_bytes), 0, "the sealed one is not");
}

/// Issue 40, item 5: `maat put --encrypt` into a file another user created (or one in
/// clear that holds data) stored plaintext, silently. It is refused, before anything is
/// written, and says why.
#[test]
fn put_encrypt_that_cannot_be_honoured_is_refused_and_writes_nothing() {
    let cluster = Cluster::start_encrypting(1, &[]);
    let admin = cluster.admin_home();
    cluster.add_user("alice", "alice passphrase", None);
    cluster.add_user("bob", "bob passphrase", None);
    let (alice, bob) = (cluster.home("alice"), cluster.home("bob"));
    cluster.ok(
        &alice,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice passphrase\n"),
    );
    cluster.ok(
        &bob,
        &["login", "bob", "--passphrase-stdin"],
        Some(b"bob passphrase\n"),
    );
    cluster.ok(&admin, &["mkdir", "/shared"], None);
    cluster.ok(&admin, &["chmod", "777", "/shared"], None);
    let original = b"alice's words, in clear".to_vec();
    cluster.ok(
        &alice,
        &["put", "--no-encrypt", "-", "/shared/f"],
        Some(&original),
    );
    cluster.ok(&alice, &["chmod", "666", "/shared/f"], None);
    // Bob asks for encryption of alice's file: refused, the file untouched.
    let said = cluster.fails(
        &bob,
        &["put", "--encrypt", "-", "/shared/f"],
        Some(b"bob's secret"),
    );
    assert!(
        said.contains("cannot encrypt") && said.contains("belongs to alice"),
        "{said}"
    );
    assert_eq!(cluster.ok(&alice, &["cat", "/shared/f"], None), original);
    // Alice's own file in clear with data: refused too.
    let said = cluster.fails(
        &alice,
        &["put", "--encrypt", "-", "/shared/f"],
        Some(b"new"),
    );
    assert!(said.contains("holds data"), "{said}");
    assert_eq!(cluster.ok(&alice, &["cat", "/shared/f"], None), original);
    let stat = String::from_utf8(cluster.ok(&alice, &["stat", "/shared/f"], None)).unwrap();
    assert!(stat.contains("encrypted: no"), "{stat}");
    // Without the flag the write goes through as before (the file keeps what it is; read
    // by bob, whose client kept no open of the file's earlier size), and --encrypt of a
    // new file encrypts it.
    cluster.ok(&bob, &["put", "-", "/shared/f"], Some(b"bob's update"));
    assert_eq!(
        cluster.ok(&bob, &["cat", "/shared/f"], None),
        b"bob's update"
    );
    cluster.ok(
        &bob,
        &["put", "--encrypt", "-", "/shared/g"],
        Some(b"sealed"),
    );
    let stat = String::from_utf8(cluster.ok(&bob, &["stat", "/shared/g"], None)).unwrap();
    assert!(stat.contains("encrypted: yes"), "{stat}");
}
