//! `maat bench flash-crowd` (E3, paper 000 Fig. 8a): N clients, each its own user with
//! its own session, open one file at the same moment. Per crowd size: the median open
//! under NOSEC, and under each grouping setting the median open and the exact number of
//! signatures the MDS made. A fresh file per measurement, so no cache from an earlier
//! one helps. Every client is connected to the MDS before it is measured.

use super::{counter, LocalCluster};
use anyhow::{anyhow, bail, Result};
use maat_client::Client;
use maat_proto::msg::{Access, MdsRequest};
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;

/// Grouping settings compared, by the name printed and the strategies set.
const MODES: [(&str, &str); 3] = [
    ("none", "none"),
    ("batched", "batch,onthefly"),
    ("unix", "unix"),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Every client opens `path` at once (after a barrier); the open latencies in µs.
fn crowd(clients: &mut [Client], path: &str) -> Result<Vec<f64>> {
    let barrier = Barrier::new(clients.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || -> Result<f64> {
                    barrier.wait();
                    let t = Instant::now();
                    // Straight to the MDS: the client's own capability cache is not
                    // what is measured.
                    c.mds_call(MdsRequest::Open {
                        path: path.into(),
                        access: Access::Read,
                        create: None,
                    })?;
                    Ok(t.elapsed().as_secs_f64() * 1e6)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a crowd thread panicked"))?)
            .collect()
    })
}

/// A fresh one-byte world-readable file for one measurement.
fn make(admin: &mut Client, tag: &str, n: usize) -> Result<String> {
    let path = format!("/crowd/{tag}-{n}");
    admin.put(&mut &b"x"[..], 1, &path, &mut |_| {})?;
    Ok(path)
}

pub(super) fn run_flash_crowd(
    sizes: &[u32],
    rounds: usize,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    if largest == 0 || largest > 1000 {
        bail!("--clients must be between 1 and 1000");
    }
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    admin.mkdir("/crowd", 0o777, false)?;
    if !json {
        eprintln!("bench flash-crowd: adding and logging in {largest} users");
    }
    let mut secure: Vec<Client> = cluster
        .logged_in_users("crowd", 0..largest)?
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let mut insecure = Vec::with_capacity(largest);
    for i in 0..largest {
        let mut c = Client::new(cluster.file.clone(), None)?;
        // NOSEC believes the claimed user; the crowd's files are world-readable.
        c.danger_insecure_as(2 + i as u64);
        // Connected before the crowd, as the secure clients are by their logins: a
        // first call's connection setup is not what is measured.
        c.stat("/crowd")?;
        insecure.push(c);
    }
    let rounds = rounds.max(1);
    let mut rows = Vec::new();
    let mut obj = serde_json::Map::new();
    for &n in sizes {
        let n = n as usize;
        // Per side (NOSEC, then MODES): each round's median open and signatures made.
        let mut sides: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); MODES.len() + 1];
        let mut spread = Vec::new();
        for round in 0..rounds {
            // Sides in turn, the order reversed every other round, so that no side
            // always meets the machine fresh or tired (as `bench objects` does).
            let mut order: Vec<usize> = (0..sides.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for side in order {
                let (latency, made) = match side.checked_sub(1).and_then(|m| MODES.get(m)) {
                    None => {
                        let path = make(&mut admin, &format!("nosec-r{round}"), n)?;
                        let latencies = crowd(insecure.get_mut(..n).unwrap_or_default(), &path)?;
                        spread.push(latencies.iter().copied().fold(0.0, f64::max));
                        (median(latencies), 0)
                    }
                    Some((name, strategies)) => {
                        let path = make(&mut admin, &format!("{name}-r{round}"), n)?;
                        admin.set_grouping(strategies)?;
                        let before = counter(&mut admin, "mds", "signatures_made")?;
                        let latencies = crowd(secure.get_mut(..n).unwrap_or_default(), &path)?;
                        let after = counter(&mut admin, "mds", "signatures_made")?;
                        (median(latencies), after.saturating_sub(before))
                    }
                };
                if let Some((opens, signed)) = sides.get_mut(side) {
                    opens.push(latency);
                    signed.push(made as f64);
                }
            }
        }
        let mut sides = sides.into_iter();
        let (nosec_rounds, _) = sides.next().unwrap_or_default();
        let nosec = median(nosec_rounds.clone());
        obj.insert(format!("open_nosec_us_{n}"), nosec.into());
        obj.insert(format!("open_nosec_rounds_us_{n}"), nosec_rounds.into());
        // The slowest NOSEC open: how long the crowd takes to arrive and be served
        // with no security at all (the time a batch that waits for the crowd waits).
        let spread = median(spread);
        obj.insert(format!("crowd_spread_nosec_us_{n}"), spread.into());
        let mut row = vec![n as f64, nosec];
        for ((name, _), (opens, signed)) in MODES.iter().zip(sides) {
            let latency = median(opens.clone());
            let made = median(signed.clone());
            obj.insert(format!("open_{name}_us_{n}"), latency.into());
            obj.insert(format!("open_{name}_rounds_us_{n}"), opens.into());
            obj.insert(format!("signatures_{name}_{n}"), made.into());
            obj.insert(format!("signatures_{name}_rounds_{n}"), signed.into());
            obj.insert(
                format!("open_{name}_over_nosec_{n}"),
                (latency / nosec.max(1.0)).into(),
            );
            row.extend([latency, made]);
        }
        row.push(spread);
        rows.push(row);
    }
    // Back to the cluster's default.
    admin.set_grouping("unix,onthefly")?;
    if json {
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "E3 flash crowd: N clients open one file at once; medians over {rounds} round(s), \
         sides alternating (median open, signatures made; spread: slowest NOSEC open)"
    );
    say!(
        "{:>7} {:>10} {:>10} | {:>10} {:>5} | {:>10} {:>5} {:>6} | {:>10} {:>5}",
        "clients",
        "NOSEC µs",
        "spread µs",
        "none µs",
        "sigs",
        "batched µs",
        "sigs",
        "×NOSEC",
        "unix µs",
        "sigs"
    );
    for r in rows {
        if let [n, nosec, none, none_s, batched, batched_s, unix, unix_s, spread] = r.as_slice() {
            say!(
                "{n:>7} {nosec:>10.0} {spread:>10.0} | {none:>10.0} {none_s:>5} | {batched:>10.0} {batched_s:>5} {:>6.2} | {unix:>10.0} {unix_s:>5}",
                batched / nosec.max(1.0)
            );
        }
    }
    Ok(())
}
