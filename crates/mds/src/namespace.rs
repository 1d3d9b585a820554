//! SPEC T9: namespace operations with POSIX owner/group/other permission checks.

use crate::{Batch, Inode, MdsError, MetaStore, Op, Principal, Result, ROOT_INODE};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::Mode;
use maat_proto::limits::PATH_BYTES_MAX;
use maat_proto::msg::{
    Access, ErrorCode, FileStat, MdsResponse, NAME_BYTES_MAX, STRIPE_UNIT_BYTES,
};
use maat_proto::protection::Protection;
use maat_proto::UnixMillis;

pub use maat_proto::limits::FILE_BYTES_MAX;

pub(crate) const READ: u16 = 4;
pub(crate) const WRITE: u16 = 2;
pub(crate) const EXEC: u16 = 1;

/// Checks a single name (user, group or path component).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > NAME_BYTES_MAX
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\0')
    {
        return Err(MdsError::refused(
            ErrorCode::InvalidArgument,
            format!("invalid name {name:?}"),
        ));
    }
    Ok(())
}

/// Checks a name an entry, user or group is created with: [`check_name`], and no control
/// character (C0, DEL, C1: a newline or an escape sequence in a name fakes entries and
/// drives terminals, issue 40). Names that exist already stay reachable: lookups check
/// only [`check_name`], so such an entry can still be renamed or removed.
pub(crate) fn check_new_name(name: &str) -> Result<()> {
    check_name(name)?;
    if name.chars().any(char::is_control) {
        return Err(MdsError::refused(
            ErrorCode::InvalidArgument,
            format!(
                "invalid name {name:?}: names may not hold control characters (newlines, \
                 escapes)"
            ),
        ));
    }
    Ok(())
}

/// Splits an absolute path into components.
fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') || path.len() > PATH_BYTES_MAX {
        return Err(MdsError::refused(
            ErrorCode::InvalidArgument,
            format!("path must be absolute and at most {PATH_BYTES_MAX} bytes: {path:?}"),
        ));
    }
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for p in &parts {
        check_name(p)?;
    }
    Ok(parts)
}

/// The mode bits an inode keeps: permissions, and setuid, setgid and sticky (stored and
/// shown; only sticky is acted on, by [`sticky_allows`]).
pub(crate) const MODE_BITS: u16 = 0o7777;

/// The sticky bit of a directory.
const STICKY: u16 = 0o1000;

/// Issue 40, item 7: in a sticky directory (`/tmp`'s 1777) only the entry's owner, the
/// directory's owner or the administrator may remove or rename the entry, whatever the
/// directory's write bits allow.
fn sticky_allows(who: &Principal, dir: &Inode, entry: &Inode) -> bool {
    dir.mode & STICKY == 0 || who.is_admin() || who.uid == entry.uid || who.uid == dir.uid
}

/// [`sticky_allows`] as a refusal.
fn require_sticky(who: &Principal, dir: &Inode, entry: &Inode, path: &str) -> Result<()> {
    if sticky_allows(who, dir, entry) {
        return Ok(());
    }
    Err(MdsError::refused(
        ErrorCode::PermissionDenied,
        format!(
            "{path}: the directory is sticky: only the file's owner, the directory's owner \
             or the administrator may remove or rename it"
        ),
    ))
}

pub(crate) fn allowed(who: &Principal, inode: &Inode, want: u16) -> bool {
    // The one permission rule, shared with capability grouping (SPEC M6's invariant).
    crate::grouping::permits(who.uid, &who.gids, inode.into(), want)
}

/// A new, empty entry `id` of `who` in `parent` (in `partition`, else the parent's).
pub(crate) fn fresh_inode(
    id: u64,
    who: &Principal,
    parent: &Inode,
    is_dir: bool,
    mode: u16,
    partition: Option<u64>,
    now: UnixMillis,
) -> Inode {
    // New entries take the caller's primary group (BSD semantics would take the
    // parent's; we follow Linux without setgid).
    let gid = who.gids.first().copied().unwrap_or(parent.gid);
    Inode {
        id,
        is_dir,
        // The creator's umask clears permission bits only (issue 40: private by default).
        mode: mode & MODE_BITS & !(who.umask & 0o777),
        uid: who.uid,
        gid,
        size: 0,
        mtime: now.0,
        partition: partition.unwrap_or(parent.partition),
        crypt: None,
        key_grants: Vec::new(),
        special: None,
        // A directory: its own `.` and its name; each subdirectory's `..` adds one.
        nlink: if is_dir { 2 } else { 1 },
        atime: now.0,
        ctime: now.0,
    }
}

