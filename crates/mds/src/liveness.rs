//! Issue 41: which OSDs are up, as the MDS knows it. Every OSD checks in once a second
//! (its revocation catch-up, MACed under the join key); an OSD not heard from for
//! [`OSD_DOWN_AFTER_MILLIS`] is down. Kept in memory (below: shared stores): after an MDS start every OSD
//! counts as up until that long has passed without a word from it. Clients read it to
//! ask a down OSD's copy last, and `maat admin osd ls` shows it.
//!
//! What an OSD's word proves: it holds the join key and is running. A captured check-in
//! sent again makes an OSD look up for a while longer (the request carries a nonce, no
//! time); that costs clients a slower failover, never a wrong answer.
//!
//! Issue 42: an OSD checks in at one MDS instance at a time (the one that answered it
//! last). On a store
//! several instances share, that instance copies when it heard each OSD into the store
//! (`meta` `osd_heard/ID`, at most every [`HEARD_SHARED_EVERY_MILLIS`], one batch for all
//! OSDs), and every instance takes the newest of the store's and its own before it says
//! which OSDs are up. Times are each instance's clock: instances on hosts whose clocks
//! disagree by a second see an OSD up or down a second early or late.

use crate::store::{Batch, Op};
use maat_proto::limits::OSD_DOWN_AFTER_MILLIS;
use maat_proto::msg::{OsdEntry, OsdState};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// How often an instance copies the check-ins it heard into a shared store.
pub(crate) const HEARD_SHARED_EVERY_MILLIS: u64 = 1_000;
/// The `meta` keys of those copies: the prefix, then the OSD id in hex.
pub(crate) const HEARD_PREFIX: &str = "osd_heard/";
/// How far behind a check-in that gives an OSD its lease the store's time for that OSD
/// may be: past it, the instance writes the time into the store before it answers
/// ([`Liveness::write_through`]). Another instance counts an OSD as serving nothing it
/// was not told once the store shows it silent for `OSD_DOWN_AFTER_MILLIS +
/// OSD_HEARD_LAG_MILLIS`: then the last lease was granted at least that less this ago,
/// longer than the lease, with a second to spare.
pub(crate) const HEARD_STORED_STALE_MILLIS: u64 = OSD_DOWN_AFTER_MILLIS
    + maat_proto::limits::OSD_HEARD_LAG_MILLIS
    - maat_proto::limits::OSD_LEASE_MILLIS
    - 1_000;
const _: () = assert!(
    OSD_DOWN_AFTER_MILLIS + maat_proto::limits::OSD_HEARD_LAG_MILLIS
        > HEARD_STORED_STALE_MILLIS + maat_proto::limits::OSD_LEASE_MILLIS
);

/// When each OSD was last heard from.
#[derive(Debug)]
pub(crate) struct Liveness {
    /// When this MDS started (protocol milliseconds).
    started: u64,
    /// (In OSD order: the copies to the store write rows in one order at every instance,
    /// so instances writing the same rows take their locks in one order.)
    heard: Mutex<BTreeMap<u64, u64>>,
    /// The OSDs that checked in here since their time was last copied into the store
    /// (a set, not a time: a check-in heard in the very millisecond of a copy, after it,
    /// is copied next time; found by the simulator, where every OSD checks in at one
    /// instant and only the first was ever copied).
    unshared: Mutex<std::collections::BTreeSet<u64>>,
    /// When the check-ins were last copied into the store.
    shared_at: Mutex<u64>,
    /// The newest time of each OSD known to be in the store (written by this instance,
    /// or read from it).
    stored: Mutex<BTreeMap<u64, u64>>,
}

impl Liveness {
    pub(crate) fn new(started: u64) -> Self {
        Liveness {
            started,
            heard: Mutex::new(BTreeMap::new()),
            unshared: Mutex::default(),
            shared_at: Mutex::new(0),
            stored: Mutex::default(),
        }
    }

    /// The batch that copies the check-ins heard since the last copy into the store, if
    /// that copy is [`HEARD_SHARED_EVERY_MILLIS`] old at `now` and there are any.
    pub(crate) fn due(&self, now: u64) -> Option<Batch> {
        {
            let mut at = crate::lock(&self.shared_at);
            if now.saturating_sub(*at) < HEARD_SHARED_EVERY_MILLIS {
                return None;
            }
            *at = now;
        }
        // Only what was heard here since the last copy: an OSD that moved its check-ins
        // to another instance is not written back here at the older time.
        let unshared = std::mem::take(&mut *crate::lock(&self.unshared));
        let heard = crate::lock(&self.heard);
        let ops: Vec<Op> = unshared
            .iter()
            .filter_map(|osd| heard.get(osd).map(|at| (osd, at)))
            .map(|(osd, at)| {
                Op::PutMeta(format!("{HEARD_PREFIX}{osd:x}"), at.to_be_bytes().to_vec())
            })
            .collect();
        (!ops.is_empty()).then_some(Batch(ops))
    }

