//! Login and registration (SPEC M1, T6): OPAQUE, so the passphrase never leaves this
//! machine and the MDS stores nothing a client could log in with.
//!
//! A login is three messages: KE1 with the keys the ticket will name, KE2 from the MDS
//! (this is where the client authenticates the MDS: a server without the user's record
//! cannot make a KE2 that verifies), KE3 with the ticket in answer. A user whose record
//! predates OPAQUE logs in once the old way and the client at once replaces the record.

use super::*;
use maat_crypto::pake;
use zeroize::Zeroizing;

pub use crate::limits::KDF_ITERATIONS_MAX;
pub use crate::limits::KDF_LANES_MAX;
pub use crate::limits::KDF_MEMORY_KIB_MAX;

/// Refuses key-stretching parameters a forged login answer could use to make passphrase
/// guessing cheap (too weak) or to exhaust this machine (too strong).
fn check_kdf_params(p: &KdfParams) -> Result<()> {
    let floor = kdf::PassphraseParams::DEFAULT;
    if p.memory_kib < floor.memory_kib || p.iterations < floor.iterations || p.lanes == 0 {
        return Err(ClientError::BadAnswer {
            address: "the MDS".into(),
            reason: "it asked for weaker passphrase stretching than Argon2id's defaults; refusing (forged answer?)".into(),
        });
    }
    if p.memory_kib > KDF_MEMORY_KIB_MAX
        || p.iterations > KDF_ITERATIONS_MAX
        || p.lanes > KDF_LANES_MAX
    {
        return Err(ClientError::BadAnswer {
            address: "the MDS".into(),
            reason: "it asked for unreasonable passphrase stretching; refusing".into(),
        });
    }
    Ok(())
}

fn login_crypto(source: maat_crypto::CryptoError) -> ClientError {
    ClientError::Crypto {
        what: "login",
        source,
    }
}

/// The OPAQUE password and stretching of a credential: a stored key has full entropy and
/// always uses [`login::KEY_CREDENTIAL_PARAMS`], whatever the MDS says.
fn password(credential: &Credential<'_>) -> (Zeroizing<Vec<u8>>, Option<kdf::PassphraseParams>) {
    match credential {
        Credential::Key(k) => (
            Zeroizing::new(k.expose().to_vec()),
            Some(login::KEY_CREDENTIAL_PARAMS),
        ),
        Credential::Passphrase(p) => (Zeroizing::new(p.to_vec()), None),
    }
}

/// What the first messages of a login gave: an OPAQUE exchange ready to finish, or the
/// MDS's word that the user's record predates OPAQUE.
enum Exchanged {
    Opaque(Vec<u8>, pake::ClientLoginFinish),
    Legacy { mds_time: u64 },
}

/// The keys a login asks the ticket to name.
struct LoginKeys {
    signing: SigningKey,
    sealing: SealingSecretKey,
    nonce: [u8; 16],
}

impl LoginKeys {
    fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut nonce = [0u8; 16];
        rng.fill_bytes(&mut nonce);
        Self {
            signing: SigningKey::generate(rng),
            sealing: SealingSecretKey::generate(rng),
            nonce,
        }
    }
}

impl Client {
    /// SPEC M1, T6: logs in as `name` with OPAQUE.
    pub fn login(&self, name: &str, credential: Credential<'_>) -> Result<()> {
        let address = self.mds_address();
        let keys = LoginKeys::generate(&mut self.key_rng());
        let signing_key = keys.signing.verifying_key().to_bytes();
        let sealing_key = keys.sealing.public_key().0;
        let (login_state, done) =
            match self.opaque_exchange(name, &credential, signing_key, sealing_key, keys.nonce)? {
                Exchanged::Opaque(state, done) => (state, done),
                Exchanged::Legacy { mds_time } => {
                    return self.legacy_login_and_migrate(name, &credential, mds_time)
                }
            };
        let finish = crate::encode(&MdsPlainRequest::OpaqueLoginFinish {
            state: login_state,
            ke3: done.ke3,
        })?;
        let (ticket, mac) = match self.plain_mds(&finish)? {
            MdsPlainResponse::LoginOk { ticket, mac, .. } => (ticket, mac),
            _ => return Err(self.bad(&address, "unexpected answer to login")),
        };
        let owner = Some(done.export_secret.clone());
        self.start_session(name, keys, &ticket, mac, done.session_key.as_slice(), owner)
    }

