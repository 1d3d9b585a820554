//! SPEC M6: which users and files one capability names (paper 000 §3.5, paper 002 §4.2).
//!
//! Pure decisions over an [`AclSnapshot`], the users and groups at one access-control
//! version. Every set this module proposes is a subset of what the snapshot allows: the
//! invariant "no capability authorizes a (user, file, mode) the MDS does not allow at the
//! moment of issue" rests on [`AclSnapshot::permits`] being the one permission rule, the
//! same one `namespace` checks opens with, and on the issuer holding the access-control
//! gate from snapshot to signature (see `capabilities`).

use crate::ADMIN_UID;
use std::collections::HashMap;

/// Permission bit: read.
pub const READ: u16 = 4;
/// Permission bit: write.
pub const WRITE: u16 = 2;

pub use crate::limits::DIRECTORY_GROUP_CHECKS_MAX;
pub use crate::limits::DIRECTORY_GROUP_FILES_MAX;

/// The strategies in use, any combination (SPEC M6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Strategies {
    /// UNIX permissions: a capability names every user its file's permission classes
    /// (owner, group, other) allow the mode, so a file needs at most one per mode.
    pub unix: bool,
    /// Directory grouping: a capability also names the files of the opened file's
    /// directory that every named user may access in the same mode.
    pub directory: bool,
    /// Temporal batching (paper 000): once `threshold` opens of one file arrive within
    /// the detection window, opens of it wait up to the gather window and share one
    /// capability naming all of them; likewise, once `threshold` opens by one user
    /// arrive, that user's opens of other files share one capability naming them all.
    pub batch: bool,
    /// On-the-fly groups (paper 002): opens of a file that arrive while a capability
    /// for it is being signed share the next one (no added wait).
    pub onthefly: bool,
    /// Recent Popularity prediction (papers 000, 002): a capability also names the
    /// files predicted to be opened next (the chain of successors seen at least `j` of
    /// the last `k` times) that every named user may access in the same mode.
    pub predict: bool,
    /// User- and application-defined groups (paper 000): a capability also names the
    /// other files of the requester's (and the administrator's) file sets that hold the
    /// opened file, where every named user may access them in the same mode.
    pub defined: bool,
}

impl Strategies {
    /// Every strategy name, in the order `names` prints them.
    pub const NAMES: [&'static str; 6] = [
        "unix",
        "directory",
        "batch",
        "onthefly",
        "predict",
        "defined",
    ];

    /// Parses `none` or a comma-separated list of [`Strategies::NAMES`].
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut s = Strategies::default();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name.to_ascii_lowercase().as_str() {
                "none" => {}
                "unix" => s.unix = true,
                "directory" | "dir" => s.directory = true,
                "batch" | "temporal" => s.batch = true,
                "onthefly" | "on-the-fly" => s.onthefly = true,
                "predict" | "prediction" => s.predict = true,
                "defined" | "filesets" => s.defined = true,
                "all" => {
                    s = Strategies {
                        unix: true,
                        directory: true,
                        batch: true,
                        onthefly: true,
                        predict: true,
                        defined: true,
                    }
                }
                other => {
                    return Err(format!(
                        "unknown grouping strategy {other:?}: expected none, all or a list of {}",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(s)
    }

    /// The canonical text (`none` when empty).
    pub fn names(self) -> String {
        let on = [
            self.unix,
            self.directory,
            self.batch,
            self.onthefly,
            self.predict,
            self.defined,
        ];
        let names: Vec<&str> = Self::NAMES
            .iter()
            .zip(on)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }

    /// Whether requests for one file are gathered into one capability.
    pub fn gathers(self) -> bool {
        self.batch || self.onthefly
    }
}

/// Grouping settings (the MDS config's `grouping` and `batch_*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupingConfig {
    /// Strategies in use.
    pub strategies: Strategies,
    /// Opens of one file within the detection window that start batching (paper: 4).
    pub batch_threshold: u32,
    /// The detection window (paper: 20 ms).
    pub batch_detect_millis: u64,
    /// How long a batch gathers opens before its capability is signed.
    pub batch_gather_millis: u64,
    /// How long a file stays batched after the last detection (paper: 1 s).
    pub batch_hot_millis: u64,
    /// Recent Popularity: a successor is predicted when it is at least `predict_j` of
    /// the last `predict_k` seen (paper: 4 and 6).
    pub predict_j: u32,
    /// See `predict_j`.
    pub predict_k: u32,
}

impl Default for GroupingConfig {
    /// UNIX permissions and on-the-fly groups: neither adds latency to any open.
    fn default() -> Self {
        GroupingConfig {
            strategies: Strategies {
                unix: true,
                onthefly: true,
                ..Strategies::default()
            },
            batch_threshold: 4,
            batch_detect_millis: 20,
            batch_gather_millis: 5,
            batch_hot_millis: 1000,
            predict_j: 4,
            predict_k: 6,
        }
    }
}

/// The permission facts of one inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm {
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// Permission bits.
    pub mode: u16,
}

impl From<&crate::Inode> for Perm {
    fn from(i: &crate::Inode) -> Self {
        Perm {
            uid: i.uid,
            gid: i.gid,
            mode: i.mode,
        }
    }
}

/// The permission rule (POSIX classes; the administrator passes every check). `gids`
/// are the user's primary and supplementary groups.
pub fn permits(uid: u64, gids: &[u64], perm: Perm, want: u16) -> bool {
    if uid == ADMIN_UID {
        return true;
    }
    let bits = if perm.uid == uid {
        perm.mode >> 6
    } else if gids.contains(&perm.gid) {
        perm.mode >> 3
    } else {
        perm.mode
    };
    bits & want == want
}

/// Users and their groups at one access-control version.
#[derive(Debug, Clone)]
pub struct AclSnapshot {
    version: u64,
    /// uid → primary and supplementary groups.
    users: HashMap<u64, Vec<u64>>,
    /// Every non-administrator user, ascending.
    ordinary: Vec<u64>,
}

impl AclSnapshot {
    /// A snapshot of `users` (uid, primary group, supplementary groups).
    pub fn new(version: u64, users: impl IntoIterator<Item = (u64, u64, Vec<u64>)>) -> Self {
        let users: HashMap<u64, Vec<u64>> = users
            .into_iter()
            .map(|(uid, gid, mut groups)| {
                groups.insert(0, gid);
                (uid, groups)
            })
            .collect();
        let mut ordinary: Vec<u64> = users.keys().copied().filter(|u| *u != ADMIN_UID).collect();
        ordinary.sort_unstable();
        AclSnapshot {
            version,
            users,
            ordinary,
        }
    }

