//! Namespace changes the MDS applied but the database does not hold yet (group commit):
//! inodes, directory entries and `meta` values, each with the number of the batch that
//! last set it. Reads look here first, then in the database; a sync writes a snapshot of
//! it in one transaction and then forgets what that wrote and nothing set since.

use maat_mds::store::{Batch, Inode, Op};
use std::collections::{BTreeMap, HashMap};

/// A value, or its deletion, and the batch that set it.
type Slot<T> = (u64, Option<T>);

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub(crate) struct Overlay {
    /// Batches applied so far (also the number of the last).
    batches: u64,
    inodes: HashMap<u64, Slot<Inode>>,
    entries: BTreeMap<(u64, String), Slot<u64>>,
    meta: BTreeMap<String, Slot<Vec<u8>>>,
}

/// Whether an overlay holds `op` (the rest go straight to the database).
pub(crate) fn held(op: &Op) -> bool {
    matches!(
        op,
        Op::PutInode(_)
            | Op::DeleteInode(_)
            | Op::PutEntry { .. }
            | Op::DeleteEntry { .. }
            | Op::PutMeta(..)
            | Op::DeleteMeta(_)
    )
}

impl Overlay {
    /// Applies the changes of `batch` that it holds (see [`held`]), as one batch; returns
    /// the others, in order.
    pub(crate) fn apply(&mut self, batch: Batch) -> Batch {
        self.batches += 1;
        let n = self.batches;
        let mut rest = Batch::default();
        for op in batch.0 {
            match op {
                Op::PutInode(i) => {
                    self.inodes.insert(i.id, (n, Some(i)));
                }
                Op::DeleteInode(id) => {
                    self.inodes.insert(id, (n, None));
                }
                Op::PutEntry {
                    parent,
                    name,
                    child,
                } => {
                    self.entries.insert((parent, name), (n, Some(child)));
                }
                Op::DeleteEntry { parent, name } => {
                    self.entries.insert((parent, name), (n, None));
                }
                Op::PutMeta(k, v) => {
                    self.meta.insert(k, (n, Some(v)));
                }
                Op::DeleteMeta(k) => {
                    self.meta.insert(k, (n, None));
                }
                other => {
                    rest.push(other);
                }
            }
        }
        rest
    }

    /// Batches applied so far.
    pub(crate) fn batches(&self) -> u64 {
        self.batches
    }

    /// Whether it holds no change.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.entries.is_empty() && self.meta.is_empty()
    }

    /// `Some(inode or None if deleted)` if it holds the inode's latest change.
    pub(crate) fn inode(&self, id: u64) -> Option<Option<Inode>> {
        self.inodes.get(&id).map(|(_, v)| v.clone())
    }

    /// `Some(child or None if deleted)` if it holds the entry's latest change.
    pub(crate) fn lookup(&self, parent: u64, name: &str) -> Option<Option<u64>> {
        self.entries
            .get(&(parent, name.to_string()))
            .map(|(_, v)| *v)
    }

    /// The entries of `parent` it holds, by name (`None`: deleted).
    pub(crate) fn entries_of(&self, parent: u64) -> Vec<(String, Option<u64>)> {
        self.entries
            .range((parent, String::new())..)
            .take_while(|((p, _), _)| *p == parent)
            .map(|((_, name), (_, v))| (name.clone(), *v))
            .collect()
    }

    /// `Some(value or None if deleted)` if it holds the value's latest change.
    pub(crate) fn meta(&self, key: &str) -> Option<Option<Vec<u8>>> {
        self.meta.get(key).map(|(_, v)| v.clone())
    }

    /// The `meta` values under `prefix` it holds, by key (`None`: deleted).
    pub(crate) fn metas_of(&self, prefix: &str) -> Vec<(String, Option<Vec<u8>>)> {
        self.meta
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }

    /// Every change it holds, as one batch to write (its latest state of each key).
    pub(crate) fn to_batch(&self) -> Batch {
        let mut b = Batch::default();
        for (id, (_, v)) in &self.inodes {
            b.push(match v {
                Some(i) => Op::PutInode(i.clone()),
                None => Op::DeleteInode(*id),
            });
        }
        for ((parent, name), (_, v)) in &self.entries {
            let (parent, name) = (*parent, name.clone());
            b.push(match v {
                Some(child) => Op::PutEntry {
                    parent,
                    name,
                    child: *child,
                },
                None => Op::DeleteEntry { parent, name },
            });
        }
        for (k, (_, v)) in &self.meta {
            b.push(match v {
                Some(v) => Op::PutMeta(k.clone(), v.clone()),
                None => Op::DeleteMeta(k.clone()),
            });
        }
        b
    }

    /// Forgets what `written` (an earlier copy of this overlay, now in the database)
    /// held, except what was set again since.
    pub(crate) fn forget(&mut self, written: &Overlay) {
        self.inodes
            .retain(|k, (n, _)| written.inodes.get(k).is_none_or(|(w, _)| w != n));
        self.entries
            .retain(|k, (n, _)| written.entries.get(k).is_none_or(|(w, _)| w != n));
        self.meta
            .retain(|k, (n, _)| written.meta.get(k).is_none_or(|(w, _)| w != n));
    }
}

