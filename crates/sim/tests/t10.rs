//! The T10 key methods (SPEC T2, T3, T4) on a whole cluster in one process: key refresh
//! by policy on the simulated clock, key commands from the leader of several MDS
//! instances (issue 42), and OSD clocks the MDS does not share.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_client::Client;
use maat_sim::SimCluster;

mod common;
use common::{content, counter, get, put};

/// The administrator's client, with `/fast` in a CMDRSP partition of T10 credentials
/// whose keys the OSDs hold.
fn t10_partition(sim: &SimCluster) -> Client {
    use maat_proto::msg::Credentials;
    use maat_proto::protection::Protection;
    let admin = sim.admin().unwrap();
    admin.partition_create("fast", Protection::CmdRsp).unwrap();
    admin
        .partition_set_credentials("fast", Credentials::T10)
        .unwrap();
    admin.mkdir_in("/fast", 0o777, false, Some("fast")).unwrap();
    sim.tick().unwrap();
    admin
}

/// SPEC T3's refresh policy on the simulated clock: a working key into the next slot every
/// period (lifetime / 4 = 75 s), the partition pair every 16 periods, the root every 64,
/// and a file in the T10 partition reads throughout (no refresh breaks a credential).
#[test]
fn t10_keys_refresh_by_policy_and_no_refresh_breaks_a_read() {
    let sim = SimCluster::start(9, 1).unwrap();
    let mut admin = t10_partition(&sim);
    let data = content(3000);
    put(&mut admin, "/fast/f", &data);
    let generation = |admin: &Client, name: &str| {
        let keys = admin.t10_keys().unwrap();
        keys[0]
            .generations
            .iter()
            .filter(|(k, _)| k == name || (name == "working" && k.contains("working")))
            .map(|(_, g)| *g)
            .max()
            .unwrap_or_else(|| panic!("no {name} in {keys:?}"))
    };
    let (root, partition) = (
        generation(&admin, "root"),
        generation(&admin, "partition 2"),
    );
    let mut working = generation(&admin, "working");
    // Issue 42: the keys came fenced, under the lone instance's lease (token 1).
    assert_eq!(sim.osd(1).unwrap().core.t10_fence(), 1);
    let period = 75_000;
    for step in 1..=64u64 {
        sim.advance(period).unwrap();
        let now = generation(&admin, "working");
        assert!(now > working, "period {step}: no new working key");
        working = now;
        assert_eq!(get(&mut admin, "/fast/f").unwrap(), data, "period {step}");
        let p = generation(&admin, "partition 2");
        assert_eq!(p > partition, step >= 16, "partition pair at period {step}");
        let r = generation(&admin, "root");
        assert_eq!(r > root, step >= 64, "root at period {step}");
    }
}

/// Issue 42 with two MDS instances over one database: the instance holding the leader
/// lease sends the key commands, fenced under its token, and after it restarts (a crash)
/// the keys are still kept and a file in the T10 partition reads.
#[test]
fn t10_key_commands_come_fenced_from_the_leader_of_several_instances() {
    let sim = SimCluster::start_instances(
        12,
        2,
        maat_proto::limits::CAPABILITY_LIFETIME_MILLIS_DEFAULT / 1000,
        2,
    )
    .unwrap();
    let mut admin = t10_partition(&sim);
    let data = content(2000);
    put(&mut admin, "/fast/g", &data);
    let fences = || {
        (1..=2)
            .map(|id| sim.osd(id).unwrap().core.t10_fence())
            .collect::<Vec<_>>()
    };
    let first = fences();
    assert!(first.iter().all(|f| *f >= 1), "{first:?}");
    for index in 0..2 {
        sim.mds_instances().restart(index).unwrap();
        sim.advance(75_000).unwrap();
        assert_eq!(
            get(&mut admin, "/fast/g").unwrap(),
            data,
            "after restart {index}"
        );
        // A fence never goes down.
        let now = fences();
        assert!(
            now.iter().zip(&first).all(|(n, f)| n >= f),
            "{now:?} after {first:?}"
        );
    }
}

