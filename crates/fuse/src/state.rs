//! The mount's state: open files with their write-back buffers, read-ahead and
//! prefetch, and the inode numbers; every operation on them as a client call.

use super::*;
use crate::users::Clients;

/// One open file of the mount.
pub(crate) struct Open {
    pub(crate) ino: u64,
    pub(crate) handle: FileHandle,
    /// The client of the user who opened it: its writes, reads and size record act for
    /// that user, whoever's request sends them (a release may come from another).
    pub(crate) client: Arc<Client>,
    /// Contiguous writes not yet sent: (offset, bytes).
    pub(crate) pending: Option<(u64, Vec<u8>)>,
    /// Bytes read ahead: (offset, bytes).
    pub(crate) ahead: Option<(u64, Vec<u8>)>,
    /// The next read-ahead, being fetched on a thread of its own while the kernel copies
    /// this one out (a sequential reader only).
    pub(crate) prefetch: Option<Prefetch>,
    /// Where the next sequential read would start.
    pub(crate) next_read: u64,
    /// A buffered write that failed, not yet reported to this file's writer: returned by
    /// its next write, flush, fsync or close.
    pub(crate) error: Option<Errno>,
    /// A file this open created with a mode that lacks owner write (`open(O_CREAT,
    /// 0444)`, as git and tar do): POSIX gives the creating descriptor write access all
    /// the same, so the file is created writable by its owner and takes this mode when
    /// the descriptor closes (the owner may change a mode anyway: nothing is granted
    /// that the owner could not take).
    pub(crate) mode_at_close: Option<u16>,
}

/// A read-ahead window being fetched: where it starts, and the thread fetching it.
pub(crate) struct Prefetch {
    pub(crate) offset: u64,
    pub(crate) thread: std::thread::JoinHandle<Result<Vec<u8>, ClientError>>,
}

impl Open {
    /// Drops what was read ahead (the file changed, or the reader jumped). A prefetch
    /// still running is left to finish on its own, its bytes unused.
    pub(crate) fn forget_read_ahead(&mut self) {
        self.ahead = None;
        self.prefetch = None;
    }

    /// The size including writes still in the buffer.
    pub(crate) fn size(&self) -> u64 {
        let pending_end = self
            .pending
            .as_ref()
            .map(|(at, data)| at + data.len() as u64)
            .unwrap_or(0);
        self.handle.size().max(pending_end)
    }
}

pub(crate) struct State {
    /// The client of the user whose request is being served (shared with prefetch
    /// threads: the client takes `&self`).
    pub(crate) client: Arc<Client>,
    /// The mount's own client (`MAAT_HOME` of `maat mount`), for the mounting user.
    pub(crate) own: Arc<Client>,
    /// Other local users' clients, on a many-user mount.
    pub(crate) many: Option<(ManyUsers, Clients)>,
    /// Owners and groups as local ids (`--idmap`); without one, the mounting user's.
    pub(crate) idmap: Option<IdMap>,
    pub(crate) inodes: Inodes,
    pub(crate) open: HashMap<u64, Open>,
    pub(crate) next_fh: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Files removed while open in this mount (issue 44), by inode: the hidden name each
    /// was moved to, removed for good when its last open closes (as NFS clients do).
    /// With the client of the user who removed it, who removes it then.
    pub(crate) unlinked: HashMap<u64, (String, Arc<Client>)>,
}

/// The hidden names of files removed while open start so; listings leave them out.
pub(crate) const UNLINKED_PREFIX: &str = ".maat-unlinked-";

impl State {
    /// Acts for local user `uid` until the next request: the mount's own client for the
    /// mounting user (and for everyone on a single-user mount), the user's own otherwise.
    pub(crate) fn act_as(&mut self, uid: u32) -> Result<(), Errno> {
        self.client = match &mut self.many {
            Some((users, clients)) if uid != self.uid => clients.get(users, uid)?,
            _ => Arc::clone(&self.own),
        };
        Ok(())
    }

    /// Removes the file at `path`. One open in this mount is moved to a hidden name in
    /// the same directory instead, so that its descriptors keep reading and writing it as
    /// POSIX promises; the last close removes it ([`State::closed`]).
    pub(crate) fn remove_file(&mut self, path: &str) -> Result<(), Errno> {
        let ino = self
            .inodes
            .find(path)
            .filter(|ino| self.open.values().any(|o| o.ino == *ino));
        let Some(ino) = ino else {
            self.client.unlink(path).map_err(|e| errno(&e))?;
            self.inodes.remove(path);
            return Ok(());
        };
        self.flush_ino(ino)?;
        let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let hidden = format!("{dir}/{UNLINKED_PREFIX}{ino}");
        self.client.rename(path, &hidden).map_err(|e| errno(&e))?;
        self.inodes.rename(path, &hidden);
        for open in self.open.values_mut().filter(|o| o.ino == ino) {
            open.handle.renamed(&hidden);
        }
        self.unlinked
            .insert(ino, (hidden, Arc::clone(&self.client)));
        Ok(())
    }

