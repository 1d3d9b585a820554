//! Puts of small new files under reserved ids: the MDS reserves a block of file ids for
//! this user once (`Reserve`, one signed capability over them all), a put stores its
//! data under the next id and then links its path to it with its size (`Link`). One
//! MDS round trip and no signature per put, where an open that creates and a size take
//! two round trips and a signature; and the file appears only once its data is stored.
//!
//! Taken for a put of fewer bytes than a stripe to a path this client has no open of; an
//! encrypted one makes the file's first lockbox here and links with it (`LinkSealed`),
//! as a put through `OpenSealed` records it with the size. When the path exists
//! (`AlreadyExists`) or the MDS forgot the reservation, the object written is removed
//! and the put goes the usual way; a directory where the MDS reserves nothing (a
//! partition with T10 credentials, no right to create) is not asked again for
//! [`RESERVE_RETRY_MILLIS`].

use super::*;
use maat_proto::msg::STRIPE_UNIT_BYTES;

pub use crate::limits::{RESERVED_DIRECTORIES_MAX, RESERVE_RETRY_MILLIS};

/// Whose reservations: a directory, for encrypted files or not, and the NOSEC user
/// acting (none: the session's user), so that a switch of mode finds its own.
pub(crate) type Key = (String, bool, Option<u64>);

/// A reserved id, the capability over it, its method and its directory's partition.
type ReservedId = (u64, Vec<u8>, maat_proto::protection::Protection, String);

/// What this client holds for one directory.
pub(crate) enum Reserved {
    /// Ids `next..end` to use, under `capability`, until `expiry` (protocol time, ms).
    Ids {
        next: u64,
        end: u64,
        capability: Vec<u8>,
        protection: maat_proto::protection::Protection,
        /// The directory's partition, which the files inherit (where their copies go:
        /// issue 41).
        partition: String,
        expiry: u64,
        /// Lifetime when received: ids are not used in its second half, so that a
        /// link never races the expiry.
        lifetime: u64,
    },
    /// The MDS reserved nothing here; not asked again before `until`.
    Refused { until: u64 },
}

/// The directory part of `path` ("/" for a file at the root).
fn directory_of(path: &str) -> &str {
    match path.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((dir, _)) => dir,
    }
}

/// Whether the MDS refuses a link with `code` only before making it (the checks that
/// precede its commit); any other refusal may come after, so the data stays.
fn refused_before_linking(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::AlreadyExists
            | ErrorCode::PermissionDenied
            | ErrorCode::InvalidArgument
            | ErrorCode::NoSuchFile
            | ErrorCode::NotADirectory
            | ErrorCode::Malformed
            | ErrorCode::WrongFile
            | ErrorCode::TooLarge
            | ErrorCode::Revoked
    )
}

impl Client {
    /// Whether a put of `size` bytes to `path` may store under a reserved id (a file
    /// smaller than a stripe, which this client does not hold open), and if so whether
    /// the new file is encrypted (`Some(true)`: sealed under a lockbox made here, SPEC
    /// H5).
    pub(crate) fn may_put_reserved(
        &self,
        size: u64,
        path: &str,
        encrypt: Option<bool>,
    ) -> Result<Option<bool>> {
        if size == 0 || size >= STRIPE_UNIT_BYTES {
            return Ok(None);
        }
        if self.insecure_user.is_none() && self.session.lock().is_none() {
            return Ok(None);
        }
        let sealed = self.seals_new_files(encrypt)?;
        let held = self.opened.lock().fresh(path, self.now()).is_some();
        Ok((!held).then_some(sealed))
    }

    /// Stores `data` as the new file `path` under a reserved id (`sealed`: encrypted
    /// under a first lockbox made here) and links it; `None` when that cannot be done
    /// here (nothing reserved, the path exists): the caller puts it the usual way. The
    /// caller checked [`Client::may_put_reserved`].
    pub(crate) fn put_reserved(
        &self,
        data: &[u8],
        path: &str,
        sealed: bool,
        progress: Progress<'_>,
    ) -> Result<Option<FileStat>> {
        let began = self.now();
        let Some((opened, lockbox)) = self.reserved_opened(path, sealed, 0o644)? else {
            return Ok(None);
        };
        let size = data.len() as u64;
        let stored = self.put_opened(&opened, &mut &data[..], size, Some(0), progress);
        let written = match stored {
            Ok(written) => written,
            Err(e) => {
                // Not sent again, nor removed: an OSD that did not answer may not answer
                // a removal either (what it stored stays unreachable, like the data of a
                // client gone before its link).
                self.file_keys.lock().remove(&(opened.stat.id, 1));
                return Err(e);
            }
        };
        let linked = self.link_reserved(path, opened, lockbox, size, written)?;
        let Some((linked, recorded)) = linked else {
            return Ok(None);
        };
        if recorded {
            self.remember_read_open(path, &linked, began);
        }
        Ok(Some(linked.stat))
    }

