//! SPEC T7 and the wire: frames and authenticated envelopes, without I/O.
//!
//! Every message on a Maat connection is one frame:
//!
//! ```text
//! version 2: magic "MT" ‖ 0x02 ‖ frame type u8 ‖ request id u32 BE ‖ payload length u32 BE ‖ payload
//! version 1: magic "MT" ‖ 0x01 ‖ frame type u8 ‖ payload length u32 BE ‖ payload
//! ```
//!
//! An answer carries its request's version and id, so a client can have many requests in
//! flight on one connection and match each answer to its request; daemons still take
//! version 1 (no id, one request at a time). The id is transport bookkeeping, not
//! security: envelopes bind an answer to its request by the request's nonce. The length
//! is checked against [`FRAME_PAYLOAD_BYTES_MAX`] before anything is allocated.
//! Authenticated requests ([`FrameType::Request`]) carry
//!
//! ```text
//! session id [16] ‖ timestamp u64 BE ‖ nonce [16] ‖ message ‖ MAC [32]
//! MAC = BLAKE3-keyed(K_env, "maat/req/v1\0" ‖ session id ‖ timestamp ‖ nonce ‖ message)
//! ```
//!
//! and their answers ([`FrameType::Response`])
//!
//! ```text
//! nonce of the request [16] ‖ timestamp u64 BE ‖ message ‖ MAC [32]
//! MAC = BLAKE3-keyed(K_env, "maat/resp/v1\0" ‖ session id ‖ nonce ‖ timestamp ‖ message)
//! ```
//!
//! `K_env = BLAKE3-derive-key("maat envelope v1", K)` for the session secret `K`. The MAC
//! covers bulk data (SPEC T2's ALLDATA idea) in one keyed-BLAKE3 pass (the SPEC suite's
//! choice where no T10 compatibility is implied). Every field before the message has a
//! fixed length, so the MAC input is unambiguous. Receivers check,
//! in this order: session known, session not expired, timestamp inside the window and not
//! before the receiver booted, MAC, nonce not accepted before on its stream ([`ReplayWindow`]); each refusal is typed.

use crate::limits::{NONCE_BYTES, SESSION_ID_BYTES};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::mac::{Blake3Mac, TAG_BYTES};
use maat_crypto::Secret32;

/// First two bytes of every frame.
pub const FRAME_MAGIC: [u8; 2] = *b"MT";
/// Frame format version senders use (with request ids).
pub const FRAME_VERSION: u8 = 2;
/// The first frame format (no request id), still read and answered.
pub const FRAME_VERSION_1: u8 = 1;
/// Length of the frame header (version 2).
pub const FRAME_HEADER_BYTES: usize = 12;
/// The first bytes of every header, which say how long the rest is.
pub const FRAME_HEADER_START_BYTES: usize = 8;
pub use crate::limits::FRAME_PAYLOAD_BYTES_MAX;
/// How far a request's timestamp may be from the receiver's clock (SPEC T7).
pub const REPLAY_WINDOW_MILLIS: u64 = 30_000;
/// How far a request's timestamp may run ahead of the receiver's clock. Small, because a
/// receiver refuses timestamps before `boot + FUTURE_SKEW_MILLIS`: together the two rules
/// make a request captured before a restart unusable after it (see [`ReplayWindow`]).
pub const FUTURE_SKEW_MILLIS: u64 = 500;
pub use crate::limits::REPLAY_ENTRIES_MAX;
pub use crate::limits::REPLAY_ENTRIES_PER_SESSION_MAX;
pub use crate::replay::{Freshness, NonceStream, ReplayWindow};

