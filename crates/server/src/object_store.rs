//! The OSD's [`ObjectStore`] on local files (SPEC T5).
//!
//! Layout under the data directory:
//!
//! ```text
//! objects/p<partition hex>/<file id, 16 hex>.<stripe, 8 hex>        object data
//! objects/p<partition hex>/<file id, 16 hex>.<stripe, 8 hex>.attr   policy tag + user attributes
//! ```
//!
//! Crash safety: a write is acknowledged only after `fsync` of the data (and, when a name
//! was created or replaced, of the directory). Whole-object writes go to a temporary file
//! that is fsynced and then renamed over the object, so a reader sees the old or the new
//! object, never a mix. Size and modification time come from the file itself, so a write
//! needs no second fsync for attributes.
//!
//! Kept digests (SPEC T1 ALLDATA): a whole-object write whose envelope check computed the
//! data's digest leaves a *sealed* file (mode 0400 instead of 0600) and keeps the digest in
//! memory, by object and inode. A read of that whole file is answered with the digest, its
//! data sent straight from the file. What makes this safe: **a sealed file is never
//! written in place.** A write in place (a byte range, an append, a truncation) that meets
//! a sealed file copies it, changes the copy and renames the copy into place
//! (copy-on-write) under the object's lock, so a reader holding the sealed file sends
//! exactly the bytes its digest is of. Digests live in memory only (bounded); after a
//! restart, answers about sealed files are sealed from their data, as before.

mod attributes;
mod conditional;
mod faulty;
mod in_place;
mod kept;

use crate::limits::OBJECT_LOCKS;
use attributes::StoredAttributes;
use kept::{ctime, Kept};
use maat_osd::limits::READ_BUFFER_SLACK_BYTES;
use maat_osd::{
    AdminAuthorized, Authorized, FileRange, ObjectRead, ObjectStore, ReadOut, StoreError,
};
use maat_proto::msg::{ObjectAttributes, ObjectId, DATA_PARTITION};
use maat_proto::protection::DataDigest;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Objects in a directory tree with fsync before every acknowledgement.
pub struct FileObjectStore {
    root: PathBuf,
    temp_counter: AtomicU64,
    /// Digests kept from whole-object writes, by object, with the sealed file they are of.
    kept: Mutex<HashMap<ObjectId, Kept>>,
    /// Per-object locks (striped): held to rename a new file over an object, and to decide
    /// whether a write in place must copy a sealed file first.
    locks: [Mutex<()>; OBJECT_LOCKS],
    /// The clock a write dates its object by (milliseconds); `None`: the file system's
    /// own, which is the system clock (a simulation gives its clock, so that an object's
    /// modification time is the same in every run of a seed).
    clock: Option<crate::Clock>,
    /// A simulated disk's faults.
    #[cfg(feature = "sim")]
    faults: Option<std::sync::Arc<crate::faults::StorageFaults>>,
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Objects and attribute files: readable by the OSD's account only.
const OBJECT_FILE_MODE: u32 = 0o600;
/// A sealed object file (its digest may be kept): never written in place.
const SEALED_FILE_MODE: u32 = 0o400;

fn is_sealed(meta: &fs::Metadata) -> bool {
    meta.mode() & 0o777 == SEALED_FILE_MODE
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Creates `dir` and its missing parents readable by the OSD's account only.
fn private_dirs(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl FileObjectStore {
    /// The store, dating the objects it writes by `clock` (see the field).
    pub fn dated_by(mut self, clock: Option<crate::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The store, on a disk with `faults` (a simulation's).
    #[cfg(feature = "sim")]
    pub fn with_faults(
        mut self,
        faults: Option<std::sync::Arc<crate::faults::StorageFaults>>,
    ) -> Self {
        self.faults = faults;
        self
    }

    /// Dates `file` by the store's clock, if it has one.
    fn date(&self, file: &File) -> std::io::Result<()> {
        let Some(clock) = &self.clock else {
            return Ok(());
        };
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_millis(clock().0))
    }

    /// Opens the store under `data_dir`, creating the data partition, and removes
    /// temporary files a crash left behind.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let root = data_dir.join("objects");
        let store = Self {
            root,
            temp_counter: AtomicU64::new(0),
            kept: Mutex::new(HashMap::new()),
            locks: std::array::from_fn(|_| Mutex::new(())),
            clock: None,
            #[cfg(feature = "sim")]
            faults: None,
        };
        private_dirs(&store.partition_dir(DATA_PARTITION))?;
        // Make the directory chain itself durable on first start.
        sync_dir(&store.partition_dir(DATA_PARTITION))?;
        sync_dir(&store.root)?;
        sync_dir(data_dir)?;
        for partition in fs::read_dir(&store.root)? {
            let partition = partition?.path();
            if !partition.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&partition)? {
                let path = entry?.path();
                let is_temp = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(".tmp-"));
                if is_temp {
                    fs::remove_file(&path)?;
                }
            }
        }
        Ok(store)
    }

    fn partition_dir(&self, partition: u64) -> PathBuf {
        self.root.join(format!("p{partition:x}"))
    }

    fn object_path(&self, o: ObjectId) -> PathBuf {
        self.partition_dir(o.partition)
            .join(format!("{:016x}.{:08x}", o.file, o.stripe))
    }

    fn attr_path(&self, o: ObjectId) -> PathBuf {
        self.partition_dir(o.partition)
            .join(format!("{:016x}.{:08x}.attr", o.file, o.stripe))
    }

    fn check_partition(&self, o: ObjectId) -> Result<PathBuf, StoreError> {
        let dir = self.partition_dir(o.partition);
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(StoreError::Partition("no such partition"))
        }
    }

