//! `maat bench failover` (issues 41 and 42): what clients see when a daemon fails under
//! load, on a fresh local cluster per case. T client threads (each a client of its own)
//! put a 4 KiB file and read something back, over and over; a third of the way in, one
//! daemon fails:
//!
//! * **mds**: one of three MDS instances over PostgreSQL is SIGKILLed (its supervisor
//!   starts it again); the threads put and stat. Skipped, saying so, without the
//!   PostgreSQL server binaries.
//! * **osd**: one of four OSDs of a three-copy cluster is SIGSTOPped (hung: the worst
//!   case for a client, which learns nothing until its own timeout), and stays stopped
//!   to the end; the threads put and get. An administrator's client asks the MDS for the
//!   OSDs' states every 100 ms to time how long the cluster takes to report it down.
//! * **osd-gets**: the same failure while the threads only get (a read can ask another
//!   copy, so it waits less for a silent OSD than a change does).
//!
//! Reported per case: operations per second before and after the failure, the longest
//! pause any thread saw (the longest time between two of its completed operations, or
//! from the failure to its first completion after it), the operations that failed, and
//! (osd) when the MDS first reported the OSD down.

use super::LocalCluster;
use anyhow::{anyhow, Context, Result};
use maat_client::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The bytes of each file put.
const FILE_BYTES: usize = 4096;

/// One case's figures.
struct Case {
    name: &'static str,
    /// The case's prefix in `--json`.
    key: &'static str,
    before_per_s: f64,
    after_per_s: f64,
    longest_pause_ms: f64,
    failed: u64,
    first_error: Option<String>,
    /// osd: milliseconds from the stop to the MDS reporting the OSD down.
    detected_ms: Option<f64>,
}

/// What one thread did: when each operation ended, and whether it succeeded.
type Record = Vec<(Instant, bool)>;

/// Runs `op` on every client in a loop until `seconds` have passed; at a third of them,
/// `fail` runs (once). Returns the case's figures, measured around the failure.
fn drive(
    (name, key): (&'static str, &'static str),
    clients: &[Client],
    seconds: u64,
    op: impl Fn(&Client, usize, u64) -> Result<(), maat_client::ClientError> + Sync,
    fail: impl FnOnce() -> Result<()>,
) -> Result<Case> {
    let stop = AtomicBool::new(false);
    let errors = std::sync::Mutex::new((0u64, None::<String>));
    let started = Instant::now();
    let (records, failed_at) = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(t, c)| {
                let (op, stop, errors) = (&op, &stop, &errors);
                s.spawn(move || {
                    let mut record = Record::new();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let ok = match op(c, t, i) {
                            Ok(()) => true,
                            Err(e) => {
                                let mut errors = errors
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                                errors.0 += 1;
                                errors.1.get_or_insert_with(|| e.to_string());
                                false
                            }
                        };
                        record.push((Instant::now(), ok));
                        i += 1;
                    }
                    record
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(seconds) / 3);
        let failed_at = Instant::now();
        let failure = fail();
        std::thread::sleep(
            (started + Duration::from_secs(seconds)).saturating_duration_since(Instant::now()),
        );
        stop.store(true, Ordering::Relaxed);
        let records = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a client thread panicked")))
            .collect::<Result<Vec<Record>>>()?;
        failure?;
        Ok::<_, anyhow::Error>((records, failed_at))
    })?;
    let end = started + Duration::from_secs(seconds);
    let count = |from: Instant, to: Instant| {
        records
            .iter()
            .flatten()
            .filter(|(at, ok)| *ok && *at >= from && *at < to)
            .count() as f64
    };
    let secs =
        |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64().max(1e-9);
    let mut longest = Duration::ZERO;
    for record in &records {
        // From the failure on: gaps between completed operations, and the time from the
        // failure to the first one after it (or to the end, if none came).
        let mut last = failed_at;
        for (at, ok) in record.iter().filter(|(at, _)| *at >= failed_at) {
            if *ok {
                longest = longest.max(at.saturating_duration_since(last));
                last = *at;
            }
        }
        longest = longest.max(end.min(Instant::now()).saturating_duration_since(last));
    }
    let (failed, first_error) = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Case {
        name,
        key,
        before_per_s: count(started, failed_at) / secs(started, failed_at),
        after_per_s: count(failed_at, end) / secs(failed_at, end),
        longest_pause_ms: longest.as_secs_f64() * 1e3,
        failed,
        first_error,
        detected_ms: None,
    })
}

/// Sends `signal` to daemon `name` (`mds`, `osd-1`, ...) of `cluster`.
fn signal(cluster: &LocalCluster, name: &str, signal: rustix::process::Signal) -> Result<()> {
    let pid = cluster.local.pid(name)?;
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid)?)
        .ok_or_else(|| anyhow!("{name} has no process id"))?;
    rustix::process::kill_process(pid, signal).with_context(|| format!("signalling {name}"))
}

/// `threads` clients of the administrator (each its own, so that they spread over the
/// MDS instances), each with a directory of its own.
fn clients(cluster: &LocalCluster, threads: usize) -> Result<Vec<Client>> {
    let admin = cluster.admin()?;
    admin.mkdir("/failover", 0o755, false)?;
    (0..threads)
        .map(|t| {
            admin.mkdir(&format!("/failover/t{t}"), 0o755, false)?;
            cluster.admin()
        })
        .collect()
}

fn put(c: &Client, path: &str, data: &[u8]) -> Result<(), maat_client::ClientError> {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .map(drop)
}

