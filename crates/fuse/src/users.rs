//! A mount for many local users (issue 44): each local uid acts as its own Maat login,
//! found in its own `MAAT_HOME` the way NFS with Kerberos finds a user's credential
//! cache, and owners and groups show as local ids through an identity map.
//!
//! The mounting user acts through the mount's own client. Any other uid, root included,
//! needs a home of its own (`--homes`, default `/run/user/{uid}/maat`) that it owns and
//! that no other account may write, holding a session (`maat login`); otherwise its every
//! request is refused with `EACCES`. Root is the administrator only when root mounted
//! with the administrator's home, or when root's own home holds the administrator's
//! session: nothing maps it there by itself.

use crate::FuseError;
use fuser::Errno;
use maat_client::{write_private_file, Client, ClientError};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

pub use crate::limits::UNMAPPED_ID;

/// Where a local user's `MAAT_HOME` is: a path with `{uid}` in it.
pub const DEFAULT_HOMES: &str = "/run/user/{uid}/maat";

/// Local ids and Maat names, both ways (`--idmap FILE`).
///
/// The file has one mapping per line, `user UID NAME` or `group GID NAME`; blank lines
/// and lines starting with `#` are skipped. An id or a name may appear once per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMap {
    users: BTreeMap<u32, String>,
    groups: BTreeMap<u32, String>,
}

impl IdMap {
    /// Parses the text of an identity map; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, FuseError> {
        let mut map = IdMap::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| FuseError::IdMap(format!("{origin}:{}: {why}", n + 1));
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [kind, id, name] = fields.as_slice() else {
                return Err(bad("expected `user UID NAME` or `group GID NAME`"));
            };
            let id: u32 = id.parse().map_err(|_| bad("the id is not a number"))?;
            let table = match *kind {
                "user" => &mut map.users,
                "group" => &mut map.groups,
                _ => return Err(bad("a line starts with `user` or `group`")),
            };
            if table.contains_key(&id) || table.values().any(|n| n == name) {
                return Err(bad("this id or name is mapped twice"));
            }
            table.insert(id, (*name).to_string());
        }
        Ok(map)
    }

    /// The Maat user a local uid maps to.
    pub fn user_name(&self, uid: u32) -> Option<&str> {
        self.users.get(&uid).map(String::as_str)
    }

    /// The Maat group a local gid maps to.
    pub fn group_name(&self, gid: u32) -> Option<&str> {
        self.groups.get(&gid).map(String::as_str)
    }

    /// The local uid a Maat user shows as ([`UNMAPPED_ID`] when unmapped, as NFSv4 shows
    /// an unknown owner as `nobody`).
    pub fn uid(&self, name: &str) -> u32 {
        Self::id_of(&self.users, name)
    }

    /// The local gid a Maat group shows as ([`UNMAPPED_ID`] when unmapped).
    pub fn gid(&self, name: &str) -> u32 {
        Self::id_of(&self.groups, name)
    }

    fn id_of(table: &BTreeMap<u32, String>, name: &str) -> u32 {
        table
            .iter()
            .find(|(_, n)| *n == name)
            .map_or(UNMAPPED_ID, |(id, _)| *id)
    }
}

/// Makes a client acting for the session in a `MAAT_HOME` directory.
pub type Connect = Box<dyn Fn(&Path) -> Result<Client, ClientError> + Send + Sync>;

/// How a many-user mount finds each local user's client.
pub struct ManyUsers {
    /// The home of each uid: `{uid}` is replaced by the number.
    pub homes: String,
    /// Makes a client from a home.
    pub connect: Connect,
}

impl std::fmt::Debug for ManyUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManyUsers")
            .field("homes", &self.homes)
            .finish_non_exhaustive()
    }
}

impl ManyUsers {
    /// The home of `uid`.
    pub fn home(&self, uid: u32) -> PathBuf {
        PathBuf::from(self.homes.replace("{uid}", &uid.to_string()))
    }
}

/// The session file of a home (as `maat login` writes it).
const SESSION_FILE: &str = "session.json";

/// The name of a mount's private directory of session copies starts so, followed by the
/// mount's process id.
const PRIVATE_PREFIX: &str = "maat-mount-";

