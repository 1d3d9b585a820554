//! SPEC M1: the login exchange and OSD registration: what their MACs cover and how the
//! client–MDS session key is derived. Layouts in docs/PROTOCOL.md.

use maat_crypto::mac::MacKey;
use maat_crypto::{hash, kdf, CryptoRngCore, Secret32};

const LOGIN_CONTEXT: &[u8] = b"maat/login/v1\0";
const LOGIN_OK_CONTEXT: &[u8] = b"maat/login-ok/v1\0";
const MDS_SESSION_INFO: &[u8] = b"maat/m1/mds-session/v1";
const REGISTER_CONTEXT: &[u8] = b"maat/register/v1\0";
const REGISTERED_CONTEXT: &[u8] = b"maat/registered/v1\0";
/// How far before its issue time the MDS starts a ticket's or capability's validity (to
/// tolerate clock offsets). A client learns the MDS clock from a ticket as
/// `start + TOKEN_BACKDATE_MILLIS`, an authenticated value.
pub const TOKEN_BACKDATE_MILLIS: u64 = 30_000;
/// Sealing context of a new user's key sent to the MDS.
pub const USER_KEY_SEAL_CONTEXT: &[u8] = b"maat/user-key/v1";

/// The fields a login MAC covers, in order.
pub fn login_mac_parts(
    name: &str,
    signing_key: &[u8; 32],
    sealing_key: &[u8; 32],
    timestamp: u64,
    nonce: &[u8; 16],
) -> Vec<Vec<u8>> {
    vec![
        LOGIN_CONTEXT.to_vec(),
        (name.len() as u32).to_be_bytes().to_vec(),
        name.as_bytes().to_vec(),
        signing_key.to_vec(),
        sealing_key.to_vec(),
        timestamp.to_be_bytes().to_vec(),
        nonce.to_vec(),
    ]
}

const OPAQUE_CONTEXT: &[u8] = b"maat/login-opaque/v1\0";
/// Sealing context of an OPAQUE registration upload sent to the MDS.
pub const REGISTRATION_SEAL_CONTEXT: &[u8] = b"maat/opaque-upload/v1";
/// Sealing context of the login state the MDS hands the client between KE2 and KE3.
pub const LOGIN_STATE_SEAL_CONTEXT: &[u8] = b"maat/login-state/v1";
/// How long a login may take between KE2 and KE3 (inside the replay window, which
/// remembers the login's nonce).
pub const LOGIN_STATE_LIFETIME_MILLIS: u64 = 20_000;
/// Key stretching for stored-key identities (the administrator's random 32-byte key):
/// the input already has full entropy, so the stretching is the cheapest Argon2id allows.
pub const KEY_CREDENTIAL_PARAMS: kdf::PassphraseParams = kdf::PassphraseParams {
    memory_kib: 8,
    iterations: 1,
    lanes: 1,
};

/// SPEC M1, T6: the OPAQUE context of a login, the bytes both ends bind into the
/// transcript: the user name, the two keys the ticket will name and the nonce. A KE1
/// replayed with other keys fails at KE3.
pub fn opaque_login_context(
    name: &str,
    signing_key: &[u8; 32],
    sealing_key: &[u8; 32],
    nonce: &[u8; 16],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(OPAQUE_CONTEXT.len() + 4 + name.len() + 32 + 32 + 16);
    out.extend_from_slice(OPAQUE_CONTEXT);
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(signing_key);
    out.extend_from_slice(sealing_key);
    out.extend_from_slice(nonce);
    out
}

/// The OPAQUE keys a passphrase proof (issue 40, `MdsRequest::ChangePassphrase`) carries
/// in place of a login's signing and sealing keys: derived from the MDS session the proof
/// is for, so that the MDS takes it only in that session, and no login's exchange (whose
/// keys are real ones) is taken as a proof. `(signing_key, sealing_key)`.
pub fn passphrase_proof_keys(session_id: &[u8; 16]) -> ([u8; 32], [u8; 32]) {
    let derive = |context: &str| maat_crypto::hash::derive_key(context, session_id);
    (
        derive("maat 2026-11-26 passphrase proof signing key v1"),
        derive("maat 2026-11-26 passphrase proof sealing key v1"),
    )
}

/// The fields an OSD registration MAC covers, in order.
pub fn register_mac_parts(
    id: u64,
    address: &str,
    sealing_key: &[u8; 32],
    weight: u32,
    timestamp: u64,
    nonce: &[u8; 16],
) -> Vec<Vec<u8>> {
    vec![
        REGISTER_CONTEXT.to_vec(),
        id.to_be_bytes().to_vec(),
        (address.len() as u32).to_be_bytes().to_vec(),
        address.as_bytes().to_vec(),
        sealing_key.to_vec(),
        weight.to_be_bytes().to_vec(),
        timestamp.to_be_bytes().to_vec(),
        nonce.to_vec(),
    ]
}

/// The MAC an OSD expects on the registration answer.
pub fn registered_mac(join: &MacKey, verifying_key: &[u8; 32], nonce: &[u8; 16]) -> [u8; 32] {
    join.tag(&[REGISTERED_CONTEXT, verifying_key, nonce])
}

/// The MAC a client expects on the login answer.
pub fn login_ok_mac(session_key: &MacKey, ticket: &[u8], nonce: &[u8; 16]) -> [u8; 32] {
    session_key.tag(&[LOGIN_OK_CONTEXT, ticket, nonce])
}

/// SPEC M1: the client–MDS session key,
/// `HKDF-SHA256(salt = BLAKE3(ticket), ikm = K, info = ["maat/m1/mds-session/v1", nonce])`
/// where `K` is the OPAQUE session key (64 bytes), or the user key of a login from before
/// OPAQUE (32 bytes).
pub fn mds_session_key(
    user_key: &[u8],
    ticket: &[u8],
    nonce: &[u8; 16],
) -> Result<Secret32, maat_crypto::CryptoError> {
    let salt = hash::blake3(&[ticket]);
    kdf::hkdf_sha256(&salt, user_key, &[MDS_SESSION_INFO, nonce])
}

/// The client–MDS session id: the first 16 bytes of BLAKE3 of the ticket.
pub fn mds_session_id(ticket: &[u8]) -> [u8; 16] {
    let d = hash::blake3(&[ticket]);
    let mut id = [0u8; 16];
    id.copy_from_slice(d.get(..16).unwrap_or(&[0u8; 16]));
    id
}

/// Seals a new user's key to the MDS (what `maat admin user add` sends).
pub fn seal_user_key(
    mds_sealing_key: &[u8; 32],
    name: &str,
    key: &[u8; 32],
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>, maat_crypto::CryptoError> {
    maat_crypto::seal::SealingPublicKey(*mds_sealing_key).seal(
        USER_KEY_SEAL_CONTEXT,
        name.as_bytes(),
        key,
        rng,
    )
}

/// Seals an OPAQUE registration upload to the MDS (AAD: the user name). The upload is
/// not a password-equivalent, but it allows an offline guess per passphrase, so it never
/// crosses the network in clear.
pub fn seal_registration_upload(
    mds_sealing_key: &[u8; 32],
    name: &str,
    upload: &[u8],
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>, maat_crypto::CryptoError> {
    maat_crypto::seal::SealingPublicKey(*mds_sealing_key).seal(
        REGISTRATION_SEAL_CONTEXT,
        name.as_bytes(),
        upload,
        rng,
    )
}
