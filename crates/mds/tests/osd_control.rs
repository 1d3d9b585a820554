//! Issue 41, "no OSD trusting another": every OSD holds the join key, so a check-in
//! MACed under it could come from any OSD in another's name. An OSD registered with
//! `RegisterOsdControl` checks in under its own control key (X25519 of its sealing key
//! with the MDS's): a rogue OSD holding the join key can no longer tell the MDS that
//! another OSD applied its list of copies that missed a change (clients would then
//! acknowledge a change that OSD may still serve stale), nor keep it looking up, nor
//! re-register it the old way to get the join key back. OSDs registered the old way keep
//! the join key.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{mds, MemStore, JOIN, T0};

use maat_crypto::mac::MacKey;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::Secret32;
use maat_mds::Mds;
use maat_proto::copies::{missed_mac, missed_request_mac};
use maat_proto::login::register_mac_parts;
use maat_proto::msg::{self, ErrorCode, MdsPlainRequest, MdsPlainResponse, WireError};
use maat_proto::revocation::revocations_request_mac;
use maat_proto::UnixMillis;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

const NOW: u64 = T0 + 60_000;

fn plain(mds: &Mds<&MemStore>, request: &MdsPlainRequest) -> Result<MdsPlainResponse, WireError> {
    let answer = mds.handle_plain(
        b"peer",
        &msg::encode(request).unwrap(),
        UnixMillis(NOW),
        &mut ChaCha20Rng::seed_from_u64(1),
    );
    msg::decode(&answer).unwrap()
}

fn registration(
    id: u64,
    address: &str,
    sealing: &SealingPublicKey,
    nonce: [u8; 16],
    mac: [u8; 32],
) -> msg::OsdRegistration {
    msg::OsdRegistration {
        entry: msg::OsdEntry {
            id,
            address: address.into(),
            sealing_key: sealing.0,
            weight: 1,
        },
        timestamp: NOW,
        nonce,
        mac,
    }
}

/// Registers OSD `id` with `sealing` (the new way with `control`), nonce `n`; the MDS's
/// sealing key when it gave one.
fn register(
    mds: &Mds<&MemStore>,
    id: u64,
    sealing: &SealingPublicKey,
    control: bool,
    n: u8,
) -> Option<[u8; 32]> {
    let join = MacKey::new(Secret32::from_bytes(JOIN));
    let nonce = [n; 16];
    let address = format!("10.0.0.{id}:7000");
    let parts = register_mac_parts(id, &address, &sealing.0, 1, NOW, &nonce);
    let mac = join.tag(&parts.iter().map(|p| p.as_slice()).collect::<Vec<_>>());
    let request = registration(id, &address, sealing, nonce, mac).into_request(control);
    match plain(mds, &request).unwrap() {
        MdsPlainResponse::RegisteredControl {
            mds_verifying_key,
            mds_sealing_key,
            mac,
        } => {
            assert!(control);
            assert_eq!(
                maat_proto::control::registered_control_mac(
                    &join,
                    &mds_verifying_key,
                    &mds_sealing_key,
                    &nonce
                ),
                mac
            );
            Some(mds_sealing_key)
        }
        MdsPlainResponse::Registered { .. } => {
            assert!(!control);
            None
        }
        other => panic!("{other:?}"),
    }
}

/// OSD `osd`'s request for its missed copies under `key`, claiming it applied `applied`.
fn missed(
    mds: &Mds<&MemStore>,
    osd: u64,
    key: &MacKey,
    applied: u64,
) -> Result<MdsPlainResponse, WireError> {
    let nonce = [osd as u8; 16];
    plain(
        mds,
        &MdsPlainRequest::MissedCopies {
            osd,
            nonce,
            applied,
            mac: missed_request_mac(key, osd, &nonce, applied),
        },
    )
}

fn revocations(
    mds: &Mds<&MemStore>,
    osd: u64,
    key: &MacKey,
) -> Result<MdsPlainResponse, WireError> {
    let nonce = [9; 16];
    plain(
        mds,
        &MdsPlainRequest::Revocations {
            osd,
            nonce,
            mac: revocations_request_mac(key, osd, &nonce),
        },
    )
}

#[test]
fn a_rogue_osd_with_the_join_key_cannot_check_in_as_another() {
    let store = MemStore::default();
    let mds = mds(&store);
    let join = MacKey::new(Secret32::from_bytes(JOIN));
    let victim = SealingSecretKey::from_bytes([0x22; 32]);
    let mds_sealing = register(&mds, 2, &victim.public_key(), true, 1).unwrap();
    let control = MacKey::new(
        maat_proto::control::control_key(&victim.agree(&SealingPublicKey(mds_sealing)).unwrap(), 2)
            .unwrap(),
    );

    // The victim checks in under its control key; the answer is MACed under it too.
    let MdsPlainResponse::MissedCopies { objects, next, mac } =
        missed(&mds, 2, &control, 0).unwrap()
    else {
        panic!("not a list")
    };
    assert_eq!(missed_mac(&control, 2, &[2; 16], next, &objects), mac);
    revocations(&mds, 2, &control).unwrap();

    // The rogue, with the join key, in the victim's name: both check-ins refused.
    let e = missed(&mds, 2, &join, u64::MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");
    let e = revocations(&mds, 2, &join).unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");
    // Nor with a key of its own agreed with the MDS (it has no victim secret).
    let rogue = SealingSecretKey::from_bytes([0x33; 32]);
    let rogue_key = MacKey::new(
        maat_proto::control::control_key(&rogue.agree(&SealingPublicKey(mds_sealing)).unwrap(), 2)
            .unwrap(),
    );
    let e = missed(&mds, 2, &rogue_key, u64::MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");

    // Registering the victim's id the old way (its public key is in the cluster map)
    // does not bring the join key back.
    assert_eq!(register(&mds, 2, &victim.public_key(), false, 2), None);
    let e = missed(&mds, 2, &join, u64::MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");
    // Nor can it take the id with a key of its own.
    let join_parts =
        register_mac_parts(2, "10.0.0.9:7000", &rogue.public_key().0, 1, NOW, &[3; 16]);
    let mac = join.tag(&join_parts.iter().map(|p| p.as_slice()).collect::<Vec<_>>());
    let taken = registration(2, "10.0.0.9:7000", &rogue.public_key(), [3; 16], mac);
    let e = plain(&mds, &taken.into_request(true)).unwrap_err();
    assert_eq!(e.code, ErrorCode::AlreadyExists, "{e}");
    // The victim still checks in.
    missed(&mds, 2, &control, next).unwrap();
}

#[test]
fn an_osd_registered_the_old_way_keeps_the_join_key() {
    let store = MemStore::default();
    let mds = mds(&store);
    let join = MacKey::new(Secret32::from_bytes(JOIN));
    let old = SealingSecretKey::from_bytes([0x44; 32]);
    assert_eq!(register(&mds, 3, &old.public_key(), false, 4), None);
    missed(&mds, 3, &join, 0).unwrap();
    revocations(&mds, 3, &join).unwrap();
    // An unregistered id too (the join key is all it can have).
    revocations(&mds, 9, &join).unwrap();
}
