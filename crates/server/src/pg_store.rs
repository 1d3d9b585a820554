//! The MDS's [`MetaStore`] on PostgreSQL (issue 42): the same tables as the redb store,
//! each value the same versioned [`Record`] bytes, each [`Batch`] one transaction
//! committed durably (PostgreSQL's `synchronous_commit`, on by default, flushes the
//! write-ahead log before the commit returns). The schema carries its own version in
//! `maat_schema`; [`PgStore::open`] creates or upgrades it under an advisory lock, so
//! several MDS instances starting at once apply each migration once, and refuses a
//! schema newer than it knows.
//!
//! Ids are `u64` in Maat and `bigint` (signed) in PostgreSQL: stored bit for bit
//! (`as i64`), so ids at or past 2^63 list in another order than in redb; none is
//! issued there. Names and `meta` keys are `bytea`, so they order byte by byte (as redb
//! orders them) whatever the database's collation.
//!
//! A bounded pool of connections serves the MDS's threads ([`crate::pg_pool`]); a
//! connection that failed is dropped and a new one made at the next request, so the MDS
//! carries on once the server is back. The schema and statements are in
//! [`crate::pg_sql`].

use crate::env::StoreFailed;
use crate::group_commit::FailureSlot;
use crate::pg_pool::{Pool, PG_CONNECTIONS_MAX};
use crate::pg_sql::{col, err, prepared, Sql, MIGRATIONS};
use crate::pg_writer::Writer;
use maat_mds::store::{
    counter_after, counter_value, Batch, DurabilityCounts, Exclusive, GroupRecord, Inode,
    LeaseState, MetaStore, Op, PartitionRecord, Record, SessionRecord, StoreError, UserRecord,
    STORE_FORMAT, STORE_FORMAT_KEY,
};
use maat_proto::msg::OsdEntry;
use postgres::Statement;

mod lease;
use std::sync::atomic::{AtomicU64, Ordering};

/// Nonces recorded between two sweeps of the old ones.
pub const NONCES_PER_SWEEP: u64 = 1024;

/// The schema version this MDS writes; every earlier one is migrated on open.
pub const PG_SCHEMA_VERSION: i32 = 3;
/// The advisory lock (an arbitrary constant: "maat" in ASCII) held while the schema is
/// created or migrated.
const SCHEMA_LOCK: i64 = 0x6d61_6174;

/// Metadata in a PostgreSQL database.
pub struct PgStore {
    pool: Pool,
    /// The writer lock ([`MetaStore::exclusive`]): while a thread holds it, that
    /// thread's statements run on the lock's connection. (Boxed: it holds a whole
    /// connection, which would make every `MdsStore` as large.)
    writer: Box<Writer>,
    /// Batches committed (`maat stats`' `store_batches`).
    commits: AtomicU64,
    /// Commits that waited for the disk, and flushes by `sync` (`store_fsyncs`).
    flushes: AtomicU64,
    /// Commits made on the writer lock's connection, which does not wait for the disk,
    /// and how many of them a `sync` has made durable (the count when it began).
    unflushed: AtomicU64,
    flushed: AtomicU64,
    /// Nonces recorded ([`MetaStore::record_nonce`]): every [`NONCES_PER_SWEEP`]th
    /// record also forgets the old ones.
    nonces: AtomicU64,
    /// Told when a commit's outcome is unknown ([`PgStore::on_failure`]).
    failed_hook: FailureSlot,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // (The configuration may hold a password: never printed.)
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

/// A Maat id as PostgreSQL's signed `bigint`, bit for bit.
fn id(v: u64) -> i64 {
    v as i64
}

fn unid(v: i64) -> u64 {
    v as u64
}

impl PgStore {
    /// Connects to the database `url` names (a `postgresql://` URL or `key=value`
    /// pairs, as libpq takes them), creates the schema or brings it to
    /// [`PG_SCHEMA_VERSION`], and refuses a newer one.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with_connections(url, PG_CONNECTIONS_MAX)
    }

