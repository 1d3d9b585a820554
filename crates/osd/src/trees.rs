//! SPEC M4: the Merkle trees an OSD has verified, by root. A capability that names a set
//! by its root is checked against the members kept here; a root not here is refused with
//! `UnknownTree` and the client supplies the tree (which the OSD rebuilds and compares
//! with a root of a capability it verified, so no signature is needed on the tree).

use maat_crypto::hash::Digest;
use maat_proto::merkle_msg::MemberSet;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

pub use crate::limits::TREE_CACHE_ENTRIES_MAX;
pub use crate::limits::TREE_CACHE_MEMBERS_MAX;

/// Verified member sets by root, bounded in entries and in members.
#[derive(Default)]
pub(crate) struct TreeCache {
    sets: RwLock<HashMap<Digest, Arc<MemberSet>>>,
    order: Mutex<(VecDeque<Digest>, usize)>,
}

impl TreeCache {
    /// The verified set for `root`, if kept.
    pub fn get(&self, root: &Digest) -> Option<Arc<MemberSet>> {
        maat_proto::sync::read(&self.sets).get(root).cloned()
    }

    /// Keeps a verified set, dropping the oldest while over a bound.
    pub fn insert(&self, set: MemberSet) {
        let root = *set.root();
        let len = set.len();
        let mut order = maat_proto::sync::lock(&self.order);
        let mut sets = maat_proto::sync::write(&self.sets);
        if sets.insert(root, Arc::new(set)).is_some() {
            return;
        }
        order.0.push_back(root);
        order.1 += len;
        while sets.len() > TREE_CACHE_ENTRIES_MAX || order.1 > TREE_CACHE_MEMBERS_MAX {
            let Some(old) = order.0.pop_front() else {
                break;
            };
            if let Some(s) = sets.remove(&old) {
                order.1 = order.1.saturating_sub(s.len());
            }
        }
    }

    /// Number of trees kept.
    pub fn len(&self) -> usize {
        maat_proto::sync::read(&self.sets).len()
    }

    /// Forgets every tree (the MDS key changed).
    pub fn clear(&self) {
        let mut order = maat_proto::sync::lock(&self.order);
        maat_proto::sync::write(&self.sets).clear();
        *order = (VecDeque::new(), 0);
    }
}
