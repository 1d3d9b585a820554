//! The database that several simulated MDS instances share (issue 42), in this process
//! and on the simulated clock, with the semantics the instances rely on from PostgreSQL:
//!
//! * every batch applies atomically, and reads see only what was committed;
//! * one writer lock ([`MetaStore::exclusive`]) for all instances;
//! * a unit ([`MetaStore::begin_unit`]) is one transaction: its commits are seen only by
//!   the thread that made them until it ends, and then all at once; if it does not end,
//!   none of it was applied (id counters excepted: as PostgreSQL's sequences, an id
//!   handed out is never handed out again);
//! * request nonces and leases are shared, atomically;
//! * the disk's faults ([`StorageFaults::meta_commit_fails`]) strike commits as a lost
//!   database connection does: the instance learns its commit failed, and it cannot know
//!   whether the database applied it. Every second fault is applied *before* the
//!   failure is reported (the commit went through, its answer was lost), the others are
//!   not applied. Either way the instance's connection is gone: everything it asks
//!   afterwards fails, and its store-failed hook tells the simulator to restart it.
//!
//! Each instance holds an [`InstanceStore`] (its "connection"); the tables outlive the
//! instances, as a database server outlives its clients.

use maat_mds::store::{
    Batch, Exclusive, GroupRecord, Inode, LeaseState, MetaStore, Op, PartitionRecord,
    SessionRecord, StoreError, UserRecord,
};
use maat_proto::msg::OsdEntry;
use maat_server::faults::StorageFaults;
use maat_server::StoreFailed;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

/// The records, as the store keeps them.
#[derive(Default, Clone)]
struct Tables {
    inodes: BTreeMap<u64, Inode>,
    entries: BTreeMap<(u64, String), u64>,
    users: BTreeMap<u64, UserRecord>,
    groups: BTreeMap<u64, GroupRecord>,
    sessions: BTreeMap<[u8; 16], SessionRecord>,
    osds: BTreeMap<u64, OsdEntry>,
    partitions: BTreeMap<u64, PartitionRecord>,
    meta: BTreeMap<String, Vec<u8>>,
}

impl Tables {
    fn apply(&mut self, op: Op) {
        match op {
            Op::PutInode(i) => {
                self.inodes.insert(i.id, i);
            }
            Op::DeleteInode(id) => {
                self.inodes.remove(&id);
            }
            Op::PutEntry {
                parent,
                name,
                child,
            } => {
                self.entries.insert((parent, name), child);
            }
            Op::DeleteEntry { parent, name } => {
                self.entries.remove(&(parent, name));
            }
            Op::PutUser(u) => {
                self.users.insert(u.id, u);
            }
            Op::DeleteUser { id, .. } => {
                self.users.remove(&id);
            }
            Op::PutGroup(g) => {
                self.groups.insert(g.id, g);
            }
            Op::PutSession(id, s) => {
                self.sessions.insert(id, s);
            }
            Op::DeleteSession(id) => {
                self.sessions.remove(&id);
            }
            Op::PutOsd(o) => {
                self.osds.insert(o.id, o);
            }
            Op::PutPartition(p) => {
                self.partitions.insert(p.id, p);
            }
            Op::PutMeta(k, v) => {
                self.meta.insert(k, v);
            }
            Op::DeleteMeta(k) => {
                self.meta.remove(&k);
            }
            // Checked by `apply_batch`, before any op of its batch applies.
            Op::RequireLease { .. } => {}
        }
    }

    /// Applies `ops` as one transaction: all of them once every lease they require holds
    /// (as PostgreSQL's `FOR SHARE` on the lease's row), none otherwise.
    fn apply_batch(&mut self, ops: impl IntoIterator<Item = Op>) -> Result<(), StoreError> {
        let ops: Vec<Op> = ops.into_iter().collect();
        for op in &ops {
            if let Op::RequireLease {
                name,
                holder,
                token,
            } = op
            {
                let stored = self
                    .meta
                    .get(&format!("{}{name}", maat_mds::store::LEASE_PREFIX));
                maat_mds::store::check_lease_record(
                    name,
                    stored.map(Vec::as_slice),
                    holder,
                    *token,
                )?;
            }
        }
        for op in ops {
            self.apply(op);
        }
        Ok(())
    }
}

