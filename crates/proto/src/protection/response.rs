//! SPEC T1: sealing and opening the answers to protected requests (see the parent
//! module for the layout).

use super::{
    cut_message_and_data, data_digest, u32_len, DataDigest, EnvelopeKeys, Protection, Sealing,
    RESPONSE_BLOCK, RESPONSE_CONTEXT, RESPONSE_HEADER_BYTES,
};
use crate::codec::Reader;
use crate::limits::{NONCE_BYTES, SESSION_ID_BYTES};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::aead::BLOCK_OVERHEAD_BYTES;
use maat_crypto::mac::TAG_BYTES;

fn response_head(
    sealing: Sealing,
    nonce: &[u8; NONCE_BYTES],
    timestamp: UnixMillis,
    message_len: [u8; 4],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(RESPONSE_HEADER_BYTES);
    out.push(sealing.byte());
    out.extend_from_slice(nonce);
    out.extend_from_slice(&timestamp.0.to_be_bytes());
    out.extend_from_slice(&message_len);
    out
}

/// Seals the response to the request with `nonce`, sealed as the request was.
#[allow(clippy::too_many_arguments)]
pub fn seal_response(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    timestamp: UnixMillis,
    message: &[u8],
    data: &[u8],
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<Vec<u8>> {
    let parts = seal_response_parts(
        keys,
        sealing,
        session_id,
        nonce,
        timestamp,
        message,
        data.to_vec(),
        None,
        rng,
    )?;
    Ok(parts.concat())
}

/// [`seal_response`] as three parts whose concatenation is the payload: header and
/// message, data (or the encrypted body), trailer. The data is moved, not copied, for
/// the MAC methods. `known_digest` is the [`data_digest`] of the data the answer
/// carries, when the sender kept it: an ALLDATA answer over a digest then skips the pass
/// over `data`, which may be empty here and sent apart (straight from a file).
#[allow(clippy::too_many_arguments)]
pub fn seal_response_parts(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    timestamp: UnixMillis,
    message: &[u8],
    data: Vec<u8>,
    known_digest: Option<&DataDigest>,
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<[Vec<u8>; 3]> {
    if sealing.misplaced_digest() {
        return Err(ProtoError::Malformed {
            what: "response envelope",
            reason: "a data digest under a method that does not cover data",
        });
    }
    let head = response_head(
        sealing,
        nonce,
        timestamp,
        u32_len(message.len(), "response message")?,
    );
    let ctx = [RESPONSE_CONTEXT, session_id.as_slice()].concat();
    let trailer = match sealing.method {
        Protection::NoSec => {
            return Err(ProtoError::Malformed {
                what: "response envelope",
                reason: "NOSEC has no envelope",
            })
        }
        Protection::CapKey => keys.mac.tag(&[&ctx, &head]).to_vec(),
        Protection::CmdRsp => keys.mac.tag(&[&ctx, &head, message]).to_vec(),
        Protection::AllData if sealing.data_digest => {
            let digest = known_digest.copied().unwrap_or_else(|| data_digest(&data));
            keys.mac.tag(&[&ctx, &head, message, &digest]).to_vec()
        }
        Protection::AllData => keys.mac.tag(&[&ctx, &head, message, &data]).to_vec(),
        Protection::Confidential => {
            // Sealed in the data's own buffer: the message moved in before it, the tag
            // and salt after (no new allocation of the data's size when it has room).
            let aad = [ctx.as_slice(), &head].concat();
            let mut body = data;
            body.reserve(message.len() + BLOCK_OVERHEAD_BYTES);
            body.splice(0..0, message.iter().copied());
            keys.aead
                .seal_in_place(RESPONSE_BLOCK, &aad, &mut body, rng)
                .map_err(ProtoError::Crypto)?;
            return Ok([head, body, Vec::new()]);
        }
    };
    let mut first = head;
    first.extend_from_slice(message);
    Ok([first, data, trailer])
}

/// Checks a response like [`open_response`], taking the payload by value so that the
/// data is cut out of it in place (no new buffer for bulk data).
pub fn open_response_owned(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    payload: Vec<u8>,
) -> Result<(UnixMillis, Vec<u8>, Vec<u8>)> {
    if sealing.method == Protection::Confidential {
        return open_confidential_owned(keys, sealing, session_id, nonce, payload);
    }
    // Checks everything on the borrowed payload, data included, without copying it.
    let (timestamp, message_len) = {
        let (timestamp, message, _) =
            open_response_slices(keys, sealing, session_id, nonce, &payload)?;
        (timestamp, message.len())
    };
    let end = payload.len().saturating_sub(TAG_BYTES);
    let (message, data) = cut_message_and_data(payload, RESPONSE_HEADER_BYTES, message_len, end);
    Ok((timestamp, message, data))
}

/// CONFIDENTIAL's [`open_response_owned`]: the body is decrypted where it lies in the
/// payload, and the data cut out of it there.
fn open_confidential_owned(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    mut payload: Vec<u8>,
) -> Result<(UnixMillis, Vec<u8>, Vec<u8>)> {
    let (aad, timestamp, message_len, echoed) = {
        let (head, _, timestamp, message_len, echoed) = split_response(sealing, &payload)?;
        let aad = [RESPONSE_CONTEXT, session_id.as_slice(), head].concat();
        (aad, timestamp, message_len, echoed)
    };
    let body = payload
        .get_mut(RESPONSE_HEADER_BYTES..)
        .ok_or(ProtoError::Truncated {
            what: "response envelope",
        })?;
    let plain_len = keys
        .aead
        .open_in_place(RESPONSE_BLOCK, &aad, body)
        .map_err(|_| ProtoError::DecryptionFailed { token: "response" })?
        .len();
    if plain_len < message_len {
        return Err(ProtoError::Truncated {
            what: "response envelope",
        });
    }
    check_echo(&echoed, nonce)?;
    let end = RESPONSE_HEADER_BYTES + plain_len;
    let (message, data) = cut_message_and_data(payload, RESPONSE_HEADER_BYTES, message_len, end);
    Ok((timestamp, message, data))
}

/// Checks a response to the request with `nonce` sealed as `sealing`; returns the
/// server's timestamp, the message and the data. A response sealed otherwise than the
/// request is refused.
pub fn open_response(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    payload: &[u8],
) -> Result<(UnixMillis, Vec<u8>, Vec<u8>)> {
    if sealing.method != Protection::Confidential {
        let (t, m, d) = open_response_slices(keys, sealing, session_id, nonce, payload)?;
        return Ok((t, m.to_vec(), d.to_vec()));
    }
    // (One copy: the payload is borrowed.)
    open_confidential_owned(keys, sealing, session_id, nonce, payload.to_vec())
}

type SplitResponse<'a> = (&'a [u8], &'a [u8], UnixMillis, usize, [u8; NONCE_BYTES]);

/// Header fields of a response payload, refusing one sealed otherwise than `sealing`.
fn split_response(sealing: Sealing, payload: &[u8]) -> Result<SplitResponse<'_>> {
    // (A sealing no envelope can carry, such as a digest under CMDRSP, matches nothing.)
    if Sealing::from_byte(sealing.byte()) != Some(sealing) {
        return Err(ProtoError::Malformed {
            what: "response envelope",
            reason: "no envelope is sealed so",
        });
    }
    if payload.len() < RESPONSE_HEADER_BYTES {
        return Err(ProtoError::Truncated {
            what: "response envelope",
        });
    }
    let (head, rest) = payload.split_at(RESPONSE_HEADER_BYTES);
    let mut r = Reader::new(head, "response envelope");
    let found = r.u8()?;
    let echoed: [u8; NONCE_BYTES] = r.array()?;
    let timestamp = UnixMillis(r.u64()?);
    let message_len = r.u32()? as usize;
    if found != sealing.byte() {
        return Err(ProtoError::Malformed {
            what: "response envelope",
            reason: "sealed with another protection method than the request",
        });
    }
    Ok((head, rest, timestamp, message_len, echoed))
}

fn check_echo(echoed: &[u8; NONCE_BYTES], nonce: &[u8; NONCE_BYTES]) -> Result<()> {
    if echoed != nonce {
        return Err(ProtoError::WrongRecipient {
            token: "response",
            reason: "answers another request",
        });
    }
    Ok(())
}

/// The MAC methods' check, on borrowed slices.
fn open_response_slices<'a>(
    keys: &EnvelopeKeys,
    sealing: Sealing,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    payload: &'a [u8],
) -> Result<(UnixMillis, &'a [u8], &'a [u8])> {
    let truncated = ProtoError::Truncated {
        what: "response envelope",
    };
    let (head, rest, timestamp, message_len, echoed) = split_response(sealing, payload)?;
    let ctx = [RESPONSE_CONTEXT, session_id.as_slice()].concat();
    let at = rest.len().checked_sub(TAG_BYTES).ok_or(truncated.clone())?;
    let (body, tag) = rest.split_at(at);
    if body.len() < message_len {
        return Err(truncated);
    }
    let (message, data) = body.split_at(message_len);
    let digest;
    let parts: Vec<&[u8]> = match sealing.method {
        Protection::CapKey => vec![&ctx, head],
        Protection::CmdRsp => vec![&ctx, head, message],
        Protection::AllData if sealing.data_digest => {
            digest = data_digest(data);
            vec![&ctx, head, message, &digest]
        }
        Protection::AllData => vec![&ctx, head, message, data],
        _ => {
            return Err(ProtoError::Malformed {
                what: "response envelope",
                reason: "not a MAC method",
            })
        }
    };
    keys.mac
        .verify(&parts, tag)
        .map_err(|_| ProtoError::BadMac { token: "response" })?;
    check_echo(&echoed, nonce)?;
    Ok((timestamp, message, data))
}