/// The method the files of a partition with method `partition` travel under: SPEC H3,
/// an encrypted file's blocks authenticate themselves, so ALLDATA's MAC over every data
/// byte buys nothing more; CMDRSP still covers every command and response header.
/// Stronger (CONFIDENTIAL) and weaker methods stay as chosen.
pub(crate) fn method_of(partition: Protection, encrypted: bool) -> Protection {
    match (encrypted, partition) {
        (true, Protection::AllData) => Protection::CmdRsp,
        (_, method) => method,
    }
}

pub(crate) fn require(who: &Principal, inode: &Inode, want: u16, what: &str) -> Result<()> {
    if allowed(who, inode, want) {
        Ok(())
    } else {
        Err(MdsError::refused(
            ErrorCode::PermissionDenied,
            what.to_string(),
        ))
    }
}

/// Refused unless `who` may write `inode`.
pub(crate) fn require_write(who: &Principal, inode: &Inode, what: &str) -> Result<()> {
    require(who, inode, WRITE, what)
}

fn no_such(path: &str) -> MdsError {
    MdsError::refused(ErrorCode::NoSuchFile, path.to_string())
}

/// What a removal removes, and what it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removing {
    /// An empty directory (`Rmdir`): `Ok`.
    Directory,
    /// A file (`Unlink`): `Opened`, with what removes its objects.
    File,
    /// The file with this id, whose write capability (`capability`, an id) the remover
    /// holds (`UnlinkHeld`): `Stat`, or `Opened` as for `File` when that capability
    /// would not serve.
    HeldFile { file: u64, capability: u64 },
}

impl<S: MetaStore> crate::Mds<S> {
    fn load(&self, id: u64, path: &str) -> Result<Inode> {
        self.store.inode(id)?.ok_or_else(|| no_such(path))
    }

    /// Walks `parts` from the root, requiring search (x) permission on every directory.
    /// (The store reads the whole path at once, [`MetaStore::walk`]; the checks are
    /// made here, in order, as if it were read name by name.)
    fn walk(&self, who: &Principal, parts: &[&str], path: &str) -> Result<Inode> {
        let mut found = self.store.walk(parts)?.into_iter();
        let mut current = found.next().ok_or_else(|| no_such(path))?;
        for _ in parts {
            if !current.is_dir {
                return Err(MdsError::refused(
                    ErrorCode::NotADirectory,
                    path.to_string(),
                ));
            }
            require(who, &current, EXEC, path)?;
            current = found.next().ok_or_else(|| no_such(path))?;
        }
        Ok(current)
    }

    /// Resolves a path to its inode.
    pub(crate) fn resolve(&self, who: &Principal, path: &str) -> Result<Inode> {
        let parts = components(path)?;
        self.walk(who, &parts, path)
    }

