//! SPEC M2: client–OSD session keys (paper 000 Fig. 2, messages 3 and 4).
//!
//! Offer (client → OSD), signed with the client's Ed25519 key named in its ticket:
//! ⟨ticket, osd id, secret sealed to the OSD's X25519 key, client nonce, timestamp⟩.
//! The ticket travels inside the offer so the OSD can check it (the paper leaves this
//! implicit). The key is
//! `K_CD = HKDF-SHA256(salt = ticket IV, ikm = secret, info = ["maat/m2/key/v1",
//! OSD public key, user id, client nonce])`, i.e. derived from the IV, the OSD's public key
//! and fresh randomness as M2 asks.
//! Confirmation (OSD → client), MACed under `K_CD`: ⟨session id, client nonce, OSD nonce,
//! timestamp⟩; it proves the OSD opened the sealed secret. The session id is the first 16
//! bytes of BLAKE3 of the offer's encoding.

use crate::codec::{Reader, Writer};
use crate::limits::{NONCE_BYTES, SESSION_ID_BYTES};
use crate::signed::{self, Body, Kind, Unverified, UnverifiedMac, Verified};
use crate::ticket::{LoginTicket, LOGIN_TICKET_BYTES};
use crate::{OsdId, ProtoError, Result, UnixMillis, UserId};
use maat_crypto::mac::MacKey;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey, SEAL_OVERHEAD_BYTES};
use maat_crypto::sign::{SigningKey, VerifyingKey};
use maat_crypto::{hash, kdf, CryptoRngCore, Secret32};

const OFFER_SEAL_CONTEXT: &[u8] = b"maat/m2/offer/v1";
const SESSION_KEY_INFO: &[u8] = b"maat/m2/key/v1";
/// Length of the sealed secret in an offer.
pub const SEALED_SECRET_BYTES: usize = 32 + SEAL_OVERHEAD_BYTES;

/// The fields of a session-key offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOffer {
    /// The client's login ticket, as encoded by the MDS.
    pub ticket: Vec<u8>,
    /// The OSD this offer is for.
    pub osd: OsdId,
    /// 32 random bytes sealed to the OSD's X25519 key.
    pub sealed_secret: [u8; SEALED_SECRET_BYTES],
    /// Client nonce, echoed in the confirmation.
    pub client_nonce: [u8; NONCE_BYTES],
    /// Client's time (checked against the OSD's replay window, SPEC T7).
    pub timestamp: UnixMillis,
}

impl Body for SessionOffer {
    const KIND: Kind = Kind::SessionOffer;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.ticket)
            .u64(self.osd.0)
            .bytes(&self.sealed_secret)
            .bytes(&self.client_nonce)
            .u64(self.timestamp.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let ticket = r.take(LOGIN_TICKET_BYTES)?.to_vec();
        Unverified::<LoginTicket>::decode(&ticket)?;
        Ok(Self {
            ticket,
            osd: OsdId(r.u64()?),
            sealed_secret: r.array()?,
            client_nonce: r.array()?,
            timestamp: UnixMillis(r.u64()?),
        })
    }
}

/// An established client–OSD session key.
#[derive(Debug, Clone)]
pub struct SessionKey {
    /// Identifies the session in requests.
    pub session_id: [u8; SESSION_ID_BYTES],
    /// The authenticated user.
    pub user: UserId,
    /// The OSD.
    pub osd: OsdId,
    /// The session ends with the ticket.
    pub expiry: UnixMillis,
    /// `K_CD`.
    pub key: Secret32,
}

impl SessionKey {
    /// `K_CD` as a MAC key.
    pub fn mac_key(&self) -> MacKey {
        MacKey::new(self.key.clone())
    }
}

fn derive_key(
    iv: &[u8],
    secret: &[u8],
    osd_public: &SealingPublicKey,
    user: UserId,
    nonce: &[u8],
) -> Result<Secret32> {
    Ok(kdf::hkdf_sha256(
        iv,
        secret,
        &[
            SESSION_KEY_INFO,
            &osd_public.0,
            &user.0.to_be_bytes(),
            nonce,
        ],
    )?)
}

fn session_id(offer: &[u8]) -> [u8; SESSION_ID_BYTES] {
    let digest = hash::blake3(&[offer]);
    let mut id = [0u8; SESSION_ID_BYTES];
    id.copy_from_slice(&digest[..SESSION_ID_BYTES]);
    id
}