    /// Takes in check-ins other instances copied into the store (`meta` entries under
    /// [`HEARD_PREFIX`]; ones that do not parse are skipped).
    pub(crate) fn merge(&self, stored: Vec<(String, Vec<u8>)>) {
        let mut heard = crate::lock(&self.heard);
        for (osd, at) in stored.iter().filter_map(|(k, v)| parse(k, v)) {
            let mine = heard.entry(osd).or_insert(at);
            *mine = (*mine).max(at);
            self.note_stored(osd, at);
        }
    }

    /// `batch` (from [`Liveness::due`] or [`Liveness::write_through`]) is committed.
    pub(crate) fn committed(&self, batch: &Batch) {
        for op in &batch.0 {
            if let Op::PutMeta(key, value) = op {
                if let Some((osd, at)) = parse(key, value) {
                    self.note_stored(osd, at);
                }
            }
        }
    }

    fn note_stored(&self, osd: u64, at: u64) {
        let mut stored = crate::lock(&self.stored);
        let known = stored.entry(osd).or_insert(at);
        *known = (*known).max(at);
    }

    /// Issue 42: the batch that writes OSD `osd`'s check-in at `now` into the store at
    /// once, when the store's time for it may be more than [`HEARD_STORED_STALE_MILLIS`]
    /// old: to commit before the check-in that gives the OSD its lease is answered, so
    /// that no instance counts an OSD silent (and acknowledges a change that missed its
    /// copy without it knowing) while its lease holds. (Found by the simulator with hung
    /// OSDs: an OSD back after 14 s checked in at one instance, and 550 ms later another
    /// still saw it silent and acknowledged a change whose record the OSD did not know;
    /// it served the old copy.) Mostly `None`: the periodic copy keeps the store fresh.
    pub(crate) fn write_through(&self, osd: u64, now: u64) -> Option<Batch> {
        let stale = crate::lock(&self.stored)
            .get(&osd)
            .is_none_or(|at| now.saturating_sub(*at) > HEARD_STORED_STALE_MILLIS);
        stale.then(|| {
            Batch(vec![Op::PutMeta(
                format!("{HEARD_PREFIX}{osd:x}"),
                now.to_be_bytes().to_vec(),
            )])
        })
    }

    /// OSD `osd` checked in at `now`.
    pub(crate) fn heard(&self, osd: u64, now: u64) {
        let mut heard = crate::lock(&self.heard);
        let at = heard.entry(osd).or_insert(now);
        *at = (*at).max(now);
        crate::lock(&self.unshared).insert(osd);
    }

    /// Whether OSD `osd` has been silent for `OSD_DOWN_AFTER_MILLIS + extra` at `now`
    /// (never heard: whether this MDS has run that long). What it takes to count an OSD
    /// as serving nothing it has not been told (its lease has ended).
    pub(crate) fn silent(&self, osd: u64, now: u64, extra: u64) -> bool {
        let limit = OSD_DOWN_AFTER_MILLIS.saturating_add(extra);
        let ago = crate::lock(&self.heard)
            .get(&osd)
            .map(|at| now.saturating_sub(*at));
        ago.unwrap_or(now.saturating_sub(self.started)) >= limit
    }

    /// Every OSD of `osds` as of `now`.
    pub(crate) fn states(&self, osds: &[OsdEntry], now: u64) -> Vec<OsdState> {
        let heard = crate::lock(&self.heard);
        osds.iter()
            .map(|o| {
                let ago = heard.get(&o.id).map(|at| now.saturating_sub(*at));
                OsdState {
                    id: o.id,
                    address: o.address.clone(),
                    weight: o.weight,
                    up: up(ago, now.saturating_sub(self.started)),
                    heard_ms_ago: ago,
                }
            })
            .collect()
    }
}

/// Up: heard from within the limit, or not heard yet while this MDS is younger than it.
fn up(heard_ms_ago: Option<u64>, running_ms: u64) -> bool {
    match heard_ms_ago {
        Some(ago) => ago < OSD_DOWN_AFTER_MILLIS,
        None => running_ms < OSD_DOWN_AFTER_MILLIS,
    }
}

