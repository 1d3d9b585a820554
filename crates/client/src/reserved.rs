//! Puts of small new files under reserved ids: the MDS reserves a block of file ids for
//! this user once (`Reserve`, one signed capability over them all), a put stores its
//! data under the next id and then links its path to it with its size (`Link`). One
//! MDS round trip and no signature per put, where an open that creates and a size take
//! two round trips and a signature; and the file appears only once its data is stored.
//!
//! Taken for a plaintext put of fewer bytes than a stripe to a path this client has no
//! open of. When the path exists (`AlreadyExists`) or the MDS forgot the reservation,
//! the object written is removed and the put goes the usual way; a directory where the
//! MDS reserves nothing (a partition with T10 credentials, no right to create) is not
//! asked again for [`RESERVE_RETRY_MILLIS`].

use super::*;
use maat_proto::msg::STRIPE_UNIT_BYTES;

pub use crate::limits::{RESERVED_DIRECTORIES_MAX, RESERVE_RETRY_MILLIS};

/// What this client holds for one directory.
pub(crate) enum Reserved {
    /// Ids `next..end` to use, under `capability`, until `expiry` (protocol time, ms).
    Ids {
        next: u64,
        end: u64,
        capability: Vec<u8>,
        protection: maat_proto::protection::Protection,
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

impl Client {
    /// Whether a put of `size` bytes to `path` may store under a reserved id: a
    /// plaintext file smaller than a stripe, which this client does not hold open.
    pub(crate) fn may_put_reserved(
        &self,
        size: u64,
        path: &str,
        encrypt: Option<bool>,
    ) -> Result<bool> {
        if size == 0 || size >= STRIPE_UNIT_BYTES {
            return Ok(false);
        }
        if self.insecure_user.is_none() && self.session.lock().is_none() {
            return Ok(false);
        }
        let plain = self.insecure_user.is_some()
            || match encrypt {
                Some(e) => !e,
                None => !self.encrypts_new_files()? && !self.seals_new_files(None)?,
            };
        let held = self.opened.lock().fresh(path, self.now()).is_some();
        Ok(plain && !held)
    }

    /// Stores `data` as the new file `path` under a reserved id and links it; `None`
    /// when that cannot be done here (nothing reserved, the path exists): the caller
    /// puts it the usual way. The caller checked [`Client::may_put_reserved`].
    pub(crate) fn put_reserved(
        &self,
        data: &[u8],
        path: &str,
        progress: Progress<'_>,
    ) -> Result<Option<FileStat>> {
        let began = self.now();
        let dir = directory_of(path);
        let Some((id, capability, protection)) = self.reserved_id(dir)? else {
            return Ok(None);
        };
        let size = data.len() as u64;
        let opened = Opened {
            stat: FileStat {
                id,
                is_dir: false,
                mode: 0o644,
                owner: self.user_name().unwrap_or_default(),
                group: String::new(),
                size: 0,
                mtime: 0,
                partition: String::new(),
                protection,
                encrypted: false,
                crypt: None,
                key_ranges: None,
            },
            capability,
            mds_cached: true,
        };
        self.put_opened(&opened, &mut &data[..], size, Some(0), progress)?;
        let request = MdsRequest::Link {
            path: path.into(),
            file: id,
            size,
            mode: 0o644,
        };
        match self.mds_call(request) {
            Ok(MdsResponse::Stat(stat)) => {
                let linked = Opened {
                    stat: stat.clone(),
                    ..opened
                };
                // The capability reads what it wrote, as a read-write open's would.
                self.remember_read_open(path, &linked, began);
                Ok(Some(stat))
            }
            Ok(_) => Err(self.bad("mds", "unexpected answer to Link")),
            Err(ClientError::Refused(e)) => {
                // Nobody can reach this object: it goes, and the put goes the usual way.
                let _ = self.remove_object(&opened, 0);
                if e.code != ErrorCode::AlreadyExists {
                    self.reserved.lock().remove(dir);
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The next reserved id for a put in `dir`, its capability and the partition's
    /// method, reserving a new block when none is left or the held one is in the second
    /// half of its lifetime; `None` when the MDS reserves nothing there.
    fn reserved_id(
        &self,
        dir: &str,
    ) -> Result<Option<(u64, Vec<u8>, maat_proto::protection::Protection)>> {
        let now = self.now();
        {
            let mut table = self.reserved.lock();
            match table.get_mut(dir) {
                Some(Reserved::Ids {
                    next,
                    end,
                    capability,
                    protection,
                    expiry,
                    lifetime,
                }) if *next < *end && expiry.saturating_sub(now) > *lifetime / 2 => {
                    let id = *next;
                    *next += 1;
                    return Ok(Some((id, capability.clone(), *protection)));
                }
                Some(Reserved::Refused { until }) if *until > now => return Ok(None),
                _ => {}
            }
        }
        let held = match self.mds_call(MdsRequest::Reserve { dir: dir.into() }) {
            Ok(MdsResponse::Reserved {
                first,
                count,
                protection,
                capability,
                expiry,
            }) => {
                let end = first.saturating_add(u64::from(count));
                (first < end)
                    .then(|| Reserved::Ids {
                        next: first + 1,
                        end,
                        capability: capability.clone(),
                        protection,
                        expiry: expiry.0,
                        lifetime: expiry.0.saturating_sub(now),
                    })
                    .map(|r| (r, (first, capability, protection)))
            }
            Ok(_) => return Err(self.bad("mds", "unexpected answer to Reserve")),
            Err(ClientError::Refused(_)) => None,
            Err(e) => return Err(e),
        };
        let mut table = self.reserved.lock();
        if table.len() >= RESERVED_DIRECTORIES_MAX && !table.contains_key(dir) {
            table.clear();
        }
        match held {
            Some((slot, got)) => {
                table.insert(dir.to_string(), slot);
                Ok(Some(got))
            }
            None => {
                let until = now.saturating_add(RESERVE_RETRY_MILLIS);
                table.insert(dir.to_string(), Reserved::Refused { until });
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
