//! SPEC T1: the protection methods of the data path, and the envelope that carries each.
//!
//! Five methods, each including the one below it:
//!
//! | method | request | response |
//! |---|---|---|
//! | `NOSEC` | no capability, no MAC (`FrameType::Insecure`; needs the danger flag) | none |
//! | `CAPKEY` | session MAC over the envelope header and the capability only | MAC over the header (origin, freshness) |
//! | `CMDRSP` | MAC over the header and the whole command message, not bulk data | MAC over the header and the result message, not bulk data |
//! | `ALLDATA` | MAC over everything, data included | MAC over everything |
//! | `CONFIDENTIAL` | AEAD over message and data (header as AAD) | AEAD likewise |
//!
//! The MDS chooses the method per partition and signs it into every capability it issues
//! ([`crate::capability::Capability::protection`]); an OSD refuses a request sealed with a
//! weaker method than its capability names, so neither a client nor a man in the middle
//! can downgrade it.
//!
//! A protected envelope (`FrameType::SecRequest` / `SecResponse`) splits the message from
//! its bulk data so that CAPKEY and CMDRSP need not touch data bytes:
//!
//! ```text
//! request:  method u8 ‖ session id [16] ‖ timestamp u64 BE ‖ nonce [16] ‖ message length u32 BE ‖ body ‖ trailer
//! response: method u8 ‖ nonce [16] ‖ timestamp u64 BE ‖ message length u32 BE ‖ body ‖ trailer
//! ```
//!
//! For the MAC methods `body = message ‖ data` and `trailer` is the 32-byte keyed-BLAKE3
//! tag (envelope key of the session) over the context string, every header field (the
//! session id included, also in responses) and, per method: the capability (CAPKEY
//! requests), nothing more (CAPKEY responses), the message (CMDRSP), message and the
//! data's digest (ALLDATA). For CONFIDENTIAL `body` is `AEAD(message ‖ data)` with the
//! session's AEAD key (`BlockKey`, AES-256-GCM under a per-message subkey; block
//! index 0 for requests, 1 for responses), the context and header as associated data, and
//! no trailer.
//!
//! ALLDATA's method byte is `0x83` ([`DATA_DIGEST_BIT`] set): its MAC covers
//! [`data_digest`] (BLAKE3) of the data instead of running over the data itself. Both are
//! one pass over the data for whoever seals or checks it, but a digest can be kept: an OSD
//! keeps the digest of an object it checked on write and answers a read of the whole
//! object with it, sending the data straight from the file without touching it again.
//! The byte `0x03` is the layout before digests (the MAC runs over the data); receivers
//! still take it and answer in kind.

mod response;

pub use response::{open_response, open_response_owned, seal_response, seal_response_parts};

use crate::codec::Reader;
use crate::limits::{NONCE_BYTES, SESSION_ID_BYTES};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::aead::BlockKey;
use maat_crypto::mac::{Blake3Mac, TAG_BYTES};
use maat_crypto::Secret32;
use serde::{Deserialize, Serialize};

/// A protection method (SPEC T1), ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protection {
    /// No security: the claimed user is believed (benchmarks; needs the danger flag).
    NoSec = 0,
    /// The capability is checked and bound to the session; commands are not protected.
    CapKey = 1,
    /// Commands and responses are integrity-protected, bulk data is not.
    CmdRsp = 2,
    /// Everything, data included, is integrity-protected.
    AllData = 3,
    /// Everything is integrity-protected and encrypted on the wire.
    Confidential = 4,
}

impl Protection {
    /// Every method, weakest first.
    pub const ALL: [Protection; 5] = [
        Protection::NoSec,
        Protection::CapKey,
        Protection::CmdRsp,
        Protection::AllData,
        Protection::Confidential,
    ];

    /// The name users type and see.
    pub fn name(self) -> &'static str {
        match self {
            Protection::NoSec => "NOSEC",
            Protection::CapKey => "CAPKEY",
            Protection::CmdRsp => "CMDRSP",
            Protection::AllData => "ALLDATA",
            Protection::Confidential => "CONFIDENTIAL",
        }
    }

    /// Parses a name (case-insensitive).
    pub fn parse(name: &str) -> Option<Protection> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// The envelope's method byte.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// The method of an envelope's method byte (NOSEC never travels in an envelope).
    pub fn from_byte(b: u8) -> Option<Protection> {
        Self::ALL
            .into_iter()
            .find(|p| p.byte() == b && *p != Protection::NoSec)
    }
}

