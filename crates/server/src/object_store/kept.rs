//! Digests kept from whole-object writes (see the store's module documentation): which
//! sealed file each is of, and the check of a sealed file changed outside Maat.

use super::{is_sealed, lock, FileObjectStore};
use crate::limits::DIGESTS_KEPT_MAX;
use maat_osd::StoreError;
use maat_proto::msg::ObjectId;
use maat_proto::protection::DataDigest;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;

/// The digest of a sealed object file, and the file's change time when it was kept:
/// Maat never changes a sealed file in place, so a later change time means someone else
/// did (issue 40), and the file is checked against the digest before it is served.
#[derive(Clone, Copy)]
pub(super) struct Kept {
    pub(super) inode: u64,
    pub(super) len: u64,
    pub(super) ctime: (i64, i64),
    pub(super) digest: DataDigest,
}

pub(super) fn ctime(meta: &fs::Metadata) -> (i64, i64) {
    (meta.ctime(), meta.ctime_nsec())
}

impl FileObjectStore {
    pub(super) fn keep(&self, o: ObjectId, k: Kept) {
        let mut kept = lock(&self.kept);
        if kept.len() >= DIGESTS_KEPT_MAX && !kept.contains_key(&o) {
            // Any entry may go: its file stays sealed, and reads of it then seal their
            // answers from the data.
            if let Some(victim) = kept.keys().next().copied() {
                kept.remove(&victim);
            }
        }
        kept.insert(o, k);
    }

    pub(super) fn forget(&self, o: ObjectId) {
        lock(&self.kept).remove(&o);
    }

    /// The kept digest of `file` (`meta` its metadata), if it is object `o`'s sealed
    /// file. A sealed file whose change time moved since its digest was kept was changed
    /// outside Maat: its bytes are checked against the digest, and a mismatch is
    /// [`StoreError::Damaged`] (before issue 40 they were sent under the digest and the
    /// client saw "bad MAC on response"); bytes that still match get a fresh change time.
    pub(super) fn kept_digest(
        &self,
        o: ObjectId,
        file: &File,
        meta: &fs::Metadata,
    ) -> Result<Option<DataDigest>, StoreError> {
        if !is_sealed(meta) {
            return Ok(None);
        }
        let Some(k) = lock(&self.kept).get(&o).copied() else {
            return Ok(None);
        };
        if k.inode != meta.ino() || k.len != meta.len() {
            return Ok(None);
        }
        if k.ctime == ctime(meta) {
            return Ok(Some(k.digest));
        }
        let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(meta.len()).read_to_end(&mut data)?;
        (&mut &*file).seek(SeekFrom::Start(0))?;
        if !maat_crypto::ct_eq(&maat_proto::protection::data_digest(&data), &k.digest) {
            self.forget(o);
            return Err(StoreError::Damaged(format!(
                "object {:x}.{:x} changed on disk since it was written",
                o.file, o.stripe
            )));
        }
        self.keep(
            o,
            Kept {
                ctime: ctime(meta),
                ..k
            },
        );
        Ok(Some(k.digest))
    }
}
