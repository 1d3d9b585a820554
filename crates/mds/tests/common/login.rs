//! A full login at an MDS (SPEC T5, T6: OPAQUE behind a cookie) and requests in the
//! session's envelopes, as a client makes them.

use super::MemStore;
use maat_crypto::pake;
use maat_mds::Mds;
use maat_proto::login;
use maat_proto::msg::{
    self, MdsPlainRequest, MdsPlainResponse, MdsRequest, MdsResponse, WireError,
};
use maat_proto::wire;
use maat_proto::UnixMillis;
use rand_chacha::ChaCha20Rng;

/// The administrator's key in [`super::mds`] and the tests' MDSes.
pub const ADMIN_KEY: [u8; 32] = [0xad; 32];

/// The first three messages of an OPAQUE login for `name` with `password` whose ticket
/// would name `keys`: the MDS's sealed state and KE3 (garbage when the client cannot
/// finish: the MDS must refuse it), and the client's OPAQUE session key.
pub fn opaque_exchange(
    mds: &Mds<&MemStore>,
    name: &str,
    password: &[u8],
    keys: ([u8; 32], [u8; 32]),
    nonce: [u8; 16],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> (Vec<u8>, Vec<u8>, Option<pake::SessionKey>) {
    let (state, ke1) = pake::client_login_start(password, rng).unwrap();
    let answer = start_with_cookie(mds, name, ke1, keys, nonce, now, rng);
    let (ke2, login_state) = match answer.unwrap() {
        MdsPlainResponse::OpaqueLoginChallenge { ke2, state, .. } => (ke2, state),
        other => panic!("{other:?}"),
    };
    let context = login::opaque_login_context(name, &keys.0, &keys.1, &nonce);
    let counters = maat_crypto::OpCounters::new_handle();
    match state.finish(
        password,
        &ke2,
        &context,
        login::KEY_CREDENTIAL_PARAMS,
        &counters,
        rng,
    ) {
        Ok(done) => (login_state, done.ke3, Some(done.session_key)),
        Err(_) => (login_state, vec![0u8; 64], None),
    }
}

/// Runs an OPAQUE login for `name` with `password` against `mds`; the answer to KE3.
pub fn opaque_login(
    mds: &Mds<&MemStore>,
    name: &str,
    password: &[u8],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> (
    Result<MdsPlainResponse, WireError>,
    Option<pake::SessionKey>,
    [u8; 16],
) {
    // One nonce per moment: logins at different times are different logins.
    let nonce = (u128::from(now) << 8 | 3).to_be_bytes();
    let (login_state, ke3, key) =
        opaque_exchange(mds, name, password, ([1u8; 32], [2u8; 32]), nonce, now, rng);
    let req = msg::encode(&MdsPlainRequest::OpaqueLoginFinish {
        state: login_state,
        ke3,
    })
    .unwrap();
    let answer = msg::decode(&mds.handle_plain(PEER, &req, UnixMillis(now), rng)).unwrap();
    (answer, key, nonce)
}

/// The address every test login comes from.
pub const PEER: &[u8] = &[127, 0, 0, 1];

#[allow(clippy::too_many_arguments)]
pub fn login_start(
    mds: &Mds<&MemStore>,
    name: &str,
    ke1: &[u8],
    keys: ([u8; 32], [u8; 32]),
    nonce: [u8; 16],
    cookie: Option<[u8; 32]>,
    peer: &[u8],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> Result<MdsPlainResponse, WireError> {
    let req = msg::encode(&MdsPlainRequest::OpaqueLoginStart {
        name: name.into(),
        ke1: ke1.to_vec(),
        signing_key: keys.0,
        sealing_key: keys.1,
        nonce,
        cookie,
    })
    .unwrap();
    msg::decode(&mds.handle_plain(peer, &req, UnixMillis(now), rng)).unwrap()
}

/// SPEC T6: KE1 without a cookie, the cookie back, KE1 again with it.
pub fn start_with_cookie(
    mds: &Mds<&MemStore>,
    name: &str,
    ke1: Vec<u8>,
    keys: ([u8; 32], [u8; 32]),
    nonce: [u8; 16],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> Result<MdsPlainResponse, WireError> {
    let cookie = match login_start(mds, name, &ke1, keys, nonce, None, PEER, now, rng).unwrap() {
        MdsPlainResponse::LoginCookie { cookie } => cookie,
        other => panic!("{other:?}"),
    };
    login_start(mds, name, &ke1, keys, nonce, Some(cookie), PEER, now, rng)
}

pub fn admin_login(
    mds: &Mds<&MemStore>,
    now: u64,
    rng: &mut ChaCha20Rng,
) -> ([u8; 16], maat_crypto::mac::Blake3Mac) {
    let (answer, key, nonce) = opaque_login(mds, "admin", &ADMIN_KEY, now, rng);
    match answer.unwrap() {
        MdsPlainResponse::LoginOk { ticket, .. } => {
            let key = login::mds_session_key(key.unwrap().as_slice(), &ticket, &nonce).unwrap();
            (
                login::mds_session_id(&ticket),
                wire::envelope_key(key.expose()),
            )
        }
        other => panic!("{other:?}"),
    }
}

/// `request` in an envelope of `session` at `now` with nonce bytes `nonce`, the answer
/// opened.
pub fn call(
    mds: &Mds<&MemStore>,
    session: &([u8; 16], maat_crypto::mac::Blake3Mac),
    request: MdsRequest,
    now: u64,
    nonce: u8,
    rng: &mut ChaCha20Rng,
) -> Result<MdsResponse, WireError> {
    let body = msg::encode(&request).unwrap();
    let n = [nonce; 16];
    let payload = wire::seal_request(&session.1, &session.0, UnixMillis(now), &n, &body);
    let sealed = mds.handle_request(&payload, UnixMillis(now), rng)?;
    let (_, message) = wire::open_response(&session.1, &session.0, &n, &sealed).unwrap();
    msg::decode::<Result<MdsResponse, WireError>>(message).unwrap()
}
