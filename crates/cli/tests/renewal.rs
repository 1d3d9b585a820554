//! SPEC M8 against real daemons: a capability in use keeps working for several lifetimes
//! because the client renews it in a batch and hands the MDS's token to the OSDs; forged,
//! tampered and expired tokens are refused with typed errors; a token extends nobody's
//! capability for another user; and after a chmod the MDS stops renewing, so access ends
//! within one lifetime of the change (M7) even for a client that keeps renewing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, counter, Cluster};
use maat_client::ClientError;
use maat_proto::capability::Capability;
use maat_proto::msg::{Access, ErrorCode, MdsRequest, MdsResponse, OsdCommand, OsdRequest};
use maat_proto::renewal::RenewalToken;
use maat_proto::signed::Unverified;
use maat_proto::{CapabilityId, UnixMillis};
use std::time::{Duration, Instant};

fn renewal_token(c: &mut maat_client::Client, id: u64) -> Vec<u8> {
    match c.mds_call(MdsRequest::Renew { ids: vec![id] }).unwrap() {
        MdsResponse::Renewed(t) => t,
        other => panic!("{other:?}"),
    }
}

fn supply(token: Vec<u8>) -> OsdRequest {
    OsdRequest {
        capability: Vec::new(),
        command: OsdCommand::SupplyRenewal { token },
    }
}

fn now_millis() -> u64 {
    maat_client::local_now()
}

#[test]
fn renewal_keeps_capabilities_in_use_alive_and_never_extends_revoked_access() {
    let lifetime = Duration::from_secs(3);
    // One capability per user (no grouping), so that carol is named in none of bob's.
    let cluster = Cluster::start(2, &["--capability-lifetime", "3", "--grouping", "none"]);
    cluster.add_user("alice", "alice passphrase", None);
    cluster.add_user("bob", "bob passphrase", None);
    cluster.add_user("carol", "carol passphrase", None);
    let admin = cluster.admin_client();
    admin.mkdir("/shared", 0o777, false).unwrap();
    let alice = cluster.user_client("alice", "alice passphrase");
    let data = vec![5u8; 100_000];
    alice
        .put(
            &mut &data[..],
            data.len() as u64,
            "/shared/data",
            &mut |_| {},
        )
        .unwrap();

    // Bob uses one capability for three lifetimes: every read works.
    let mut bob = cluster.user_client("bob", "bob passphrase");
    let bobs = bob.open("/shared/data", Access::Read, None).unwrap();
    let id = Unverified::<Capability>::decode(&bobs.capability)
        .unwrap()
        .unverified_body()
        .id
        .0;
    let osd = bob.place(bobs.stat.id, 0).unwrap();
    let signed_before = counter(&admin, "mds", "renewal:tokens_signed");
    let started = Instant::now();
    let mut first_token = None;
    while started.elapsed() < 3 * lifetime {
        let read = bob.read_object(&bobs, 0);
        assert!(
            matches!(read, Ok(Some(_))),
            "read {:?} into the capability's life: {read:?}",
            started.elapsed()
        );
        if first_token.is_none() && bob.client_stats().renewals > 0 {
            first_token = Some(renewal_token(&mut bob, id));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Renewed at 80 % of each lifetime: about four times in three lifetimes of reads
    // every 250 ms, not at every read.
    assert!(
        (2..=6).contains(&bob.client_stats().renewals),
        "renewed {} times in three lifetimes",
        bob.client_stats().renewals
    );
    assert!(counter(&admin, "osd", "renewal_tokens_verified") >= 2);
    let signed = counter(&admin, "mds", "renewal:tokens_signed") - signed_before;
    assert!(
        signed >= 1 && signed <= bob.client_stats().renewals + 1,
        "{signed}"
    );

    // Attacks on the OSD, from carol's own session.
    let mut carol = cluster.user_client("carol", "carol passphrase");
    let now = now_millis();
    // A token signed by anyone but the MDS.
    let impostor = maat_crypto::sign::SigningKey::from_seed(&[9; 32]);
    let forged = RenewalToken::new(
        1,
        vec![CapabilityId(id)],
        UnixMillis(now - 1_000),
        UnixMillis(now + 3_600_000),
    )
    .unwrap();
    let forged = maat_proto::signed::sign(forged, &impostor)
        .encoded()
        .to_vec();
    assert_eq!(
        code(carol.osd_call(osd, supply(forged))),
        ErrorCode::BadSignature
    );
    // A real token with its expiry pushed out.
    let mut tampered = renewal_token(&mut carol, id);
    let expiry_at = 2 + 8 + 8; // version, kind, token id, start
    tampered[expiry_at + 7] ^= 0x40;
    assert_eq!(
        code(carol.osd_call(osd, supply(tampered))),
        ErrorCode::BadSignature
    );
    // A token whose window has passed.
    let old = first_token.expect("bob renewed at least once");
    assert_eq!(
        code(carol.osd_call(osd, supply(old))),
        ErrorCode::CapabilityExpired
    );
    // A valid token renews capabilities, not users: bob's capability stays bob's. (Carol's
    // read must ask `osd` first, where the token goes: reads spread over copies by
    // client, issue 41.)
    let carol_spread = (0..64u64)
        .find(|s| {
            carol.set_read_spread(*s);
            carol
                .reads_ask(&bobs.stat.partition, bobs.stat.id, 0)
                .unwrap()[0]
                == osd
        })
        .expect("a spread whose read asks the OSD given the token");
    carol.set_read_spread(carol_spread);
    let fresh = renewal_token(&mut carol, id);
    carol.osd_call(osd, supply(fresh)).unwrap();
    assert_eq!(code(carol.read_object(&bobs, 0)), ErrorCode::WrongUser);

    // M7 + M8: alice takes read away from others. The MDS refuses bob at once, stops
    // renewing his capability, and bob's reads end within one lifetime, not before.
    assert!(bob.read_object(&bobs, 0).unwrap().is_some());
    alice.chmod("/shared/data", 0o600).unwrap();
    let changed = Instant::now();
    let outcome = bob.renew_capabilities().unwrap();
    assert_eq!(
        (outcome.requested, outcome.renewed),
        (1, 0),
        "renewal after the chmod"
    );
    let ask = MdsRequest::Open {
        path: "/shared/data".into(),
        access: Access::Read,
        create: None,
    };
    assert_eq!(code(bob.mds_call(ask)), ErrorCode::PermissionDenied);
    let mut ended = None;
    while changed.elapsed() < 3 * lifetime {
        match bob.read_object(&bobs, 0) {
            Ok(_) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => {
                ended = Some((changed.elapsed(), e));
                break;
            }
        }
    }
    let (after, e) = ended.expect("bob still reads three lifetimes after the chmod");
    assert!(
        matches!(&e, ClientError::Refused(w) if w.code == ErrorCode::CapabilityExpired),
        "{e:?}"
    );
    assert!(
        after < lifetime + Duration::from_millis(1_500),
        "access lasted {after:?} after the change"
    );
    assert!(counter(&admin, "mds", "renewal:capabilities_refused") >= 1);
}