/// SPEC T7 with an OSD whose clock runs 5 s behind the MDS's (requests dated by the MDS's
/// clock look 5 s early to it): a session offer is taken after one stale refusal (dated
/// back), and the session keeps the OSD's offset from its confirmation. The T10 path
/// holds no session with the OSD: it too is reached after one stale refusal, and from its
/// first authenticated answer the client dates requests by the OSD's own clock: the OSD
/// may drift on to 20 s behind (past what dating back covers) with no refusal. A step of
/// the OSD's clock to 20 s ahead costs two refusals (too old, the probe too old) before
/// the MDS's offset is tried again and relearnt.
#[test]
fn t10_requests_follow_an_osd_clock_that_the_mds_does_not_share() {
    let sim = SimCluster::start(10, 1).unwrap();
    let mut admin = t10_partition(&sim);
    // (A clock set back is still past the OSD's start: a request dated before it would be
    // refused as sent before a restart.)
    sim.advance(60_000).unwrap();
    sim.set_osd_clock_skew(-5_000);
    let refused =
        |sim: &SimCluster| counter(&sim.osd(1).unwrap().core.stats(), "refused:StaleRequest");
    // Signed capabilities go over a session: its offer is refused once, taken dated
    // back, and the confirmation gives the session the OSD's offset.
    let data = content(3000);
    put(&mut admin, "/sealed", &data);
    assert_eq!(get(&mut admin, "/sealed").unwrap(), data);
    assert_eq!(refused(&sim), 1, "one stale offer, then one dated back");
    // T10 credentials have no session (a plain file: encrypted files keep signed
    // capabilities).
    admin
        .put_with(&mut &data[..], 3000, "/fast/f", Some(false), &mut |_| {})
        .unwrap();
    assert_eq!(
        refused(&sim),
        2,
        "one stale T10 request, then one dated back"
    );
    for step in 1..=50i64 {
        sim.set_osd_clock_skew(-5_000 - 300 * step);
        assert_eq!(get(&mut admin, "/fast/f").unwrap(), data, "step {step}");
        sim.advance_quietly(1_000);
    }
    assert_eq!(refused(&sim), 2, "a drifting clock is followed");
    sim.set_osd_clock_skew(20_000);
    assert_eq!(get(&mut admin, "/fast/f").unwrap(), data);
    assert_eq!(refused(&sim), 4);
}

/// Issue 42: a T10 key change is the leader's. Sent to an instance that does not lead,
/// it is refused `WrongRecipient` before anything changes, and the client asks the next
/// instance: from whichever instance a client starts at, an administrator's rotation and
/// object revocation are carried out, and every OSD is told at once.
#[test]
fn t10_key_changes_reach_the_leader_from_whichever_instance_a_client_asks() {
    let sim = SimCluster::start_instances(
        13,
        2,
        maat_proto::limits::CAPABILITY_LIFETIME_MILLIS_DEFAULT / 1000,
        2,
    )
    .unwrap();
    let mut admin = t10_partition(&sim);
    put(&mut admin, "/fast/g", &content(1000));
    let mut moved = 0;
    for _ in 0..6 {
        let c = sim.admin().unwrap();
        let before = c.client_stats().mds_failovers;
        c.t10_rotate(None, Some("fast"), false, false).unwrap();
        let revoked = c.t10_revoke_object("/fast/g").unwrap();
        assert!(
            revoked.osds.iter().all(|(_, problem)| problem.is_none()),
            "{revoked:?}"
        );
        moved += c.client_stats().mds_failovers - before;
    }
    assert!(
        moved >= 1,
        "no client started at the instance that does not lead"
    );
    assert_eq!(get(&mut admin, "/fast/g").unwrap(), content(1000));
}