/// `stored` (from the database, by name) with `held` (from an overlay) laid over it.
pub(crate) fn merged<T: Clone>(
    stored: Vec<(String, T)>,
    held: Vec<(String, Option<T>)>,
) -> Vec<(String, T)> {
    let mut all: BTreeMap<String, T> = stored.into_iter().collect();
    for (k, v) in held {
        match v {
            Some(v) => {
                all.insert(k, v);
            }
            None => {
                all.remove(&k);
            }
        }
    }
    all.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(parent: u64, name: &str, child: u64) -> Op {
        Op::PutEntry {
            parent,
            name: name.into(),
            child,
        }
    }

    #[test]
    fn reads_see_the_latest_change_and_deletions_hide_stored_values() {
        let mut o = Overlay::default();
        let mut b = Batch::default();
        b.push(entry(1, "a", 2))
            .push(entry(1, "b", 3))
            .push(entry(2, "x", 9));
        b.push(Op::PutMeta("next".into(), vec![1]));
        assert!(o.apply(b).0.is_empty());
        let mut b = Batch::default();
        b.push(Op::DeleteEntry {
            parent: 1,
            name: "a".into(),
        });
        b.push(Op::PutMeta("next".into(), vec![2]));
        b.push(Op::DeleteSession([0; 16]));
        let rest = o.apply(b);
        assert_eq!(
            rest.0,
            vec![Op::DeleteSession([0; 16])],
            "not held: passed on"
        );
        assert_eq!(o.batches(), 2);
        assert_eq!(o.lookup(1, "a"), Some(None));
        assert_eq!(o.lookup(1, "b"), Some(Some(3)));
        assert_eq!(o.lookup(1, "c"), None);
        assert_eq!(o.meta("next"), Some(Some(vec![2])));
        // Stored: a (deleted here), c; held: b.
        let stored = vec![("a".to_string(), 2u64), ("c".to_string(), 4)];
        assert_eq!(
            merged(stored, o.entries_of(1)),
            vec![("b".to_string(), 3), ("c".to_string(), 4)]
        );
        assert_eq!(o.entries_of(2), vec![("x".to_string(), Some(9))]);
        assert_eq!(o.metas_of("ne").len(), 1);
        assert!(o.metas_of("x").is_empty());
    }

    #[test]
    fn forgetting_a_written_copy_keeps_what_was_set_since() {
        let mut o = Overlay::default();
        let mut b = Batch::default();
        b.push(entry(1, "a", 2)).push(entry(1, "b", 3));
        o.apply(b);
        let written = o.clone();
        assert_eq!(written.to_batch().0.len(), 2);
        let mut b = Batch::default();
        b.push(entry(1, "b", 5));
        o.apply(b);
        o.forget(&written);
        assert_eq!(
            o.lookup(1, "a"),
            None,
            "written: read from the database now"
        );
        assert_eq!(
            o.lookup(1, "b"),
            Some(Some(5)),
            "set again since: still held"
        );
        o.forget(&o.clone());
        assert!(o.is_empty());
    }
}
