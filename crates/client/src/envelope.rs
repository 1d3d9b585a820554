//! One request to an OSD on one connection, sealed as its capability requires (SPEC T1:
//! a session's envelope, a T10 credential's, or NOSEC), and its answer checked: no
//! retries here (the caller knows what is safe to retry).

use super::*;
use crate::data::Auth;

/// Sends one request on `conn` and checks its answer, sealed as its capability requires
/// (or NOSEC); no retries (the caller knows what is safe to retry). `digest` holds the
/// request's data digest once one lane made it, for the others sending the same request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call_on(
    conn: &mut Connection,
    address: &str,
    auth: &Auth,
    request: &OsdRequest,
    digest: &std::sync::OnceLock<protection::DataDigest>,
    clock: &LocalClock,
    rng: &mut rand_chacha::ChaCha20Rng,
    learned: &mut Option<i64>,
    watch: Option<&maat_net::Watch<'_>>,
) -> Result<OsdResponse> {
    let net = |source| ClientError::Net {
        address: address.to_string(),
        source,
    };
    // A session's request goes in a SecRequest frame, sealed with its capability's method;
    // a T10 request in a T10Request frame, the capability in front, sealed with the
    // credential's method (the MAC covers that capability under CAPKEY).
    let (keys, sid, offset, method, mac_capability, frame_type, prefix) = match auth {
        Auth::Insecure { user } => {
            // The bulk data travels after the message, as in a protected envelope, so
            // that NOSEC copies it no more than the protected methods do.
            let (head, bulk) = msg::insecure_bulk_request(*user, request).map_err(|source| {
                ClientError::Token {
                    what: "NOSEC request",
                    source,
                }
            })?;
            let (t, answer) = conn
                .call_parts_watched(FrameType::InsecureBulk, &[&head, bulk], watch)
                .map_err(net)?;
            return match t {
                FrameType::PlainBulk => msg::open_plain_bulk_response(answer)
                    .map_err(|e| ClientError::BadAnswer {
                        address: address.to_string(),
                        reason: e.to_string(),
                    })?
                    .map_err(ClientError::Refused),
                _ => Err(refusal(address, &answer)),
            };
        }
        Auth::Sealed { keys, sid, offset } => (
            keys,
            sid,
            offset,
            request_protection(&request.capability),
            &request.capability[..],
            FrameType::SecRequest,
            None,
        ),
        Auth::T10 {
            keys,
            id,
            method,
            capability,
            prefix,
            offset,
            ..
        } => (
            keys,
            id,
            offset,
            *method,
            &capability[..],
            FrameType::T10Request,
            Some(&prefix[..]),
        ),
    };
    let (head, data) = request.split_bulk();
    let message = crate::encode(&head)?;
    let nonce = conn.next_nonce(|| stream_name(rng));
    let sealing = protection::Sealing::current(method);
    let header = protection::RequestHeader {
        method,
        data_digest: sealing.data_digest,
        session_id: *sid,
        timestamp: UnixMillis(clock.now().saturating_add_signed(*offset)),
        nonce,
    };
    let digest = || *digest.get_or_init(|| protection::data_digest(data));
    let parts = protection::seal_request_parts_digested(
        keys,
        &header,
        &message,
        data,
        digest,
        mac_capability,
        rng,
    )
    .map_err(|source| ClientError::Token {
        what: "request envelope",
        source,
    })?;
    let frame: Vec<&[u8]> = prefix
        .into_iter()
        .chain(parts.iter().map(|p| p.as_ref()))
        .collect();
    let (t, answer) = conn
        .call_parts_watched(frame_type, &frame, watch)
        .map_err(net)?;
    let mut answered_at = None;
    let answer = sec_answer(
        address,
        keys,
        sealing,
        sid,
        &nonce,
        t,
        answer,
        &mut answered_at,
    );
    // The answer's time is the OSD's clock, under the MAC from CMDRSP up (SPEC T7).
    if let (Auth::T10 { .. }, Some(at), true) = (auth, answered_at, method >= Protection::CmdRsp) {
        *learned = Some(offset_to(at, clock.now()));
    }
    renew_stream_if_refused(conn, &answer);
    answer
}

/// After a refusal of a request's nonce (replayed, or stale: too far behind its stream),
/// the connection's next request starts a new stream (`maat_proto::replay`), so the retry
/// is not refused the same way.
pub(crate) fn renew_stream_if_refused<T>(conn: &mut Connection, answer: &Result<T>) {
    if let Err(ClientError::Refused(e)) = answer {
        if matches!(e.code, ErrorCode::ReplayedRequest | ErrorCode::StaleRequest) {
            conn.renew_nonce_stream();
        }
    }
}

/// Checks and decodes the answer to a protected request (sealed as `sealing` with `keys`
/// for the request `sid`, `nonce`), or the refusal it is; `answered_at` gets the server's
/// time from an envelope that opened.
#[allow(clippy::too_many_arguments)]
fn sec_answer(
    address: &str,
    keys: &protection::EnvelopeKeys,
    sealing: protection::Sealing,
    sid: &[u8; 16],
    nonce: &[u8; 16],
    frame_type: FrameType,
    answer: Vec<u8>,
    answered_at: &mut Option<u64>,
) -> Result<OsdResponse> {
    let bad = |reason: String| ClientError::BadAnswer {
        address: address.to_string(),
        reason,
    };
    match frame_type {
        FrameType::SecResponse => {
            let (at, message, data) =
                protection::open_response_owned(keys, sealing, sid, nonce, answer)
                    .map_err(|e| bad(e.to_string()))?;
            *answered_at = Some(at.0);
            let mut result: std::result::Result<OsdResponse, WireError> =
                decode_answer_raw(address, &message)?;
            msg::put_response_bulk(&mut result, data).map_err(|e| bad(e.to_string()))?;
            result.map_err(ClientError::Refused)
        }
        FrameType::Refusal => Err(refusal(address, &answer)),
        _ => Err(bad("unexpected frame type".into())),
    }
}

/// The protection method a request must use (SPEC T1): the one its capability names
/// (read without verifying: the OSD verifies), CMDRSP for requests without one.
fn request_protection(capability: &[u8]) -> Protection {
    if capability.is_empty() {
        return Protection::CmdRsp;
    }
    maat_proto::signed::Unverified::<maat_proto::capability::Capability>::decode(capability)
        .map(|c| c.unverified_body().protection)
        .unwrap_or(Protection::AllData)
}
