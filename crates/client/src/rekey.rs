//! SPEC H7 on the client: key revocation by a new key tree. The owner makes a new root
//! key and lockbox (version + 1); the MDS keeps the earlier tree's lockbox for the
//! stripes still sealed under it; this client then reads each such stripe with the
//! earlier keys and writes it back sealed under the new tree, a window at a time, each
//! window recorded at the MDS as it goes. So the file stays readable and writable
//! throughout, an interrupted rekey resumes where it stopped, and once the last stripe
//! is rewritten the MDS forgets the earlier tree: a range key of it decrypts nothing
//! the file holds.

use crate::crypt::lockbox_of;
use crate::crypt_files::PENDING_STRIPES_MAX;
use crate::files::OpenFlags;
use crate::{stripes_for, Client, ClientError, Result};
use maat_proto::msg::{MdsRequest, STRIPE_UNIT_BYTES};
use std::ops::ControlFlow;

/// What [`Client::rekey`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RekeyReport {
    /// The file's key tree version now.
    pub tree_version: u32,
    /// Whether this call made that tree (`false`: it resumed a rekey that had made it
    /// and stopped before rewriting every stripe).
    pub new_tree: bool,
    /// Stripes rewritten under it by this call.
    pub stripes: u32,
    /// Plaintext bytes rewritten.
    pub bytes: u64,
    /// Stripes still under an earlier tree after this call (0 unless another writer
    /// or rekey raced with it: run it again).
    pub remaining: u32,
}

impl Client {
    /// SPEC H7: gives the encrypted file `path` a new key tree, then rewrites every
    /// stripe still sealed under an earlier tree. Its owner only. With `resume`, makes
    /// no tree but finishes a rekey that stopped before rewriting every stripe (keys
    /// of its tree handed out since, to a user revoked since, keep working: start a new
    /// rekey after a revocation). `progress(done, total)` is called after
    /// each window of stripes is recorded; when it returns `Break` the rekey stops
    /// there (what it rewrote stays rewritten; the report counts what is left).
    ///
    /// Writers of the same stripes at the same time race with it as two writers do:
    /// run it while the file is only read, or run it again after.
    pub fn rekey(
        &self,
        path: &str,
        resume: bool,
        progress: &mut dyn FnMut(u32, u32) -> ControlFlow<()>,
    ) -> Result<RekeyReport> {
        let flags = OpenFlags {
            write: true,
            ..OpenFlags::READ
        };
        let mut handle = self.open_file(path, flags)?;
        let (crypt, lockbox) = lockbox_of(&handle.opened)?;
        if resume && crypt.earlier.is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "{path}: no rekey in progress to resume (every stripe is under key tree {}); \
                 leave out --resume to start one",
                lockbox.tree_version
            )));
        }
        let started = !resume;
        let mut version = lockbox.tree_version;
        if started {
            let kds = self.kds_keys("keys cannot be renewed")?;
            version = version.checked_add(1).ok_or_else(|| {
                ClientError::Keys(format!("{path}: no key tree version after {version}"))
            })?;
            let file = handle.opened.stat.id;
            let (lockbox, root) = self.new_tree(file, version, &lockbox.shape, &kds)?;
            let response = self.mds_call(MdsRequest::Rekey {
                path: path.into(),
                file,
                lockbox,
            })?;
            let reopened = self.opened_from(response)?;
            if reopened.stat.id != file || reopened.stat.crypt.is_none() {
                return Err(self.bad("mds", "the rekey answer names another file"));
            }
            self.forget_opened_path(path);
            self.hold_root_keys(&reopened, version, lockbox_of(&reopened)?.1.shape, &root)?;
            handle.size = reopened.stat.size;
            handle.opened = reopened;
        }
        let stripes = stripes_for(handle.size);
        let todo = lockbox_of(&handle.opened)?.0.stripes_on_earlier(stripes);
        let total: u32 = todo.iter().map(|(run, _)| run.end - run.start).sum();
        let mut done = 0u32;
        let mut bytes = 0u64;
        let mut go = progress(0, total);
        for (run, _) in todo {
            let mut first = run.start;
            while first < run.end && go.is_continue() {
                let n = (run.end - first).min(PENDING_STRIPES_MAX as u32);
                let offset = u64::from(first) * STRIPE_UNIT_BYTES;
                let len = u64::from(n) * STRIPE_UNIT_BYTES;
                let plain = self.read_file_at(&handle, offset, len as usize)?;
                self.write_file_at(&mut handle, offset, &plain)?;
                self.flush_file(&mut handle)?;
                bytes += plain.len() as u64;
                done += n;
                first += n;
                go = progress(done, total);
            }
        }
        // What the MDS says now (it forgets a tree no stripe is under any more).
        self.forget_opened_path(path);
        let after = self.open(path, maat_proto::msg::Access::Read, None)?;
        let (crypt, lockbox) = lockbox_of(&after)?;
        let remaining = crypt
            .stripes_on_earlier(stripes_for(after.stat.size))
            .iter()
            .map(|(run, _)| run.end - run.start)
            .sum();
        Ok(RekeyReport {
            tree_version: lockbox.tree_version,
            new_tree: started,
            stripes: done,
            bytes,
            remaining,
        })
    }
}