    /// [`PgStore::open`], keeping at most `max` connections open (at least one).
    pub fn open_with_connections(url: &str, max: usize) -> Result<Self, StoreError> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e| err("the metadata URL does not parse", e))?;
        let store = Self {
            pool: Pool::new(config, max),
            writer: Box::default(),
            commits: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            unflushed: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            nonces: AtomicU64::new(0),
            failed_hook: FailureSlot::default(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// Creates or upgrades the schema, one migration per transaction, under an
    /// advisory lock.
    fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.connect_plain()?;
        loop {
            let mut tx = client
                .transaction()
                .map_err(|e| err("beginning a migration", e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .map_err(|e| err("locking the schema", e))?;
            // (Under the lock: two instances creating it at once would collide.)
            tx.batch_execute("CREATE TABLE IF NOT EXISTS maat_schema (version integer NOT NULL)")
                .map_err(|e| err("creating maat_schema", e))?;
            let version: i32 = tx
                .query_opt("SELECT max(version) FROM maat_schema", &[])
                .map_err(|e| err("reading the schema version", e))?
                .map(|row| col::<Option<i32>>(&row, 0, "the schema version"))
                .transpose()?
                .flatten()
                .unwrap_or(0);
            if version == PG_SCHEMA_VERSION {
                return tx.commit().map_err(|e| err("ending the schema check", e));
            }
            if version > PG_SCHEMA_VERSION {
                return Err(StoreError::Version(format!(
                    "the PostgreSQL metadata schema is version {version}, newer than this MDS knows ({PG_SCHEMA_VERSION}): upgrade Maat"
                )));
            }
            let Some((to, sql)) = MIGRATIONS.iter().find(|(to, _)| *to == version + 1) else {
                return Err(StoreError::Version(format!(
                    "no migration leads from PostgreSQL schema version {version}"
                )));
            };
            tx.batch_execute(sql)
                .map_err(|e| err(&format!("migrating to schema version {to}"), e))?;
            tx.execute("INSERT INTO maat_schema (version) VALUES ($1)", &[to])
                .map_err(|e| err("recording the schema version", e))?;
            if *to == 1 {
                // The store format every MetaStore records (docs/PROTOCOL.md, "At rest").
                tx.execute(
                    "INSERT INTO meta (k, v) VALUES ($1, $2)",
                    &[
                        &STORE_FORMAT_KEY.as_bytes(),
                        &STORE_FORMAT.to_be_bytes().as_slice(),
                    ],
                )
                .map_err(|e| err("recording the store format", e))?;
            }
            tx.commit()
                .map_err(|e| err(&format!("committing schema version {to}"), e))?;
            tracing::info!(version = to, "PostgreSQL metadata schema migrated");
        }
    }

    /// Calls `hook` (with why) when a commit's outcome is unknown: the connection died
    /// after COMMIT was sent, and no new one could apply the batch again. The MDS's
    /// memory may then disagree with the database; the daemon exits and restarts from
    /// the database, as with a failed fsync on redb.
    pub fn on_failure(&self, hook: StoreFailed) {
        self.failed_hook.set(hook);
    }

    fn one<T: Record>(
        &self,
        sql: Sql,
        key: &(dyn postgres::types::ToSql + Sync),
    ) -> Result<Option<T>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let row = c.query_opt(sql, &[key], T::WHAT)?;
            match row {
                Some(row) => Ok(Some(T::decode(col(&row, 0, T::WHAT)?)?)),
                None => Ok(None),
            }
        })
    }

    fn all<T: Record>(&self, sql: Sql) -> Result<Vec<T>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let rows = c.query(sql, &[], T::WHAT)?;
            rows.iter()
                .map(|row| T::decode(col(row, 0, T::WHAT)?))
                .collect()
        })
    }

    /// One batch in one transaction; on the writer lock's connection, counted as not yet
    /// on disk.
    fn commit_batch(&self, batch: Batch) -> Result<(), StoreError> {
        // Whether the last attempt lost its connection after sending COMMIT (the server
        // may or may not have committed). An error the server reported is a rollback.
        let mut unknown = false;
        if self.writer.in_unit() {
            // Inside a unit's open transaction: the ops only, committed by `end_unit`.
            return self.writer.in_open_unit(&self.pool, |c| {
                batch
                    .0
                    .iter()
                    .try_for_each(|op| apply(&mut c.client, &c.statements, op))
            });
        }
        let on_writer = self.writer.mine();
        let result = self.writer.run(&self.pool, |c| {
            unknown = false;
            let (mut tx, statements) = c.begin("a commit")?;
            for op in &batch.0 {
                apply(&mut tx, statements, op)?;
            }
            tx.commit().map_err(|e| {
                unknown = e.as_db_error().is_none();
                err("committing", e)
            })
        });
        match result {
            Ok(()) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                match on_writer {
                    true => self.unflushed.fetch_add(1, Ordering::SeqCst),
                    false => self.flushes.fetch_add(1, Ordering::Relaxed),
                };
                Ok(())
            }
            Err(e) => {
                if unknown {
                    self.failed_hook
                        .fire(&format!("a commit's outcome is unknown: {e}"));
                }
                Err(e)
            }
        }
    }
}

