//! Issue 42 + SPEC T2, T3: two MDS instances over one store, one of them (the leader)
//! managing the OSDs' T10 keys. The other issues T10 credentials too, and they must be
//! under the keys the OSD holds now: after the leader replaced every working key
//! (`maat admin t10 rotate --revoke`), the other instance's next credentials work at the
//! OSD. The OSD is its key state driven by the same functions the daemon runs
//! (`maat_proto::t10_keys`), behind the channel the MDS sends key commands on.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::login::{admin_login, call as in_session};
use common::{call, mds, MemStore, JOIN, T0};

use maat_crypto::mac::{Blake3Mac, MacKey};
use maat_mds::store::{Batch, MetaStore, Op};
use maat_mds::{ChannelError, Mds, T10Channel, ADMIN_UID, LEADER_LEASE};
use maat_proto::msg::{
    Access, Credentials, ErrorCode, MdsRequest, MdsResponse, OsdEntry, OsdPlainRequest,
    OsdPlainResponse, T10Grant,
};
use maat_proto::protection::Protection;
use maat_proto::t10;
use maat_proto::t10_keys::{self, KeyState};
use maat_proto::UnixMillis;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Osds = Arc<Mutex<HashMap<u64, KeyState>>>;

/// The OSDs' side of the key commands: each command applied to a copy of the OSD's
/// state, installed when it succeeds (as the OSD daemon does).
fn channel(osds: Osds) -> Arc<T10Channel> {
    Arc::new(move |osd: &OsdEntry, request: &OsdPlainRequest| {
        let mut all = osds.lock().unwrap();
        let mut next = match all.get(&osd.id) {
            Some(s) => s.clone(),
            None => KeyState::bootstrap(&JOIN, osd.id).unwrap(),
        };
        let refused = |e: maat_proto::ProtoError| ChannelError::Refused(e.into());
        let mut rng = ChaCha20Rng::seed_from_u64(osd.id);
        let answer = match request {
            OsdPlainRequest::SetMasterKey(b) => OsdPlainResponse::MasterKeyAccepted(
                t10_keys::osd_set_master_key(&mut next, b, UnixMillis(T0), &mut rng)
                    .map_err(refused)?
                    .encoded()
                    .to_vec(),
            ),
            OsdPlainRequest::SetKey(b) => OsdPlainResponse::KeySet {
                ack: t10_keys::osd_set_key(&mut next, b).map_err(refused)?.1,
            },
            OsdPlainRequest::SetPolicyTag(b) => OsdPlainResponse::PolicyTagSet {
                ack: t10_keys::osd_set_policy_tag(&mut next, b)
                    .map_err(refused)?
                    .1,
            },
            _ => return Err(ChannelError::BadAnswer("not a key command".into())),
        };
        all.insert(osd.id, next);
        Ok(answer)
    })
}

/// Whether the OSD with `state` takes `grant` (as `OsdCore::credential` checks it): the
/// capability key the client opens is the one the OSD derives from its working key.
fn valid_at_osd(state: &KeyState, grant: &T10Grant, session: &Blake3Mac, now: u64) -> bool {
    let cap = t10::decode_capability(&grant.capability).unwrap();
    let Some(working) = state.working(cap.partition_id, cap.key_version) else {
        return false;
    };
    let at_osd = t10::capability_key(&grant.capability, &MacKey::new(working.key.clone()));
    let client = t10::open_capability_key(
        &t10::capability_key_wrap(session),
        &grant.capability,
        &grant.sealed_key,
    )
    .unwrap();
    at_osd == client
        && UnixMillis(now) < cap.expiry
        && cap.policy_access_tag == state.policy_tag(cap.partition_id, cap.object_id)
}

fn opened(answer: MdsResponse) -> Vec<T10Grant> {
    match answer {
        MdsResponse::Opened { t10, .. } => t10,
        other => panic!("{other:?}"),
    }
}