    /// SPEC M6, issue 45: an open that creates: `OpenOrLink`, which opens `path` when it
    /// exists and otherwise links the next reserved id as the new, empty file `path`
    /// (`mode`), reached under the reservation's capability, so that a process creating
    /// many files in a directory is given one capability per block of ids, not one per
    /// file (IOR's creates), in the one round trip an `Open` takes. `None` when that
    /// cannot be done here (nothing reserved, grouping off, an MDS before `OpenOrLink`,
    /// a file that would be encrypted, whose first lockbox goes with `OpenSealed`): the
    /// caller opens the usual way.
    pub(crate) fn create_reserved(&self, path: &str, mode: u16) -> Result<Option<Opened>> {
        if self.insecure_user.is_none() && self.session.lock().is_none() {
            return Ok(None);
        }
        if self.opened.lock().fresh(path, self.now()).is_some() || self.seals_new_files(None)? {
            return Ok(None);
        }
        let Some((opened, _)) = self.reserved_opened(path, false, mode)? else {
            return Ok(None);
        };
        let request = MdsRequest::OpenOrLink {
            path: path.into(),
            access: Access::ReadWrite,
            file: opened.stat.id,
            mode,
        };
        let code = match self.mds_call(request) {
            Ok(MdsResponse::Stat(stat)) => {
                let protection = opened.stat.protection;
                return Ok(Some(Opened {
                    stat: FileStat { protection, ..stat },
                    ..opened
                }));
            }
            // It exists: opened as `Open` opens it (the id stays unused).
            Ok(response @ MdsResponse::Opened { .. }) => {
                return self.opened_from(response).map(Some);
            }
            Ok(_) => return Err(self.bad("mds", "unexpected answer to OpenOrLink")),
            Err(ClientError::Refused(e))
                if e.code == ErrorCode::Malformed || refused_before_linking(e.code) =>
            {
                e.code
            }
            Err(e) => return Err(e),
        };
        // This block is no good here (an MDS that does not know `OpenOrLink` keeps none).
        self.forget_block(
            path,
            false,
            &opened.capability,
            code == ErrorCode::Malformed,
        );
        Ok(None)
    }

    /// Drops the block of `path`'s directory held under `capability` (unless another
    /// thread replaced it); `refuse`: none is asked for there for a while.
    fn forget_block(&self, path: &str, sealed: bool, capability: &[u8], refuse: bool) {
        let key = (directory_of(path).to_string(), sealed, self.insecure_user);
        let mut table = self.reserved.lock();
        if let Some(Reserved::Ids {
            capability: held, ..
        }) = table.get(&key)
        {
            if held.as_slice() == capability {
                table.remove(&key);
            }
        }
        if refuse {
            let until = self.now().saturating_add(RESERVE_RETRY_MILLIS);
            table.insert(key, Reserved::Refused { until });
        }
    }

    /// The next reserved id in `path`'s directory as the open of a new file (`sealed`:
    /// encrypted, with the first lockbox made here), before any data or link.
    fn reserved_opened(
        &self,
        path: &str,
        sealed: bool,
        mode: u16,
    ) -> Result<Option<(Opened, Option<Vec<u8>>)>> {
        let dir = directory_of(path);
        let Some((id, capability, protection, partition)) = self.reserved_id(dir, sealed)? else {
            return Ok(None);
        };
        let mut opened = Opened {
            stat: FileStat {
                id,
                is_dir: false,
                mode,
                owner: self.user_name().unwrap_or_default(),
                group: String::new(),
                size: 0,
                mtime: 0,
                partition,
                protection,
                encrypted: sealed,
                crypt: sealed.then(maat_proto::file_crypt::FileCrypt::default),
                key_ranges: None,
            },
            capability,
            mds_cached: true,
        };
        let lockbox = match sealed {
            true => match self.seal_pending(&mut opened)? {
                Some(lockbox) => Some(lockbox),
                None => return Ok(None),
            },
            false => None,
        };
        Ok(Some((opened, lockbox)))
    }