impl MetaStore for PgStore {
    fn inode(&self, v: u64) -> Result<Option<Inode>, StoreError> {
        self.one(Sql::Inode, &id(v))
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let row = c.query_opt(Sql::Lookup, &[&id(parent), &name.as_bytes()], "an entry")?;
            row.map(|r| col(&r, 0, "an entry").map(unid)).transpose()
        })
    }

    /// One query: the entry joined to its inode.
    fn lookup_inode(&self, parent: u64, name: &str) -> Result<Option<Inode>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let row = c.query_opt(
                Sql::LookupInode,
                &[&id(parent), &name.as_bytes()],
                "an entry's inode",
            )?;
            row.map(|r| Inode::decode(col(&r, 0, Inode::WHAT)?))
                .transpose()
        })
    }

    /// One query for both.
    fn session_and_user(
        &self,
        session: &[u8; 16],
        uid: u64,
    ) -> Result<(Option<SessionRecord>, Option<UserRecord>), StoreError> {
        self.writer.run(&self.pool, |c| {
            let row = c.query_opt(
                Sql::SessionAndUser,
                &[&session.as_slice(), &id(uid)],
                "a session and its user",
            )?;
            let Some(row) = row else {
                return Ok((None, None));
            };
            let session: Option<Vec<u8>> = col(&row, 0, SessionRecord::WHAT)?;
            let user: Option<Vec<u8>> = col(&row, 1, UserRecord::WHAT)?;
            Ok((
                session.map(|v| SessionRecord::decode(&v)).transpose()?,
                user.map(|v| UserRecord::decode(&v)).transpose()?,
            ))
        })
    }

    /// One query for the whole path (a recursive join), read in one snapshot.
    fn walk(&self, names: &[&str]) -> Result<Vec<Inode>, StoreError> {
        let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        self.writer.run(&self.pool, |c| {
            let rows = c.query(
                Sql::Walk,
                &[&id(maat_mds::ROOT_INODE), &names],
                "a path's inodes",
            )?;
            rows.iter()
                .map(|r| Inode::decode(col(r, 0, Inode::WHAT)?))
                .collect()
        })
    }

    /// One query: the entries joined to their inodes.
    fn entries_inodes(&self, parent: u64) -> Result<Vec<(String, Inode)>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let rows = c.query(Sql::EntriesInodes, &[&id(parent)], "a directory's inodes")?;
            rows.iter()
                .map(|r| {
                    let name = String::from_utf8(col(r, 0, "an entry's name")?)
                        .map_err(|_| StoreError::corrupt("an entry's name", "not UTF-8"))?;
                    Ok((name, Inode::decode(col(r, 1, Inode::WHAT)?)?))
                })
                .collect()
        })
    }

    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let rows = c.query(Sql::Entries, &[&id(parent)], "a directory's entries")?;
            rows.iter()
                .map(|r| {
                    let name = String::from_utf8(col(r, 0, "an entry's name")?)
                        .map_err(|_| StoreError::corrupt("an entry's name", "not UTF-8"))?;
                    Ok((name, unid(col(r, 1, "an entry's child")?)))
                })
                .collect()
        })
    }

    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.one(Sql::UserByName, &name.as_bytes())
    }

    fn user(&self, v: u64) -> Result<Option<UserRecord>, StoreError> {
        self.one(Sql::User, &id(v))
    }

    fn users(&self) -> Result<Vec<UserRecord>, StoreError> {
        self.all(Sql::Users)
    }

    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        self.one(Sql::GroupByName, &name.as_bytes())
    }

    fn group(&self, v: u64) -> Result<Option<GroupRecord>, StoreError> {
        self.one(Sql::Group, &id(v))
    }

    fn session(&self, v: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError> {
        self.one(Sql::Session, &v.as_slice())
    }

    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let rows = c.query(Sql::Sessions, &[], "sessions")?;
            rows.iter()
                .map(|r| {
                    let key: [u8; 16] = col::<&[u8]>(r, 0, "a session id")?
                        .try_into()
                        .map_err(|_| StoreError::corrupt("a session id", "wrong length"))?;
                    Ok((key, SessionRecord::decode(col(r, 1, "a session")?)?))
                })
                .collect()
        })
    }

    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError> {
        self.all(Sql::Osds)
    }

    fn partition(&self, v: u64) -> Result<Option<PartitionRecord>, StoreError> {
        self.one(Sql::Partition, &id(v))
    }

    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError> {
        self.all(Sql::Partitions)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.writer.run(&self.pool, |c| {
            let row = c.query_opt(Sql::Meta, &[&key.as_bytes()], "a metadata value")?;
            row.map(|r| col(&r, 0, "a metadata value")).transpose()
        })
    }

    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.writer.run(&self.pool, |c| {
            // Bounded above by the prefix's successor where it has one, so the scan
            // reads the prefix's keys only.
            let rows = match prefix_successor(prefix.as_bytes()) {
                Some(end) => c.query(
                    Sql::MetasBelow,
                    &[&prefix.as_bytes(), &end.as_slice()],
                    "metadata values",
                )?,
                None => c.query(Sql::Metas, &[&prefix.as_bytes()], "metadata values")?,
            };
            let mut out = Vec::new();
            for r in &rows {
                let key: &[u8] = col(r, 0, "a metadata key")?;
                if !key.starts_with(prefix.as_bytes()) {
                    break;
                }
                let key = String::from_utf8(key.to_vec())
                    .map_err(|_| StoreError::corrupt("a metadata key", "not UTF-8"))?;
                out.push((key, col(r, 1, "a metadata value")?));
            }
            Ok(out)
        })
    }

    /// A durable commit: on the writer lock's connection (which commits without waiting
    /// for the disk), followed by a `sync`.
    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let on_writer = self.writer.mine();
        self.commit_batch(batch)?;
        match on_writer {
            true => self.sync(),
            false => Ok(()),
        }
    }

    /// A commit that may wait for the disk only at the next `sync` (on the writer lock's
    /// connection; elsewhere it waits at once).
    fn commit_deferred(&self, batch: Batch) -> Result<(), StoreError> {
        self.commit_batch(batch)
    }

    /// Once every commit made before the call is on disk: a transaction that writes a
    /// record to the log (a transactional logical message, which nothing decodes),
    /// committed waiting for the disk (and for synchronous standbys), flushes the log up
    /// to its commit record, so every earlier commit with it. (One that only takes a
    /// transaction id writes no record before its commit, and PostgreSQL then does not
    /// flush: tested.) Calls that find nothing left to flush (another call's flush
    /// covered it) return at once.
    fn sync(&self) -> Result<(), StoreError> {
        let target = self.unflushed.load(Ordering::SeqCst);
        if self.flushed.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let flushed = self.pool.with(|c| {
            c.client
                .batch_execute(
                    "BEGIN; SET LOCAL synchronous_commit = on; \
                     SELECT pg_logical_emit_message(true, 'maat', 'sync'); COMMIT",
                )
                .map_err(|e| err("making commits durable", e))
        });
        if let Err(e) = flushed {
            // Commits this process made and may have acted on might be lost: as with
            // redb, it starts again from what the database holds.
            self.failed_hook.fire(&format!("{e}"));
            return Err(e);
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.flushed.fetch_max(target, Ordering::SeqCst);
        Ok(())
    }

    /// One transaction: the counter's row made if missing, locked, read and moved on. A
    /// second instance allocating meanwhile waits for the lock and reads the moved value.
    /// (Retried on a new connection when the first died, it may take a second range: the
    /// first is then never used, which the contract allows.)
    fn allocate(&self, counter: &str, count: u64, first: u64) -> Result<u64, StoreError> {
        let key = counter.as_bytes();
        // On a connection of its own, never the writer lock's: an allocation is never
        // undone with a unit (ids handed out stay taken), and it waits for the disk
        // before the ids are used (the lock's connection does not: a database crash
        // could then hand the same ids out again).
        let body = |c: &mut crate::pg_pool::Conn| {
            let (mut tx, statements) = c.begin("an allocation")?;
            tx.execute(
                prepared(statements, Sql::CounterCreate)?,
                &[&key, &first.to_be_bytes().as_slice()],
            )
            .map_err(|e| err("making a counter", e))?;
            let row = tx
                .query_one(prepared(statements, Sql::CounterLock)?, &[&key])
                .map_err(|e| err("locking a counter", e))?;
            let current = counter_value(counter, col(&row, 0, "a counter")?)?;
            let next = counter_after(counter, current, count)?;
            tx.execute(
                prepared(statements, Sql::PutMeta)?,
                &[&key, &next.to_be_bytes().as_slice()],
            )
            .map_err(|e| err("moving a counter on", e))?;
            tx.commit()
                .map_err(|e| err("committing an allocation", e))?;
            Ok(current)
        };
        let taken = self.pool.with(body)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(taken)
    }

    fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
        _now: u64,
    ) -> Result<LeaseState, StoreError> {
        self.lease_row(name, holder, ttl_millis)
    }

    fn raise_lease(
        &self,
        name: &str,
        holder: &str,
        at_least: u64,
        _now: u64,
    ) -> Result<Option<u64>, StoreError> {
        self.raise_row(name, holder, at_least)
    }

    /// The advisory lock of [`crate::pg_writer`]: held by one instance at a time; the
    /// holder's commits run on the lock's connection, so they commit only while it holds.
    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        Ok(Exclusive::holding(self.writer.lock(&self.pool)?))
    }

    /// `BEGIN` on the writer lock's connection; the holder's commits run in it.
    fn begin_unit(&self) -> Result<(), StoreError> {
        self.writer.begin_unit(&self.pool)
    }

    /// `last`'s ops and `COMMIT` (on disk at the next `sync`); `ROLLBACK` if anything in
    /// the unit failed.
    fn end_unit(&self, last: Batch) -> Result<(), StoreError> {
        let mut unknown = false;
        let ended = self.writer.end_unit(
            &self.pool,
            |c| {
                last.0
                    .iter()
                    .try_for_each(|op| apply(&mut c.client, &c.statements, op))
            },
            &mut unknown,
        );
        if let Err(e) = &ended {
            // As for any commit whose outcome is unknown: the instance must not answer
            // (an error answer is final for the client), it exits, and the client sends
            // the change again at another instance, which finds the stored answer if
            // the unit was applied (issue 42; found modelling this in the simulator).
            if unknown {
                self.failed_hook
                    .fire(&format!("a unit's commit outcome is unknown: {e}"));
            }
        }
        ended?;
        // Committed on the lock's connection: on disk at the next `sync`.
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.unflushed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn atomic_units(&self) -> bool {
        true
    }

    fn durability_counts(&self) -> DurabilityCounts {
        DurabilityCounts {
            batches: self.commits.load(Ordering::Relaxed),
            fsyncs: self.flushes.load(Ordering::Relaxed),
        }
    }

    /// One statement (a table without write-ahead log: no fsync per request); every
    /// [`NONCES_PER_SWEEP`]th call also deletes the nonces sent before `at - keep_millis`.
    fn record_nonce(
        &self,
        session: &[u8; 16],
        nonce: &[u8; 16],
        at: u64,
        keep_millis: u64,
    ) -> Result<bool, StoreError> {
        let (session, nonce) = (session.as_slice(), nonce.as_slice());
        let sweep = self.nonces.fetch_add(1, Ordering::Relaxed) % NONCES_PER_SWEEP == 0;
        self.writer.run(&self.pool, |c| {
            let before = id(at.saturating_sub(keep_millis));
            if sweep {
                let forget = prepared(&c.statements, Sql::NonceForget)?;
                c.client
                    .execute(forget, &[&before])
                    .map_err(|e| err("forgetting old nonces", e))?;
            }
            let record = prepared(&c.statements, Sql::NonceRecord)?;
            let added = c
                .client
                .execute(record, &[&session, &nonce, &id(at)])
                .map_err(|e| err("recording a nonce", e))?;
            Ok(added == 1)
        })
    }

    /// Every MDS instance over the database shares it.
    fn shared(&self) -> bool {
        true
    }

    fn engine(&self) -> &'static str {
        "postgresql"
    }
}

