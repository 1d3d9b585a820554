//! Whole-file reads that return exactly one version of the file, started over when a
//! new version replaces it mid-read (issue 39).

use crate::{Client, ClientError, Progress, Result};
use std::io::{Seek, Write};

/// How many times [`Client::get_whole`] starts a read over before it gives up and
/// returns [`ClientError::Replaced`]: a file replaced this often while it is read is
/// being rewritten faster than it can be read.
pub const WHOLE_READ_ATTEMPTS_MAX: u32 = 4;

/// An output a read can start over in: emptied by [`Restart::restart`] (a file is cut to
/// nothing, whatever it held before the read began).
pub trait Restart: Write {
    /// Drops everything written so far.
    fn restart(&mut self) -> std::io::Result<()>;
}

impl Restart for Vec<u8> {
    fn restart(&mut self) -> std::io::Result<()> {
        self.clear();
        Ok(())
    }
}

impl Restart for std::fs::File {
    fn restart(&mut self) -> std::io::Result<()> {
        self.set_len(0)?;
        self.rewind()
    }
}

impl Client {
    /// As [`Client::get`], but the output is always one version of the file: when a put
    /// replaces the file after part of it was written out, `out` is emptied and the
    /// read starts again (at most [`WHOLE_READ_ATTEMPTS_MAX`] times). Bytes already
    /// given to a plain writer cannot be taken back, which is why [`Client::get`]
    /// returns [`ClientError::Replaced`] instead.
    pub fn get_whole(
        &self,
        path: &str,
        out: &mut dyn Restart,
        progress: Progress<'_>,
    ) -> Result<u64> {
        let mut attempt = 1;
        loop {
            match self.get(path, out, &mut *progress) {
                Err(ClientError::Replaced(_)) if attempt < WHOLE_READ_ATTEMPTS_MAX => {
                    attempt += 1;
                    out.restart().map_err(|source| ClientError::Io {
                        what: format!("starting the read of {path} over"),
                        source,
                    })?;
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Restart;
    use std::io::{Read, Seek, Write};

    #[test]
    fn a_restarted_file_holds_only_what_was_written_after() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("out"))
            .unwrap();
        f.write_all(b"old version, longer").unwrap();
        f.restart().unwrap();
        f.write_all(b"new").unwrap();
        f.rewind().unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "new");
        let mut v = b"old".to_vec();
        v.restart().unwrap();
        assert!(v.is_empty());
    }
}