    /// Resolves the parent directory of `path` and the last name; requires the parent to
    /// be a directory the caller may search.
    pub(crate) fn parent_of<'p>(&self, who: &Principal, path: &'p str) -> Result<(Inode, &'p str)> {
        let parts = components(path)?;
        let (last, init) = parts.split_last().ok_or_else(|| {
            MdsError::refused(ErrorCode::InvalidArgument, "the root has no parent")
        })?;
        let parent = self.walk(who, init, path)?;
        if !parent.is_dir {
            return Err(MdsError::refused(
                ErrorCode::NotADirectory,
                path.to_string(),
            ));
        }
        require(who, &parent, EXEC, path)?;
        Ok((parent, last))
    }

    /// What `who` is shown of `inode` (its own name known: not read again).
    pub(crate) fn stat_of(&self, who: &Principal, inode: &Inode) -> Result<FileStat> {
        self.stat_with(inode, &mut StatNames::of(who))
    }

    /// [`Mds::stat_of`] with the owner, group and partition read once per id into
    /// `names` (a directory's many entries share few: one read each, not one per entry).
    fn stat_with(&self, inode: &Inode, names: &mut StatNames) -> Result<FileStat> {
        // A removed user's files show its number (a new user may take its name).
        let owner = name_of(&mut names.users, inode.uid, || {
            Ok(self.store.user(inode.uid)?.map(|u| u.name))
        })?;
        let group = name_of(&mut names.groups, inode.gid, || {
            Ok(self.store.group(inode.gid)?.map(|g| g.name))
        })?;
        let partition = match names.partitions.get(&inode.partition) {
            Some(p) => p.clone(),
            None => {
                let p = self.partition(inode.partition)?;
                names.partitions.insert(inode.partition, p.clone());
                p
            }
        };
        let protection = method_of(partition.protection, inode.crypt.is_some());
        // A special entry shows its type bits; a link, its target's length (issue 44).
        let (mode, size) = match &inode.special {
            Some(crate::store::Special::Symlink(target)) => {
                (maat_proto::msg::S_IFLNK | 0o777, target.len() as u64)
            }
            Some(special) => (special.type_bits() | inode.mode, 0),
            None => (inode.mode, inode.size),
        };
        Ok(FileStat {
            id: inode.id,
            is_dir: inode.is_dir,
            mode,
            owner,
            group,
            size,
            mtime: inode.mtime,
            partition: partition.name,
            protection,
            encrypted: inode.crypt.is_some(),
            crypt: None,
            key_ranges: None,
        })
    }

    pub(crate) fn readdir(&self, who: &Principal, path: &str) -> Result<MdsResponse> {
        let dir = self.resolve(who, path)?;
        if !dir.is_dir {
            return Ok(MdsResponse::Entries(vec![(
                path.rsplit('/').next().unwrap_or(path).to_string(),
                self.stat_of(who, &dir)?,
            )]));
        }
        require(who, &dir, READ, path)?;
        let mut names = StatNames::of(who);
        let mut out = Vec::new();
        for (name, inode) in self.store.entries_inodes(dir.id)? {
            out.push((name, self.stat_with(&inode, &mut names)?));
        }
        Ok(MdsResponse::Entries(out))
    }

    pub(crate) fn new_inode(
        &self,
        who: &Principal,
        parent: &Inode,
        is_dir: bool,
        mode: u16,
        partition: Option<u64>,
        now: UnixMillis,
    ) -> Result<Inode> {
        let id = self.next_id("next_inode")?;
        Ok(fresh_inode(id, who, parent, is_dir, mode, partition, now))
    }

    pub(crate) fn mkdir(
        &self,
        who: &Principal,
        path: &str,
        mode: u16,
        parents: bool,
        partition: Option<&str>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let parts = components(path)?;
        let partition = match partition {
            Some(name) => Some(self.partition_by_name(name)?.id),
            None => None,
        };
        let _guard = self.writing()?;
        let mut batch = Batch::default();
        let mut current = self.load(ROOT_INODE, path)?;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if !current.is_dir {
                return Err(MdsError::refused(
                    ErrorCode::NotADirectory,
                    path.to_string(),
                ));
            }
            require(who, &current, EXEC, path)?;
            match self.store.lookup(current.id, part)? {
                Some(child) => {
                    if last && !parents {
                        return Err(MdsError::refused(
                            ErrorCode::AlreadyExists,
                            path.to_string(),
                        ));
                    }
                    current = self.load(child, path)?;
                    if last && !current.is_dir {
                        return Err(MdsError::refused(
                            ErrorCode::AlreadyExists,
                            path.to_string(),
                        ));
                    }
                }
                None if last || parents => {
                    check_new_name(part)?;
                    require(who, &current, WRITE | EXEC, path)?;
                    let dir = self.new_inode(who, &current, true, mode, partition, now)?;
                    batch.push(Op::PutEntry {
                        parent: current.id,
                        name: part.to_string(),
                        child: dir.id,
                    });
                    relink_dir(&mut batch, &current, 1, now);
                    batch.push(Op::PutInode(dir.clone()));
                    current = dir;
                }
                None => return Err(no_such(path)),
            }
        }
        if !batch.0.is_empty() {
            self.store.commit_deferred(batch)?;
        }
        Ok(MdsResponse::Ok)
    }

    /// Unlink (files) or rmdir (empty directories). Unlinking answers with a write
    /// capability so the client can remove the file's objects, unless the client holds
    /// one (`UnlinkHeld`, see [`Removing`]).
    pub(crate) fn remove(
        &self,
        who: &Principal,
        path: &str,
        what: Removing,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let directory = what == Removing::Directory;
        let _guard = self.writing()?;
        let (parent, name) = self.parent_of(who, path)?;
        let id = self
            .store
            .lookup(parent.id, name)?
            .ok_or_else(|| no_such(path))?;
        if let Removing::HeldFile { file: held, .. } = what {
            if held != id {
                return Err(MdsError::refused(
                    ErrorCode::WrongFile,
                    format!("{path} names another file than the one whose capability is held"),
                ));
            }
        }
        let inode = self.load(id, path)?;
        require(who, &parent, WRITE | EXEC, path)?;
        require_sticky(who, &parent, &inode, path)?;
        if directory {
            if !inode.is_dir {
                return Err(MdsError::refused(
                    ErrorCode::NotADirectory,
                    path.to_string(),
                ));
            }
            if !self.store.entries(inode.id)?.is_empty() {
                return Err(MdsError::refused(ErrorCode::NotEmpty, path.to_string()));
            }
        } else if inode.is_dir {
            return Err(MdsError::refused(ErrorCode::IsADirectory, path.to_string()));
        }
        let mut batch = Batch::default();
        batch.push(Op::DeleteEntry {
            parent: parent.id,
            name: name.to_string(),
        });
        relink_dir(&mut batch, &parent, if directory { -1 } else { 0 }, now);
        if directory {
            batch.push(Op::DeleteInode(inode.id));
            self.store.commit_deferred(batch)?;
        } else if !drop_name(&mut batch, &inode, now) {
            // One name of several (hard links, issue 44): nothing for the client to
            // delete.
            self.store.commit_deferred(batch)?;
            return Ok(MdsResponse::Ok);
        } else {
            // Capabilities for the removed file must not be renewed (SPEC M7, M8): the
            // access-control version moves, so renewal re-checks and forgets them.
            self.acl_change(|stamp| {
                batch.push(stamp);
                Ok(self.store.commit_deferred(batch)?)
            })?;
        }
        let stat = self.stat_of(who, &inode)?;
        match what {
            Removing::Directory => return Ok(MdsResponse::Ok),
            // The remover holds a write capability for the file: nothing to give, unless
            // the OSDs would refuse it (revoked, or the partition now takes T10
            // credentials), when the objects would stay for good.
            Removing::HeldFile { capability, .. } => {
                let serves = session.is_some()
                    && self
                        .earlier_capability_unserved(
                            who.uid,
                            &self.partition(inode.partition)?,
                            now,
                        )?
                        .is_none()
                    && !self.capability_revoked(capability, now)?;
                if serves {
                    return Ok(MdsResponse::Stat(stat));
                }
            }
            Removing::File => {}
        }
        self.removal_answer(who, &inode, stat, session, now, rng)
    }

    /// The answer to a removal that took a file's last name: what its remover deletes
    /// the objects with. In a partition with T10 credentials, write credentials for the
    /// OSDs that hold them (SPEC T2: no signature), else a write capability for this
    /// user and file alone (the one it was issued for this file, when cached). The
    /// removal was the permission check.
    fn removal_answer(
        &self,
        who: &Principal,
        inode: &Inode,
        stat: FileStat,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if let Some(t10) = self.removal_credentials(session, who.uid, inode, now, rng)? {
            return Ok(MdsResponse::Opened {
                stat,
                capability: Vec::new(),
                cached: false,
                t10,
            });
        }
        // NOSEC requests carry no capability: none is signed for them.
        let (capability, cached) = match session {
            Some(_) => self.removal_capability(who.uid, inode.id, stat.protection, now, rng)?,
            None => (Vec::new(), false),
        };
        Ok(MdsResponse::Opened {
            stat,
            capability,
            cached,
            t10: Vec::new(),
        })
    }

    /// The file at `path`, created with permission bits `mode` unless it exists (a file
    /// made meanwhile by another request is the one returned; with `exclusive`, refused
    /// `AlreadyExists`). `sealed`: created encrypted, its lockbox to come (SPEC H5,
    /// `OpenSealed`).
    pub(crate) fn create_file(
        &self,
        who: &Principal,
        path: &str,
        mode: u16,
        sealed: bool,
        exclusive: bool,
        now: UnixMillis,
    ) -> Result<Inode> {
        let _guard = self.writing()?;
        let (parent, name) = self.parent_of(who, path)?;
        if let Some(id) = self.store.lookup(parent.id, name)? {
            if exclusive {
                return Err(MdsError::refused(
                    ErrorCode::AlreadyExists,
                    path.to_string(),
                ));
            }
            return self.load(id, path);
        }
        check_new_name(name)?;
        require(who, &parent, WRITE | EXEC, path)?;
        let mut batch = Batch::default();
        let mut inode = self.new_inode(who, &parent, false, mode, None, now)?;
        if sealed {
            inode.crypt = Some(maat_proto::encrypted::FileCrypt::default());
        }
        enter(&mut batch, &parent, name, &inode, now);
        self.store.commit_deferred(batch)?;
        Ok(inode)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_file(
        &self,
        who: &Principal,
        path: &str,
        access: Access,
        create: Option<u16>,
        predicted: &[String],
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let secure = session.is_some();
        let inode = match (self.resolve(who, path), create) {
            (Ok(inode), _) => inode,
            (Err(MdsError::Refused(e)), Some(mode)) if e.code == ErrorCode::NoSuchFile => {
                self.create_file(who, path, mode, false, false, now)?
            }
            (Err(e), _) => return Err(e),
        };
        if inode.is_dir {
            return Err(MdsError::refused(ErrorCode::IsADirectory, path.to_string()));
        }
        if inode.special.is_some() {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("{path} is a symbolic link, FIFO or socket: it holds no data here"),
            ));
        }
        if access == Access::Read
            && !allowed(who, &inode, READ)
            && crate::key_grants::has_grant(&inode, who.uid)
        {
            return self.range_open(who, &inode, path, secure, now, rng);
        }
        let (want, mode) = match access {
            Access::Read => (READ, Mode::READ),
            Access::ReadWrite => (READ | WRITE, Mode::READ_WRITE),
        };
        let wanted = if access == Access::ReadWrite && !allowed(who, &inode, READ) {
            // Write-only access is still a write open.
            require(who, &inode, WRITE, path)?;
            Mode::WRITE
        } else {
            require(who, &inode, want, path)?;
            mode
        };
        let mut stat = self.stat_of(who, &inode)?;
        stat.crypt = inode.crypt.clone();
        // SPEC T2: a partition with T10 credentials gets them and no signature.
        if let Some((session, partition)) = self.t10_partition(session, &inode)? {
            // A reader gets credentials for the OSDs that hold the file's stripes now; a
            // writer, which may extend the file anywhere, for every OSD. An OSD whose
            // keys await a revocation is left out of an open (not the whole open).
            let want = crate::t10::GrantWant {
                uid: who.uid,
                file: inode.id,
                placed_size: (wanted == Mode::READ).then_some(inode.size),
                mode: wanted,
                // A read may reuse a read-write credential when the user may write now
                // too, as with signed capabilities below.
                also: (wanted == Mode::READ && allowed(who, &inode, WRITE))
                    .then_some(Mode::READ_WRITE),
            };
            let (t10, _) = self.t10_grants(session, &partition, &want, now, rng)?;
            return Ok(MdsResponse::Opened {
                stat,
                capability: Vec::new(),
                cached: false,
                t10,
            });
        }
        let (capability, cached) = if secure {
            // A read may reuse a cached read-write capability when the user may write
            // now too: it grants nothing an open for writing would not.
            let also =
                (wanted == Mode::READ && allowed(who, &inode, WRITE)).then_some(Mode::READ_WRITE);
            let parent = if self.issuer_groups_directories() {
                Some(self.parent_of(who, path)?.0.id)
            } else {
                None
            };
            // Client predictions are hints: paths the requester cannot resolve (missing,
            // or no search permission on the way) are left out; the issuer keeps only
            // files that may join and that every named user may access.
            let hinted = if self.issuer_takes_hints() {
                predicted
                    .iter()
                    .filter_map(|p| self.resolve(who, p).ok().map(|i| i.id))
                    .collect()
            } else {
                Vec::new()
            };
            self.capability_for(
                &crate::capabilities::IssueRequest {
                    uid: who.uid,
                    file: inode.id,
                    parent,
                    wanted,
                    also,
                    protection: stat.protection,
                    partition: inode.partition,
                    hinted,
                    now,
                },
                rng,
            )?
        } else {
            (Vec::new(), false)
        };
        Ok(MdsResponse::Opened {
            stat,
            capability,
            cached,
            t10: Vec::new(),
        })
    }

    /// Records a file's size after writing. The file is named by path (so the search
    /// permissions on the way are checked) and by id (so a file replaced meanwhile is not
    /// resized by mistake).
    ///
    /// `written` are the stripe ranges an encrypted file's writer rewrote and their
    /// generations (SPEC H3); a file without a lockbox takes none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_size(
        &self,
        who: &Principal,
        path: &str,
        file: u64,
        size: u64,
        written: &[(u32, u32, u64)],
        tree_version: u32,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let mut inode = self.resolve_opened(who, path, file)?;
        require(who, &inode, WRITE, path)?;
        if !written.is_empty() {
            crate::encryption::record_generations(&mut inode, size, written, tree_version, path)?;
        }
        self.commit_size(inode, size, now)
    }

    /// The file at `path`, which must still be the file `file` a client opened (a file
    /// replaced meanwhile is never changed by mistake) and not a directory. The caller
    /// holds the write lock.
    pub(crate) fn resolve_opened(&self, who: &Principal, path: &str, file: u64) -> Result<Inode> {
        let inode = self.resolve(who, path)?;
        if inode.id != file {
            return Err(MdsError::refused(
                ErrorCode::NoSuchFile,
                format!("{path} was replaced since it was opened"),
            ));
        }
        if inode.is_dir {
            return Err(MdsError::refused(ErrorCode::IsADirectory, path.to_string()));
        }
        Ok(inode)
    }

    /// Records `size` (checked against [`FILE_BYTES_MAX`]) and the modification time of
    /// a file; the caller holds the write lock and checked who may. A file whose lockbox
    /// is still to come (SPEC H5) takes no size but 0 (its owner records the lockbox
    /// first, with the size).
    pub(crate) fn commit_size(
        &self,
        mut inode: Inode,
        size: u64,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        if inode.crypt.as_ref().is_some_and(|c| c.is_pending()) && size != 0 {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!(
                    "file {}: encrypted, its lockbox still to come: its owner records the \
                     lockbox with the size",
                    inode.id
                ),
            ));
        }
        if size > FILE_BYTES_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("files are limited to {FILE_BYTES_MAX} bytes"),
            ));
        }
        inode.size = size;
        inode.mtime = now.0;
        inode.ctime = now.0;
        if let Some(crypt) = &mut inode.crypt {
            crypt.truncate(size.div_ceil(STRIPE_UNIT_BYTES) as u32);
            // SPEC H7: an earlier key tree no stripe is sealed under any more (a rekey
            // rewrote the last of them, or they were cut) is forgotten.
            crypt.retire_unused();
        }
        let mut batch = Batch::default();
        batch.push(Op::PutInode(inode));
        self.store.commit_deferred(batch)?;
        Ok(MdsResponse::Ok)
    }

    /// Renames `from` to `to`. A file at `to` is replaced only with `replacing`
    /// (`RenameReplace`, rename(2) in one commit): it loses that name, and when it was
    /// its last, the answer lets the caller delete its objects as an unlink's does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename(
        &self,
        who: &Principal,
        from: &str,
        to: &str,
        replacing: bool,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let (from_parent, from_name) = self.parent_of(who, from)?;
        let id = self
            .store
            .lookup(from_parent.id, from_name)?
            .ok_or_else(|| no_such(from))?;
        let moving = self.load(id, from)?;
        require(who, &from_parent, WRITE | EXEC, from)?;
        require_sticky(who, &from_parent, &moving, from)?;
        let (to_parent, to_name) = self.parent_of(who, to)?;
        check_new_name(to_name)?;
        require(who, &to_parent, WRITE | EXEC, to)?;
        if moving.is_dir && from_parent.id != to_parent.id {
            // rename(2): a directory moved to another parent has its `..` rewritten,
            // which takes write permission on the directory itself (pjdfstest
            // rename/09: a user could move another's directory out of a sticky
            // directory the user owned).
            require(who, &moving, WRITE, from)?;
        }
        if moving.is_dir {
            // Refuse moving a directory under itself.
            let to_parts = components(to)?;
            let mut cur = self.load(ROOT_INODE, to)?;
            for part in to_parts.iter().take(to_parts.len().saturating_sub(1)) {
                if cur.id == moving.id {
                    break;
                }
                match self.store.lookup(cur.id, part)? {
                    Some(c) => cur = self.load(c, to)?,
                    None => break,
                }
            }
            if cur.id == moving.id || to_parent.id == moving.id {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    "cannot move a directory under itself",
                ));
            }
        }
        let mut batch = Batch::default();
        let mut replaced = None;
        // Subdirectories gained by `to`'s directory (and lost by `from`'s).
        let (mut to_subdirs, mut from_subdirs) = (0i64, 0i64);
        if moving.is_dir && from_parent.id != to_parent.id {
            (to_subdirs, from_subdirs) = (1, -1);
        }
        if let Some(existing) = self.store.lookup(to_parent.id, to_name)? {
            if existing == moving.id {
                return Ok(MdsResponse::Ok);
            }
            let target = self.load(existing, to)?;
            match (moving.is_dir, target.is_dir) {
                // rename(2): a directory replaces an empty directory, in one commit
                // (issue 44), under the target's sticky rule too.
                (true, true) => {
                    require_sticky(who, &to_parent, &target, to)?;
                    if !self.store.entries(target.id)?.is_empty() {
                        return Err(MdsError::refused(ErrorCode::NotEmpty, to.to_string()));
                    }
                    batch.push(Op::DeleteEntry {
                        parent: to_parent.id,
                        name: to_name.to_string(),
                    });
                    batch.push(Op::DeleteInode(target.id));
                    to_subdirs -= 1;
                }
                (true, false) => {
                    return Err(MdsError::refused(
                        ErrorCode::NotADirectory,
                        format!("{to} is a file; a directory cannot replace it"),
                    ))
                }
                (false, true) => {
                    return Err(MdsError::refused(
                        ErrorCode::IsADirectory,
                        format!("{to} is a directory; a file cannot replace it"),
                    ))
                }
                // A file replaces a file in one commit (`RenameReplace`); plain `Rename`
                // refuses, for clients that remove the target first.
                (false, false) if replacing => {
                    require_sticky(who, &to_parent, &target, to)?;
                    batch.push(Op::DeleteEntry {
                        parent: to_parent.id,
                        name: to_name.to_string(),
                    });
                    if drop_name(&mut batch, &target, now) {
                        replaced = Some(target);
                    }
                }
                (false, false) => {
                    return Err(MdsError::refused(
                        ErrorCode::AlreadyExists,
                        format!("{to} (remove it first, or RenameReplace)"),
                    ))
                }
            }
        }
        batch.push(Op::DeleteEntry {
            parent: from_parent.id,
            name: from_name.to_string(),
        });
        batch.push(Op::PutEntry {
            parent: to_parent.id,
            name: to_name.to_string(),
            child: moving.id,
        });
        // Its change time moves, as Linux's does (its name changed).
        let mut moved = moving.clone();
        moved.ctime = now.0;
        batch.push(Op::PutInode(moved));
        // The moved entry keeps its own modification time (rename(2) changes the
        // directories'; `rsync` sets a file's time, then renames it into place).
        if to_parent.id == from_parent.id {
            relink_dir(&mut batch, &from_parent, from_subdirs + to_subdirs, now);
        } else {
            relink_dir(&mut batch, &from_parent, from_subdirs, now);
            relink_dir(&mut batch, &to_parent, to_subdirs, now);
        }
        let Some(replaced) = replaced else {
            self.store.commit_deferred(batch)?;
            return Ok(MdsResponse::Ok);
        };
        // A file went: its capabilities must not be renewed (SPEC M7, M8).
        self.acl_change(|stamp| {
            batch.push(stamp);
            Ok(self.store.commit_deferred(batch)?)
        })?;
        let stat = self.stat_of(who, &replaced)?;
        self.removal_answer(who, &replaced, stat, session, now, rng)
    }
}

