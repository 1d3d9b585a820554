//! The MDS's [`MetaStore`] on redb: one file, copy-on-write B-trees, each commit atomic, so
//! a crash leaves either the old or the new state, and fsynced (redb's `Immediate`
//! durability). [`MetaStore::commit_deferred`] applies a namespace batch in memory only
//! (an overlay that reads consult first); the next [`MetaStore::sync`] or
//! [`MetaStore::commit`] writes every batch applied before it in one transaction (group
//! commit, [`crate::group_commit`]).
//!
//! Every value is a versioned [`Record`]; the store's layout version is in `meta` under
//! [`STORE_FORMAT_KEY`] (docs/PROTOCOL.md, "At rest"). A store of format 0 (no version anywhere) is
//! rewritten to the current format in one transaction when it is opened.

use crate::group_commit::GroupCommit;
use crate::overlay::merged;
use maat_mds::store::{
    migrate_v0_value, Batch, DurabilityCounts, GroupRecord, Inode, MetaStore, Op, PartitionRecord,
    Record, SessionRecord, StoreError, UserRecord, STORE_FORMAT, STORE_FORMAT_KEY,
};
use maat_proto::msg::OsdEntry;
use redb::{Database, ReadableTable, TableDefinition, WriteTransaction};
use std::path::Path;

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const ENTRIES: TableDefinition<(u64, &str), u64> = TableDefinition::new("entries");
const USERS: TableDefinition<u64, &[u8]> = TableDefinition::new("users");
const USER_NAMES: TableDefinition<&str, u64> = TableDefinition::new("user_names");
const GROUPS: TableDefinition<u64, &[u8]> = TableDefinition::new("groups");
const GROUP_NAMES: TableDefinition<&str, u64> = TableDefinition::new("group_names");
const SESSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sessions");
const OSDS: TableDefinition<u64, &[u8]> = TableDefinition::new("osds");
const PARTITIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("partitions");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Metadata in a redb database file.
pub struct RedbStore {
    db: Database,
    group: GroupCommit,
    /// A simulated disk's faults.
    #[cfg(feature = "sim")]
    faults: Option<std::sync::Arc<crate::faults::StorageFaults>>,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn enc<T: Record>(v: &T) -> Result<Vec<u8>, StoreError> {
    v.encode()
}

fn dec<T: Record>(v: &[u8]) -> Result<T, StoreError> {
    T::decode(v)
}

/// Copies every entry of `table` from one database to another.
fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    from: &redb::ReadTransaction,
    to: &redb::WriteTransaction,
    table: TableDefinition<K, V>,
) -> Result<(), StoreError> {
    let source = from.open_table(table).map_err(err)?;
    let mut target = to.open_table(table).map_err(err)?;
    for item in source.iter().map_err(err)? {
        let (k, v) = item.map_err(err)?;
        target.insert(k.value(), v.value()).map_err(err)?;
    }
    Ok(())
}

/// Rewrites every value of `table` (keyed by id) from format 0 as a versioned record of
/// type `T`.
fn migrate_table<T: Record>(
    tx: &redb::WriteTransaction,
    table: TableDefinition<u64, &[u8]>,
) -> Result<usize, StoreError> {
    let mut t = tx.open_table(table).map_err(err)?;
    let mut rewritten = Vec::new();
    for item in t.iter().map_err(err)? {
        let (k, v) = item.map_err(err)?;
        rewritten.push((k.value(), migrate_v0_value::<T>(v.value())?));
    }
    for (k, v) in &rewritten {
        t.insert(*k, v.as_slice()).map_err(err)?;
    }
    Ok(rewritten.len())
}

/// Opens the database at `path`, creating it readable and writable by its owner only
/// (mode 0600, whatever the process umask) when it does not exist: redb would create it
/// with the umask's mode, and the MDS refuses at its next start a database that group or
/// others can read.
fn create_private(path: &Path) -> Result<Database, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    if !path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| err(format!("creating {}: {e}", path.display())))?;
    }
    Database::create(path).map_err(err)
}

impl RedbStore {
    /// Opens (or creates) the database at `path` and makes sure every table exists.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = create_private(path)?;
        let tx = db.begin_write().map_err(err)?;
        {
            tx.open_table(INODES).map_err(err)?;
            tx.open_table(ENTRIES).map_err(err)?;
            tx.open_table(USERS).map_err(err)?;
            tx.open_table(USER_NAMES).map_err(err)?;
            tx.open_table(GROUPS).map_err(err)?;
            tx.open_table(GROUP_NAMES).map_err(err)?;
            tx.open_table(SESSIONS).map_err(err)?;
            tx.open_table(OSDS).map_err(err)?;
            tx.open_table(PARTITIONS).map_err(err)?;
            tx.open_table(META).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        let store = Self {
            db,
            group: GroupCommit::default(),
            #[cfg(feature = "sim")]
            faults: None,
        };
        store.upgrade()?;
        Ok(store)
    }

