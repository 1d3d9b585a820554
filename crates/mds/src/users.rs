//! Users and how they prove who they are (SPEC M1, T6): OPAQUE login and registration,
//! the one legacy login that moves a record from before OPAQUE to OPAQUE, tickets, and
//! user and group administration.
//!
//! The MDS stores, per user, an OPAQUE registration record ([`UserCredential::Opaque`]):
//! a copy of the database yields no key that logs in, only an offline guess per passphrase.
//! Between KE2 and KE3 the MDS keeps nothing: the login state travels with the client,
//! sealed by the MDS to its own X25519 key, so a flood of first messages costs memory
//! nowhere.

use super::*;
use maat_crypto::pake;
use maat_proto::login::{
    opaque_login_context, KEY_CREDENTIAL_PARAMS, LOGIN_STATE_LIFETIME_MILLIS,
    LOGIN_STATE_SEAL_CONTEXT, REGISTRATION_SEAL_CONTEXT,
};
use maat_proto::UserId;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The MDS's long-term secrets. The daemon keeps them in key files of their own, never in
/// the metadata store, so a copy of the database does not carry the root of trust.
pub struct MdsSecrets {
    /// Ed25519 seed: signs tickets and capabilities.
    pub signing_seed: Secret32,
    /// X25519 secret: opens what clients seal to the MDS.
    pub sealing_secret: Secret32,
    /// Keys the decoy answers for unknown users of the legacy login.
    pub decoy_key: Secret32,
    /// OPAQUE server setup (OPRF seed and static key pair).
    pub opaque_setup: Zeroizing<Vec<u8>>,
}

impl MdsSecrets {
    /// Fresh secrets for a new cluster.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut bytes = || {
            let mut k = [0u8; 32];
            rng.fill_bytes(&mut k);
            Secret32::from_bytes(k)
        };
        let signing_seed = bytes();
        let sealing_secret = bytes();
        let decoy_key = bytes();
        Self {
            signing_seed,
            sealing_secret,
            decoy_key,
            opaque_setup: pake::ServerSetup::generate(rng).to_bytes(),
        }
    }

    /// The secrets a store of format 0 kept in its `meta` table (signing seed, sealing
    /// secret, decoy key), for the daemon to move into key files before [`Mds::open`]
    /// deletes them from the store.
    pub fn legacy_from_store<S: MetaStore>(store: &S) -> Result<Option<[Secret32; 3]>> {
        let [a, b, c] = store::LEGACY_SECRET_KEYS;
        match (
            meta_array(store, a)?,
            meta_array(store, b)?,
            meta_array(store, c)?,
        ) {
            (Some(a), Some(b), Some(c)) => Ok(Some([
                Secret32::from_bytes(a),
                Secret32::from_bytes(b),
                Secret32::from_bytes(c),
            ])),
            _ => Ok(None),
        }
    }
}

/// Key-derivation context of the login-cookie key.
pub(crate) const COOKIE_KEY_CONTEXT: &[u8] = b"maat/mds/login-cookie-key/v1";
pub(crate) use crate::limits::COOKIE_SLOT_MILLIS;

/// Domain of the legacy login's decoy salts (what `LoginStart` answers for a name without
/// a legacy record).
const DECOY_SALT_CONTEXT: &[u8] = b"maat/mds/decoy-salt/v2";
/// Domain of the legacy login's decoy keys (what a `Login` MAC for such a name is checked
/// against, so that it fails like a wrong passphrase).
const DECOY_KEY_CONTEXT: &[u8] = b"maat/mds/decoy-key/v2";

/// A decoy for `name` in one domain: a key derived from the decoy key for that domain
/// alone, over the name. The two domains share no input, so no name's salt is a part of
/// any name's key (before issue 40 the salt of `"decoy user key" ‖ name` was the first
/// half of `name`'s key).
fn decoy(decoy_key: &Secret32, context: &[u8], name: &str) -> [u8; 32] {
    let domain = hash::blake3_keyed(decoy_key.expose(), &[context]);
    hash::blake3_keyed(&domain, &[name.as_bytes()])
}

