//! Writes in place (a byte range, an append, a truncation), and the copy-on-write of a
//! sealed object file (see the module above).

use super::{is_sealed, sync_dir, FileObjectStore, OBJECT_FILE_MODE};
use maat_osd::StoreError;
use maat_proto::msg::ObjectId;
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

impl FileObjectStore {
    /// Changes object `o`'s file in place with `edit`, unless it is sealed: then `edit`
    /// changes a copy, which replaces it. Durable before it returns. Without `create`,
    /// an object this store does not hold is [`StoreError::NotFound`], never made.
    ///
    /// The file is opened and changed under the object's lock (its fsync is not), so no
    /// whole file is renamed over the object between the open and the change (another
    /// write's, a repair's `ReplaceIf`, which decides its condition under the same lock):
    /// the change lands in the object's file, and a rename after it is a later change.
    /// (Changed outside the lock, a write could land in a file renamed away meanwhile,
    /// and be acknowledged but lost.)
    pub(super) fn write_in_place(
        &self,
        o: ObjectId,
        dir: &Path,
        append: bool,
        create: bool,
        edit: impl FnOnce(&File) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let path = self.object_path(o);
        let file = {
            let _object = self.object_lock(o);
            let opened = OpenOptions::new()
                .create(create)
                .truncate(false)
                .write(true)
                .append(append)
                .mode(OBJECT_FILE_MODE)
                .open(&path);
            if let Err(e) = &opened {
                if !create && e.kind() == ErrorKind::NotFound {
                    return Err(StoreError::NotFound);
                }
            }
            let sealed = match &opened {
                // The OSD's account may not open its sealed files for writing...
                Err(e) => e.kind() == ErrorKind::PermissionDenied,
                // ... but root may.
                Ok(f) => is_sealed(&f.metadata()?),
            };
            if sealed {
                return self.copy_on_write(o, dir, &path, edit);
            }
            let file = opened?;
            edit(&file)?;
            self.date(&file)?;
            file
        };
        file.sync_data()?;
        // Always: whoever created the file may not have made its entry durable yet, and
        // this write must not be acknowledged before it is.
        sync_dir(dir)?;
        Ok(())
    }

    /// Copies the sealed file `path`, applies `edit` to the copy and renames it into
    /// place. Called under the object's lock.
    fn copy_on_write(
        &self,
        o: ObjectId,
        dir: &Path,
        path: &Path,
        edit: impl FnOnce(&File) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let temp = self.temp_path(dir);
        let copied = (|| {
            let mut source = File::open(path)?;
            let mut copy = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(OBJECT_FILE_MODE)
                .open(&temp)?;
            std::io::copy(&mut source, &mut copy)?;
            edit(&copy)?;
            self.date(&copy)?;
            copy.sync_all()?;
            fs::rename(&temp, path)
        })();
        if let Err(e) = copied {
            let _ = fs::remove_file(&temp);
            return Err(e.into());
        }
        self.forget(o);
        sync_dir(dir)?;
        Ok(())
    }
}
