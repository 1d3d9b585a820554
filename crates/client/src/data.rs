//! The data path: requests to OSDs under each protection method (SPEC T1, each request
//! sealed and its answer checked in `envelope.rs`), striping and placement (T8), objects
//! read and written whole or in part (batches to several OSDs in flight at once are
//! `lanes.rs`; whole-file put and get are in `transfer.rs`).

use super::*;
use crate::limits::OSD_ANSWER_TIMEOUT;
use std::time::Duration;

impl Client {
    #[doc(hidden)]
    /// One request to an OSD; renegotiates the session once if the OSD forgot it,
    /// supplies the capability's Merkle trees once if the OSD lacks them (SPEC M4), and
    /// renews the capability when due, giving the OSD the token (SPEC M8).
    pub fn osd_call(&self, osd: u64, request: OsdRequest) -> Result<OsdResponse> {
        self.osd_call_within(osd, request, OSD_ANSWER_TIMEOUT)
    }

    /// [`Client::osd_call`], waiting at most `patience` for the OSD's answer.
    fn osd_call_within(
        &self,
        osd: u64,
        request: OsdRequest,
        patience: Duration,
    ) -> Result<OsdResponse> {
        self.prepare_capability(osd, &request.capability)?;
        let fresh = |request: &OsdRequest| self.osd_call_fresh_within(osd, request, patience);
        match fresh(&request) {
            Err(ClientError::Refused(e)) if e.code == ErrorCode::UnknownTree => {
                self.supply_trees(osd, &request.capability)?;
                fresh(&request)
            }
            // SPEC M10: prove the job key again (the OSD restarted or forgot the
            // session), after a fresh lifetime when it ran out.
            Err(ClientError::Refused(e))
                if matches!(
                    e.code,
                    ErrorCode::ProofRequired | ErrorCode::CapabilityExpired
                ) && jobs::delegated_to(&request.capability).is_some_and(|hash| {
                    self.recover_delegated(osd, &hash, e.code).unwrap_or(false)
                }) =>
            {
                fresh(&request)
            }
            // A renewal that fails leaves the refusal as it was (a job's capability is
            // renewed through its key only, above).
            Err(ClientError::Refused(e))
                if e.code == ErrorCode::CapabilityExpired
                    && jobs::delegated_to(&request.capability).is_none()
                    && self
                        .recover_expired(osd, &request.capability)
                        .unwrap_or(false) =>
            {
                fresh(&request)
            }
            other => other,
        }
    }

    /// [`Client::osd_call`] without supplying trees.
    pub(crate) fn osd_call_fresh(&self, osd: u64, request: &OsdRequest) -> Result<OsdResponse> {
        self.osd_call_fresh_within(osd, request, OSD_ANSWER_TIMEOUT)
    }

    fn osd_call_fresh_within(
        &self,
        osd: u64,
        request: &OsdRequest,
        patience: Duration,
    ) -> Result<OsdResponse> {
        let clock = self.clock.clone();
        let once = || self.osd_call_once_within(osd, request, patience);
        match retry_stale(&clock, once) {
            Err(ClientError::Refused(e)) if e.code == ErrorCode::UnknownSession => {
                if let Some(s) = self.session.lock().as_mut() {
                    s.osd_sessions.retain(|o| o.osd != osd);
                }
                retry_stale(&clock, once)
            }
            other => other,
        }
    }

    pub(crate) fn osd_call_once(&self, osd: u64, request: &OsdRequest) -> Result<OsdResponse> {
        self.osd_call_once_within(osd, request, OSD_ANSWER_TIMEOUT)
    }

    pub(crate) fn osd_call_once_within(
        &self,
        osd: u64,
        request: &OsdRequest,
        patience: Duration,
    ) -> Result<OsdResponse> {
        let auth = self.auth_for(osd, request, self.insecure_user, patience.into())?;
        let answer = self.call_with(osd, &auth, request, patience);
        self.after_t10_refusal(osd, &auth, request, &answer);
        answer
    }

    /// Forgets a file's T10 credentials when one was refused as revoked; after a stale
    /// refusal, dates the next T10 requests to that OSD otherwise ([`T10Clock`]).
    pub(crate) fn after_t10_refusal(
        &self,
        osd: u64,
        auth: &Auth,
        request: &OsdRequest,
        answer: &Result<OsdResponse>,
    ) {
        if let (Auth::T10 { dated, .. }, Err(ClientError::Refused(e))) = (auth, answer) {
            if e.code == ErrorCode::Revoked {
                if let Some((object, _)) = request.command.object_access() {
                    self.forget_t10(object.file);
                }
            }
            if e.code == ErrorCode::StaleRequest {
                // (A refusal is not authenticated: it moves the date to the next of the
                // guesses, never to a time the refusal names. Only the first refusal of
                // requests dated one way moves it: the rest of a batch, or another
                // thread's, find it moved already.)
                let mut clocks = self.t10_clock.lock();
                let now = clocks.get(&osd).copied().unwrap_or_default();
                if now == *dated {
                    clocks.insert(osd, now.after_stale());
                }
            }
        }
    }

