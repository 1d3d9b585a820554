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
             SET idle_session_timeout = {}",
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

    /// Runs `f` on the lock's connection if the calling thread holds the lock, else on
    /// one from `pool` ([`Pool::with`]). On the lock's connection there is no second try:
    /// a closed connection means the lock was lost, and the error says so.
    pub(crate) fn run<T>(
        &self,
        pool: &Pool,
        f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mine = *take(&self.holder) == Some(std::thread::current().id());
        if !mine {
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
        let Some(mut conn) = take(&self.writer.conn).take() else {
            return;
        };
        let release = format!(
            "SELECT pg_advisory_unlock({WRITER_LOCK}); RESET idle_session_timeout; \
             RESET lock_timeout"
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