/// One of three MDS instances SIGKILLed.
fn mds_case(threads: usize, seconds: u64) -> Result<Case> {
    let cluster =
        LocalCluster::start_with(None, &["--osds", "2", "--meta", "postgres", "--mds", "3"])
            .context("starting the cluster of three MDS instances")?;
    let clients = clients(&cluster, threads)?;
    let data = vec![7u8; FILE_BYTES];
    drive(
        ("mds instance SIGKILLed (1 of 3)", "mds"),
        &clients,
        seconds,
        |c, t, i| {
            let path = format!("/failover/t{t}/f{i}");
            put(c, &path, &data)?;
            c.stat(&path).map(drop)
        },
        || signal(&cluster, "mds", rustix::process::Signal::KILL),
    )
}

/// Sends SIGCONT to a daemon this bench stopped, when dropped: never left stopped, even
/// when the case fails half way.
struct Resume<'a> {
    cluster: &'a LocalCluster,
    name: &'a str,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        if let Err(e) = signal(self.cluster, self.name, rustix::process::Signal::CONT) {
            eprintln!("maat bench failover: could not wake {}: {e}", self.name);
        }
    }
}

/// One of four OSDs SIGSTOPped, three copies of every object; the threads put and get,
/// or only get (`gets_only`).
fn osd_case(threads: usize, seconds: u64, gets_only: bool) -> Result<Case> {
    let cluster = LocalCluster::start_with(None, &["--osds", "4", "--replicas", "3"])
        .context("starting the cluster of four OSDs")?;
    let clients = clients(&cluster, threads)?;
    let data = vec![7u8; FILE_BYTES];
    // Files to read back, striped over every OSD.
    for (t, c) in clients.iter().enumerate() {
        for k in 0..16 {
            put(c, &format!("/failover/t{t}/r{k}"), &data)?;
        }
    }
    let watcher = cluster.admin()?;
    let detected = std::sync::Mutex::new(None::<f64>);
    let watching = AtomicBool::new(true);
    let stopped = std::sync::OnceLock::<Instant>::new();
    let resume = std::sync::Mutex::new(None::<Resume<'_>>);
    let case = std::thread::scope(|s| {
        let (detected, watching, watcher) = (&detected, &watching, &watcher);
        let stopped_ref = &stopped;
        s.spawn(move || {
            while watching.load(Ordering::Relaxed) {
                if let Some(at) = stopped_ref.get() {
                    let down = watcher
                        .refresh_placement()
                        .is_ok_and(|p| p.osds.iter().any(|o| o.id == 1 && !o.up));
                    if down {
                        *detected
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(at.elapsed().as_secs_f64() * 1e3);
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let name = if gets_only {
            ("gets only, osd SIGSTOPped (1 of 4)", "osd_gets")
        } else {
            ("osd SIGSTOPped (1 of 4, 3 copies)", "osd")
        };
        let result = drive(
            name,
            &clients,
            seconds,
            |c, t, i| {
                if !gets_only {
                    put(c, &format!("/failover/t{t}/f{i}"), &data)?;
                }
                let mut out = Vec::with_capacity(FILE_BYTES);
                c.get(
                    &format!("/failover/t{t}/r{}", i % 16),
                    &mut out,
                    &mut |_| {},
                )
                .map(drop)
            },
            || {
                signal(&cluster, "osd-1", rustix::process::Signal::STOP)?;
                *resume
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Resume {
                    cluster: &cluster,
                    name: "osd-1",
                });
                let _ = stopped.set(Instant::now());
                Ok(())
            },
        );
        watching.store(false, Ordering::Relaxed);
        result
    });
    // (Woken before the cluster stops, so that it stops cleanly; also when the case
    // failed.)
    drop(
        resume
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut case = case?;
    case.detected_ms = detected
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(case)
}

/// `maat bench failover`.
pub fn run_failover(threads: usize, seconds: u64, json: bool) -> Result<()> {
    let mut cases = Vec::new();
    match maat_server::pg_server::cannot_start_here() {
        Some(why) => say!("maat bench failover: the MDS case is skipped: {why}"),
        None => cases.push(mds_case(threads, seconds)?),
    }
    cases.push(osd_case(threads, seconds, false)?);
    cases.push(osd_case(threads, seconds, true)?);
    if json {
        let mut obj = serde_json::Map::new();
        for c in &cases {
            let key = c.key;
            obj.insert(format!("{key}_before_per_s"), c.before_per_s.into());
            obj.insert(format!("{key}_after_per_s"), c.after_per_s.into());
            obj.insert(format!("{key}_longest_pause_ms"), c.longest_pause_ms.into());
            obj.insert(format!("{key}_failed_ops"), c.failed.into());
            if let Some(d) = c.detected_ms {
                obj.insert(format!("{key}_reported_down_ms"), d.into());
            }
        }
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "maat bench failover: {threads} client threads, {seconds} s per case, the failure at \
         {:.1} s",
        seconds as f64 / 3.0
    );
    say!(
        "{:<36} {:>12} {:>12} {:>18} {:>10} {:>18}",
        "case",
        "ops/s before",
        "ops/s after",
        "longest pause ms",
        "failed",
        "reported down ms"
    );
    for c in &cases {
        say!(
            "{:<36} {:>12.0} {:>12.0} {:>18.0} {:>10} {:>18}",
            c.name,
            c.before_per_s,
            c.after_per_s,
            c.longest_pause_ms,
            c.failed,
            c.detected_ms
                .map_or_else(|| "-".to_string(), |d| format!("{d:.0}"))
        );
        if let Some(e) = &c.first_error {
            say!("  first failure: {e}");
        }
    }
    Ok(())
}
