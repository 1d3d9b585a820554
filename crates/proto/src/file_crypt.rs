//! SPEC H3, H7: what the MDS keeps for an encrypted file beside its size, and hands to
//! whoever opens it: the lockbox of its key tree, which write generation each stripe
//! holds, and, while a rekey is in progress, the earlier trees stripes are still sealed
//! under. The MDS updates it; it never holds a key that opens a lockbox.
//!
//! **Generations** are kept as runs: `(first stripe, generation)` in ascending order, each
//! run reaching to the next; stripes before the first run have generation 0 (never
//! written encrypted). At most [`GENERATION_RUNS_MAX`] runs per file.
//!
//! **Tree versions** (SPEC H7). A rekey gives a file a new key tree (version + 1) while
//! its stripes stay sealed under the old one until each is rewritten; the MDS keeps the
//! earlier trees' lockboxes and, as runs like the generations', which stripes use which
//! tree. A stripe's blocks bind the version they were sealed under (it is in the
//! additional data), so a block sealed under one tree never opens as another's.

use crate::{ProtoError, Result};
use serde::{Deserialize, Serialize};

pub use crate::limits::GENERATION_RUNS_MAX;

pub use crate::limits::EARLIER_TREES_MAX;

/// What the MDS keeps for an encrypted file, and hands to whoever opens it: the lockbox
/// of its current key tree (sealed to the KDS and the owner; the MDS cannot open it), the
/// generation runs, and, while a rekey (SPEC H7) is in progress, the lockboxes of earlier
/// trees and which stripes are still sealed under them.
///
/// Version runs are kept as generation runs are: `(first stripe, tree version)`, each
/// reaching to the next; 0 means the current tree. Every stripe recorded as rewritten is
/// under the current tree (writers always seal under it); an earlier tree no stripe uses
/// any more is dropped ([`FileCrypt::retire_unused`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FileCrypt {
    /// The encoded [`crate::horus::Lockbox`] of the current tree.
    #[serde(with = "serde_bytes")]
    pub lockbox: Vec<u8>,
    /// `(first stripe, generation)` runs, ascending.
    pub generations: Vec<(u32, u64)>,
    /// Earlier trees some stripes are still sealed under, oldest first. (Defaults for
    /// self-describing copies made before tree versions, like a client's session cache.)
    #[serde(default)]
    pub earlier: Vec<EarlierTree>,
    /// `(first stripe, tree version)` runs, ascending; 0: the current tree.
    #[serde(default)]
    pub versions: Vec<(u32, u32)>,
}

/// An earlier key tree of a file being rekeyed (SPEC H7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierTree {
    /// Its version.
    pub version: u32,
    /// Its encoded lockbox.
    #[serde(with = "serde_bytes")]
    pub lockbox: Vec<u8>,
}

impl FileCrypt {
    /// Whether the file's first lockbox is still to come (SPEC H5): it was created
    /// encrypted by `OpenSealed` and its writer has not recorded its size yet. It holds
    /// nothing readable until then.
    pub fn is_pending(&self) -> bool {
        self.lockbox.is_empty()
    }

    /// The generation stripe `stripe` was last written with (0: never).
    pub fn generation(&self, stripe: u32) -> u64 {
        run_value(&self.generations, stripe)
    }

    /// The earlier tree version stripe `stripe` is still sealed under (`None`: the
    /// current tree).
    pub fn earlier_version(&self, stripe: u32) -> Option<u32> {
        Some(run_value(&self.versions, stripe)).filter(|v| *v != 0)
    }

    /// The lockbox of earlier tree `version`.
    pub fn earlier_lockbox(&self, version: u32) -> Option<&[u8]> {
        self.earlier
            .iter()
            .find(|t| t.version == version)
            .map(|t| t.lockbox.as_slice())
    }

    /// Records that stripes `first..end` now hold generation `generation`, sealed under
    /// the current tree.
    pub fn record(&mut self, first: u32, end: u32, generation: u64) -> Result<()> {
        self.record_sealed(first, end, generation, None)
    }

    /// [`FileCrypt::record`] for stripes sealed under earlier tree `earlier` (`None`:
    /// the current one): a writer that opened the file before a rekey began seals under
    /// the tree it knows; the rekey then rewrites those stripes too.
    pub fn record_sealed(
        &mut self,
        first: u32,
        end: u32,
        generation: u64,
        earlier: Option<u32>,
    ) -> Result<()> {
        record_run(&mut self.generations, first, end, generation)?;
        record_run(&mut self.versions, first, end, earlier.unwrap_or(0))
    }

    /// Forgets the stripes from `stripes` on (the file was cut to fewer stripes).
    pub fn truncate(&mut self, stripes: u32) {
        truncate_runs(&mut self.generations, stripes);
        truncate_runs(&mut self.versions, stripes);
    }

