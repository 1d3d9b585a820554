//! The store an MDS daemon runs on: the embedded redb file (the default) or a PostgreSQL
//! database (`meta_url` in the MDS config, issue 42). One type for both, so the daemon,
//! its handler and the simulator name one `Mds<MdsStore>`.
//!
//! Every method of [`MetaStore`] is forwarded here, those with a default too: a default
//! left in place would run instead of the store's own (a unit that is not one
//! transaction, a writer lock that locks nothing).

use crate::meta_store::RedbStore;
use crate::pg_store::PgStore;
use maat_mds::store::{
    Batch, DurabilityCounts, Exclusive, GroupRecord, Inode, LeaseState, MetaStore, PartitionRecord,
    SessionRecord, StoreError, UserRecord,
};
use maat_proto::msg::OsdEntry;

/// An MDS daemon's metadata store.
pub enum MdsStore {
    /// One redb file under the MDS's data directory.
    Redb(RedbStore),
    /// A PostgreSQL database.
    Postgres(PgStore),
    /// A store of the simulator's own (several MDS instances in one process over one
    /// shared database, issue 42); only in builds for the simulator.
    #[cfg(feature = "sim")]
    Simulated(Box<dyn MetaStore>),
}

/// Calls the same method on whichever store it is.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            MdsStore::Redb($s) => $e,
            MdsStore::Postgres($s) => $e,
            #[cfg(feature = "sim")]
            MdsStore::Simulated($s) => $e,
        }
    };
}

impl MetaStore for MdsStore {
    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError> {
        each!(self, s => s.inode(id))
    }
    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
        each!(self, s => s.lookup(parent, name))
    }
    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError> {
        each!(self, s => s.entries(parent))
    }
    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        each!(self, s => s.user_by_name(name))
    }
    fn user(&self, id: u64) -> Result<Option<UserRecord>, StoreError> {
        each!(self, s => s.user(id))
    }
    fn users(&self) -> Result<Vec<UserRecord>, StoreError> {
        each!(self, s => s.users())
    }
    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        each!(self, s => s.group_by_name(name))
    }
    fn group(&self, id: u64) -> Result<Option<GroupRecord>, StoreError> {
        each!(self, s => s.group(id))
    }
    fn session(&self, id: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError> {
        each!(self, s => s.session(id))
    }
    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError> {
        each!(self, s => s.sessions())
    }
    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError> {
        each!(self, s => s.osds())
    }
    fn partition(&self, id: u64) -> Result<Option<PartitionRecord>, StoreError> {
        each!(self, s => s.partition(id))
    }
    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError> {
        each!(self, s => s.partitions())
    }
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        each!(self, s => s.meta(key))
    }
    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        each!(self, s => s.metas(prefix))
    }
    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        each!(self, s => s.commit(batch))
    }
    fn allocate(&self, counter: &str, count: u64, first: u64) -> Result<u64, StoreError> {
        each!(self, s => s.allocate(counter, count, first))
    }
    fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
        now: u64,
    ) -> Result<LeaseState, StoreError> {
        each!(self, s => s.lease(name, holder, ttl_millis, now))
    }
    fn raise_lease(
        &self,
        name: &str,
        holder: &str,
        at_least: u64,
        now: u64,
    ) -> Result<Option<u64>, StoreError> {
        each!(self, s => s.raise_lease(name, holder, at_least, now))
    }
    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        each!(self, s => s.exclusive())
    }
    fn commit_deferred(&self, batch: Batch) -> Result<(), StoreError> {
        each!(self, s => s.commit_deferred(batch))
    }
    fn lookup_inode(&self, parent: u64, name: &str) -> Result<Option<Inode>, StoreError> {
        each!(self, s => s.lookup_inode(parent, name))
    }
    fn entries_inodes(&self, parent: u64) -> Result<Vec<(String, Inode)>, StoreError> {
        each!(self, s => s.entries_inodes(parent))
    }
    fn session_and_user(
        &self,
        id: &[u8; 16],
        uid: u64,
    ) -> Result<(Option<SessionRecord>, Option<UserRecord>), StoreError> {
        each!(self, s => s.session_and_user(id, uid))
    }
    fn walk(&self, names: &[&str]) -> Result<Vec<Inode>, StoreError> {
        each!(self, s => s.walk(names))
    }
    fn begin_unit(&self) -> Result<(), StoreError> {
        each!(self, s => s.begin_unit())
    }
    fn end_unit(&self, last: Batch) -> Result<(), StoreError> {
        each!(self, s => s.end_unit(last))
    }
    fn atomic_units(&self) -> bool {
        each!(self, s => s.atomic_units())
    }
    fn sync(&self) -> Result<(), StoreError> {
        each!(self, s => s.sync())
    }
    fn durability_counts(&self) -> DurabilityCounts {
        each!(self, s => s.durability_counts())
    }
    fn record_nonce(
        &self,
        session: &[u8; 16],
        nonce: &[u8; 16],
        at: u64,
        keep_millis: u64,
    ) -> Result<bool, StoreError> {
        each!(self, s => s.record_nonce(session, nonce, at, keep_millis))
    }
    fn shared(&self) -> bool {
        each!(self, s => s.shared())
    }
    fn engine(&self) -> &'static str {
        each!(self, s => s.engine())
    }
}
