//! The writer lock of the PostgreSQL store (issue 42, [`MetaStore::exclusive`]): every
//! MDS instance over one database runs its read-decide-commit sequences (a create, a
//! rename, a chmod, a group change) one at a time across all instances, as one MDS runs
//! them under its write lock. Without it, two instances would each check a rename
//! against the namespace as it was before the other's, and commit a cycle; or each read
//! a record, change it, and write it back over the other's change.
//!
//! The lock is a session-level advisory lock ([`WRITER_LOCK`]) taken on a connection
//! lent out of the pool for the sequence. While the thread that took it holds it, every
//! statement of that thread runs on that connection: the reads, and above all the
//! commit, which therefore commits only while the lock is held. If the connection dies
//! (the server or the network dropped it, or the server ended it for standing idle), the
//! server releases the lock, and the holder's next statement fails: it gets an error, not
//! a lost update, even if another instance has taken the lock meanwhile.
//!
//! The lock's connection commits with `synchronous_commit = off`: a commit returns once
//! it is in the log's buffers, not on disk, so the lock is held for round trips only,
//! never for an fsync, and the changes of several requests reach the disk in one flush
//! (as redb's group commit does). The store's `sync` makes them durable before any
//! answer leaves the MDS ([`maat_mds::store::MetaStore::sync`]).
//!
//! Two timeouts keep one instance from stopping the others: a waiter gives up after
//! [`WRITER_WAIT`] (`lock_timeout`) with an error saying another instance holds the
//! lock, and the server ends the holder's session once it sends nothing for
//! [`WRITER_IDLE`] (`idle_session_timeout`): a holder stopped mid-sequence (SIGSTOP, a
//! hung disk) loses the lock instead of holding it for ever.
//!
//! [`MetaStore::exclusive`]: maat_mds::store::MetaStore::exclusive

use crate::pg_pool::{Conn, Pool};
use crate::pg_sql::err;
use maat_mds::store::StoreError;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

/// The advisory lock's key (an arbitrary constant: "maatwr" in ASCII; the schema's
/// migration lock is another).
pub const WRITER_LOCK: i64 = 0x6d61_6174_7772;
/// How long an instance waits for the writer lock before its request fails.
pub const WRITER_WAIT: Duration = Duration::from_secs(30);
/// How long the holder's connection may send nothing before the server ends its session
/// (and so releases the lock). A sequence's statements all run on that connection, so
/// this bounds the pauses between them, not a sequence's length.
pub const WRITER_IDLE: Duration = Duration::from_secs(10);

/// The lock's connection while a thread of this process holds it, and which thread.
#[derive(Default)]
pub(crate) struct Writer {
    /// Read by every statement of every thread (to find whether it is the holder's):
    /// locked only to compare, never across a statement.
    holder: Mutex<Option<ThreadId>>,
    /// Used by the holder only.
    conn: Mutex<Option<Conn>>,
    /// The holder's unit ([`MetaStore::begin_unit`]): a transaction open on `conn`, and
    /// whether a statement in it failed (so it may only be rolled back). Used by the
    /// holder only.
    ///
    /// [`MetaStore::begin_unit`]: maat_mds::store::MetaStore::begin_unit
    unit: Mutex<Unit>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Unit {
    #[default]
    None,
    Open,
    Failed,
}

/// Held while the lock is: gives the connection back when dropped.
pub(crate) struct WriterGuard<'a> {
    writer: &'a Writer,
    pool: &'a Pool,
}

