//! Issue 41: the state a repair's conditional replace is decided on: the digest of an
//! object's stored bytes, as they are on the disk.

use maat_osd::StoreError;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// BLAKE3 of the bytes of the file at `path`, or `None` when there is none. No check of
/// any kind: a damaged object has the digest of its damaged bytes.
pub(super) fn stored_digest(path: &Path) -> Result<Option<[u8; 32]>, StoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // Appends are bounded one by one, not in sum: hash no more than an object may hold.
    let max = maat_proto::limits::ENCRYPTED_OBJECT_BYTES_MAX;
    if file.metadata()?.len() > max {
        return Err(StoreError::Io(std::io::Error::other(format!(
            "the object is longer than an object may be ({max} bytes): not hashed"
        ))));
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(Some(maat_crypto::hash::blake3(&[&bytes])))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::FileObjectStore;
    use maat_osd::{Authorized, ObjectStore, StoreError};
    use maat_proto::capability::Mode;
    use maat_proto::msg::{ObjectId, DATA_PARTITION};
    use std::sync::atomic::{AtomicBool, Ordering};

    fn auth() -> Authorized {
        let object = ObjectId {
            partition: DATA_PARTITION,
            file: 7,
            stripe: 0,
        };
        Authorized::for_store_tests(object, Mode::READ_WRITE)
    }

    fn value(store: &FileObjectStore) -> u64 {
        let bytes = store.read(&auth(), 0, 8).unwrap();
        u64::from_le_bytes(bytes.try_into().unwrap())
    }

    #[test]
    fn a_conditional_replace_holds_only_in_the_state_expected() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileObjectStore::open(dir.path()).unwrap();
        let a = auth();
        assert!(matches!(store.digest(&a), Err(StoreError::NotFound)));
        let first = maat_crypto::hash::blake3(&[b"first"]);
        // Absent expected, absent found: written.
        store.replace_if(&a, None, b"first", None).unwrap();
        assert_eq!(store.digest(&a).unwrap(), first);
        // Absent expected, but it exists; other bytes expected: refused, unchanged.
        assert!(matches!(
            store.replace_if(&a, None, b"second", None),
            Err(StoreError::Changed)
        ));
        let other = maat_crypto::hash::blake3(&[b"other"]);
        assert!(matches!(
            store.replace_if(&a, Some(&other), b"second", None),
            Err(StoreError::Changed)
        ));
        assert_eq!(store.read(&a, 0, 64).unwrap(), b"first");
        store.replace_if(&a, Some(&first), b"second", None).unwrap();
        assert_eq!(store.read(&a, 0, 64).unwrap(), b"second");
    }

    /// A write in place that opened the object's file just before a whole new file was
    /// renamed over it (here: a repair putting back the bytes it read, the worst case)
    /// must not vanish with the old file: once acknowledged, a later read sees it.
    #[test]
    fn a_write_in_place_is_never_lost_to_a_replace_racing_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileObjectStore::open(dir.path()).unwrap();
        store
            .write(&auth(), 0, &0u64.to_le_bytes(), true, None)
            .unwrap();
        let done = AtomicBool::new(false);
        /// Stops the repairing thread however the writing one ends (a panic too).
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                // A repair that rewrites what it read, if nothing changed meanwhile.
                while !done.load(Ordering::Relaxed) {
                    let a = auth();
                    let before = store.digest(&a).unwrap();
                    let bytes = store.read(&a, 0, 8).unwrap();
                    let _ = store.replace_if(&a, Some(&before), &bytes, None);
                }
            });
            let _done = Done(&done);
            for i in 1..=3000u64 {
                store
                    .write(&auth(), 0, &i.to_le_bytes(), false, None)
                    .unwrap();
                let seen = value(&store);
                assert!(
                    seen >= i,
                    "write {i} acknowledged, then the object holds {seen}"
                );
            }
        });
    }

    /// Appends racing a repair that puts back what it read: each lands exactly once (not
    /// lost with a file renamed away, not made twice).
    #[test]
    fn appends_racing_a_replace_land_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileObjectStore::open(dir.path()).unwrap();
        store.write(&auth(), 0, b"", true, None).unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let a = auth();
                    let before = store.digest(&a).unwrap();
                    let bytes = store.read(&a, 0, 1 << 20).unwrap();
                    let _ = store.replace_if(&a, Some(&before), &bytes, None);
                }
            });
            for _ in 0..2000 {
                if store.append(&auth(), b"x").is_err() {
                    break;
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        let len = store.read(&auth(), 0, 1 << 20).unwrap().len();
        assert_eq!(len, 2000, "2000 appends of one byte acknowledged");
    }
}