/// A request's session id and nonce.
type SessionNonce = ([u8; 16], [u8; 16]);

/// An open unit: whose it is, what it sees (the tables when it began and its own
/// commits), and its commits, applied to the shared tables when it ends.
struct Unit {
    thread: ThreadId,
    view: Tables,
    ops: Vec<Op>,
}

/// The database the instances share.
pub struct SharedDb {
    tables: Mutex<Tables>,
    unit: Mutex<Option<Unit>>,
    /// The writer lock: held or not, and who waits for it.
    writer: Mutex<bool>,
    freed: Condvar,
    /// Request nonces recorded, by session and nonce: when each was sent.
    nonces: Mutex<BTreeMap<SessionNonce, u64>>,
    /// Makes each lease request one atomic step.
    leases: Mutex<()>,
    faults: Arc<StorageFaults>,
    /// Faults that struck so far (odd ones: applied before they were reported).
    struck: AtomicU64,
    /// Faults that struck after the commit was applied.
    applied_then_failed: AtomicU64,
    /// A fault a test placed on the next unit's commit: applied first or not.
    next_unit_fails: Mutex<Option<bool>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedDb {
    /// An empty database on a disk with `faults`.
    pub fn new(faults: Arc<StorageFaults>) -> Arc<Self> {
        Arc::new(Self {
            tables: Mutex::default(),
            unit: Mutex::default(),
            writer: Mutex::new(false),
            freed: Condvar::new(),
            nonces: Mutex::default(),
            leases: Mutex::default(),
            faults,
            struck: AtomicU64::new(0),
            applied_then_failed: AtomicU64::new(0),
            next_unit_fails: Mutex::new(None),
        })
    }

    /// Faults that struck after their commit was applied (the instance died not knowing).
    pub fn applied_then_failed(&self) -> u64 {
        self.applied_then_failed.load(Ordering::SeqCst)
    }

    /// Makes the next unit's commit (a change sent as `Once`) fail as a lost connection
    /// does, applied first if `applied`: the instance dies not knowing whether it
    /// committed (a test's fault, placed exactly).
    pub fn fail_next_unit(&self, applied: bool) {
        *locked(&self.next_unit_fails) = Some(applied);
    }

    /// A connection for one instance; `on_failure` is called once when it breaks.
    pub fn connect(self: &Arc<Self>, on_failure: StoreFailed) -> InstanceStore {
        InstanceStore {
            db: self.clone(),
            broken: Arc::new(AtomicBool::new(false)),
            on_failure,
        }
    }
}

/// Held while an instance holds the writer lock.
struct WriterHeld<'a>(&'a SharedDb);

impl Drop for WriterHeld<'_> {
    fn drop(&mut self) {
        // A unit its holder left open (an error between its begin and end) is rolled
        // back with the lock's release, as on PostgreSQL.
        locked(&self.0.unit).take();
        *locked(&self.0.writer) = false;
        self.0.freed.notify_one();
    }
}

/// One instance's connection to the [`SharedDb`].
pub struct InstanceStore {
    db: Arc<SharedDb>,
    broken: Arc<AtomicBool>,
    on_failure: StoreFailed,
}

fn lost() -> StoreError {
    StoreError::Backend("simulated database: this instance's connection was lost".into())
}

impl InstanceStore {
    /// Breaks this connection when set (the instance crashed): from then on everything
    /// it asks fails.
    pub fn breaker(&self) -> Arc<AtomicBool> {
        self.broken.clone()
    }

    fn alive(&self) -> Result<(), StoreError> {
        match self.broken.load(Ordering::SeqCst) {
            true => Err(lost()),
            false => Ok(()),
        }
    }

    /// Reads through the calling thread's open unit if it has one, else the shared
    /// tables.
    fn read<T>(&self, f: impl FnOnce(&Tables) -> T) -> Result<T, StoreError> {
        self.alive()?;
        let me = std::thread::current().id();
        if let Some(unit) = locked(&self.db.unit).as_ref().filter(|u| u.thread == me) {
            return Ok(f(&unit.view));
        }
        Ok(f(&locked(&self.db.tables)))
    }