    /// SPEC H7: makes `lockbox` (of tree `current + 1`) the current tree; the stripes
    /// below `stripes` sealed under tree `current` keep it as an earlier tree until they
    /// are rewritten. Stripes of older earlier trees keep theirs. Unchanged on error.
    pub fn begin_rekey(&mut self, lockbox: Vec<u8>, current: u32, stripes: u32) -> Result<()> {
        let mut next = self.clone();
        next.truncate(stripes);
        let mut runs = Vec::with_capacity(next.versions.len() + 2);
        if next.versions.first().is_none_or(|(f, _)| *f > 0) {
            runs.push((0, current));
        }
        runs.extend(
            next.versions
                .iter()
                .map(|&(f, v)| (f, if v == 0 { current } else { v })),
        );
        runs.retain(|(f, _)| *f < stripes);
        runs.push((stripes, 0));
        merge_runs(&mut runs);
        next.versions = runs;
        next.earlier.push(EarlierTree {
            version: current,
            lockbox: std::mem::replace(&mut next.lockbox, lockbox),
        });
        next.retire_unused();
        if next.earlier.len() > EARLIER_TREES_MAX {
            return Err(ProtoError::TooLarge {
                what: "earlier key trees (let the rekey in progress finish)",
                len: next.earlier.len(),
                limit: EARLIER_TREES_MAX,
            });
        }
        *self = next;
        Ok(())
    }

    /// Drops the earlier trees no stripe is sealed under any more; returns how many.
    pub fn retire_unused(&mut self) -> usize {
        let before = self.earlier.len();
        let used: Vec<u32> = self.versions.iter().map(|(_, v)| *v).collect();
        self.earlier.retain(|t| used.contains(&t.version));
        before - self.earlier.len()
    }

    /// The runs of stripes below `stripes` still sealed under an earlier tree, with it.
    pub fn stripes_on_earlier(&self, stripes: u32) -> Vec<(std::ops::Range<u32>, u32)> {
        let mut out = Vec::new();
        for (i, &(first, version)) in self.versions.iter().enumerate() {
            let end = self
                .versions
                .get(i + 1)
                .map_or(stripes, |(f, _)| *f)
                .min(stripes);
            if version != 0 && first < end {
                out.push((first..end, version));
            }
        }
        out
    }

    /// Checks the runs are ascending and bounded and every version a stripe names has
    /// its lockbox (for values read from a peer or disk).
    pub fn check(&self) -> Result<()> {
        check_runs(&self.generations, "generation runs")?;
        check_runs(&self.versions, "tree version runs")?;
        if self.earlier.len() > EARLIER_TREES_MAX {
            return Err(ProtoError::TooLarge {
                what: "earlier key trees",
                len: self.earlier.len(),
                limit: EARLIER_TREES_MAX,
            });
        }
        if self
            .versions
            .iter()
            .any(|(_, v)| *v != 0 && self.earlier_lockbox(*v).is_none())
        {
            return Err(ProtoError::Malformed {
                what: "tree version runs",
                reason: "a stripe names a tree without its lockbox",
            });
        }
        Ok(())
    }
}

/// The value of the run holding `stripe` (the default before the first run).
fn run_value<T: Copy + Default>(runs: &[(u32, T)], stripe: u32) -> T {
    let at = runs.partition_point(|(first, _)| *first <= stripe);
    at.checked_sub(1)
        .and_then(|i| runs.get(i))
        .map_or_else(T::default, |(_, v)| *v)
}

/// Sets stripes `first..end` to `value`.
fn record_run<T: Copy + Default + Eq>(
    runs: &mut Vec<(u32, T)>,
    first: u32,
    end: u32,
    value: T,
) -> Result<()> {
    if first >= end {
        return Ok(());
    }
    let after = run_value(runs, end);
    runs.retain(|(f, _)| *f < first || *f > end);
    runs.push((first, value));
    runs.push((end, after));
    runs.sort_unstable_by_key(|(f, _)| *f);
    merge_runs(runs);
    if runs.len() > GENERATION_RUNS_MAX {
        return Err(ProtoError::TooLarge {
            what: "stripe runs (rewrite the file whole)",
            len: runs.len(),
            limit: GENERATION_RUNS_MAX,
        });
    }
    Ok(())
}

/// Forgets the runs from `stripes` on.
fn truncate_runs<T: Copy + Default + Eq>(runs: &mut Vec<(u32, T)>, stripes: u32) {
    runs.retain(|(f, _)| *f < stripes);
    runs.push((stripes, T::default()));
    merge_runs(runs);
}

/// Drops runs that repeat the value before them (the default before the first).
fn merge_runs<T: Copy + Default + Eq>(runs: &mut Vec<(u32, T)>) {
    let mut previous = T::default();
    runs.retain(|(_, v)| {
        let keep = *v != previous;
        previous = *v;
        keep
    });
}

