//! Issue 42: the leases on singleton duties in PostgreSQL's `leases` table, each request
//! one transaction on the lease's locked row, timed by the database's clock.

use super::{id, unid, PgStore};
use crate::pg_sql::{col, err, prepared, Sql};
use maat_mds::store::{LeaseState, StoreError};

impl PgStore {
    /// One transaction, timed by the database's clock (instances' clocks need not
    /// agree): the lease's row made if missing, locked, and taken over, renewed or left.
    /// (Retried on a new connection after the first died, it finds its own grant and
    /// renews it, with the same token.)
    pub(super) fn lease_row(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
    ) -> Result<LeaseState, StoreError> {
        let secs = ttl_millis as f64 / 1000.0;
        let (name, me) = (name.as_bytes(), holder.as_bytes());
        self.writer.run(&self.pool, |c| {
            let (mut tx, statements) = c.begin("a lease")?;
            tx.execute(
                prepared(statements, Sql::LeaseCreate)?,
                &[&name, &me, &secs],
            )
            .map_err(|e| err("making a lease", e))?;
            let row = tx
                .query_one(prepared(statements, Sql::LeaseLock)?, &[&name])
                .map_err(|e| err("locking a lease", e))?;
            let current = String::from_utf8(col(&row, 0, "a lease's holder")?)
                .map_err(|_| StoreError::corrupt("a lease's holder", "not UTF-8"))?;
            let expired: bool = col(&row, 1, "a lease's expiry")?;
            let token = unid(col(&row, 2, "a lease's token")?);
            let token = if current == holder {
                token
            } else if expired {
                token.saturating_add(1)
            } else {
                tx.commit().map_err(|e| err("ending a lease check", e))?;
                return Ok(LeaseState {
                    holder: current,
                    token,
                    granted: false,
                });
            };
            tx.execute(
                prepared(statements, Sql::LeaseSet)?,
                &[&name, &me, &secs, &id(token)],
            )
            .map_err(|e| err("taking a lease", e))?;
            tx.commit().map_err(|e| err("committing a lease", e))?;
            Ok(LeaseState {
                holder: holder.to_string(),
                token,
                granted: true,
            })
        })
    }

    /// One transaction on the lease's locked row, timed by the database's clock: the
    /// token raised if `holder` holds the lease and its time has not run out.
    pub(super) fn raise_row(
        &self,
        name: &str,
        holder: &str,
        at_least: u64,
    ) -> Result<Option<u64>, StoreError> {
        let name = name.as_bytes();
        self.writer.run(&self.pool, |c| {
            let (mut tx, statements) = c.begin("a lease's raise")?;
            let row = tx
                .query_opt(prepared(statements, Sql::LeaseLock)?, &[&name])
                .map_err(|e| err("locking a lease", e))?;
            let Some(row) = row else {
                tx.commit().map_err(|e| err("ending a lease check", e))?;
                return Ok(None);
            };
            let current: Vec<u8> = col(&row, 0, "a lease's holder")?;
            let expired: bool = col(&row, 1, "a lease's expiry")?;
            let token = unid(col(&row, 2, "a lease's token")?);
            if current != holder.as_bytes() || expired {
                tx.commit().map_err(|e| err("ending a lease check", e))?;
                return Ok(None);
            }
            let token = token.max(at_least);
            tx.execute(prepared(statements, Sql::LeaseRaise)?, &[&name, &id(token)])
                .map_err(|e| err("raising a lease's token", e))?;
            tx.commit()
                .map_err(|e| err("committing a lease's raise", e))?;
            Ok(Some(token))
        })
    }
}