/// BLAKE3 key-derivation context of envelope keys.
pub const ENVELOPE_KEY_CONTEXT: &str = "maat envelope v1";
const REQUEST_CONTEXT: &[u8] = b"maat/req/v1\0";
const RESPONSE_CONTEXT: &[u8] = b"maat/resp/v1\0";
const ENVELOPE_HEADER_BYTES: usize = SESSION_ID_BYTES + 8 + NONCE_BYTES;
const RESPONSE_HEADER_BYTES: usize = NONCE_BYTES + 8;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// A message that is not MAC-protected: login, session offers, OSD registration (each
    /// authenticates itself inside) and their answers.
    Plain = 1,
    /// An authenticated request envelope.
    Request = 2,
    /// An authenticated response envelope.
    Response = 3,
    /// An unauthenticated refusal (the receiver had no key to MAC it with).
    Refusal = 4,
    /// A request in NOSEC mode (benchmarks only; daemons refuse it unless configured with
    /// `danger_allow_nosec`).
    Insecure = 5,
    /// A request in a protected envelope that names its method (SPEC T1, `protection`).
    SecRequest = 6,
    /// The answer to a [`FrameType::SecRequest`] or [`FrameType::T10Request`], sealed with
    /// the same method and keys.
    SecResponse = 7,
    /// SPEC T2: a protected envelope under a T10 credential's capability key, preceded by
    /// the capability (`u16 length ‖ capability ‖ envelope`, see `t10::split_request`).
    T10Request = 8,
    /// A NOSEC request to an OSD with its bulk data outside the message
    /// (`msg::osd::insecure_bulk_request`); refused as [`FrameType::Insecure`] is.
    InsecureBulk = 9,
    /// The answer to a [`FrameType::InsecureBulk`] (`msg::osd::plain_bulk_response`).
    PlainBulk = 10,
}

impl FrameType {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => FrameType::Plain,
            2 => FrameType::Request,
            3 => FrameType::Response,
            4 => FrameType::Refusal,
            5 => FrameType::Insecure,
            6 => FrameType::SecRequest,
            7 => FrameType::SecResponse,
            8 => FrameType::T10Request,
            9 => FrameType::InsecureBulk,
            10 => FrameType::PlainBulk,
            _ => return None,
        })
    }
}

/// What a frame is, apart from its payload: its type and, from version 2, the request id
/// (an answer carries its request's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// The frame type.
    pub frame_type: FrameType,
    /// The request id (`None`: a version-1 frame).
    pub request_id: Option<u32>,
}

impl FrameHead {
    /// A version-2 frame of `frame_type` for request `request_id`.
    pub fn new(frame_type: FrameType, request_id: u32) -> Self {
        FrameHead {
            frame_type,
            request_id: Some(request_id),
        }
    }

    /// A version-1 frame of `frame_type` (no request id).
    pub fn v1(frame_type: FrameType) -> Self {
        FrameHead {
            frame_type,
            request_id: None,
        }
    }

    /// The head of the answer to a frame with this head: same version and id.
    pub fn answer(self, frame_type: FrameType) -> Self {
        FrameHead { frame_type, ..self }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Type and request id.
    pub head: FrameHead,
    /// Payload length in bytes (already checked against the limit).
    pub payload_bytes: usize,
}

fn check_length(payload_bytes: usize) -> Result<()> {
    if payload_bytes > FRAME_PAYLOAD_BYTES_MAX {
        return Err(ProtoError::TooLarge {
            what: "frame payload",
            len: payload_bytes,
            limit: FRAME_PAYLOAD_BYTES_MAX,
        });
    }
    Ok(())
}

/// An encoded frame header, on the stack (one is written before every frame).
#[derive(Debug, Clone, Copy)]
pub struct EncodedHeader {
    bytes: [u8; FRAME_HEADER_BYTES],
    len: usize,
}

impl EncodedHeader {
    /// The header's bytes (their number depends on the version).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&self.bytes)
    }
}

/// Encodes a frame header for a payload of `payload_bytes`.
pub fn encode_header(head: FrameHead, payload_bytes: usize) -> Result<EncodedHeader> {
    check_length(payload_bytes)?;
    let [l0, l1, l2, l3] = (payload_bytes as u32).to_be_bytes();
    let [m0, m1] = FRAME_MAGIC;
    let kind = head.frame_type as u8;
    Ok(match head.request_id {
        Some(id) => {
            let [i0, i1, i2, i3] = id.to_be_bytes();
            EncodedHeader {
                bytes: [m0, m1, FRAME_VERSION, kind, i0, i1, i2, i3, l0, l1, l2, l3],
                len: FRAME_HEADER_BYTES,
            }
        }
        None => EncodedHeader {
            bytes: [m0, m1, FRAME_VERSION_1, kind, l0, l1, l2, l3, 0, 0, 0, 0],
            len: FRAME_HEADER_START_BYTES,
        },
    })
}

