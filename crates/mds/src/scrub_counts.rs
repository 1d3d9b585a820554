//! Issue 41, "health at a glance": what the scrubs did, as the scrubber reports it
//! (`MdsRequest::ScrubDone`), and how many copies are degraded now (the records of
//! copies that missed a change, [`crate::copies_missed`]), for `maat stats`,
//! `/metrics` and `maat health`.
//!
//! The scrub counts are totals since the MDS started (Prometheus counters), except the
//! last run's end and unrepaired findings (gauges). The degraded counts are read from
//! the records when asked, so they are never stale.

use crate::{require_admin, MetaStore, Principal, Result};
use maat_proto::msg::{MdsResponse, ScrubCounts};
use maat_proto::UnixMillis;
use std::sync::atomic::{AtomicU64, Ordering};

/// Totals of the scrubs reported since the MDS started.
#[derive(Default)]
pub(crate) struct ScrubTotals {
    runs: AtomicU64,
    runs_deep: AtomicU64,
    files: AtomicU64,
    objects: AtomicU64,
    copies_good: AtomicU64,
    copies_missing: AtomicU64,
    copies_bad: AtomicU64,
    copies_repaired: AtomicU64,
    objects_lost: AtomicU64,
    millis: AtomicU64,
    /// Gauges: the last run's end (Unix seconds) and what it left unrepaired.
    last_finished_s: AtomicU64,
    last_unrepaired: AtomicU64,
}

impl ScrubTotals {
    fn add(&self, c: &ScrubCounts, now: UnixMillis) {
        let add = |a: &AtomicU64, v: u64| a.fetch_add(v, Ordering::Relaxed);
        add(&self.runs, 1);
        add(&self.runs_deep, u64::from(c.deep));
        add(&self.files, c.files);
        add(&self.objects, c.objects);
        add(&self.copies_good, c.copies_good);
        add(&self.copies_missing, c.copies_missing);
        add(&self.copies_bad, c.copies_bad);
        add(&self.copies_repaired, c.copies_repaired);
        add(&self.objects_lost, c.objects_lost);
        add(&self.millis, c.millis);
        self.last_finished_s.store(now.0 / 1000, Ordering::Relaxed);
        self.last_unrepaired.store(c.unrepaired, Ordering::Relaxed);
    }

    /// `(name, value)` pairs for `maat stats` (names the metrics endpoint knows).
    pub(crate) fn counters(&self) -> Vec<(String, u64)> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("scrub_runs".into(), load(&self.runs)),
            ("scrub_runs_deep".into(), load(&self.runs_deep)),
            ("scrub_files".into(), load(&self.files)),
            ("scrub_objects".into(), load(&self.objects)),
            ("scrub_copies_good".into(), load(&self.copies_good)),
            ("scrub_copies_missing".into(), load(&self.copies_missing)),
            ("scrub_copies_bad".into(), load(&self.copies_bad)),
            ("scrub_copies_repaired".into(), load(&self.copies_repaired)),
            ("scrub_objects_lost".into(), load(&self.objects_lost)),
            ("scrub_millis".into(), load(&self.millis)),
            (
                "scrub_last_run_timestamp_seconds".into(),
                load(&self.last_finished_s),
            ),
            (
                "scrub_last_run_unrepaired".into(),
                load(&self.last_unrepaired),
            ),
        ]
    }
}

impl<S: MetaStore> crate::Mds<S> {
    /// `MdsRequest::ScrubDone`: adds one scrub's counts (administrator only: the
    /// counts are what operators act on).
    pub(crate) fn scrub_done(
        &self,
        who: &Principal,
        counts: &ScrubCounts,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        self.scrubs.add(counts, now);
        Ok(MdsResponse::Ok)
    }
}
