//! Byte-range access to open files: what the FUSE mount and the Python package build on.
//!
//! `put` and `get` move whole files. A [`FileHandle`] reads and writes at any offset,
//! across stripes, with the stripes of one call in flight at once, and truncates. Sizes
//! follow close-to-open consistency, as NFS does: a handle sees the size recorded at the
//! MDS when it was opened plus its own writes, and records its size at the MDS on
//! [`Client::flush_file`] (and at once on [`Client::truncate_file`]).
//!
//! A file never has holes: a write past the end first fills the gap with zeros, so every
//! stripe inside the recorded size exists (`get` treats a missing one as lost data).

use crate::data::remove_request;
use crate::{Client, ClientError, Opened, Result};
use maat_proto::limits::FILE_BYTES_MAX;
use maat_proto::msg::{Access, ErrorCode, FileStat, OsdCommand, OsdRequest, OsdResponse};
use maat_proto::msg::{WireError, STRIPE_UNIT_BYTES};

/// How to open a file: the flags of open(2) that Maat honours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Open for writing as well as reading (Maat has no write-only access).
    pub write: bool,
    /// Create the file with these permission bits if it does not exist.
    pub create: Option<u16>,
    /// With `create`: refuse with `AlreadyExists` if the file exists. The check is a
    /// stat before the open: two clients racing to create the same path may both win.
    pub exclusive: bool,
    /// Empty the file on open (needs `write`).
    pub truncate: bool,
}

impl OpenFlags {
    /// Read only.
    pub const READ: OpenFlags = OpenFlags {
        write: false,
        create: None,
        exclusive: false,
        truncate: false,
    };

    /// Reading and writing an existing file, as it is.
    pub const READ_WRITE: OpenFlags = OpenFlags {
        write: true,
        create: None,
        exclusive: false,
        truncate: false,
    };
}

/// An open file: its identity, capability and current size.
#[derive(Debug, Clone)]
pub struct FileHandle {
    path: String,
    pub(crate) opened: Opened,
    pub(crate) size: u64,
    writable: bool,
    pub(crate) dirty: bool,
    /// Encrypted files: stripes written through this handle and not sent yet, whole.
    pub(crate) pending: std::collections::BTreeMap<u32, Vec<u8>>,
    /// Encrypted files: stripes sent since the last flush and their generations.
    pub(crate) written: Vec<(u32, u32, u64)>,
    /// A file this handle created encrypted: its lockbox, recorded with the size at the
    /// first flush (`SetSizeLockbox`).
    pub(crate) first_lockbox: Option<Vec<u8>>,
}

impl FileHandle {
    /// The path it was opened by.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Attributes at open time (the size is [`FileHandle::size`]).
    pub fn stat(&self) -> &FileStat {
        &self.opened.stat
    }

    /// The size as this handle sees it: recorded at open, then its own writes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether it was opened for writing.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The file was renamed to `path`: its size is recorded under the new name (the MDS
    /// checks that the name still denotes this file's id).
    pub fn renamed(&mut self, path: &str) {
        self.path = path.to_string();
    }

    /// Whether it has written since its size was last recorded at the MDS.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Another handle, or a truncate by path, set the file's size to `size` after this
    /// handle's writes were sent and recorded: this handle's view follows, so that it
    /// neither writes back nor reads stripes that are gone (issue 44: `echo ab > f` on a
    /// mount, whose kernel opens, then truncates by path, then writes through the open,
    /// fetched a removed stripe to merge its write into and left the file empty).
    pub fn resized_elsewhere(&mut self, size: u64) {
        self.cut_pending(size);
        self.size = size;
        self.opened.stat.size = size;
    }

    /// Drops the kept stripes (encrypted files) past `size` and cuts the last one there.
    pub(crate) fn cut_pending(&mut self, size: u64) {
        let keep = crate::stripes_for(size);
        self.pending.retain(|stripe, _| *stripe < keep);
        let within = (size % STRIPE_UNIT_BYTES) as usize;
        if within != 0 {
            if let Some(last) = self.pending.get_mut(&(keep - 1)) {
                last.truncate(within);
            }
        }
    }
}