fn check_runs<T>(runs: &[(u32, T)], what: &'static str) -> Result<()> {
    if runs.len() > GENERATION_RUNS_MAX {
        return Err(ProtoError::TooLarge {
            what,
            len: runs.len(),
            limit: GENERATION_RUNS_MAX,
        });
    }
    if runs.windows(2).any(|w| match w {
        [a, b] => a.0 >= b.0,
        _ => false,
    }) {
        return Err(ProtoError::Malformed {
            what,
            reason: "not ascending",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn a_rekey_moves_stripes_to_an_earlier_tree_until_rewritten() {
        let mut c = FileCrypt {
            lockbox: vec![1],
            ..FileCrypt::default()
        };
        c.record(0, 10, 7).unwrap();
        c.begin_rekey(vec![2], 1, 10).unwrap();
        assert_eq!(c.lockbox, vec![2]);
        assert_eq!(c.earlier_lockbox(1), Some(&[1u8][..]));
        assert_eq!(c.stripes_on_earlier(10), vec![(0..10, 1)]);
        assert_eq!(c.earlier_version(9), Some(1));
        assert_eq!(c.earlier_version(10), None);
        // Rewritten stripes are under the current tree.
        c.record(2, 4, 8).unwrap();
        assert_eq!(c.stripes_on_earlier(10), vec![(0..2, 1), (4..10, 1)]);
        // A second rekey before the first finished: stripes keep their earlier tree, the
        // rewritten ones move to version 2.
        c.begin_rekey(vec![3], 2, 10).unwrap();
        assert_eq!(
            c.stripes_on_earlier(10),
            vec![(0..2, 1), (2..4, 2), (4..10, 1)]
        );
        c.check().unwrap();
        c.record(0, 10, 9).unwrap();
        assert_eq!(c.retire_unused(), 2);
        assert!(c.earlier.is_empty() && c.stripes_on_earlier(10).is_empty());
        // A file with no stripes retires its old tree at once; a cut file what it cut.
        c.begin_rekey(vec![4], 3, 0).unwrap();
        assert!(c.earlier.is_empty());
        c.begin_rekey(vec![5], 4, 10).unwrap();
        c.truncate(0);
        assert_eq!(c.retire_unused(), 1);
        // Too many trees at once are refused; a run naming a tree without its lockbox
        // does not check.
        // (Each round rewrites one more stripe, which the next round leaves on its tree.)
        let mut c = FileCrypt::default();
        c.record(0, 8, 1).unwrap();
        for v in 1..=EARLIER_TREES_MAX as u32 {
            c.begin_rekey(vec![], v, 8).unwrap();
            c.record(v - 1, v, 1).unwrap();
        }
        assert_eq!(c.earlier.len(), EARLIER_TREES_MAX);
        assert!(c.begin_rekey(vec![], 9, 8).is_err());
        let c = FileCrypt {
            versions: vec![(0, 3)],
            ..FileCrypt::default()
        };
        assert!(c.check().is_err());
    }

    #[test]
    fn generation_runs_record_overwrite_and_truncate() {
        let mut c = FileCrypt::default();
        assert_eq!(c.generation(0), 0);
        c.record(0, 10, 7).unwrap();
        assert_eq!(c.generations, vec![(0, 7), (10, 0)]);
        c.record(3, 5, 8).unwrap();
        assert_eq!(c.generations, vec![(0, 7), (3, 8), (5, 7), (10, 0)]);
        assert_eq!(
            (0..11).map(|s| c.generation(s)).collect::<Vec<_>>(),
            vec![7, 7, 7, 8, 8, 7, 7, 7, 7, 7, 0]
        );
        c.record(0, 12, 9).unwrap();
        assert_eq!(c.generations, vec![(0, 9), (12, 0)]);
        c.truncate(4);
        assert_eq!(c.generations, vec![(0, 9), (4, 0)]);
        c.check().unwrap();
        // A model check over random operations.
        let mut model = vec![0u64; 64];
        let mut c = FileCrypt::default();
        let mut x = 1u64;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let a = (x >> 33) as u32 % 64;
            let b = (x >> 20) as u32 % 65;
            let g = (x >> 50) % 4;
            if x % 7 == 0 {
                c.truncate(a);
                for m in model.iter_mut().skip(a as usize) {
                    *m = 0;
                }
            } else {
                let (a, b) = (a.min(b), a.max(b));
                c.record(a, b, g).unwrap();
                for m in &mut model[a as usize..b as usize] {
                    *m = g;
                }
            }
            c.check().unwrap();
            for (s, m) in model.iter().enumerate() {
                assert_eq!(c.generation(s as u32), *m, "stripe {s}");
            }
        }
    }
}
