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

mod inodes;

use fuser::{
    Errno, FileAttr, FileHandle as Fh, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags as KernelOpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use inodes::Inodes;
use maat_client::{Client, ClientError, FileHandle, OpenFlags};
use maat_proto::msg::{ErrorCode, FileStat, STRIPE_UNIT_BYTES};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
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
}

/// How long the kernel may keep attributes and names before asking again.
const TTL: Duration = Duration::from_secs(1);

/// Read-ahead of a sequential reader: eight stripes, fetched from the OSDs at once.
pub const READ_AHEAD_BYTES: u64 = 8 * STRIPE_UNIT_BYTES;

/// A file's write-back buffer is sent when it holds this much.
pub const WRITE_BACK_BYTES: usize = 8 * STRIPE_UNIT_BYTES as usize;

/// Largest read and write the kernel sends at once (it splits larger ones).
const KERNEL_IO_BYTES: u32 = 1024 * 1024;

/// One open file of the mount.
struct Open {
    ino: u64,
    handle: FileHandle,
    /// Contiguous writes not yet sent: (offset, bytes).
    pending: Option<(u64, Vec<u8>)>,
    /// Bytes read ahead: (offset, bytes).
    ahead: Option<(u64, Vec<u8>)>,
    /// Where the next sequential read would start.
    next_read: u64,
    /// A buffered write that failed, not yet reported to this file's writer: returned by
    /// its next write, flush, fsync or close.
    error: Option<Errno>,
}

impl Open {
    /// The size including writes still in the buffer.
    fn size(&self) -> u64 {
        let pending_end = self
            .pending
            .as_ref()
            .map(|(at, data)| at + data.len() as u64)
            .unwrap_or(0);
        self.handle.size().max(pending_end)
    }
}

struct State {
    client: Client,
    inodes: Inodes,
    open: HashMap<u64, Open>,
    next_fh: u64,
    uid: u32,
    gid: u32,
}

/// The filesystem `maat mount` serves.
pub struct MaatFs {
    state: Mutex<State>,
}

/// The errno for a client error.
pub fn errno(e: &ClientError) -> Errno {
    match e {
        ClientError::Refused(w) => match w.code {
            ErrorCode::NoSuchFile | ErrorCode::NoSuchUser | ErrorCode::NoSuchGroup => Errno::ENOENT,
            ErrorCode::AlreadyExists => Errno::EEXIST,
            ErrorCode::NotADirectory => Errno::ENOTDIR,
            ErrorCode::IsADirectory => Errno::EISDIR,
            ErrorCode::NotEmpty => Errno::ENOTEMPTY,
            ErrorCode::InvalidArgument | ErrorCode::Malformed => Errno::EINVAL,
            ErrorCode::TooLarge => Errno::EFBIG,
            ErrorCode::Busy | ErrorCode::NotReady => Errno::EAGAIN,
            // Every other refusal is a security decision: permission, expiry,
            // revocation, a bad MAC or signature, a replay.
            _ => Errno::EACCES,
        },
        ClientError::NotOpenForWriting(_) => Errno::EBADF,
        ClientError::NotLoggedIn => Errno::EACCES,
        ClientError::Net { .. } => Errno::ENOTCONN,
        ClientError::Io { source, .. } => source.raw_os_error().map_or(Errno::EIO, Errno::from_i32),
        ClientError::NotInJob(_) => Errno::EACCES,
        ClientError::InvalidArgument(_) => Errno::EINVAL,
        _ => Errno::EIO,
    }
}

fn kind(s: &FileStat) -> FileType {
    if s.is_dir {
        FileType::Directory
    } else {
        FileType::RegularFile
    }
}

