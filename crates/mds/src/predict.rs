//! SPEC M6 prediction grouping: Recent Popularity (paper 000 §3.4, paper 002 §4.3). For
//! each file the MDS keeps the last `k` files opened next by the same user (its
//! successors); the most frequent of them is predicted when it occurs at least `j` times
//! (paper defaults 4 and 6), and predictions are followed along the chain (A predicts B,
//! B predicts C, …). A capability for A may then also name the predicted files, but
//! only those every user it names may access in the mode asked for (the caller checks).
//! Pure logic: no clock, no I/O; bounded tables.

use std::collections::{HashMap, VecDeque};

pub use crate::limits::PREDICT_CHAIN_MAX;
pub use crate::limits::PREDICT_FILES_MAX;
pub use crate::limits::PREDICT_USERS_MAX;

/// Successor history and each user's last open.
#[derive(Debug, Default)]
pub struct Predictor {
    successors: HashMap<u64, VecDeque<u64>>,
    last: HashMap<u64, u64>,
}

impl Predictor {
    /// Records that `uid` opened `file`: `file` becomes a successor of the user's previous
    /// open (kept among the last `k`).
    pub fn observe(&mut self, uid: u64, file: u64, k: usize) {
        if self.last.len() >= PREDICT_USERS_MAX && !self.last.contains_key(&uid) {
            self.last.clear();
        }
        let Some(previous) = self.last.insert(uid, file) else {
            return;
        };
        if previous == file {
            return;
        }
        if self.successors.len() >= PREDICT_FILES_MAX && !self.successors.contains_key(&previous) {
            self.successors.clear();
        }
        let seen = self.successors.entry(previous).or_default();
        seen.push_back(file);
        while seen.len() > k.max(1) {
            seen.pop_front();
        }
    }

    /// Recent Popularity: the most frequent of `file`'s last successors, when it occurs
    /// at least `j` times (ties go to the most recent).
    pub fn predict(&self, file: u64, j: usize) -> Option<u64> {
        let seen = self.successors.get(&file)?;
        let mut best: Option<(usize, u64)> = None;
        for &s in seen.iter().rev() {
            let count = seen.iter().filter(|&&x| x == s).count();
            if best.is_none_or(|(c, _)| count > c) {
                best = Some((count, s));
            }
        }
        best.filter(|(c, _)| *c >= j.max(1)).map(|(_, s)| s)
    }

    /// The chain of predictions from `file` (not including it), without repeats, at
    /// most [`PREDICT_CHAIN_MAX`] long.
    pub fn chain(&self, file: u64, j: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut at = file;
        while out.len() < PREDICT_CHAIN_MAX {
            match self.predict(at, j) {
                Some(next) if next != file && !out.contains(&next) => {
                    out.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successor_is_predicted_once_seen_j_of_the_last_k_times() {
        let mut p = Predictor::default();
        let (j, k) = (4, 6);
        // User 1 opens A(1) then B(2), four times over; user 2's opens do not interleave
        // with user 1's history.
        for _ in 0..3 {
            p.observe(1, 1, k);
            p.observe(1, 2, k);
            p.observe(2, 1, k);
            p.observe(2, 9, k);
        }
        // Successors of 1: [2, 9, 2, 9, 2, 9]: 2 occurs 3 times < j.
        assert_eq!(p.predict(1, j), None);
        p.observe(1, 1, k);
        p.observe(1, 2, k);
        // Last six: [9, 2, 9, 2, 9, 2]... still 3 of each.
        assert_eq!(p.predict(1, j), None);
        p.observe(3, 1, k);
        p.observe(3, 2, k);
        // [2, 9, 2, 9, 2, 2]: four 2s.
        assert_eq!(p.predict(1, j), Some(2));
        assert_eq!(p.predict(1, 5), None);
    }

    #[test]
    fn predictions_follow_the_chain_and_stop_at_cycles() {
        let mut p = Predictor::default();
        for _ in 0..4 {
            for f in [1, 2, 3, 1] {
                p.observe(7, f, 6);
            }
        }
        // 1 → 2 → 3 → 1: the chain from 1 is [2, 3] and does not come back to 1.
        assert_eq!(p.chain(1, 4), vec![2, 3]);
        assert_eq!(p.chain(2, 4), vec![3, 1]);
        // Nothing seen from 4.
        assert!(p.chain(4, 4).is_empty());
    }

    #[test]
    fn tables_stay_bounded() {
        let mut p = Predictor::default();
        for f in 0..(PREDICT_FILES_MAX as u64 + 10) {
            p.observe(1, f, 6);
        }
        assert!(p.successors.len() <= PREDICT_FILES_MAX);
        for u in 0..(PREDICT_USERS_MAX as u64 + 10) {
            p.observe(u, 1, 6);
        }
        assert!(p.last.len() <= PREDICT_USERS_MAX);
    }
}