    /// The first three messages of an OPAQUE login as `name` whose ticket is to name
    /// `signing_key` and `sealing_key` (SPEC T6's cookie round included): the MDS's sealed
    /// state and KE3, ready for `OpaqueLoginFinish` or, made with
    /// `login::passphrase_proof_keys`, as the proof of a passphrase.
    fn opaque_exchange(
        &self,
        name: &str,
        credential: &Credential<'_>,
        signing_key: [u8; 32],
        sealing_key: [u8; 32],
        nonce: [u8; 16],
    ) -> Result<Exchanged> {
        let address = self.mds_address();
        let (password, fixed) = password(credential);
        let (state, ke1) =
            pake::client_login_start(&password, &mut self.key_rng()).map_err(login_crypto)?;
        // SPEC T6: the first KE1 comes back with a cookie for this address; the second,
        // carrying it, gets the MDS's KE2.
        let mut cookie = None;
        let (ke2, params, login_state) = loop {
            let start = crate::encode(&MdsPlainRequest::OpaqueLoginStart {
                name: name.into(),
                ke1: ke1.clone(),
                signing_key,
                sealing_key,
                nonce,
                cookie,
            })?;
            match self.plain_mds(&start)? {
                MdsPlainResponse::OpaqueLoginChallenge {
                    ke2, params, state, ..
                } => break (ke2, params, state),
                MdsPlainResponse::LegacyLoginRequired { mds_time } => {
                    return Ok(Exchanged::Legacy { mds_time });
                }
                MdsPlainResponse::LoginCookie { cookie: c } if cookie.is_none() => {
                    cookie = Some(c);
                }
                MdsPlainResponse::LoginCookie { .. } => {
                    return Err(self.bad(&address, "the MDS refused the login cookie it just gave"))
                }
                _ => return Err(self.bad(&address, "unexpected answer to login start")),
            }
        };
        let params = match fixed {
            Some(p) => p,
            None => {
                check_kdf_params(&params)?;
                params.into()
            }
        };
        let context = login::opaque_login_context(name, &signing_key, &sealing_key, &nonce);
        let done = state
            .finish(
                &password,
                &ke2,
                &context,
                params,
                maat_crypto::counters::global(),
                &mut self.key_rng(),
            )
            .map_err(|_| {
                // The same answer for a wrong passphrase, an unknown user and an MDS that
                // does not hold the user's record (not the real MDS).
                ClientError::Refused(WireError::new(
                    ErrorCode::AuthenticationFailed,
                    "wrong name or passphrase (or not the MDS this user registered with)",
                ))
            })?;
        if let Some(pinned) = self.cluster.mds_opaque_key()? {
            if !maat_crypto::ct_eq(&pinned, &done.server_public_key) {
                return Err(self.bad(
                    &address,
                    "the MDS's OPAQUE key differs from the cluster file's",
                ));
            }
        }
        Ok(Exchanged::Opaque(login_state, done))
    }