/// `maat admin keys rotate` of every OSD and partition, `--revoke` or not.
fn rotate(revoke: bool) -> MdsRequest {
    MdsRequest::T10KeysRotate {
        osd: None,
        partition: None,
        revoke,
        master: false,
    }
}

fn admin(mds: &Mds<&MemStore>, request: MdsRequest, now: u64) {
    call(mds, ADMIN_UID, request, now).unwrap();
}

/// Partition `fast` (ALLDATA) with T10 credentials, made by the administrator at `mds`.
fn t10_partition(mds: &Mds<&MemStore>, now: u64) {
    for request in [
        MdsRequest::PartitionCreate {
            name: "fast".into(),
            protection: Protection::AllData,
        },
        MdsRequest::PartitionSetCredentials {
            name: "fast".into(),
            credentials: Credentials::T10,
        },
    ] {
        admin(mds, request, now);
    }
}

#[test]
fn credentials_from_any_instance_are_under_the_keys_the_leader_installed() {
    let store = MemStore::default();
    (&store)
        .commit(Batch(
            (1..=2)
                .map(|id| {
                    Op::PutOsd(OsdEntry {
                        id,
                        address: format!("10.0.0.{id}:7000"),
                        sealing_key: [0; 32],
                        weight: 1,
                    })
                })
                .collect(),
        ))
        .unwrap();
    let (a, b) = (mds(&store), mds(&store));
    let osds = Osds::default();
    a.set_t10_channel(channel(osds.clone()));
    b.set_t10_channel(channel(osds.clone()));
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let now = T0 + 1_000;
    let name = || "fast".to_string();
    t10_partition(&a, now);
    admin(
        &a,
        MdsRequest::Mkdir {
            path: "/fast".into(),
            mode: 0o777,
            parents: false,
            partition: Some(name()),
        },
        now,
    );
    // The leader installs every OSD's keys.
    assert!(a.t10_maintain(UnixMillis(now), &mut rng).is_empty());
    let session = admin_login(&a, now, &mut rng);
    let open = |mds: &Mds<&MemStore>, create: bool, at: u64, nonce: u8, rng: &mut ChaCha20Rng| {
        let request = MdsRequest::Open {
            path: "/fast/f".into(),
            access: Access::ReadWrite,
            create: create.then_some(0o644),
        };
        opened(in_session(mds, &session, request, at, nonce, rng).unwrap())
    };
    let check = |grants: &[T10Grant], at: u64, when: &str| {
        assert_eq!(grants.len(), 2, "{when}: one grant per OSD");
        let osds = osds.lock().unwrap();
        for g in grants {
            assert!(
                valid_at_osd(&osds[&g.osd], g, &session.1, at),
                "{when}: osd {} refuses the credential",
                g.osd
            );
        }
    };
    // The other instance issues under those keys (and keeps them in memory).
    check(&open(&b, true, now + 1, 1, &mut rng), now + 1, "first");
    // The leader replaces every working key; the other's next credentials are under the
    // new ones.
    admin(&a, rotate(true), now + 2);
    check(
        &open(&b, false, now + 3, 2, &mut rng),
        now + 3,
        "after the rotation",
    );
}

/// Issue 42: a key rotation sent to an instance that does not hold the leader lease is
/// refused, naming why (its exchanges would race the leader's upkeep); the leader runs it.
#[test]
fn key_rotations_are_refused_by_an_instance_that_does_not_lead() {
    let store = MemStore::default();
    let (a, b) = (mds(&store), mds(&store));
    b.set_leadership_probe(Box::new(|| None));
    a.set_leadership_probe(Box::new(|| Some(1)));
    let refused = call(&b, ADMIN_UID, rotate(false), T0 + 1).unwrap_err();
    assert_eq!(refused.code, ErrorCode::WrongRecipient);
    assert!(refused.detail.contains("leader"), "{refused:?}");
    call(&a, ADMIN_UID, rotate(false), T0 + 2).unwrap();
}