impl Default for Protection {
    /// ALLDATA: what Maat used before methods existed, and `maat up`'s default.
    fn default() -> Self {
        Protection::AllData
    }
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Set in an ALLDATA envelope's method byte: the MAC covers the data's [`data_digest`].
pub const DATA_DIGEST_BIT: u8 = 0x80;

/// BLAKE3 of bulk data: what an ALLDATA MAC covers in its place.
pub type DataDigest = [u8; 32];

/// The digest an ALLDATA envelope's MAC covers in place of `data`.
pub fn data_digest(data: &[u8]) -> DataDigest {
    maat_crypto::hash::blake3(&[data])
}

/// How an envelope is sealed: its method and, for ALLDATA, whether the MAC covers the
/// data's digest (what this version sends) or the data itself (the layout before digests,
/// still accepted). A response is sealed as its request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealing {
    /// The protection method.
    pub method: Protection,
    /// ALLDATA only: the MAC covers [`data_digest`] of the data.
    pub data_digest: bool,
}

impl Sealing {
    /// How this version seals `method`: ALLDATA over the data's digest.
    pub fn current(method: Protection) -> Self {
        Self {
            method,
            data_digest: method == Protection::AllData,
        }
    }

    /// The envelope's method byte.
    pub fn byte(self) -> u8 {
        let bit = if self.data_digest { DATA_DIGEST_BIT } else { 0 };
        self.method.byte() | bit
    }

    /// The sealing of a method byte; `None` for an unknown byte, NOSEC, or the digest bit
    /// on a method that does not cover data.
    pub fn from_byte(b: u8) -> Option<Self> {
        let sealing = Self {
            method: Protection::from_byte(b & !DATA_DIGEST_BIT)?,
            data_digest: b & DATA_DIGEST_BIT != 0,
        };
        (!sealing.misplaced_digest()).then_some(sealing)
    }

    /// A digest asked of a method that does not cover data: no envelope is sealed so.
    fn misplaced_digest(self) -> bool {
        self.data_digest && self.method != Protection::AllData
    }
}

const REQUEST_CONTEXT: &[u8] = b"maat/req/v2\0";
const RESPONSE_CONTEXT: &[u8] = b"maat/resp/v2\0";
/// BLAKE3 key-derivation context of a session's envelope AEAD key.
pub const ENVELOPE_AEAD_CONTEXT: &str = "maat envelope aead v1";
const REQUEST_HEADER_BYTES: usize = 1 + SESSION_ID_BYTES + 8 + NONCE_BYTES + 4;
const RESPONSE_HEADER_BYTES: usize = 1 + NONCE_BYTES + 8 + 4;
const REQUEST_BLOCK: u64 = 0;
const RESPONSE_BLOCK: u64 = 1;

/// The keys of one session for protected envelopes.
#[derive(Clone, Debug)]
pub struct EnvelopeKeys {
    /// MAC key (the same envelope key as `wire`).
    pub mac: Blake3Mac,
    /// AEAD key for CONFIDENTIAL.
    pub aead: BlockKey,
}

impl EnvelopeKeys {
    /// Both keys of a session secret.
    pub fn new(session_secret: &[u8; 32]) -> Self {
        let secret = Secret32::from_bytes(*session_secret);
        Self {
            mac: crate::wire::envelope_key(session_secret),
            aead: BlockKey::new(Secret32::from_bytes(maat_crypto::hash::blake3_keyed(
                secret.expose(),
                &[ENVELOPE_AEAD_CONTEXT.as_bytes()],
            ))),
        }
    }

    /// Counts the keys' operations into `counters`.
    pub fn with_counters(self, counters: maat_crypto::counters::Counters) -> Self {
        Self {
            mac: self.mac.with_counters(counters.clone()),
            aead: self.aead.with_counters(counters),
        }
    }
}

/// The fields of a request envelope header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// The method the sender sealed with.
    pub method: Protection,
    /// The sender's session.
    pub session_id: [u8; SESSION_ID_BYTES],
    /// ALLDATA only: the MAC covers the data's digest (see [`Sealing`]).
    pub data_digest: bool,
    /// The sender's clock (corrected by its offset to the receiver's).
    pub timestamp: UnixMillis,
    /// Fresh per request.
    pub nonce: [u8; NONCE_BYTES],
}

impl RequestHeader {
    /// How the envelope is sealed (its answer is sealed the same way).
    pub fn sealing(&self) -> Sealing {
        Sealing {
            method: self.method,
            data_digest: self.data_digest,
        }
    }
}

fn u32_len(len: usize, what: &'static str) -> Result<[u8; 4]> {
    u32::try_from(len)
        .map(u32::to_be_bytes)
        .map_err(|_| ProtoError::TooLarge {
            what,
            len,
            limit: u32::MAX as usize,
        })
}

