//! Group commit for the metadata store: namespace changes are applied in memory at once
//! (an [`Overlay`] the reads consult first) and written to the database together, in one
//! durable transaction (one fsync) for every batch applied while the previous one ran.
//!
//! Why not redb's own non-durable commits: measured with `cargo bench -p maat-server
//! --bench meta_store`, one of those cost as much CPU as a durable commit (on tmpfs more),
//! so deferring through them only paid on a slow disk and cost 15 % of small-object
//! writes on tmpfs. Applying a batch here costs a few map inserts.
//!
//! The bookkeeping only; [`crate::meta_store::RedbStore`] opens and commits the
//! transactions. Lock order: the writer's turn ([`GroupCommit`]'s `writer`), then the
//! database's write transaction, then the state here, never the other way round; the
//! state is never held across a database call. The writer's turn spans a whole write,
//! from opening the transaction to recording its outcome, so a failed write is recorded
//! before any other writer can take a snapshot of what it left in the overlay.

use crate::env::StoreFailed;
use crate::overlay::{held, Overlay};
use maat_mds::store::{Batch, DurabilityCounts, StoreError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    /// Changes applied and not yet known written, with the count of batches applied.
    overlay: Overlay,
    /// Batches known durable: every batch up to this count.
    durable: u64,
    /// A syncer is writing batches now; others wait for it.
    syncing: bool,
    /// Why writing batches failed; from then on every change and sync fails.
    failed: Option<String>,
    /// Durable commits made.
    fsyncs: u64,
}

/// The overlay, the counters and the one-syncer-at-a-time turn of a store with group
/// commit.
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    synced: Condvar,
    /// One writer at a time, from its transaction's start to its outcome recorded.
    writer: Mutex<()>,
    /// Whether [`GroupCommit::apply`] is used (the MDS config's `group_commit`).
    enabled: AtomicBool,
    /// Told once, when writing batches first fails.
    on_failure: FailureSlot,
}

/// Where a store keeps the hook it tells when it can no longer vouch for what is on disk
/// (the daemon's [`crate::Env::store_failed_hook`]): set once, fired from any thread.
#[derive(Default)]
pub(crate) struct FailureSlot(Mutex<Option<StoreFailed>>);

impl FailureSlot {
    /// Installs `hook`.
    pub(crate) fn set(&self, hook: StoreFailed) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hook);
    }

    /// Tells the hook, if one is installed, `why`.
    pub(crate) fn fire(&self, why: &str) {
        // (Cloned out first: the hook may exit, and must not run under the lock.)
        let hook = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook(why);
        }
    }
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            synced: Condvar::new(),
            writer: Mutex::new(()),
            enabled: AtomicBool::new(true),
            on_failure: FailureSlot::default(),
        }
    }
}

/// The syncer's turn: handed on when the sync ends, whichever way.
struct SyncTurn<'a>(&'a GroupCommit);

impl Drop for SyncTurn<'_> {
    fn drop(&mut self) {
        let mut state = self
            .0
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.syncing = false;
        self.0.synced.notify_all();
    }
}

fn failed(why: &str) -> StoreError {
    StoreError::Failed(why.to_string())
}

fn poisoned() -> StoreError {
    StoreError::Failed("a thread panicked holding the group-commit state".into())
}