/// Issue 42: the window between a leader's check that it leads and its commit. `a` took
/// the leader lease and still believes it leads (its grant has not run out by its own
/// clock), but the store handed the lease to `b` meanwhile. `a`'s upkeep reaches the OSD,
/// and its record of the keys the OSD acknowledged is refused by the store, in the commit
/// itself: it never writes over what its successor keeps.
#[test]
fn a_leader_deposed_before_its_commit_writes_no_key_state() {
    let store = MemStore::default();
    (&store)
        .commit(Batch(vec![Op::PutOsd(OsdEntry {
            id: 1,
            address: "10.0.0.1:7000".into(),
            sealing_key: [0; 32],
            weight: 1,
        })]))
        .unwrap();
    let (a, b) = (mds(&store), mds(&store));
    let osds = Osds::default();
    a.set_t10_channel(channel(osds.clone()));
    let now = T0 + 1_000;
    t10_partition(&a, now);
    let ttl = 5_000;
    let granted = a.lease(LEADER_LEASE, "a", ttl, UnixMillis(now)).unwrap();
    assert_eq!((granted.granted, granted.token), (true, 1));
    a.set_leadership_probe(Box::new(|| Some(1)));
    let taken = b
        .lease(LEADER_LEASE, "b", ttl, UnixMillis(now + ttl + 1))
        .unwrap();
    assert_eq!((taken.granted, taken.token), (true, 2));

    let problems = a.t10_maintain(UnixMillis(now + 1), &mut ChaCha20Rng::seed_from_u64(3));
    assert!(
        problems.iter().any(|p| p.contains("passed to \"b\"")),
        "{problems:?}"
    );
    assert!(
        (&store).metas("t10/osd/").unwrap().is_empty(),
        "the deposed leader wrote a key state"
    );
    // The OSD did take the command (its fence is the lease's token, and 1 was the
    // highest it had seen); the successor finds no record and starts the OSD over.
    assert!(osds.lock().unwrap().contains_key(&1));
    // Nor does it write the T10 revocations (key exchanges owed, tags) over its
    // successor's: a revoking rotation is refused with nothing stored.
    let refused = call(&a, ADMIN_UID, rotate(true), now + 2).unwrap_err();
    assert!(refused.detail.contains("passed to \"b\""), "{refused:?}");
    assert_eq!((&store).meta("t10/revocations").unwrap(), None);
}

/// The OSDs' side of key commands as `channel`, with fencing: a fenced command is taken
/// under its token as the OSD takes it (`KeyState::admit_fence`), its MAC left to the
/// OSD's own tests (`crates/osd/tests/fencing.rs`).
fn fencing_channel(osds: Osds) -> Arc<T10Channel> {
    let bare = channel(osds.clone());
    Arc::new(move |osd: &OsdEntry, request: &OsdPlainRequest| {
        let OsdPlainRequest::Fenced(bytes) = request else {
            return bare(osd, request);
        };
        let fenced = maat_proto::signed::UnverifiedMac::<t10::FencedKeyCommand>::decode(bytes)
            .map_err(|e| ChannelError::Refused(e.into()))?;
        let fenced = fenced.unverified_body();
        let inner: OsdPlainRequest = maat_proto::msg::decode(&fenced.command).unwrap();
        let mut state = osds
            .lock()
            .unwrap()
            .get(&osd.id)
            .cloned()
            .unwrap_or_else(|| KeyState::bootstrap(&JOIN, osd.id).unwrap());
        state
            .admit_fence(Some(fenced.fence))
            .map_err(|e| ChannelError::Refused(e.into()))?;
        let answer = bare(osd, &inner)?;
        // (Kept with the state the command made, as the OSD does.)
        let mut all = osds.lock().unwrap();
        if let Some(s) = all.get_mut(&osd.id) {
            s.admit_fence(Some(fenced.fence)).unwrap();
        }
        Ok(answer)
    })
}