    /// The store's format: absent means format 0 (or a new, empty store).
    fn format(&self) -> Result<Option<u64>, StoreError> {
        Ok(match self.meta(STORE_FORMAT_KEY)? {
            Some(v) => Some(u64::from_be_bytes(v.try_into().map_err(|_| {
                StoreError::corrupt(format!("meta {STORE_FORMAT_KEY}"), "wrong length")
            })?)),
            None => None,
        })
    }

    /// Brings a store of an older format to [`STORE_FORMAT`] in one transaction; refuses a
    /// newer one.
    fn upgrade(&self) -> Result<(), StoreError> {
        match self.format()? {
            Some(f) if f == STORE_FORMAT => return Ok(()),
            Some(f) if f > STORE_FORMAT => {
                return Err(StoreError::Version(format!(
                    "the metadata store has format {f}, newer than this MDS knows ({STORE_FORMAT}): upgrade Maat"
                )))
            }
            Some(f) => {
                return Err(StoreError::Version(format!(
                    "the metadata store has format {f}, which no migration knows"
                )))
            }
            None => {}
        }
        let tx = self.db.begin_write().map_err(err)?;
        let mut records = 0usize;
        records += migrate_table::<Inode>(&tx, INODES)?;
        records += migrate_table::<UserRecord>(&tx, USERS)?;
        records += migrate_table::<GroupRecord>(&tx, GROUPS)?;
        records += migrate_table::<OsdEntry>(&tx, OSDS)?;
        {
            // Format 0 kept session keys in clear: drop those sessions (their users log in
            // again) rather than carry the keys over.
            let mut t = tx.open_table(SESSIONS).map_err(err)?;
            let ids: Vec<Vec<u8>> = t
                .iter()
                .map_err(err)?
                .map(|item| item.map(|(k, _)| k.value().to_vec()))
                .collect::<Result<_, _>>()
                .map_err(err)?;
            for id in &ids {
                t.remove(id.as_slice()).map_err(err)?;
            }
            if !ids.is_empty() {
                tracing::warn!(
                    sessions = ids.len(),
                    "dropped the sessions of the format-0 store (their keys were stored in clear); those users log in again"
                );
            }
        }
        {
            let mut meta = tx.open_table(META).map_err(err)?;
            meta.insert(STORE_FORMAT_KEY, STORE_FORMAT.to_be_bytes().as_slice())
                .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        if records > 0 {
            tracing::info!(
                records,
                "metadata store migrated from format 0 to {STORE_FORMAT}"
            );
        }
        Ok(())
    }

    /// Rewrites the database at `path` into a fresh file and renames it into place, so
    /// that values deleted from it (a format-0 store's secrets) are not left in free
    /// pages, which redb's `compact` does not promise. The old file's blocks are freed,
    /// not wiped: a copy of it taken before, or the raw disk, may still hold them.
    pub fn rewrite_fresh(self, path: &Path) -> Result<Self, StoreError> {
        // What is applied must be in the file that is copied.
        self.sync()?;
        let temp = path.with_extension("redb.rewrite");
        let _ = std::fs::remove_file(&temp);
        {
            let fresh = create_private(&temp)?;
            let from = self.db.begin_read().map_err(err)?;
            let to = fresh.begin_write().map_err(err)?;
            copy_table(&from, &to, INODES)?;
            copy_table(&from, &to, ENTRIES)?;
            copy_table(&from, &to, USERS)?;
            copy_table(&from, &to, USER_NAMES)?;
            copy_table(&from, &to, GROUPS)?;
            copy_table(&from, &to, GROUP_NAMES)?;
            copy_table(&from, &to, SESSIONS)?;
            copy_table(&from, &to, OSDS)?;
            copy_table(&from, &to, PARTITIONS)?;
            copy_table(&from, &to, META)?;
            to.commit().map_err(err)?;
        }
        drop(self);
        std::fs::rename(&temp, path).map_err(err)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(err)?;
        }
        Self::open(path)
    }

    fn get_u64<T: Record>(
        &self,
        table: TableDefinition<u64, &[u8]>,
        key: u64,
    ) -> Result<Option<T>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(table).map_err(err)?;
        match t.get(key).map_err(err)? {
            Some(v) => Ok(Some(dec(v.value())?)),
            None => Ok(None),
        }
    }

    fn name_to_id(
        &self,
        table: TableDefinition<&str, u64>,
        name: &str,
    ) -> Result<Option<u64>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(table).map_err(err)?;
        Ok(t.get(name).map_err(err)?.map(|v| v.value()))
    }
}

