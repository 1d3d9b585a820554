//! `maat mount`: a Maat directory as a FUSE filesystem.
//!
//! Every operation is a call of Maat's client library acting for the user in `MAAT_HOME`;
//! the mount does not ask the kernel to check permission bits (no `default_permissions`),
//! so each open, create, remove and chmod is decided by the MDS and refused with its
//! answer (`EACCES`, `ENOENT`, ...). Operations Maat lacks answer with the errno a
//! POSIX program expects: links and special files `EPERM`, extended attributes
//! `ENOTSUP`, changing a numeric owner `EPERM` (Maat owners are names: `maat chown`).
//!
//! Consistency is close-to-open, as NFS: a file opened after another client closed it
//! sees its data. Each open file keeps a write-back buffer of contiguous writes (sent to
//! the OSDs, stripes in parallel, when it fills, on `fsync`, on close, and before any
//! read or size change through that file) and a read-ahead of eight stripes for
//! sequential reads. An error of a buffered write is reported by `close`/`fsync`.

pub mod limits;

mod errno;
mod inodes;
mod mount;
mod setattr;
mod state;
pub use errno::errno;
use errno::kind;
pub use mount::{mount, MountSettings};
pub mod users;
use state::State;
pub use users::{IdMap, ManyUsers};

use fuser::{
    Errno, FileAttr, FileHandle as Fh, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags as KernelOpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use inodes::Inodes;
use maat_client::{Client, ClientError, FileHandle, OpenFlags};
use maat_proto::msg::{
    ErrorCode, FileStat, SetTime, StatMore, STRIPE_UNIT_BYTES, S_IFBLK, S_IFCHR, S_IFMT,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FuseError {
    /// Mounting or serving failed.
    #[error("mount at {mountpoint}: {source}")]
    Mount {
        /// Where.
        mountpoint: String,
        /// Why.
        source: std::io::Error,
    },
    /// The directory to mount is not usable.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The path to mount is a file.
    #[error("{0} is not a directory")]
    NotADirectory(String),
    /// An identity map (`--idmap`) that cannot be read.
    #[error("identity map {0}")]
    IdMap(String),
}

use crate::limits::TTL;

pub use crate::limits::READ_AHEAD_BYTES;

pub use crate::limits::WRITE_BACK_BYTES;

use crate::limits::KERNEL_IO_BYTES;

/// The filesystem `maat mount` serves.
pub struct MaatFs {
    state: Mutex<State>,
}

impl MaatFs {
    /// A filesystem showing the Maat directory `root` through `client` to the mounting
    /// user, and to other local users through their own sessions when `many` is given;
    /// owners and groups show through `idmap` when given.
    pub fn new(
        client: Client,
        root: &str,
        many: Option<ManyUsers>,
        idmap: Option<IdMap>,
    ) -> Result<Self, FuseError> {
        let stat = client.stat(root)?;
        if !stat.is_dir {
            return Err(FuseError::NotADirectory(root.to_string()));
        }
        let own = Arc::new(client);
        Ok(Self {
            state: Mutex::new(State {
                client: Arc::clone(&own),
                own,
                many: match many {
                    Some(m) => Some((m, users::Clients::new()?)),
                    None => None,
                },
                idmap,
                inodes: Inodes::new(root),
                open: HashMap::new(),
                next_fh: 1,
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
                unlinked: HashMap::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in one operation must not stop the mount: the state stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, acting for the local user who sent `req` (refused with `EACCES` on a
    /// many-user mount when that user has no usable session).
    fn state_as(&self, req: &Request) -> Result<MutexGuard<'_, State>, Errno> {
        let mut s = self.state();
        s.act_as(req.uid())?;
        Ok(s)
    }
}

/// Runs `f` on the state and answers with its error, if any.
macro_rules! attempt {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(errno) => return $reply.error(errno),
        }
    };
}

impl Filesystem for MaatFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Larger kernel requests mean fewer round trips; the nearest allowed value is fine.
        let _ = config.set_max_readahead(KERNEL_IO_BYTES);
        let _ = config.set_max_write(KERNEL_IO_BYTES);
        Ok(())
    }

    fn destroy(&mut self) {
        let mut s = self.state();
        let fhs: Vec<u64> = s.open.keys().copied().collect();
        for fh in fhs {
            let _ = s.flush(fh);
        }
        // Files removed while open go now (their descriptors end with the mount).
        for (path, remover) in s.unlinked.drain().map(|(_, hidden)| hidden) {
            let _ = remover.unlink(&path);
        }
        let _ = s.own.save();
        if let Some((_, clients)) = &mut s.many {
            for client in clients.all() {
                let _ = client.save();
            }
            clients.forget_all();
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        let attr = attempt!(reply, s.entry(&path));
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<Fh>, reply: ReplyAttr) {
        let mut s = attempt!(reply, self.state_as(req));
        let attr = attempt!(reply, s.current_attr(ino.0));
        reply.attr(&TTL, &attr);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<Fh>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.path(ino.0));
        let change = attempt!(reply, s.attr_change(uid, gid, mode, atime, mtime));
        let attr = match size {
            // Owner, group and mode, the size, then the times (a size change sets the
            // modification time too). The kernel sends a size alone, nearly always.
            Some(size) => {
                let before = change.without_times();
                if !before.is_empty() {
                    attempt!(reply, s.apply(ino.0, &path, before));
                }
                attempt!(reply, s.truncate(ino.0, fh.map(|f| f.0), size));
                attempt!(reply, s.apply(ino.0, &path, change.times()))
            }
            // One request: owner and group first (the kernel sends the mode that
            // clears setuid and setgid with a chown, and expects it applied after),
            // then the mode and the times.
            None => attempt!(reply, s.apply(ino.0, &path, change)),
        };
        reply.attr(&TTL, &attr);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        let bits = (mode & !umask & 0o7777) as u16;
        let kind = (mode & u32::from(S_IFMT)) as u16;
        let mut stat = if kind == 0
            || u32::from(kind) == rustix::fs::FileType::RegularFile.as_raw_mode()
        {
            // A regular file: made empty, as `create` makes one.
            let flags = OpenFlags {
                write: true,
                create: Some(bits),
                exclusive: true,
                truncate: false,
            };
            let mut handle = attempt!(
                reply,
                s.client.open_file(&path, flags).map_err(|e| errno(&e))
            );
            attempt!(
                reply,
                s.client.flush_file(&mut handle).map_err(|e| errno(&e))
            );
            attempt!(reply, s.client.stat(&path).map_err(|e| errno(&e)))
        } else {
            // FIFOs and sockets; device nodes only by the administrator (the kernel
            // lets only a privileged process ask, and the mount is `nodev`).
            let device = [S_IFBLK, S_IFCHR].contains(&kind);
            match s.client.mknod(&path, kind | bits, rdev) {
                Err(ClientError::Refused(e)) if device && e.code == ErrorCode::PermissionDenied => {
                    return reply.error(Errno::EPERM)
                }
                other => attempt!(reply, other.map_err(|e| errno(&e))),
            }
        };
        let group = s.process_group(req.gid());
        s.adopt_group(&path, &mut stat, group);
        let ino = s.inodes.ino(&path, stat.id);
        let mut attr = s.attr(ino, &stat, None);
        if stat.is_device().is_some() {
            attr.rdev = rdev;
        }
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        let mode = (mode & !umask & 0o7777) as u16;
        attempt!(
            reply,
            s.client.mkdir(&path, mode, false).map_err(|e| errno(&e))
        );
        if let Some(group) = s.process_group(req.gid()) {
            let _ = s.client.chown(&path, None, Some(&group));
        }
        let attr = attempt!(reply, s.entry(&path));
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        attempt!(reply, s.remove_file(&path));
        reply.ok();
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        attempt!(reply, s.client.rmdir(&path).map_err(|e| errno(&e)));
        s.inodes.remove(&path);
        reply.ok();
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, link_name));
        let target = attempt!(reply, target.to_str().ok_or(Errno::EINVAL));
        let mut stat = attempt!(
            reply,
            s.client.symlink(target, &path).map_err(|e| errno(&e))
        );
        let group = s.process_group(req.gid());
        s.adopt_group(&path, &mut stat, group);
        let ino = s.inodes.ino(&path, stat.id);
        let attr = s.attr(ino, &stat, None);
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // The MDS's decision, as for every access (issue 44: it always said yes).
        let s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.path(ino.0));
        let mask = (mask.bits() & 7) as u8;
        attempt!(reply, s.client.access(&path, mask).map_err(|e| errno(&e)));
        reply.ok();
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.path(ino.0));
        let target = attempt!(reply, s.client.readlink(&path).map_err(|e| errno(&e)));
        reply.data(target.as_bytes());
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let from = attempt!(reply, s.path(ino.0));
        let to = attempt!(reply, s.child(newparent.0, newname));
        let (stat, more) = match s.client.hard_link(&from, &to) {
            Ok(answer) => answer,
            // link(2): EMLINK at the most names an inode may have.
            Err(ClientError::Refused(e)) if e.code == ErrorCode::TooLarge => {
                return reply.error(Errno::EMLINK)
            }
            Err(e) => return reply.error(errno(&e)),
        };
        // The new name shares the inode's number (the kernel links the two).
        let linked = s.inodes.ino(&to, stat.id);
        let attr = s.attr(linked, &stat, Some(&more));
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let from = attempt!(reply, s.child(parent.0, name));
        let to = attempt!(reply, s.child(newparent.0, newname));
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return reply.error(Errno::EINVAL);
        }
        // Open files at or below `from` record their sizes under the old names first.
        attempt!(reply, s.flush_below(&from));
        // A file at `to` open in this mount is first moved aside (its descriptors keep
        // it, as POSIX says); otherwise rename(2) replaces it in one step at the MDS.
        let target_open = s
            .inodes
            .find(&to)
            .is_some_and(|ino| s.open.values().any(|o| o.ino == ino));
        let renamed = if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            s.client.rename(&from, &to)
        } else if target_open {
            attempt!(reply, s.remove_file(&to));
            s.client.rename(&from, &to)
        } else {
            s.client.rename_replacing(&from, &to)
        };
        attempt!(reply, renamed.map_err(|e| errno(&e)));
        s.inodes.rename(&from, &to);
        // Open files now record their sizes under their new names.
        let State { inodes, open, .. } = &mut *s;
        for o in open.values_mut() {
            if let Some(path) = inodes.path(o.ino) {
                if path != o.handle.path() {
                    o.handle.renamed(path);
                }
            }
        }
        reply.ok();
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: KernelOpenFlags, reply: ReplyOpen) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.path(ino.0));
        let write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY);
        let truncate = flags.0 & rustix::fs::OFlags::TRUNC.bits() as i32 != 0;
        // Other open files of this inode in this mount send their buffers and sizes
        // first, so that this open sees them (close-to-open within the mount too).
        attempt!(reply, s.flush_ino(ino.0));
        let open_flags = OpenFlags {
            write,
            create: None,
            exclusive: false,
            truncate: write && truncate,
        };
        let handle = attempt!(
            reply,
            s.client.open_file(&path, open_flags).map_err(|e| errno(&e))
        );
        if open_flags.truncate {
            s.resized(ino.0);
        }
        let fh = s.add_open(ino.0, handle);
        reply.opened(Fh(fh), FopenFlags::empty());
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.child(parent.0, name));
        let mode = (mode & !umask & 0o7777) as u16;
        // A new file whose mode lacks owner write is created writable by its owner and
        // given `mode` at close (see `mode_at_close`); an existing one keeps its mode.
        let mode_at_close = (mode & 0o200 == 0
            && matches!(
                s.client.stat(&path),
                Err(ClientError::Refused(ref e)) if e.code == ErrorCode::NoSuchFile
            ))
        .then_some(mode);
        let open_flags = OpenFlags {
            write: true,
            create: Some(mode | if mode_at_close.is_some() { 0o200 } else { 0 }),
            exclusive: flags & rustix::fs::OFlags::EXCL.bits() as i32 != 0,
            truncate: flags & rustix::fs::OFlags::TRUNC.bits() as i32 != 0,
        };
        // The process's group for a file this call makes (an existing one keeps its own:
        // asked first only when the group would differ, so rarely).
        let group = s.process_group(req.gid()).filter(|_| {
            open_flags.exclusive || mode_at_close.is_some() || s.client.stat(&path).is_err()
        });
        let handle = attempt!(
            reply,
            s.client.open_file(&path, open_flags).map_err(|e| errno(&e))
        );
        let mut stat = handle.stat().clone();
        s.adopt_group(&path, &mut stat, group);
        let ino = s.inodes.ino(&path, stat.id);
        let fh = s.add_open(ino, handle);
        if let (Some(mode), Some(open)) = (mode_at_close, s.open.get_mut(&fh)) {
            open.mode_at_close = Some(mode);
            stat.mode = (stat.mode & !0o7777) | mode;
        }
        // (An existing file with other names shows one until the kernel asks again.)
        let attr = s.attr(ino, &stat, None);
        reply.created(&TTL, &attr, Generation(0), Fh(fh), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: Fh,
        offset: u64,
        size: u32,
        _flags: KernelOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut s = self.state();
        let data = attempt!(reply, s.read(fh.0, offset, size));
        reply.data(&data);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: Fh,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: KernelOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut s = self.state();
        attempt!(reply, s.write(fh.0, offset, data));
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: Fh,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        attempt!(reply, s.flush(fh.0));
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: Fh,
        _flags: KernelOpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        let flushed = s.flush(fh.0);
        let Some(closed) = s.open.remove(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        // The kernel sends a release without the closer's credentials: what it does is
        // done for the user who opened the file.
        s.client = Arc::clone(&closed.client);
        // The mode asked at create (see `mode_at_close`), unless the file is gone.
        let moded = match closed.mode_at_close {
            Some(mode) if !s.unlinked.contains_key(&closed.ino) => s
                .client
                .chmod(closed.handle.path(), mode)
                .map_err(|e| errno(&e)),
            _ => Ok(()),
        };
        let removed = s.closed(closed.ino);
        attempt!(reply, flushed);
        attempt!(reply, moded);
        attempt!(reply, removed);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: Fh, _datasync: bool, reply: ReplyEmpty) {
        // Every write the OSDs acknowledged is already on their disks (fsync before the
        // acknowledgement); what is left is the buffer and the size at the MDS.
        let mut s = self.state();
        attempt!(reply, s.flush(fh.0));
        reply.ok();
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: Fh,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = attempt!(reply, self.state_as(req));
        let path = attempt!(reply, s.path(ino.0));
        let listing = attempt!(reply, s.client.readdir(&path).map_err(|e| errno(&e)));
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".to_string()),
            (ino.0, FileType::Directory, "..".to_string()),
        ];
        for (name, stat) in &listing {
            if name.starts_with(state::UNLINKED_PREFIX) {
                continue;
            }
            let child = s.inodes.child_path(ino.0, name).unwrap_or_default();
            entries.push((s.inodes.ino(&child, stat.id), kind(stat), name.clone()));
        }
        for (i, (child, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*child), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Maat keeps no cluster-wide free-space count yet: report a large, round space
        // so that tools which check before copying go ahead.
        let blocks = 1u64 << 32;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            1 << 32,
            1 << 32,
            STRIPE_UNIT_BYTES as u32,
            255,
            4096,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }
}
