//! Issue 41: the scrubber `maat up` runs beside its daemons. It is a client, logged in as
//! the administrator from the cluster's `admin` home, and does what `maat admin scrub
//! --repair /` does (`maat_client::Client::scrub`): it reads every copy of every object
//! and puts the missing and damaged ones back from a good copy, each write checked by the
//! OSD that takes it. It runs
//!
//! * once after the cluster starts (a disk replaced while the cluster was stopped),
//! * when the supervisor restarted an OSD, or the MDS shows an OSD up again that it
//!   showed down (a disk lost with its process, copies an OSD missed while away),
//!
//! each a *light* scrub (copies compared by their OSDs' digests, only those that
//! disagree read), and every `--scrub-every` seconds a *deep* one (every copy read and
//! checked: bit rot that struck copies alike, encrypted blocks that no longer
//! authenticate),
//!
//! and only while every OSD is up (an OSD that does not answer costs each of its copies
//! a timeout and can be repaired by no one): until then the run waits. It says on
//! standard error when it starts a run, why, and what the run found and repaired, and
//! keeps the last run's outcome in `DATA/scrub-status.json` for `maat health`.

use crate::scrub_status::{self, ScrubStatus};
use maat_client::{Client, ClusterFile, Home, ScrubDepth, ScrubReport};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the scrubber asks the MDS which OSDs are up.
const POLL: Duration = Duration::from_secs(2);
/// After a run that left copies unrepaired (an OSD that had not registered again yet, a
/// write at work), the next run after this long, doubled each time up to an hour.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// The reasons the next run has, shared with the supervisor.
#[derive(Clone, Default)]
pub struct Wanted(Arc<std::sync::Mutex<Vec<(String, ScrubDepth)>>>);

impl Wanted {
    /// Asks for a light run, saying why.
    pub fn ask(&self, why: impl Into<String>) {
        self.ask_for(why, ScrubDepth::Light);
    }

    fn ask_for(&self, why: impl Into<String>, depth: ScrubDepth) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((why.into(), depth));
    }

    fn take(&self) -> Vec<(String, ScrubDepth)> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn pending(&self) -> bool {
        !self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }
}

/// Starts the scrubber of the cluster in `data`; it ends when `stop` is set (between
/// runs: a run in progress ends with the daemons it talks to).
/// `rate`: the most bytes a second its repairs write back (0: no limit).
pub fn spawn(
    data: &Path,
    every: Option<Duration>,
    rate: u64,
    wanted: Wanted,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let data = data.to_path_buf();
    wanted.ask("the cluster started");
    std::thread::spawn(move || run(&data, every, rate, &wanted, &stop))
}

