//! Requests to the MDS: login upkeep, the authenticated envelope (T7) and its answers,
//! the retry of requests a just-started daemon refused, and the keys and clock offsets
//! they use.

use super::*;

pub(crate) fn decode_answer<T: serde::de::DeserializeOwned>(
    address: &str,
    bytes: &[u8],
) -> Result<T> {
    decode_answer_raw(address, bytes)?.map_err(ClientError::Refused)
}

pub(crate) fn decode_answer_raw<T: serde::de::DeserializeOwned>(
    address: &str,
    bytes: &[u8],
) -> Result<std::result::Result<T, WireError>> {
    msg::decode(bytes).map_err(|e| ClientError::BadAnswer {
        address: address.to_string(),
        reason: e.to_string(),
    })
}

pub(crate) fn refusal(address: &str, bytes: &[u8]) -> ClientError {
    match msg::decode::<WireError>(bytes) {
        Ok(e) => ClientError::Refused(e),
        Err(e) => ClientError::BadAnswer {
            address: address.to_string(),
            reason: e.to_string(),
        },
    }
}

impl Client {
    // ------------------------------------------------------------------ login

    /// Logs in with the home's stored key if there is one and no live session.
    pub fn ensure_session(&self) -> Result<()> {
        if self.insecure_user.is_some() {
            return Ok(());
        }
        if self.session_live() {
            return Ok(());
        }
        // One thread logs in; the others wait for it and find the session live.
        let _turn = self.login_turn.lock();
        if self.session_live() {
            return Ok(());
        }
        self.relogin()
    }

    /// Whether the session has more than a minute left.
    fn session_live(&self) -> bool {
        let now = self.now();
        self.session
            .lock()
            .as_ref()
            .is_some_and(|s| s.expiry > now + 60_000)
    }

    /// The id of the current MDS session, if logged in.
    pub(crate) fn session_id(&self) -> Option<[u8; 16]> {
        self.session.lock().as_ref().map(|s| s.session_id)
    }

    /// Logs in again because the MDS refused session `used`, unless another thread has
    /// already replaced it.
    fn relogin_after(&self, used: Option<[u8; 16]>) -> Result<()> {
        let _turn = self.login_turn.lock();
        if self.session_id() != used {
            return Ok(());
        }
        self.relogin()
    }

    pub(crate) fn relogin(&self) -> Result<()> {
        let identity = self.home.as_ref().and_then(|h| h.identity().ok().flatten());
        match identity {
            Some((name, key)) => self.login(&name, Credential::Key(key)),
            None => {
                let now = self.now();
                if self
                    .session
                    .lock()
                    .as_ref()
                    .is_some_and(|s| s.expiry <= now)
                {
                    Err(ClientError::Refused(WireError::new(
                        ErrorCode::SessionExpired,
                        "run `maat login` again",
                    )))
                } else {
                    Err(ClientError::NotLoggedIn)
                }
            }
        }
    }

    /// Ends the session at the MDS and forgets it locally.
    /// The local session is forgotten even when the MDS cannot be told; the error then
    /// says the session stays valid there until its ticket expires.
    pub fn logout(&self) -> Result<()> {
        let logged_in = self.session.lock().is_some();
        let told = match logged_in {
            true => self.mds_call(MdsRequest::Logout).map(|_| ()),
            false => Ok(()),
        };
        *self.session.lock() = None;
        self.opened.lock().clear();
        self.forget_reserved();
        if let Some(h) = &self.home {
            h.remove_session()?;
        }
        told.map_err(|e| {
            ClientError::Internal(format!(
                "forgot the local session, but the MDS was not told ({e}); the session stays valid there until it expires"
            ))
        })
    }

    pub(crate) fn bad(&self, address: &str, reason: &str) -> ClientError {
        ClientError::BadAnswer {
            address: address.to_string(),
            reason: reason.to_string(),
        }
    }