    fn temp_path(&self, dir: &Path) -> PathBuf {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        dir.join(format!(".tmp-{}-{n}", std::process::id()))
    }

    /// The lock of object `o` (shared with the other objects of its stripe).
    fn object_lock(&self, o: ObjectId) -> MutexGuard<'_, ()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        o.hash(&mut h);
        let i = (h.finish() % OBJECT_LOCKS as u64) as usize;
        #[allow(clippy::indexing_slicing)] // i < OBJECT_LOCKS, the array's length
        lock(&self.locks[i])
    }

    /// Writes `data` to a temporary file, fsyncs it, renames it to `target` and fsyncs
    /// the directory. `object`: `target` is that object's file, renamed under its lock
    /// (so that a copy-on-write in flight cannot put an older copy back over it), with,
    /// when its digest is given, the new file sealed and the digest kept (right after the
    /// rename, under the lock, with the change time the rename gave the file).
    ///
    /// `expect`: rename only if `target`'s bytes still have this digest (`Some(None)`:
    /// only if it does not exist), decided under the object's lock, else
    /// [`StoreError::Changed`] and nothing changed (see [`ObjectStore::replace_if`]).
    fn replace_file(
        &self,
        dir: &Path,
        target: &Path,
        data: &[u8],
        object: Option<(ObjectId, Option<&DataDigest>)>,
        expect: Option<Option<&[u8; 32]>>,
    ) -> Result<(), StoreError> {
        let temp = self.temp_path(dir);
        let digest = object.and_then(|(_, d)| d.copied());
        let mode = match digest {
            Some(_) => SEALED_FILE_MODE,
            None => OBJECT_FILE_MODE,
        };
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&temp)?;
            f.write_all(data)?;
            self.date(&f)?;
            f.sync_all()?;
            Ok::<_, std::io::Error>(f.metadata()?.ino())
        })();
        let renamed = written.map_err(StoreError::from).and_then(|inode| {
            let Some((o, _)) = object else {
                return Ok(fs::rename(&temp, target)?);
            };
            let _object = self.object_lock(o);
            if let Some(expect) = expect {
                if conditional::stored_digest(target)?.as_ref() != expect {
                    return Err(StoreError::Changed);
                }
            }
            self.forget(o);
            fs::rename(&temp, target)?;
            // Kept once in place: a rename changes the file's change time, and the time
            // kept is the one a later change outside Maat would move.
            if let (Some(digest), Ok(meta)) = (digest, fs::metadata(target)) {
                if meta.ino() == inode {
                    let len = data.len() as u64;
                    let ctime = ctime(&meta);
                    self.keep(
                        o,
                        Kept {
                            inode,
                            len,
                            ctime,
                            digest,
                        },
                    );
                }
            }
            Ok(())
        });
        if let Err(e) = renamed {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        sync_dir(dir)?;
        Ok(())
    }
}

