//! Issue 41, "no OSD trusting another": the key an OSD checks in with. Every OSD holds
//! the cluster's join key (it registers with it), so check-ins MACed under it (the
//! revocation catch-up that is also its liveness, and the list of its copies that missed
//! a change) could come from any OSD in another's name: one compromised OSD could make
//! the MDS believe that another knows its records (a client would then acknowledge a
//! change while that OSD may still serve the copy that missed it) or keep a dead one
//! looking up. An OSD that registers with `RegisterOsdControl` instead checks in under
//! its own control key, agreed by X25519 between its sealing key and the MDS's:
//!
//! `control = HKDF-SHA256(salt = "maat/osd-control/v1", ikm = X25519(osd, mds), info =
//! [osd id (8, BE)])`
//!
//! Only that OSD and the MDS can compute it; the MDS refuses the join key on that id's
//! check-ins from then on.

use crate::error::ProtoError;
use maat_crypto::mac::MacKey;
use maat_crypto::Secret32;

/// HKDF salt of [`control_key`].
const CONTROL_SALT: &[u8] = b"maat/osd-control/v1";
/// Domain separation of [`registered_control_mac`].
const REGISTERED_CONTEXT: &[u8] = b"maat/osd-registered-control/v1\0";

/// OSD `osd`'s control key from the X25519 agreement `shared` of its sealing key with
/// the MDS's.
pub fn control_key(shared: &[u8; 32], osd: u64) -> Result<Secret32, ProtoError> {
    maat_crypto::kdf::hkdf_sha256(CONTROL_SALT, shared, &[&osd.to_be_bytes()])
        .map_err(ProtoError::from)
}

/// The MAC under the join key on `RegisteredControl`: `HMAC(join, context ‖ verifying
/// key ‖ sealing key ‖ nonce)`.
pub fn registered_control_mac(
    join: &MacKey,
    verifying_key: &[u8; 32],
    sealing_key: &[u8; 32],
    nonce: &[u8; 16],
) -> [u8; 32] {
    join.tag(&[REGISTERED_CONTEXT, verifying_key, sealing_key, nonce])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use maat_crypto::seal::SealingSecretKey;

    /// Both ends agree on the key; it differs per OSD id and per OSD key, and a third
    /// key pair (another OSD's) does not reach it.
    #[test]
    fn the_osd_and_the_mds_agree_and_no_one_else_does() {
        let mds = SealingSecretKey::from_bytes([1; 32]);
        let osd = SealingSecretKey::from_bytes([2; 32]);
        let other = SealingSecretKey::from_bytes([3; 32]);
        let at_osd = control_key(&osd.agree(&mds.public_key()).unwrap(), 7).unwrap();
        let at_mds = control_key(&mds.agree(&osd.public_key()).unwrap(), 7).unwrap();
        assert_eq!(at_osd.expose(), at_mds.expose());
        let another_id = control_key(&mds.agree(&osd.public_key()).unwrap(), 8).unwrap();
        assert_ne!(at_mds.expose(), another_id.expose());
        let rogue = control_key(&other.agree(&mds.public_key()).unwrap(), 7).unwrap();
        assert_ne!(at_mds.expose(), rogue.expose());
    }
}