    /// An unauthenticated request (a login step) to the MDS instance asked now, or to the
    /// next ones while it cannot be sent or is refused as too early (just started).
    pub(crate) fn plain_mds(&self, payload: &[u8]) -> Result<MdsPlainResponse> {
        self.over_instances(|address| {
            let mut conn = self.connections.take(&self.network, address);
            let answer = match exchange(&mut conn, address, FrameType::Plain, payload) {
                Ok((t, answer)) => {
                    self.connections.give_back(conn);
                    match t {
                        FrameType::Plain => decode_answer(address, &answer),
                        FrameType::Refusal => Err(refusal(address, &answer)),
                        _ => Err(self.bad(address, "unexpected frame type")),
                    }
                }
                // Sent, perhaps done: a login step is not sent twice.
                Err(Unanswered { sent: true, error }) => return (Err(error), false),
                Err(Unanswered { sent: false, error }) => Err(error),
            };
            let move_on = match &answer {
                Err(ClientError::Net { .. }) => true,
                // Just started (T7): nothing was done, another instance may answer now.
                Err(ClientError::Refused(e)) => e.code == ErrorCode::NotReady,
                _ => false,
            };
            (answer, move_on)
        })
    }

    /// Runs `attempt` at the MDS instance asked now and, while it says to move on, at the
    /// next ones, each at most once: the last attempt's answer. Every move is counted
    /// (`mds_failovers`) and the next instance is asked from then on.
    fn over_instances<T>(&self, mut attempt: impl FnMut(&str) -> (Result<T>, bool)) -> Result<T> {
        let mut left = self.mds.len();
        loop {
            let (index, address) = self.mds.current();
            let (answer, move_on) = attempt(address);
            left = left.saturating_sub(1);
            if !move_on || left == 0 {
                return answer;
            }
            self.mds.failed(index);
            self.stats.lock().mds_failovers += 1;
        }
    }

    /// Issue 42: the counters of every MDS instance the cluster file lists, each asked
    /// itself (no failover), or why it did not answer; by address, in the file's order.
    pub fn mds_instance_stats(&self) -> Result<Vec<(String, Result<DaemonStats>)>> {
        self.ensure_session()?;
        Ok(self
            .cluster
            .mds_addresses()
            .into_iter()
            .map(|address| {
                let answer = match self.mds_attempt(&address, &MdsRequest::Stats, None) {
                    Ok(Ok(MdsResponse::Stats(s))) => Ok(s),
                    Ok(Ok(_)) => Err(self.bad(&address, "unexpected answer")),
                    Ok(Err(e)) | Err(Unanswered { error: e, .. }) => Err(e),
                };
                (address, answer)
            })
            .collect())
    }

    /// The address of the MDS instance asked now.
    pub(crate) fn mds_address(&self) -> String {
        self.mds.current().1.to_string()
    }

    // ------------------------------------------------------------------ MDS calls

    #[doc(hidden)]
    /// One authenticated request to the MDS (re-logging in once with a stored key when
    /// the MDS lost or expired the session).
    pub fn mds_call(&self, request: MdsRequest) -> Result<MdsResponse> {
        self.mds_call_within(request, None)
    }

    /// [`Client::mds_call`], each instance waited for at most `patience` (`None`: the
    /// connection's own timeout), for an ask that must not hold its caller long (a
    /// change's lane asking whether an OSD is down, issue 41).
    pub(crate) fn mds_call_within(
        &self,
        request: MdsRequest,
        patience: Option<std::time::Duration>,
    ) -> Result<MdsResponse> {
        let mut id = [0u8; 16];
        self.rng.lock().fill_bytes(&mut id);
        let request = crate::instances::wrapped(self.mds.len(), request, id);
        self.ensure_session()?;
        let used = self.session_id();
        let clock = self.clock.clone();
        match retry_stale(&clock, || self.mds_call_once_within(&request, patience)) {
            Err(ClientError::Refused(e))
                if matches!(
                    e.code,
                    ErrorCode::UnknownSession | ErrorCode::SessionExpired
                ) && self
                    .home
                    .as_ref()
                    .is_some_and(|h| h.identity().ok().flatten().is_some()) =>
            {
                self.relogin_after(used)?;
                self.mds_call_once_within(&request, patience)
            }
            other => other,
        }
    }