pub use crate::limits::FILE_IO_BYTES_MAX;

use crate::limits::ZERO_FILL_CHUNK;

impl Client {
    /// Opens `path` for byte-range I/O.
    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<FileHandle> {
        let access = if flags.write {
            Access::ReadWrite
        } else {
            Access::Read
        };
        // Close-to-open consistency: the size and file id come from the MDS now, not
        // from the client's cache of read opens (which may be minutes old).
        self.forget_opened_path(path);
        // A file this call creates, the cluster encrypting new files, is created
        // encrypted with its lockbox to come, recorded with its size (SPEC H5).
        let mut opened = match flags.create {
            // O_CREAT | O_EXCL: made by this call or refused, in one step at the MDS
            // (issue 44: a stat first let two creators both succeed).
            Some(mode) if flags.exclusive => {
                let sealed = flags.write && self.seals_new_files(None)?;
                self.stats.lock().capability_cache_misses += 1;
                self.opened_from(self.mds_call(maat_proto::msg::MdsRequest::OpenExclusive {
                    path: path.into(),
                    access,
                    mode,
                    sealed,
                })?)?
            }
            Some(mode) if flags.write && self.seals_new_files(None)? => {
                self.open_sealed(path, mode)?
            }
            _ => self.open(path, access, flags.create)?,
        };
        let first_lockbox = match flags.write {
            true => self.seal_pending(&mut opened)?,
            false => None,
        };
        let pending = opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending());
        if flags.write && first_lockbox.is_none() && (flags.create.is_some() || pending) {
            // A file this call created (empty, ours) is encrypted as the cluster says
            // (an MDS before `OpenSealed`).
            self.encrypt_if_new(path, &mut opened, None)?;
        }
        if opened.stat.is_dir {
            return Err(ClientError::Refused(WireError::new(
                ErrorCode::IsADirectory,
                path,
            )));
        }
        let mut handle = FileHandle {
            path: path.to_string(),
            size: opened.stat.size,
            opened,
            writable: flags.write,
            // A first lockbox is recorded at the first flush, written to or not.
            dirty: first_lockbox.is_some(),
            pending: Default::default(),
            written: Vec::new(),
            first_lockbox,
        };
        if flags.truncate {
            self.truncate_file(&mut handle, 0)?;
        }
        Ok(handle)
    }

    /// A handle for byte-range reads of a file opened otherwise (a job's, from
    /// [`Client::openfh`]): reads of an encrypted file take keys for the ranges read
    /// only, as the open's key-range permit allows (SPEC H6).
    pub fn reading_handle(&self, path: &str, opened: Opened) -> FileHandle {
        FileHandle {
            path: path.to_string(),
            size: opened.stat.size,
            opened,
            writable: false,
            dirty: false,
            pending: Default::default(),
            written: Vec::new(),
            first_lockbox: None,
        }
    }

    /// Reads up to `len` bytes at `offset` (short at the end of the file, empty past it).
    ///
    /// A handle outlives its open's capability when it sits idle past its lifetime (no
    /// I/O renewed it, SPEC M8), and its open's view of the file when another writer
    /// replaces it: then the file is opened again (the MDS decides on the permissions as
    /// they are now) and the read made once more under that open. Found by the simulator
    /// (issue 39): such reads failed `CapabilityExpired`, or an encrypted file's block
    /// "fails authentication", for good.
    ///
    /// The open made again can expire in turn while a slow read goes on (answers lost
    /// and late, each waited for): then it is made again, [`STALE_REOPENS_MAX`] times at
    /// most. Found by the simulator's soak (seed 1795768784292664129): the read under
    /// the open made again took 20 s, longer than its capability's lifetime. Expiries
    /// and changed views have a budget each: a file whose blocks failed to authenticate
    /// three times (a write that failed on some copies) still gets its expired open made
    /// again, and the answer is then what the file holds, not "capability expired"
    /// (soak seed 1795786300935978245).
    pub fn read_file_at(&self, handle: &FileHandle, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut result = self.read_file_at_with(handle, &handle.opened, handle.size, offset, len);
        let (mut expired, mut changed) = (0, 0);
        loop {
            match result {
                Err(e) if stale_open(&e) && !handle.dirty && handle.pending.is_empty() => {
                    let spent = if expired_capability(&e) {
                        &mut expired
                    } else {
                        &mut changed
                    };
                    if *spent == STALE_REOPENS_MAX {
                        return Err(e);
                    }
                    *spent += 1;
                    let access = if handle.writable {
                        Access::ReadWrite
                    } else {
                        Access::Read
                    };
                    self.forget_opened_path(&handle.path);
                    let fresh = self.open(&handle.path, access, None)?;
                    if fresh.stat.id != handle.opened.stat.id {
                        // Another file under the path now: this handle's file is gone.
                        return Err(e);
                    }
                    // The handle wrote nothing: the file's size is the one the MDS
                    // records now (a file another writer cut reads short, as POSIX has
                    // it).
                    let size = fresh.stat.size;
                    result = self.read_file_at_with(handle, &fresh, size, offset, len);
                }
                r => return r,
            }
        }
    }

    /// One read of [`Client::read_file_at`] under `opened`, of a file of `size` bytes.
    fn read_file_at_with(
        &self,
        handle: &FileHandle,
        opened: &Opened,
        size: u64,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let len = len.min(FILE_IO_BYTES_MAX) as u64;
        let end = size.min(offset.saturating_add(len));
        if offset >= end {
            return Ok(Vec::new());
        }
        if opened.stat.crypt.is_some() {
            return self.crypt_read(handle, opened, size, offset, end);
        }
        let pieces = pieces(offset, end);
        let mut calls = Vec::with_capacity(pieces.len());
        for &(stripe, within, piece_len) in &pieces {
            let (osd, object) = self.stripe_target(opened, stripe)?;
            calls.push((
                osd,
                OsdRequest {
                    capability: opened.capability.clone(),
                    command: OsdCommand::Read {
                        object,
                        offset: within,
                        length: piece_len as u32,
                    },
                },
            ));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (answer, &(stripe, _, piece_len)) in
            self.windowed(opened, calls)?.into_iter().zip(&pieces)
        {
            let (data, missing) = match answer {
                Ok(OsdResponse::Data(d)) => (d, false),
                Ok(_) => return Err(self.bad("osd", "unexpected answer")),
                Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {
                    (Vec::new(), true)
                }
                Err(e) => return Err(e),
            };
            if (data.len() as u64) < piece_len {
                // A missing stripe inside the size recorded at open is lost data, as `get`
                // says; anything else short is a file another writer cut: a short read.
                let start = u64::from(stripe) * STRIPE_UNIT_BYTES;
                if missing && start < opened.stat.size {
                    return Err(ClientError::DataMissing(format!(
                        "{}: stripe {stripe} of file {} not found",
                        handle.path, handle.opened.stat.id
                    )));
                }
                out.extend_from_slice(&data);
                break;
            }
            out.extend_from_slice(&data);
        }
        Ok(out)
    }

    /// Writes `data` at `offset` (a gap past the end is filled with zeros first). The
    /// size is recorded at the MDS by [`Client::flush_file`].
    pub fn write_file_at(&self, handle: &mut FileHandle, offset: u64, data: &[u8]) -> Result<()> {
        if !handle.writable {
            return Err(ClientError::NotOpenForWriting(handle.path.clone()));
        }
        if data.len() > FILE_IO_BYTES_MAX {
            return Err(ClientError::Refused(WireError::new(
                ErrorCode::TooLarge,
                format!(
                    "a write of {} bytes (at most {FILE_IO_BYTES_MAX} per call)",
                    data.len()
                ),
            )));
        }
        let end = within_limit(offset, data.len() as u64)?;
        if handle.opened.stat.crypt.is_some() {
            return self.crypt_write(handle, offset, data);
        }
        if offset > handle.size {
            self.zero_fill(handle, offset)?;
        }
        self.write_pieces(handle, offset, data)?;
        if end > handle.size {
            handle.size = end;
        }
        handle.dirty = true;
        Ok(())
    }

    /// Sets the size to `size`: stripes past it are removed and the last one cut, or the
    /// file grows with zeros. Recorded at the MDS at once.
    pub fn truncate_file(&self, handle: &mut FileHandle, size: u64) -> Result<()> {
        if !handle.writable {
            return Err(ClientError::NotOpenForWriting(handle.path.clone()));
        }
        within_limit(size, 0)?;
        if handle.opened.stat.crypt.is_some() {
            self.crypt_truncate(handle, size)?;
        } else if size > handle.size {
            self.zero_fill(handle, size)?;
        } else {
            let opened = handle.opened.clone();
            let keep = crate::stripes_for(size);
            // The stripes past the new end this handle knows of go at once; then each next
            // one until one is missing, since another writer (or one that failed before
            // recording its size) may have left stripes past what this handle saw. A
            // truncated byte must never be readable again.
            let known = crate::stripes_for(handle.size).max(keep);
            let mut calls = Vec::new();
            let within = size % STRIPE_UNIT_BYTES;
            if within != 0 {
                // Cut the last kept stripe (a write of nothing that replaces sets its
                // length), whatever this handle thinks is past it.
                let (osd, object) = self.stripe_target(&opened, keep - 1)?;
                calls.push((
                    osd,
                    OsdRequest {
                        capability: opened.capability.clone(),
                        command: OsdCommand::Write {
                            object,
                            offset: within,
                            data: Vec::new(),
                            replace: true,
                        },
                    },
                ));
            }
            let mut cut_missing = false;
            for answer in self.windowed(&opened, calls)? {
                match answer {
                    Ok(_) => {}
                    Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {
                        cut_missing = true;
                    }
                    Err(e) => return Err(e),
                }
            }
            if cut_missing {
                // No copy holds the new last stripe (another writer cut the file shorter
                // than this handle knows): it is made of zeros up to the new size, as the
                // cut made it before OSDs refused to cut what they do not hold.
                let (osd, object) = self.stripe_target(&opened, keep - 1)?;
                let zeros = OsdRequest {
                    capability: opened.capability.clone(),
                    command: OsdCommand::Write {
                        object,
                        offset: 0,
                        data: vec![0u8; within as usize],
                        replace: true,
                    },
                };
                self.data_call(&opened, osd, zeros)?;
            }
            self.remove_stripes_range(&opened, keep, known)?;
            handle.size = size;
        }
        handle.dirty = true;
        self.flush_file(handle)
    }

    /// Records the handle's size at the MDS if it wrote since the last record.
    pub fn flush_file(&self, handle: &mut FileHandle) -> Result<()> {
        if !handle.dirty {
            return Ok(());
        }
        if handle.size % STRIPE_UNIT_BYTES == 0 && handle.size > handle.opened.stat.size {
            // The file grows onto a stripe boundary: a read then looks at the next stripe,
            // which only a write that failed can have left (its size never recorded), and
            // would read it as the file's. It goes first, so that a failure here records
            // nothing. (Found by the replication simulation, seed 139111843233821: a
            // truncation that grew a file read a failed put's stripe.)
            let opened = handle.opened.clone();
            self.remove_stripes_from(&opened, crate::stripes_for(handle.size))?;
        }
        if handle.opened.stat.crypt.is_some() {
            self.crypt_flush(handle)?;
        } else {
            self.set_size(&handle.path, &handle.opened, handle.size)?;
        }
        self.forget_opened_path(&handle.path);
        handle.opened.stat.size = handle.size;
        handle.dirty = false;
        Ok(())
    }

    fn zero_fill(&self, handle: &mut FileHandle, to: u64) -> Result<()> {
        let mut at = handle.size;
        while at < to {
            let n = (to - at).min(ZERO_FILL_CHUNK - at % STRIPE_UNIT_BYTES);
            self.write_pieces(handle, at, &vec![0u8; n as usize])?;
            at += n;
            handle.size = at;
            handle.dirty = true;
        }
        Ok(())
    }

    fn write_pieces(&self, handle: &FileHandle, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset + data.len() as u64;
        let mut calls = Vec::new();
        let mut at = 0usize;
        for (stripe, within, len) in pieces(offset, end) {
            let (osd, object) = self.stripe_target(&handle.opened, stripe)?;
            let piece = data.get(at..at + len as usize).unwrap_or_default().to_vec();
            at += len as usize;
            calls.push((
                osd,
                OsdRequest {
                    capability: handle.opened.capability.clone(),
                    command: OsdCommand::Write {
                        object,
                        offset: within,
                        data: piece,
                        replace: false,
                    },
                },
            ));
        }
        for answer in self.windowed(&handle.opened, calls)? {
            answer?;
        }
        Ok(())
    }

    /// [`Client::parallel`] a window of stripes at a time (memory and connections bounded
    /// as `put` and `get` bound them).
    /// Removes stripes `keep..known` at once, then each next one until one is missing
    /// (another writer, or one that failed before recording its size, may have left
    /// stripes past what a handle saw: a truncated byte must never be readable again).
    pub(crate) fn remove_stripes_range(
        &self,
        opened: &Opened,
        keep: u32,
        known: u32,
    ) -> Result<()> {
        let mut calls = Vec::new();
        for stripe in keep..known {
            let (osd, object) = self.stripe_target(opened, stripe)?;
            calls.push((osd, remove_request(opened, object)));
        }
        for answer in self.windowed(opened, calls)? {
            match answer {
                Ok(_) => {}
                Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {}
                Err(e) => return Err(e),
            }
        }
        // (A removal of a missing object succeeds, so this probes with attributes.)
        self.remove_stripes_from(opened, known)
    }

    pub(crate) fn windowed(
        &self,
        opened: &Opened,
        mut calls: Vec<(u64, OsdRequest)>,
    ) -> Result<Vec<Result<OsdResponse>>> {
        let window = self.stripes_in_flight()? as usize;
        let mut answers = Vec::with_capacity(calls.len());
        while !calls.is_empty() {
            let rest = calls.split_off(window.min(calls.len()));
            answers.extend(self.parallel(opened, calls)?);
            calls = rest;
        }
        Ok(answers)
    }
}

