//! The generic shape every token shares, and the unverified → verified typestate.
//!
//! Encoding: `version(1) || kind(1) || body || authenticator`, where the authenticator is
//! an Ed25519 signature (64 bytes) over `SIGNATURE_CONTEXT || version || kind || body`, or an
//! HMAC-SHA256 tag (32 bytes) over `MAC_CONTEXT || version || kind || body`.
//! Decoding gives an [`Unverified`] (or [`UnverifiedMac`]); only `verify` gives a
//! [`Verified`], and code that acts on a token takes `Verified<T>`.

use crate::codec::{Reader, Writer};
use crate::limits::{TOKEN_BYTES_MAX, TOKEN_LIFETIME_MILLIS_MAX};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::mac::{MacKey, TAG_BYTES};
use maat_crypto::sign::{Signature, SigningKey, VerifyingKey, SIGNATURE_BYTES};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Prefix of every signed message (separates Maat signatures from any other use of a key).
pub const SIGNATURE_CONTEXT: &[u8] = b"maat/sig/v1\0";
/// Prefix of every MACed message.
pub const MAC_CONTEXT: &[u8] = b"maat/mac/v1\0";

/// The domain tag of each token kind (second byte of every encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Kind {
    /// M1 login ticket.
    LoginTicket = 0x01,
    /// M2 session-key offer.
    SessionOffer = 0x02,
    /// M2 session-key confirmation.
    SessionConfirm = 0x03,
    /// M3 extended capability.
    Capability = 0x04,
    /// M4 Merkle tree message.
    MerkleTree = 0x05,
    /// M8 renewal token.
    Renewal = 0x06,
    /// M9 revocation notice.
    Revocation = 0x07,
    /// M10 delegation file handle.
    FileHandle = 0x08,
    /// M10 key lifetime token.
    KeyLifetime = 0x09,
    /// M10 proof-of-possession token.
    Proof = 0x0a,
    /// T2 capability (the MACed part of a credential).
    T10Capability = 0x0b,
    /// T3 SET KEY.
    SetKey = 0x0c,
    /// T3 SET MASTER KEY, seed exchange from the MDS.
    SetMasterKeyOffer = 0x0d,
    /// T3 SET MASTER KEY, the OSD's answer.
    SetMasterKeyAccept = 0x0e,
    /// H5 lockbox.
    Lockbox = 0x0f,
    /// H4 range-key grant.
    RangeGrant = 0x10,
    /// H6 key-range permit.
    KeyRanges = 0x11,
    /// T4 SET POLICY TAG (an object's policy access tag).
    SetPolicyTag = 0x12,
    /// H4 range-key grant sealed under the key a KDS and one login share (no signature).
    RangeGrantKeyed = 0x13,
    /// H5 lockbox sealed under keys derived from the owner's static key (no ephemeral
    /// key per box).
    LockboxKeyed = 0x14,
    /// T3 key command (SET KEY, SET MASTER KEY, SET POLICY TAG) with the fencing token of
    /// the MDS leader that sent it, MACed under the OSD's control key (issue 42).
    FencedKeyCommand = 0x15,
}

impl Kind {
    /// Every kind, in byte order (tests use it to demand a fixture for each).
    pub const ALL: [Kind; 21] = [
        Kind::LoginTicket,
        Kind::SessionOffer,
        Kind::SessionConfirm,
        Kind::Capability,
        Kind::MerkleTree,
        Kind::Renewal,
        Kind::Revocation,
        Kind::FileHandle,
        Kind::KeyLifetime,
        Kind::Proof,
        Kind::T10Capability,
        Kind::SetKey,
        Kind::SetMasterKeyOffer,
        Kind::SetMasterKeyAccept,
        Kind::Lockbox,
        Kind::RangeGrant,
        Kind::KeyRanges,
        Kind::SetPolicyTag,
        Kind::RangeGrantKeyed,
        Kind::LockboxKeyed,
        Kind::FencedKeyCommand,
    ];

    /// Human-readable name used in errors.
    pub fn name(self) -> &'static str {
        match self {
            Kind::LoginTicket => "login ticket",
            Kind::SessionOffer => "session offer",
            Kind::SessionConfirm => "session confirmation",
            Kind::Capability => "capability",
            Kind::MerkleTree => "Merkle tree message",
            Kind::Renewal => "renewal token",
            Kind::Revocation => "revocation notice",
            Kind::FileHandle => "file handle",
            Kind::KeyLifetime => "key lifetime token",
            Kind::Proof => "proof token",
            Kind::T10Capability => "T10 capability",
            Kind::SetKey => "SET KEY",
            Kind::SetMasterKeyOffer => "SET MASTER KEY offer",
            Kind::SetMasterKeyAccept => "SET MASTER KEY accept",
            Kind::Lockbox => "lockbox",
            Kind::RangeGrant => "range-key grant",
            Kind::KeyRanges => "key-range permit",
            Kind::SetPolicyTag => "SET POLICY TAG",
            Kind::RangeGrantKeyed => "keyed range-key grant",
            Kind::LockboxKeyed => "keyed lockbox",
            Kind::FencedKeyCommand => "fenced key command",
        }
    }
}

