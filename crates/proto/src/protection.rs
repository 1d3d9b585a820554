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
//! session's AEAD key (`BlockKey`, ChaCha20-Poly1305 under a per-message subkey; block
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
        let data_digest = b & DATA_DIGEST_BIT != 0;
        let method = Protection::from_byte(b & !DATA_DIGEST_BIT)?;
        if data_digest && method != Protection::AllData {
            return None;
        }
        Some(Self {
            method,
            data_digest,
        })
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

/// Opens a [`seal_body`] body into message and data.
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
    body.truncate(len);
    if body.len() < message_len {
        return Err(ProtoError::Truncated { what });
    }
    let data = body.split_off(message_len);
    Ok((body, data))
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
    use std::borrow::Cow;
    if header.data_digest && header.method != Protection::AllData {
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
            keys.mac
                .tag(&[REQUEST_CONTEXT, &head, message, &data_digest(data)])
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
    if sealing.data_digest && sealing.method != Protection::AllData {
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
            let aad = [ctx.as_slice(), &head].concat();
            let body = seal_body(keys, RESPONSE_BLOCK, &aad, message, &data, rng)?;
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
    mut payload: Vec<u8>,
) -> Result<(UnixMillis, Vec<u8>, Vec<u8>)> {
    if sealing.method == Protection::Confidential {
        return open_response(keys, sealing, session_id, nonce, &payload);
    }
    // Checks everything on the borrowed payload, data included, without copying it.
    let (timestamp, message_len) = {
        let (timestamp, message, _) =
            open_response_slices(keys, sealing, session_id, nonce, &payload)?;
        (timestamp, message.len())
    };
    let start = RESPONSE_HEADER_BYTES + message_len;
    let end = payload.len().saturating_sub(TAG_BYTES);
    let message = payload
        .get(RESPONSE_HEADER_BYTES..start)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    payload.truncate(end);
    payload.drain(..start.min(end));
    Ok((timestamp, message, payload))
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
    let (head, rest, timestamp, message_len, echoed) = split_response(sealing, payload)?;
    let aad = [RESPONSE_CONTEXT, session_id.as_slice(), head].concat();
    let (body, data) = open_body(
        keys,
        RESPONSE_BLOCK,
        &aad,
        rest,
        message_len,
        "response",
        "response envelope",
    )?;
    check_echo(&echoed, nonce)?;
    Ok((timestamp, body, data))
}

type SplitResponse<'a> = (&'a [u8], &'a [u8], UnixMillis, usize, [u8; NONCE_BYTES]);

/// Header fields of a response payload, refusing one sealed otherwise than `sealing`.
fn split_response(sealing: Sealing, payload: &[u8]) -> Result<SplitResponse<'_>> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    const SID: [u8; 16] = [5; 16];
    const NONCE: [u8; 16] = [6; 16];

    /// Every sealing a receiver takes: each method as sent now, and ALLDATA over the data
    /// itself (the layout before digests).
    const SEALINGS: [Sealing; 5] = [
        Sealing {
            method: Protection::CapKey,
            data_digest: false,
        },
        Sealing {
            method: Protection::CmdRsp,
            data_digest: false,
        },
        Sealing {
            method: Protection::AllData,
            data_digest: true,
        },
        Sealing {
            method: Protection::AllData,
            data_digest: false,
        },
        Sealing {
            method: Protection::Confidential,
            data_digest: false,
        },
    ];

    fn sealed(sealing: Sealing) -> (EnvelopeKeys, Vec<u8>) {
        let keys = EnvelopeKeys::new(&[9; 32]);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let h = RequestHeader {
            method: sealing.method,
            data_digest: sealing.data_digest,
            session_id: SID,
            timestamp: UnixMillis(1000),
            nonce: NONCE,
        };
        let p = seal_request(&keys, &h, b"CAP+command", b"bulk data", b"CAP", &mut rng).unwrap();
        (keys, p)
    }

    /// What each method promises for requests: which byte positions a change must be
    /// detected at (header, message, data).
    #[test]
    fn each_method_protects_exactly_what_it_promises() {
        for sealing in SEALINGS {
            let method = sealing.method;
            let (keys, p) = sealed(sealing);
            assert_eq!(p[0], sealing.byte());
            let opened = UnverifiedRequest::decode(&p)
                .unwrap()
                .open_digested(&keys, b"CAP")
                .unwrap();
            assert_eq!(
                (opened.message.as_slice(), opened.data.as_slice()),
                (&b"CAP+command"[..], &b"bulk data"[..])
            );
            let digest = sealing.data_digest.then(|| data_digest(b"bulk data"));
            assert_eq!(opened.digest, digest, "{sealing:?}");
            let message_at = REQUEST_HEADER_BYTES + 5; // inside "command"
            let data_at = REQUEST_HEADER_BYTES + 11 + 2;
            for (at, what) in [
                (3usize, "header"),
                (message_at, "message"),
                (data_at, "data"),
            ] {
                let mut t = p.clone();
                t[at] ^= 1;
                let accepted = UnverifiedRequest::decode(&t)
                    .and_then(|r| r.open(&keys, b"CAP"))
                    .is_ok();
                let protected = match (method, what) {
                    (Protection::CapKey, "header") => true,
                    (Protection::CapKey, _) => false,
                    (Protection::CmdRsp, "data") => false,
                    _ => true,
                };
                assert_eq!(accepted, !protected, "{sealing:?} {what}");
            }
            // The method byte is covered: a digest envelope read as the legacy layout (or
            // the reverse), or turned into another method, is refused.
            for other in [0x03, 0x83, 0x02, 0x82, 0x84] {
                if other == p[0] {
                    continue;
                }
                let mut t = p.clone();
                t[0] = other;
                let accepted = UnverifiedRequest::decode(&t)
                    .and_then(|r| r.open(&keys, b"CAP"))
                    .is_ok();
                assert!(!accepted, "{sealing:?} as byte {other:#x}");
            }
            if method == Protection::Confidential {
                assert!(!p.windows(9).any(|w| w == b"bulk data"));
            }
        }
    }

    #[test]
    fn responses_are_bound_to_method_session_and_request() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let keys = EnvelopeKeys::new(&[9; 32]);
        for method in SEALINGS {
            let p = seal_response(
                &keys,
                method,
                &SID,
                &NONCE,
                UnixMillis(7),
                b"ok",
                b"DATA",
                &mut rng,
            )
            .unwrap();
            let (t, m, d) = open_response(&keys, method, &SID, &NONCE, &p).unwrap();
            assert_eq!(
                (t.0, m.as_slice(), d.as_slice()),
                (7, &b"ok"[..], &b"DATA"[..])
            );
            assert_eq!(
                open_response_owned(&keys, method, &SID, &NONCE, p.clone()).unwrap(),
                (t, m.clone(), d.clone())
            );
            assert!(open_response(&keys, method, &[1; 16], &NONCE, &p).is_err());
            assert!(open_response(&keys, method, &SID, &[1; 16], &p).is_err());
            for other in SEALINGS.into_iter().filter(|s| *s != method) {
                assert!(
                    open_response(&keys, other, &SID, &NONCE, &p).is_err(),
                    "{method:?} opened as {other:?}"
                );
            }
            let mut t = p.clone();
            t[RESPONSE_HEADER_BYTES + 3] ^= 1; // inside the data (or the AEAD body)
            let detected = open_response(&keys, method, &SID, &NONCE, &t).is_err();
            let data_protected = method.method >= Protection::AllData;
            assert_eq!(detected, data_protected, "{method:?}");
            assert_eq!(
                open_response_owned(&keys, method, &SID, &NONCE, t.clone()).is_err(),
                detected
            );
        }
    }

    /// An ALLDATA answer sealed from a kept digest, its data sent apart, opens like one
    /// sealed over the data; a kept digest that does not match the data sent (a stale
    /// one, or data changed on the way) fails the receiver's check.
    #[test]
    fn answers_sealed_from_a_kept_digest_check_the_data_sent() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let keys = EnvelopeKeys::new(&[9; 32]);
        let sealing = Sealing::current(Protection::AllData);
        let seal = |digest: &DataDigest, rng: &mut rand_chacha::ChaCha20Rng| {
            seal_response_parts(
                &keys,
                sealing,
                &SID,
                &NONCE,
                UnixMillis(7),
                b"ok",
                Vec::new(),
                Some(digest),
                rng,
            )
            .unwrap()
        };
        let [first, empty, trailer] = seal(&data_digest(b"DATA"), &mut rng);
        assert!(empty.is_empty());
        let sent = [first.as_slice(), b"DATA", &trailer].concat();
        let (_, m, d) = open_response(&keys, sealing, &SID, &NONCE, &sent).unwrap();
        assert_eq!((m.as_slice(), d.as_slice()), (&b"ok"[..], &b"DATA"[..]));
        let [first, _, trailer] = seal(&data_digest(b"OLD!"), &mut rng);
        let stale = [first.as_slice(), b"DATA", &trailer].concat();
        assert!(matches!(
            open_response(&keys, sealing, &SID, &NONCE, &stale),
            Err(ProtoError::BadMac { .. })
        ));
        let legacy = Sealing {
            method: Protection::AllData,
            data_digest: false,
        };
        assert!(open_response(&keys, legacy, &SID, &NONCE, &sent).is_err());
    }

    /// ALLDATA over a digest, computed independently with Python's `blake3` package
    /// (docs/PROTOCOL.md gives the inputs).
    #[test]
    fn digest_envelope_vectors() {
        let keys = EnvelopeKeys::new(&[7; 32]);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(0);
        let sealing = Sealing::current(Protection::AllData);
        let header = RequestHeader {
            method: sealing.method,
            data_digest: sealing.data_digest,
            session_id: [9; 16],
            timestamp: UnixMillis(1_795_305_600_000),
            nonce: [8; 16],
        };
        let request = seal_request(&keys, &header, b"hello", b"bulk data", b"", &mut rng).unwrap();
        assert_eq!(
            hex::encode(&request),
            "8309090909090909090909090909090909000001a2008d740008080808080808080808080808080808\
             0000000568656c6c6f62756c6b20646174610ba40a80d6ba8944173f89b77aea44fc0cb477f8eec6\
             5c00cbfbdd377b4a86c1"
        );
        let response = seal_response(
            &keys,
            sealing,
            &[9; 16],
            &[8; 16],
            UnixMillis(1_795_305_600_000),
            b"ok",
            b"bulk data",
            &mut rng,
        )
        .unwrap();
        assert_eq!(
            hex::encode(&response),
            "8308080808080808080808080808080808000001a2008d7400000000026f6b62756c6b2064617461\
             6c82b8ea26445339fdce46ee8fc8b51628e17dad3add2bcc0a0186a934c7c5b9"
        );
    }

    #[test]
    fn the_digest_bit_is_refused_on_methods_that_do_not_cover_data() {
        for b in [0x81u8, 0x82, 0x84, 0x80] {
            assert_eq!(Sealing::from_byte(b), None, "{b:#x}");
        }
        assert_eq!(
            Sealing::from_byte(0x83),
            Some(Sealing::current(Protection::AllData))
        );
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(4);
        let keys = EnvelopeKeys::new(&[9; 32]);
        let header = RequestHeader {
            method: Protection::CmdRsp,
            data_digest: true,
            session_id: SID,
            timestamp: UnixMillis(1),
            nonce: NONCE,
        };
        assert!(seal_request(&keys, &header, b"m", b"d", b"", &mut rng).is_err());
    }

    proptest::proptest! {
        /// Arbitrary bytes never panic the envelope decoders, under every method byte.
        #[test]
        fn arbitrary_envelopes_are_refused_without_panicking(
            method in proptest::prop_oneof![0u8..6, 0x80u8..0x86],
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let keys = EnvelopeKeys::new(&[3; 32]);
            let mut payload = vec![method];
            payload.extend_from_slice(&body);
            if let Ok(r) = UnverifiedRequest::decode(&payload) {
                let _ = r.peek_message();
                proptest::prop_assert!(r.open(&keys, b"").is_err());
            }
            for m in Protection::ALL {
                let sealing = Sealing { method: m, data_digest: false };
                proptest::prop_assert!(open_response(&keys, sealing, &SID, &NONCE, &payload).is_err());
                let current = Sealing::current(m);
                proptest::prop_assert!(open_response(&keys, current, &SID, &NONCE, &payload).is_err());
            }
        }
    }
}