/// Issue 42: the store restored from an older backup hands out fencing tokens below
/// one an OSD applied key commands under, and the OSD refuses every key command of the
/// leader as fenced. The leader, which still holds its lease (so no successor made that
/// token), raises its token in the store past the OSD's fence at its next renewal,
/// doubling it at each refusal, and the OSD takes its keys again within a few upkeeps.
/// Another OSD, whose fence is below, takes its keys under the token of the moment and
/// the leader records them (a raise made at once would fail that record). An instance
/// that does not hold the lease raises nothing.
#[test]
fn a_leader_raises_its_token_past_an_osd_fence_the_store_no_longer_knows() {
    let store = MemStore::default();
    let seal = maat_crypto::seal::SealingSecretKey::generate(&mut ChaCha20Rng::seed_from_u64(5));
    // (Registered with control keys: key commands to them travel fenced.)
    let mut registered = Vec::new();
    for id in [1u64, 2] {
        registered.push(Op::PutOsd(OsdEntry {
            id,
            address: format!("10.0.0.{id}:7000"),
            sealing_key: seal.public_key().0,
            weight: 1,
        }));
        registered.push(Op::PutMeta(format!("osd_control/{id:016x}"), vec![1]));
    }
    (&store).commit(Batch(registered)).unwrap();
    let osds = Osds::default();
    // OSD 1 applied commands under token 1,000 (from the store before the restore).
    let mut fenced = KeyState::bootstrap(&JOIN, 1).unwrap();
    fenced.admit_fence(Some(1_000)).unwrap();
    osds.lock().unwrap().insert(1, fenced);
    let (a, b) = (mds(&store), mds(&store));
    a.set_t10_channel(fencing_channel(osds.clone()));
    b.set_t10_channel(fencing_channel(osds.clone()));
    let now = T0 + 1_000;
    t10_partition(&a, now);
    // `b` led first (token 1); its lease ran out and `a` took it (token 2).
    let ttl = 60_000;
    let b_granted = b.lease(LEADER_LEASE, "b", 100, UnixMillis(now)).unwrap();
    assert_eq!((b_granted.granted, b_granted.token), (true, 1));
    let later = now + 200;
    // `a` leads; its probe says what its last renewal granted, as the daemon's does.
    let token = Arc::new(Mutex::new(
        a.lease(LEADER_LEASE, "a", ttl, UnixMillis(later))
            .unwrap()
            .token,
    ));
    assert_eq!(*token.lock().unwrap(), 2);
    let probe = token.clone();
    a.set_leadership_probe(Box::new(move || Some(*probe.lock().unwrap())));
    // `b` still believes it leads under token 1: its commands are refused as fenced, and
    // its renewal raises nothing (the store's lease is `a`'s).
    b.set_leadership_probe(Box::new(|| Some(1)));
    let problems = b.t10_maintain(UnixMillis(later + 1), &mut ChaCha20Rng::seed_from_u64(3));
    assert!(
        problems.iter().any(|p| p.contains("fencing token 1 after")),
        "{problems:?}"
    );
    let renewed = b
        .lease(LEADER_LEASE, "b", ttl, UnixMillis(later + 1))
        .unwrap();
    assert!(!renewed.granted);
    let stored_token = || {
        a.lease(LEADER_LEASE, "a", ttl, UnixMillis(later + 2))
            .unwrap()
            .token
    };
    assert_eq!(stored_token(), 2, "a deposed instance raised the token");
    let now = later;

    let mut upkeeps = 0;
    loop {
        upkeeps += 1;
        assert!(
            upkeeps <= 12,
            "the OSD still refuses after {upkeeps} upkeeps"
        );
        let at = now + 10 * upkeeps;
        let problems = a.t10_maintain(UnixMillis(at), &mut ChaCha20Rng::seed_from_u64(at));
        if upkeeps == 1 {
            // A raise is pending. A renewal while an upkeep waits on a hung OSD (holding
            // the key exchange) does not wait for it: the raise is put off.
            renewal_beside_a_hung_upkeep(&a, &osds, ttl, at + 1);
        }
        // The renewal after the upkeep, as the daemon's every 3 s.
        *token.lock().unwrap() = a
            .lease(LEADER_LEASE, "a", ttl, UnixMillis(at + 1))
            .unwrap()
            .token;
        if problems.is_empty() {
            break;
        }
        assert!(
            problems
                .iter()
                .all(|p| p.starts_with("osd 1:") && p.contains("is asked for")),
            "{problems:?}"
        );
    }
    // 2 → 4 → ... → 1,024: nine raises, then the keys go in under 1,024.
    let t = *token.lock().unwrap();
    assert_eq!(t, 1_024);
    assert_eq!(upkeeps, 10);
    let state = osds.lock().unwrap().get(&1).cloned().unwrap();
    assert_eq!(state.fence(), 1_024);
    assert!(state.master_generation() > 0, "the OSD has no keys");
    // OSD 2 took its keys in the first upkeep, under token 2, and they were recorded.
    assert_eq!(osds.lock().unwrap().get(&2).unwrap().fence(), 2);
    assert!((&store).meta("t10/osd/2").unwrap().is_some());
    let stats = call(&a, ADMIN_UID, MdsRequest::Stats, now + 500).unwrap();
    let MdsResponse::Stats(stats) = stats else {
        panic!("{stats:?}");
    };
    assert_eq!(stats.counter("t10_fence_raises"), Some(9));
    assert_eq!(stats.counter("t10_fence_raises_put_off"), Some(1));
}

