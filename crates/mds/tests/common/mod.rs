//! An in-memory `MetaStore` for the MDS logic tests.
#![allow(dead_code, clippy::unwrap_used)]

use maat_mds::grouping::GroupingConfig;
use maat_mds::store::Exclusive;
use maat_mds::store::{
    Batch, GroupRecord, Inode, MetaStore, Op, PartitionRecord, SessionRecord, StoreError,
    UserCredential, UserRecord,
};
use maat_mds::{Mds, MdsConfig, MdsSecrets};
use maat_proto::msg::{KdfParams, MdsRequest, MdsResponse, OsdEntry, WireError};
use maat_proto::UnixMillis;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

pub mod login;

#[derive(Default, Clone)]
pub struct Tables {
    pub inodes: BTreeMap<u64, Inode>,
    pub entries: BTreeMap<(u64, String), u64>,
    pub users: BTreeMap<u64, UserRecord>,
    pub groups: BTreeMap<u64, GroupRecord>,
    pub sessions: BTreeMap<[u8; 16], SessionRecord>,
    pub osds: BTreeMap<u64, OsdEntry>,
    pub partitions: BTreeMap<u64, PartitionRecord>,
    pub meta: BTreeMap<String, Vec<u8>>,
    /// Request nonces recorded (`MetaStore::record_nonce`), by session.
    pub nonces: std::collections::BTreeSet<([u8; 16], [u8; 16])>,
}

/// A `MetaStore` in a `BTreeMap`, applying each batch atomically under one lock, shared
/// by every MDS opened on it as a PostgreSQL database is: counters move atomically, and
/// the writer lock ([`MetaStore::exclusive`]) is one for all of them.
#[derive(Default)]
pub struct MemStore(pub Mutex<Tables>, pub Sharing);

/// How a [`MemStore`] is shared: its writer lock, which `lock_off` makes hold nothing (to
/// show what the lock prevents), and a pause before each read of an inode or entry,
/// `read_micros` (a database's round trip: it widens the windows the lock closes).
#[derive(Default)]
pub struct Sharing {
    held: Mutex<bool>,
    freed: Condvar,
    pub lock_off: AtomicBool,
    pub read_micros: std::sync::atomic::AtomicU64,
    /// Issue 42: units ([`MetaStore::begin_unit`]) are one transaction unless
    /// `units_off`: the tables as they were when the open unit began, restored (but for
    /// id counters, never undone, as on PostgreSQL) if it does not end. A rollback loses
    /// writes other instances made without the writer lock meanwhile: tests that make
    /// units fail make none.
    pub unit: Mutex<Option<Tables>>,
    pub units_off: AtomicBool,
    /// Every this-many-th unit fails at its end, as if its instance died before
    /// committing (0: none): rolled back, or with `units_off` its commits kept and its
    /// last ops (the answer) lost.
    pub crash_every: std::sync::atomic::AtomicU64,
    units_ended: std::sync::atomic::AtomicU64,
    /// Units that failed so.
    pub crashes: std::sync::atomic::AtomicU64,
}

impl Sharing {
    fn pause(&self) {
        let micros = self.read_micros.load(Ordering::Relaxed);
        if micros > 0 {
            std::thread::sleep(std::time::Duration::from_micros(micros));
        }
    }
}

/// Held while the writer lock is.
pub struct WriterHeld<'a>(&'a Sharing);

impl Drop for WriterHeld<'_> {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap() = false;
        self.0.freed.notify_one();
    }
}

