//! SPEC M10 against real daemons: a job's lead opens files once (`openg`) and hands the
//! job's key to participants, who read and write as the lead allowed without opening
//! anything; someone holding the handle but not the key is refused, a proof made for
//! another session is refused, a participant cannot renew, access ends when the lead
//! stops renewing (and comes back when it renews), when the lead loses access (M7, no
//! message to any OSD) and at once when the job is ended (M9).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, counter, Cluster};
use maat_client::{Client, JobHandle, Opened};
use maat_crypto::sign::SigningKey;
use maat_proto::delegation::{self, computation_key_hash, KeyLifetimeToken};
use maat_proto::msg::{
    Access, ErrorCode, MdsRequest, ObjectId, OsdCommand, OsdRequest, DATA_PARTITION,
};
use maat_proto::session::SessionKey;
use maat_proto::signed::Unverified;
use maat_proto::{OsdId, UnixMillis, UserId};
use std::time::Duration;

fn read_all(c: &mut Client, opened: &Opened) -> Result<Vec<u8>, maat_client::ClientError> {
    let mut out = Vec::new();
    c.get_opened("job file", opened, &mut out, &mut |_| {})?;
    Ok(out)
}

fn lifetime_expiry(lifetime: &[u8]) -> u64 {
    Unverified::<KeyLifetimeToken>::decode(lifetime)
        .unwrap()
        .unverified_body()
        .expiry
        .0
}

/// The session key a proof is sealed under and names, as a test builds it by hand.
fn session_key(session_id: [u8; 16], who: &Client, osd: OsdId, secret: [u8; 32]) -> SessionKey {
    SessionKey {
        session_id,
        user: UserId(who.uid().unwrap()),
        osd,
        expiry: UnixMillis(u64::MAX),
        key: maat_crypto::Secret32::from_bytes(secret),
    }
}

/// Sleeps until protocol time `t` (plus a margin) as `c` sees it.
fn sleep_past(c: &Client, t: u64) {
    let now = c.protocol_now();
    if t > now {
        std::thread::sleep(Duration::from_millis(t - now + 300));
    }
}

/// A job led by alice on `path`, joined by bob: (key, lifetime, bob's handle).
fn job_for_bob(
    alice: &mut Client,
    bob: &mut Client,
    path: &str,
    access: Access,
) -> (SigningKey, Vec<u8>, JobHandle) {
    let (key, lifetime) = alice.job_create().unwrap();
    let (handle, _) = alice.openg(&key, path, access, None).unwrap();
    let bundle = alice
        .job_export("sim", &key, &lifetime, &[handle], "bob")
        .unwrap();
    let (grant, lead) = bob.job_join(&bundle).unwrap();
    assert_eq!(lead, UserId(alice.uid().unwrap()));
    let handle = bob.verify_handle(&grant.handles[0]).unwrap();
    (key, lifetime, handle)
}

