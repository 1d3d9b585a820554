//! The PostgreSQL store's schema (its migrations, by version) and every statement a
//! connection prepares, with the helpers that turn the driver's errors and columns into
//! [`StoreError`]s. No I/O of its own: [`crate::pg_pool`] connects, [`crate::pg_store`]
//! reads and commits.

use maat_mds::store::StoreError;
use postgres::types::FromSql;
use postgres::{Row, Statement};

/// Migrations by the version they lead to, applied in order in one transaction each.
pub(crate) const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE inodes (id bigint PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE entries (parent bigint NOT NULL, name bytea NOT NULL, child bigint NOT NULL,
                           PRIMARY KEY (parent, name));
     CREATE TABLE users (id bigint PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE user_names (name bytea PRIMARY KEY, id bigint NOT NULL);
     CREATE TABLE groups (id bigint PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE group_names (name bytea PRIMARY KEY, id bigint NOT NULL);
     CREATE TABLE sessions (id bytea PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE osds (id bigint PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE partitions (id bigint PRIMARY KEY, v bytea NOT NULL);
     CREATE TABLE meta (k bytea PRIMARY KEY, v bytea NOT NULL);",
    ),
    // Issue 42: leases on singleton duties, timed by the database's clock.
    (
        2,
        "CREATE TABLE leases (name bytea PRIMARY KEY, holder bytea NOT NULL,
                              until timestamptz NOT NULL, token bigint NOT NULL);",
    ),
    // Issue 42: request nonces seen by any instance (replay protection across them).
    // Unlogged: no write-ahead log per request; emptied if the server crashes.
    (
        3,
        "CREATE UNLOGGED TABLE nonces (session bytea NOT NULL, nonce bytea NOT NULL,
                                       at bigint NOT NULL, PRIMARY KEY (session, nonce));
         CREATE INDEX nonces_at ON nonces (at);",
    ),
];

/// Every statement a connection prepares once, when it is made.
#[derive(Clone, Copy)]
pub(crate) enum Sql {
    Inode,
    Lookup,
    Entries,
    UserByName,
    User,
    Users,
    GroupByName,
    Group,
    Session,
    Sessions,
    Osds,
    Partition,
    Partitions,
    Meta,
    Metas,
    MetasBelow,
    PutInode,
    DeleteInode,
    PutEntry,
    DeleteEntry,
    PutUser,
    PutUserName,
    DeleteUser,
    DeleteUserName,
    PutGroup,
    PutGroupName,
    PutSession,
    DeleteSession,
    PutOsd,
    PutPartition,
    PutMeta,
    DeleteMeta,
    CounterCreate,
    CounterLock,
    LeaseCreate,
    LeaseLock,
    LeaseSet,
    NonceRecord,
    NonceForget,
    LookupInode,
    EntriesInodes,
    Walk,
    SessionAndUser,
    LeaseHeld,
    LeaseRaise,
}

pub(crate) const STATEMENTS: [(Sql, &str); 45] = [
    (Sql::Inode, "SELECT v FROM inodes WHERE id = $1"),
    (
        Sql::Lookup,
        "SELECT child FROM entries WHERE parent = $1 AND name = $2",
    ),
    (
        Sql::Entries,
        "SELECT name, child FROM entries WHERE parent = $1 ORDER BY name",
    ),
    (
        Sql::UserByName,
        "SELECT u.v FROM user_names n JOIN users u ON u.id = n.id WHERE n.name = $1",
    ),
    (Sql::User, "SELECT v FROM users WHERE id = $1"),
    (Sql::Users, "SELECT v FROM users ORDER BY id"),
    (
        Sql::GroupByName,
        "SELECT g.v FROM group_names n JOIN groups g ON g.id = n.id WHERE n.name = $1",
    ),
    (Sql::Group, "SELECT v FROM groups WHERE id = $1"),
    (Sql::Session, "SELECT v FROM sessions WHERE id = $1"),
    (Sql::Sessions, "SELECT id, v FROM sessions ORDER BY id"),
    (Sql::Osds, "SELECT v FROM osds ORDER BY id"),
    (Sql::Partition, "SELECT v FROM partitions WHERE id = $1"),
    (Sql::Partitions, "SELECT v FROM partitions ORDER BY id"),
    (Sql::Meta, "SELECT v FROM meta WHERE k = $1"),
    (Sql::Metas, "SELECT k, v FROM meta WHERE k >= $1 ORDER BY k"),
    (
        Sql::MetasBelow,
        "SELECT k, v FROM meta WHERE k >= $1 AND k < $2 ORDER BY k",
    ),
    (
        Sql::PutInode,
        "INSERT INTO inodes (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (Sql::DeleteInode, "DELETE FROM inodes WHERE id = $1"),
    (
        Sql::PutEntry,
        "INSERT INTO entries (parent, name, child) VALUES ($1, $2, $3)
         ON CONFLICT (parent, name) DO UPDATE SET child = EXCLUDED.child",
    ),
    (
        Sql::DeleteEntry,
        "DELETE FROM entries WHERE parent = $1 AND name = $2",
    ),
    (
        Sql::PutUser,
        "INSERT INTO users (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (
        Sql::PutUserName,
        "INSERT INTO user_names (name, id) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET id = EXCLUDED.id",
    ),
    (Sql::DeleteUser, "DELETE FROM users WHERE id = $1"),
    (Sql::DeleteUserName, "DELETE FROM user_names WHERE name = $1"),
    (
        Sql::PutGroup,
        "INSERT INTO groups (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (
        Sql::PutGroupName,
        "INSERT INTO group_names (name, id) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET id = EXCLUDED.id",
    ),
    (
        Sql::PutSession,
        "INSERT INTO sessions (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (Sql::DeleteSession, "DELETE FROM sessions WHERE id = $1"),
    (
        Sql::PutOsd,
        "INSERT INTO osds (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (
        Sql::PutPartition,
        "INSERT INTO partitions (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
    ),
    (
        Sql::PutMeta,
        "INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
    ),
    (Sql::DeleteMeta, "DELETE FROM meta WHERE k = $1"),
    (
        Sql::CounterCreate,
        "INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
    ),
    (Sql::CounterLock, "SELECT v FROM meta WHERE k = $1 FOR UPDATE"),
    (
        Sql::LeaseCreate,
        "INSERT INTO leases (name, holder, until, token)
         VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3), 1)
         ON CONFLICT (name) DO NOTHING",
    ),
    (
        Sql::LeaseLock,
        "SELECT holder, until < clock_timestamp(), token FROM leases WHERE name = $1 FOR UPDATE",
    ),
    (
        Sql::LeaseSet,
        "UPDATE leases SET holder = $2, until = clock_timestamp() + make_interval(secs => $3),
                          token = $4 WHERE name = $1",
    ),
    (
        Sql::NonceRecord,
        "INSERT INTO nonces (session, nonce, at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    ),
    (Sql::NonceForget, "DELETE FROM nonces WHERE at < $1"),
    (
        Sql::LookupInode,
        "SELECT i.v FROM entries e JOIN inodes i ON i.id = e.child
         WHERE e.parent = $1 AND e.name = $2",
    ),
    (
        Sql::EntriesInodes,
        "SELECT e.name, i.v FROM entries e JOIN inodes i ON i.id = e.child
         WHERE e.parent = $1 ORDER BY e.name",
    ),
    // A path from the root ($1) by its names ($2, in order): the inodes found, by depth
    // (0 the root). A name under a file finds no entry, so the walk ends there too.
    // Each step is an index lookup on (parent, name): the name is the array's element
    // at the step's depth (joined to an unnested array instead, the planner scanned
    // every entry at each step).
    (
        Sql::Walk,
        "WITH RECURSIVE walk (depth, id, v) AS (
             SELECT 0, id, v FROM inodes WHERE id = $1
             UNION ALL
             SELECT w.depth + 1, i.id, i.v FROM walk w
             JOIN entries e ON e.parent = w.id AND e.name = ($2::bytea[])[w.depth + 1]
             JOIN inodes i ON i.id = e.child
             WHERE w.depth < cardinality($2::bytea[]))
         SELECT v FROM walk ORDER BY depth",
    ),
    (
        Sql::SessionAndUser,
        "SELECT (SELECT v FROM sessions WHERE id = $1), (SELECT v FROM users WHERE id = $2)",
    ),
    // Issue 42, `Op::RequireLease`: the lease's holder and token, its row locked against
    // a takeover until the batch's transaction ends.
    (
        Sql::LeaseHeld,
        "SELECT holder, token FROM leases WHERE name = $1 FOR SHARE",
    ),
    // Issue 42, `MetaStore::raise_lease`: the holder's token raised (its row locked by
    // `LeaseLock` in the same transaction).
    (Sql::LeaseRaise, "UPDATE leases SET token = $2 WHERE name = $1"),
];

/// `sql`'s statement among a connection's, prepared in [`STATEMENTS`] order.
pub(crate) fn prepared(statements: &[Statement], sql: Sql) -> Result<&Statement, StoreError> {
    statements
        .get(sql as usize)
        .ok_or_else(|| StoreError::Backend("a statement was not prepared".into()))
}

/// A driver error as the store's, naming what was being done.
pub(crate) fn err(what: &str, e: postgres::Error) -> StoreError {
    // (The error's own text is "db error" for every refusal by the server: its
    // message and code are what say why.)
    match e.as_db_error() {
        Some(db) => StoreError::Backend(format!(
            "postgresql: {what}: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => StoreError::Backend(format!("postgresql: {what}: {e}")),
    }
}

/// Column `i` of `row` as a `T`, or an error naming `what` where the database holds
/// another type there (someone changed the schema under the MDS): never a panic.
pub(crate) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize, what: &str) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| {
        StoreError::Backend(format!(
            "postgresql: {what}: column {i} does not hold what this MDS's schema says: {e}"
        ))
    })
}
