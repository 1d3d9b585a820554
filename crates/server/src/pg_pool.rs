//! The PostgreSQL store's connections: at most a bounded number open at once (a server
//! allows about a hundred in all, `max_connections`, shared by every MDS instance and
//! operator), the idle ones kept for reuse, and a thread that finds every connection
//! busy waits for one instead of making another. A connection that closed (the server
//! restarted) is dropped and its place freed.
//!
//! Defaults where the URL leaves them unset: a connection attempt gives up after
//! [`PG_CONNECT_TIMEOUT`], a TCP connection whose sent data a dead host never
//! acknowledges is dropped after [`PG_TCP_USER_TIMEOUT`], and the server lists the
//! connections under the application name `maat-mds`. (The synchronous driver has no
//! per-query timeout: a server that is alive but stopped, say by SIGSTOP, holds the
//! MDS's requests until it resumes, as a hung disk holds the redb store's.)

use crate::pg_sql::{err, prepared, Sql, STATEMENTS};
use maat_mds::store::StoreError;
use postgres::{Client, NoTls, Row, Statement};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Connections one store keeps open at most (in use and idle together).
pub const PG_CONNECTIONS_MAX: usize = 32;
/// How long a connection attempt may take where the URL sets no `connect_timeout`.
pub const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sent data may go unacknowledged on TCP where the URL sets no
/// `tcp_user_timeout`.
pub const PG_TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// The application name the server shows for the MDS's connections by default.
pub const PG_APPLICATION_NAME: &str = "maat-mds";

/// One connection and its prepared statements (in [`STATEMENTS`] order).
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) statements: Vec<Statement>,
}

pub(crate) type Params<'a> = &'a [&'a (dyn postgres::types::ToSql + Sync)];

impl Conn {
    fn statement(&self, sql: Sql) -> Result<Statement, StoreError> {
        prepared(&self.statements, sql).cloned()
    }

    /// A transaction on this connection (`what` names it in the error), and the
    /// statements to run in it.
    pub(crate) fn begin(
        &mut self,
        what: &str,
    ) -> Result<(postgres::Transaction<'_>, &[Statement]), StoreError> {
        let Conn { client, statements } = self;
        let tx = client
            .transaction()
            .map_err(|e| err(&format!("beginning {what}"), e))?;
        Ok((tx, statements))
    }

    pub(crate) fn query(
        &mut self,
        sql: Sql,
        params: Params<'_>,
        what: &str,
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client
            .query(&statement, params)
            .map_err(|e| err(what, e))
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: Sql,
        params: Params<'_>,
        what: &str,
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client
            .query_opt(&statement, params)
            .map_err(|e| err(what, e))
    }
}

/// The connections of one store.
pub(crate) struct Pool {
    config: postgres::Config,
    max: usize,
    state: Mutex<State>,
    /// Signalled when a connection goes back or its place is freed.
    freed: Condvar,
}

struct State {
    idle: Vec<Conn>,
    /// Connections open: idle ones and those lent out.
    open: usize,
}

/// A connection lent out: back to the pool when dropped, or its place freed if it
/// closed (also when the thread using it panicked).
struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut state = self.pool.state();
        match self.conn.take() {
            Some(conn) if !conn.client.is_closed() => state.idle.push(conn),
            _ => state.open = state.open.saturating_sub(1),
        }
        drop(state);
        self.pool.freed.notify_one();
    }
}

impl Lease<'_> {
    /// The connection, lent on past this lease (the pool counts it as open until
    /// [`Pool::give_back`]); none, and its place freed, if it was missing.
    fn keep(mut self) -> Option<Conn> {
        let conn = self.conn.take()?;
        // (Nothing is left to drop: the connection is out, the pool is borrowed.)
        std::mem::forget(self);
        Some(conn)
    }
}