    /// Keeps the offset to `osd`'s clock that an authenticated T10 answer showed.
    pub(crate) fn learn_t10_clock(&self, osd: u64, learned: Option<i64>) {
        if let Some(offset) = learned {
            self.t10_clock.lock().insert(osd, T10Clock::learned(offset));
        }
    }

    /// How `request` to `osd` is authenticated: under the T10 credential of its file for
    /// that OSD (SPEC T2) when it carries no Maat capability and one is held, else as
    /// [`Client::osd_auth`] says.
    /// A session negotiated for it waits for the OSD as `wait` says.
    pub(crate) fn auth_for(
        &self,
        osd: u64,
        request: &OsdRequest,
        insecure_user: Option<u64>,
        wait: Wait,
    ) -> Result<Auth> {
        if insecure_user.is_none() && request.capability.is_empty() {
            let credential = request
                .command
                .object_access()
                .and_then(|(object, _)| self.t10.lock().get(&(object.file, osd)).cloned());
            if let Some(c) = credential {
                let id = maat_proto::t10::credential_id(&c.capability);
                let held = |source| ClientError::Token {
                    what: "held T10 capability",
                    source,
                };
                let method = maat_proto::t10::decode_capability(&c.capability)
                    .map_err(held)?
                    .security_method;
                let prefix = maat_proto::t10::request_prefix(&c.capability).map_err(held)?;
                let capability = c.capability.clone();
                let keys = self.envelope_keys.lock().get(&id, c.key.expose());
                // SPEC T7: no session with the OSD measured its clock; its answers do.
                let mds = self.session.lock().as_ref().map_or(0, |s| s.clock_offset);
                let dated = self.t10_clock.lock().get(&osd).copied().unwrap_or_default();
                let offset = dated.offset(mds);
                return Ok(Auth::T10 {
                    keys,
                    id,
                    method,
                    capability,
                    prefix,
                    offset,
                    dated,
                });
            }
        }
        self.osd_auth(osd, insecure_user, wait)
    }

    /// One request to `osd` on this client's connection to it, authenticated by `auth`,
    /// waiting at most `patience` for its answer.
    fn call_with(
        &self,
        osd: u64,
        auth: &Auth,
        request: &OsdRequest,
        patience: Duration,
    ) -> Result<OsdResponse> {
        self.stats.lock().requests += 1;
        let address = self.osd_entry(osd)?.address;
        let mut conn = self.connections.take(&self.network, &address);
        conn.set_io_timeout(patience);
        let mut learned = None;
        let answer = crate::envelope::call_on(
            &mut conn,
            &address,
            auth,
            request,
            &std::sync::OnceLock::new(),
            &self.clock,
            &mut self.nonce_rng(),
            &mut learned,
            None,
        );
        self.connections.give_back(conn);
        self.learn_t10_clock(osd, learned);
        answer
    }

    /// How requests to `osd` are authenticated: the session's envelope keys, or NOSEC as
    /// `insecure_user`.
    fn osd_auth(&self, osd: u64, insecure_user: Option<u64>, wait: Wait) -> Result<Auth> {
        if let Some(user) = insecure_user {
            return Ok(Auth::Insecure { user });
        }
        let (sid, key, offset) = self.osd_session_within(osd, wait)?;
        Ok(Auth::Sealed {
            keys: self.envelope_keys.lock().get(&sid, key.expose()),
            sid,
            offset,
        })
    }

    /// Who a data request for `opened` claims to be under NOSEC: the benchmark's user,
    /// or this user for a NOSEC partition (which only a cluster with the danger flag has).
    pub(crate) fn insecure_for(&self, opened: &Opened) -> Result<Option<u64>> {
        if self.insecure_user.is_some() || opened.stat.protection != Protection::NoSec {
            return Ok(self.insecure_user);
        }
        self.with_session(|s| Some(s.uid))
    }

    #[doc(hidden)]
    /// How many stripes of one file are in flight at once: two per OSD (one on each of
    /// its lanes), at most [`STRIPES_IN_FLIGHT_MAX`].
    pub fn stripes_in_flight(&self) -> Result<u32> {
        let osds = self.cluster_map()?.osds.len() as u32;
        Ok((2 * osds).clamp(1, STRIPES_IN_FLIGHT_MAX))
    }