    /// Checks and decodes the answer to an authenticated request: a MACed response for
    /// this request, or an (unauthenticated) refusal.
    pub(crate) fn open_answer<T: serde::de::DeserializeOwned>(
        &self,
        address: &str,
        key: &maat_crypto::mac::Blake3Mac,
        sid: &[u8; 16],
        nonce: &[u8; 16],
        frame_type: FrameType,
        answer: &[u8],
    ) -> Result<T> {
        match frame_type {
            FrameType::Response => {
                let (_, message) = wire::open_response(key, sid, nonce, answer)
                    .map_err(|e| self.bad(address, &e.to_string()))?;
                decode_answer(address, message)
            }
            FrameType::Refusal => Err(refusal(address, answer)),
            _ => Err(self.bad(address, "unexpected frame type")),
        }
    }

    /// One attempt of `request` at the MDS: at the instance asked now, and at the next
    /// ones while an instance does not answer and the request may go elsewhere
    /// ([`crate::instances`]), each instance waited for at most `patience` (`None`: the
    /// connection's own timeout).
    fn mds_call_once_within(
        &self,
        request: &MdsRequest,
        patience: Option<std::time::Duration>,
    ) -> Result<MdsResponse> {
        self.over_instances(
            |address| match self.mds_attempt(address, request, patience) {
                // An instance that just started refuses requests for a moment (T7): nothing
                // was applied, another instance may answer now.
                Ok(Err(ClientError::Refused(e))) if e.code == ErrorCode::NotReady => {
                    (Err(ClientError::Refused(e)), true)
                }
                // Issue 42: only the leader carries out a T10 key change; the others refuse
                // it before they change anything.
                Ok(Err(ClientError::Refused(e)))
                    if e.code == ErrorCode::WrongRecipient && request.leader_only() =>
                {
                    (Err(ClientError::Refused(e)), true)
                }
                Ok(answer) => (answer, false),
                Err(Unanswered { sent, error }) => {
                    let again = !sent || crate::instances::may_repeat(request);
                    (Err(error), again)
                }
            },
        )
    }

