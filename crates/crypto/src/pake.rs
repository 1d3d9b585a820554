//! OPAQUE (RFC 9807), the augmented PAKE behind Maat's login (SPEC M1, T6), wrapped from
//! the `opaque-ke` crate.
//!
//! The server stores a *registration record* per user: an OPRF-blinded envelope that lets
//! the server take part in a login but holds nothing a client could log in with. A stolen
//! record allows only an offline guess per passphrase, each guess costing one Argon2id run
//! (the key stretching function, [`PassphraseParams`]). A login is three messages:
//! `KE1` (client), `KE2` (server), `KE3` (client); both ends finish with the same 64-byte
//! session key, the client has authenticated the server (KE2 carries a MAC only the holder
//! of the record and the server's static key can make) and the server the client (KE3).
//! The exchange is a 3DH with ephemeral keys, so a later theft of the record or the
//! passphrase does not reveal earlier session keys (forward secrecy).
//!
//! Suite: ristretto255 for the OPRF and the key exchange, SHA-512, Argon2id as the key
//! stretching function. Every byte string here is the `opaque-ke` serialization.

use crate::counters::{bump, Counters};
use crate::kdf::{PassphraseParams, PASSPHRASE_BYTES_MAX};
use crate::{CryptoError, Result};
use opaque_ke::{
    ClientLogin, ClientLoginFinishParameters, ClientRegistration,
    ClientRegistrationFinishParameters, CredentialFinalization, CredentialRequest,
    CredentialResponse, Identifiers, RegistrationRequest, RegistrationResponse, RegistrationUpload,
    ServerLogin, ServerLoginParameters, ServerRegistration,
};
use rand_core::CryptoRngCore;
use zeroize::Zeroizing;

/// The cipher suite (RFC 9807 §7: ristretto255, SHA-512, Argon2id).
struct Suite;

impl opaque_ke::CipherSuite for Suite {
    type OprfCs = opaque_ke::Ristretto255;
    type KeyExchange = opaque_ke::TripleDh<opaque_ke::Ristretto255, sha2::Sha512>;
    type Ksf = argon2::Argon2<'static>;
}

/// Length of the session key both ends derive.
pub const SESSION_KEY_BYTES: usize = 64;

/// A session key from a finished login (zeroized on drop).
pub type SessionKey = Zeroizing<[u8; SESSION_KEY_BYTES]>;

/// The server's long-term OPAQUE secrets (OPRF seed and static key pair). Keep it as
/// secret as the MDS signing key: with it and a record, a server can be impersonated.
pub struct ServerSetup(opaque_ke::ServerSetup<Suite>);

fn malformed(_: impl std::fmt::Debug) -> CryptoError {
    CryptoError::InvalidParameter("malformed OPAQUE message")
}

fn ksf(params: PassphraseParams) -> Result<argon2::Argon2<'static>> {
    let p = argon2::Params::new(params.memory_kib, params.iterations, params.lanes, None)
        .map_err(|_| CryptoError::InvalidParameter("Argon2id parameters"))?;
    Ok(argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        p,
    ))
}

fn check_password(password: &[u8]) -> Result<()> {
    if password.len() > PASSPHRASE_BYTES_MAX {
        return Err(CryptoError::TooLarge {
            what: "passphrase",
            len: password.len(),
            limit: PASSPHRASE_BYTES_MAX,
        });
    }
    Ok(())
}

impl ServerSetup {
    /// A fresh setup.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        Self(opaque_ke::ServerSetup::new(rng))
    }

    /// Serialized form (secret: store it like a private key).
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(self.0.serialize().to_vec())
    }

    /// Reads a serialized setup.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        opaque_ke::ServerSetup::deserialize(bytes)
            .map(Self)
            .map_err(|_| CryptoError::InvalidParameter("OPAQUE server setup"))
    }

    /// The server's static public key (clients may pin it).
    pub fn public_key(&self) -> Vec<u8> {
        self.0.keypair().public().serialize().to_vec()
    }

    /// Registration, server side: answers a client's blinded request for the user
    /// `identifier`. Stateless: the same setup and identifier give the same OPRF key.
    pub fn registration_response(&self, request: &[u8], identifier: &[u8]) -> Result<Vec<u8>> {
        let request = RegistrationRequest::<Suite>::deserialize(request).map_err(malformed)?;
        let result =
            ServerRegistration::<Suite>::start(&self.0, request, identifier).map_err(malformed)?;
        Ok(result.message.serialize().to_vec())
    }

    /// Login, server side, first step: answers `KE1` for `identifier` with `KE2` and the
    /// state to finish with. `record` is `None` for an unknown user: the answer then looks
    /// the same as for a real one and the login fails at [`ServerSetup::login_finish`].
    /// `context` is bound into the transcript; the client must use the same bytes.
    pub fn login_start(
        &self,
        record: Option<&[u8]>,
        ke1: &[u8],
        identifier: &[u8],
        context: &[u8],
        counters: &Counters,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>)> {
        let record = match record {
            Some(r) => Some(ServerRegistration::<Suite>::deserialize(r).map_err(malformed)?),
            None => None,
        };
        let ke1 = CredentialRequest::<Suite>::deserialize(ke1).map_err(malformed)?;
        let result = ServerLogin::start(
            rng,
            &self.0,
            record,
            ke1,
            identifier,
            ServerLoginParameters {
                context: Some(context),
                identifiers: Identifiers::default(),
            },
        )
        .map_err(malformed)?;
        bump!(counters, pake_steps);
        Ok((
            result.message.serialize().to_vec(),
            Zeroizing::new(result.state.serialize().to_vec()),
        ))
    }
}