/// Issue 44: a directory's modification time follows its entries (an entry made,
/// removed or renamed in or out), as POSIX says, so that `rsync -a` and `make` see it.
/// Puts the new `inode` in `batch` under `name` in `parent`, whose time moves.
pub(crate) fn enter(batch: &mut Batch, parent: &Inode, name: &str, inode: &Inode, now: UnixMillis) {
    batch.push(Op::PutEntry {
        parent: parent.id,
        name: name.to_string(),
        child: inode.id,
    });
    batch.push(Op::PutInode(inode.clone()));
    touch_dir(batch, parent, now);
}

/// Puts in `batch` what a file losing one of its names (its entry removed apart) does to
/// its inode: one name fewer and a new change time, or, when it was the last, the inode
/// gone (answers true: its objects are the caller's to delete). Permissions, objects and
/// capabilities stay with a file that keeps a name (hard links, issue 44).
fn drop_name(batch: &mut Batch, file: &Inode, now: UnixMillis) -> bool {
    if file.nlink > 1 {
        let mut kept = file.clone();
        kept.nlink -= 1;
        kept.ctime = now.0;
        batch.push(Op::PutInode(kept));
        false
    } else {
        batch.push(Op::DeleteInode(file.id));
        true
    }
}

pub(crate) fn touch_dir(batch: &mut Batch, dir: &Inode, now: UnixMillis) {
    relink_dir(batch, dir, 0, now);
}