impl MetaStore for RedbStore {
    // Reads look in the overlay first, then in the database: a change written and then
    // forgotten in between is in the database by then. Listings open their read
    // transaction while they hold the overlay, so both show the same moment (a rename
    // written in between would otherwise list a file under both names).

    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError> {
        if let Some(held) = self.group.read(|o| o.inode(id))? {
            return Ok(held);
        }
        self.get_u64(INODES, id)
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
        if let Some(held) = self.group.read(|o| o.lookup(parent, name))? {
            return Ok(held);
        }
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(ENTRIES).map_err(err)?;
        Ok(t.get((parent, name)).map_err(err)?.map(|v| v.value()))
    }

    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError> {
        let (held, tx) = self
            .group
            .read(|o| (o.entries_of(parent), self.db.begin_read()))?;
        let tx = tx.map_err(err)?;
        let t = tx.open_table(ENTRIES).map_err(err)?;
        let mut out = Vec::new();
        let start: (u64, &str) = (parent, "");
        for item in t.range(start..).map_err(err)? {
            let (k, v) = item.map_err(err)?;
            let (p, name) = k.value();
            if p != parent {
                break;
            }
            out.push((name.to_string(), v.value()));
        }
        Ok(merged(out, held))
    }

    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        match self.name_to_id(USER_NAMES, name)? {
            Some(id) => self.user(id),
            None => Ok(None),
        }
    }

    fn user(&self, id: u64) -> Result<Option<UserRecord>, StoreError> {
        self.get_u64(USERS, id)
    }

    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        match self.name_to_id(GROUP_NAMES, name)? {
            Some(id) => self.group(id),
            None => Ok(None),
        }
    }

    fn group(&self, id: u64) -> Result<Option<GroupRecord>, StoreError> {
        self.get_u64(GROUPS, id)
    }

    fn session(&self, id: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(SESSIONS).map_err(err)?;
        match t.get(id.as_slice()).map_err(err)? {
            Some(v) => Ok(Some(dec(v.value())?)),
            None => Ok(None),
        }
    }

    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(SESSIONS).map_err(err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(err)? {
            let (k, v) = item.map_err(err)?;
            let id: [u8; 16] = k
                .value()
                .try_into()
                .map_err(|_| StoreError::corrupt("a session id", "wrong length"))?;
            out.push((id, dec(v.value())?));
        }
        Ok(out)
    }

    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(OSDS).map_err(err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(err)? {
            let (_, v) = item.map_err(err)?;
            out.push(dec(v.value())?);
        }
        Ok(out)
    }

    fn partition(&self, id: u64) -> Result<Option<PartitionRecord>, StoreError> {
        self.get_u64(PARTITIONS, id)
    }

    fn users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(USERS).map_err(err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(err)? {
            let (_, v) = item.map_err(err)?;
            out.push(dec(v.value())?);
        }
        Ok(out)
    }

    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(PARTITIONS).map_err(err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(err)? {
            let (_, v) = item.map_err(err)?;
            out.push(dec(v.value())?);
        }
        Ok(out)
    }

    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let (held, tx) = self
            .group
            .read(|o| (o.metas_of(prefix), self.db.begin_read()))?;
        let tx = tx.map_err(err)?;
        let t = tx.open_table(META).map_err(err)?;
        let mut out = Vec::new();
        for item in t.range(prefix..).map_err(err)? {
            let (k, v) = item.map_err(err)?;
            if !k.value().starts_with(prefix) {
                break;
            }
            out.push((k.value().to_string(), v.value().to_vec()));
        }
        Ok(merged(out, held))
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(held) = self.group.read(|o| o.meta(key))? {
            return Ok(held);
        }
        let tx = self.db.begin_read().map_err(err)?;
        let t = tx.open_table(META).map_err(err)?;
        Ok(t.get(key).map_err(err)?.map(|v| v.value().to_vec()))
    }

    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let batch = self.leases_checked(batch)?;
        self.group.commit(batch, || self.begin(), write)
    }

    fn commit_deferred(&self, batch: Batch) -> Result<(), StoreError> {
        let batch = self.leases_checked(batch)?;
        match self.group.apply(batch)? {
            Some(batch) => self.commit(batch),
            None => Ok(()),
        }
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.group.sync(|| self.begin(), write)
    }

    fn durability_counts(&self) -> DurabilityCounts {
        self.group.counts()
    }

    fn engine(&self) -> &'static str {
        "redb"
    }
}

