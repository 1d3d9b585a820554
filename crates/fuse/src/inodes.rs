//! The inode table: FUSE inode numbers for Maat paths.
//!
//! Maat names files by path (every request carries one, and the MDS checks each directory
//! on the way), so the table maps inode → path and path → inode. Numbers are handed out
//! on first sight and kept for the life of the mount; a rename moves the paths of the
//! inode and of everything below it.

use std::collections::HashMap;

/// FUSE's root inode: the mounted Maat directory.
pub const ROOT: u64 = 1;

/// Inode numbers ↔ Maat paths.
#[derive(Debug)]
pub struct Inodes {
    paths: HashMap<u64, String>,
    by_path: HashMap<String, u64>,
    next: u64,
}

impl Inodes {
    /// A table whose root inode is the Maat directory `root`.
    pub fn new(root: &str) -> Self {
        let root = normalize(root);
        let mut t = Self {
            paths: HashMap::new(),
            by_path: HashMap::new(),
            next: ROOT + 1,
        };
        t.paths.insert(ROOT, root.clone());
        t.by_path.insert(root, ROOT);
        t
    }

    /// The path of `ino`, if known.
    pub fn path(&self, ino: u64) -> Option<&str> {
        self.paths.get(&ino).map(String::as_str)
    }

    /// The path of `name` in the directory `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> Option<String> {
        let dir = self.path(parent)?;
        Some(join(dir, name))
    }

    /// The inode of `path`, if it has one yet.
    pub fn find(&self, path: &str) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// The inode of `path`, numbering it on first sight.
    pub fn ino(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.paths.insert(ino, path.to_string());
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// Forgets `path` (and everything below it): it was removed.
    pub fn remove(&mut self, path: &str) {
        let below = format!("{}/", path.trim_end_matches('/'));
        let gone: Vec<String> = self
            .by_path
            .keys()
            .filter(|p| p.as_str() == path || p.starts_with(&below))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.by_path.remove(&p) {
                if ino != ROOT {
                    self.paths.remove(&ino);
                } else {
                    self.by_path.insert(p, ino);
                }
            }
        }
    }

    /// `from` (and everything below it) is now `to`; whatever `to` was is forgotten.
    pub fn rename(&mut self, from: &str, to: &str) {
        self.remove(to);
        let below = format!("{}/", from.trim_end_matches('/'));
        let moved: Vec<(String, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&below))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, ino) in moved {
            let new = format!("{to}{}", old.get(from.len()..).unwrap_or_default());
            self.by_path.remove(&old);
            self.by_path.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }
}

/// `/a/b/` → `/a/b`; `` → `/`.
fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_string()
    } else if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_get_stable_numbers_and_renames_move_subtrees() {
        let mut t = Inodes::new("/data/");
        assert_eq!(t.path(ROOT), Some("/data"));
        let a = t.ino(&t.child_path(ROOT, "a").unwrap_or_default());
        let ab = t.ino("/data/a/b");
        let other = t.ino("/data/ab");
        assert_eq!(t.ino("/data/a"), a);
        t.rename("/data/a", "/data/z");
        assert_eq!(t.path(a), Some("/data/z"));
        assert_eq!(t.path(ab), Some("/data/z/b"));
        assert_eq!(
            t.path(other),
            Some("/data/ab"),
            "a sibling with a common prefix stays"
        );
        t.remove("/data/z");
        assert_eq!(t.path(a), None);
        assert_eq!(t.path(ab), None);
        assert_eq!(t.path(other), Some("/data/ab"));
        assert_eq!(
            Inodes::new("/").child_path(ROOT, "x").as_deref(),
            Some("/x")
        );
    }
}