/// [`touch_dir`], where the directory gains (`subdirs` > 0) or loses subdirectories:
/// its link count follows (issue 44).
pub(crate) fn relink_dir(batch: &mut Batch, dir: &Inode, subdirs: i64, now: UnixMillis) {
    let mut dir = dir.clone();
    dir.mtime = now.0;
    dir.ctime = now.0;
    let links = i64::from(dir.nlink.max(2)) + subdirs;
    dir.nlink = u32::try_from(links.max(2)).unwrap_or(u32::MAX);
    batch.push(Op::PutInode(dir));
}

/// Sets every directory's link count to 2 and one per subdirectory (a store from before
/// they were kept: each directory's entries are read once).
pub(crate) fn count_directory_links<S: MetaStore>(store: &S, batch: &mut Batch) -> Result<()> {
    let mut todo = vec![ROOT_INODE];
    let mut seen = std::collections::HashSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(mut dir) = store.inode(id)? else {
            continue;
        };
        let mut subdirs = 0u32;
        for (_, child) in store.entries(id)? {
            if store.inode(child)?.is_some_and(|c| c.is_dir) {
                subdirs = subdirs.saturating_add(1);
                todo.push(child);
            }
        }
        let links = subdirs.saturating_add(2);
        if dir.nlink != links {
            dir.nlink = links;
            batch.push(Op::PutInode(dir));
        }
    }
    Ok(())
}

/// Owner and group names and partitions by id, read once each for the many stats of
/// one answer (a directory's entries share few). Never kept past the answer: a name
/// read once per request always shows a removed user as its number.
#[derive(Default)]
struct StatNames {
    users: std::collections::HashMap<u64, String>,
    groups: std::collections::HashMap<u64, String>,
    partitions: std::collections::HashMap<u64, crate::store::PartitionRecord>,
}

impl StatNames {
    /// Knowing the name of the user asking (read with the request).
    fn of(who: &Principal) -> Self {
        let mut names = Self::default();
        names.users.insert(who.uid, who.name.clone());
        names
    }
}

/// `id`'s name from `memo`, else as `read` gives it (kept in `memo`), else its number.
fn name_of(
    memo: &mut std::collections::HashMap<u64, String>,
    id: u64,
    read: impl FnOnce() -> Result<Option<String>>,
) -> Result<String> {
    if let Some(name) = memo.get(&id) {
        return Ok(name.clone());
    }
    let name = read()?.unwrap_or_else(|| id.to_string());
    memo.insert(id, name.clone());
    Ok(name)
}