/// SPEC T6: the anti-clogging cookie for `peer` at `now`: a keyed hash of the address and
/// the time slot, so the MDS keeps nothing and checks one with one hash.
pub(crate) fn login_cookie(key: &Secret32, peer: &[u8], now: UnixMillis) -> [u8; 32] {
    maat_crypto::hash::blake3_keyed(
        key.expose(),
        &[
            b"maat/login-cookie/v1\0",
            &(peer.len() as u32).to_be_bytes(),
            peer,
            &(now.0 / COOKIE_SLOT_MILLIS).to_be_bytes(),
        ],
    )
}

/// What the MDS hands the client with KE2 and gets back with KE3, sealed to itself.
#[derive(Serialize, Deserialize)]
struct LoginState {
    version: u8,
    name: String,
    signing_key: [u8; 32],
    sealing_key: [u8; 32],
    nonce: [u8; 16],
    /// The MDS's clock at KE2: dates the login for the replay window.
    started: u64,
    server: Vec<u8>,
}

const LOGIN_STATE_VERSION: u8 = 1;

fn failed() -> MdsError {
    MdsError::refused(ErrorCode::AuthenticationFailed, "")
}

/// Refuses stretching below Argon2id's defaults for passphrases (stored-key identities,
/// whose input has full entropy, use [`KEY_CREDENTIAL_PARAMS`]).
fn check_params(params: KdfParams, stored_key: bool) -> Result<()> {
    if stored_key && params == KdfParams::from(KEY_CREDENTIAL_PARAMS) {
        return Ok(());
    }
    let floor = kdf::PassphraseParams::DEFAULT;
    if params.memory_kib < floor.memory_kib
        || params.iterations < floor.iterations
        || params.lanes == 0
    {
        return Err(MdsError::refused(
            ErrorCode::InvalidArgument,
            "key stretching weaker than Argon2id's defaults",
        ));
    }
    Ok(())
}

/// Registers a stored key (the administrator's) as an OPAQUE password, running both
/// ends of the registration here: used once, when the MDS creates the administrator.
pub(crate) fn register_stored_key(
    setup: &pake::ServerSetup,
    name: &str,
    key: &[u8; 32],
    counters: &Counters,
    rng: &mut impl CryptoRngCore,
) -> Result<UserCredential> {
    let (state, request) = pake::client_registration_start(key, rng)?;
    let response = setup.registration_response(&request, name.as_bytes())?;
    let (upload, _) = state.finish(key, &response, KEY_CREDENTIAL_PARAMS, counters, rng)?;
    Ok(UserCredential::Opaque {
        record: pake::server_registration_record(&upload)?,
        params: KEY_CREDENTIAL_PARAMS.into(),
    })
}

impl<S: MetaStore> Mds<S> {
    // ---------------------------------------------------------------- OPAQUE login

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn opaque_login_start(
        &self,
        name: &str,
        ke1: &[u8],
        signing_key: [u8; 32],
        sealing_key: [u8; 32],
        nonce: [u8; 16],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        let (record, params) = match self.store.user_by_name(name)? {
            Some(UserRecord {
                credential: UserCredential::Opaque { record, params },
                ..
            }) => (Some(record), params),
            Some(UserRecord {
                credential: UserCredential::Legacy { .. },
                ..
            }) => return Ok(MdsPlainResponse::LegacyLoginRequired { mds_time: now.0 }),
            // Unknown users get a KE2 that looks like a real one (same OPRF key for the
            // same name, random envelope); their login fails at KE3 like a wrong passphrase.
            None => (None, kdf::PassphraseParams::DEFAULT.into()),
        };
        let context = opaque_login_context(name, &signing_key, &sealing_key, &nonce);
        let (ke2, server) = self
            .pake
            .login_start(
                record.as_deref(),
                ke1,
                name.as_bytes(),
                &context,
                &self.counters,
                rng,
            )
            .map_err(|_| MdsError::refused(ErrorCode::Malformed, "OPAQUE KE1"))?;
        let state = Zeroizing::new(msg::encode(&LoginState {
            version: LOGIN_STATE_VERSION,
            name: name.into(),
            signing_key,
            sealing_key,
            nonce,
            started: now.0,
            server: server.to_vec(),
        })?);
        let state = self.sealing.public_key().seal_counted(
            LOGIN_STATE_SEAL_CONTEXT,
            b"",
            &state,
            rng,
            &self.counters,
        )?;
        Ok(MdsPlainResponse::OpaqueLoginChallenge {
            ke2,
            params,
            state,
            mds_time: now.0,
        })
    }