// A kind added after `FencedKeyCommand` must be added to `Kind::ALL` too.
const _: () = assert!(Kind::ALL.len() == Kind::FencedKeyCommand as usize);

/// The body of a token kind: its fields and their canonical encoding.
pub trait Body: Sized {
    /// The domain tag.
    const KIND: Kind;
    /// Appends the body's canonical encoding.
    fn encode_body(&self, w: &mut Writer);
    /// Decodes the body, refusing every non-canonical form.
    fn decode_body(r: &mut Reader<'_>) -> Result<Self>;
}

/// Bodies authenticated by an Ed25519 signature (never by a MAC).
pub trait SignedBody: Body {}

/// Bodies authenticated by an HMAC (never by a signature).
pub trait MacedBody: Body {}

/// Signed bodies with no validity window of their own (their freshness comes from the
/// token that carries them or from the daemon's replay window).
pub trait Untimed: SignedBody {}

/// Tokens with a validity window `[start, expiry)`.
pub trait Timed {
    /// First instant of validity.
    fn start(&self) -> UnixMillis;
    /// First instant of invalidity.
    fn expiry(&self) -> UnixMillis;
}

/// Implements [`Timed`] for bodies whose window is their `start` and `expiry` fields.
macro_rules! timed_by_fields {
    ($($body:ty),* $(,)?) => {$(
        impl $crate::signed::Timed for $body {
            fn start(&self) -> $crate::UnixMillis {
                self.start
            }
            fn expiry(&self) -> $crate::UnixMillis {
                self.expiry
            }
        }
    )*};
}
pub(crate) use timed_by_fields;

/// Writes `version || kind`.
pub fn write_header(w: &mut Writer, kind: Kind) {
    w.u8(PROTOCOL_VERSION).u8(kind as u8);
}

/// Reads and checks `version || kind`.
pub fn read_header(r: &mut Reader<'_>, kind: Kind) -> Result<()> {
    let version = r.u8()?;
    if version != PROTOCOL_VERSION {
        return Err(ProtoError::UnsupportedVersion { found: version });
    }
    let found = r.u8()?;
    if found != kind as u8 {
        return Err(ProtoError::WrongDomain {
            expected: kind,
            found,
        });
    }
    Ok(())
}

/// The canonical `version || kind || body` of a body.
pub fn encode_unauthenticated<T: Body>(body: &T) -> Vec<u8> {
    let mut w = Writer::new();
    write_header(&mut w, T::KIND);
    body.encode_body(&mut w);
    w.finish()
}

/// Checks `[start, expiry)` against `now` and the lifetime limit.
pub fn check_validity<T: Body + Timed>(body: &T, now: UnixMillis) -> Result<()> {
    let (start, expiry) = (body.start(), body.expiry());
    let token = T::KIND.name();
    if expiry <= start || expiry.0 - start.0 > TOKEN_LIFETIME_MILLIS_MAX {
        return Err(ProtoError::Malformed {
            what: token,
            reason: "validity window empty or too long",
        });
    }
    if now < start {
        return Err(ProtoError::NotYetValid { token, start, now });
    }
    if now >= expiry {
        return Err(ProtoError::Expired { token, expiry, now });
    }
    Ok(())
}

fn check_size(len: usize, kind: Kind) -> Result<()> {
    if len > TOKEN_BYTES_MAX {
        return Err(ProtoError::TooLarge {
            what: kind.name(),
            len,
            limit: TOKEN_BYTES_MAX,
        });
    }
    Ok(())
}

/// A decoded token whose authenticator has not been checked. Its fields may be read only
/// through [`Unverified::unverified_body`], to route the token to the right key.
#[derive(Debug, Clone)]
pub struct Unverified<T> {
    body: T,
    signed: Vec<u8>,
    signature: Signature,
}

impl<T: SignedBody> Unverified<T> {
    /// Decodes a whole encoding (no trailing bytes).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        check_size(bytes.len(), T::KIND)?;
        let mut r = Reader::new(bytes, T::KIND.name());
        let token = Self::read(&mut r)?;
        r.finish()?;
        Ok(token)
    }

    /// Decodes a token embedded in a larger encoding, advancing `r` past it.
    pub fn read(r: &mut Reader<'_>) -> Result<Self> {
        let start = r.rest();
        let mut inner = Reader::new(start, T::KIND.name());
        read_header(&mut inner, T::KIND)?;
        let body = T::decode_body(&mut inner)?;
        let signed_len = start.len() - inner.remaining();
        let signature = Signature(inner.array::<SIGNATURE_BYTES>()?);
        let signed = r.take(signed_len)?.to_vec();
        r.take(SIGNATURE_BYTES)?;
        Ok(Self {
            body,
            signed,
            signature,
        })
    }