/// Removes the session copies of many-user mounts of this account that ended without
/// removing them (killed, or the machine lost power): directories named for a process
/// that no longer runs. Copies of other accounts' mounts, and anything that is not a
/// directory, are left alone.
fn sweep_stale_copies(temp: &Path) {
    let me = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PRIVATE_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours =
            std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The clients of the local users met so far, each kept until its session changes.
pub(crate) struct Clients {
    by_uid: HashMap<u32, (Arc<Client>, SystemTime)>,
    /// The mount's own directory (0700) for the copies of the sessions it acts with.
    private: PathBuf,
}

impl Clients {
    /// No client yet; the copies of sessions go to a new directory only this process's
    /// account may enter, removed by [`Clients::forget_all`].
    pub(crate) fn new() -> Result<Self, FuseError> {
        let nanos = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temp = std::env::temp_dir();
        sweep_stale_copies(&temp);
        let private = temp.join(format!(
            "{PRIVATE_PREFIX}{}-{nanos:08x}",
            std::process::id()
        ));
        // `create_dir` (not `_all`): a directory planted at that name is an error.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .map_err(|e| FuseError::IdMap(format!("{}: {e}", private.display())))?;
        Ok(Self {
            by_uid: HashMap::new(),
            private,
        })
    }

    /// The client acting for `uid`, made from a copy of the session in its home, taken
    /// when first met or when that session changed since (a new `maat login`). Refused
    /// with `EACCES` when the home is missing, not the user's own, writable by another
    /// account, or holds no session that the user owns.
    pub(crate) fn get(&mut self, users: &ManyUsers, uid: u32) -> Result<Arc<Client>, Errno> {
        let home = users.home(uid);
        trusted_home(&home, uid)?;
        let path = home.join(SESSION_FILE);
        if let Some((client, seen)) = self.by_uid.get(&uid) {
            // The same file as copied (a link put in its place has a time of its own).
            let same = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| m.is_file() && m.uid() == uid && m.modified().ok() == Some(*seen));
            if same {
                return Ok(Arc::clone(client));
            }
        }
        self.by_uid.remove(&uid);
        let (bytes, changed) = own_session(&path, uid)?;
        // The client reads and writes only a copy in the mount's private directory:
        // nothing the user can change (a link planted after these checks) is read again.
        let copy = self.private.join(uid.to_string());
        std::fs::create_dir_all(&copy).map_err(|_| Errno::EIO)?;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700))
            .map_err(|_| Errno::EIO)?;
        write_private_file(&copy.join(SESSION_FILE), &bytes, false).map_err(|_| Errno::EIO)?;
        let client = (users.connect)(&copy).map_err(|_| Errno::EACCES)?;
        if client.user_name().is_none() {
            return Err(Errno::EACCES);
        }
        let client = Arc::new(client);
        self.by_uid.insert(uid, (Arc::clone(&client), changed));
        Ok(client)
    }

    /// Every client met (to save their state when the mount ends).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Client>> {
        self.by_uid.values().map(|(c, _)| c)
    }

    /// Removes the copies of the sessions (the mount ends).
    pub(crate) fn forget_all(&mut self) {
        self.by_uid.clear();
        let _ = std::fs::remove_dir_all(&self.private);
    }
}

/// The bytes and modification time of the session file at `path`, when it is a regular
/// file that `uid` owns and only `uid` may read. Opened without following a final
/// symbolic link and checked on the open file itself: a link or a hard link to another
/// user's session names that user as owner and is refused.
fn own_session(path: &Path, uid: u32) -> Result<(Vec<u8>, SystemTime), Errno> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|_| Errno::EACCES)?;
    let meta = file.metadata().map_err(|_| Errno::EACCES)?;
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(Errno::EACCES);
    }
    let changed = meta.modified().map_err(|_| Errno::EACCES)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|_| Errno::EACCES)?;
    Ok((bytes, changed))
}

/// A home another account could have planted or changed acts for nobody: it must be a
/// directory owned by `uid` that neither its group nor others may write.
fn trusted_home(home: &Path, uid: u32) -> Result<(), Errno> {
    let meta = std::fs::symlink_metadata(home).map_err(|_| Errno::EACCES)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(Errno::EACCES);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_identity_map_reads_both_ways_and_refuses_what_is_ambiguous() {
        let map = IdMap::parse(
            "# ids\nuser 1000 alice\n\ngroup 100 staff\nuser 0 admin\n",
            "map",
        )
        .unwrap();
        assert_eq!(map.user_name(1000), Some("alice"));
        assert_eq!(map.user_name(1001), None);
        assert_eq!(map.group_name(100), Some("staff"));
        assert_eq!(map.uid("admin"), 0);
        assert_eq!(map.uid("bob"), UNMAPPED_ID);
        assert_eq!(map.gid("staff"), 100);
        assert_eq!(map.gid("alice"), UNMAPPED_ID);
        for (bad, why) in [
            ("user 1000", "map:1: expected"),
            ("user x alice", "map:1: the id is not a number"),
            ("owner 1 alice", "map:1: a line starts with"),
            (
                "user 1 alice\nuser 1 bob",
                "map:2: this id or name is mapped twice",
            ),
            (
                "user 1 alice\nuser 2 alice",
                "map:2: this id or name is mapped twice",
            ),
            // The same id as a user and as a group is fine.
        ] {
            let e = IdMap::parse(bad, "map")
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(IdMap::parse("user 1 a\ngroup 1 a", "map").is_ok());
    }

    #[test]
    fn session_copies_of_mounts_that_ended_are_swept() {
        let temp = std::env::temp_dir().join(format!("maat-fuse-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&temp).unwrap();
        // A process id above Linux's largest runs nowhere.
        let dead = temp.join(format!("{PRIVATE_PREFIX}4294967295-0000abcd"));
        std::fs::create_dir_all(dead.join("1000")).unwrap();
        std::fs::write(dead.join("1000/session.json"), b"secret").unwrap();
        let alive = temp.join(format!("{PRIVATE_PREFIX}{}-00000001", std::process::id()));
        std::fs::create_dir_all(&alive).unwrap();
        let other = temp.join("maat-mount-notes.txt");
        std::fs::write(&other, b"not ours to touch").unwrap();
        sweep_stale_copies(&temp);
        assert!(!dead.exists(), "the copies of a mount that ended are gone");
        assert!(alive.exists(), "a running mount's stay");
        assert!(other.exists());
        std::fs::remove_dir_all(&temp).unwrap();
    }

    #[test]
    fn a_home_is_trusted_only_when_its_user_owns_it_and_nobody_else_writes_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("maat-fuse-home-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = rustix::process::getuid().as_raw();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(trusted_home(&dir, me), Ok(()));
        assert_eq!(trusted_home(&dir, me.wrapping_add(1)), Err(Errno::EACCES));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert_eq!(trusted_home(&dir, me), Err(Errno::EACCES));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o702)).unwrap();
        assert_eq!(trusted_home(&dir, me), Err(Errno::EACCES));
        assert_eq!(trusted_home(&dir.join("missing"), me), Err(Errno::EACCES));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
