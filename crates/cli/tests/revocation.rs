//! SPEC M9 against real daemons: `Revoke` makes every OSD refuse a user or a capability
//! at once (pushed before the administrator gets the answer), an OSD that restarts learns
//! it from the MDS before it serves again, a forged notice is refused, only the
//! administrator may revoke, a flood of revocations is bounded, and every OSD's table
//! empties once what it revoked would have expired anyway. The KDS refuses keys to what
//! was revoked the same way, and learns the notices in force from the MDS (which lists
//! them to holders of the KDS key only) after a restart.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, counter, Cluster};
use maat_client::{Client, ClientError, Opened};
use maat_proto::capability::Capability;
use maat_proto::msg::{
    self, Access, ErrorCode, MdsRequest, MdsResponse, OsdPlainRequest, OsdPlainResponse, WireError,
};
use maat_proto::revocation::RevocationNotice;
use maat_proto::signed::Unverified;
use maat_proto::wire::FrameType;
use maat_proto::{CapabilityId, UnixMillis, UserId};
use std::time::{Duration, Instant};

/// A capability straight from the MDS (not the client's own cache).
fn fresh_open(c: &mut Client, path: &str) -> Result<Opened, ClientError> {
    match c.mds_call(MdsRequest::Open {
        path: path.into(),
        access: Access::Read,
        create: None,
    })? {
        MdsResponse::Opened {
            stat, capability, ..
        } => Ok(Opened {
            stat,
            capability,
            mds_cached: false,
        }),
        other => panic!("{other:?}"),
    }
}

fn id_of(opened: &Opened) -> u64 {
    Unverified::<Capability>::decode(&opened.capability)
        .unwrap()
        .unverified_body()
        .id
        .0
}

/// `call`'s answer, waiting out a restarting daemon (`NotReady`, or not yet listening).
fn after_restart<T>(mut call: impl FnMut() -> Result<T, ClientError>) -> Result<T, ClientError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = call();
        let waiting = match &r {
            Err(ClientError::Refused(e)) => e.code == ErrorCode::NotReady,
            Err(ClientError::Net { .. }) => true,
            _ => false,
        };
        if !waiting || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads stripe 0, waiting out a restarting OSD.
fn read_after_restart(c: &mut Client, opened: &Opened) -> Result<Option<Vec<u8>>, ClientError> {
    after_restart(|| c.read_object(opened, 0))
}