    /// The access-control version it was taken at.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether `uid` exists and may access a file with `perm` for `want`.
    pub fn permits(&self, uid: u64, perm: Perm, want: u16) -> bool {
        self.users
            .get(&uid)
            .is_some_and(|gids| permits(uid, gids, perm, want))
    }

    /// SPEC M6 UNIX strategy: the ordinary users allowed `want` on a file with `perm`,
    /// as the file's permission classes (owner, group, other), each ascending; classes
    /// that are empty or not allowed are left out. The administrator is never in a set
    /// (its own opens get capabilities of their own).
    pub fn unix_classes(&self, perm: Perm, want: u16) -> Vec<Vec<u64>> {
        let allows = |bits: u16| bits & want == want;
        let mut owner = Vec::new();
        let mut group = Vec::new();
        let mut other = Vec::new();
        for &uid in &self.ordinary {
            let gids = self.users.get(&uid).map_or(&[][..], Vec::as_slice);
            if uid == perm.uid {
                if allows(perm.mode >> 6) {
                    owner.push(uid);
                }
            } else if gids.contains(&perm.gid) {
                if allows(perm.mode >> 3) {
                    group.push(uid);
                }
            } else if allows(perm.mode) {
                other.push(uid);
            }
        }
        [owner, group, other]
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// SPEC M6 directory strategy: of `candidates` (the opened file first), those that
    /// every user in `users` may access for `want`, at most [`DIRECTORY_GROUP_FILES_MAX`],
    /// ascending. Files with the opened file's permissions qualify at once; others cost a
    /// check per user, within [`DIRECTORY_GROUP_CHECKS_MAX`].
    pub fn directory_files(
        &self,
        opened: (u64, Perm),
        candidates: &[(u64, Perm)],
        users: &[u64],
        want: u16,
    ) -> Vec<u64> {
        let mut files = vec![opened.0];
        let mut budget = DIRECTORY_GROUP_CHECKS_MAX;
        let mut verdicts: HashMap<Perm, bool> = HashMap::new();
        verdicts.insert(opened.1, true);
        for &(id, perm) in candidates {
            if files.len() >= DIRECTORY_GROUP_FILES_MAX {
                break;
            }
            if id == opened.0 {
                continue;
            }
            let ok = match verdicts.get(&perm) {
                Some(v) => *v,
                None if budget >= users.len() => {
                    budget -= users.len();
                    let v = users.iter().all(|u| self.permits(*u, perm, want));
                    verdicts.insert(perm, v);
                    v
                }
                None => false,
            };
            if ok {
                files.push(id);
            }
        }
        files.sort_unstable();
        files.dedup();
        files
    }
}

/// Which users a capability names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserSel {
    /// One user, named explicitly.
    One(u64),
    /// A Merkle set, as subtrees (each ascending, non-empty).
    Set(Vec<Vec<u64>>),
}

impl UserSel {
    /// Every user named.
    pub fn members(&self) -> Vec<u64> {
        match self {
            UserSel::One(u) => vec![*u],
            UserSel::Set(subtrees) => subtrees.iter().flatten().copied().collect(),
        }
    }

