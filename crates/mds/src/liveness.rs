//! Issue 41: which OSDs are up, as the MDS knows it. Every OSD checks in once a second
//! (its revocation catch-up, MACed under the join key); an OSD not heard from for
//! [`OSD_DOWN_AFTER_MILLIS`] is down. Kept in memory only: after an MDS start every OSD
//! counts as up until that long has passed without a word from it. Clients read it to
//! ask a down OSD's copy last, and `maat admin osd ls` shows it.
//!
//! What an OSD's word proves: it holds the join key and is running. A captured check-in
//! sent again makes an OSD look up for a while longer (the request carries a nonce, no
//! time); that costs clients a slower failover, never a wrong answer.

use maat_proto::limits::OSD_DOWN_AFTER_MILLIS;
use maat_proto::msg::{OsdEntry, OsdState};
use std::collections::HashMap;
use std::sync::Mutex;

/// When each OSD was last heard from.
#[derive(Debug)]
pub(crate) struct Liveness {
    /// When this MDS started (protocol milliseconds).
    started: u64,
    heard: Mutex<HashMap<u64, u64>>,
}

impl Liveness {
    pub(crate) fn new(started: u64) -> Self {
        Liveness {
            started,
            heard: Mutex::new(HashMap::new()),
        }
    }

    /// OSD `osd` checked in at `now`.
    pub(crate) fn heard(&self, osd: u64, now: u64) {
        let mut heard = crate::lock(&self.heard);
        let at = heard.entry(osd).or_insert(now);
        *at = (*at).max(now);
    }

    /// Whether OSD `osd` counts as up at `now`.
    pub(crate) fn is_up(&self, osd: u64, now: u64) -> bool {
        let ago = crate::lock(&self.heard)
            .get(&osd)
            .map(|at| now.saturating_sub(*at));
        up(ago, now.saturating_sub(self.started))
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
}