    /// The Maat group a new entry of this user takes, as Linux gives a new file the
    /// creating process's group: `Some` only with an identity map that names the
    /// process's group `gid`, when it is not the user's own (Maat's choice for new
    /// entries, which stands otherwise).
    pub(crate) fn process_group(&self, gid: u32) -> Option<String> {
        let name = self.idmap.as_ref()?.group_name(gid)?;
        (Some(name) != self.client.user_name().as_deref()).then(|| name.to_string())
    }

    /// Gives the entry at `path`, just made by this user, the group `group` from
    /// [`State::process_group`]. The MDS refuses unless the user belongs to that group
    /// in Maat (a local group is no proof): then Maat's choice stands.
    pub(crate) fn adopt_group(&self, path: &str, stat: &mut FileStat, group: Option<String>) {
        if let Some(group) = group.filter(|g| *g != stat.group) {
            if self.client.chown(path, None, Some(&group)).is_ok() {
                stat.group = group;
            }
        }
    }

    /// An open of `ino` closed: a file removed while open goes for good with its last.
    pub(crate) fn closed(&mut self, ino: u64) -> Result<(), Errno> {
        if self.open.values().any(|o| o.ino == ino) {
            return Ok(());
        }
        let Some((hidden, remover)) = self.unlinked.remove(&ino) else {
            return Ok(());
        };
        self.inodes.remove(&hidden);
        remover.unlink(&hidden).map_err(|e| errno(&e))
    }

