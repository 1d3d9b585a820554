//! Opens and the client capability cache (SPEC M5), and the T10 credentials opens in
//! partitions with T10 credentials give (SPEC T2).

use super::*;

impl Client {
    pub(crate) fn opened_from(&self, response: MdsResponse) -> Result<Opened> {
        match response {
            MdsResponse::Opened {
                stat,
                capability,
                cached,
                t10,
            } => {
                // An encrypted file's runs are searched by bisection: they must be sound.
                if let Some(Err(e)) = stat.crypt.as_ref().map(|c| c.check()) {
                    return Err(self.bad("mds", &format!("the file's crypt record: {e}")));
                }
                self.hold_t10(stat.id, t10)?;
                Ok(Opened {
                    stat,
                    capability,
                    mds_cached: cached,
                })
            }
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// The open of `path` kept in the client capability cache with more than half its
    /// lifetime left at `now`, if any.
    pub(crate) fn kept_open(&self, path: &str, now: u64) -> Option<Opened> {
        let o = self.opened.lock().fresh(path, now).cloned()?;
        Some(Opened {
            stat: o.stat,
            capability: o.capability,
            mds_cached: true,
        })
    }

    /// Drops the cached read open of `path` (its size changed).
    pub(crate) fn forget_opened_path(&self, path: &str) {
        self.opened.lock().remove(path);
    }

    #[doc(hidden)]
    /// Forgets every kept read open (SPEC M5), so that the next opens ask the MDS (after
    /// a rename or a permission change; tests and benchmarks measure that).
    pub fn forget_opens(&self) {
        self.opened.lock().clear();
    }

    /// Opens a file; read opens are answered from the client cache while the cached
    /// capability (or, in a partition with T10 credentials, the credentials held for the
    /// file) has more than half its lifetime left (SPEC M5).
    pub fn open(&self, path: &str, access: Access, create: Option<u16>) -> Result<Opened> {
        // A new file: created under a reserved id where this client holds or gets a
        // block of them, so that many creates share one capability (`reserved`).
        if let (Some(mode), Access::ReadWrite) = (create, access) {
            if let Some(opened) = self.create_reserved(path, mode)? {
                return Ok(opened);
            }
        }
        self.open_predicting(path, access, create, &[])
    }

    /// [`Client::open`] telling the MDS which files this client expects to open next
    /// (SPEC M6; at most `maat_proto::msg::PREDICTED_PATHS_MAX`). Under prediction
    /// grouping the capability may name them too, and the MDS then answers their opens
    /// from its cache.
    pub fn open_predicting(
        &self,
        path: &str,
        access: Access,
        create: Option<u16>,
        predicted: &[String],
    ) -> Result<Opened> {
        let now = self.now();
        if access == Access::Read {
            if let Some(o) = self.kept_open(path, now) {
                // A T10 open (no capability) is good only with its credentials, which
                // live in this process, not in the session file.
                let usable = !o.capability.is_empty()
                    || self.insecure_user.is_some()
                    || self.t10.lock().keys().any(|(file, _)| *file == o.stat.id);
                if usable {
                    self.stats.lock().capability_cache_hits += 1;
                    return Ok(o);
                }
            }
        }
        self.stats.lock().capability_cache_misses += 1;
        let request = if predicted.is_empty() {
            MdsRequest::Open {
                path: path.into(),
                access,
                create,
            }
        } else {
            MdsRequest::OpenPredicted {
                path: path.into(),
                access,
                create,
                // Hints beyond the MDS's limit are dropped, not a reason to refuse.
                predicted: predicted
                    .iter()
                    .take(maat_proto::msg::PREDICTED_PATHS_MAX)
                    .cloned()
                    .collect(),
            }
        };
        let response = self.mds_call(request)?;
        let opened = self.opened_from(response)?;
        if access == Access::Read {
            self.remember_read_open(path, &opened, now);
        }
        Ok(opened)
    }

    /// Keeps `opened` (a read open of `path`, or a read-write open whose stat now shows
    /// what this client wrote) in the client capability cache, for as long as its
    /// capability or T10 credentials last; an insecure (NOSEC) open, which has neither,
    /// for as long as a capability would ([`crate::limits::INSECURE_OPEN_CACHED_MS`]).
    /// An open that does not let this client read is not kept: a read-write open of a
    /// file the user may not read carries a write-only capability. (NOSEC checks
    /// nothing: its opens read whatever the OSD holds.) When the cache is full, the entry
    /// stored longest ago goes.
    pub(crate) fn remember_read_open(&self, path: &str, opened: &Opened, now: u64) {
        use maat_proto::capability::{Capability, Mode};
        let expiry = if self.insecure_user.is_some() {
            Some(now + crate::limits::INSECURE_OPEN_CACHED_MS)
        } else if opened.capability.is_empty() {
            self.t10_read_expiry(opened.stat.id)
        } else {
            Unverified::<Capability>::decode(&opened.capability)
                .ok()
                .filter(|c| c.unverified_body().mode.allows(Mode::READ))
                .map(|c| c.unverified_body().expiry.0)
        };
        // A file whose lockbox is still to come is about to change: not cached.
        let pending = opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending());
        let (Some(expiry), false) = (expiry, pending) else {
            return;
        };
        // Only a logged-in client (or a NOSEC one) keeps opens: a session's end forgets
        // them.
        if self.session.lock().is_none() && self.insecure_user.is_none() {
            return;
        }
        self.opened.lock().insert(home::OpenedEntry {
            path: path.into(),
            stat: opened.stat.clone(),
            capability: opened.capability.clone(),
            expiry,
            lifetime: expiry.saturating_sub(now),
        });
    }

    /// When the first of the T10 credentials held for `file` expires, if any are held and
    /// every one allows reading.
    fn t10_read_expiry(&self, file: u64) -> Option<u64> {
        let held = self.t10.lock();
        let mut first = None::<u64>;
        for (_, c) in held.iter().filter(|((f, _), _)| *f == file) {
            let c = maat_proto::t10::decode_capability(&c.capability).ok()?;
            if !c.permissions.allows(maat_proto::t10::Permissions::READ) {
                return None;
            }
            first = Some(first.map_or(c.expiry.0, |e| e.min(c.expiry.0)));
        }
        first
    }

    /// An OSD refused `file`'s T10 credential as revoked (SPEC T4): its credentials and
    /// cached opens are dropped, so the next open asks the MDS again.
    pub(crate) fn forget_t10(&self, file: u64) {
        self.t10.lock().retain(|(f, _), _| *f != file);
        self.opened.lock().remove_file(file);
    }
}

/// A T10 credential (SPEC T2): the capability and its key, opened from the session.
#[derive(Clone)]
pub(crate) struct T10Credential {
    pub(crate) capability: Vec<u8>,
    pub(crate) key: maat_crypto::Secret32,
}

pub(crate) use crate::limits::T10_CREDENTIALS_MAX;

impl Client {
    /// SPEC T2: opens each credential's key with this session's wrap key and keeps the
    /// credential as the newest for its (file, OSD).
    pub(crate) fn hold_t10(&self, file: u64, grants: Vec<maat_proto::msg::T10Grant>) -> Result<()> {
        if grants.is_empty() {
            return Ok(());
        }
        // The new grants replace every held one of the file, also when one of them fails
        // to open below: an OSD the MDS gave none for now (its keys revoked and not yet
        // replaced) must not get an old one.
        self.t10.lock().retain(|(f, _), _| *f != file);
        let (_, mac) = self.mds_session_key()?;
        let wrap = maat_proto::t10::capability_key_wrap(&mac);
        let mut opened = Vec::with_capacity(grants.len());
        for g in grants {
            let key = maat_proto::t10::open_capability_key(&wrap, &g.capability, &g.sealed_key)
                .map_err(|e| self.bad("mds", &e.to_string()))?;
            opened.push((
                (file, g.osd),
                T10Credential {
                    capability: g.capability,
                    key,
                },
            ));
        }
        let mut t10 = self.t10.lock();
        // Again: a concurrent open of the file may have added grants meanwhile.
        t10.retain(|(f, _), _| *f != file);
        if t10.len() + opened.len() > T10_CREDENTIALS_MAX {
            t10.clear();
        }
        t10.extend(opened);
        Ok(())
    }
}
