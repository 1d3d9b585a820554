//! A simulated disk's faults as the file store meets them (feature `sim` installs them;
//! without it no fault is ever drawn): see [`crate::faults`].

use super::{FileObjectStore, OBJECT_FILE_MODE};
use maat_osd::StoreError;
use maat_proto::msg::ObjectId;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

impl FileObjectStore {
    /// What the simulated disk does to this write of `len` bytes, if anything.
    pub(super) fn write_fault(&self, _len: usize) -> Option<crate::faults::WriteFault> {
        #[cfg(feature = "sim")]
        if let Some(f) = &self.faults {
            return f.object_write(_len);
        }
        None
    }

    /// What the simulated disk does to this read, if anything.
    pub(super) fn read_fault(&self) -> Option<crate::faults::ReadFault> {
        #[cfg(feature = "sim")]
        if let Some(f) = &self.faults {
            return f.object_read();
        }
        None
    }

    /// A write the simulated disk lost (nothing written) or tore (`n` bytes of it
    /// written: in place, or into a temporary file that is never renamed).
    pub(super) fn faulty_write(
        &self,
        o: ObjectId,
        dir: &Path,
        fault: crate::faults::WriteFault,
        write: impl Fn(&File, &[u8]) -> std::io::Result<()>,
        data: &[u8],
        whole: bool,
    ) -> Result<(), StoreError> {
        use crate::faults::{io_error, WriteFault};
        let WriteFault::Torn(n) = fault else {
            return Err(io_error("the write was lost before its fsync").into());
        };
        let prefix = data.get(..n).unwrap_or(data);
        if whole {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(OBJECT_FILE_MODE)
                .open(self.temp_path(dir))?;
            f.write_all(prefix)?;
            f.sync_all()?;
        } else {
            self.write_in_place(o, dir, false, true, |f| write(f, prefix))?;
        }
        Err(io_error(&format!(
            "a torn write: {n} of {} bytes written",
            data.len()
        ))
        .into())
    }
}