    pub(crate) fn opaque_login_finish(
        &self,
        state: &[u8],
        ke3: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        let (state, session, user) = self.check_login_proof(state, ke3, now)?;
        self.issue_ticket(
            &user,
            state.signing_key,
            state.sealing_key,
            session.as_slice(),
            state.started,
            state.nonce,
            now,
            rng,
        )
    }

    /// The second half of an OPAQUE login: the sealed state opened and in time, KE3
    /// checked against it, the user's record an OPAQUE one. Answers the state, the OPAQUE
    /// session key and the user; any failure is the one `AuthenticationFailed`.
    fn check_login_proof(
        &self,
        state: &[u8],
        ke3: &[u8],
        now: UnixMillis,
    ) -> Result<(LoginState, Zeroizing<Vec<u8>>, UserRecord)> {
        let opened = Zeroizing::new(
            self.sealing
                .open(LOGIN_STATE_SEAL_CONTEXT, b"", state)
                .map_err(|_| failed())?,
        );
        let mut state: LoginState = msg::decode(&opened).map_err(|_| failed())?;
        if state.version != LOGIN_STATE_VERSION {
            return Err(failed());
        }
        let server = Zeroizing::new(std::mem::take(&mut state.server));
        if state.started.saturating_add(LOGIN_STATE_LIFETIME_MILLIS) <= now.0 {
            return Err(MdsError::refused(
                ErrorCode::AuthenticationFailed,
                "login took too long; start again",
            ));
        }
        let context = opaque_login_context(
            &state.name,
            &state.signing_key,
            &state.sealing_key,
            &state.nonce,
        );
        let session = pake::server_login_finish(&server, ke3, &context, &self.counters)
            .map_err(|_| failed())?;
        let user = match self.store.user_by_name(&state.name)? {
            Some(u) if matches!(u.credential, UserCredential::Opaque { .. }) => u,
            _ => return Err(failed()),
        };
        Ok((state, Zeroizing::new(session.as_slice().to_vec()), user))
    }

    // ---------------------------------------------------------------- legacy login

    /// Salt and parameters for the legacy login: the record's for a user from before
    /// OPAQUE, a decoy derived from the name for everyone else.
    pub(crate) fn legacy_login_start(
        &self,
        name: &str,
        now: UnixMillis,
    ) -> Result<MdsPlainResponse> {
        let (salt, params) = match self.store.user_by_name(name)? {
            Some(UserRecord {
                credential: UserCredential::Legacy { salt, params, .. },
                ..
            }) => (salt, params),
            _ => {
                let d = decoy(&self.decoy_key, DECOY_SALT_CONTEXT, name);
                let mut salt = [0u8; 16];
                salt.copy_from_slice(d.get(..16).unwrap_or(&[0u8; 16]));
                (salt, kdf::PassphraseParams::DEFAULT.into())
            }
        };
        Ok(MdsPlainResponse::LoginChallenge {
            salt,
            params,
            mds_time: now.0,
        })
    }