    /// The login from before OPAQUE (a MAC under the Argon2id key), for a user whose
    /// record is still of that kind; then the record is replaced by an OPAQUE one.
    fn legacy_login_and_migrate(
        &self,
        name: &str,
        credential: &Credential<'_>,
        mds_time: u64,
    ) -> Result<()> {
        let address = self.mds_address();
        let start = crate::encode(&MdsPlainRequest::LoginStart { name: name.into() })?;
        let (salt, params) = match self.plain_mds(&start)? {
            MdsPlainResponse::LoginChallenge { salt, params, .. } => (salt, params),
            _ => return Err(self.bad(&address, "unexpected answer to login start")),
        };
        let user_key = match credential {
            Credential::Key(k) => k.clone(),
            Credential::Passphrase(p) => {
                check_kdf_params(&params)?;
                kdf::passphrase_key(p, &salt, params.into()).map_err(login_crypto)?
            }
        };
        // Provisional offset for this request only (the answer was unauthenticated; a
        // forged one can only make the login fail). The session's comes from the ticket.
        let local = self.clock.now();
        let timestamp = local.saturating_add_signed(offset_to(mds_time, local));
        let keys = LoginKeys::generate(&mut self.key_rng());
        let signing_key = keys.signing.verifying_key().to_bytes();
        let sealing_key = keys.sealing.public_key().0;
        let parts =
            login::login_mac_parts(name, &signing_key, &sealing_key, timestamp, &keys.nonce);
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        let request = crate::encode(&MdsPlainRequest::Login {
            name: name.into(),
            signing_key,
            sealing_key,
            timestamp,
            nonce: keys.nonce,
            mac: MacKey::new(user_key.clone()).tag(&refs),
        })?;
        let (ticket, mac) = match self.plain_mds(&request)? {
            MdsPlainResponse::LoginOk { ticket, mac, .. } => (ticket, mac),
            _ => return Err(self.bad(&address, "unexpected answer to login")),
        };
        self.start_session(name, keys, &ticket, mac, user_key.expose(), None)?;
        // The MDS still holds a password-equivalent for this user: replace it now.
        let (password, fixed) = password(credential);
        let params = fixed.unwrap_or(params.into());
        let sealed = self.registration_upload(name, &password, params)?;
        self.expect_ok(MdsRequest::SetCredential {
            params: params.into(),
            sealed_upload: sealed,
        })
    }

    /// Checks the ticket (MDS signature, our keys in it) and the answer's MAC under the
    /// new session key (derived from `secret`), then keeps the session.
    fn start_session(
        &self,
        name: &str,
        keys: LoginKeys,
        ticket: &[u8],
        mac: [u8; 32],
        secret: &[u8],
        owner_secret: Option<Secret32>,
    ) -> Result<()> {
        let address = self.mds_address();
        let unverified = Unverified::<LoginTicket>::decode(ticket)
            .map_err(|e| self.bad(&address, &format!("login ticket: {e}")))?;
        let clock_offset = offset_to(
            unverified
                .unverified_body()
                .start
                .0
                .saturating_add(login::TOKEN_BACKDATE_MILLIS),
            self.clock.now(),
        );
        let verified = unverified
            .verify(
                &self.mds_key,
                UnixMillis(self.clock.now().saturating_add_signed(clock_offset)),
            )
            .map_err(|e| self.bad(&address, &format!("login ticket: {e}")))?;
        if verified.client_signing_key != keys.signing.verifying_key().to_bytes()
            || verified.client_sealing_key.0 != keys.sealing.public_key().0
        {
            return Err(self.bad(&address, "the ticket names other keys than this login's"));
        }
        let session_key =
            login::mds_session_key(secret, ticket, &keys.nonce).map_err(login_crypto)?;
        let expected = login::login_ok_mac(&MacKey::new(session_key.clone()), ticket, &keys.nonce);
        if !maat_crypto::ct_eq(&expected, &mac) {
            return Err(self.bad(&address, "login answer MAC (wrong MDS?)"));
        }
        *self.session.lock() = Some(SessionState {
            version: home::SESSION_FORMAT,
            user: name.into(),
            uid: verified.user.0,
            ticket: ticket.to_vec(),
            session_id: login::mds_session_id(ticket),
            key: session_key,
            signing_seed: Secret32::from_bytes(*keys.signing.to_seed()),
            sealing_secret: Secret32::from_bytes(*keys.sealing.to_bytes()),
            owner_secret,
            expiry: verified.expiry.0,
            clock_offset,
            osd_sessions: Vec::new(),
            opened: Vec::new(),
            stats: self.client_stats(),
        });
        // Opens and reservations were made under the previous login, perhaps as
        // another user.
        self.opened.lock().clear();
        self.forget_reserved();
        self.save()
    }