#[test]
fn participants_use_the_jobs_key_and_lose_it_with_the_lead() {
    let cluster = Cluster::start(2, &["--capability-lifetime", "3", "--grouping", "none"]);
    for name in ["alice", "bob", "carol"] {
        cluster.add_user(name, &format!("{name} passphrase"), None);
    }
    let admin = cluster.admin_client();
    admin.mkdir("/lab", 0o777, false).unwrap();
    let mut alice = cluster.user_client("alice", "alice passphrase");
    let mut bob = cluster.user_client("bob", "bob passphrase");
    let carol = cluster.user_client("carol", "carol passphrase");
    // Two stripes, so both OSDs serve the job.
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    alice
        .put(
            &mut data.as_slice(),
            data.len() as u64,
            "/lab/private",
            &mut |_| {},
        )
        .unwrap();
    alice.chmod("/lab/private", 0o600).unwrap();
    alice
        .put(&mut &b"old"[..], 3, "/lab/out", &mut |_| {})
        .unwrap();
    alice.chmod("/lab/out", 0o600).unwrap();
    // Bob has no access of his own.
    assert_eq!(
        code(bob.open("/lab/private", Access::Read, None)),
        ErrorCode::PermissionDenied
    );

    let signed = counter(&admin, "mds", "signatures_made");
    let (key, lifetime, handle) = job_for_bob(&mut alice, &mut bob, "/lab/private", Access::Read);
    // JobCreate signs the key's lifetime, openg the capability and the handle.
    assert_eq!(counter(&admin, "mds", "signatures_made") - signed, 3);
    let opened = bob.openfh(&handle).unwrap();
    // Reads spread over copies by client (issue 41): bob's spread is set so that his
    // reads of the three stripes ask both OSDs first, as placement did before.
    let (file, partition) = (handle.handle.file.0, opened.stat.partition.clone());
    let spread = (0..64u64)
        .find(|s| {
            bob.set_read_spread(*s);
            let firsts: std::collections::BTreeSet<u64> = (0..3)
                .map(|stripe| bob.reads_ask(&partition, file, stripe).unwrap()[0])
                .collect();
            firsts.len() == 2
        })
        .expect("a spread whose reads ask both OSDs");
    bob.set_read_spread(spread);
    // Sessions first (their offers cost two verifications each, delegation or not).
    for osd in bob.cluster_map().unwrap().osds {
        bob.osd_session(osd.id).unwrap();
    }
    let proofs_before = counter(&admin, "osd", "proofs_verified");
    let verified = counter(&admin, "osd", "signatures_verified");
    let signed = counter(&admin, "mds", "signatures_made");
    assert_eq!(read_all(&mut bob, &opened).unwrap(), data);
    assert_eq!(read_all(&mut bob, &opened).unwrap(), data);
    // One proof per OSD session, not per request; per OSD three verifications in all
    // (lifetime token, proof, capability) and nothing asked of the MDS.
    assert_eq!(counter(&admin, "osd", "proofs_verified") - proofs_before, 2);
    assert_eq!(counter(&admin, "osd", "signatures_verified") - verified, 6);
    assert_eq!(counter(&admin, "mds", "signatures_made") - signed, 0);
    // Read-only: a write under the handle is refused by the OSD.
    let object = ObjectId {
        partition: DATA_PARTITION,
        file: handle.handle.file.0,
        stripe: 0,
    };
    let osd = bob.place(object.file, 0).unwrap();
    let write = OsdRequest {
        capability: handle.handle.capability.clone(),
        command: OsdCommand::Write {
            object,
            offset: 0,
            data: b"x".to_vec(),
            replace: false,
        },
    };
    assert_eq!(code(bob.osd_call(osd, write)), ErrorCode::PermissionDenied);

    // Carol holds the handle and the lifetime token, not the key.
    let read = OsdRequest {
        capability: handle.handle.capability.clone(),
        command: OsdCommand::Read {
            object,
            offset: 0,
            length: 10,
        },
    };
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &read)),
        ErrorCode::ProofRequired
    );
    let (sid, secret) = carol.osd_session(osd).unwrap();
    let secret = *secret.expose();
    let carol_session = session_key(sid, &carol, OsdId(osd), secret);
    let own_key = SigningKey::generate(&mut maat_crypto::OsRng);
    let forged = delegation::make_proof(&own_key, &carol_session, &mut maat_crypto::OsRng).unwrap();
    let supply = |proof: Vec<u8>| OsdRequest {
        capability: Vec::new(),
        command: OsdCommand::SupplyProof {
            lifetime: lifetime.clone(),
            proof,
        },
    };
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &supply(forged))),
        ErrorCode::BadSignature
    );
    // A proof made with the right key for bob's session does not serve in carol's.
    let (bob_sid, bob_secret) = bob.osd_session(osd).unwrap();
    let bob_secret = *bob_secret.expose();
    let bob_session = session_key(bob_sid, &bob, OsdId(osd), bob_secret);
    let bobs = delegation::make_proof(&key, &bob_session, &mut maat_crypto::OsRng).unwrap();
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &supply(bobs))),
        ErrorCode::BadMac
    );
    // Sealed under carol's own session key but naming bob's session, or another OSD.
    let renamed = session_key(bob_sid, &carol, OsdId(osd), secret);
    let misnamed = delegation::make_proof(&key, &renamed, &mut maat_crypto::OsRng).unwrap();
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &supply(misnamed))),
        ErrorCode::WrongRecipient
    );
    let elsewhere = session_key(sid, &carol, OsdId(osd + 100), secret);
    let misaddressed = delegation::make_proof(&key, &elsewhere, &mut maat_crypto::OsRng).unwrap();
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &supply(misaddressed))),
        ErrorCode::WrongRecipient
    );
    assert_eq!(
        code(carol.osd_call_unprepared(osd, &read)),
        ErrorCode::ProofRequired
    );
    // Only the lead opens files for the job.
    assert_eq!(
        code(bob.openg(&key, "/lab/private", Access::Read, None)),
        ErrorCode::PermissionDenied
    );

    // Only the lead renews.
    assert_eq!(code(bob.job_renew(&key)), ErrorCode::PermissionDenied);
    // The lead stops renewing: access ends with the key's lifetime.
    sleep_past(&bob, lifetime_expiry(&lifetime));
    assert_eq!(
        code(read_all(&mut bob, &opened)),
        ErrorCode::CapabilityExpired
    );
    // The lead renews: the participant's client fetches the new lifetime itself.
    alice.job_renew(&key).unwrap();
    assert_eq!(read_all(&mut bob, &opened).unwrap(), data);
    // The lead ends the job: refused at once, everywhere.
    let hash = computation_key_hash(&key.verifying_key().to_bytes());
    let ended = alice.job_end(&hash).unwrap();
    assert_eq!((ended.osds_told, ended.osds), (2, 2));
    assert_eq!(code(read_all(&mut bob, &opened)), ErrorCode::Revoked);
    assert_eq!(code(alice.job_renew(&key)), ErrorCode::Revoked);
    // Only the lead or the administrator ends a job.
    let (key2, _, _) = job_for_bob(&mut alice, &mut bob, "/lab/private", Access::Read);
    let hash2 = computation_key_hash(&key2.verifying_key().to_bytes());
    assert_eq!(code(bob.job_end(&hash2)), ErrorCode::PermissionDenied);
    admin.job_end(&hash2).unwrap();

    // Writes through a write handle, and the size recorded by the participant.
    let (_, _, out) = job_for_bob(&mut alice, &mut bob, "/lab/out", Access::ReadWrite);
    let out_opened = bob.openfh(&out).unwrap();
    let written = b"results from bob".to_vec();
    bob.put_opened(
        &out_opened,
        &mut written.as_slice(),
        written.len() as u64,
        None,
        &mut |_| {},
    )
    .unwrap();
    bob.set_size_by_handle(&out, written.len() as u64).unwrap();
    let mut back = Vec::new();
    alice.get("/lab/out", &mut back, &mut |_| {}).unwrap();
    assert_eq!(back, written);
    assert_eq!(alice.stat("/lab/out").unwrap().size, written.len() as u64);
    // A handle's size needs the job's key, not just the handle.
    let forged = own_key.sign(b"any size").0.to_vec();
    assert_eq!(
        code(carol.mds_call(MdsRequest::SetSizeByHandle {
            handle: out.bytes.clone(),
            size: 1,
            proof: forged,
        })),
        ErrorCode::BadSignature
    );
    assert_eq!(alice.stat("/lab/out").unwrap().size, written.len() as u64);
}