impl GroupCommit {
    /// Turns group commit on or off.
    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state.lock().map_err(|_| poisoned())
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        let state = self.state()?;
        match &state.failed {
            Some(why) => Err(failed(why)),
            None => Ok(state),
        }
    }

    /// `read` of the overlay (reads look there before the database).
    pub(crate) fn read<R>(&self, read: impl FnOnce(&Overlay) -> R) -> Result<R, StoreError> {
        Ok(read(&self.state()?.overlay))
    }

    /// Applies `batch` without writing it (reads see it at once, [`GroupCommit::sync`]
    /// writes it), or hands it back to be committed at once: when group commit is off, or
    /// the batch holds changes an overlay does not (see [`held`]).
    pub(crate) fn apply(&self, batch: Batch) -> Result<Option<Batch>, StoreError> {
        if !self.enabled.load(Ordering::Relaxed) || !batch.0.iter().all(held) {
            return Ok(Some(batch));
        }
        let mut state = self.lock()?;
        state.overlay.apply(batch);
        Ok(None)
    }

    /// Writes `batch` with every batch applied before it in one durable transaction:
    /// `begin` opens it, `write` writes the changes and commits. A failure is final.
    ///
    /// The changes of `batch` an overlay holds are visible from the overlay before the
    /// rest are from the database (for the moment of the fsync): readers that need a
    /// batch whole take the MDS's write lock, as every read-check-commit does.
    pub(crate) fn commit<T>(
        &self,
        batch: Batch,
        begin: impl FnOnce() -> Result<T, StoreError>,
        write: impl FnOnce(T, Batch) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_through(Some(batch), None, begin, write)
    }

    /// Returns once every batch applied before the call is durable. One caller at a time
    /// writes what is applied (see [`GroupCommit::commit`]); the others wait and are done
    /// if it covered their batches.
    pub(crate) fn sync<T>(
        &self,
        begin: impl FnOnce() -> Result<T, StoreError>,
        write: impl FnOnce(T, Batch) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut state = self.lock()?;
        let target = state.overlay.batches();
        loop {
            if let Some(why) = &state.failed {
                return Err(failed(why));
            }
            if state.durable >= target {
                return Ok(());
            }
            if !state.syncing {
                break;
            }
            state = self.synced.wait(state).map_err(|_| poisoned())?;
        }
        state.syncing = true;
        drop(state);
        // Hands the turn on even if the write panics (whoever waits then finds the
        // writer's lock poisoned and fails, rather than waiting for ever).
        let _turn = SyncTurn(self);
        self.write_through(None, Some(target), begin, write)
    }

    /// Writes what is applied, with `batch` (a durable commit) or, for a sync of the
    /// batches up to `target`, unless another write covered them meanwhile.
    fn write_through<T>(
        &self,
        batch: Option<Batch>,
        target: Option<u64>,
        begin: impl FnOnce() -> Result<T, StoreError>,
        write: impl FnOnce(T, Batch) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let _writer = self.writer.lock().map_err(|_| poisoned())?;
        let tx = match begin() {
            Ok(tx) => tx,
            Err(e) => return Err(self.record_failure(e)),
        };
        let (snapshot, rest) = {
            let mut state = self.lock()?;
            if target.is_some_and(|t| state.durable >= t) {
                // Covered by a durable commit while this one waited: nothing to write.
                return Ok(());
            }
            let rest = match batch {
                Some(b) => state.overlay.apply(b),
                None => Batch::default(),
            };
            (state.overlay.clone(), rest)
        };
        let mut ops = snapshot.to_batch();
        ops.0.extend(rest.0);
        let result = write(tx, ops);
        let mut state = self.state()?;
        match result {
            Ok(()) => {
                state.overlay.forget(&snapshot);
                state.durable = state.durable.max(snapshot.batches());
                state.fsyncs += 1;
                self.synced.notify_all();
                Ok(())
            }
            Err(e) => {
                drop(state);
                Err(self.record_failure(e))
            }
        }
    }

    /// Makes `e` final: every later change and sync fails with it (what is applied may
    /// be only partly on disk, or not at all).
    fn record_failure(&self, e: StoreError) -> StoreError {
        let first = match self.state() {
            Ok(mut state) => {
                let first = state.failed.is_none();
                state.failed.get_or_insert_with(|| e.to_string());
                first
            }
            Err(_) => false,
        };
        self.synced.notify_all();
        if first {
            self.on_failure.fire(&e.to_string());
        }
        e
    }

    /// Calls `hook` once, when writing batches first fails (from then on the store fails
    /// every change: the daemon's way out is a restart from what is on disk).
    pub(crate) fn set_on_failure(&self, hook: StoreFailed) {
        self.on_failure.set(hook);
    }

    /// Batches applied and fsyncs made.
    pub(crate) fn counts(&self) -> DurabilityCounts {
        match self.state.lock() {
            Ok(s) => DurabilityCounts {
                batches: s.overlay.batches(),
                fsyncs: s.fsyncs,
            },
            Err(_) => DurabilityCounts::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )]
    use super::*;
    use maat_mds::store::Op;
    use std::sync::Arc;

    fn meta(key: &str) -> Batch {
        let mut b = Batch::default();
        b.push(Op::PutMeta(key.into(), vec![1]));
        b
    }

    fn applied(g: &GroupCommit, b: Batch) {
        assert!(g.apply(b).unwrap().is_none(), "handed back, not applied");
    }

    /// A database: what each durable transaction wrote, in order.
    type Written = Mutex<Vec<Vec<Op>>>;

    fn begin<'a>(db: &'a Written) -> impl FnOnce() -> Result<&'a Written, StoreError> + 'a {
        move || Ok(db)
    }

    fn write(db: &Written, ops: Batch) -> Result<(), StoreError> {
        db.lock().unwrap().push(ops.0);
        Ok(())
    }

    #[test]
    fn a_sync_writes_every_batch_applied_before_it_in_one_transaction() {
        let g = GroupCommit::default();
        let db = Written::default();
        applied(&g, meta("a"));
        applied(&g, meta("b"));
        // Read at once, written by nothing yet.
        assert_eq!(g.read(|o| o.meta("a")).unwrap(), Some(Some(vec![1])));
        assert!(db.lock().unwrap().is_empty());
        g.sync(begin(&db), write).unwrap();
        assert_eq!(db.lock().unwrap().len(), 1);
        assert_eq!(db.lock().unwrap()[0].len(), 2);
        assert_eq!(
            g.counts(),
            DurabilityCounts {
                batches: 2,
                fsyncs: 1
            }
        );
        // Written, so forgotten: reads go to the database.
        assert_eq!(g.read(|o| o.meta("a")).unwrap(), None);
        // Nothing new: no transaction.
        g.sync(begin(&db), write).unwrap();
        assert_eq!(g.counts().fsyncs, 1);
        // A durable commit carries what was applied before it, and what it holds that an
        // overlay does not.
        applied(&g, meta("c"));
        let mut b = meta("d");
        b.push(Op::DeleteSession([0; 16]));
        g.commit(b, begin(&db), write).unwrap();
        g.sync(begin(&db), write).unwrap();
        let written = db.lock().unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(written[1].len(), 3);
        assert_eq!(written[1][2], Op::DeleteSession([0; 16]));
        assert_eq!(g.counts().batches, 4);
    }

    #[test]
    fn a_deferred_batch_takes_only_what_an_overlay_holds() {
        let g = GroupCommit::default();
        let mut b = meta("a");
        b.push(Op::DeleteSession([0; 16]));
        assert_eq!(g.apply(b.clone()).unwrap(), Some(b), "handed back whole");
        g.set_enabled(false);
        assert!(g.apply(meta("b")).unwrap().is_some(), "group commit off");
        assert_eq!(g.counts().batches, 0);
    }

    #[test]
    fn a_failed_sync_fails_every_later_call() {
        let g = GroupCommit::default();
        let db = Written::default();
        applied(&g, meta("a"));
        let e = g
            .sync(begin(&db), |_, _| {
                Err(StoreError::Backend("disk full".into()))
            })
            .unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        for e in [
            g.sync(begin(&db), write).unwrap_err(),
            g.apply(meta("b")).map(drop).unwrap_err(),
            g.commit(meta("c"), begin(&db), write).unwrap_err(),
        ] {
            assert!(e.to_string().contains("restart the MDS"), "{e}");
        }
    }

    /// A durable commit fails while a sync waits for its turn: the sync must not write
    /// the failed commit's changes (left in the overlay) as if they were whole; it fails.
    #[test]
    fn a_write_waiting_behind_a_failed_one_fails_and_writes_nothing() {
        let g = Arc::new(GroupCommit::default());
        let db = Arc::new(Written::default());
        let (inside, go) = std::sync::mpsc::channel();
        let failing = {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut b = meta("half");
                b.push(Op::DeleteSession([1; 16]));
                g.commit(
                    b,
                    || Ok(()),
                    |(), _| {
                        inside.send(()).unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        Err(StoreError::Backend("disk full".into()))
                    },
                )
            })
        };
        go.recv().unwrap();
        applied(&g, meta("mine"));
        let waiting = g.sync(begin(&db), write);
        assert!(failing.join().unwrap().is_err());
        let e = waiting.unwrap_err();
        assert!(e.to_string().contains("restart the MDS"), "{e}");
        assert!(db.lock().unwrap().is_empty(), "a half batch was written");
    }

    /// A write that panics hands the syncer's turn on: the next sync fails at once
    /// instead of waiting for ever.
    #[test]
    fn a_panicking_sync_leaves_no_one_waiting() {
        let g = Arc::new(GroupCommit::default());
        applied(&g, meta("a"));
        let panicked = {
            let g = g.clone();
            std::thread::spawn(move || g.sync(|| Ok(()), |(), _| panic!("redb panicked"))).join()
        };
        assert!(panicked.is_err());
        let (done, result) = std::sync::mpsc::channel();
        {
            let g = g.clone();
            std::thread::spawn(move || {
                let db = Written::default();
                let _ = done.send(g.sync(begin(&db), write).is_err());
            });
        }
        let failed = result
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a sync after a panicked one is still waiting");
        assert!(failed, "a sync after a panicked one claimed success");
    }

    /// Threads that apply and sync at once, over a simulated database whose write
    /// transactions exclude each other as redb's do: each returns from `sync` only once
    /// its batch was written, and every batch is written once in all.
    #[test]
    fn concurrent_syncs_return_only_after_their_batch_is_written() {
        let g = Arc::new(GroupCommit::default());
        let db = Arc::new(Mutex::new(std::collections::HashSet::<String>::new()));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (g, db) = (g.clone(), db.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let key = format!("{t}-{i}");
                        applied(&g, meta(&key));
                        g.sync(
                            || Ok(db.lock().unwrap()),
                            |mut tx, ops| {
                                std::thread::sleep(std::time::Duration::from_micros(50));
                                for op in ops.0 {
                                    if let Op::PutMeta(k, _) = op {
                                        tx.insert(k);
                                    }
                                }
                                Ok(())
                            },
                        )
                        .unwrap();
                        assert!(db.lock().unwrap().contains(&key), "{key} not written");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(g.counts().batches, 1600);
        assert_eq!(db.lock().unwrap().len(), 1600);
        assert!(
            g.read(|o| o.is_empty()).unwrap(),
            "everything written was forgotten"
        );
    }
}