    /// The kernel's attributes of `ino` from its stat, with its link count and times when
    /// the MDS gave them (else those of a new entry: one name, times all equal).
    pub(crate) fn attr(&self, ino: u64, s: &FileStat, more: Option<&StatMore>) -> FileAttr {
        let size = self
            .open
            .values()
            .filter(|o| o.ino == ino && o.handle.writable())
            .map(Open::size)
            .fold(s.size, u64::max);
        let time = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let nlink = more.map_or(if s.is_dir { 2 } else { 1 }, |m| m.nlink);
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time(more.map_or(s.mtime, |m| m.atime)),
            mtime: time(s.mtime),
            ctime: time(more.map_or(s.mtime, |m| m.ctime)),
            crtime: time(s.mtime),
            kind: kind(s),
            perm: s.mode & 0o7777,
            // A file removed while open here has that name no more (its hidden name
            // does not count: fstat says 0 when it was the last).
            nlink: if self.unlinked.contains_key(&ino) {
                nlink.saturating_sub(1)
            } else {
                nlink
            },
            // Maat owners are names, not numbers: shown through the identity map, or
            // as the mounting user; the MDS decides every access by the Maat identity.
            uid: self.idmap.as_ref().map_or(self.uid, |m| m.uid(&s.owner)),
            gid: self.idmap.as_ref().map_or(self.gid, |m| m.gid(&s.group)),
            rdev: more.map_or(0, |m| m.rdev),
            flags: 0,
            blksize: STRIPE_UNIT_BYTES as u32,
        }
    }

    pub(crate) fn path(&self, ino: u64) -> Result<String, Errno> {
        self.inodes
            .path(ino)
            .map(str::to_string)
            .ok_or(Errno::ENOENT)
    }

    pub(crate) fn child(&self, parent: u64, name: &OsStr) -> Result<String, Errno> {
        // POSIX's answer for a name past the limit (issue 44: it was EINVAL, the MDS's
        // InvalidArgument).
        if name.len() > maat_proto::limits::NAME_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        self.inodes.child_path(parent, name).ok_or(Errno::ENOENT)
    }

    /// Attributes of a known inode, asked of the MDS now.
    pub(crate) fn current_attr(&mut self, ino: u64) -> Result<FileAttr, Errno> {
        let path = self.path(ino)?;
        let (s, more) = self.client.stat_full(&path).map_err(|e| errno(&e))?;
        Ok(self.attr(ino, &s, Some(&more)))
    }

    /// Stat of `path` as an entry (numbering it).
    pub(crate) fn entry(&mut self, path: &str) -> Result<FileAttr, Errno> {
        let (s, more) = self.client.stat_full(path).map_err(|e| errno(&e))?;
        let ino = self.inodes.ino(path, s.id);
        Ok(self.attr(ino, &s, Some(&more)))
    }

    /// Sends an open file's buffered writes.
    pub(crate) fn send_pending(&mut self, fh: u64) -> Result<(), Errno> {
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        if let Some(e) = open.error {
            return Err(e);
        }
        if let Some((at, data)) = open.pending.take() {
            open.forget_read_ahead();
            if let Err(e) = open.client.write_file_at(&mut open.handle, at, &data) {
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
    pub(crate) fn flush(&mut self, fh: u64) -> Result<(), Errno> {
        self.send_pending(fh)?;
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        open.client
            .flush_file(&mut open.handle)
            .map_err(|e| errno(&e))
    }

    /// Sends and records every open file of `ino` (before its size is looked at or
    /// changed by a path operation).
    pub(crate) fn flush_ino(&mut self, ino: u64) -> Result<(), Errno> {
        self.flush_where(|o| o.ino == ino)
    }

    /// Sends and records every open file at or below `path`.
    pub(crate) fn flush_below(&mut self, path: &str) -> Result<(), Errno> {
        let below = format!("{}/", path.trim_end_matches('/'));
        self.flush_where(|o| o.handle.path() == path || o.handle.path().starts_with(&below))
    }

    pub(crate) fn flush_where(&mut self, which: impl Fn(&Open) -> bool) -> Result<(), Errno> {
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

    pub(crate) fn add_open(&mut self, ino: u64, handle: FileHandle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.open.insert(
            fh,
            Open {
                ino,
                handle,
                client: Arc::clone(&self.client),
                pending: None,
                ahead: None,
                prefetch: None,
                next_read: 0,
                error: None,
                mode_at_close: None,
            },
        );
        fh
    }

    pub(crate) fn read(&mut self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        self.send_pending(fh)?;
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        let client = Arc::clone(&open.client);
        let out = Self::read_open(&client, open, offset, size)?;
        Self::start_prefetch(&client, open);
        Ok(out)
    }

    /// Starts fetching the window after the read-ahead when the reader is sequential, the
    /// file goes on past it, and no fetch is running.
    pub(crate) fn start_prefetch(client: &Arc<Client>, open: &mut Open) {
        let Some((at, data)) = &open.ahead else {
            return;
        };
        let next = at + data.len() as u64;
        if open.prefetch.is_some() || open.next_read < *at || next >= open.handle.size() {
            return;
        }
        let client = Arc::clone(client);
        let handle = open.handle.clone();
        let spawned = std::thread::Builder::new()
            .name("maat-prefetch".into())
            .spawn(move || client.read_file_at(&handle, next, READ_AHEAD_BYTES as usize));
        // No thread to be had: the next window is read when it is asked for.
        if let Ok(thread) = spawned {
            open.prefetch = Some(Prefetch {
                offset: next,
                thread,
            });
        }
    }

    pub(crate) fn read_open(
        client: &Client,
        open: &mut Open,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let want = u64::from(size);
        let beyond_ahead = open
            .ahead
            .as_ref()
            .is_none_or(|(at, data)| offset >= at + data.len() as u64);
        if beyond_ahead && open.prefetch.as_ref().is_some_and(|p| p.offset == offset) {
            // The reader reached the window being prefetched: it becomes the read-ahead
            // (a failed fetch is simply read again below, where its error shows).
            if let Some(Ok(Ok(data))) = open.prefetch.take().map(|p| p.thread.join()) {
                open.ahead = Some((offset, data));
            }
        }
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
        // A jump leaves the prefetch behind.
        open.prefetch = None;
        let data = client
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

    pub(crate) fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let Some(open) = self.open.get_mut(&fh) else {
            return Err(Errno::EBADF);
        };
        if !open.handle.writable() {
            return Err(Errno::EBADF);
        }
        if let Some(e) = open.error {
            return Err(e);
        }
        open.forget_read_ahead();
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

    pub(crate) fn truncate(&mut self, ino: u64, fh: Option<u64>, size: u64) -> Result<(), Errno> {
        self.flush_ino(ino)?;
        let path = self.path(ino)?;
        let fh = fh.filter(|fh| self.open.get(fh).is_some_and(|o| o.handle.writable()));
        let cut = match fh {
            Some(fh) => {
                let Some(open) = self.open.get_mut(&fh) else {
                    return Err(Errno::EBADF);
                };
                open.client.truncate_file(&mut open.handle, size)
            }
            None => {
                let flags = OpenFlags {
                    write: true,
                    ..OpenFlags::READ
                };
                let mut handle = self.client.open_file(&path, flags).map_err(|e| errno(&e))?;
                self.client.truncate_file(&mut handle, size)
            }
        };
        // Also after a failure: part of the file may be cut already.
        self.resized(ino);
        cut.map_err(|e| errno(&e))?;
        // Every other open of the file in this mount (its writes sent and recorded by
        // `flush_ino` above) sees the new size: the kernel truncates an `O_TRUNC` open
        // by path, then writes through that open.
        for (other, open) in self.open.iter_mut() {
            if open.ino == ino && Some(*other) != fh {
                open.handle.resized_elsewhere(size);
            }
        }
        Ok(())
    }

    /// `ino` was cut (a truncate, an `O_TRUNC` open): what its open files read ahead is
    /// gone, so that they see the new size.
    pub(crate) fn resized(&mut self, ino: u64) {
        for open in self.open.values_mut().filter(|o| o.ino == ino) {
            open.forget_read_ahead();
        }
    }
}