/// A one-OSD cluster where alice leads a job reading her private `/lab/f` and bob, who
/// may not read it himself, joined it and read it once.
struct OneFileJob {
    cluster: Cluster,
    admin: Client,
    alice: Client,
    bob: Client,
    key: SigningKey,
    lifetime: Vec<u8>,
    opened: Opened,
}

fn one_file_job(extra: &[&str], content: &[u8]) -> OneFileJob {
    let args: Vec<&str> = ["--grouping", "none"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let cluster = Cluster::start(1, &args);
    for name in ["alice", "bob"] {
        cluster.add_user(name, &format!("{name} passphrase"), None);
    }
    let admin = cluster.admin_client();
    admin.mkdir("/lab", 0o777, false).unwrap();
    let mut alice = cluster.user_client("alice", "alice passphrase");
    let mut bob = cluster.user_client("bob", "bob passphrase");
    alice
        .put(
            &mut &content[..],
            content.len() as u64,
            "/lab/f",
            &mut |_| {},
        )
        .unwrap();
    alice.chmod("/lab/f", 0o600).unwrap();
    let (key, lifetime, handle) = job_for_bob(&mut alice, &mut bob, "/lab/f", Access::Read);
    let opened = bob.openfh(&handle).unwrap();
    assert_eq!(read_all(&mut bob, &opened).unwrap(), content);
    OneFileJob {
        cluster,
        admin,
        alice,
        bob,
        key,
        lifetime,
        opened,
    }
}

#[test]
fn a_lead_who_loses_access_cannot_renew_and_the_job_ends_within_one_lifetime() {
    let OneFileJob {
        cluster: _cluster,
        admin,
        alice,
        mut bob,
        key,
        lifetime,
        opened,
    } = one_file_job(&["--capability-lifetime", "4"], b"secret");
    let revocations = counter(&admin, "osd", "revocations_applied");
    // The lead loses read access: the MDS renews nothing, and tells no OSD.
    alice.chmod("/lab/f", 0o200).unwrap();
    sleep_past(&alice, lifetime_expiry(&lifetime) - 1_500);
    assert_eq!(code(alice.job_renew(&key)), ErrorCode::PermissionDenied);
    // Not before the key's expiry...
    assert_eq!(read_all(&mut bob, &opened).unwrap(), b"secret");
    // ...and not after it.
    sleep_past(&bob, lifetime_expiry(&lifetime));
    assert_eq!(
        code(read_all(&mut bob, &opened)),
        ErrorCode::CapabilityExpired
    );
    assert_eq!(counter(&admin, "osd", "revocations_applied"), revocations);
}

#[test]
fn jobs_survive_an_mds_restart_keys_are_never_taken_over_and_revoking_the_lead_ends_them() {
    let OneFileJob {
        mut cluster,
        admin,
        alice,
        mut bob,
        key,
        opened,
        ..
    } = one_file_job(&[], b"records");
    let take_over = MdsRequest::JobCreate {
        computation_key: key.verifying_key().to_bytes(),
    };
    assert_eq!(
        code(bob.mds_call(take_over.clone())),
        ErrorCode::AlreadyExists
    );
    cluster.restart();
    // The OSD forgot the proof; the client proves again. The MDS kept the job.
    assert_eq!(read_all(&mut bob, &opened).unwrap(), b"records");
    assert_eq!(code(bob.mds_call(take_over)), ErrorCode::AlreadyExists);
    alice.job_renew(&key).unwrap();
    // Revoking the lead cuts the participants off at once.
    let r = admin.revoke(&["alice".to_string()], &[]).unwrap();
    assert_eq!(code(read_all(&mut bob, &opened)), ErrorCode::Revoked);
    // The job was ended with the revocation: ending it again signs nothing.
    let hash = computation_key_hash(&key.verifying_key().to_bytes());
    assert_eq!(r.notice.computation_keys, vec![hash]);
    assert_eq!(code(admin.job_end(&hash)), ErrorCode::InvalidArgument);
}

/// A cluster (encrypting new files or not) with `/lab` open to all, and the users `names`
/// added and logged in through the CLI, each in a home of its own.
fn lab(encrypting: bool, names: &[&str]) -> (Cluster, Vec<std::path::PathBuf>) {
    let cluster = if encrypting {
        Cluster::start_encrypting(2, &[])
    } else {
        Cluster::start(2, &[])
    };
    for name in names {
        cluster.add_user(name, &format!("{name} passphrase"), None);
    }
    cluster.ok(&cluster.admin_home(), &["mkdir", "/lab"], None);
    cluster.ok(&cluster.admin_home(), &["chmod", "777", "/lab"], None);
    let homes = names
        .iter()
        .map(|n| {
            let home = cluster.home(n);
            cluster.ok(
                &home,
                &["login", n, "--passphrase-stdin"],
                Some(format!("{n} passphrase\n").as_bytes()),
            );
            home
        })
        .collect();
    (cluster, homes)
}

#[test]
fn the_job_commands_share_a_private_file_with_a_participant() {
    let (cluster, homes) = lab(false, &["alice", "bob", "carol"]);
    let (alice, bob, carol) = (&homes[0], &homes[1], &homes[2]);
    cluster.ok(alice, &["put", "-", "/lab/input"], Some(b"input data"));
    cluster.ok(alice, &["chmod", "600", "/lab/input"], None);
    cluster.ok(alice, &["job", "create", "sim"], None);
    cluster.ok(alice, &["job", "open", "sim", "/lab/input"], None);
    cluster.ok(
        alice,
        &["job", "open", "sim", "/lab/output", "--create"],
        None,
    );
    let bundle = cluster.data().join("sim.bundle");
    let bundle = bundle.to_str().unwrap();
    cluster.ok(
        alice,
        &["job", "export", "sim", "--to", "bob", "-o", bundle],
        None,
    );
    // Sealed to bob: carol cannot join with it.
    let refused = cluster.fails(carol, &["job", "join", bundle], None);
    assert!(refused.contains("another user"), "{refused}");
    cluster.ok(bob, &["job", "join", bundle], None);
    let listed = String::from_utf8(cluster.ok(bob, &["job", "ls"], None)).unwrap();
    assert!(listed.contains("sim  participant"), "{listed}");
    assert!(listed.contains("/lab/output  read-write"), "{listed}");
    // Bob cannot read the file himself, only through the job.
    cluster.fails(bob, &["cat", "/lab/input"], None);
    let read = cluster.ok(bob, &["job", "get", "sim", "/lab/input", "-"], None);
    assert_eq!(read, b"input data");
    let local = cluster.data().join("bob-output");
    std::fs::write(&local, b"bob's results").unwrap();
    cluster.ok(
        bob,
        &["job", "put", "sim", local.to_str().unwrap(), "/lab/output"],
        None,
    );
    assert_eq!(
        cluster.ok(alice, &["cat", "/lab/output"], None),
        b"bob's results"
    );
    let refused = cluster.fails(bob, &["job", "renew", "sim"], None);
    assert!(refused.contains("only the job's lead"), "{refused}");
    cluster.ok(alice, &["job", "renew", "sim"], None);
    cluster.ok(alice, &["job", "end", "sim"], None);
    let refused = cluster.fails(bob, &["job", "get", "sim", "/lab/input", "-"], None);
    assert!(refused.contains("revoked"), "{refused}");
    // The job file holds the key: owner only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(bob.join("jobs/sim.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "job file mode {mode:o}");
}

/// SPEC M10 with H3–H4: a job shares an encrypted file for reading. The participant's
/// `openfh` asks the MDS for the file's crypt record by handle (proving the job's key)
/// and its reads ask the KDS for keys with the job's proof; the file stays sealed on the
/// OSDs. A job may not open an encrypted file for writing, and once the job ends the
/// participant is refused.
#[test]
fn a_job_shares_an_encrypted_file_for_reading() {
    let (cluster, homes) = lab(true, &["alice", "bob"]);
    let (alice, bob) = (&homes[0], &homes[1]);
    let secret = common::content(7, 1_500_000);
    cluster.ok(alice, &["put", "-", "/lab/secret"], Some(&secret));
    cluster.ok(alice, &["chmod", "600", "/lab/secret"], None);
    let stat = String::from_utf8(cluster.ok(alice, &["stat", "/lab/secret"], None)).unwrap();
    assert!(stat.contains("encrypted: yes"), "{stat}");
    cluster.ok(alice, &["job", "create", "sim"], None);
    cluster.ok(alice, &["job", "open", "sim", "/lab/secret"], None);
    let refused = cluster.fails(
        alice,
        &["job", "open", "sim", "/lab/secret", "--write"],
        None,
    );
    assert!(refused.contains("reading only"), "{refused}");
    let bundle = cluster.data().join("sim.bundle");
    let bundle = bundle.to_str().unwrap();
    cluster.ok(
        alice,
        &["job", "export", "sim", "--to", "bob", "-o", bundle],
        None,
    );
    cluster.ok(bob, &["job", "join", bundle], None);
    cluster.fails(bob, &["cat", "/lab/secret"], None);
    let admin = cluster.admin_client();
    let (grants, proofs) = (
        common::counter(&admin, "kds", "grants"),
        common::counter(&admin, "kds", "job_proofs_verified"),
    );
    let read = cluster.ok(bob, &["job", "get", "sim", "/lab/secret", "-"], None);
    assert!(
        read == secret,
        "bob read {} bytes, not the file",
        read.len()
    );
    assert!(common::counter(&admin, "kds", "grants") > grants);
    assert_eq!(
        common::counter(&admin, "kds", "job_proofs_verified"),
        proofs + 1
    );
    cluster.ok(alice, &["job", "end", "sim"], None);
    let refused = cluster.fails(bob, &["job", "get", "sim", "/lab/secret", "-"], None);
    assert!(
        refused.contains("revoked") || refused.contains("ended"),
        "{refused}"
    );
}

/// SPEC H6 per job: the lead opens an encrypted file for the job by ranges, and each
/// participant decrypts only what the file's owner granted that participant (here the
/// slice policy: member i of n reads the i-th slice); a participant with no grant gets
/// nothing, and a granted participant's full read or read of another's slice is refused.
#[test]
fn a_job_opened_by_ranges_gives_each_member_its_slice_only() {
    let (cluster, homes) = lab(true, &["alice", "bob", "carol", "dave"]);
    let (alice, bob, carol, dave) = (&homes[0], &homes[1], &homes[2], &homes[3]);
    let data = common::content(9, 2 << 20);
    cluster.ok(alice, &["put", "-", "/lab/data"], Some(&data));
    cluster.ok(alice, &["chmod", "600", "/lab/data"], None);
    cluster.ok(
        alice,
        &[
            "keys",
            "grant",
            "/lab/data",
            "--to",
            "bob,carol",
            "--slices",
        ],
        None,
    );
    cluster.ok(alice, &["job", "create", "sim"], None);
    let opened = cluster.ok(
        alice,
        &["job", "open", "sim", "/lab/data", "--ranges"],
        None,
    );
    let _ = opened;
    for (name, home) in [("bob", bob), ("carol", carol), ("dave", dave)] {
        let bundle = cluster.data().join(format!("sim.{name}"));
        let bundle = bundle.to_str().unwrap();
        cluster.ok(
            alice,
            &["job", "export", "sim", "--to", name, "-o", bundle],
            None,
        );
        cluster.ok(home, &["job", "join", bundle], None);
    }
    let half = 1 << 20;
    let get = |home, range: &str| {
        let args = ["job", "get", "sim", "/lab/data", "-", "--range", range];
        cluster.maat(home, &args, None)
    };
    let bob_half = get(bob, "0..1MiB");
    assert!(
        bob_half.status.success(),
        "{}",
        String::from_utf8_lossy(&bob_half.stderr)
    );
    assert!(bob_half.stdout == data[..half], "bob's slice");
    let carol_half = get(carol, "1MiB..2MiB");
    assert!(
        carol_half.status.success(),
        "{}",
        String::from_utf8_lossy(&carol_half.stderr)
    );
    assert!(carol_half.stdout == data[half..], "carol's slice");
    // Bob asks for carol's slice, or the whole file: his client holds keys for his
    // permit's ranges only (the KDS refuses nodes outside them: `crates/kds/tests/jobs.rs`)
    // and names the first block it cannot open.
    let refused = get(bob, "1MiB..2MiB");
    assert!(!refused.status.success());
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(
        e.contains("block 16 (bytes 1048576..") && e.contains("no key granted"),
        "{e}"
    );
    let e = cluster.fails(bob, &["job", "get", "sim", "/lab/data", "-"], None);
    assert!(e.contains("no key granted"), "{e}");
    // Dave is in the job with no grant: no permit, no key.
    let refused = get(dave, "0..1MiB");
    assert!(!refused.status.success());
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(e.contains("none is granted to you"), "{e}");
}
