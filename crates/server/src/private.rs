//! Secrets and data at rest: every directory a daemon makes is 0700 and every file 0600;
//! a key file or database that group or others can read is refused at start, as ssh
//! refuses a loose private key. Other accounts on a daemon's host are attackers too.

use crate::{io, ServerError};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Mode of every file a daemon writes.
pub const FILE_MODE: u32 = 0o600;
/// Mode of every directory a daemon makes.
pub const DIR_MODE: u32 = 0o700;
/// Permission bits that must be clear on a key file or database.
const GROUP_OTHER_BITS: u32 = 0o077;

/// Creates `dir` and any missing parents with mode 0700 (existing ones are left alone).
pub fn create_private_dir(dir: &Path) -> Result<(), ServerError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(io(format!("create {}", dir.display())))
}

/// Refuses `path` when group or others may read or write it; a missing file passes.
pub fn check_private(path: &Path) -> Result<(), ServerError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("stat {}", path.display()))(e)),
    };
    let mode = meta.mode() & 0o7777;
    if mode & GROUP_OTHER_BITS != 0 {
        let fix = if meta.is_dir() { "700" } else { "600" };
        return Err(ServerError::Exposed {
            path: path.display().to_string(),
            mode,
            fix: format!("chmod {fix} {}", path.display()),
        });
    }
    Ok(())
}

/// Writes a new secret file (hex, mode 0600, fsynced, and its directory fsynced).
pub fn write_secret_file(path: &Path, secret: &[u8]) -> Result<(), ServerError> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(io(format!("create {}", path.display())))?;
    let mut text = zeroize::Zeroizing::new(hex::encode(secret));
    text.push('\n');
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", path.display())))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("sync {}", dir.display())))?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` (mode 0600, temp file + fsync + rename + directory fsync,
/// so the new contents survive a crash once this returns).
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), ServerError> {
    let temp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&temp)
        .map_err(io(format!("create {}", temp.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", temp.display())))?;
    std::fs::rename(&temp, path).map_err(io(format!("rename to {}", path.display())))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("sync {}", dir.display())))?;
    }
    Ok(())
}

/// Reads a secret file written by [`write_secret_file`], refusing it when it is exposed.
pub fn read_secret_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>, ServerError> {
    check_private(path)?;
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        ServerError::KeyFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        }
    })?);
    hex::decode(text.trim())
        .map(zeroize::Zeroizing::new)
        .map_err(|e| ServerError::KeyFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secret_files_are_private_and_loose_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/k");
        write_secret_file(&path, &[7; 40]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("keys")), 0o700);
        assert_eq!(read_secret_file(&path).unwrap().as_slice(), &[7; 40]);
        for loose in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            let e = read_secret_file(&path).unwrap_err().to_string();
            assert!(e.contains(&format!("chmod 600 {}", path.display())), "{e}");
        }
    }
}