impl MetaStore for &MemStore {
    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError> {
        self.1.pause();
        Ok(self.0.lock().unwrap().inodes.get(&id).cloned())
    }
    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
        self.1.pause();
        Ok(self
            .0
            .lock()
            .unwrap()
            .entries
            .get(&(parent, name.to_string()))
            .copied())
    }
    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .entries
            .iter()
            .filter(|((p, _), _)| *p == parent)
            .map(|((_, n), c)| (n.clone(), *c))
            .collect())
    }
    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .users
            .values()
            .find(|u| u.name == name)
            .cloned())
    }
    fn user(&self, id: u64) -> Result<Option<UserRecord>, StoreError> {
        Ok(self.0.lock().unwrap().users.get(&id).cloned())
    }
    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .groups
            .values()
            .find(|g| g.name == name)
            .cloned())
    }
    fn group(&self, id: u64) -> Result<Option<GroupRecord>, StoreError> {
        Ok(self.0.lock().unwrap().groups.get(&id).cloned())
    }
    fn session(&self, id: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.0.lock().unwrap().sessions.get(id).cloned())
    }
    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .sessions
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect())
    }
    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError> {
        Ok(self.0.lock().unwrap().osds.values().cloned().collect())
    }
    fn partition(&self, id: u64) -> Result<Option<PartitionRecord>, StoreError> {
        Ok(self.0.lock().unwrap().partitions.get(&id).cloned())
    }
    fn users(&self) -> Result<Vec<UserRecord>, StoreError> {
        Ok(self.0.lock().unwrap().users.values().cloned().collect())
    }
    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .partitions
            .values()
            .cloned()
            .collect())
    }
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.0.lock().unwrap().meta.get(key).cloned())
    }
    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .meta
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        let lock = &self.1;
        if lock.lock_off.load(Ordering::SeqCst) {
            return Ok(Exclusive::local());
        }
        let mut held = lock.held.lock().unwrap();
        while *held {
            held = lock.freed.wait(held).unwrap();
        }
        *held = true;
        Ok(Exclusive::holding(WriterHeld(lock)))
    }
    fn allocate(&self, counter: &str, count: u64, first: u64) -> Result<u64, StoreError> {
        let mut t = self.0.lock().unwrap();
        let current = match t.meta.get(counter) {
            Some(v) => maat_mds::store::counter_value(counter, v.clone())?,
            None => first,
        };
        let next = current.checked_add(count).unwrap();
        t.meta.insert(counter.into(), next.to_be_bytes().to_vec());
        Ok(current)
    }
    fn shared(&self) -> bool {
        true
    }
    fn begin_unit(&self) -> Result<(), StoreError> {
        if !self.1.units_off.load(Ordering::SeqCst) {
            let snapshot = self.0.lock().unwrap().clone();
            *self.1.unit.lock().unwrap() = Some(snapshot);
        }
        Ok(())
    }
    fn end_unit(&self, last: Batch) -> Result<(), StoreError> {
        let snapshot = self.1.unit.lock().unwrap().take();
        let every = self.1.crash_every.load(Ordering::SeqCst);
        let n = self.1.units_ended.fetch_add(1, Ordering::SeqCst) + 1;
        if every > 0 && n % every == 0 {
            self.1.crashes.fetch_add(1, Ordering::SeqCst);
            if let Some(mut before) = snapshot {
                let mut t = self.0.lock().unwrap();
                for (k, v) in &t.meta {
                    if k.starts_with("next_") {
                        before.meta.insert(k.clone(), v.clone());
                    }
                }
                *t = before;
            }
            return Err(StoreError::Backend(
                "the instance died before its commit (a test's crash)".into(),
            ));
        }
        match last.0.is_empty() {
            true => Ok(()),
            false => self.commit(last),
        }
    }
    fn atomic_units(&self) -> bool {
        !self.1.units_off.load(Ordering::SeqCst)
    }
    fn record_nonce(
        &self,
        session: &[u8; 16],
        nonce: &[u8; 16],
        _at: u64,
        _keep_millis: u64,
    ) -> Result<bool, StoreError> {
        Ok(self.0.lock().unwrap().nonces.insert((*session, *nonce)))
    }
    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let mut t = self.0.lock().unwrap();
        let (batch, required) = maat_mds::store::take_lease_requirements(batch);
        for (name, holder, token) in &required {
            let key = format!("{}{name}", maat_mds::store::LEASE_PREFIX);
            let stored = t.meta.get(&key).map(Vec::as_slice);
            maat_mds::store::check_lease_record(name, stored, holder, *token)?;
        }
        for op in batch.0 {
            match op {
                Op::PutInode(i) => {
                    t.inodes.insert(i.id, i);
                }
                Op::DeleteInode(id) => {
                    t.inodes.remove(&id);
                }
                Op::PutEntry {
                    parent,
                    name,
                    child,
                } => {
                    t.entries.insert((parent, name), child);
                }
                Op::DeleteEntry { parent, name } => {
                    t.entries.remove(&(parent, name));
                }
                Op::PutUser(u) => {
                    t.users.insert(u.id, u);
                }
                Op::DeleteUser { id, .. } => {
                    t.users.remove(&id);
                }
                Op::PutGroup(g) => {
                    t.groups.insert(g.id, g);
                }
                Op::PutSession(id, s) => {
                    t.sessions.insert(id, s);
                }
                Op::DeleteSession(id) => {
                    t.sessions.remove(&id);
                }
                Op::PutOsd(o) => {
                    t.osds.insert(o.id, o);
                }
                Op::PutPartition(p) => {
                    t.partitions.insert(p.id, p);
                }
                Op::PutMeta(k, v) => {
                    t.meta.insert(k, v);
                }
                Op::DeleteMeta(k) => {
                    t.meta.remove(&k);
                }
                // Checked above, and taken off.
                Op::RequireLease { .. } => {}
            }
        }
        Ok(())
    }
}