impl RedbStore {
    /// Issue 42: `batch` without its lease requirements, once each is found to hold
    /// (read through the group commit's overlay, where a renewal deferred its record).
    /// A redb file is held by one process, and only its own calls change a lease, each
    /// renewal keeping holder and token: nothing can take the lease between this check
    /// and the commit.
    fn leases_checked(&self, batch: Batch) -> Result<Batch, StoreError> {
        let (changes, required) = maat_mds::store::take_lease_requirements(batch);
        for (name, holder, token) in &required {
            maat_mds::store::require_lease_in_meta(self, name, holder, *token)?;
        }
        Ok(changes)
    }

    /// Whether [`MetaStore::commit_deferred`] defers (the MDS config's `group_commit`).
    pub fn set_group_commit(&self, on: bool) {
        self.group.set_enabled(on);
    }

    /// Calls `hook` (with why) once, when a durable commit first fails: from then on
    /// every change and sync fails (what was applied may be only partly on disk), and the
    /// daemon must restart from what is on disk. The MDS daemon exits (its supervisor
    /// restarts it), as PostgreSQL does when an fsync fails.
    pub fn on_failure(&self, hook: crate::env::StoreFailed) {
        self.group.set_on_failure(hook);
    }

    /// The store, on a disk with `faults` (a simulation's).
    #[cfg(feature = "sim")]
    pub fn with_faults(
        mut self,
        faults: Option<std::sync::Arc<crate::faults::StorageFaults>>,
    ) -> Self {
        self.faults = faults;
        self
    }

    fn begin(&self) -> Result<WriteTransaction, StoreError> {
        #[cfg(feature = "sim")]
        if self.faults.as_ref().is_some_and(|f| f.meta_commit_fails()) {
            return Err(StoreError::Backend(
                "simulated disk fault: the commit's fsync failed".into(),
            ));
        }
        self.db.begin_write().map_err(err)
    }
}

/// Writes `batch` in `tx` and commits it, durably.
fn write(tx: WriteTransaction, batch: Batch) -> Result<(), StoreError> {
    {
        let mut inodes = tx.open_table(INODES).map_err(err)?;
        let mut entries = tx.open_table(ENTRIES).map_err(err)?;
        let mut users = tx.open_table(USERS).map_err(err)?;
        let mut user_names = tx.open_table(USER_NAMES).map_err(err)?;
        let mut groups = tx.open_table(GROUPS).map_err(err)?;
        let mut group_names = tx.open_table(GROUP_NAMES).map_err(err)?;
        let mut sessions = tx.open_table(SESSIONS).map_err(err)?;
        let mut osds = tx.open_table(OSDS).map_err(err)?;
        let mut partitions = tx.open_table(PARTITIONS).map_err(err)?;
        let mut meta = tx.open_table(META).map_err(err)?;
        for op in batch.0 {
            match op {
                Op::PutInode(i) => {
                    inodes.insert(i.id, enc(&i)?.as_slice()).map_err(err)?;
                }
                Op::DeleteInode(id) => {
                    inodes.remove(id).map_err(err)?;
                }
                Op::PutEntry {
                    parent,
                    name,
                    child,
                } => {
                    entries
                        .insert((parent, name.as_str()), child)
                        .map_err(err)?;
                }
                Op::DeleteEntry { parent, name } => {
                    entries.remove((parent, name.as_str())).map_err(err)?;
                }
                Op::PutUser(u) => {
                    user_names.insert(u.name.as_str(), u.id).map_err(err)?;
                    users.insert(u.id, enc(&u)?.as_slice()).map_err(err)?;
                }
                Op::DeleteUser { id, name } => {
                    user_names.remove(name.as_str()).map_err(err)?;
                    users.remove(id).map_err(err)?;
                }
                Op::PutGroup(g) => {
                    group_names.insert(g.name.as_str(), g.id).map_err(err)?;
                    groups.insert(g.id, enc(&g)?.as_slice()).map_err(err)?;
                }
                Op::PutSession(id, s) => {
                    sessions
                        .insert(id.as_slice(), enc(&s)?.as_slice())
                        .map_err(err)?;
                }
                Op::DeleteSession(id) => {
                    sessions.remove(id.as_slice()).map_err(err)?;
                }
                Op::PutOsd(o) => {
                    osds.insert(o.id, enc(&o)?.as_slice()).map_err(err)?;
                }
                Op::PutPartition(p) => {
                    partitions.insert(p.id, enc(&p)?.as_slice()).map_err(err)?;
                }
                Op::PutMeta(k, v) => {
                    meta.insert(k.as_str(), v.as_slice()).map_err(err)?;
                }
                Op::DeleteMeta(k) => {
                    meta.remove(k.as_str()).map_err(err)?;
                }
                // Checked, and taken off, by `commit` and `commit_deferred`.
                Op::RequireLease { .. } => {}
            }
        }
    }
    tx.commit().map_err(err)
}

#[cfg(test)]
mod tests;