    /// The explicit form for one user, a set otherwise.
    pub fn from_subtrees(mut subtrees: Vec<Vec<u64>>) -> Option<Self> {
        subtrees.retain(|s| !s.is_empty());
        match subtrees.as_slice() {
            [] => None,
            [one] if one.len() == 1 => one.first().map(|u| UserSel::One(*u)),
            _ => Some(UserSel::Set(subtrees)),
        }
    }
}

/// Which files a capability names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSel {
    /// One file, named explicitly.
    One(u64),
    /// A Merkle set (ascending).
    Set(Vec<u64>),
}

impl FileSel {
    /// The explicit form for one file, a set otherwise.
    pub fn from_files(files: Vec<u64>) -> Option<Self> {
        match files.as_slice() {
            [] => None,
            [one] => Some(FileSel::One(*one)),
            _ => Some(FileSel::Set(files)),
        }
    }

    /// Every file named.
    pub fn members(&self) -> Vec<u64> {
        match self {
            FileSel::One(f) => vec![*f],
            FileSel::Set(files) => files.clone(),
        }
    }
}

/// What one capability will name, and which strategies shaped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// U.
    pub users: UserSel,
    /// I.
    pub files: FileSel,
    /// Which strategies made it wider than one user and one file.
    pub by: Strategies,
}

impl Grant {
    /// (user, file) pairs it authorizes.
    pub fn authorizations(&self) -> u64 {
        let users = match &self.users {
            UserSel::One(_) => 1,
            UserSel::Set(s) => s.iter().map(Vec::len).sum::<usize>() as u64,
        };
        let files = match &self.files {
            FileSel::One(_) => 1,
            FileSel::Set(f) => f.len() as u64,
        };
        users * files
    }
}

/// The users part of a grant for `requester` opening a file with `perm` for `want`: the
/// file's allowed UNIX classes when that strategy is on (and the requester is in them),
/// otherwise the requester alone.
pub fn users_for(
    acl: &AclSnapshot,
    strategies: Strategies,
    requester: u64,
    perm: Perm,
    want: u16,
) -> (UserSel, bool) {
    if strategies.unix && requester != ADMIN_UID {
        let classes = acl.unix_classes(perm, want);
        if classes.iter().any(|c| c.binary_search(&requester).is_ok()) {
            if let Some(sel) = UserSel::from_subtrees(classes) {
                let grouped = matches!(sel, UserSel::Set(_));
                return (sel, grouped);
            }
        }
    }
    (UserSel::One(requester), false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn acl() -> AclSnapshot {
        // 0 admin; 10, 11 in group 100; 12 in group 200; 13 in both.
        AclSnapshot::new(
            1,
            [
                (ADMIN_UID, 1, vec![]),
                (10, 100, vec![]),
                (11, 100, vec![]),
                (12, 200, vec![]),
                (13, 200, vec![100]),
            ],
        )
    }

    #[test]
    fn unix_classes_are_exactly_the_allowed_ordinary_users() {
        let acl = acl();
        for mode in [
            0o000, 0o600, 0o640, 0o604, 0o060, 0o644, 0o666, 0o066, 0o406,
        ] {
            for want in [READ, WRITE, READ | WRITE] {
                let perm = Perm {
                    uid: 10,
                    gid: 100,
                    mode,
                };
                let mut named: Vec<u64> = acl.unix_classes(perm, want).concat();
                named.sort_unstable();
                let allowed: Vec<u64> = [10, 11, 12, 13]
                    .into_iter()
                    .filter(|u| acl.permits(*u, perm, want))
                    .collect();
                assert_eq!(named, allowed, "mode {mode:o} want {want}");
            }
        }
    }

    #[test]
    fn directory_files_keep_only_files_every_user_may_access() {
        let acl = acl();
        let open = Perm {
            uid: 10,
            gid: 100,
            mode: 0o640,
        };
        let private = Perm {
            uid: 10,
            gid: 100,
            mode: 0o600,
        };
        let other_group = Perm {
            uid: 12,
            gid: 200,
            mode: 0o640,
        };
        let files = acl.directory_files(
            (5, open),
            &[(5, open), (6, open), (7, private), (8, other_group)],
            &[10, 11, 13],
            READ,
        );
        assert_eq!(files, vec![5, 6]);
        // The owner alone may also read the private file.
        let files = acl.directory_files((5, open), &[(7, private)], &[10], READ);
        assert_eq!(files, vec![5, 7]);
    }

    #[test]
    fn strategies_parse_and_print() {
        assert_eq!(Strategies::parse("none").unwrap(), Strategies::default());
        let s = Strategies::parse("unix, onthefly").unwrap();
        assert_eq!(s.names(), "unix,onthefly");
        assert_eq!(
            Strategies::parse("all").unwrap().names(),
            "unix,directory,batch,onthefly,predict,defined"
        );
        assert!(Strategies::parse("prediction").unwrap().predict);
        assert!(Strategies::parse("popular").is_err());
    }
}