    /// SPEC M1 as before OPAQUE: a MAC under the stored Argon2id key. Only users whose
    /// record is still [`UserCredential::Legacy`] can pass; the client then replaces the
    /// record with `SetCredential`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn legacy_login(
        &self,
        name: &str,
        signing_key: [u8; 32],
        sealing_key: [u8; 32],
        timestamp: u64,
        nonce: [u8; 16],
        mac: [u8; 32],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        // Same checks, same order and one error for known and unknown users: time, then a
        // MAC check (against a decoy key when the user has no legacy record).
        lock(&self.replay)
            .check_time(UnixMillis(timestamp), now)
            .map_err(freshness_error)?;
        // Only a record still in the legacy form logs in this way: for every other name
        // (unknown, or already moved to OPAQUE) the MAC is checked against a decoy key
        // and the answer is a failure whatever it gives, so the decoy key logs nobody in
        // (issue 40: it let its holder log in as any OPAQUE user).
        let legacy = self.store.user_by_name(name)?.and_then(|u| {
            let key = match &u.credential {
                UserCredential::Legacy { key, .. } => *key,
                _ => return None,
            };
            Some((u, key))
        });
        let key = legacy.as_ref().map_or_else(
            || decoy(&self.decoy_key, DECOY_KEY_CONTEXT, name),
            |(_, key)| *key,
        );
        let user_key = MacKey::new(Secret32::from_bytes(key)).with_counters(self.counters.clone());
        let mac_ok = user_key
            .verify(
                &login_mac_parts(name, &signing_key, &sealing_key, timestamp, &nonce)
                    .iter()
                    .map(|v| v.as_slice())
                    .collect::<Vec<_>>(),
                &mac,
            )
            .is_ok();
        let user = match (legacy, mac_ok) {
            (Some((u, _)), true) => u,
            _ => return Err(failed()),
        };
        self.issue_ticket(
            &user,
            signing_key,
            sealing_key,
            &key,
            timestamp,
            nonce,
            now,
            rng,
        )
    }

    /// Records the login nonce (a login is accepted once), signs the ticket, derives the
    /// session key from `secret` (what both ends proved to share) and stores the session.
    #[allow(clippy::too_many_arguments)]
    fn issue_ticket(
        &self,
        user: &UserRecord,
        signing_key: [u8; 32],
        sealing_key: [u8; 32],
        secret: &[u8],
        timestamp: u64,
        nonce: [u8; 16],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        let mut sid = [0u8; 16];
        if let Some(s) = sid.get_mut(..8) {
            s.copy_from_slice(&user.id.to_be_bytes());
        }
        self.fresh(&sid, &nonce, UnixMillis(timestamp), now)?;
        let mut iv = [0u8; 16];
        rng.fill_bytes(&mut iv);
        let ticket = LoginTicket {
            ticket_id: rng.next_u64(),
            user: UserId(user.id),
            client_signing_key: signing_key,
            client_sealing_key: maat_crypto::seal::SealingPublicKey(sealing_key),
            iv,
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: now.plus_millis(self.config.ticket_lifetime_millis),
        };
        let ticket = signed::sign(ticket, &self.signing);
        self.remember_ticket(user.id, ticket.encoded());
        let session_key = mds_session_key(secret, ticket.encoded(), &nonce)?;
        let session_id = mds_session_id(ticket.encoded());
        let tag = login_ok_mac(
            &MacKey::new(session_key.clone()).with_counters(self.counters.clone()),
            ticket.encoded(),
            &nonce,
        );
        let record = SessionRecord {
            user: user.id,
            sealed_key: self.seal_session_key(&session_id, &session_key, rng)?,
            expiry: ticket.expiry.0,
        };
        let mut batch = Batch::default();
        batch.push(Op::PutSession(session_id, record.clone()));
        self.store.commit(batch)?;
        self.remember_session(session_id, record, &session_key);
        let logins = self.stats.logins.fetch_add(1, Ordering::Relaxed) + 1;
        if logins % SESSION_SWEEP_LOGINS == 0 {
            self.sweep_sessions(now)?;
        }
        Ok(MdsPlainResponse::LoginOk {
            ticket: ticket.encoded().to_vec(),
            mac: tag,
            mds_time: now.0,
        })
    }

    // ---------------------------------------------------------------- registration

    /// OPAQUE registration, first step, for `name`: the administrator for anyone, a user
    /// for themself.
    pub(crate) fn register_start(
        &self,
        who: &Principal,
        name: &str,
        request: &[u8],
    ) -> Result<MdsResponse> {
        if !who.is_admin() {
            let me = self
                .store
                .user(who.uid)?
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
            if me.name != name {
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    "only the administrator registers other users",
                ));
            }
        }
        namespace::check_name(name)?;
        let response = self
            .pake
            .registration_response(request, name.as_bytes())
            .map_err(|_| MdsError::refused(ErrorCode::Malformed, "OPAQUE registration request"))?;
        Ok(MdsResponse::RegistrationResponse { response })
    }

    /// Opens a registration upload sealed to the MDS for `name` into a stored credential.
    fn opaque_credential(
        &self,
        name: &str,
        params: KdfParams,
        sealed_upload: &[u8],
    ) -> Result<UserCredential> {
        let upload = Zeroizing::new(
            self.sealing
                .open(REGISTRATION_SEAL_CONTEXT, name.as_bytes(), sealed_upload)
                .map_err(|_| {
                    MdsError::refused(ErrorCode::BadMac, "sealed registration does not open")
                })?,
        );
        let record = pake::server_registration_record(&upload)
            .map_err(|_| MdsError::refused(ErrorCode::Malformed, "OPAQUE registration upload"))?;
        Ok(UserCredential::Opaque { record, params })
    }

    /// The caller moves their own legacy record to OPAQUE, right after a legacy login.
    /// Nothing else: a passphrase change proves the current passphrase
    /// ([`Mds::change_passphrase`]); before issue 40 this replaced any record, so a stolen
    /// session became a permanent account takeover.
    pub(crate) fn set_credential(
        &self,
        who: &Principal,
        params: KdfParams,
        sealed_upload: &[u8],
    ) -> Result<MdsResponse> {
        check_params(params, who.is_admin())?;
        let _guard = self.writing()?;
        let mut user = self
            .store
            .user(who.uid)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
        if !matches!(user.credential, UserCredential::Legacy { .. }) {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                "changing a passphrase needs the current one (maat passwd); an administrator \
                 resets a forgotten one (maat admin user reset)",
            ));
        }
        user.credential = self.opaque_credential(&user.name, params, sealed_upload)?;
        let mut batch = Batch::default();
        batch.push(Op::PutUser(user));
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    /// `ChangePassphrase` (issue 40): the caller proves the current passphrase with an
    /// OPAQUE exchange made for this session (its keys are
    /// `login::passphrase_proof_keys(session)`, so neither a login's exchange, captured
    /// on the wire, nor a proof made in another session is taken), once (its nonce goes
    /// into the login replay window), and only for themselves; then the new credential
    /// replaces the old and the caller's other MDS sessions end.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn change_passphrase(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        state: &[u8],
        ke3: &[u8],
        params: KdfParams,
        sealed_upload: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let session = session.ok_or_else(|| {
            MdsError::refused(
                ErrorCode::PermissionDenied,
                "a passphrase change needs a login session",
            )
        })?;
        let (proof, _, user) = self.check_login_proof(state, ke3, now)?;
        let (signing_key, sealing_key) = maat_proto::login::passphrase_proof_keys(session);
        if !maat_crypto::ct_eq(&proof.signing_key, &signing_key)
            || !maat_crypto::ct_eq(&proof.sealing_key, &sealing_key)
        {
            return Err(MdsError::refused(
                ErrorCode::AuthenticationFailed,
                "the proof of the current passphrase was not made for this session",
            ));
        }
        if user.id != who.uid {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                "a proof of another user's passphrase",
            ));
        }
        let mut sid = [0u8; 16];
        if let Some(s) = sid.get_mut(..8) {
            s.copy_from_slice(&user.id.to_be_bytes());
        }
        self.fresh(&sid, &proof.nonce, UnixMillis(proof.started), now)?;
        check_params(params, who.is_admin())?;
        let credential = self.opaque_credential(&user.name, params, sealed_upload)?;
        self.replace_credential(who.uid, credential, Some(session))?;
        self.stats
            .passphrase_changes
            .fetch_add(1, Ordering::Relaxed);
        Ok(MdsResponse::Ok)
    }

    /// `UserResetPassphrase` (issue 40): the administrator gives `name` a new passphrase
    /// without the current one; every session of the user ends, and the reset is counted
    /// (`passphrase_resets`) for the daemon to log.
    pub(crate) fn user_reset_passphrase(
        &self,
        who: &Principal,
        name: &str,
        params: KdfParams,
        sealed_upload: &[u8],
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        check_params(params, false)?;
        let user = self
            .store
            .user_by_name(name)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, name.to_string()))?;
        let credential = self.opaque_credential(name, params, sealed_upload)?;
        self.replace_credential(user.id, credential, None)?;
        self.stats.passphrase_resets.fetch_add(1, Ordering::Relaxed);
        if let Some(log) = lock(&self.audit).clone() {
            log(&format!(
                "the administrator reset the passphrase of user {name} (id {}); its sessions ended",
                user.id
            ));
        }
        Ok(MdsResponse::Ok)
    }

    /// Where administrative acts that bypass a user's own proof are recorded (the daemon
    /// logs them).
    pub fn set_audit_log(&self, log: Arc<AuditLog>) {
        *lock(&self.audit) = Some(log);
    }

    /// Stores `credential` as user `uid`'s and ends every MDS session of the user but
    /// `keep`, in one commit.
    fn replace_credential(
        &self,
        uid: u64,
        credential: UserCredential,
        keep: Option<&[u8; 16]>,
    ) -> Result<()> {
        let _guard = self.writing()?;
        let mut user = self
            .store
            .user(uid)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
        user.credential = credential;
        let mut batch = Batch::default();
        batch.push(Op::PutUser(user));
        let ended: Vec<[u8; 16]> = self
            .store
            .sessions()?
            .into_iter()
            .filter(|(id, s)| s.user == uid && Some(id) != keep)
            .map(|(id, _)| id)
            .collect();
        for id in &ended {
            batch.push(Op::DeleteSession(*id));
        }
        self.store.commit(batch)?;
        let mut sessions = crate::write_lock(&self.sessions);
        for id in &ended {
            sessions.remove(id);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- administration

    pub(crate) fn user_add(
        &self,
        who: &Principal,
        name: &str,
        groups: &[String],
        params: KdfParams,
        sealed_upload: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        namespace::check_new_name(name)?;
        check_params(params, false)?;
        let credential = self.opaque_credential(name, params, sealed_upload)?;
        let _guard = self.writing()?;
        if self.store.user_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("user {name}"),
            ));
        }
        let mut gids = Vec::new();
        for g in groups {
            let group = self
                .store
                .group_by_name(g)?
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchGroup, g.clone()))?;
            gids.push(group.id);
        }
        let mut batch = Batch::default();
        // Each user gets a personal group of the same name; joining an existing group by
        // accident of naming would hand its members the new user's group access.
        if self.store.group_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("a group named {name} exists; pick another user name"),
            ));
        }
        let gid = self.next_id("next_group")?;
        batch.push(Op::PutGroup(GroupRecord {
            id: gid,
            name: name.into(),
        }));
        let uid = self.next_id("next_user")?;
        batch.push(Op::PutUser(UserRecord {
            id: uid,
            name: name.into(),
            credential,
            gid,
            groups: gids,
            umask: self.config.default_umask & 0o777,
        }));
        // A home directory the user owns: /home/NAME, 0755 under the user's umask (0700
        // with the default 077, issue 40). `/home` is found by name (an administrator may
        // have removed or replaced it: then the user has no home, rather than an entry
        // under a directory nobody reaches).
        let home = match self.store.lookup(ROOT_INODE, "home")? {
            Some(id) => self.store.inode(id)?.filter(|i| i.is_dir),
            None => None,
        };
        let home = match home {
            Some(h) if self.store.lookup(h.id, name)?.is_none() => Some(h),
            _ => None,
        };
        if let Some(homes) = home {
            let home = homes.id;
            crate::namespace::relink_dir(&mut batch, &homes, 1, now);
            let ino = self.next_id("next_inode")?;
            batch.push(Op::PutInode(Inode {
                id: ino,
                is_dir: true,
                mode: 0o755 & !(self.config.default_umask & 0o777),
                uid,
                gid,
                size: 0,
                mtime: now.0,
                partition: store::DEFAULT_PARTITION,
                crypt: None,
                key_grants: Vec::new(),
                special: None,
                nlink: 2,
                atime: now.0,
                ctime: now.0,
            }));
            batch.push(Op::PutEntry {
                parent: home,
                name: name.into(),
                child: ino,
            });
        }
        self.acl_change(|stamp| {
            batch.push(stamp);
            Ok(self.store.commit(batch)?)
        })?;
        Ok(MdsResponse::Ok)
    }

    /// `Umask`: reads, or sets, the caller's own umask (issue 40).
    pub(crate) fn umask(&self, who: &Principal, set: Option<u16>) -> Result<MdsResponse> {
        let Some(umask) = set else {
            return Ok(MdsResponse::Umask(who.umask));
        };
        if umask > 0o777 {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("umask {umask:o}: at most 777 (the permission bits cleared)"),
            ));
        }
        let _guard = self.writing()?;
        let mut user = self
            .store
            .user(who.uid)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
        user.umask = umask;
        let mut batch = Batch::default();
        batch.push(Op::PutUser(user));
        self.store.commit(batch)?;
        Ok(MdsResponse::Umask(umask))
    }

    pub(crate) fn user_rm(&self, who: &Principal, name: &str) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = self.writing()?;
        let user = self
            .store
            .user_by_name(name)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, name.to_string()))?;
        if user.id == ADMIN_UID {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "the administrator cannot be removed",
            ));
        }
        let mut batch = Batch::default();
        batch.push(Op::DeleteUser {
            id: user.id,
            name: user.name,
        });
        self.acl_change(|stamp| {
            batch.push(stamp);
            Ok(self.store.commit(batch)?)
        })?;
        Ok(MdsResponse::Ok)
    }

    pub(crate) fn group_add(&self, who: &Principal, name: &str) -> Result<MdsResponse> {
        require_admin(who)?;
        namespace::check_new_name(name)?;
        let _guard = self.writing()?;
        if self.store.group_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("group {name}"),
            ));
        }
        let mut batch = Batch::default();
        let gid = self.next_id("next_group")?;
        batch.push(Op::PutGroup(GroupRecord {
            id: gid,
            name: name.into(),
        }));
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    pub(crate) fn group_member_add(
        &self,
        who: &Principal,
        group: &str,
        user: &str,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = self.writing()?;
        let (group, mut user) = self.group_and_user(group, user)?;
        if user.gid != group.id && !user.groups.contains(&group.id) {
            user.groups.push(group.id);
            let mut batch = Batch::default();
            batch.push(Op::PutUser(user));
            self.acl_change(|stamp| {
                batch.push(stamp);
                Ok(self.store.commit(batch)?)
            })?;
        }
        Ok(MdsResponse::Ok)
    }

    /// The records of `group` and `user`, or the refusal naming the one missing.
    fn group_and_user(&self, group: &str, user: &str) -> Result<(GroupRecord, UserRecord)> {
        let group = self
            .store
            .group_by_name(group)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchGroup, group.to_string()))?;
        let user = self
            .store
            .user_by_name(user)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, user.to_string()))?;
        Ok((group, user))
    }

    /// Removes `user` from `group`: from the next request on, the MDS neither issues nor
    /// renews what the membership gave (SPEC M7); no message goes to any OSD, and what
    /// was issued before ends with its lifetime (or at once with `maat admin revoke`).
    pub(crate) fn group_member_rm(
        &self,
        who: &Principal,
        group: &str,
        user: &str,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = self.writing()?;
        let (group, mut record) = self.group_and_user(group, user)?;
        if record.gid == group.id {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!(
                    "{} is {user}'s primary group; remove the user instead",
                    group.name
                ),
            ));
        }
        if !record.groups.contains(&group.id) {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("{user} is not a member of {}", group.name),
            ));
        }
        record.groups.retain(|g| *g != group.id);
        let mut batch = Batch::default();
        batch.push(Op::PutUser(record));
        self.acl_change(|stamp| {
            batch.push(stamp);
            Ok(self.store.commit(batch)?)
        })?;
        Ok(MdsResponse::Ok)
    }
}