fn sleep_unless_stopped(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client(data: &Path) -> anyhow::Result<Client> {
    let file = ClusterFile::load(&data.join("client.toml"))?;
    Ok(Client::new(file, Some(Home::new(data.join("admin"))))?)
}

/// Writes what a run that began at `started` for `reasons` ended in to the status file
/// `maat health` reads ([`crate::scrub_status`]); the status written, for the next run.
fn record(
    data: &Path,
    before: Option<ScrubStatus>,
    depth: ScrubDepth,
    reasons: Vec<String>,
    started: Instant,
    outcome: &Result<ScrubReport, maat_client::ClientError>,
) -> ScrubStatus {
    let now = scrub_status::now_ms();
    let deep = depth == ScrubDepth::Deep;
    let mut status = ScrubStatus {
        version: scrub_status::VERSION,
        finished_ms: now,
        depth: if deep { "deep" } else { "light" }.into(),
        reasons,
        seconds: started.elapsed().as_secs_f64(),
        last_deep_ms: before.as_ref().and_then(|b| b.last_deep_ms),
        copies_repaired_total: before.map_or(0, |b| b.copies_repaired_total),
        ..ScrubStatus::default()
    };
    match outcome {
        Ok(r) => {
            status.files = r.files;
            status.objects = r.objects;
            status.copies_missing = r.copies_missing;
            status.copies_bad = r.copies_bad;
            status.copies_repaired = r.copies_repaired;
            status.copies_repaired_total += r.copies_repaired;
            status.unrepaired = r.unrepaired();
            if deep {
                status.last_deep_ms = Some(now);
            }
        }
        Err(e) => status.error = Some(e.to_string()),
    }
    if let Err(e) = scrub_status::save(data, &status) {
        eprintln!("maat: scrubber: {e:#}");
    }
    status
}

fn run(data: &Path, every: Option<Duration>, rate: u64, wanted: &Wanted, stop: &AtomicBool) {
    // The last deep run survives a restart of `maat up`.
    let mut status = scrub_status::load_beside(&data.join("client.toml"))
        .ok()
        .flatten();
    let mut c: Option<Client> = None;
    let mut down_seen: BTreeSet<u64> = BTreeSet::new();
    let mut next_periodic = every.map(|e| Instant::now() + e);
    let mut waiting_said = false;
    let mut mds_silent = false;
    let mut retry: Option<(Instant, String)> = None;
    let mut backoff = RETRY_FIRST;
    while !stop.load(Ordering::SeqCst) {
        if c.is_none() {
            match client(data) {
                Ok(new) => {
                    new.set_repair_rate(rate);
                    c = Some(new);
                }
                Err(e) => {
                    eprintln!("maat: scrubber: cannot log in as the administrator: {e}");
                    sleep_unless_stopped(stop, POLL * 5);
                    continue;
                }
            }
        }
        let Some(client) = c.as_ref() else { continue };
        let placement = match client.refresh_placement() {
            Ok(p) => p,
            Err(e) => {
                if !mds_silent {
                    eprintln!(
                        "maat: scrubber: the MDS did not answer: {e}; asking again every {} s",
                        POLL.as_secs()
                    );
                    mds_silent = true;
                }
                c = None;
                sleep_unless_stopped(stop, POLL);
                continue;
            }
        };
        if mds_silent {
            eprintln!("maat: scrubber: the MDS answers again");
            mds_silent = false;
        }
        let down: Vec<u64> = placement
            .osds
            .iter()
            .filter(|o| !o.up)
            .map(|o| o.id)
            .collect();
        for o in &placement.osds {
            if o.up && down_seen.remove(&o.id) {
                wanted.ask(format!("osd {} is up again", o.id));
            }
        }
        down_seen.extend(&down);
        if let Some((at, why)) = retry.take() {
            match Instant::now() >= at {
                true => wanted.ask(why),
                false => retry = Some((at, why)),
            }
        }
        if let Some(at) = next_periodic {
            if Instant::now() >= at {
                wanted.ask_for("its period passed", ScrubDepth::Deep);
                next_periodic = every.map(|e| Instant::now() + e);
            }
        }
        if wanted.pending() && !down.is_empty() {
            if !waiting_said {
                eprintln!("maat: scrubber: a repair is due; waiting for osd {down:?} to come up");
                waiting_said = true;
            }
        } else if wanted.pending() {
            waiting_said = false;
            let reasons = wanted.take();
            let depth = match reasons.iter().any(|(_, d)| *d == ScrubDepth::Deep) {
                true => ScrubDepth::Deep,
                false => ScrubDepth::Light,
            };
            let why: Vec<String> = reasons.into_iter().map(|(w, _)| w).collect();
            let said = why.join(", ");
            eprintln!(
                "maat: scrubber: {} repairing scrub of / ({})",
                match depth {
                    ScrubDepth::Deep => "deep",
                    ScrubDepth::Light => "light",
                },
                said
            );
            let started = Instant::now();
            let outcome = client.scrub("/", depth, true, &mut |_| {});
            status = Some(record(data, status.take(), depth, why, started, &outcome));
            match outcome {
                Ok(r) => {
                    let left = r.unrepaired();
                    eprintln!(
                        "maat: scrubber: {} files, {} objects in {:.1} s: {} copies missing, {} bad, {} repaired{}",
                        r.files,
                        r.objects,
                        started.elapsed().as_secs_f64(),
                        r.copies_missing,
                        r.copies_bad,
                        r.copies_repaired,
                        match left {
                            0 => String::new(),
                            n => format!("; {n} findings not repaired (`maat admin scrub` names them), next try in {} s", backoff.as_secs()),
                        }
                    );
                    if left == 0 {
                        backoff = RETRY_FIRST;
                    } else {
                        // With a fresh map: an OSD may serve at a new address.
                        let why = format!("{left} findings were left unrepaired");
                        retry = Some((Instant::now() + backoff, why));
                        backoff = (backoff * 2).min(RETRY_MAX);
                        c = None;
                    }
                }
                Err(e) => {
                    eprintln!(
                        "maat: scrubber: the scrub failed: {e}; next try in {} s",
                        backoff.as_secs()
                    );
                    retry = Some((Instant::now() + backoff, "the last run failed".into()));
                    backoff = (backoff * 2).min(RETRY_MAX);
                    c = None;
                }
            }
        }
        sleep_unless_stopped(stop, POLL);
    }
}
