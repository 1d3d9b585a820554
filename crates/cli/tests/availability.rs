//! Availability under connection floods (issue 40, item 2): idle and trickling connections
//! from an attacker shut no one out of the MDS, an OSD or the KDS, the administrator's
//! emergency revoke included, and the OSDs' and KDS's revocation catch-ups keep working
//! (a KDS whose catch-up is 10 s stale grants no keys). And the other side of the
//! trade (issue 41): an OSD cut off from the MDS serves nothing once its lease runs
//! out, since it cannot learn which of its copies missed a change.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{Cluster, Held};
use maat_client::ClientError;
use maat_proto::msg::{Access, ErrorCode};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Opens `n` connections to `addr` and keeps them, sending nothing.
fn hold(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i} to {addr}: {e}"))
        })
        .collect()
}

#[test]
fn a_flood_of_idle_and_trickling_connections_shuts_no_one_out() {
    maat_server::open_files_limit();
    let cluster = Cluster::start_encrypting(1, &[]);
    let admin_home = cluster.admin_home();
    cluster.add_user("alice", "alice passphrase", None);
    let alice = cluster.user_client("alice", "alice passphrase");
    let before = common::content(1, 200_000);
    alice
        .put_with(
            &mut &before[..],
            before.len() as u64,
            "/home/alice/before",
            Some(true),
            &mut |_| {},
        )
        .unwrap();
    let admin = cluster.admin_client();
    let map = admin.cluster_map().unwrap();
    let mds = maat_client::ClusterFile::load(&cluster.cluster_file())
        .unwrap()
        .mds;
    let osd = map.osds[0].address.clone();
    let kds = map.kds[0].address.clone();
    // More idle connections to each daemon than it used to serve in all (1,024).
    let mut held = Vec::new();
    for addr in [&mds, &osd, &kds] {
        held.extend(hold(addr, 1_100));
    }
    // And some that trickle a frame header, a byte at a time.
    let mut trickling: Vec<TcpStream> = Vec::new();
    for addr in [&mds, &osd, &kds] {
        trickling.extend(hold(addr, 50));
    }
    // The header of a real frame, never finished.
    let mut header = Vec::new();
    maat_net::write_frame(
        &mut header,
        maat_proto::wire::FrameHead::new(maat_proto::wire::FrameType::Plain, 1),
        &[0u8; 100],
    )
    .unwrap();
    header.truncate(maat_proto::wire::FRAME_HEADER_BYTES);
    let started = Instant::now();
    // Outlast the OSD's and KDS's catch-up period and the KDS's staleness limit (10 s)
    // while the flood holds, trickling all along.
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(12) {
        for s in &mut trickling {
            let _ = s.write_all(&header[sent % header.len()..=sent % header.len()]);
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    // Everyone is still served: alice reads (MDS, KDS keys, OSD) and writes...
    let mut out = Vec::new();
    alice
        .get("/home/alice/before", &mut out, &mut |_| {})
        .unwrap_or_else(|e| panic!("alice's read during the flood: {e}"));
    assert_eq!(out, before);
    let after = common::content(2, 300_000);
    alice
        .put_with(
            &mut &after[..],
            after.len() as u64,
            "/home/alice/after",
            Some(true),
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("alice's write during the flood: {e}"));
    // ... a fresh client logs in, and the administrator's emergency revoke goes through.
    let fresh = cluster.user_client("alice", "alice passphrase");
    let mut out = Vec::new();
    fresh
        .get("/home/alice/after", &mut out, &mut |_| {})
        .unwrap();
    assert_eq!(out, after);
    let revoke = cluster.maat(&admin_home, &["admin", "revoke", "--user", "alice"], None);
    let said = String::from_utf8_lossy(&revoke.stderr);
    assert!(revoke.status.success(), "revoke during the flood: {said}");
    assert!(said.contains("1 of 1 OSDs refuse them now"), "{said}");
    assert_eq!(
        common::code(alice.get("/home/alice/after", &mut Vec::new(), &mut |_| {})),
        maat_proto::msg::ErrorCode::Revoked
    );
    drop(held);
    drop(trickling);
}

#[test]
fn an_osd_cut_off_from_the_mds_serves_nothing_once_its_lease_runs_out() {
    let cluster = Cluster::start(2, &[]);
    let c = cluster.admin_client();
    let data = common::content(3, 10_000);
    c.put(&mut &data[..], data.len() as u64, "/leased", &mut |_| {})
        .unwrap();
    let id = c.stat("/leased").unwrap().id;
    let opened = c.open("/leased", Access::Read, None).unwrap();
    let osd = c.copies_of("default", id, 0).unwrap()[0];
    let read = || {
        let request = common::read_request(&opened.capability, id, 0, data.len() as u32);
        c.osd_call(osd, request)
    };
    assert!(read().is_ok());
    // The MDS hangs: the OSD's check-ins go unanswered, and once the last one that
    // reached the MDS is older than the lease, the OSD refuses to serve.
    let held = Held::stop(cluster.pid("mds"));
    let stopped = Instant::now();
    let mut served = 0;
    loop {
        match read() {
            Ok(_) => served += 1,
            Err(ClientError::Refused(e)) if e.code == ErrorCode::CutOff => break,
            // A request that waited on the OSD's check-in with the hung MDS.
            Err(ClientError::Net { .. }) => {}
            Err(e) => panic!("refused, but not as cut off: {e}"),
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "osd {osd} still served {served} reads 30 s after the MDS hung"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "osd {osd}: {served} reads served, refused cut off {} ms after the MDS hung \
         (lease {} ms from the last check-in sent)",
        stopped.elapsed().as_millis(),
        maat_proto::limits::OSD_LEASE_MILLIS
    );
    // The MDS answers again: the OSD checks in before the next request and serves.
    drop(held);
    let resumed = Instant::now();
    loop {
        match read() {
            Ok(_) => break,
            Err(e) => assert!(
                resumed.elapsed() < Duration::from_secs(30),
                "osd {osd} still refuses 30 s after the MDS came back: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