    #[doc(hidden)]
    /// Where the first copy of stripe `stripe` of `file` lives (SPEC T8: computed, not
    /// looked up); [`Client::copies_of`] gives every copy.
    pub fn place(&self, file: u64, stripe: u32) -> Result<u64> {
        let map = self.cluster_map()?;
        placement::place(&map, file, stripe).ok_or(ClientError::NoOsds)
    }

    /// The object holding stripe `stripe` of an opened file, and the OSD of its first
    /// copy ([`Client::parallel`] and [`Client::data_call`] reach the others).
    pub(crate) fn stripe_target(&self, opened: &Opened, stripe: u32) -> Result<(u64, ObjectId)> {
        let object = ObjectId {
            partition: DATA_PARTITION,
            file: opened.stat.id,
            stripe,
        };
        Ok((self.place(object.file, stripe)?, object))
    }

    /// A data request for an opened file: protected as its partition requires, or NOSEC
    /// for a NOSEC partition (which only a cluster with the danger flag has).
    pub(crate) fn data_call_exact(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
    ) -> Result<OsdResponse> {
        self.data_call_within(opened, osd, request, OSD_ANSWER_TIMEOUT)
    }

    /// [`Client::data_call_exact`], waiting at most `patience` for the OSD's answer.
    pub(crate) fn data_call_within(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
        patience: Duration,
    ) -> Result<OsdResponse> {
        match self.insecure_for(opened)? {
            Some(user) if self.insecure_user.is_none() => {
                self.call_with(osd, &Auth::Insecure { user }, &request, patience)
            }
            _ => self.osd_call_within(osd, request, patience),
        }
    }

    #[doc(hidden)]
    /// Writes one object of a file.
    pub fn write_object(&self, opened: &Opened, stripe: u32, data: Vec<u8>) -> Result<()> {
        let (osd, object) = self.stripe_target(opened, stripe)?;
        self.data_call(opened, osd, write_request(opened, object, data))
            .map(|_| ())
    }

