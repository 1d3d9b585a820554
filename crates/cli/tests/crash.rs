//! Crash safety: kill -9 an OSD, and separately the MDS, during a stream of writes; the
//! supervisor restarts it; every write that was acknowledged reads back byte-identical.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;
use maat_client::Client;
use std::time::{Duration, Instant};

fn payload(i: u32) -> Vec<u8> {
    // Sizes from 1 KiB to ~1.3 MiB so that single-object and striped files both crash.
    let len = 1024 + (i as usize * 97_331) % 1_300_000;
    (0..len)
        .map(|j| ((j as u32).wrapping_mul(31) ^ i) as u8)
        .collect()
}

fn kill9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Writes files until `writes` were attempted, killing `victim` after `kill_after`;
/// returns the acknowledged ones.
fn stream(
    cluster: &Cluster,
    c: &mut Client,
    victim: &str,
    writes: u32,
    kill_after: u32,
) -> Vec<(String, Vec<u8>)> {
    let mut acknowledged = Vec::new();
    let mut failures = 0;
    let old_pid = cluster.pid(victim);
    // The kill comes from another thread a few milliseconds into write `kill_after`, so it
    // lands in the middle of a request, not between two.
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let killer = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            while progress.load(std::sync::atomic::Ordering::SeqCst) < kill_after {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(3));
            kill9(old_pid);
        })
    };
    for i in 0..writes {
        progress.store(i, std::sync::atomic::Ordering::SeqCst);
        let path = format!("/crash-{victim}-{i}");
        let data = payload(i);
        match c.put(&mut data.as_slice(), data.len() as u64, &path, &mut |_| {}) {
            Ok(_) => acknowledged.push((path, data)),
            Err(_) => {
                failures += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    killer.join().unwrap();
    // The supervisor restarted the victim with a new pid.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.pid(victim) == old_pid {
        assert!(Instant::now() < deadline, "{victim} was not restarted");
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "{victim}: {} acknowledged, {failures} failed while it was down",
        acknowledged.len()
    );
    acknowledged
}

fn check_all(c: &mut Client, acknowledged: &[(String, Vec<u8>)]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for (path, data) in acknowledged {
        let mut out = Vec::new();
        loop {
            out.clear();
            match c.get(path, &mut out, &mut |_| {}) {
                Ok(_) => break,
                // The restarted daemon may still be coming up.
                Err(e) if Instant::now() < deadline && e.code().is_none() => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{path}: {e}"),
            }
        }
        assert!(
            out == *data,
            "{path}: read back differs ({} vs {} bytes)",
            out.len(),
            data.len()
        );
    }
}

#[test]
fn acknowledged_writes_survive_kill_9_of_an_osd_and_of_the_mds() {
    let cluster = Cluster::start(3, &[]);
    let mut c = cluster.admin_client();

    let osd_writes = stream(&cluster, &mut c, "osd-2", 40, 12);
    assert!(
        osd_writes.len() >= 12,
        "writes before the kill were acknowledged"
    );
    check_all(&mut c, &osd_writes);

    let mds_writes = stream(&cluster, &mut c, "mds", 40, 12);
    assert!(mds_writes.len() >= 12);
    check_all(&mut c, &mds_writes);
    check_all(&mut c, &osd_writes);

    // A fresh client (new login after the MDS restart) sees the same bytes.
    let mut fresh = cluster.admin_client();
    check_all(&mut fresh, &osd_writes);
    check_all(&mut fresh, &mds_writes);
}