/// Login, server side, last step: checks the client's `KE3` against the state
/// [`ServerSetup::login_start`] returned; the session key if the client knew the
/// passphrase and agreed on `context`.
pub fn server_login_finish(
    state: &[u8],
    ke3: &[u8],
    context: &[u8],
    counters: &Counters,
) -> Result<SessionKey> {
    let state = ServerLogin::<Suite>::deserialize(state).map_err(malformed)?;
    let ke3 = CredentialFinalization::<Suite>::deserialize(ke3).map_err(malformed)?;
    bump!(counters, pake_steps);
    let result = state
        .finish(
            ke3,
            ServerLoginParameters {
                context: Some(context),
                identifiers: Identifiers::default(),
            },
        )
        .map_err(|_| CryptoError::BadMac)?;
    session_key(&result.session_key)
}

/// Turns an uploaded registration into the record the server stores.
pub fn server_registration_record(upload: &[u8]) -> Result<Vec<u8>> {
    let upload = RegistrationUpload::<Suite>::deserialize(upload).map_err(malformed)?;
    Ok(ServerRegistration::finish(upload).serialize().to_vec())
}

fn session_key(bytes: &[u8]) -> Result<SessionKey> {
    let mut out = Zeroizing::new([0u8; SESSION_KEY_BYTES]);
    if bytes.len() != SESSION_KEY_BYTES {
        return Err(CryptoError::InvalidParameter("OPAQUE session key length"));
    }
    out.copy_from_slice(bytes);
    Ok(out)
}

/// A client's registration in progress.
pub struct ClientRegistrationState(ClientRegistration<Suite>);

/// Registration, client side, first step: the blinded request to send.
pub fn client_registration_start(
    password: &[u8],
    rng: &mut impl CryptoRngCore,
) -> Result<(ClientRegistrationState, Vec<u8>)> {
    check_password(password)?;
    let result = ClientRegistration::<Suite>::start(rng, password).map_err(malformed)?;
    Ok((
        ClientRegistrationState(result.state),
        result.message.serialize().to_vec(),
    ))
}

impl ClientRegistrationState {
    /// Registration, client side, last step: the upload for the server (sensitive: send it
    /// sealed) and the server's static public key. Runs the key stretching function.
    pub fn finish(
        self,
        password: &[u8],
        response: &[u8],
        params: PassphraseParams,
        counters: &Counters,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Zeroizing<Vec<u8>>, Vec<u8>)> {
        let response = RegistrationResponse::<Suite>::deserialize(response).map_err(malformed)?;
        let stretch = ksf(params)?;
        let result = self
            .0
            .finish(
                rng,
                password,
                response,
                ClientRegistrationFinishParameters::new(Identifiers::default(), Some(&stretch)),
            )
            .map_err(malformed)?;
        bump!(counters, passphrase_derivations);
        Ok((
            Zeroizing::new(result.message.serialize().to_vec()),
            result.server_s_pk.serialize().to_vec(),
        ))
    }
}

/// A client's login in progress.
pub struct ClientLoginState(ClientLogin<Suite>);

/// Login, client side, first step: `KE1` to send.
pub fn client_login_start(
    password: &[u8],
    rng: &mut impl CryptoRngCore,
) -> Result<(ClientLoginState, Vec<u8>)> {
    check_password(password)?;
    let result = ClientLogin::<Suite>::start(rng, password).map_err(malformed)?;
    Ok((
        ClientLoginState(result.state),
        result.message.serialize().to_vec(),
    ))
}

/// What a client has after a successful login.
pub struct ClientLoginFinish {
    /// `KE3`, to send to the server.
    pub ke3: Vec<u8>,
    /// The session key.
    pub session_key: SessionKey,
    /// The server's static public key (compare with a pinned one).
    pub server_public_key: Vec<u8>,
    /// A secret derived from the passphrase that the server never learns (OPAQUE's
    /// export key, through HKDF-SHA256): the same at every login until the passphrase
    /// changes. Maat derives the user's lockbox key from it (SPEC H5).
    pub export_secret: crate::Secret32,
}