    #[doc(hidden)]
    /// Reads one object of a file (`None` when it does not exist).
    pub fn read_object(&self, opened: &Opened, stripe: u32) -> Result<Option<Vec<u8>>> {
        let (osd, object) = self.stripe_target(opened, stripe)?;
        match self.data_call(opened, osd, read_request(opened, object, STRIPE_UNIT_BYTES)) {
            Ok(OsdResponse::Data(d)) => Ok(Some(d)),
            Ok(_) => Err(self.bad("osd", "unexpected answer")),
            Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[doc(hidden)]
    /// Writes `data` at byte `offset` of an opened file, inside one stripe (a range that
    /// crosses a stripe boundary is refused here). Record the size with
    /// [`Client::set_size`] when done, as `put` does.
    pub fn write_at(&self, opened: &Opened, offset: u64, data: Vec<u8>) -> Result<()> {
        let (stripe, within) = within_stripe(offset, data.len() as u64)?;
        let (osd, object) = self.stripe_target(opened, stripe)?;
        let request = OsdRequest {
            capability: opened.capability.clone(),
            command: OsdCommand::Write {
                object,
                offset: within,
                data,
                replace: false,
            },
        };
        self.data_call(opened, osd, request).map(|_| ())
    }

    #[doc(hidden)]
    /// Reads up to `length` bytes at byte `offset` of an opened file, inside one stripe
    /// (short or empty past the end of what was written).
    pub fn read_at(&self, opened: &Opened, offset: u64, length: u32) -> Result<Vec<u8>> {
        let (stripe, within) = within_stripe(offset, u64::from(length))?;
        let (osd, object) = self.stripe_target(opened, stripe)?;
        let request = OsdRequest {
            capability: opened.capability.clone(),
            command: OsdCommand::Read {
                object,
                offset: within,
                length,
            },
        };
        match self.data_call(opened, osd, request) {
            Ok(OsdResponse::Data(d)) => Ok(d),
            Ok(_) => Err(self.bad("osd", "unexpected answer")),
            Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    #[doc(hidden)]
    /// Records the size of a file written with [`Client::write_at`] (the writer's
    /// "close").
    pub fn set_size(&self, path: &str, opened: &Opened, size: u64) -> Result<()> {
        self.expect_ok(MdsRequest::SetSize {
            path: path.into(),
            file: opened.stat.id,
            size,
        })
    }

    pub(crate) fn remove_object(&self, opened: &Opened, stripe: u32) -> Result<()> {
        let (osd, object) = self.stripe_target(opened, stripe)?;
        self.data_call(opened, osd, remove_request(opened, object))
            .map(|_| ())
    }

    /// Removes a file and its objects. With a write capability for it kept from a put
    /// (with more than half its lifetime left), the MDS is asked to unlink the path only
    /// if it still names that file (`UnlinkHeld`) and the objects go under that
    /// capability: no capability is signed for the removal.
    pub fn unlink(&self, path: &str) -> Result<()> {
        let held = self.held_write_open(path);
        self.forget_opened_path(path);
        let mut response = None;
        if let Some((held, capability)) = held {
            let request = MdsRequest::UnlinkHeld {
                path: path.into(),
                file: held.stat.id,
                capability,
            };
            match self.mds_call(request) {
                Ok(MdsResponse::Stat(stat)) => {
                    let opened = Opened { stat, ..held };
                    self.opened.lock().remove_file(opened.stat.id);
                    return self.remove_objects(&opened);
                }
                // Unlinked, but what is held would not serve: what the MDS gave instead.
                Ok(opened @ MdsResponse::Opened { .. }) => response = Some(opened),
                // One name of several removed (issue 44): the objects stay.
                Ok(MdsResponse::Ok) => return Ok(()),
                Ok(_) => return Err(self.bad("mds", "unexpected answer to UnlinkHeld")),
                // The path names another file now: unlinked the usual way.
                Err(ClientError::Refused(e)) if e.code == ErrorCode::WrongFile => {}
                Err(e) => return Err(e),
            }
        }
        let response = match response {
            Some(r) => r,
            None => self.mds_call(MdsRequest::Unlink { path: path.into() })?,
        };
        self.removed(response)
    }

    /// Finishes a removal the MDS answered: `Ok` when the file keeps other names (hard
    /// links, issue 44: its objects stay), else its objects go under what it gave.
    fn removed(&self, response: MdsResponse) -> Result<()> {
        if response == MdsResponse::Ok {
            return Ok(());
        }
        let opened = self.opened_from(response)?;
        self.remove_objects(&opened)?;
        // Credentials the MDS gave for the removal (SPEC T2) serve no further purpose.
        self.forget_t10(opened.stat.id);
        Ok(())
    }

    /// Renames `from` to `to`, replacing a file at `to` in the same step at the MDS, as
    /// rename(2) does (issue 44); the replaced file's objects are removed when that was
    /// its last name.
    pub fn rename_replacing(&self, from: &str, to: &str) -> Result<()> {
        self.forget_opens();
        let response = self.mds_call(MdsRequest::RenameReplace {
            from: from.into(),
            to: to.into(),
        })?;
        self.removed(response)
    }

    /// Removes the objects of a file the MDS has unlinked (no name left), a window of
    /// stripes at a time, each object from every copy at once; it stands once one copy
    /// took it: no copy is recorded as missed (the MDS keeps records for files that
    /// exist, and no open of this one can be made). A copy that could not take it (its
    /// OSD down or hung) keeps its bytes, unnamed, counted in
    /// `ClientStats::removals_left`; before, an unlink failed whenever one OSD holding a
    /// copy was down, its name gone all the same. Every request is watched: a hung OSD
    /// is given up on once the MDS reports it down, however many copies the partition
    /// keeps, and the giving-up lane's later requests to it fail unsent (its other lane
    /// gives up at its own next look, within `CHANGE_WATCH_EVERY`). An object no copy
    /// took the removal of fails the unlink, once every other object was tried.
    fn remove_objects(&self, opened: &Opened) -> Result<()> {
        let stripes = stripes_for(opened.stat.size).max(1);
        let window = self.stripes_in_flight()?.max(1);
        let mut first = 0;
        // Objects no copy took the removal of, and the first failure seen.
        let (mut unremoved, mut failure) = (0u32, None);
        while first < stripes {
            let end = first.saturating_add(window).min(stripes);
            let mut calls = Vec::new();
            // Per stripe: how many of `calls` are its copies, and how many it skipped.
            let mut per_stripe = Vec::new();
            for stripe in first..end {
                let (osd, object) = self.stripe_target(opened, stripe)?;
                let request = remove_request(opened, object);
                let (send, skipped) = self.skip_down(self.reach(opened, osd, &request)?);
                let shared = crate::lanes::SharedRequest::watched(request);
                per_stripe.push((send.len(), skipped.len()));
                calls.extend(send.into_iter().map(|osd| (osd, Arc::clone(&shared))));
            }
            let osds: Vec<u64> = calls.iter().map(|(osd, _)| *osd).collect();
            let mut answers = osds.into_iter().zip(self.parallel_exact(opened, calls)?);
            let mut left = 0;
            for (sent, skipped) in per_stripe {
                let mut took = 0;
                for (osd, answer) in answers.by_ref().take(sent) {
                    self.note_answer(osd, &answer);
                    match answer {
                        Ok(_) => took += 1,
                        Err(e) => {
                            failure.get_or_insert(e);
                        }
                    }
                }
                // (No copy took it: the first failure says why, once every other object
                // was tried.)
                unremoved += u32::from(took == 0);
                left += sent - took + skipped;
            }
            self.stats.lock().removals_left += left as u64;
            first = end;
        }
        match (unremoved, failure) {
            (0, _) => Ok(()),
            (_, Some(e)) => Err(e),
            (n, None) => Err(ClientError::Internal(format!(
                "{n} objects of the removed file reached no copy"
            ))),
        }
    }

    /// The kept open of `path` whose capability (a Maat one, not T10 credentials) lets
    /// this session write the file, if any, and that capability's id.
    fn held_write_open(&self, path: &str) -> Option<(Opened, u64)> {
        use maat_proto::capability::{Capability, Mode};
        if self.insecure_user.is_some() {
            // NOSEC: the MDS signs nothing for a removal anyway.
            return None;
        }
        let opened = self.kept_open(path, self.now())?;
        let body = Unverified::<Capability>::decode(&opened.capability)
            .ok()?
            .unverified_body()
            .clone();
        body.mode.allows(Mode::WRITE).then_some((opened, body.id.0))
    }
}

pub use crate::limits::STRIPES_IN_FLIGHT_MAX;
use crate::machines::T10Clock;

/// How long a request waits for an OSD, and whether it gives up sooner (issue 41).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    /// The longest silence waited for.
    pub(crate) within: Duration,
    /// Set for a change's copy the others can stand without: given up on once a report
    /// of the MDS made since this time shows the OSD down ([`Client::give_up_on_copy`]).
    pub(crate) watch_since: Option<u64>,
}

impl From<Duration> for Wait {
    fn from(within: Duration) -> Self {
        Self {
            within,
            watch_since: None,
        }
    }
}

/// How requests on one OSD connection are authenticated.
#[derive(Clone)]
pub(crate) enum Auth {
    /// A session: envelope keys, id, and this client's clock offset to the OSD.
    Sealed {
        keys: protection::EnvelopeKeys,
        sid: [u8; 16],
        offset: i64,
    },
    /// NOSEC as this user.
    Insecure { user: u64 },
    /// SPEC T2: a T10 credential: envelope keys from its capability key, its id, the
    /// method and bytes of its capability, the frame prefix carrying it, and the clock
    /// offset with the guess it came from (no session with the OSD measured one).
    T10 {
        keys: protection::EnvelopeKeys,
        id: [u8; 16],
        method: Protection,
        capability: Vec<u8>,
        prefix: Vec<u8>,
        offset: i64,
        dated: T10Clock,
    },
}

pub(crate) fn write_request(opened: &Opened, object: ObjectId, data: Vec<u8>) -> OsdRequest {
    OsdRequest {
        capability: opened.capability.clone(),
        command: OsdCommand::Write {
            object,
            offset: 0,
            data,
            replace: true,
        },
    }
}

pub(crate) fn remove_request(opened: &Opened, object: ObjectId) -> OsdRequest {
    OsdRequest {
        capability: opened.capability.clone(),
        command: OsdCommand::Remove { object },
    }
}

/// Reads a whole stripe object (`length`: a full one's bytes, sealed or not).
pub(crate) fn read_request(opened: &Opened, object: ObjectId, length: u64) -> OsdRequest {
    OsdRequest {
        capability: opened.capability.clone(),
        command: OsdCommand::Read {
            object,
            offset: 0,
            length: length as u32,
        },
    }
}

/// The stripe holding bytes `offset .. offset + len` and the offset inside it; an error
/// when the range crosses a stripe boundary.
fn within_stripe(offset: u64, len: u64) -> Result<(u32, u64)> {
    let stripe = offset / STRIPE_UNIT_BYTES;
    let within = offset % STRIPE_UNIT_BYTES;
    if within + len > STRIPE_UNIT_BYTES || stripe > u64::from(u32::MAX) {
        return Err(ClientError::InvalidArgument(format!(
            "bytes {offset}..{} cross a stripe boundary ({STRIPE_UNIT_BYTES}-byte stripes)",
            offset + len
        )));
    }
    Ok((stripe as u32, within))
}

/// Number of objects a file of `size` bytes has.
pub fn stripes_for(size: u64) -> u32 {
    size.div_ceil(STRIPE_UNIT_BYTES) as u32
}
