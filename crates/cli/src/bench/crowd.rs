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

/// Every client opens `path` at once (after a barrier); per client, when its open
/// started (µs after the first thread was spawned) and how long it took (µs).
fn crowd(clients: &mut [Client], path: &str) -> Result<Vec<(f64, f64)>> {
    let barrier = Barrier::new(clients.len());
    let origin = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(f64, f64)> {
                    barrier.wait();
                    let t = Instant::now();
                    // Straight to the MDS: the client's own capability cache is not
                    // what is measured.
                    c.mds_call(MdsRequest::Open {
                        path: path.into(),
                        access: Access::Read,
                        create: None,
                    })?;
                    let started = t.duration_since(origin).as_secs_f64() * 1e6;
                    Ok((started, t.elapsed().as_secs_f64() * 1e6))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a crowd thread panicked"))?)
            .collect()
    })
}

/// The model behind E3's batched row (issue 45): a lower bound on the median open that any
/// schedule signing at most `batches` capabilities could give clients that start at the
/// measured times, even one that knew every arrival in advance and signed in no time. A
/// client waits for the first batch that closes at or after its start, then for its own
/// answer, which takes at least `service` (the fastest NOSEC open of the crowd); the last
/// batch closes at the last start, or someone is left unanswered. Returns (that median,
/// the crowd's start spread), in µs.
fn batching_bound(starts: &[f64], batches: usize, service: f64) -> (f64, f64) {
    let mut a = starts.to_vec();
    a.sort_by(f64::total_cmp);
    let (Some(&first), Some(&last)) = (a.first(), a.last()) else {
        return (0.0, 0.0);
    };
    let median_for = |closes: &[f64]| {
        median(
            a.iter()
                .map(|&t| {
                    let close = closes.iter().copied().find(|&c| c >= t).unwrap_or(last);
                    close - t + service
                })
                .collect(),
        )
    };
    // One batch closes at the last start; with two, the earlier close is best placed at
    // some client's start (moving it later, up to the next start, only adds waiting).
    let best = match batches {
        0 | 1 => median_for(&[last]),
        _ => a
            .iter()
            .map(|&c| median_for(&[c, last]))
            .fold(f64::INFINITY, f64::min),
    };
    (best, last - first)
}

/// Where the MDS's batch leaders spent their time (summed µs: waiting for the signature
/// in progress, gathering, signing) and how many batches they signed.
const BATCH_TIMES: [&str; 4] = [
    "batch_turn_micros",
    "batch_gather_micros",
    "batch_sign_micros",
    "batches_signed",
];