    /// `request` at the MDS at `address`: its answer, or how it went unanswered; waiting
    /// at most `patience` if set (the connection goes back to the pool with the usual
    /// timeout).
    fn mds_attempt(
        &self,
        address: &str,
        request: &MdsRequest,
        patience: Option<std::time::Duration>,
    ) -> std::result::Result<Result<MdsResponse>, Unanswered> {
        self.stats.lock().requests += 1;
        // What fails here fails at every instance: an answer, not a reason to move on.
        let body = match encode(request) {
            Ok(body) => body,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(user) = self.insecure_user {
            let payload = match encode(&InsecureRequest {
                user,
                request: request.clone(),
            }) {
                Ok(payload) => payload,
                Err(e) => return Ok(Err(e)),
            };
            let mut conn = self.connections.take(&self.network, address);
            if let Some(p) = patience {
                conn.set_io_timeout(p);
            }
            let (t, answer) = exchange(&mut conn, address, FrameType::Insecure, &payload)?;
            conn.set_io_timeout(maat_net::IO_TIMEOUT);
            self.connections.give_back(conn);
            return Ok(match t {
                FrameType::Plain => decode_answer(address, &answer),
                _ => Err(refusal(address, &answer)),
            });
        }
        let now = self.now();
        let (sid, key) = match self.mds_session_key() {
            Ok(k) => k,
            Err(e) => return Ok(Err(e)),
        };
        // Sealed with the nonce stream of the connection it goes on (one entry in the
        // MDS's replay window per connection, not per request).
        let mut conn = self.connections.take(&self.network, address);
        if let Some(p) = patience {
            conn.set_io_timeout(p);
        }
        let nonce = conn.next_nonce(|| self.stream_name());
        let payload = wire::seal_request(&key, &sid, UnixMillis(now), &nonce, &body);
        let (t, answer) = exchange(&mut conn, address, FrameType::Request, &payload)?;
        let answer = self.open_answer(address, &key, &sid, &nonce, t, &answer);
        crate::envelope::renew_stream_if_refused(&mut conn, &answer);
        conn.set_io_timeout(maat_net::IO_TIMEOUT);
        self.connections.give_back(conn);
        Ok(answer)
    }

    /// `read` applied to the login's session (not logged in: an error). `read` runs under
    /// the session's lock: it copies what it needs and calls nothing of the client.
    pub(crate) fn with_session<T>(&self, read: impl FnOnce(&SessionState) -> T) -> Result<T> {
        self.session
            .lock()
            .as_ref()
            .map(read)
            .ok_or(ClientError::NotLoggedIn)
    }

    /// The MDS session's id and request MAC key.
    pub(crate) fn mds_session_key(&self) -> Result<([u8; 16], maat_crypto::mac::Blake3Mac)> {
        let (sid, secret) = self.with_session(|s| (s.session_id, s.key.clone()))?;
        Ok((
            sid,
            self.envelope_keys.lock().get(&sid, secret.expose()).mac,
        ))
    }

    pub(crate) fn expect_ok(&self, request: MdsRequest) -> Result<()> {
        match self.mds_call(request)? {
            MdsResponse::Ok => Ok(()),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }
}

/// A request an MDS instance did not answer: whether it was sent (it may have been
/// applied) and why.
struct Unanswered {
    sent: bool,
    error: ClientError,
}

/// Sends one frame on `conn` and reads its answer, telling a failure before the frame
/// went out from one after.
fn exchange(
    conn: &mut maat_net::Connection,
    address: &str,
    frame_type: FrameType,
    payload: &[u8],
) -> std::result::Result<(FrameType, Vec<u8>), Unanswered> {
    let net = |sent: bool| {
        move |source| Unanswered {
            sent,
            error: ClientError::Net {
                address: address.to_string(),
                source,
            },
        }
    };
    conn.send(frame_type, payload).map_err(net(false))?;
    conn.receive().map_err(net(true))
}

/// Envelope keys by session id (one key derivation per session, not per request).
#[derive(Default)]
pub(crate) struct EnvelopeKeys(HashMap<[u8; 16], protection::EnvelopeKeys>);

impl EnvelopeKeys {
    pub(crate) fn get(
        &mut self,
        session_id: &[u8; 16],
        secret: &[u8; 32],
    ) -> protection::EnvelopeKeys {
        if let Some(k) = self.0.get(session_id) {
            return k.clone();
        }
        if self.0.len() >= crate::limits::ENVELOPE_KEYS_CACHED_MAX {
            self.0.clear();
        }
        let k = protection::EnvelopeKeys::new(secret);
        self.0.insert(*session_id, k.clone());
        k
    }
}

/// Offset from the local clock reading `local_now` to a server clock that reads
/// `server_now` at that moment.
pub(crate) fn offset_to(server_now: u64, local_now: u64) -> i64 {
    let diff = i128::from(server_now) - i128::from(local_now);
    diff.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// A daemon that just restarted refuses requests dated within its first
/// `FUTURE_SKEW_MILLIS` (T7); a retry after that long succeeds with a fresh timestamp.
/// The clock offset measured at login or session setup lags the server by the answer's
/// one-way delay (large on a loaded machine), so a fresh timestamp can still fall inside
/// that first stretch: up to [`STALE_RETRIES`] retries, each after the same wait.
pub(crate) fn retry_stale<T>(clock: &LocalClock, mut call: impl FnMut() -> Result<T>) -> Result<T> {
    let mut retries = 0;
    loop {
        match call() {
            Err(ClientError::Refused(e))
                if retries < STALE_RETRIES
                    && matches!(e.code, ErrorCode::StaleRequest | ErrorCode::NotReady) =>
            {
                retries += 1;
                clock.sleep(wire::FUTURE_SKEW_MILLIS + 50);
            }
            other => return other,
        }
    }
}

pub(crate) use crate::limits::STALE_RETRIES;
