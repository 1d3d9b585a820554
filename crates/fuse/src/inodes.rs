//! The inode table: FUSE inode numbers for Maat paths.
//!
//! Maat names files by path (every request carries one, and the MDS checks each directory
//! on the way), so the table maps inode → paths and path → inode. Numbers are handed out
//! on first sight and kept for the life of the mount; a rename moves the paths of the
//! inode and of everything below it. An inode with several names (hard links, issue 44)
//! has one number for all of them, found by its Maat file id, so that the kernel sees
//! one inode (a chmod through one name shows through the others).

use std::collections::HashMap;

/// FUSE's root inode: the mounted Maat directory.
pub const ROOT: u64 = 1;

/// Inode numbers ↔ Maat paths.
#[derive(Debug)]
pub struct Inodes {
    /// The names each inode is known by here (the first is the one requests use).
    names: HashMap<u64, Vec<String>>,
    by_path: HashMap<String, u64>,
    /// Each numbered inode's Maat file id, and back.
    files: HashMap<u64, u64>,
    by_file: HashMap<u64, u64>,
    next: u64,
}

impl Inodes {
    /// A table whose root inode is the Maat directory `root`.
    pub fn new(root: &str) -> Self {
        let root = normalize(root);
        let mut t = Self {
            names: HashMap::new(),
            by_path: HashMap::new(),
            files: HashMap::new(),
            by_file: HashMap::new(),
            next: ROOT + 1,
        };
        t.names.insert(ROOT, vec![root.clone()]);
        t.by_path.insert(root, ROOT);
        t
    }

    /// A path of `ino`, if known.
    pub fn path(&self, ino: u64) -> Option<&str> {
        self.names
            .get(&ino)
            .and_then(|n| n.first())
            .map(String::as_str)
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

    /// The inode of `path`, which names Maat file `file`: the number `path` had if it
    /// still names that file, else the number of the file's other name (a hard link),
    /// else a new one.
    pub fn ino(&mut self, path: &str, file: u64) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            match self.files.get(&ino) {
                Some(&known) if known == file => return ino,
                // The root, or a number from before ids were known here.
                None => {
                    self.files.insert(ino, file);
                    self.by_file.insert(file, ino);
                    return ino;
                }
                // The name now names another file (removed and made again elsewhere).
                Some(_) => self.forget_name(path),
            }
        }
        let ino = match self.by_file.get(&file) {
            Some(&ino) => ino,
            None => {
                let ino = self.next;
                self.next += 1;
                self.files.insert(ino, file);
                self.by_file.insert(file, ino);
                ino
            }
        };
        self.names.entry(ino).or_default().push(path.to_string());
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// Forgets the one name `path`; its inode goes with its last name (never the root).
    fn forget_name(&mut self, path: &str) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        if ino == ROOT {
            self.by_path.insert(path.to_string(), ino);
            return;
        }
        let left = self.names.get_mut(&ino).map(|names| {
            names.retain(|n| n != path);
            names.len()
        });
        if left.unwrap_or(0) == 0 {
            self.names.remove(&ino);
            if let Some(file) = self.files.remove(&ino) {
                self.by_file.remove(&file);
            }
        }
    }

    /// The known paths at or below `path`.
    fn at_or_below(&self, path: &str) -> Vec<String> {
        let below = format!("{}/", path.trim_end_matches('/'));
        self.by_path
            .keys()
            .filter(|p| p.as_str() == path || p.starts_with(&below))
            .cloned()
            .collect()
    }

    /// Forgets `path` (and everything below it): it was removed.
    pub fn remove(&mut self, path: &str) {
        for p in self.at_or_below(path) {
            self.forget_name(&p);
        }
    }

    /// `from` (and everything below it) is now `to`; whatever `to` was is forgotten.
    pub fn rename(&mut self, from: &str, to: &str) {
        self.remove(to);
        for old in self.at_or_below(from) {
            let Some(ino) = self.by_path.remove(&old) else {
                continue;
            };
            let new = format!("{to}{}", old.get(from.len()..).unwrap_or_default());
            if let Some(names) = self.names.get_mut(&ino) {
                for n in names.iter_mut().filter(|n| **n == old) {
                    n.clone_from(&new);
                }
            }
            self.by_path.insert(new, ino);
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
        let a = t.ino(&t.child_path(ROOT, "a").unwrap_or_default(), 10);
        let ab = t.ino("/data/a/b", 11);
        let other = t.ino("/data/ab", 12);
        assert_eq!(t.ino("/data/a", 10), a);
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

    #[test]
    fn the_names_of_one_file_share_a_number_until_the_last_goes() {
        let mut t = Inodes::new("/");
        let a = t.ino("/a", 7);
        let dir = t.ino("/d", 8);
        assert_eq!(t.ino("/d/b", 7), a, "a second name of file 7");
        assert_ne!(dir, a);
        t.remove("/a");
        assert_eq!(t.path(a), Some("/d/b"), "the other name serves");
        t.rename("/d", "/e");
        assert_eq!(t.path(a), Some("/e/b"));
        assert_eq!(t.ino("/e/b", 7), a);
        // The name made again for another file is another inode.
        let b = t.ino("/e/b", 9);
        assert_ne!(b, a);
        assert_eq!(t.path(a), None, "file 7 has no name left here");
        assert_eq!(
            t.ino("/x", 7),
            t.next - 1,
            "and a new number when seen again"
        );
    }
}