impl ObjectStore for FileObjectStore {
    fn create(&self, auth: &Authorized) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(OBJECT_FILE_MODE)
            .open(self.object_path(o))
        {
            Ok(f) => f.sync_all()?,
            // Never truncate: a write may have landed in between.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        // Also when it existed: its creator may not have made the entry durable yet.
        sync_dir(&dir)?;
        Ok(())
    }

    fn remove(&self, auth: &Authorized) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        {
            let _object = self.object_lock(o);
            for p in [self.object_path(o), self.attr_path(o)] {
                match fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
            self.forget(o);
        }
        sync_dir(&dir)?;
        Ok(())
    }

    fn read(&self, auth: &Authorized, offset: u64, length: u32) -> Result<Vec<u8>, StoreError> {
        match self.read_file(auth, offset, length, u64::MAX)? {
            Some(ObjectRead {
                out: ReadOut::Bytes(d),
                ..
            }) => Ok(d),
            // (Never: no file range is as long as `u64::MAX`.)
            _ => Err(StoreError::Io(std::io::Error::other(
                "the store gave a file range for a read into memory",
            ))),
        }
    }

    fn read_file(
        &self,
        auth: &Authorized,
        offset: u64,
        length: u32,
        from_file_min: u64,
    ) -> Result<Option<ObjectRead>, StoreError> {
        let o = auth.object();
        let fault = self.read_fault();
        if fault == Some(crate::faults::ReadFault::Failed) {
            return Err(crate::faults::io_error("the read failed").into());
        }
        // A read the disk may corrupt is read into memory, where the fault strikes.
        let from_file_min = if fault.is_some() {
            u64::MAX
        } else {
            from_file_min
        };
        let file = match File::open(self.object_path(o)) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(StoreError::NotFound),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        let size = meta.len();
        let end = size.min(offset.saturating_add(u64::from(length)));
        let len = end.saturating_sub(offset);
        // Only of the whole file: a digest is of what one write wrote.
        let digest = if offset == 0 && len == size {
            self.kept_digest(o, &file, &meta)?
        } else {
            None
        };
        if len >= from_file_min {
            let out = ReadOut::File(FileRange { file, offset, len });
            return Ok(Some(ObjectRead { out, digest }));
        }
        // Into fresh capacity, not zeroed first (the file is this read's own, so its
        // cursor may move). At most `length`, a u32.
        let mut buf = Vec::with_capacity(len as usize + READ_BUFFER_SLACK_BYTES);
        (&file).seek(SeekFrom::Start(offset))?;
        (&file).take(len).read_to_end(&mut buf)?;
        if buf.len() as u64 != len {
            // Cut shorter since its size was read: as a read past the end would.
            return Err(std::io::Error::from(ErrorKind::UnexpectedEof).into());
        }
        if let Some(crate::faults::ReadFault::Flipped(bit)) = fault {
            crate::faults::flip(&mut buf, bit);
        }
        let out = ReadOut::Bytes(buf);
        Ok(Some(ObjectRead { out, digest }))
    }

    fn write(
        &self,
        auth: &Authorized,
        offset: u64,
        data: &[u8],
        replace: bool,
        digest: Option<&DataDigest>,
    ) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        // A cut (a replacing write past 0: what a truncation sends) of an object this
        // store does not hold is refused, not made: made, it would be a copy of zeros
        // where the object's bytes belong, taken as current (a copy whose disk was lost;
        // found by the replication simulation, seed 103).
        let cut = replace && offset > 0;
        if cut {
            // (Also decided under the object's lock below, on the path without faults;
            // an error other than "not found" is the disk's, never taken as missing.)
            match fs::symlink_metadata(self.object_path(o)) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => return Err(StoreError::NotFound),
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(fault) = self.write_fault(data.len()) {
            let write = |f: &File, d: &[u8]| f.write_all_at(d, offset);
            return self.faulty_write(o, &dir, fault, write, data, replace && offset == 0);
        }
        if replace && offset == 0 {
            let path = self.object_path(o);
            return self.replace_file(&dir, &path, data, Some((o, digest)), None);
        }
        self.write_in_place(o, &dir, false, !cut, |f| {
            f.write_all_at(data, offset)?;
            if replace {
                f.set_len(offset.saturating_add(data.len() as u64))?;
            }
            Ok(())
        })
    }

