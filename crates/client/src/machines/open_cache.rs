//! The client capability cache (SPEC M5): read opens by path, each good while its
//! capability (or T10 credentials, or for NOSEC a fixed lifetime) has more than half its
//! lifetime left. Bounded: when full, the entry stored longest ago goes first, so a
//! client that writes and then reads back more files than fit keeps the newest. A kept
//! read-write capability (a put's) also serves the file's removal (`UnlinkHeld`).

use maat_proto::msg::FileStat;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// A cached open (SPEC M5 at the client).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenedEntry {
    /// Path opened.
    pub path: String,
    /// Attributes then.
    pub stat: FileStat,
    /// Capability bytes.
    pub capability: Vec<u8>,
    /// Capability expiry.
    pub expiry: u64,
    /// Capability lifetime when received.
    pub lifetime: u64,
}

/// Read opens by path, with the order they were stored in.
#[derive(Debug, Default)]
pub(crate) struct OpenCache {
    /// Path → (when stored, the open).
    entries: HashMap<String, (u64, OpenedEntry)>,
    /// (when stored, path), oldest first; may name entries since replaced or dropped,
    /// which eviction skips.
    order: VecDeque<(u64, String)>,
    /// File id → the paths of its entries (so that forgetting a file is no scan).
    by_file: HashMap<u64, Vec<String>>,
    /// The next storing's number.
    next: u64,
    /// Most entries held.
    max: usize,
}

impl OpenCache {
    /// An empty cache of at most `max` entries (at least one).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ..Self::default()
        }
    }

    /// The open of `path` whose capability has more than half its lifetime left at
    /// `now`.
    pub(crate) fn fresh(&self, path: &str, now: u64) -> Option<&OpenedEntry> {
        self.entries
            .get(path)
            .map(|(_, o)| o)
            .filter(|o| o.expiry > now && o.expiry - now > o.lifetime / 2)
    }

    /// Stores `entry`, replacing any open of its path; drops the oldest entry when full.
    pub(crate) fn insert(&mut self, entry: OpenedEntry) {
        let stamp = self.next;
        self.next += 1;
        self.order.push_back((stamp, entry.path.clone()));
        self.remove(&entry.path);
        let paths = self.by_file.entry(entry.stat.id).or_default();
        paths.push(entry.path.clone());
        self.entries.insert(entry.path.clone(), (stamp, entry));
        while self.entries.len() > self.max {
            let Some((stamp, path)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&path).is_some_and(|(s, _)| *s == stamp) {
                self.remove(&path);
            }
        }
        // Stale order entries (paths stored again or forgotten) never outnumber live ones
        // by much.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(stamp, path)| entries.get(path).is_some_and(|(s, _)| s == stamp));
        }
    }

    /// Forgets the open of `path`.
    pub(crate) fn remove(&mut self, path: &str) {
        let Some((_, gone)) = self.entries.remove(path) else {
            return;
        };
        if let Some(paths) = self.by_file.get_mut(&gone.stat.id) {
            paths.retain(|p| p != path);
            if paths.is_empty() {
                self.by_file.remove(&gone.stat.id);
            }
        }
    }

    /// Forgets the opens of file `id`, under any path.
    pub(crate) fn remove_file(&mut self, id: u64) {
        for path in self.by_file.remove(&id).unwrap_or_default() {
            self.entries.remove(&path);
        }
    }

    /// Forgets every open.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.by_file.clear();
        self.order.clear();
    }

    /// The `n` entries stored last, oldest first (what the session file keeps).
    pub(crate) fn newest(&self, n: usize) -> Vec<OpenedEntry> {
        let mut live: Vec<&(u64, OpenedEntry)> = self.entries.values().collect();
        live.sort_by_key(|(stamp, _)| *stamp);
        let skip = live.len().saturating_sub(n);
        live.into_iter()
            .skip(skip)
            .map(|(_, o)| o.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;
    use maat_proto::msg::FileStat;

    fn entry(path: &str, expiry: u64) -> OpenedEntry {
        entry_of(path, 4, expiry)
    }

    fn entry_of(path: &str, id: u64, expiry: u64) -> OpenedEntry {
        let mut e = OpenedEntry {
            path: path.into(),
            stat: serde_json::from_str::<FileStat>(
                r#"{"id":4,"is_dir":false,"mode":420,"owner":"a","group":"a","size":1,"mtime":1}"#,
            )
            .unwrap(),
            capability: vec![1],
            expiry,
            lifetime: 100,
        };
        e.stat.id = id;
        e
    }

    #[test]
    fn forgetting_a_file_forgets_each_of_its_paths_and_no_other() {
        let mut c = OpenCache::new(3);
        c.insert(entry_of("/a", 1, 1000));
        c.insert(entry_of("/b", 1, 1000)); // the same file under another path
        c.insert(entry_of("/c", 2, 1000));
        c.insert(entry_of("/c", 1, 1000)); // /c now names file 1 too
        c.insert(entry_of("/d", 3, 1000)); // /a goes (the oldest)
        c.remove_file(2); // /c no longer names file 2: it stays
        assert!(c.fresh("/c", 0).is_some());
        c.remove_file(1);
        for p in ["/a", "/b", "/c"] {
            assert!(c.fresh(p, 0).is_none(), "{p}");
        }
        assert!(c.fresh("/d", 0).is_some());
        c.insert(entry_of("/e", 2, 1000));
        c.remove_file(2);
        assert!(c.fresh("/e", 0).is_none());
        assert!(c.fresh("/d", 0).is_some());
        // The index holds exactly the live entries.
        let indexed: usize = c.by_file.values().map(Vec::len).sum();
        assert_eq!(indexed, c.entries.len());
    }

    #[test]
    fn the_oldest_goes_first_and_a_path_stored_again_counts_as_new() {
        let mut c = OpenCache::new(3);
        for p in ["/a", "/b", "/c"] {
            c.insert(entry(p, 1000));
        }
        c.insert(entry("/a", 1000)); // /a is now the newest
        c.insert(entry("/d", 1000)); // /b goes
        assert!(c.fresh("/b", 0).is_none());
        for p in ["/a", "/c", "/d"] {
            assert!(c.fresh(p, 0).is_some(), "{p}");
        }
        c.insert(entry("/e", 1000)); // /c goes
        assert!(c.fresh("/c", 0).is_none());
        assert!(c.fresh("/a", 0).is_some());
        let kept: Vec<String> = c.newest(2).into_iter().map(|o| o.path).collect();
        assert_eq!(kept, ["/d", "/e"]);
    }

    #[test]
    fn an_open_past_half_its_lifetime_is_not_fresh() {
        let mut c = OpenCache::new(4);
        c.insert(entry("/a", 1000)); // lifetime 100: fresh until 950
        assert!(c.fresh("/a", 949).is_some());
        assert!(c.fresh("/a", 950).is_none());
        c.remove("/a");
        assert!(c.fresh("/a", 0).is_none());
    }

    #[test]
    fn a_sequential_scan_larger_than_the_cache_keeps_its_newest_entries() {
        let mut c = OpenCache::new(100);
        for i in 0..1000 {
            c.insert(entry(&format!("/{i}"), 1000));
            c.remove(&format!("/{}", i / 2)); // stale order entries pile up
        }
        assert!(c.entries.len() <= 100);
        assert!(c.order.len() <= 2 * c.entries.len() + 64 + 1);
        assert!(c.fresh("/999", 0).is_some());
        let indexed: usize = c.by_file.values().map(Vec::len).sum();
        assert_eq!(indexed, c.entries.len());
    }
}