/// `a` renews its lease at `at` while an upkeep of its own waits inside a key command
/// to a hung OSD: the renewal answers at once, under the token it had (the raise it has
/// pending is put off, not made with a command in flight), and the upkeep is let go.
/// The held command then times out, as one to a hung OSD does: no refusal asks for the
/// raise again, so only the put-off raise carries it to the next renewal.
fn renewal_beside_a_hung_upkeep(a: &Mds<&MemStore>, osds: &Osds, ttl: u64, at: u64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;
    let (entered, in_command) = mpsc::channel::<()>();
    let (let_go, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let held = AtomicBool::new(false);
    let inner = fencing_channel(osds.clone());
    a.set_t10_channel(Arc::new(
        move |osd: &OsdEntry, request: &OsdPlainRequest| {
            if held.swap(true, Ordering::SeqCst) {
                return inner(osd, request);
            }
            let _ = entered.send(());
            let _ = released
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
            Err(ChannelError::Unreachable(format!(
                "osd {}: no answer (hung)",
                osd.id
            )))
        },
    ));
    std::thread::scope(|scope| {
        let upkeep =
            scope.spawn(|| a.t10_maintain(UnixMillis(at), &mut ChaCha20Rng::seed_from_u64(at)));
        in_command
            .recv_timeout(Duration::from_secs(10))
            .expect("the upkeep sent no key command");
        let (renewed, renewal) = mpsc::channel();
        scope.spawn(move || {
            let _ = renewed.send(a.lease(LEADER_LEASE, "a", ttl, UnixMillis(at)));
        });
        let answer = renewal.recv_timeout(Duration::from_secs(5));
        // (Let the upkeep go, and every command after it, before judging.)
        drop(let_go);
        let problems = upkeep.join().unwrap();
        let answer = answer.expect("the renewal waited for the upkeep's key command");
        assert_eq!(
            answer.unwrap().token,
            2,
            "raised with a key command in flight"
        );
        assert!(
            problems.iter().all(|p| p.starts_with("osd 1:")),
            "{problems:?}"
        );
    });
    a.set_t10_channel(fencing_channel(osds.clone()));
}