    /// Runs OPAQUE registration for `name` with the MDS (over the authenticated channel)
    /// and returns the upload sealed to the MDS. The key stretching runs here.
    fn registration_upload(
        &self,
        name: &str,
        password: &[u8],
        params: kdf::PassphraseParams,
    ) -> Result<Vec<u8>> {
        let (state, request) =
            pake::client_registration_start(password, &mut self.key_rng()).map_err(login_crypto)?;
        let response = match self.mds_call(MdsRequest::RegisterStart {
            name: name.into(),
            request,
        })? {
            MdsResponse::RegistrationResponse { response } => response,
            _ => {
                let address = self.mds_address();
                return Err(self.bad(&address, "unexpected answer to registration"));
            }
        };
        let (upload, _) = state
            .finish(
                password,
                &response,
                params,
                maat_crypto::counters::global(),
                &mut self.key_rng(),
            )
            .map_err(login_crypto)?;
        login::seal_registration_upload(
            &self.cluster.mds_sealing_key()?,
            name,
            &upload,
            &mut self.key_rng(),
        )
        .map_err(|source| ClientError::Crypto {
            what: "registration upload",
            source,
        })
    }

    /// Administrator: adds a user registered here with `passphrase` (OPAQUE: the MDS
    /// learns neither the passphrase nor anything that logs in).
    pub fn user_add(
        &self,
        name: &str,
        groups: &[String],
        passphrase: &[u8],
        params: kdf::PassphraseParams,
    ) -> Result<()> {
        let sealed = self.registration_upload(name, passphrase, params)?;
        self.expect_ok(MdsRequest::UserAddOpaque {
            name: name.into(),
            groups: groups.to_vec(),
            params: params.into(),
            sealed_upload: sealed,
        })
    }

    /// Changes the logged-in user's passphrase from `current` to `new` (issue 40): the MDS
    /// takes the change only with a proof of `current` made for this session (an OPAQUE
    /// exchange not finished as a login), and then ends the user's other sessions. The key
    /// stretching of both runs here; neither passphrase leaves this machine.
    pub fn change_passphrase(
        &self,
        current: Credential<'_>,
        new: &[u8],
        params: kdf::PassphraseParams,
    ) -> Result<()> {
        let name = self.user_name().ok_or(ClientError::NotLoggedIn)?;
        self.ensure_session()?;
        let session = self.session_id().ok_or(ClientError::NotLoggedIn)?;
        let (signing_key, sealing_key) = login::passphrase_proof_keys(&session);
        let mut nonce = [0u8; 16];
        self.key_rng().fill_bytes(&mut nonce);
        let (state, done) =
            match self.opaque_exchange(&name, &current, signing_key, sealing_key, nonce)? {
                Exchanged::Opaque(state, done) => (state, done),
                Exchanged::Legacy { .. } => {
                    return Err(ClientError::InvalidArgument(
                        "this account still has a record from before OPAQUE: log in again, \
                         which moves it, then change the passphrase"
                            .into(),
                    ))
                }
            };
        let sealed = self.registration_upload(&name, new, params)?;
        self.expect_ok(MdsRequest::ChangePassphrase {
            state,
            ke3: done.ke3,
            params: params.into(),
            sealed_upload: sealed,
        })
    }

    /// Administrator: gives user `name` the passphrase `new` without the current one (a
    /// forgotten passphrase). The MDS logs it and ends the user's sessions.
    pub fn reset_passphrase(
        &self,
        name: &str,
        new: &[u8],
        params: kdf::PassphraseParams,
    ) -> Result<()> {
        let sealed = self.registration_upload(name, new, params)?;
        self.expect_ok(MdsRequest::UserResetPassphrase {
            name: name.into(),
            params: params.into(),
            sealed_upload: sealed,
        })
    }
}