/// The least byte string greater than every string starting with `prefix`, if any (none
/// for an empty prefix or one of 0xFF bytes only).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Writes one change inside `tx`.
fn apply(
    tx: &mut impl postgres::GenericClient,
    statements: &[Statement],
    op: &Op,
) -> Result<(), StoreError> {
    let mut run = |sql: Sql, params: &[&(dyn postgres::types::ToSql + Sync)]| {
        tx.execute(prepared(statements, sql)?, params)
            .map(drop)
            .map_err(|e| err("writing a change", e))
    };
    match op {
        Op::PutInode(i) => run(Sql::PutInode, &[&id(i.id), &i.encode()?]),
        Op::DeleteInode(v) => run(Sql::DeleteInode, &[&id(*v)]),
        Op::PutEntry {
            parent,
            name,
            child,
        } => run(
            Sql::PutEntry,
            &[&id(*parent), &name.as_bytes(), &id(*child)],
        ),
        Op::DeleteEntry { parent, name } => {
            run(Sql::DeleteEntry, &[&id(*parent), &name.as_bytes()])
        }
        Op::PutUser(u) => {
            run(Sql::PutUserName, &[&u.name.as_bytes(), &id(u.id)])?;
            run(Sql::PutUser, &[&id(u.id), &u.encode()?])
        }
        Op::DeleteUser { id: v, name } => {
            run(Sql::DeleteUserName, &[&name.as_bytes()])?;
            run(Sql::DeleteUser, &[&id(*v)])
        }
        Op::PutGroup(g) => {
            run(Sql::PutGroupName, &[&g.name.as_bytes(), &id(g.id)])?;
            run(Sql::PutGroup, &[&id(g.id), &g.encode()?])
        }
        Op::PutSession(k, s) => run(Sql::PutSession, &[&k.as_slice(), &s.encode()?]),
        Op::DeleteSession(k) => run(Sql::DeleteSession, &[&k.as_slice()]),
        Op::PutOsd(o) => run(Sql::PutOsd, &[&id(o.id), &o.encode()?]),
        Op::PutPartition(p) => run(Sql::PutPartition, &[&id(p.id), &p.encode()?]),
        Op::PutMeta(k, v) => run(Sql::PutMeta, &[&k.as_bytes(), v]),
        Op::DeleteMeta(k) => run(Sql::DeleteMeta, &[&k.as_bytes()]),
        Op::RequireLease {
            name,
            holder,
            token,
        } => {
            let row = tx
                .query_opt(prepared(statements, Sql::LeaseHeld)?, &[&name.as_bytes()])
                .map_err(|e| err("checking a lease", e))?;
            let (now_holder, found) = match row {
                Some(row) => (
                    String::from_utf8(col(&row, 0, "a lease's holder")?)
                        .map_err(|_| StoreError::corrupt("a lease's holder", "not UTF-8"))?,
                    unid(col(&row, 1, "a lease's token")?),
                ),
                None => (String::new(), 0),
            };
            maat_mds::store::check_lease_holder(name, holder, *token, now_holder, found)
        }
    }
}