fn batch_times(admin: &mut Client) -> Result<[u64; 4]> {
    let stats = admin.daemon_stats()?;
    let mut out = [0u64; 4];
    for (o, name) in out.iter_mut().zip(BATCH_TIMES) {
        *o = super::sum_counter(&stats, "mds", name)?;
    }
    Ok(out)
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
        // The fastest NOSEC open of each crowd: no open is answered sooner (the model's
        // service time).
        let mut fastest = Vec::new();
        // The batched crowds' start times, per round, for the model.
        let mut starts: Vec<Vec<f64>> = Vec::new();
        // The batched crowds' leaders: summed turn, gather and sign µs, batches signed.
        let mut leaders = [0u64; 4];
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
                        let opens = crowd(insecure.get_mut(..n).unwrap_or_default(), &path)?;
                        let latencies: Vec<f64> = opens.iter().map(|(_, l)| *l).collect();
                        spread.push(latencies.iter().copied().fold(0.0, f64::max));
                        fastest.push(latencies.iter().copied().fold(f64::INFINITY, f64::min));
                        (median(latencies), 0)
                    }
                    Some((name, strategies)) => {
                        let path = make(&mut admin, &format!("{name}-r{round}"), n)?;
                        admin.set_grouping(strategies)?;
                        let times0 = batch_times(&mut admin)?;
                        let before = counter(&mut admin, "mds", "signatures_made")?;
                        let opens = crowd(secure.get_mut(..n).unwrap_or_default(), &path)?;
                        let after = counter(&mut admin, "mds", "signatures_made")?;
                        if *name == "batched" {
                            starts.push(opens.iter().map(|(s, _)| *s).collect::<Vec<f64>>());
                            let times1 = batch_times(&mut admin)?;
                            for (acc, (a, b)) in leaders.iter_mut().zip(times1.iter().zip(times0)) {
                                *acc += a.saturating_sub(b);
                            }
                        }
                        let latencies = opens.into_iter().map(|(_, l)| l).collect();
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
        let service = median(fastest);
        obj.insert(format!("open_nosec_us_{n}"), nosec.into());
        obj.insert(format!("open_nosec_fastest_us_{n}"), service.into());
        obj.insert(format!("open_nosec_rounds_us_{n}"), nosec_rounds.into());
        // The slowest NOSEC open: how long the crowd takes to arrive and be served
        // with no security at all (the time a batch that waits for the crowd waits).
        let spread = median(spread);
        obj.insert(format!("crowd_spread_nosec_us_{n}"), spread.into());
        // The model: a lower bound on what any 2-signature schedule could do for the
        // batched crowds' own start times (median over rounds), against the target of
        // 1.5 × NOSEC.
        let (bounds, arrivals): (Vec<f64>, Vec<f64>) =
            starts.iter().map(|s| batching_bound(s, 2, service)).unzip();
        let bound = median(bounds);
        let arrival = median(arrivals);
        obj.insert(format!("batched_bound_2_signatures_us_{n}"), bound.into());
        obj.insert(
            format!("batched_bound_2_signatures_over_nosec_{n}"),
            (bound / nosec.max(1.0)).into(),
        );
        obj.insert(
            format!("crowd_starts_spread_batched_us_{n}"),
            arrival.into(),
        );
        let [turn, gather, sign, batches] = leaders.map(|v| v as f64);
        let per_batch = |v: f64| v / batches.max(1.0);
        for (key, v) in [("turn", turn), ("gather", gather), ("sign", sign)] {
            obj.insert(
                format!("batched_{key}_us_per_batch_{n}"),
                per_batch(v).into(),
            );
        }
        obj.insert(
            format!("batched_batches_{n}"),
            (batches / rounds as f64).into(),
        );
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
        row.extend([
            spread,
            bound,
            arrival,
            per_batch(turn),
            per_batch(gather),
            per_batch(sign),
            batches / rounds as f64,
        ]);
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
    let mut models = Vec::new();
    for r in rows {
        if let [n, nosec, none, none_s, batched, batched_s, unix, unix_s, spread, bound, arrival, turn, gather, sign, batches] =
            r.as_slice()
        {
            say!(
                "{n:>7} {nosec:>10.0} {spread:>10.0} | {none:>10.0} {none_s:>5} | {batched:>10.0} {batched_s:>5} {:>6.2} | {unix:>10.0} {unix_s:>5}",
                batched / nosec.max(1.0)
            );
            models.push(format!(
                "{n:>7} clients: they start over {arrival:.0} µs; the best any schedule of 2 \
                 signatures could do is a median of {bound:.0} µs ({:.2} × NOSEC); the MDS \
                 closed {batches:.1} batches a crowd, each leader waiting {turn:.0} µs for \
                 the signature before, gathering {gather:.0} µs, signing {sign:.0} µs",
                bound / nosec.max(1.0)
            ));
        }
    }
    say!(
        "model (a lower bound from the batched crowds' measured start times: a batch answers \
         those started before it closes, each then taking at least the fastest NOSEC open; \
         target 1.5 × NOSEC):"
    );
    for m in models {
        say!("{m}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::batching_bound;

    #[test]
    fn the_batching_bound_waits_for_the_last_start_then_for_the_answer() {
        // 101 clients starting 1 µs apart: one batch must wait for the last start, so
        // the median client (started at 50) waits 50.
        let starts: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(batching_bound(&starts, 1, 0.0), (50.0, 100.0));
        // Two batches: the best early close halves the wait of the clients before it.
        let (two, _) = batching_bound(&starts, 2, 0.0);
        assert!((25.0..50.0).contains(&two), "{two}");
        // Each client's own answer comes after its batch's close.
        assert_eq!(batching_bound(&starts, 1, 80.0).0, 130.0);
        // Everyone at once: no wait beyond the answer itself.
        assert_eq!(batching_bound(&[7.0; 10], 2, 3.0), (3.0, 0.0));
    }
}