/// How many header bytes follow the first [`FRAME_HEADER_START_BYTES`] (checked: magic
/// and a known version).
pub fn header_rest_bytes(start: &[u8; FRAME_HEADER_START_BYTES]) -> Result<usize> {
    let [m0, m1, version, ..] = *start;
    if [m0, m1] != FRAME_MAGIC {
        return Err(ProtoError::Malformed {
            what: "frame",
            reason: "bad magic",
        });
    }
    match version {
        FRAME_VERSION_1 => Ok(0),
        FRAME_VERSION => Ok(FRAME_HEADER_BYTES - FRAME_HEADER_START_BYTES),
        found => Err(ProtoError::UnsupportedVersion { found }),
    }
}

/// Decodes and checks a whole frame header (magic, version, type, length limit): the
/// first [`FRAME_HEADER_START_BYTES`] and the [`header_rest_bytes`] after them.
pub fn decode_header(header: &[u8]) -> Result<FrameHeader> {
    let start = header
        .first_chunk::<FRAME_HEADER_START_BYTES>()
        .ok_or(ProtoError::Truncated { what: "frame" })?;
    let rest = header_rest_bytes(start)?;
    if header.len() != FRAME_HEADER_START_BYTES + rest {
        return Err(ProtoError::Truncated { what: "frame" });
    }
    let [_, _, _, kind, ..] = *start;
    let frame_type = FrameType::from_u8(kind).ok_or(ProtoError::Malformed {
        what: "frame",
        reason: "unknown frame type",
    })?;
    let be32 = |at: usize| -> Result<u32> {
        header
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
            .ok_or(ProtoError::Truncated { what: "frame" })
    };
    let (request_id, length_at) = match rest {
        0 => (None, 4),
        _ => (Some(be32(4)?), 8),
    };
    let payload_bytes = be32(length_at)? as usize;
    check_length(payload_bytes)?;
    Ok(FrameHeader {
        head: FrameHead {
            frame_type,
            request_id,
        },
        payload_bytes,
    })
}

/// Encodes a whole frame.
pub fn encode_frame(head: FrameHead, payload: &[u8]) -> Result<Vec<u8>> {
    let header = encode_header(head, payload.len())?;
    let mut out = Vec::with_capacity(header.as_bytes().len() + payload.len());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// Decodes one whole frame from `bytes` (which must hold exactly one frame).
pub fn decode_frame(bytes: &[u8]) -> Result<(FrameHead, &[u8])> {
    let start = bytes
        .first_chunk::<FRAME_HEADER_START_BYTES>()
        .ok_or(ProtoError::Truncated { what: "frame" })?;
    let header_bytes = FRAME_HEADER_START_BYTES + header_rest_bytes(start)?;
    let (header, payload) = bytes
        .split_at_checked(header_bytes)
        .ok_or(ProtoError::Truncated { what: "frame" })?;
    let header = decode_header(header)?;
    if payload.len() < header.payload_bytes {
        return Err(ProtoError::Truncated { what: "frame" });
    }
    if payload.len() > header.payload_bytes {
        return Err(ProtoError::TrailingBytes {
            what: "frame",
            count: payload.len() - header.payload_bytes,
        });
    }
    Ok((header.head, payload))
}

/// A request envelope whose MAC has not been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnverifiedRequest<'a> {
    /// The session the sender claims.
    pub session_id: [u8; SESSION_ID_BYTES],
    /// The sender's clock (corrected by its offset to ours).
    pub timestamp: UnixMillis,
    /// Fresh per request.
    pub nonce: [u8; NONCE_BYTES],
    message: &'a [u8],
    mac: [u8; TAG_BYTES],
}

/// A request envelope whose MAC verified under the session key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRequest<'a> {
    /// The session.
    pub session_id: [u8; SESSION_ID_BYTES],
    /// The sender's timestamp.
    pub timestamp: UnixMillis,
    /// The request nonce (echoed in the response).
    pub nonce: [u8; NONCE_BYTES],
    /// The authenticated message bytes.
    pub message: &'a [u8],
}

/// The envelope MAC key for a session secret.
pub fn envelope_key(session_secret: &[u8; 32]) -> Blake3Mac {
    Blake3Mac::derive(&Secret32::from_bytes(*session_secret), ENVELOPE_KEY_CONTEXT)
}

