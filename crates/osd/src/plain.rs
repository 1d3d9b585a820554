//! Plain (unauthenticated) messages to an OSD: SPEC M2 session offers, and SPEC M9
//! revocation notices pushed by the MDS or fetched from it at catch-up.

use super::*;

impl OsdCore {
    /// SPEC M2: handles a plain message (a session offer); returns the encoded
    /// `Result<OsdPlainResponse, WireError>`.
    pub fn handle_plain(
        &self,
        message: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result =
            msg::decode(message)
                .map_err(WireError::from)
                .and_then(|request| match request {
                    OsdPlainRequest::Offer(bytes) => self.offer(&bytes, now, rng),
                    OsdPlainRequest::Revoke(notice) => self
                        .apply_revocation(&notice, now)
                        .map(|()| OsdPlainResponse::Applied),
                    OsdPlainRequest::SetMasterKey(_)
                    | OsdPlainRequest::SetKey(_)
                    | OsdPlainRequest::SetPolicyTag(_) => {
                        self.t10_key_command(&request, None, now, rng)
                    }
                    OsdPlainRequest::Fenced(bytes) => self.fenced_key_command(&bytes, now, rng),
                });
        let result = self.counted(result);
        msg::encode_result(&result)
    }

    /// SPEC M9: applies one MDS-signed notice (pushed by the MDS).
    pub fn apply_revocation(&self, notice: &[u8], now: UnixMillis) -> Result<(), WireError> {
        self.revoked.apply_signed(notice, &self.mds_key()?, now)?;
        self.stats
            .revocations_applied
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// SPEC M9: applies the complete list of notices in force that the MDS sent (its MAC
    /// checked by the caller), after which data requests are served.
    pub fn sync_revocations(&self, notices: &[Vec<u8>], now: UnixMillis) -> Result<(), WireError> {
        Ok(self.revoked.sync_signed(notices, &self.mds_key()?, now)?)
    }

    /// Issue 41: the MDS's complete list of the copies here that missed a change (its
    /// MAC checked by the caller) replaces the one known; returns how many there are.
    /// `sent`: when the check-in that brought it was sent (the OSD's lease,
    /// `OSD_LEASE_MILLIS`, runs from there).
    pub fn sync_missed(&self, objects: &[(u64, u32)], next: u64, sent: UnixMillis) -> usize {
        self.missed.replace(objects, next, sent.0);
        self.missed.len()
    }

    /// Issue 41: `next` of the MDS's last list of missed copies applied here (the OSD
    /// tells it at its next check-in, so that the MDS knows what the OSD knows).
    pub fn missed_applied(&self) -> u64 {
        self.missed.applied()
    }

    /// Issue 41: how the OSD checks in with the MDS on demand (before serving when its
    /// list of missed copies is stale): set once by the daemon shell.
    pub fn set_check_in(&self, hook: std::sync::Arc<CheckInHook>) {
        self.missed.set_hook(hook);
    }

    /// Issue 41: how long ago the last check-in the MDS answered was sent, if the OSD's
    /// lease has lapsed (it serves nothing until it checks in again).
    pub fn lease_lapsed(&self, now: UnixMillis) -> Option<u64> {
        self.missed.lease_lapsed(now.0)
    }

    /// Issue 41: checks in with the MDS first if the OSD's list of missed copies is
    /// stale at `now` (the shell calls it before each data request).
    pub fn check_in_if_stale(&self, now: UnixMillis) {
        self.missed.check_in_if_stale(now.0);
    }

    fn offer(
        &self,
        bytes: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<OsdPlainResponse, WireError> {
        let mds_key = self.mds_key()?;
        let offer = Unverified::<SessionOffer>::decode(bytes)?;
        // The offer's timestamp goes through the same window as requests.
        let ts = offer.unverified_body().timestamp;
        let replay_check = lock(&self.replay).check_time(ts, now);
        replay_check.map_err(freshness)?;
        let (offer, key) = session::accept_offer(offer, &mds_key, self.id, &self.sealing, now)?;
        lock(&self.replay)
            .check_and_record(&key.session_id, &offer.client_nonce, ts, now)
            .map_err(freshness)?;
        let confirm = session::confirm(&offer, &key, now, rng);
        {
            let mut sessions = write(&self.sessions);
            let mine: Vec<([u8; 16], UnixMillis)> = sessions
                .iter()
                .filter(|(_, s)| s.user == key.user)
                .map(|(id, s)| (*id, s.expiry))
                .collect();
            if mine.len() >= SESSIONS_PER_USER_MAX {
                if let Some((oldest, _)) = mine.iter().min_by_key(|(_, expiry)| *expiry) {
                    sessions.remove(oldest);
                }
            }
            if sessions.len() >= SESSIONS_MAX {
                sessions.retain(|_, s| s.expiry > now);
                if sessions.len() >= SESSIONS_MAX {
                    return Err(refuse(ErrorCode::Busy, "session table full"));
                }
            }
            sessions.insert(
                key.session_id,
                Session {
                    user: key.user,
                    expiry: key.expiry,
                    keys: EnvelopeKeys::new(key.key.expose()).with_counters(self.counters.clone()),
                    proof: maat_proto::delegation::proof_key_from_secret(key.key.expose())?,
                    proven: Vec::new(),
                },
            );
        }
        self.stats.sessions_accepted.fetch_add(1, Ordering::Relaxed);
        Ok(OsdPlainResponse::Confirm(confirm.encoded().to_vec()))
    }
}
