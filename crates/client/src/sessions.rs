//! Sessions with OSDs (SPEC M2): negotiating, holding and reusing them, and the raw
//! access attack tests use (feature `test-hooks`).

use super::*;
use crate::limits::PROBE_BACKDATE_MILLIS;

impl Client {
    pub(crate) fn osd_entry(&self, osd: u64) -> Result<msg::OsdEntry> {
        self.cluster_map()?
            .osds
            .into_iter()
            .find(|o| o.id == osd)
            .ok_or(ClientError::NoOsds)
    }

    /// SPEC M2: negotiates a session key with `osd`. Another thread may log in again
    /// meanwhile: a session made under the replaced login is not kept, and one is made
    /// again under the new one.
    /// The OSD's answer is waited for as `wait` says.
    pub(crate) fn negotiate(&self, osd: u64, wait: crate::data::Wait) -> Result<()> {
        for _ in 0..2 {
            // SPEC T7: the offer is dated by the MDS's clock, the only one this client
            // knows before the OSD confirms; an OSD whose clock runs behind by more than
            // the future tolerance refuses it as stale, and takes it dated back (its
            // confirmation then gives the session its own offset).
            let made = match self.negotiate_once(osd, 0, wait) {
                Err(ClientError::Refused(e)) if e.code == ErrorCode::StaleRequest => {
                    self.negotiate_once(osd, PROBE_BACKDATE_MILLIS, wait)?
                }
                other => other?,
            };
            if made {
                return Ok(());
            }
        }
        Err(ClientError::Internal(
            "the login changed twice while an OSD session was negotiated".into(),
        ))
    }

    /// One negotiation, the offer dated `backdate` ms before the MDS's time; false when
    /// the login it was made under was replaced meanwhile.
    fn negotiate_once(&self, osd: u64, backdate: i64, wait: crate::data::Wait) -> Result<bool> {
        let entry = self.osd_entry(osd)?;
        let now = self.now();
        let (login, ticket, signing_seed) =
            self.with_session(|s| (s.session_id, s.ticket.clone(), s.signing_seed.clone()))?;
        let ticket = Unverified::<LoginTicket>::decode(&ticket)
            .and_then(|t| t.verify(&self.mds_key, UnixMillis(now)))
            .map_err(|source| ClientError::Token {
                what: "stored ticket",
                source,
            })?;
        let signing = SigningKey::from_seed(signing_seed.expose());
        let (offer, key) = session::make_offer(
            &ticket,
            &signing,
            OsdId(osd),
            &maat_crypto::seal::SealingPublicKey(entry.sealing_key),
            UnixMillis(now.saturating_add_signed(-backdate)),
            &mut self.key_rng(),
        )
        .map_err(|source| ClientError::Token {
            what: "session offer",
            source,
        })?;
        let payload = crate::encode(&OsdPlainRequest::Offer(offer.encoded().to_vec()))?;
        let give_up = |since| self.give_up_on_copy(osd, since);
        let give_up = wait.watch_since.map(|since| move || give_up(since));
        let watch = give_up.as_ref().map(|f| maat_net::Watch {
            every: crate::limits::CHANGE_WATCH_EVERY,
            keep_waiting: f,
        });
        let (t, answer) = self.call_at_watched(
            &entry.address,
            FrameType::Plain,
            &payload,
            wait.within,
            watch.as_ref(),
        )?;
        if t != FrameType::Plain {
            return Err(refusal(&entry.address, &answer));
        }
        let OsdPlainResponse::Confirm(confirm) = decode_answer(&entry.address, &answer)? else {
            return Err(self.bad(&entry.address, "unexpected answer to a session offer"));
        };
        let confirm = UnverifiedMac::<SessionConfirm>::decode(&confirm)
            .and_then(|c| session::check_confirm(c, &offer, &key))
            .map_err(|e| self.bad(&entry.address, &format!("session confirmation: {e}")))?;
        // The confirmation is MACed under K_CD: its time is the OSD's clock (SPEC T7).
        let osd_offset = offset_to(confirm.timestamp.0, self.clock.now());
        let mut session = self.session.lock();
        let Some(s) = session.as_mut().filter(|s| s.session_id == login) else {
            return Ok(false);
        };
        s.osd_sessions.retain(|o| o.osd != osd);
        s.osd_sessions.push(home::OsdSession {
            osd,
            session_id: key.session_id,
            key: key.key.clone(),
            expiry: key.expiry.0,
            clock_offset: osd_offset,
        });
        Ok(true)
    }