    /// Links `path` to the reserved file `opened` (its mode; `size` bytes stored,
    /// `written` its sealed ranges): the open as linked, its capability reading and
    /// writing what it names (with the keys made here and under the
    /// reservation's method) and whether its sealed ranges were recorded whole (an open
    /// to keep for reads), or `None` when the MDS refused before linking: then what was
    /// stored goes, with its keys, and the caller goes the usual way.
    fn link_reserved(
        &self,
        path: &str,
        mut opened: Opened,
        lockbox: Option<Vec<u8>>,
        size: u64,
        written: Vec<(u32, u32, u64)>,
    ) -> Result<Option<(Opened, bool)>> {
        let (id, mode) = (opened.stat.id, opened.stat.mode);
        let request = match lockbox {
            Some(lockbox) => MdsRequest::LinkSealed {
                path: path.into(),
                file: id,
                size,
                mode,
                written: written.clone(),
                lockbox,
            },
            None => MdsRequest::Link {
                path: path.into(),
                file: id,
                size,
                mode,
            },
        };
        let code = match self.mds_call(request) {
            Ok(MdsResponse::Stat(stat)) => {
                let mut crypt = opened.stat.crypt.take();
                let recorded = crypt.as_mut().is_none_or(|c| {
                    written
                        .iter()
                        .all(|&(first, end, generation)| c.record(first, end, generation).is_ok())
                        && c.check().is_ok()
                });
                let protection = opened.stat.protection;
                let linked = Opened {
                    stat: FileStat {
                        crypt,
                        protection,
                        ..stat
                    },
                    ..opened
                };
                return Ok(Some((linked, recorded)));
            }
            Ok(_) => return Err(self.bad("mds", "unexpected answer to Link")),
            Err(ClientError::Refused(e)) if refused_before_linking(e.code) => e.code,
            // The link may have been made and its answer lost, or refused after it was
            // made (a store failure): what was stored stays.
            Err(e) => return Err(e),
        };
        // The link was refused: nobody can reach what was stored, so it goes, with its
        // keys.
        let _ = self.remove_object(&opened, 0);
        self.file_keys.lock().remove(&(id, 1));
        if code != ErrorCode::AlreadyExists {
            // This block is no good any more.
            self.forget_block(path, opened.stat.encrypted, &opened.capability, false);
        }
        Ok(None)
    }

    /// The next reserved id for a put in `dir` (of an encrypted file when `sealed`), its
    /// capability and method, reserving a new block when none is left or the held one
    /// is in the second half of its lifetime; `None` when the MDS reserves nothing there.
    fn reserved_id(&self, dir: &str, sealed: bool) -> Result<Option<ReservedId>> {
        let now = self.now();
        let key = (dir.to_string(), sealed, self.insecure_user);
        {
            let mut table = self.reserved.lock();
            match table.get_mut(&key) {
                Some(Reserved::Ids {
                    next,
                    end,
                    capability,
                    protection,
                    partition,
                    expiry,
                    lifetime,
                }) if *next < *end && expiry.saturating_sub(now) > *lifetime / 2 => {
                    let id = *next;
                    *next += 1;
                    return Ok(Some((
                        id,
                        capability.clone(),
                        *protection,
                        partition.clone(),
                    )));
                }
                Some(Reserved::Refused { until }) if *until > now => return Ok(None),
                _ => {}
            }
        }
        let request = match sealed {
            true => MdsRequest::ReserveSealed { dir: dir.into() },
            false => MdsRequest::Reserve { dir: dir.into() },
        };
        let held = match self.mds_call(request) {
            Ok(MdsResponse::Reserved {
                first,
                count,
                protection,
                capability,
                expiry,
            }) => {
                let end = first.saturating_add(u64::from(count));
                // The files inherit the directory's partition, hence its copies.
                let partition = self.stat(dir)?.partition;
                (first < end)
                    .then(|| Reserved::Ids {
                        next: first + 1,
                        end,
                        capability: capability.clone(),
                        protection,
                        partition: partition.clone(),
                        expiry: expiry.0,
                        lifetime: expiry.0.saturating_sub(now),
                    })
                    .map(|r| (r, (first, capability, protection, partition)))
            }
            Ok(_) => return Err(self.bad("mds", "unexpected answer to Reserve")),
            Err(ClientError::Refused(_)) => None,
            Err(e) => return Err(e),
        };
        let mut table = self.reserved.lock();
        if table.len() >= RESERVED_DIRECTORIES_MAX && !table.contains_key(&key) {
            table.clear();
        }
        match held {
            Some((slot, got)) => {
                table.insert(key, slot);
                Ok(Some(got))
            }
            None => {
                let until = now.saturating_add(RESERVE_RETRY_MILLIS);
                table.insert(key, Reserved::Refused { until });
                Ok(None)
            }
        }
    }

    /// Forgets every reservation (a new login, perhaps as another user).
    pub(crate) fn forget_reserved(&self) {
        self.reserved.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::directory_of;

    #[test]
    fn the_directory_of_a_path() {
        assert_eq!(directory_of("/a"), "/");
        assert_eq!(directory_of("a"), "/");
        assert_eq!(directory_of("/d/e/f"), "/d/e");
        assert_eq!(directory_of("/d/e/"), "/d");
    }
}
