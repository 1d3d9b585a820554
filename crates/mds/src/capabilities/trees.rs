//! SPEC M4 at the MDS: the Merkle trees of the capabilities it issued, kept (bounded)
//! for `GetTree` and served only to the users those capabilities name.

use crate::{lock, MdsError, MetaStore, Principal, Result, ADMIN_UID};
use maat_crypto::hash::Digest;
use maat_proto::msg::{ErrorCode, MdsResponse};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub use crate::limits::TREE_CACHE_ENTRIES_MAX;
pub use crate::limits::TREE_CACHE_MEMBERS_MAX;

pub(super) struct TreeEntry {
    pub(super) message: Vec<u8>,
    /// Who may fetch it: the users of the capability it was made for (ascending).
    pub(super) readers: Vec<u64>,
    pub(super) members: usize,
}

#[derive(Default)]
pub(super) struct TreeCache {
    pub(super) trees: HashMap<Digest, Arc<TreeEntry>>,
    pub(super) order: VecDeque<Digest>,
    pub(super) members: usize,
}

impl TreeCache {
    /// Keeps a tree for `GetTree`. One root can stand in several capabilities for
    /// different users (the same directory's file set named for two groups of users):
    /// whoever any of them names may fetch it, so the readers are merged.
    pub(super) fn insert(&mut self, root: Digest, entry: Arc<TreeEntry>) {
        if let Some(held) = self.trees.get_mut(&root) {
            if entry
                .readers
                .iter()
                .all(|r| held.readers.binary_search(r).is_ok())
            {
                return;
            }
            let mut readers = held.readers.clone();
            readers.extend(entry.readers.iter().copied());
            readers.sort_unstable();
            readers.dedup();
            self.members += readers.len().saturating_sub(held.readers.len());
            *held = Arc::new(TreeEntry {
                message: held.message.clone(),
                members: readers.len(),
                readers,
            });
        } else {
            self.members += entry.members;
            self.trees.insert(root, entry);
            self.order.push_back(root);
        }
        while self.trees.len() > TREE_CACHE_ENTRIES_MAX || self.members > TREE_CACHE_MEMBERS_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.trees.remove(&old) {
                self.members = self.members.saturating_sub(e.members);
            }
        }
    }
}

impl<S: MetaStore> crate::Mds<S> {
    /// SPEC M4: the members of a root in a capability this MDS issued, for a user named
    /// in that capability (or the administrator).
    pub(crate) fn get_tree(&self, who: &Principal, root: &Digest) -> Result<MdsResponse> {
        let entry = lock(&self.issuer.trees)
            .trees
            .get(root)
            .cloned()
            .ok_or_else(|| {
                MdsError::refused(
                    ErrorCode::UnknownTree,
                    "this MDS no longer holds that tree: open the file again",
                )
            })?;
        if who.uid != ADMIN_UID && entry.readers.binary_search(&who.uid).is_err() {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                "only users named in the capability may fetch its trees",
            ));
        }
        Ok(MdsResponse::Tree(entry.message.clone()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(readers: &[u64]) -> Arc<TreeEntry> {
        Arc::new(TreeEntry {
            message: vec![1, 2, 3],
            readers: readers.to_vec(),
            members: readers.len(),
        })
    }

    /// Found by `maat bench grouping`: a directory's file set named for one group of
    /// users and then for another kept only the first group as readers, and the second
    /// was refused the tree its own capability named.
    #[test]
    fn a_root_named_for_two_user_sets_is_fetchable_by_both() {
        let mut cache = TreeCache::default();
        let root = [7u8; 32];
        cache.insert(root, entry(&[2, 5]));
        cache.insert(root, entry(&[3, 5]));
        let held = cache.trees.get(&root).unwrap();
        assert_eq!(held.readers, vec![2, 3, 5]);
        assert_eq!(held.message, vec![1, 2, 3]);
        assert_eq!(cache.members, 3);
        // Nothing new: nothing changes.
        cache.insert(root, entry(&[2]));
        assert_eq!(cache.trees.get(&root).unwrap().readers, vec![2, 3, 5]);
        assert_eq!(cache.trees.len(), 1);
    }
}
