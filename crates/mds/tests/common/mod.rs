//! An in-memory `MetaStore` for the MDS logic tests.
#![allow(dead_code, clippy::unwrap_used)]

use maat_mds::store::{
    Batch, GroupRecord, Inode, MetaStore, Op, PartitionRecord, SessionRecord, StoreError,
    UserRecord,
};
use maat_proto::msg::OsdEntry;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Tables {
    pub inodes: BTreeMap<u64, Inode>,
    pub entries: BTreeMap<(u64, String), u64>,
    pub users: BTreeMap<u64, UserRecord>,
    pub groups: BTreeMap<u64, GroupRecord>,
    pub sessions: BTreeMap<[u8; 16], SessionRecord>,
    pub osds: BTreeMap<u64, OsdEntry>,
    pub partitions: BTreeMap<u64, PartitionRecord>,
    pub meta: BTreeMap<String, Vec<u8>>,
}

/// A `MetaStore` in a `BTreeMap`, applying each batch atomically under one lock.
#[derive(Default)]
pub struct MemStore(pub Mutex<Tables>);

impl MetaStore for &MemStore {
    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError> {
        Ok(self.0.lock().unwrap().inodes.get(&id).cloned())
    }
    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError> {
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
    fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let mut t = self.0.lock().unwrap();
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
            }
        }
        Ok(())
    }
}