    /// Whether a fault strikes this commit; if so, whether it is applied first. The
    /// connection is broken either way.
    fn fault(&self) -> Option<bool> {
        if !self.db.faults.meta_commit_fails() {
            return None;
        }
        let n = self.db.struck.fetch_add(1, Ordering::SeqCst);
        let applied = n % 2 == 1;
        if applied {
            self.db.applied_then_failed.fetch_add(1, Ordering::SeqCst);
        }
        Some(applied)
    }

    fn break_connection(&self, why: &str) -> StoreError {
        if !self.broken.swap(true, Ordering::SeqCst) {
            (self.on_failure)(why);
        }
        StoreError::Backend(format!("simulated database: {why}"))
    }
}

impl MetaStore for InstanceStore {
    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError> {
        self.read(|t| t.inodes.get(&id).cloned())
    }
    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
        self.read(|t| t.entries.get(&(parent, name.to_string())).copied())
    }
    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|t| {
            t.entries
                .range((parent, String::new())..)
                .take_while(|((p, _), _)| *p == parent)
                .map(|((_, n), c)| (n.clone(), *c))
                .collect()
        })
    }
    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.read(|t| t.users.values().find(|u| u.name == name).cloned())
    }
    fn user(&self, id: u64) -> Result<Option<UserRecord>, StoreError> {
        self.read(|t| t.users.get(&id).cloned())
    }
    fn users(&self) -> Result<Vec<UserRecord>, StoreError> {
        self.read(|t| t.users.values().cloned().collect())
    }
    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        self.read(|t| t.groups.values().find(|g| g.name == name).cloned())
    }
    fn group(&self, id: u64) -> Result<Option<GroupRecord>, StoreError> {
        self.read(|t| t.groups.get(&id).cloned())
    }
    fn session(&self, id: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError> {
        self.read(|t| t.sessions.get(id).cloned())
    }
    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError> {
        self.read(|t| t.sessions.iter().map(|(k, v)| (*k, v.clone())).collect())
    }
    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError> {
        self.read(|t| t.osds.values().cloned().collect())
    }
    fn partition(&self, id: u64) -> Result<Option<PartitionRecord>, StoreError> {
        self.read(|t| t.partitions.get(&id).cloned())
    }
    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError> {
        self.read(|t| t.partitions.values().cloned().collect())
    }
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|t| t.meta.get(key).cloned())
    }
    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.read(|t| {
            t.meta
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    }
    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        self.alive()?;
        let me = std::thread::current().id();
        if let Some(unit) = locked(&self.db.unit).as_mut().filter(|u| u.thread == me) {
            for op in batch.0 {
                unit.view.apply(op.clone());
                unit.ops.push(op);
            }
            return Ok(());
        }
        let fault = self.fault();
        let mut applied = Ok(());
        if fault != Some(false) {
            applied = locked(&self.db.tables).apply_batch(batch.0);
        }
        match fault {
            None => applied,
            Some(_) => Err(self.break_connection("the commit's connection was lost")),
        }
    }
    fn allocate(&self, counter: &str, count: u64, first: u64) -> Result<u64, StoreError> {
        self.alive()?;
        let next_bytes;
        let current = {
            let mut tables = locked(&self.db.tables);
            let current = match tables.meta.get(counter) {
                Some(v) => maat_mds::store::counter_value(counter, v.clone())?,
                None => first,
            };
            let next = maat_mds::store::counter_after(counter, current, count)?;
            next_bytes = next.to_be_bytes().to_vec();
            tables.meta.insert(counter.to_string(), next_bytes.clone());
            current
        };
        // The unit that asked sees the counter moved too (never undone).
        let me = std::thread::current().id();
        if let Some(unit) = locked(&self.db.unit).as_mut().filter(|u| u.thread == me) {
            unit.view.meta.insert(counter.to_string(), next_bytes);
        }
        Ok(current)
    }
    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        self.alive()?;
        let mut held = locked(&self.db.writer);
        while *held {
            held = self
                .db
                .freed
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *held = true;
        Ok(Exclusive::holding(WriterHeld(&self.db)))
    }
    fn begin_unit(&self) -> Result<(), StoreError> {
        self.alive()?;
        if !*locked(&self.db.writer) {
            return Err(StoreError::Backend(
                "simulated database: a unit begun without the writer lock".into(),
            ));
        }
        let view = locked(&self.db.tables).clone();
        let mut unit = locked(&self.db.unit);
        if unit.is_some() {
            return Err(StoreError::Backend(
                "simulated database: a unit begun while another is open".into(),
            ));
        }
        *unit = Some(Unit {
            thread: std::thread::current().id(),
            view,
            ops: Vec::new(),
        });
        Ok(())
    }
    fn end_unit(&self, last: Batch) -> Result<(), StoreError> {
        let me = std::thread::current().id();
        let unit = {
            let mut slot = locked(&self.db.unit);
            match slot.as_ref() {
                Some(u) if u.thread == me => slot.take(),
                _ => None,
            }
        };
        let Some(unit) = unit else {
            return Err(StoreError::Backend(
                "simulated database: a unit ended that this thread did not begin".into(),
            ));
        };
        self.alive()?;
        let placed = locked(&self.db.next_unit_fails).take();
        if placed == Some(true) {
            self.db.applied_then_failed.fetch_add(1, Ordering::SeqCst);
        }
        let fault = placed.or_else(|| self.fault());
        let mut applied = Ok(());
        if fault != Some(false) {
            applied = locked(&self.db.tables).apply_batch(unit.ops.into_iter().chain(last.0));
        }
        match fault {
            None => applied,
            Some(_) => Err(self.break_connection("the unit's commit: connection lost")),
        }
    }
    fn atomic_units(&self) -> bool {
        true
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.alive()
    }
    fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
        now: u64,
    ) -> Result<LeaseState, StoreError> {
        let _one = locked(&self.db.leases);
        maat_mds::store::lease_in_meta(self, name, holder, ttl_millis, now)
    }
    fn raise_lease(
        &self,
        name: &str,
        holder: &str,
        at_least: u64,
        now: u64,
    ) -> Result<Option<u64>, StoreError> {
        let _one = locked(&self.db.leases);
        maat_mds::store::raise_in_meta(self, name, holder, at_least, now)
    }
    fn record_nonce(
        &self,
        session: &[u8; 16],
        nonce: &[u8; 16],
        at: u64,
        keep_millis: u64,
    ) -> Result<bool, StoreError> {
        self.alive()?;
        let mut nonces = locked(&self.db.nonces);
        let oldest = at.saturating_sub(keep_millis);
        nonces.retain(|_, sent| *sent >= oldest);
        Ok(nonces.insert((*session, *nonce), at).is_none())
    }
    fn shared(&self) -> bool {
        true
    }
    fn engine(&self) -> &'static str {
        "simulated"
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Issue 42: as on PostgreSQL, a batch that requires a lease applies only while its
    /// committer holds it under that token, in a plain commit and at the end of a unit
    /// alike; refused, none of it is applied.
    #[test]
    fn a_batch_applies_only_under_the_lease_it_requires() {
        let db = SharedDb::new(Arc::new(StorageFaults::new(1)));
        let hook: StoreFailed = Arc::new(|_| {});
        let (a, b) = (db.connect(hook.clone()), db.connect(hook));
        let write = |holder: &str, token: u64, v: u8| {
            Batch(vec![
                Op::PutMeta("k".into(), vec![v]),
                Op::RequireLease {
                    name: "leader".into(),
                    holder: holder.into(),
                    token,
                },
            ])
        };
        assert!(a.lease("leader", "a", 10, 100).unwrap().granted);
        a.commit(write("a", 1, 1)).unwrap();
        assert_eq!(b.lease("leader", "b", 10, 200).unwrap().token, 2);
        assert!(matches!(
            a.commit(write("a", 1, 2)),
            Err(StoreError::LeaseLost { found: 2, .. })
        ));
        {
            let _writer = a.exclusive().unwrap();
            a.begin_unit().unwrap();
            a.commit(write("a", 1, 3)).unwrap();
            assert!(matches!(
                a.end_unit(Batch(vec![Op::PutMeta("other".into(), vec![1])])),
                Err(StoreError::LeaseLost { .. })
            ));
        }
        assert_eq!(b.meta("k").unwrap(), Some(vec![1]));
        assert_eq!(b.meta("other").unwrap(), None);
        b.commit(write("b", 2, 4)).unwrap();
        assert_eq!(a.meta("k").unwrap(), Some(vec![4]));
    }
}