/// Client side: builds and signs an offer for `osd`, returning it with the session key.
pub fn make_offer(
    ticket: &Verified<LoginTicket>,
    client_key: &SigningKey,
    osd: OsdId,
    osd_public: &SealingPublicKey,
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> Result<(Verified<SessionOffer>, SessionKey)> {
    let secret = Secret32::random(rng);
    let mut client_nonce = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut client_nonce);
    let aad = [ticket.encoded(), &osd.0.to_be_bytes()].concat();
    let sealed = osd_public.seal(OFFER_SEAL_CONTEXT, &aad, secret.expose(), rng)?;
    let sealed_secret: [u8; SEALED_SECRET_BYTES] =
        sealed.try_into().map_err(|_| ProtoError::Malformed {
            what: "session offer",
            reason: "sealed secret length",
        })?;
    let body = SessionOffer {
        ticket: ticket.encoded().to_vec(),
        osd,
        sealed_secret,
        client_nonce,
        timestamp: now,
    };
    let offer = signed::sign(body, client_key);
    let key = derive_key(
        &ticket.iv,
        secret.expose(),
        osd_public,
        ticket.user,
        &client_nonce,
    )?;
    let session = SessionKey {
        session_id: session_id(offer.encoded()),
        user: ticket.user,
        osd,
        expiry: ticket.expiry,
        key,
    };
    Ok((offer, session))
}

/// OSD side: checks the offer end to end and derives the session key.
///
/// Order: addressed to this OSD (cheap), the ticket's validity and MDS signature, the
/// client's signature with the key the ticket names, then the sealed secret.
pub fn accept_offer(
    offer: Unverified<SessionOffer>,
    mds_key: &VerifyingKey,
    osd: OsdId,
    osd_secret: &SealingSecretKey,
    now: UnixMillis,
) -> Result<(Verified<SessionOffer>, SessionKey)> {
    if offer.unverified_body().osd != osd {
        return Err(ProtoError::WrongRecipient {
            token: "session offer",
            reason: "offer is for another OSD",
        });
    }
    let ticket =
        Unverified::<LoginTicket>::decode(&offer.unverified_body().ticket)?.verify(mds_key, now)?;
    let client_key = ticket.client_verifying_key(mds_key)?;
    let offer = offer.verify_untimed(&client_key)?;
    let aad = [ticket.encoded(), &osd.0.to_be_bytes()].concat();
    let secret = osd_secret
        .open(OFFER_SEAL_CONTEXT, &aad, &offer.sealed_secret)
        .map_err(|_| ProtoError::DecryptionFailed {
            token: "session offer",
        })?;
    let key = derive_key(
        &ticket.iv,
        &secret,
        &osd_secret.public_key(),
        ticket.user,
        &offer.client_nonce,
    )?;
    let session = SessionKey {
        session_id: session_id(offer.encoded()),
        user: ticket.user,
        osd,
        expiry: ticket.expiry,
        key,
    };
    Ok((offer, session))
}

/// The fields of a session confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfirm {
    /// The session confirmed.
    pub session_id: [u8; SESSION_ID_BYTES],
    /// Echo of the offer's nonce.
    pub client_nonce: [u8; NONCE_BYTES],
    /// Fresh OSD nonce.
    pub osd_nonce: [u8; NONCE_BYTES],
    /// OSD's time (lets the client keep a clock offset, SPEC T7).
    pub timestamp: UnixMillis,
}

impl Body for SessionConfirm {
    const KIND: Kind = Kind::SessionConfirm;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.session_id)
            .bytes(&self.client_nonce)
            .bytes(&self.osd_nonce)
            .u64(self.timestamp.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            session_id: r.array()?,
            client_nonce: r.array()?,
            osd_nonce: r.array()?,
            timestamp: UnixMillis(r.u64()?),
        })
    }
}

/// OSD side: the confirmation for an accepted offer.
pub fn confirm(
    offer: &Verified<SessionOffer>,
    session: &SessionKey,
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> Verified<SessionConfirm> {
    let mut osd_nonce = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut osd_nonce);
    let body = SessionConfirm {
        session_id: session.session_id,
        client_nonce: offer.client_nonce,
        osd_nonce,
        timestamp: now,
    };
    signed::mac(body, &session.mac_key())
}

/// Client side: checks the confirmation's MAC and that it answers this offer.
pub fn check_confirm(
    confirmation: UnverifiedMac<SessionConfirm>,
    offer: &Verified<SessionOffer>,
    session: &SessionKey,
) -> Result<Verified<SessionConfirm>> {
    let confirmation = confirmation.verify(&session.mac_key())?;
    if confirmation.session_id != session.session_id
        || confirmation.client_nonce != offer.client_nonce
    {
        return Err(ProtoError::WrongRecipient {
            token: "session confirmation",
            reason: "answers another offer",
        });
    }
    Ok(confirmation)
}
impl crate::signed::SignedBody for SessionOffer {}
impl crate::signed::Untimed for SessionOffer {}
impl crate::signed::MacedBody for SessionConfirm {}