impl MaatFs {
    /// A filesystem showing the Maat directory `root` through `client`.
    pub fn new(client: Client, root: &str) -> Result<Self, FuseError> {
        let stat = client.stat(root)?;
        if !stat.is_dir {
            return Err(FuseError::NotADirectory(root.to_string()));
        }
        Ok(Self {
            state: Mutex::new(State {
                client,
                inodes: Inodes::new(root),
                open: HashMap::new(),
                next_fh: 1,
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in one operation must not stop the mount: the state stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn attr(&self, ino: u64, s: &FileStat) -> FileAttr {
        let size = self
            .open
            .values()
            .filter(|o| o.ino == ino && o.handle.writable())
            .map(Open::size)
            .fold(s.size, u64::max);
        let time = UNIX_EPOCH + Duration::from_millis(s.mtime);
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind: kind(s),
            perm: s.mode & 0o7777,
            nlink: if s.is_dir { 2 } else { 1 },
            // Maat owners are names, not numbers: the mounting user is shown as owner,
            // and the MDS decides every access by the Maat identity.
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: STRIPE_UNIT_BYTES as u32,
        }
    }

    fn path(&self, ino: u64) -> Result<String, Errno> {
        self.inodes
            .path(ino)
            .map(str::to_string)
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<String, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        self.inodes.child_path(parent, name).ok_or(Errno::ENOENT)
    }

    /// Attributes of a known inode, asked of the MDS now.
    fn current_attr(&mut self, ino: u64) -> Result<FileAttr, Errno> {
        let path = self.path(ino)?;
        let s = self.client.stat(&path).map_err(|e| errno(&e))?;
        Ok(self.attr(ino, &s))
    }

    /// Stat of `path` as an entry (numbering it).
    fn entry(&mut self, path: &str) -> Result<FileAttr, Errno> {
        let s = self.client.stat(path).map_err(|e| errno(&e))?;
        let ino = self.inodes.ino(path);
        Ok(self.attr(ino, &s))
    }

    /// Sends an open file's buffered writes.
    fn send_pending(&mut self, fh: u64) -> Result<(), Errno> {
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        if let Some(e) = open.error {
            return Err(e);
        }
        if let Some((at, data)) = open.pending.take() {
            open.ahead = None;
            if let Err(e) = self.client.write_file_at(&mut open.handle, at, &data) {
                // Kept for the writer: whoever triggered the send (a read, another
                // process's truncate) is told too, but the writer must hear it at close.
                let e = errno(&e);
                open.error = Some(e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Sends buffered writes and records the size at the MDS.
    fn flush(&mut self, fh: u64) -> Result<(), Errno> {
        self.send_pending(fh)?;
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        self.client
            .flush_file(&mut open.handle)
            .map_err(|e| errno(&e))
    }

    /// Sends and records every open file of `ino` (before its size is looked at or
    /// changed by a path operation).
    fn flush_ino(&mut self, ino: u64) -> Result<(), Errno> {
        self.flush_where(|o| o.ino == ino)
    }

    /// Sends and records every open file at or below `path`.
    fn flush_below(&mut self, path: &str) -> Result<(), Errno> {
        let below = format!("{}/", path.trim_end_matches('/'));
        self.flush_where(|o| o.handle.path() == path || o.handle.path().starts_with(&below))
    }

    fn flush_where(&mut self, which: impl Fn(&Open) -> bool) -> Result<(), Errno> {
        let fhs: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, o)| which(o))
            .map(|(&fh, _)| fh)
            .collect();
        for fh in fhs {
            // Best effort for the others: a failure stays with that file (`error`) and
            // is reported to its writer, not to whoever happened to trigger the send.
            let _ = self.flush(fh);
        }
        Ok(())
    }

    fn add_open(&mut self, ino: u64, handle: FileHandle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.open.insert(
            fh,
            Open {
                ino,
                handle,
                pending: None,
                ahead: None,
                next_read: 0,
                error: None,
            },
        );
        fh
    }

    fn read(&mut self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        self.send_pending(fh)?;
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        let want = u64::from(size);
        if let Some((at, data)) = &open.ahead {
            let end = at + data.len() as u64;
            // Served from the read-ahead only in full, or up to the end of the file: a
            // short answer means end of file to the kernel.
            let covered = offset + want <= end || end >= open.handle.size();
            if offset >= *at && offset <= end && covered {
                let from = (offset - at) as usize;
                let to = ((offset + want).min(end) - at) as usize;
                open.next_read = offset + (to - from) as u64;
                return Ok(data.get(from..to).unwrap_or_default().to_vec());
            }
        }
        let sequential = offset == open.next_read;
        let fetch = if sequential {
            want.max(READ_AHEAD_BYTES)
        } else {
            want
        };
        let data = self
            .client
            .read_file_at(&open.handle, offset, fetch as usize)
            .map_err(|e| errno(&e))?;
        let n = (want as usize).min(data.len());
        let out = data.get(..n).unwrap_or_default().to_vec();
        open.next_read = offset + n as u64;
        open.ahead = if data.len() > n {
            Some((offset, data))
        } else {
            None
        };
        Ok(out)
    }

    fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        if !open.handle.writable() {
            return Err(Errno::EBADF);
        }
        if let Some(e) = open.error {
            return Err(e);
        }
        open.ahead = None;
        if let Some((at, buf)) = &mut open.pending {
            if *at + buf.len() as u64 == offset {
                buf.extend_from_slice(data);
                if buf.len() >= WRITE_BACK_BYTES {
                    return self.send_pending(fh);
                }
                return Ok(());
            }
        }
        self.send_pending(fh)?;
        if let Some(open) = self.open.get_mut(&fh) {
            open.pending = Some((offset, data.to_vec()));
        }
        Ok(())
    }

    fn truncate(&mut self, ino: u64, fh: Option<u64>, size: u64) -> Result<(), Errno> {
        self.flush_ino(ino)?;
        let path = self.path(ino)?;
        match fh.filter(|fh| self.open.get(fh).is_some_and(|o| o.handle.writable())) {
            Some(fh) => {
                let Some(open) = self.open.get_mut(&fh) else {
                    return Err(Errno::EBADF);
                };
                open.ahead = None;
                self.client
                    .truncate_file(&mut open.handle, size)
                    .map_err(|e| errno(&e))?;
            }
            None => {
                let flags = OpenFlags {
                    write: true,
                    ..OpenFlags::READ
                };
                let mut handle = self.client.open_file(&path, flags).map_err(|e| errno(&e))?;
                self.client
                    .truncate_file(&mut handle, size)
                    .map_err(|e| errno(&e))?;
            }
        }
        // Other open files of this inode now see the new size.
        for open in self.open.values_mut().filter(|o| o.ino == ino) {
            open.ahead = None;
        }
        Ok(())
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
        let _ = s.client.save();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.state();
        let path = attempt!(reply, s.child(parent.0, name));
        let attr = attempt!(reply, s.entry(&path));
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<Fh>, reply: ReplyAttr) {
        let mut s = self.state();
        let attr = attempt!(reply, s.current_attr(ino.0));
        reply.attr(&TTL, &attr);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<Fh>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.state();
        let path = attempt!(reply, s.path(ino.0));
        if uid.is_some_and(|u| u != s.uid) || gid.is_some_and(|g| g != s.gid) {
            // Maat owners are names (`maat chown PATH --owner NAME`).
            return reply.error(Errno::EPERM);
        }
        if let Some(mode) = mode {
            attempt!(
                reply,
                s.client
                    .chmod(&path, (mode & 0o7777) as u16)
                    .map_err(|e| errno(&e))
            );
        }
        if let Some(size) = size {
            attempt!(reply, s.truncate(ino.0, fh.map(|f| f.0), size));
        }
        // Times: Maat records the modification time itself; setting it is accepted and
        // has no effect (as `touch` on many network filesystems).
        let attr = attempt!(reply, s.current_attr(ino.0));
        reply.attr(&TTL, &attr);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files are made by create; Maat has no devices, FIFOs or sockets.
        reply.error(Errno::EPERM);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let path = attempt!(reply, s.child(parent.0, name));
        let mode = (mode & !umask & 0o7777) as u16;
        attempt!(
            reply,
            s.client.mkdir(&path, mode, false).map_err(|e| errno(&e))
        );
        let attr = attempt!(reply, s.entry(&path));
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let path = attempt!(reply, s.child(parent.0, name));
        attempt!(reply, s.client.unlink(&path).map_err(|e| errno(&e)));
        s.inodes.remove(&path);
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let path = attempt!(reply, s.child(parent.0, name));
        attempt!(reply, s.client.rmdir(&path).map_err(|e| errno(&e)));
        s.inodes.remove(&path);
        reply.ok();
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        let from = attempt!(reply, s.child(parent.0, name));
        let to = attempt!(reply, s.child(newparent.0, newname));
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return reply.error(Errno::EINVAL);
        }
        // Open files at or below `from` record their sizes under the old names first.
        attempt!(reply, s.flush_below(&from));
        match s.client.rename(&from, &to) {
            Ok(()) => {}
            Err(ClientError::Refused(e))
                if e.code == ErrorCode::AlreadyExists
                    && !flags.contains(RenameFlags::RENAME_NOREPLACE) =>
            {
                // POSIX rename replaces a file; the MDS refuses to (it would leave the
                // old file's objects behind), so remove it first. Not atomic: a crash
                // in between leaves `to` missing and `from` in place.
                let target = attempt!(reply, s.client.stat(&to).map_err(|e| errno(&e)));
                if target.is_dir {
                    return reply.error(Errno::EEXIST);
                }
                let moving = attempt!(reply, s.client.stat(&from).map_err(|e| errno(&e)));
                if moving.is_dir {
                    // rename(2): a directory cannot replace a file.
                    return reply.error(Errno::ENOTDIR);
                }
                attempt!(reply, s.client.unlink(&to).map_err(|e| errno(&e)));
                attempt!(reply, s.client.rename(&from, &to).map_err(|e| errno(&e)));
            }
            Err(e) => return reply.error(errno(&e)),
        }
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

    fn open(&self, _req: &Request, ino: INodeNo, flags: KernelOpenFlags, reply: ReplyOpen) {
        let mut s = self.state();
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
        let fh = s.add_open(ino.0, handle);
        reply.opened(Fh(fh), FopenFlags::empty());
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.state();
        let path = attempt!(reply, s.child(parent.0, name));
        let open_flags = OpenFlags {
            write: true,
            create: Some((mode & !umask & 0o7777) as u16),
            exclusive: flags & rustix::fs::OFlags::EXCL.bits() as i32 != 0,
            truncate: flags & rustix::fs::OFlags::TRUNC.bits() as i32 != 0,
        };
        let handle = attempt!(
            reply,
            s.client.open_file(&path, open_flags).map_err(|e| errno(&e))
        );
        let stat = handle.stat().clone();
        let ino = s.inodes.ino(&path);
        let fh = s.add_open(ino, handle);
        let attr = s.attr(ino, &stat);
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
        s.open.remove(&fh.0);
        attempt!(reply, flushed);
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
        _req: &Request,
        ino: INodeNo,
        _fh: Fh,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.state();
        let path = attempt!(reply, s.path(ino.0));
        let listing = attempt!(reply, s.client.readdir(&path).map_err(|e| errno(&e)));
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".to_string()),
            (ino.0, FileType::Directory, "..".to_string()),
        ];
        for (name, stat) in &listing {
            let child = s.inodes.child_path(ino.0, name).unwrap_or_default();
            entries.push((s.inodes.ino(&child), kind(stat), name.clone()));
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

/// Mounts the Maat directory `root` at `mountpoint` and serves until it is unmounted
/// (`fusermount3 -u MOUNTPOINT`) or `stop` returns true (checked every 100 ms); then
/// unmounts, sending every open file's buffered writes and size first.
pub fn mount(
    client: Client,
    root: &str,
    mountpoint: &Path,
    mut stop: impl FnMut() -> bool,
) -> Result<(), FuseError> {
    let fs = MaatFs::new(client, root)?;
    let mut config = fuser::Config::default();
    config
        .mount_options
        .push(fuser::MountOption::FSName(format!("maat:{root}")));
    config
        .mount_options
        .push(fuser::MountOption::Subtype("maat".into()));
    let failed = |source| FuseError::Mount {
        mountpoint: mountpoint.display().to_string(),
        source,
    };
    let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(failed)?;
    loop {
        if session.guard.is_finished() {
            return session.join().map_err(failed);
        }
        if stop() {
            return session.umount_and_join().map_err(failed);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maat_proto::msg::WireError;

    #[test]
    fn refusals_map_to_the_errno_posix_programs_expect() {
        let refused = |code| ClientError::Refused(WireError::new(code, "x"));
        assert_eq!(errno(&refused(ErrorCode::PermissionDenied)), Errno::EACCES);
        assert_eq!(errno(&refused(ErrorCode::Revoked)), Errno::EACCES);
        assert_eq!(errno(&refused(ErrorCode::NoSuchFile)), Errno::ENOENT);
        assert_eq!(errno(&refused(ErrorCode::AlreadyExists)), Errno::EEXIST);
        assert_eq!(errno(&refused(ErrorCode::NotEmpty)), Errno::ENOTEMPTY);
        assert_eq!(errno(&refused(ErrorCode::IsADirectory)), Errno::EISDIR);
        assert_eq!(errno(&refused(ErrorCode::NotADirectory)), Errno::ENOTDIR);
        assert_eq!(
            errno(&ClientError::NotOpenForWriting("f".into())),
            Errno::EBADF
        );
        // Typed client errors keep their errno: a local I/O error its own.
        let io = ClientError::Io {
            what: "f".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        assert_eq!(errno(&io), Errno::from_i32(28));
        assert_eq!(
            errno(&ClientError::InvalidArgument("x".into())),
            Errno::EINVAL
        );
        assert_eq!(errno(&ClientError::NotInJob("x".into())), Errno::EACCES);
    }
}