/// `offset + len`, refused with `TooLarge` past the largest file the MDS records (before
/// any byte is sent: a write at 10 TiB must not zero-fill first).
fn within_limit(offset: u64, len: u64) -> Result<u64> {
    match offset.checked_add(len) {
        Some(end) if end <= FILE_BYTES_MAX => Ok(end),
        _ => Err(ClientError::Refused(WireError::new(
            ErrorCode::TooLarge,
            format!("bytes {offset}+{len}: files are limited to {FILE_BYTES_MAX} bytes"),
        ))),
    }
}

/// The stripe pieces of bytes `offset..end`: (stripe, offset within it, length).
pub(crate) fn pieces(offset: u64, end: u64) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    let mut at = offset;
    while at < end {
        let stripe = at / STRIPE_UNIT_BYTES;
        let within = at % STRIPE_UNIT_BYTES;
        let len = (STRIPE_UNIT_BYTES - within).min(end - at);
        out.push((stripe as u32, within, len));
        at += len;
    }
    out
}

/// Whether a handle's read failed because its open is out of date: its capability
/// expired, or the file changed under it (an encrypted block from a newer write, a stripe
/// a shorter write removed).
/// How many times one read through a handle opens its file again ([`Client::read_file_at`]).
const STALE_REOPENS_MAX: usize = 3;

fn expired_capability(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Refused(w) if w.code == ErrorCode::CapabilityExpired
    )
}

fn stale_open(e: &ClientError) -> bool {
    expired_capability(e)
        || matches!(
            e,
            ClientError::Integrity { .. } | ClientError::DataMissing(_)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_at_stripe_boundaries_and_cover_the_range() {
        let s = STRIPE_UNIT_BYTES;
        assert_eq!(pieces(0, 0), vec![]);
        assert_eq!(pieces(10, 20), vec![(0, 10, 10)]);
        assert_eq!(pieces(s - 1, s + 1), vec![(0, s - 1, 1), (1, 0, 1)]);
        assert_eq!(
            pieces(5, 2 * s + 7),
            vec![(0, 5, s - 5), (1, 0, s), (2, 0, 7)]
        );
        let total: u64 = pieces(3, 5 * s + 9).iter().map(|p| p.2).sum();
        assert_eq!(total, 5 * s + 6);
    }
}