impl ClientLoginState {
    /// Login, client side, last step: checks the server's `KE2` (this is where a wrong
    /// passphrase or a server without the user's record is detected) and makes `KE3`.
    /// Runs the key stretching function with `params`.
    pub fn finish(
        self,
        password: &[u8],
        ke2: &[u8],
        context: &[u8],
        params: PassphraseParams,
        counters: &Counters,
        rng: &mut impl CryptoRngCore,
    ) -> Result<ClientLoginFinish> {
        let ke2 = CredentialResponse::<Suite>::deserialize(ke2).map_err(malformed)?;
        let stretch = ksf(params)?;
        bump!(counters, passphrase_derivations);
        let result = self
            .0
            .finish(
                rng,
                password,
                ke2,
                ClientLoginFinishParameters::new(
                    Some(context),
                    Identifiers::default(),
                    Some(&stretch),
                ),
            )
            .map_err(|_| CryptoError::BadMac)?;
        bump!(counters, pake_steps);
        Ok(ClientLoginFinish {
            ke3: result.message.serialize().to_vec(),
            session_key: session_key(&result.session_key)?,
            server_public_key: result.server_s_pk.serialize().to_vec(),
            export_secret: crate::kdf::hkdf_sha256(
                b"maat/opaque-export/v1",
                &result.export_key,
                &[b"owner"],
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::OpCounters;

    const FAST: PassphraseParams = PassphraseParams::DANGER_FAST_FOR_TESTS;

    fn register(setup: &ServerSetup, password: &[u8], id: &[u8]) -> Vec<u8> {
        let c = OpCounters::new_handle();
        let (state, request) = client_registration_start(password, &mut rand_core::OsRng).unwrap();
        let response = setup.registration_response(&request, id).unwrap();
        let (upload, pk) = state
            .finish(password, &response, FAST, &c, &mut rand_core::OsRng)
            .unwrap();
        assert_eq!(pk, setup.public_key());
        server_registration_record(&upload).unwrap()
    }

    fn login(
        setup: &ServerSetup,
        record: Option<&[u8]>,
        password: &[u8],
        id: &[u8],
        client_context: &[u8],
        server_context: &[u8],
    ) -> Result<(SessionKey, SessionKey)> {
        let c = OpCounters::new_handle();
        let rng = &mut rand_core::OsRng;
        let (state, ke1) = client_login_start(password, rng)?;
        let (ke2, server_state) = setup.login_start(record, &ke1, id, server_context, &c, rng)?;
        let done = state.finish(password, &ke2, client_context, FAST, &c, rng)?;
        let server_key = server_login_finish(&server_state, &done.ke3, server_context, &c)?;
        Ok((done.session_key, server_key))
    }

    #[test]
    fn right_passphrase_gives_the_same_key_at_both_ends() {
        let setup = ServerSetup::generate(&mut rand_core::OsRng);
        let record = register(&setup, b"correct horse", b"alice");
        let (a, b) = login(
            &setup,
            Some(&record),
            b"correct horse",
            b"alice",
            b"x",
            b"x",
        )
        .unwrap();
        assert_eq!(*a, *b);
        let (c, _) = login(
            &setup,
            Some(&record),
            b"correct horse",
            b"alice",
            b"x",
            b"x",
        )
        .unwrap();
        assert_ne!(*a, *c, "every login has a fresh key");
    }

    #[test]
    fn wrong_passphrase_unknown_user_and_context_mismatch_fail() {
        let setup = ServerSetup::generate(&mut rand_core::OsRng);
        let record = register(&setup, b"correct horse", b"alice");
        let wrong = login(&setup, Some(&record), b"wrong horse", b"alice", b"x", b"x");
        assert_eq!(wrong.err(), Some(CryptoError::BadMac));
        let unknown = login(&setup, None, b"correct horse", b"alice", b"x", b"x");
        assert_eq!(unknown.err(), Some(CryptoError::BadMac));
        let other_id = login(&setup, Some(&record), b"correct horse", b"bob", b"x", b"x");
        assert_eq!(other_id.err(), Some(CryptoError::BadMac));
        let context = login(
            &setup,
            Some(&record),
            b"correct horse",
            b"alice",
            b"x",
            b"y",
        );
        assert_eq!(context.err(), Some(CryptoError::BadMac));
        let other_server = ServerSetup::generate(&mut rand_core::OsRng);
        let stolen = login(
            &other_server,
            Some(&record),
            b"correct horse",
            b"alice",
            b"x",
            b"x",
        );
        assert_eq!(stolen.err(), Some(CryptoError::BadMac));
    }

    #[test]
    fn the_record_does_not_log_in() {
        let setup = ServerSetup::generate(&mut rand_core::OsRng);
        let record = register(&setup, b"correct horse", b"alice");
        // Every 32-byte window of the record, and the record itself, tried as the password.
        let mut guesses: Vec<&[u8]> = record.windows(32).collect();
        guesses.push(&record);
        for guess in guesses.into_iter().step_by(8) {
            let r = login(&setup, Some(&record), guess, b"alice", b"x", b"x");
            assert_eq!(r.err(), Some(CryptoError::BadMac));
        }
    }

    #[test]
    fn setup_round_trips() {
        let setup = ServerSetup::generate(&mut rand_core::OsRng);
        let again = ServerSetup::from_bytes(&setup.to_bytes()).unwrap();
        assert_eq!(setup.public_key(), again.public_key());
        let record = register(&setup, b"pw", b"alice");
        assert!(login(&again, Some(&record), b"pw", b"alice", b"", b"").is_ok());
        assert!(ServerSetup::from_bytes(&[1, 2, 3]).is_err());
    }
}