/// A start time for tests (2026-11-23).
pub const T0: u64 = 1_795_305_600_000;
/// The capability lifetime of [`mds`].
pub const LIFETIME: u64 = 10_000;
/// The join key of [`mds`].
pub const JOIN: [u8; 32] = [0x10; 32];

/// An MDS on `store` at [`T0`], fixed secrets and administrator key, default grouping.
pub fn mds(store: &MemStore) -> Mds<&MemStore> {
    Mds::open(
        store,
        MdsConfig {
            ticket_lifetime_millis: 3_600_000,
            capability_lifetime_millis: LIFETIME,
            danger_allow_insecure: false,
            join_key: JOIN,
            default_protection: maat_proto::protection::Protection::AllData,
            grouping: GroupingConfig::default(),
            kds: Vec::new(),
            kds_keys: None,
            encrypt_new_files: false,
            // These tests ask for the modes they mean.
            default_umask: 0,
            default_replicas: 1,
        },
        MdsSecrets::generate(&mut ChaCha20Rng::seed_from_u64(99)),
        &[0xad; 32],
        UnixMillis(T0),
        &mut ChaCha20Rng::seed_from_u64(7),
    )
    .unwrap()
}

/// Adds users `names` (ids 100, 101, ...; group 10) straight to the store.
pub fn add_users(store: &MemStore, names: &[&str]) {
    let mut batch = Batch::default();
    for (i, name) in names.iter().enumerate() {
        batch.push(Op::PutUser(UserRecord {
            id: 100 + i as u64,
            name: (*name).into(),
            credential: UserCredential::Opaque {
                record: Vec::new(),
                params: KdfParams {
                    memory_kib: 8,
                    iterations: 1,
                    lanes: 1,
                },
            },
            gid: 10,
            groups: vec![],
            // These tests ask for the modes they mean.
            umask: 0,
        }));
    }
    store.commit(batch).unwrap();
}

/// `request` as user `uid` at `now`.
pub fn call(
    mds: &Mds<&MemStore>,
    uid: u64,
    request: MdsRequest,
    now: u64,
) -> Result<MdsResponse, WireError> {
    mds.dispatch_as(
        uid,
        request,
        UnixMillis(now),
        &mut ChaCha20Rng::seed_from_u64(now),
    )
}