/// An OSD's check-in time as the store keeps it (`None`: not one).
fn parse(key: &str, value: &[u8]) -> Option<(u64, u64)> {
    let osd = key
        .strip_prefix(HEARD_PREFIX)
        .and_then(|id| u64::from_str_radix(id, 16).ok())?;
    let at = <[u8; 8]>::try_from(value).ok().map(u64::from_be_bytes)?;
    Some((osd, at))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn osd(id: u64) -> OsdEntry {
        OsdEntry {
            id,
            address: format!("10.0.0.{id}:7000"),
            sealing_key: [0; 32],
            weight: 1,
        }
    }

    #[test]
    fn an_osd_is_down_once_silent_for_the_limit_and_unknown_ones_only_after_a_start() {
        let l = Liveness::new(1_000);
        let osds = [osd(1), osd(2)];
        // Just started: nobody heard yet, everybody up.
        let s = l.states(&osds, 2_000);
        assert!(s.iter().all(|o| o.up && o.heard_ms_ago.is_none()));
        l.heard(1, 3_000);
        let s = l.states(&osds, 1_000 + OSD_DOWN_AFTER_MILLIS);
        assert_eq!((s[0].up, s[1].up), (true, false));
        assert_eq!(s[0].heard_ms_ago, Some(OSD_DOWN_AFTER_MILLIS - 2_000));
        // Silent for the limit: down; heard again: up.
        let s = l.states(&osds, 3_000 + OSD_DOWN_AFTER_MILLIS);
        assert!(!s[0].up);
        l.heard(1, 9_000);
        // An older word (a late frame) does not move the time back.
        l.heard(1, 4_000);
        let s = l.states(&osds, 9_500);
        assert!(s[0].up);
        assert_eq!(s[0].heard_ms_ago, Some(500));
        assert_eq!(s[1].address, "10.0.0.2:7000");
    }

    #[test]
    fn silent_counts_from_the_last_check_in_or_the_start_plus_the_extra_given() {
        let l = Liveness::new(1_000);
        assert!(!l.silent(1, 1_000 + OSD_DOWN_AFTER_MILLIS - 1, 0));
        assert!(l.silent(1, 1_000 + OSD_DOWN_AFTER_MILLIS, 0));
        l.heard(1, 10_000);
        let down = 10_000 + OSD_DOWN_AFTER_MILLIS;
        assert!(l.silent(1, down, 0));
        assert!(!l.states(&[osd(1)], down)[0].up);
        // With the lag of a shared store, later.
        assert!(!l.silent(1, down, 2_000));
        assert!(!l.silent(1, down + 1_999, 2_000));
        assert!(l.silent(1, down + 2_000, 2_000));
    }

    /// Issue 42: an instance copies into the store only what it heard since its last
    /// copy, at most once a second, and takes in the newest of what others copied.
    #[test]
    fn only_check_ins_heard_since_the_last_copy_are_copied() {
        let keys = |b: Option<Batch>| -> Vec<String> {
            b.map(|b| b.0)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|op| match op {
                    Op::PutMeta(k, _) => Some(k),
                    _ => None,
                })
                .collect()
        };
        let l = Liveness::new(0);
        l.heard(1, 1_000);
        l.heard(2, 1_500);
        assert_eq!(keys(l.due(2_000)), ["osd_heard/1", "osd_heard/2"]);
        l.heard(1, 2_500);
        assert!(l.due(2_600).is_none(), "a second copy within the second");
        // OSD 2 checks in elsewhere now: its older time is not written again.
        assert_eq!(keys(l.due(3_100)), ["osd_heard/1"]);
        assert!(l.due(4_200).is_none(), "nothing heard since");
        l.merge(vec![
            ("osd_heard/2".into(), 4_000u64.to_be_bytes().to_vec()),
            ("osd_heard/zz".into(), vec![1]),
        ]);
        let s = l.states(&[osd(2)], 4_500);
        assert_eq!(s[0].heard_ms_ago, Some(500));
        assert!(l.due(5_200).is_none(), "what was merged is not copied back");
        // Heard in the millisecond of a copy, after it: copied at the next one.
        l.heard(1, 6_300);
        assert_eq!(keys(l.due(6_300)), ["osd_heard/1"]);
        l.heard(2, 6_300);
        assert!(l.due(6_400).is_none(), "a second copy within the second");
        assert_eq!(keys(l.due(7_300)), ["osd_heard/2"]);
    }

    #[test]
    fn a_check_in_is_written_through_while_the_store_may_be_stale() {
        let l = Liveness::new(0);
        // Nothing known to be stored: written at once.
        let b = l.write_through(1, 10_000).unwrap();
        assert!(l.write_through(1, 10_000).is_some(), "until committed");
        l.committed(&b);
        assert!(l
            .write_through(1, 10_000 + HEARD_STORED_STALE_MILLIS)
            .is_none());
        assert!(l
            .write_through(1, 10_000 + HEARD_STORED_STALE_MILLIS + 1)
            .is_some());
        // What the periodic copy or another instance stored counts too.
        l.merge(vec![(
            "osd_heard/1".into(),
            20_000u64.to_be_bytes().to_vec(),
        )]);
        assert!(l.write_through(1, 21_000).is_none());
        assert!(l.write_through(2, 21_000).is_some());
    }
}