/// A lock's value. (A thread that panicked holding one left it whole: taken over.)
fn take<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Writer {
    /// Takes the lock for the calling thread (which must not hold it already: the MDS
    /// takes it inside its own write lock, once).
    pub(crate) fn lock<'a>(&'a self, pool: &'a Pool) -> Result<WriterGuard<'a>, StoreError> {
        let setup = format!(
            "SET lock_timeout = {}; SELECT pg_advisory_lock({WRITER_LOCK}); \
             SET idle_session_timeout = {}; SET synchronous_commit = off",
            WRITER_WAIT.as_millis(),
            WRITER_IDLE.as_millis()
        );
        let (conn, ()) = pool.lend_with(|c| {
            c.client.batch_execute(&setup).map_err(|e| {
                err(
                    "taking the writer lock (another MDS instance may hold it)",
                    e,
                )
            })
        })?;
        if let Some(stale) = take(&self.conn).replace(conn) {
            // Only a guard fills the slot, and the MDS holds one at a time.
            tracing::error!("the writer lock's slot was full; its connection is closed");
            drop(stale);
            pool.give_back_closed();
        }
        *take(&self.holder) = Some(std::thread::current().id());
        Ok(WriterGuard { writer: self, pool })
    }

    /// Whether the calling thread holds the lock and has a unit open.
    pub(crate) fn in_unit(&self) -> bool {
        self.mine() && *take(&self.unit) != Unit::None
    }

    /// Whether the calling thread holds the lock (its commits then run on the lock's
    /// connection, which commits without waiting for the disk: see
    /// [`crate::pg_store::PgStore`]'s `sync`).
    pub(crate) fn mine(&self) -> bool {
        *take(&self.holder) == Some(std::thread::current().id())
    }

    /// Opens a transaction on the lock's connection, which the holder's commits then
    /// run in, until [`Writer::end_unit`].
    pub(crate) fn begin_unit(&self, pool: &Pool) -> Result<(), StoreError> {
        if !self.mine() || *take(&self.unit) != Unit::None {
            return Err(StoreError::Backend(
                "a unit begins only under the writer lock, and only one at a time".into(),
            ));
        }
        self.run(pool, |c| {
            c.client
                .batch_execute("BEGIN")
                .map_err(|e| err("beginning a unit", e))
        })?;
        *take(&self.unit) = Unit::Open;
        Ok(())
    }

    /// Runs `f` (a commit's statements) in the open unit; a failure marks the unit failed.
    pub(crate) fn in_open_unit(
        &self,
        pool: &Pool,
        f: impl FnMut(&mut Conn) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if *take(&self.unit) == Unit::Failed {
            return Err(StoreError::Backend(
                "an earlier change of this unit failed; nothing more applies in it".into(),
            ));
        }
        let result = self.run(pool, f);
        if result.is_err() {
            *take(&self.unit) = Unit::Failed;
        }
        result
    }

    /// Runs `last` in the unit and commits it, or rolls the unit back if anything in it
    /// failed (an error then, whatever `last` did: nothing of the unit was applied).
    /// `unknown` is set when the `COMMIT` itself failed without the server's word (the
    /// connection broke): the unit may or may not have been applied.
    pub(crate) fn end_unit(
        &self,
        pool: &Pool,
        last: impl FnOnce(&mut Conn) -> Result<(), StoreError>,
        unknown: &mut bool,
    ) -> Result<(), StoreError> {
        let state = std::mem::take(&mut *take(&self.unit));
        if state == Unit::None || !self.mine() {
            return Err(StoreError::Backend("no unit is open".into()));
        }
        let mut last = Some(last);
        self.run(pool, |c| {
            let applied = match (state, last.take()) {
                (Unit::Open, Some(last)) => last(c),
                _ => Err(StoreError::Backend(
                    "an earlier change of this unit failed; the unit is rolled back".into(),
                )),
            };
            let ended = applied.and_then(|()| {
                c.client.batch_execute("COMMIT").map_err(|e| {
                    *unknown = e.as_db_error().is_none();
                    err("committing a unit", e)
                })
            });
            if ended.is_err() && !c.client.is_closed() {
                // Nothing of it stays (a failed COMMIT has rolled back already).
                if let Err(e) = c.client.batch_execute("ROLLBACK") {
                    tracing::warn!("rolling a unit back: {e}");
                }
            }
            ended
        })
    }

    /// Runs `f` on the lock's connection if the calling thread holds the lock, else on
    /// one from `pool` ([`Pool::with`]). On the lock's connection there is no second try:
    /// a closed connection means the lock was lost, and the error says so.
    pub(crate) fn run<T>(
        &self,
        pool: &Pool,
        f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.mine() {
            return pool.with(f);
        }
        let mut f = f;
        let mut slot = take(&self.conn);
        let Some(conn) = slot.as_mut() else {
            return Err(StoreError::Backend(
                "the writer lock's connection is missing".into(),
            ));
        };
        match f(conn) {
            Err(e) if conn.client.is_closed() => Err(StoreError::Backend(format!(
                "{e}; the connection holding the writer lock closed, so the lock was lost \
                 and nothing more commits under it"
            ))),
            other => other,
        }
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        *take(&self.writer.holder) = None;
        let unit = std::mem::take(&mut *take(&self.writer.unit));
        let Some(mut conn) = take(&self.writer.conn).take() else {
            return;
        };
        // A unit left open (its thread did not end it) is rolled back: nothing of it
        // may commit with the release, nor stay open on a pooled connection.
        let rollback = if unit == Unit::None { "" } else { "ROLLBACK; " };
        let release = format!(
            "{rollback}SELECT pg_advisory_unlock({WRITER_LOCK}); RESET idle_session_timeout; \
             RESET lock_timeout; RESET synchronous_commit"
        );
        match conn.client.batch_execute(&release) {
            Ok(()) => self.pool.give_back(conn),
            Err(e) => {
                // Closing the connection releases the lock wherever the server still
                // holds it for this session.
                tracing::warn!("releasing the writer lock: {e}; its connection is closed");
                drop(conn);
                self.pool.give_back_closed();
            }
        }
    }
}