fn request_head(h: &RequestHeader, message_len: [u8; 4]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REQUEST_HEADER_BYTES);
    out.push(h.sealing().byte());
    out.extend_from_slice(&h.session_id);
    out.extend_from_slice(&h.timestamp.0.to_be_bytes());
    out.extend_from_slice(&h.nonce);
    out.extend_from_slice(&message_len);
    out
}

/// CONFIDENTIAL: `message ‖ data` encrypted as one block of the session's AEAD key.
fn seal_body(
    keys: &EnvelopeKeys,
    block: u64,
    aad: &[u8],
    message: &[u8],
    data: &[u8],
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(message.len() + data.len() + 48);
    body.extend_from_slice(message);
    body.extend_from_slice(data);
    keys.aead
        .seal_in_place(block, aad, &mut body, rng)
        .map_err(ProtoError::Crypto)?;
    Ok(body)
}

/// Opens a [`seal_body`] body (borrowed: copied once) into message and data.
fn open_body(
    keys: &EnvelopeKeys,
    block: u64,
    aad: &[u8],
    sealed: &[u8],
    message_len: usize,
    token: &'static str,
    what: &'static str,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut body = sealed.to_vec();
    let len = keys
        .aead
        .open_in_place(block, aad, &mut body)
        .map_err(|_| ProtoError::DecryptionFailed { token })?
        .len();
    if len < message_len {
        return Err(ProtoError::Truncated { what });
    }
    Ok(cut_message_and_data(body, 0, message_len, len))
}

/// Cuts `buf[at .. at + message_len]` out as the message and keeps the data up to `end`
/// in `buf`'s own allocation (moved down over what precedes it), rather than copy it into
/// a new one of its size. Callers checked `at + message_len <= end <= buf.len()`.
fn cut_message_and_data(
    mut buf: Vec<u8>,
    at: usize,
    message_len: usize,
    end: usize,
) -> (Vec<u8>, Vec<u8>) {
    let start = at.saturating_add(message_len).min(end);
    let message = buf.get(at..start).map(<[u8]>::to_vec).unwrap_or_default();
    buf.truncate(end);
    buf.drain(..start);
    (message, buf)
}

/// Seals a request: `message` is the command without its bulk data, `data` the bulk data,
/// `capability` the capability bytes the message carries (the CAPKEY MAC covers them).
pub fn seal_request(
    keys: &EnvelopeKeys,
    header: &RequestHeader,
    message: &[u8],
    data: &[u8],
    capability: &[u8],
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<Vec<u8>> {
    Ok(seal_request_parts(keys, header, message, data, capability, rng)?.concat())
}

/// [`seal_request`] as parts whose concatenation is the payload, borrowing the data for
/// the MAC methods (the frame is written without copying it).
pub fn seal_request_parts<'d>(
    keys: &EnvelopeKeys,
    header: &RequestHeader,
    message: &[u8],
    data: &'d [u8],
    capability: &[u8],
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<[std::borrow::Cow<'d, [u8]>; 3]> {
    seal_request_parts_digested(
        keys,
        header,
        message,
        data,
        || data_digest(data),
        capability,
        rng,
    )
}

/// [`seal_request_parts`] with the data's digest from `digest` (called only when the
/// envelope covers the digest: ALLDATA with `data_digest`), so that the copies of one
/// change, each sealed under its own OSD session, hash their shared data once. `digest`
/// must give [`data_digest`] of `data`: any other value makes an envelope that the
/// receiver refuses.
pub fn seal_request_parts_digested<'d>(
    keys: &EnvelopeKeys,
    header: &RequestHeader,
    message: &[u8],
    data: &'d [u8],
    digest: impl FnOnce() -> DataDigest,
    capability: &[u8],
    rng: &mut impl rand_core::CryptoRngCore,
) -> Result<[std::borrow::Cow<'d, [u8]>; 3]> {
    use std::borrow::Cow;
    if header.sealing().misplaced_digest() {
        return Err(ProtoError::Malformed {
            what: "request envelope",
            reason: "a data digest under a method that does not cover data",
        });
    }
    let head = request_head(header, u32_len(message.len(), "request message")?);
    let tag = match header.method {
        Protection::NoSec => {
            return Err(ProtoError::Malformed {
                what: "request envelope",
                reason: "NOSEC has no envelope",
            })
        }
        Protection::CapKey => keys.mac.tag(&[REQUEST_CONTEXT, &head, capability]),
        Protection::CmdRsp => keys.mac.tag(&[REQUEST_CONTEXT, &head, message]),
        Protection::AllData if header.data_digest => {
            keys.mac.tag(&[REQUEST_CONTEXT, &head, message, &digest()])
        }
        Protection::AllData => keys.mac.tag(&[REQUEST_CONTEXT, &head, message, data]),
        Protection::Confidential => {
            let aad = [REQUEST_CONTEXT, &head].concat();
            let body = seal_body(keys, REQUEST_BLOCK, &aad, message, data, rng)?;
            return Ok([Cow::Owned(head), Cow::Owned(body), Cow::Owned(Vec::new())]);
        }
    };
    let mut first = head;
    first.extend_from_slice(message);
    Ok([
        Cow::Owned(first),
        Cow::Borrowed(data),
        Cow::Owned(tag.to_vec()),
    ])
}

