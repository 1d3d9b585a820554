//! SPEC M1: the login ticket ⟨ticket id, user id, client public keys, IV, start, expiry⟩,
//! signed by the MDS (paper 000 Fig. 2b).
//!
//! The ticket carries two client keys: the Ed25519 key the client signs with (M2 offers)
//! and an X25519 key others seal to (M10 delegated keys, H4 range keys).

use crate::codec::{Reader, Writer};
use crate::signed::{Body, Kind};
use crate::{ProtoError, Result, UnixMillis, UserId};
use maat_crypto::seal::SealingPublicKey;
use maat_crypto::sign::VerifyingKey;

/// Length of the IV a ticket carries (input to M2 session keys).
pub const TICKET_IV_BYTES: usize = 16;
/// Encoded length of a login ticket, signature included.
pub const LOGIN_TICKET_BYTES: usize = 2 + 8 + 8 + 32 + 32 + TICKET_IV_BYTES + 8 + 8 + 64;

/// The fields of a login ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginTicket {
    /// Unique id of this ticket.
    pub ticket_id: u64,
    /// The user the client acts for.
    pub user: UserId,
    /// The client's Ed25519 public key.
    pub client_signing_key: [u8; 32],
    /// The client's X25519 public key.
    pub client_sealing_key: SealingPublicKey,
    /// The IV from which client–OSD keys are derived (M2).
    pub iv: [u8; TICKET_IV_BYTES],
    /// Start of validity.
    pub start: UnixMillis,
    /// End of validity.
    pub expiry: UnixMillis,
}

impl LoginTicket {
    /// The client's signing key, counting into `counters_from`'s counters.
    pub fn client_verifying_key(&self, counters_from: &VerifyingKey) -> Result<VerifyingKey> {
        Ok(VerifyingKey::from_bytes(&self.client_signing_key)
            .map_err(|_| ProtoError::Malformed {
                what: "login ticket",
                reason: "invalid client public key",
            })?
            .with_counters(counters_from.counters().clone()))
    }
}

impl Body for LoginTicket {
    const KIND: Kind = Kind::LoginTicket;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.ticket_id)
            .u64(self.user.0)
            .bytes(&self.client_signing_key)
            .bytes(&self.client_sealing_key.0)
            .bytes(&self.iv)
            .u64(self.start.0)
            .u64(self.expiry.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            ticket_id: r.u64()?,
            user: UserId(r.u64()?),
            client_signing_key: r.array()?,
            client_sealing_key: SealingPublicKey(r.array()?),
            iv: r.array()?,
            start: UnixMillis(r.u64()?),
            expiry: UnixMillis(r.u64()?),
        })
    }
}

crate::signed::timed_by_fields!(LoginTicket);
impl crate::signed::SignedBody for LoginTicket {}