    /// Sends pre-built bytes to an OSD and returns the raw answer (attack tests; feature
    /// `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn osd_raw(
        &self,
        osd: u64,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<(FrameType, Vec<u8>)> {
        let entry = self.osd_entry(osd)?;
        self.call_at(&entry.address, frame_type, payload)
    }

    /// The session this client holds with `osd` (negotiating it if needed): id and key
    /// (attack tests build raw requests with them; feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn osd_session(&self, osd: u64) -> Result<([u8; 16], Secret32)> {
        self.osd_session_with_offset(osd)
            .map(|(sid, key, _)| (sid, key))
    }

    pub(crate) fn osd_session_with_offset(&self, osd: u64) -> Result<([u8; 16], Secret32, i64)> {
        self.osd_session_within(osd, crate::limits::OSD_ANSWER_TIMEOUT.into())
    }

    /// [`Client::osd_session_with_offset`], a negotiation waiting for the OSD as `wait`
    /// says (a read that can ask another copy waits less; a change's copy that others
    /// can stand without gives up on an OSD the MDS reports down meanwhile).
    pub(crate) fn osd_session_within(
        &self,
        osd: u64,
        wait: crate::data::Wait,
    ) -> Result<([u8; 16], Secret32, i64)> {
        self.ensure_session()?;
        let now = self.now();
        let live = self
            .session
            .lock()
            .as_ref()
            .and_then(|s| {
                s.osd_sessions
                    .iter()
                    .find(|o| o.osd == osd && o.expiry > now)
            })
            .map(|o| (o.session_id, o.key.clone(), o.clock_offset));
        match live {
            Some(l) => Ok(l),
            None => {
                // An OSD that just started refuses offers dated inside its first moments
                // (SPEC T7) and says to retry; so does a session's first contact.
                let clock = self.clock.clone();
                retry_stale(&clock, || self.negotiate(osd, wait))?;
                self.session
                    .lock()
                    .as_ref()
                    .and_then(|s| s.osd_sessions.iter().find(|o| o.osd == osd))
                    .map(|o| (o.session_id, o.key.clone(), o.clock_offset))
                    .ok_or(ClientError::NotLoggedIn)
            }
        }
    }

    #[doc(hidden)]
    /// Negotiates a session with every OSD of the cluster map now (SPEC M2), so that a
    /// timed run that follows pays for none; a NOSEC client (no session to negotiate)
    /// opens its connection to each OSD instead, so that a benchmark's two sides start
    /// equally warm (issue 45): connected to the MDS, the map fetched, every OSD's
    /// connection open.
    pub fn connect_osds(&self) -> Result<()> {
        for osd in self.cluster_map()?.osds {
            if self.insecure_user.is_none() {
                self.osd_session_with_offset(osd.id)?;
                continue;
            }
            // Any answer means the connection is open and served.
            match self.osd_call_once(osd.id, &crate::copies::probe_request()) {
                Ok(_) | Err(ClientError::Refused(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The client–MDS session id and key (attack tests build raw requests with them;
    /// feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn mds_session(&self) -> Result<([u8; 16], Secret32)> {
        self.ensure_session()?;
        self.with_session(|s| (s.session_id, s.key.clone()))
    }

    /// The T10 credential this client holds for `file` at `osd` (SPEC T2): capability and
    /// capability key (attack tests build raw requests with them; feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn t10_credential(&self, file: u64, osd: u64) -> Option<(Vec<u8>, Secret32)> {
        self.t10
            .lock()
            .get(&(file, osd))
            .map(|c| (c.capability.clone(), c.key.clone()))
    }

    /// The current protocol time as this client sees it (local clock plus offset).
    pub fn protocol_now(&self) -> u64 {
        self.now()
    }
}
