//! Storage faults for the simulator (feature `sim`): the daemons' own stores
//! ([`crate::object_store::FileObjectStore`], [`crate::meta_store::RedbStore`]) ask this
//! before a write or after a read whether the disk fails them, and how. Every draw comes
//! from one seeded generator; simulated tasks run one at a time, so a seed draws the same
//! faults at the same places in every run.
//!
//! What a fault does (issue 39):
//!
//! * an object write **lost**: nothing reaches the file and the store answers an I/O error
//!   (a write whose `fsync` failed; it was never acknowledged);
//! * an object write **torn**: a write in place leaves only a prefix of its bytes (durably)
//!   and answers an I/O error; a whole-object write leaves a partial temporary file, which
//!   the rename never exposes (removed when the store next opens);
//! * an object read **failed**: an I/O error;
//! * an object read **flipped**: one bit of what was read is wrong (a disk or bus that
//!   returns bad data without an error);
//! * a metadata commit **failed**: the transaction is dropped before its commit (the
//!   fsync failed). The store then fails every change until the daemon restarts
//!   ([`crate::meta_store::RedbStore::on_failure`]).

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// How often each fault strikes, per mille of the operations it can strike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageFaultRates {
    /// Object writes (and appends) lost.
    pub write_lost: u32,
    /// Object writes torn.
    pub write_torn: u32,
    /// Object reads that fail.
    pub read_failed: u32,
    /// Object reads with one bit flipped.
    pub read_flipped: u32,
    /// Metadata commits that fail.
    pub commit_failed: u32,
}

/// What the disk does to one object write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// Nothing reaches the disk; an error.
    Lost,
    /// Only the first `n` bytes reach the disk; an error.
    Torn(usize),
}

/// What the disk does to one object read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFault {
    /// An I/O error.
    Failed,
    /// Bit `bit` of the bytes read (modulo their length in bits) is flipped.
    Flipped(u64),
}

/// How many faults struck, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageFaultCounts {
    /// Object writes lost.
    pub writes_lost: u64,
    /// Object writes torn.
    pub writes_torn: u64,
    /// Object reads failed.
    pub reads_failed: u64,
    /// Object reads flipped.
    pub reads_flipped: u64,
    /// Metadata commits failed.
    pub commits_failed: u64,
}

/// The faults of a simulated cluster's disks: rates that the test may change as it runs,
/// one seeded generator, and counts of what struck.
#[derive(Debug)]
pub struct StorageFaults {
    rates: Mutex<StorageFaultRates>,
    rng: Mutex<ChaCha8Rng>,
    counts: [AtomicU64; 5],
}

fn per_mille(rng: &mut ChaCha8Rng, rate: u32) -> bool {
    rate > 0 && rng.next_u32() % 1000 < rate
}

impl StorageFaults {
    /// No faults yet (see [`StorageFaults::set_rates`]), draws seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rates: Mutex::new(StorageFaultRates::default()),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            counts: Default::default(),
        }
    }

    /// From now on, faults strike at `rates`.
    pub fn set_rates(&self, rates: StorageFaultRates) {
        *self.rates.lock().unwrap_or_else(PoisonError::into_inner) = rates;
    }

    fn draw<T>(
        &self,
        f: impl FnOnce(&StorageFaultRates, &mut ChaCha8Rng) -> Option<T>,
    ) -> Option<T> {
        let rates = *self.rates.lock().unwrap_or_else(PoisonError::into_inner);
        if rates == StorageFaultRates::default() {
            return None;
        }
        f(
            &rates,
            &mut self.rng.lock().unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn count(&self, kind: usize) {
        if let Some(c) = self.counts.get(kind) {
            c.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What the disk does to a write of `len` bytes, if anything.
    pub fn object_write(&self, len: usize) -> Option<WriteFault> {
        let fault = self.draw(|r, rng| {
            if per_mille(rng, r.write_lost) {
                Some(WriteFault::Lost)
            } else if per_mille(rng, r.write_torn) {
                let n = usize::try_from(rng.next_u64()).unwrap_or(0) % len.max(1);
                Some(WriteFault::Torn(n))
            } else {
                None
            }
        });
        match fault {
            Some(WriteFault::Lost) => self.count(0),
            Some(WriteFault::Torn(_)) => self.count(1),
            None => {}
        }
        fault
    }

    /// What the disk does to a read, if anything.
    pub fn object_read(&self) -> Option<ReadFault> {
        let fault = self.draw(|r, rng| {
            if per_mille(rng, r.read_failed) {
                Some(ReadFault::Failed)
            } else if per_mille(rng, r.read_flipped) {
                Some(ReadFault::Flipped(rng.next_u64()))
            } else {
                None
            }
        });
        match fault {
            Some(ReadFault::Failed) => self.count(2),
            Some(ReadFault::Flipped(_)) => self.count(3),
            None => {}
        }
        fault
    }

    /// Whether this metadata commit fails.
    pub fn meta_commit_fails(&self) -> bool {
        let fails = self
            .draw(|r, rng| per_mille(rng, r.commit_failed).then_some(()))
            .is_some();
        if fails {
            self.count(4);
        }
        fails
    }

    /// How many faults struck so far.
    pub fn counts(&self) -> StorageFaultCounts {
        let c = |i: usize| self.counts.get(i).map_or(0, |c| c.load(Ordering::SeqCst));
        StorageFaultCounts {
            writes_lost: c(0),
            writes_torn: c(1),
            reads_failed: c(2),
            reads_flipped: c(3),
            commits_failed: c(4),
        }
    }
}

/// The I/O error a fault answers with.
pub(crate) fn io_error(what: &str) -> std::io::Error {
    std::io::Error::other(format!("simulated disk fault: {what}"))
}

/// Flips bit `bit` (modulo the bits there are) of `bytes`.
pub(crate) fn flip(bytes: &mut [u8], bit: u64) {
    let bits = (bytes.len() as u64).saturating_mul(8);
    if bits == 0 {
        return;
    }
    let bit = bit % bits;
    if let Some(b) = usize::try_from(bit / 8).ok().and_then(|i| bytes.get_mut(i)) {
        *b ^= 1 << (bit % 8);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn no_rates_no_faults_and_a_seed_draws_the_same_faults() {
        let f = StorageFaults::new(1);
        assert!((0..1000).all(|_| f.object_write(10).is_none() && f.object_read().is_none()));
        let rates = StorageFaultRates {
            write_lost: 100,
            write_torn: 100,
            read_failed: 100,
            read_flipped: 100,
            commit_failed: 100,
        };
        let draws = |seed| {
            let f = StorageFaults::new(seed);
            f.set_rates(rates);
            let d: Vec<_> = (0..200)
                .map(|_| (f.object_write(10), f.object_read(), f.meta_commit_fails()))
                .collect();
            (d, f.counts())
        };
        let (a, counts) = draws(7);
        assert_eq!(a, draws(7).0);
        assert!(counts.writes_lost > 0 && counts.writes_torn > 0 && counts.commits_failed > 0);
        assert!(a
            .iter()
            .all(|(w, _, _)| !matches!(w, Some(WriteFault::Torn(n)) if *n >= 10)));
    }

    #[test]
    fn a_flip_changes_exactly_one_bit() {
        let mut b = vec![0u8; 4];
        flip(&mut b, 33 + 7);
        assert_eq!(b.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
        flip(&mut [], 3);
    }
}