fn request_tag(
    key: &Blake3Mac,
    session_id: &[u8],
    timestamp: UnixMillis,
    nonce: &[u8],
    message: &[u8],
) -> [u8; TAG_BYTES] {
    key.tag(&[
        REQUEST_CONTEXT,
        session_id,
        &timestamp.0.to_be_bytes(),
        nonce,
        message,
    ])
}

/// Builds the payload of an authenticated request.
pub fn seal_request(
    key: &Blake3Mac,
    session_id: &[u8; SESSION_ID_BYTES],
    timestamp: UnixMillis,
    nonce: &[u8; NONCE_BYTES],
    message: &[u8],
) -> Vec<u8> {
    let tag = request_tag(key, session_id, timestamp, nonce, message);
    let mut out = Vec::with_capacity(ENVELOPE_HEADER_BYTES + message.len() + TAG_BYTES);
    out.extend_from_slice(session_id);
    out.extend_from_slice(&timestamp.0.to_be_bytes());
    out.extend_from_slice(nonce);
    out.extend_from_slice(message);
    out.extend_from_slice(&tag);
    out
}

impl<'a> UnverifiedRequest<'a> {
    /// Splits a request payload into its fields.
    pub fn decode(payload: &'a [u8]) -> Result<Self> {
        if payload.len() < ENVELOPE_HEADER_BYTES + TAG_BYTES {
            return Err(ProtoError::Truncated {
                what: "request envelope",
            });
        }
        let (head, rest) = payload.split_at(ENVELOPE_HEADER_BYTES);
        let (message, mac) = rest.split_at(rest.len() - TAG_BYTES);
        let mut r = crate::codec::Reader::new(head, "request envelope");
        Ok(Self {
            session_id: r.array()?,
            timestamp: UnixMillis(r.u64()?),
            nonce: r.array()?,
            message,
            mac: mac.try_into().map_err(|_| ProtoError::Truncated {
                what: "request envelope",
            })?,
        })
    }

    /// Checks the MAC under the session's envelope key.
    pub fn verify(self, key: &Blake3Mac) -> Result<VerifiedRequest<'a>> {
        key.verify(
            &[
                REQUEST_CONTEXT,
                &self.session_id,
                &self.timestamp.0.to_be_bytes(),
                &self.nonce,
                self.message,
            ],
            &self.mac,
        )
        .map_err(|_| ProtoError::BadMac { token: "request" })?;
        Ok(VerifiedRequest {
            session_id: self.session_id,
            timestamp: self.timestamp,
            nonce: self.nonce,
            message: self.message,
        })
    }
}

/// Builds the payload of an authenticated response to the request with `nonce`.
pub fn seal_response(
    key: &Blake3Mac,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    timestamp: UnixMillis,
    message: &[u8],
) -> Vec<u8> {
    let tag = key.tag(&[
        RESPONSE_CONTEXT,
        session_id,
        nonce,
        &timestamp.0.to_be_bytes(),
        message,
    ]);
    let mut out = Vec::with_capacity(RESPONSE_HEADER_BYTES + message.len() + TAG_BYTES);
    out.extend_from_slice(nonce);
    out.extend_from_slice(&timestamp.0.to_be_bytes());
    out.extend_from_slice(message);
    out.extend_from_slice(&tag);
    out
}