    fn digest(&self, auth: &Authorized) -> Result<[u8; 32], StoreError> {
        let o = auth.object();
        self.check_partition(o)?;
        conditional::stored_digest(&self.object_path(o))?.ok_or(StoreError::NotFound)
    }

    fn replace_if(
        &self,
        auth: &Authorized,
        expect: Option<&[u8; 32]>,
        data: &[u8],
        digest: Option<&DataDigest>,
    ) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        if let Some(fault) = self.write_fault(data.len()) {
            let write = |f: &File, d: &[u8]| f.write_all_at(d, 0);
            return self.faulty_write(o, &dir, fault, write, data, true);
        }
        let path = self.object_path(o);
        self.replace_file(&dir, &path, data, Some((o, digest)), Some(expect))
    }

    fn append(&self, auth: &Authorized, data: &[u8]) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        if let Some(fault) = self.write_fault(data.len()) {
            let append = |f: &File, d: &[u8]| {
                let end = f.metadata()?.len();
                f.write_all_at(d, end)
            };
            return self.faulty_write(o, &dir, fault, append, data, false);
        }
        // In place the file is open for appending; a copy's cursor is at its end, after
        // the copy.
        self.write_in_place(o, &dir, true, true, |mut f| f.write_all(data))
    }

    fn attributes(&self, auth: &Authorized) -> Result<ObjectAttributes, StoreError> {
        let o = auth.object();
        let meta = match fs::metadata(self.object_path(o)) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(StoreError::NotFound),
            Err(e) => return Err(e.into()),
        };
        let mtime = meta
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let stored: StoredAttributes = match fs::read(self.attr_path(o)) {
            Ok(bytes) => StoredAttributes::decode(&bytes)?,
            Err(e) if e.kind() == ErrorKind::NotFound => StoredAttributes::default(),
            Err(e) => return Err(e.into()),
        };
        Ok(ObjectAttributes {
            size: meta.len(),
            mtime,
            policy_tag: stored.policy_tag,
            user: stored.user,
        })
    }

    fn set_attributes(
        &self,
        auth: &Authorized,
        policy_tag: u32,
        user: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError> {
        let o = auth.object();
        let dir = self.check_partition(o)?;
        if !self.object_path(o).exists() {
            return Err(StoreError::NotFound);
        }
        let bytes = StoredAttributes {
            policy_tag,
            user: user.to_vec(),
        }
        .encode()?;
        self.replace_file(&dir, &self.attr_path(o), &bytes, None, None)
    }

    fn list(&self, _auth: &AdminAuthorized, partition: u64) -> Result<Vec<ObjectId>, StoreError> {
        let dir = self.partition_dir(partition);
        if !dir.is_dir() {
            return Err(StoreError::Partition("no such partition"));
        }
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((file, stripe)) = name.split_once('.') else {
                continue;
            };
            if let (Ok(file), Ok(stripe)) = (
                u64::from_str_radix(file, 16),
                u32::from_str_radix(stripe, 16),
            ) {
                out.push(ObjectId {
                    partition,
                    file,
                    stripe,
                });
            }
        }
        out.sort();
        Ok(out)
    }

    fn create_partition(&self, _auth: &AdminAuthorized, partition: u64) -> Result<(), StoreError> {
        private_dirs(&self.partition_dir(partition))?;
        sync_dir(&self.root)?;
        Ok(())
    }

    fn remove_partition(&self, _auth: &AdminAuthorized, partition: u64) -> Result<(), StoreError> {
        let dir = self.partition_dir(partition);
        match fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StoreError::Partition("no such partition"))
            }
            Err(_) => return Err(StoreError::Partition("partition is not empty")),
        }
        sync_dir(&self.root)?;
        Ok(())
    }

    fn format(&self, _auth: &AdminAuthorized) -> Result<(), StoreError> {
        lock(&self.kept).clear();
        fs::remove_dir_all(&self.root)?;
        private_dirs(&self.partition_dir(DATA_PARTITION))?;
        sync_dir(&self.root)?;
        if let Some(parent) = self.root.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}