    /// The claimed fields, **not yet authenticated**: use only to pick the verifying key.
    pub fn unverified_body(&self) -> &T {
        &self.body
    }

    /// The encoding this was decoded from (signature included).
    pub fn to_bytes(&self) -> Vec<u8> {
        [&self.signed[..], &self.signature.0].concat()
    }

    fn check_signature(self, key: &VerifyingKey) -> Result<Verified<T>> {
        let message = [SIGNATURE_CONTEXT, &self.signed].concat();
        key.verify(&message, &self.signature)
            .map_err(|_| ProtoError::BadSignature {
                token: T::KIND.name(),
            })?;
        let mut encoded = self.signed;
        encoded.extend_from_slice(&self.signature.0);
        Ok(Verified {
            body: self.body,
            encoded,
        })
    }
}

impl<T: SignedBody + Timed> Unverified<T> {
    /// Checks the validity window (cheap, first) and then the signature.
    pub fn verify(self, key: &VerifyingKey, now: UnixMillis) -> Result<Verified<T>> {
        check_validity(&self.body, now)?;
        self.check_signature(key)
    }

    /// Like [`Unverified::verify`], but the window's end may be extended by a verified
    /// renewal token that names this token (SPEC M8); `renewed_expiry` is that token's
    /// expiry when it applies.
    pub fn verify_with_expiry(
        self,
        key: &VerifyingKey,
        renewed_expiry: Option<UnixMillis>,
        now: UnixMillis,
    ) -> Result<Verified<T>> {
        match renewed_expiry {
            Some(expiry)
                if expiry > self.body.expiry() && now >= self.body.start() && now < expiry =>
            {
                self.check_signature(key)
            }
            _ => self.verify(key, now),
        }
    }
}

impl<T: Untimed> Unverified<T> {
    /// Checks the signature of a token that has no validity window.
    pub fn verify_untimed(self, key: &VerifyingKey) -> Result<Verified<T>> {
        self.check_signature(key)
    }
}

/// Signs a body: the issuer's way to a [`Verified`] token.
pub fn sign<T: SignedBody>(body: T, key: &SigningKey) -> Verified<T> {
    let signed = encode_unauthenticated(&body);
    let signature = key.sign(&[SIGNATURE_CONTEXT, &signed].concat());
    let mut encoded = signed;
    encoded.extend_from_slice(&signature.0);
    Verified { body, encoded }
}

/// A decoded token whose MAC has not been checked.
#[derive(Debug, Clone)]
pub struct UnverifiedMac<T> {
    body: T,
    maced: Vec<u8>,
    tag: [u8; TAG_BYTES],
}

impl<T: MacedBody> UnverifiedMac<T> {
    /// Decodes a whole encoding.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        check_size(bytes.len(), T::KIND)?;
        let mut r = Reader::new(bytes, T::KIND.name());
        read_header(&mut r, T::KIND)?;
        let body = T::decode_body(&mut r)?;
        let maced_len = bytes.len() - r.remaining();
        let tag = r.array::<TAG_BYTES>()?;
        r.finish()?;
        let maced = bytes
            .get(..maced_len)
            .ok_or(ProtoError::Truncated {
                what: T::KIND.name(),
            })?
            .to_vec();
        Ok(Self { body, maced, tag })
    }

    /// The claimed fields, **not yet authenticated**: use only to pick the key.
    pub fn unverified_body(&self) -> &T {
        &self.body
    }

    /// The encoding this was decoded from (tag included).
    pub fn to_bytes(&self) -> Vec<u8> {
        [&self.maced[..], &self.tag].concat()
    }

    /// Checks the MAC in constant time.
    pub fn verify(self, key: &MacKey) -> Result<Verified<T>> {
        key.verify(&[MAC_CONTEXT, &self.maced], &self.tag)
            .map_err(|_| ProtoError::BadMac {
                token: T::KIND.name(),
            })?;
        let mut encoded = self.maced;
        encoded.extend_from_slice(&self.tag);
        Ok(Verified {
            body: self.body,
            encoded,
        })
    }
}

/// MACs a body: the sender's way to a [`Verified`] MACed token.
pub fn mac<T: MacedBody>(body: T, key: &MacKey) -> Verified<T> {
    let maced = encode_unauthenticated(&body);
    let tag = key.tag(&[MAC_CONTEXT, &maced]);
    let mut encoded = maced;
    encoded.extend_from_slice(&tag);
    Verified { body, encoded }
}

/// A token whose authenticator (and validity, where it has one) has been checked, or that
/// this party made itself. The only form the rest of the system acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified<T> {
    body: T,
    encoded: Vec<u8>,
}

impl<T> Verified<T> {
    /// The canonical encoding, authenticator included (what goes on the wire).
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }
    /// The verified fields.
    pub fn body(&self) -> &T {
        &self.body
    }
}

impl<T> std::ops::Deref for Verified<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.body
    }
}