/// Checks a response payload against the request it answers; returns the server's
/// timestamp and the message.
pub fn open_response<'a>(
    key: &Blake3Mac,
    session_id: &[u8; SESSION_ID_BYTES],
    nonce: &[u8; NONCE_BYTES],
    payload: &'a [u8],
) -> Result<(UnixMillis, &'a [u8])> {
    if payload.len() < RESPONSE_HEADER_BYTES + TAG_BYTES {
        return Err(ProtoError::Truncated {
            what: "response envelope",
        });
    }
    let (head, rest) = payload.split_at(RESPONSE_HEADER_BYTES);
    let (message, mac) = rest.split_at(rest.len() - TAG_BYTES);
    let mut r = crate::codec::Reader::new(head, "response envelope");
    let echoed: [u8; NONCE_BYTES] = r.array()?;
    let timestamp = UnixMillis(r.u64()?);
    key.verify(
        &[
            RESPONSE_CONTEXT,
            session_id,
            &echoed,
            &timestamp.0.to_be_bytes(),
            message,
        ],
        mac,
    )
    .map_err(|_| ProtoError::BadMac { token: "response" })?;
    if &echoed != nonce {
        return Err(ProtoError::WrongRecipient {
            token: "response",
            reason: "answers another request",
        });
    }
    Ok((timestamp, message))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn envelope_round_trip_and_tamper() {
        let key = envelope_key(&[7u8; 32]);
        let sid = [9u8; 16];
        let nonce = [8u8; 16];
        let payload = seal_request(&key, &sid, UnixMillis(5), &nonce, b"hello");
        let v = UnverifiedRequest::decode(&payload)
            .and_then(|r| r.verify(&key))
            .map(|r| r.message.to_vec());
        assert_eq!(v, Ok(b"hello".to_vec()));
        for i in 0..payload.len() {
            let mut bad = payload.clone();
            bad[i] ^= 0x01;
            let r = UnverifiedRequest::decode(&bad).and_then(|r| r.verify(&key));
            assert!(r.is_err(), "flip at {i} accepted");
        }
        let resp = seal_response(&key, &sid, &nonce, UnixMillis(6), b"ok");
        assert_eq!(
            open_response(&key, &sid, &nonce, &resp).map(|(_, m)| m.to_vec()),
            Ok(b"ok".to_vec())
        );
        assert!(open_response(&key, &sid, &[0u8; 16], &resp).is_err());
    }

    #[test]
    fn envelope_vector() {
        // Also in docs/PROTOCOL.md; computed independently with Python's hmac + blake3.
        let key = envelope_key(&[7u8; 32]);
        let payload = seal_request(
            &key,
            &[9u8; 16],
            UnixMillis(1_795_305_600_000),
            &[8u8; 16],
            b"hello",
        );
        let frame = encode_frame(FrameHead::v1(FrameType::Request), &payload).unwrap_or_default();
        let expected = "4d5401020000004d09090909090909090909090909090909000001a2008d74000808080808080808080808080808080868656c6c6f7049b4dc6d2820fe9d8a558daf1edfbaba8ccd66b13e36a4cb015791dedd8a7f";
        assert_eq!(hex::encode(&frame), expected);
        let doc = include_str!("../../../docs/PROTOCOL.md");
        assert!(doc.contains(expected), "vector missing from PROTOCOL.md");
        // The same envelope in a version-2 frame, request id 0x01020304.
        let frame = encode_frame(FrameHead::new(FrameType::Request, 0x0102_0304), &payload)
            .unwrap_or_default();
        let expected_v2 = format!("4d540202010203040000004d{}", &expected[16..]);
        assert_eq!(hex::encode(&frame), expected_v2);
        assert!(
            doc.contains(&expected_v2),
            "version-2 vector missing from PROTOCOL.md"
        );
    }

    #[test]
    fn frame_limits() {
        let plain = FrameHead::new(FrameType::Plain, 1);
        assert!(encode_header(plain, FRAME_PAYLOAD_BYTES_MAX + 1).is_err());
        for h in [
            &b"MT\x01\x02\xff\xff\xff\xff"[..],
            &b"MT\x02\x02\x00\x00\x00\x07\xff\xff\xff\xff"[..],
        ] {
            assert!(matches!(decode_header(h), Err(ProtoError::TooLarge { .. })));
        }
        assert_eq!(
            decode_header(b"MT\x03\x02\x00\x00\x00\x00"),
            Err(ProtoError::UnsupportedVersion { found: 3 })
        );
        // A version-2 header cut to version 1's length is short.
        assert!(decode_header(b"MT\x02\x02\x00\x00\x00\x00").is_err());
        for head in [
            FrameHead::v1(FrameType::Request),
            FrameHead::new(FrameType::Request, 0),
            FrameHead::new(FrameType::SecResponse, u32::MAX),
        ] {
            let frame = encode_frame(head, b"abc").unwrap_or_default();
            assert_eq!(decode_frame(&frame), Ok((head, &b"abc"[..])));
            assert!(decode_frame(&frame[..frame.len() - 1]).is_err());
            let mut longer = frame.clone();
            longer.push(0);
            assert!(decode_frame(&longer).is_err());
        }
        let answer = FrameHead::new(FrameType::SecRequest, 9).answer(FrameType::SecResponse);
        assert_eq!(answer, FrameHead::new(FrameType::SecResponse, 9));
    }
}