/// A request envelope split into its parts, not yet checked.
#[derive(Debug, Clone)]
pub struct UnverifiedRequest<'a> {
    /// The header fields.
    pub header: RequestHeader,
    head: &'a [u8],
    message_len: usize,
    body: &'a [u8],
    trailer: &'a [u8],
}

impl<'a> UnverifiedRequest<'a> {
    /// Splits a request payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self> {
        let truncated = ProtoError::Truncated {
            what: "request envelope",
        };
        if payload.len() < REQUEST_HEADER_BYTES {
            return Err(truncated);
        }
        let (head, rest) = payload.split_at(REQUEST_HEADER_BYTES);
        let mut r = Reader::new(head, "request envelope");
        let sealing = Sealing::from_byte(r.u8()?).ok_or(ProtoError::Malformed {
            what: "request envelope",
            reason: "unknown protection method",
        })?;
        let method = sealing.method;
        let session_id = r.array()?;
        let timestamp = UnixMillis(r.u64()?);
        let nonce = r.array()?;
        let message_len = r.u32()? as usize;
        let (body, trailer) = if method == Protection::Confidential {
            (rest, &[][..])
        } else {
            let at = rest.len().checked_sub(TAG_BYTES).ok_or(truncated.clone())?;
            rest.split_at(at)
        };
        if method != Protection::Confidential && body.len() < message_len {
            return Err(truncated);
        }
        Ok(Self {
            header: RequestHeader {
                method,
                data_digest: sealing.data_digest,
                session_id,
                timestamp,
                nonce,
            },
            head,
            message_len,
            body,
            trailer,
        })
    }

    /// The message and data as sent, before any check: for CAPKEY the receiver must
    /// decode the message to find the capability the MAC covers. `None` for CONFIDENTIAL,
    /// whose body is encrypted.
    pub fn peek_message(&self) -> Option<&'a [u8]> {
        match self.header.method {
            Protection::Confidential => None,
            _ => self.body.get(..self.message_len),
        }
    }

    /// Checks the envelope under `keys`; returns message and data. `capability` is what the
    /// decoded message carries (used by CAPKEY only).
    pub fn open(self, keys: &EnvelopeKeys, capability: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
        self.open_digested(keys, capability)
            .map(|opened| (opened.message, opened.data))
    }

    /// [`UnverifiedRequest::open`], also giving the data's digest when the check computed
    /// it (ALLDATA over a digest), for the receiver to keep.
    pub fn open_digested(self, keys: &EnvelopeKeys, capability: &[u8]) -> Result<Opened> {
        if self.header.method == Protection::Confidential {
            let aad = [REQUEST_CONTEXT, self.head].concat();
            let (message, data) = open_body(
                keys,
                REQUEST_BLOCK,
                &aad,
                self.body,
                self.message_len,
                "request",
                "request envelope",
            )?;
            return Ok(Opened {
                message,
                data,
                digest: None,
            });
        }
        // `decode` checked that a MAC method's body holds the whole message.
        let (message, data) =
            self.body
                .split_at_checked(self.message_len)
                .ok_or(ProtoError::Truncated {
                    what: "request envelope",
                })?;
        let digest = self.header.data_digest.then(|| data_digest(data));
        let covered: &[&[u8]] = match (self.header.method, &digest) {
            (Protection::CapKey, _) => &[REQUEST_CONTEXT, self.head, capability],
            (Protection::CmdRsp, _) => &[REQUEST_CONTEXT, self.head, message],
            (Protection::AllData, Some(digest)) => &[REQUEST_CONTEXT, self.head, message, digest],
            (Protection::AllData, None) => &[REQUEST_CONTEXT, self.head, message, data],
            (Protection::NoSec | Protection::Confidential, _) => {
                return Err(ProtoError::BadMac { token: "request" })
            }
        };
        keys.mac
            .verify(covered, self.trailer)
            .map_err(|_| ProtoError::BadMac { token: "request" })?;
        Ok(Opened {
            message: message.to_vec(),
            data: data.to_vec(),
            digest,
        })
    }
}

/// A checked request envelope's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The command message.
    pub message: Vec<u8>,
    /// The bulk data.
    pub data: Vec<u8>,
    /// The data's [`data_digest`], when the check computed it (ALLDATA over a digest).
    pub digest: Option<DataDigest>,
}

#[cfg(test)]
mod tests;