impl Pool {
    /// A pool for `config` (the defaults above filled in where it sets nothing),
    /// holding at most `max` connections (at least one).
    pub(crate) fn new(mut config: postgres::Config, max: usize) -> Self {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(PG_CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(PG_TCP_USER_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name(PG_APPLICATION_NAME);
        }
        Self {
            config,
            max: max.max(1),
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// A connection outside the pool (the schema migration's), without statements.
    pub(crate) fn connect_plain(&self) -> Result<Client, StoreError> {
        self.config
            .connect(NoTls)
            .map_err(|e| err("connecting to the metadata database", e))
    }

    fn connect(&self) -> Result<Conn, StoreError> {
        let mut client = self.connect_plain()?;
        let mut statements = Vec::with_capacity(STATEMENTS.len());
        for (n, (sql, text)) in STATEMENTS.iter().enumerate() {
            debug_assert_eq!(*sql as usize, n);
            statements.push(
                client
                    .prepare(text)
                    .map_err(|e| err(&format!("preparing `{text}`"), e))?,
            );
        }
        Ok(Conn { client, statements })
    }

    /// The state. (A thread that panicked holding the lock left only whole counts and
    /// connections, each whole or closed: the state is taken over.)
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection (`true`: reused), or a new one where fewer than `max` are
    /// open; otherwise waits until one goes back.
    fn take(&self) -> Result<(Lease<'_>, bool), StoreError> {
        let mut state = self.state();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok((
                    Lease {
                        pool: self,
                        conn: Some(conn),
                    },
                    true,
                ));
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                // (The place is taken before connecting, outside the lock; a lease
                // without a connection frees it again if connecting fails.)
                let mut lease = Lease {
                    pool: self,
                    conn: None,
                };
                lease.conn = Some(self.connect()?);
                return Ok((lease, false));
            }
            state = self
                .freed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Drops every idle connection (the server closed them all when it restarted).
    fn drop_idle(&self) {
        let mut state = self.state();
        let n = state.idle.len();
        state.idle.clear();
        state.open = state.open.saturating_sub(n);
        drop(state);
        self.freed.notify_all();
    }

    /// Runs `f` on a connection, which then goes back to the pool unless it closed.
    /// When a reused connection turns out closed (the server restarted since it was
    /// last used), every idle one is dropped and `f` runs once more on a new
    /// connection. That is safe for reads, and for a commit because a batch only sets
    /// rows to values and deletes rows: applied twice (the first connection died after
    /// the server committed it), it leaves what applying it once leaves. (The batches of
    /// read-decide-commit sequences are not retried here: they commit on the writer
    /// lock's connection, [`crate::pg_writer`], where a closed connection is an error.)
    pub(crate) fn with<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (mut lease, reused) = self.take()?;
        let Some(conn) = lease.conn.as_mut() else {
            return Err(StoreError::Backend("a lent connection was missing".into()));
        };
        let result = f(conn);
        let closed = conn.client.is_closed();
        drop(lease);
        if !(closed && reused && result.is_err()) {
            return result;
        }
        self.drop_idle();
        tracing::warn!("the PostgreSQL server closed the MDS's connections; connecting again");
        let (mut fresh, _) = self.take()?;
        let Some(conn) = fresh.conn.as_mut() else {
            return Err(StoreError::Backend("a lent connection was missing".into()));
        };
        f(conn)
    }
}

impl Pool {
    /// Runs `f` on a connection that then stays lent out, held across calls (the writer
    /// lock's, [`crate::pg_writer`]) until [`Pool::give_back`]; once more on a new
    /// connection when a reused one turns out closed, as [`Pool::with`].
    pub(crate) fn lend_with<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<(Conn, T), StoreError> {
        let missing = || StoreError::Backend("a lent connection was missing".into());
        let (mut lease, reused) = self.take()?;
        let conn = lease.conn.as_mut().ok_or_else(missing)?;
        match f(conn) {
            Ok(v) => return Ok((lease.keep().ok_or_else(missing)?, v)),
            Err(e) if !(reused && conn.client.is_closed()) => return Err(e),
            Err(_) => {}
        }
        drop(lease);
        self.drop_idle();
        let (mut fresh, _) = self.take()?;
        let v = f(fresh.conn.as_mut().ok_or_else(missing)?)?;
        Ok((fresh.keep().ok_or_else(missing)?, v))
    }

    /// Frees the place of a connection [`Pool::lend_with`] lent that was closed (dropped)
    /// instead of given back.
    pub(crate) fn give_back_closed(&self) {
        drop(Lease {
            pool: self,
            conn: None,
        });
    }

    /// Takes back a connection [`Pool::lend_with`] lent: kept for reuse unless it closed.
    pub(crate) fn give_back(&self, conn: Conn) {
        drop(Lease {
            pool: self,
            conn: Some(conn),
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_fill_only_what_the_url_left_unset() {
        let url = "host=/run/pg dbname=maat connect_timeout=3";
        let pool = Pool::new(url.parse().unwrap(), 4);
        assert_eq!(
            pool.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert_eq!(
            pool.config.get_tcp_user_timeout(),
            Some(&PG_TCP_USER_TIMEOUT)
        );
        assert_eq!(
            pool.config.get_application_name(),
            Some(PG_APPLICATION_NAME)
        );
        let pool = Pool::new("host=/run/pg application_name=ops".parse().unwrap(), 0);
        assert_eq!(pool.config.get_connect_timeout(), Some(&PG_CONNECT_TIMEOUT));
        assert_eq!(pool.config.get_application_name(), Some("ops"));
        assert_eq!(pool.max, 1);
    }
}