#[test]
fn revocation_is_immediate_reaches_restarted_osds_and_lapses_with_the_capabilities() {
    let lifetime = Duration::from_secs(6);
    let cluster = Cluster::start(2, &["--capability-lifetime", "6", "--grouping", "none"]);
    cluster.add_user("alice", "alice passphrase", None);
    cluster.add_user("bob", "bob passphrase", None);
    let admin = cluster.admin_client();
    admin.mkdir("/shared", 0o777, false).unwrap();
    let mut alice = cluster.user_client("alice", "alice passphrase");
    let data = vec![3u8; 50_000];
    alice
        .put(
            &mut &data[..],
            data.len() as u64,
            "/shared/data",
            &mut |_| {},
        )
        .unwrap();
    let mut bob = cluster.user_client("bob", "bob passphrase");
    let bobs = fresh_open(&mut bob, "/shared/data").unwrap();
    let alices = fresh_open(&mut alice, "/shared/data").unwrap();
    assert!(bob.read_object(&bobs, 0).unwrap().is_some());
    assert!(alice.read_object(&alices, 0).unwrap().is_some());

    // Only the administrator revokes.
    assert_eq!(
        code(bob.revoke(&["alice".into()], &[])),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(admin.revoke(&["nobody".into()], &[])),
        ErrorCode::NoSuchUser
    );

    // Revoking bob: when the answer arrives, every OSD refuses him, and the MDS gives him
    // no new capability; alice is untouched.
    let pushed_before = counter(&admin, "osd", "revocations_applied");
    let revocation = admin.revoke(&["bob".into()], &[]).unwrap();
    let revoked_at = Instant::now();
    assert_eq!(revocation.notice.users.len(), 1);
    assert_eq!((revocation.osds_told, revocation.osds), (2, 2));
    assert_eq!(
        counter(&admin, "osd", "revocations_applied") - pushed_before,
        2,
        "pushed to both OSDs before the answer"
    );
    assert_eq!(code(bob.read_object(&bobs, 0)), ErrorCode::Revoked);
    assert_eq!(
        code(fresh_open(&mut bob, "/shared/data")),
        ErrorCode::Revoked
    );
    assert!(alice.read_object(&alices, 0).unwrap().is_some());

    // Revoking one capability: it is refused, a new one for the same user works.
    admin.revoke(&[], &[id_of(&alices)]).unwrap();
    assert_eq!(code(alice.read_object(&alices, 0)), ErrorCode::Revoked);
    let again = fresh_open(&mut alice, "/shared/data").unwrap();
    assert_ne!(id_of(&again), id_of(&alices));
    assert!(alice.read_object(&again, 0).unwrap().is_some());

    // A notice not signed by the MDS, pushed to an OSD by anyone, changes nothing.
    let osd = bob.place(bobs.stat.id, 0).unwrap();
    let address = admin
        .cluster_map()
        .unwrap()
        .osds
        .iter()
        .find(|o| o.id == osd)
        .unwrap()
        .address
        .clone();
    let now = maat_client::local_now();
    let forged = RevocationNotice {
        notice_id: 999,
        start: UnixMillis(now - 1_000),
        expiry: UnixMillis(now + 60_000),
        capability_ids: vec![CapabilityId(id_of(&again))],
        users: vec![UserId(1)],
        computation_keys: vec![],
    };
    let forged =
        maat_proto::signed::sign(forged, &maat_crypto::sign::SigningKey::from_seed(&[4; 32]))
            .encoded()
            .to_vec();
    let mut conn = maat_net::Connection::new(address);
    let (_, answer) = conn
        .call(
            FrameType::Plain,
            &msg::encode(&OsdPlainRequest::Revoke(forged)).unwrap(),
        )
        .unwrap();
    let answer: Result<OsdPlainResponse, WireError> = msg::decode(&answer).unwrap();
    assert_eq!(answer.unwrap_err().code, ErrorCode::BadSignature);
    assert!(alice.read_object(&again, 0).unwrap().is_some());

    // The OSD holding bob's data dies and is restarted: it forgot every notice, and must
    // learn bob's from the MDS before it serves him (or anyone) again.
    let victim = format!("osd-{osd}");
    let old_pid = cluster.pid(&victim);
    std::process::Command::new("kill")
        .args(["-KILL", &old_pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.pid(&victim) == old_pid {
        assert!(Instant::now() < deadline, "{victim} was not restarted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_restart = read_after_restart(&mut bob, &bobs);
    assert!(
        revoked_at.elapsed() < lifetime,
        "the restart took too long to test anything ({:?})",
        revoked_at.elapsed()
    );
    assert_eq!(code(after_restart), ErrorCode::Revoked);
    assert!(read_after_restart(&mut alice, &again).unwrap().is_some());

    // A flood of revocations: the MDS keeps at most 65,536 entries in force (`Busy`
    // after), so no OSD's table grows past that.
    let mut busy = false;
    for round in 0..80u64 {
        let ids: Vec<u64> = (0..1000).map(|i| (round << 32) | i).collect();
        match admin.revoke(&[], &ids) {
            Ok(_) => {}
            Err(ClientError::Refused(e)) if e.code == ErrorCode::Busy => {
                busy = true;
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(busy, "80,000 revocations in force were accepted");
    let held = counter(&admin, "osd", "revoked_entries");
    assert!(
        held > 2 * 60_000 && held <= 2 * 65_536,
        "{held} entries held over two OSDs"
    );

    // Everything lapses once what it revoked would have expired anyway: every OSD's
    // table empties, and bob may have capabilities again.
    let deadline = Instant::now() + lifetime + Duration::from_secs(6);
    loop {
        let held = counter(&admin, "osd", "revoked_entries");
        if held == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{held} entries still held");
        std::thread::sleep(Duration::from_millis(250));
    }
    let renewed = fresh_open(&mut bob, "/shared/data").unwrap();
    assert!(bob.read_object(&renewed, 0).unwrap().is_some());
}

/// Asks for `opened`'s keys, waiting out a restarting KDS.
fn keys_after_restart(c: &mut Client, opened: &Opened) -> Result<usize, ClientError> {
    after_restart(|| c.request_file_keys(opened))
}

#[test]
fn the_kds_refuses_keys_to_revoked_users_and_capabilities_at_once_and_after_a_restart() {
    let cluster = Cluster::start_encrypting(1, &["--grouping", "none"]);
    for user in ["alice", "bob", "carol"] {
        cluster.add_user(user, &format!("{user} passphrase"), None);
    }
    let admin = cluster.admin_client();
    admin.mkdir("/shared", 0o777, false).unwrap();
    let mut alice = cluster.user_client("alice", "alice passphrase");
    let data = vec![5u8; 50_000];
    alice
        .put(
            &mut &data[..],
            data.len() as u64,
            "/shared/data",
            &mut |_| {},
        )
        .unwrap();
    let mut bob = cluster.user_client("bob", "bob passphrase");
    let mut carol = cluster.user_client("carol", "carol passphrase");
    let alices = fresh_open(&mut alice, "/shared/data").unwrap();
    let bobs = fresh_open(&mut bob, "/shared/data").unwrap();
    let carols = fresh_open(&mut carol, "/shared/data").unwrap();
    assert!(alices.stat.crypt.is_some(), "the file is encrypted");
    for (c, opened) in [
        (&mut alice, &alices),
        (&mut bob, &bobs),
        (&mut carol, &carols),
    ] {
        assert!(c.request_file_keys(opened).unwrap() >= 1);
    }
    assert!(
        counter(&admin, "kds", "revocation_checks") >= 1,
        "the KDS learned the revocations in force before it served"
    );
    // Issue 45: the catch-up's signatures are work the daemons did, so their counters
    // include them, and name them (`_background`) so that benches subtract them openly.
    let stats = admin.daemon_stats().unwrap();
    let raw = |daemon: &str, name: &str| {
        stats
            .iter()
            .filter(|d| d.daemon.starts_with(daemon))
            .flat_map(|d| d.counters.iter())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .sum::<u64>()
    };
    let lists = raw("mds", "kds_revocation_lists");
    assert!(lists >= 1);
    assert!(raw("mds", "signatures_made_background") >= lists);
    assert!(raw("mds", "signatures_verified_background") >= lists);
    assert!(raw("mds", "signatures_made") >= raw("mds", "signatures_made_background"));
    assert!(raw("kds", "signatures_made_background") >= raw("kds", "revocation_checks"));
    assert!(raw("kds", "signatures_verified_background") >= raw("kds", "revocation_checks"));
    // The catch-ups and the OSDs' registrations are requests no client made.
    assert!(raw("mds", "requests_background") > lists, "{stats:?}");
    assert!(raw("mds", "requests") > raw("mds", "requests_background"));

    // Bob's capability, then Carol herself: refused keys as soon as the administrator
    // hears the revocation is done (the MDS pushed it), long before any expiry.
    admin.revoke(&[], &[id_of(&bobs)]).unwrap();
    assert_eq!(code(bob.request_file_keys(&bobs)), ErrorCode::Revoked);
    admin.revoke(&["carol".into()], &[]).unwrap();
    assert_eq!(code(carol.request_file_keys(&carols)), ErrorCode::Revoked);
    assert_eq!(counter(&admin, "kds", "revocations_applied"), 2);
    assert!(alice.request_file_keys(&alices).unwrap() >= 1);
    // Bob's next open is a new capability, and it gets keys.
    let bobs_next = fresh_open(&mut bob, "/shared/data").unwrap();
    assert!(bob.request_file_keys(&bobs_next).unwrap() >= 1);

    // The KDS dies and is restarted with nothing: it learns both notices from the MDS
    // before it hands out a key.
    let old_pid = cluster.pid("kds-1");
    common::signal("-KILL", old_pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.pid("kds-1") == old_pid {
        assert!(Instant::now() < deadline, "kds-1 was not restarted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        code(keys_after_restart(&mut bob, &bobs)),
        ErrorCode::Revoked
    );
    assert_eq!(
        code(keys_after_restart(&mut carol, &carols)),
        ErrorCode::Revoked
    );
    assert!(keys_after_restart(&mut alice, &alices).unwrap() >= 1);
    assert!(keys_after_restart(&mut bob, &bobs_next).unwrap() >= 1);

    // The MDS lists the notices in force to holders of the KDS key only, within the
    // clock-skew window, and a KDS takes a list only as the answer to its own request.
    let data_dir = cluster.data();
    let mds_key = maat_server::config::public_key_from_file(
        &data_dir.join("mds/public-keys.toml"),
        "mds_verifying_key",
    )
    .unwrap();
    let kds_with = |seed: &[u8; 32]| {
        maat_kds::Kds::new(maat_kds::KdsSecrets::from_seed(seed).unwrap(), &mds_key).unwrap()
    };
    let genuine =
        kds_with(&maat_server::read_key_file(&data_dir.join("kds-keys/kds.key")).unwrap());
    let impostor = kds_with(&[1; 32]);
    let mds = maat_server::MdsFileConfig::load(&data_dir.join("mds/mds.toml"))
        .unwrap()
        .listen;
    let ask = |kds: &maat_kds::Kds, at: u64| {
        let ask = kds
            .revocations_request(UnixMillis(at), &mut maat_crypto::OsRng)
            .unwrap();
        let (_, answer) = maat_net::Connection::new(mds.clone())
            .call(FrameType::Plain, &ask.payload)
            .unwrap();
        (ask, answer)
    };
    let now = maat_client::local_now();
    let (first, answer) = ask(&genuine, now);
    assert_eq!(
        genuine
            .accept_revocations(&first, &answer, UnixMillis(now))
            .unwrap(),
        2
    );
    let (second, _) = ask(&genuine, now);
    assert_eq!(
        genuine
            .accept_revocations(&second, &answer, UnixMillis(now))
            .unwrap_err()
            .code,
        ErrorCode::BadSignature,
        "an answer to another request"
    );
    let (refused, answer) = ask(&impostor, now);
    assert_eq!(
        impostor
            .accept_revocations(&refused, &answer, UnixMillis(now))
            .unwrap_err()
            .code,
        ErrorCode::AuthenticationFailed
    );
    let (stale, answer) = ask(&genuine, now - 600_000);
    assert_eq!(
        genuine
            .accept_revocations(&stale, &answer, UnixMillis(now))
            .unwrap_err()
            .code,
        ErrorCode::StaleRequest
    );
}
