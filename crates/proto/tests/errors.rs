//! Each refusal has its own typed error: wrong key, wrong domain, expired, not yet valid,
//! wrong recipient, confused deputy (valid token, wrong user / file / object).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::*;
use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::SigningKey;
use maat_crypto::Secret32;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::delegation;
use maat_proto::horus::{GrantKey, KdsLockboxKey, Lockbox, RangeGrant};
use maat_proto::merkle_msg::{MerkleTreeMessage, SetKind};
use maat_proto::renewal::RenewalToken;
use maat_proto::session::{self, SessionConfirm};
use maat_proto::signed::{self, Kind, Unverified, UnverifiedMac};
use maat_proto::t10::{
    self, NewKey, Permissions, SetKey, SetKeyTarget, SetMasterKeyAccept, T10Access,
};
use maat_proto::ticket::LoginTicket;
use maat_proto::{CapabilityId, FileId, OsdId, ProtoError, UnixMillis, UserId};

fn fixture(name: &str) -> Vec<u8> {
    fixtures()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap()
        .bytes
}

fn other_key() -> maat_crypto::sign::VerifyingKey {
    SigningKey::from_seed(&[0xee; 32]).verifying_key()
}

#[test]
fn signed_tokens_give_typed_errors() {
    let ticket = fixture("login_ticket");
    let decode = || Unverified::<LoginTicket>::decode(&ticket).unwrap();
    assert!(matches!(
        decode().verify(&other_key(), NOW),
        Err(ProtoError::BadSignature { .. })
    ));
    assert!(matches!(
        decode().verify(&mds_key(), T1),
        Err(ProtoError::Expired { .. })
    ));
    assert!(matches!(
        decode().verify(&mds_key(), UnixMillis(T0.0 - 1)),
        Err(ProtoError::NotYetValid { .. })
    ));
    decode().verify(&mds_key(), T0).unwrap();
    // A ticket offered where a capability belongs (and the reverse) is refused by domain.
    assert!(matches!(
        Unverified::<Capability>::decode(&ticket),
        Err(ProtoError::WrongDomain {
            expected: Kind::Capability,
            found: 0x01
        })
    ));
    let cap = fixture("capability_explicit");
    assert!(matches!(
        Unverified::<RenewalToken>::decode(&cap),
        Err(ProtoError::WrongDomain { .. })
    ));
    let mut future = ticket.clone();
    future[0] = 2;
    assert_eq!(
        Unverified::<LoginTicket>::decode(&future).unwrap_err(),
        ProtoError::UnsupportedVersion { found: 2 }
    );
}

#[test]
fn overlong_validity_is_refused_even_when_signed() {
    let k = keys();
    let mut body = capability(Principals::User(USER), Files::File(FILE));
    body.expiry = UnixMillis(T0.0 + 48 * 3600 * 1000);
    let token = signed::sign(body, &k.mds);
    let err = Unverified::<Capability>::decode(token.encoded())
        .unwrap()
        .verify(&mds_key(), NOW)
        .unwrap_err();
    assert!(matches!(err, ProtoError::Malformed { .. }));
}

#[test]
fn capability_names_user_and_file_confused_deputy_refused() {
    let cap = Unverified::<Capability>::decode(&fixture("capability_explicit"))
        .unwrap()
        .verify(&mds_key(), NOW)
        .unwrap();
    cap.check_user(USER, None).unwrap();
    cap.check_file(FILE, None).unwrap();
    assert!(matches!(
        cap.check_user(UserId(1002), None),
        Err(ProtoError::PermissionDenied { .. })
    ));
    assert!(matches!(
        cap.check_file(FileId(43), None),
        Err(ProtoError::PermissionDenied { .. })
    ));
    let read_only = Capability {
        mode: Mode::READ,
        ..(*cap).clone()
    };
    assert!(matches!(
        read_only.check_mode(Mode::WRITE),
        Err(ProtoError::PermissionDenied { .. })
    ));
}

#[test]
fn a_range_capability_covers_its_ids_alone_and_malformed_ranges_do_not_decode() {
    let k = keys();
    let range = Files::Range {
        first: FileId(1_000),
        count: 64,
    };
    let token = signed::sign(capability(Principals::User(USER), range), &k.mds);
    let cap = Unverified::<Capability>::decode(token.encoded())
        .unwrap()
        .verify(&mds_key(), NOW)
        .unwrap();
    cap.check_file(FileId(1_000), None).unwrap();
    cap.check_file(FileId(1_063), None).unwrap();
    for outside in [0, 999, 1_064, u64::MAX] {
        assert!(matches!(
            cap.check_file(FileId(outside), None),
            Err(ProtoError::PermissionDenied { .. })
        ));
    }
    // The files field: tag 3, first id, count, 16 zero bytes. A count of zero, one
    // past the last id, and non-zero padding are refused before any signature check.
    let at = 1 + 1 + 1 + 32; // version, kind, users tag and field
    let field = "03 00000000000003e8 0000000000000040 00000000000000000000000000000000";
    assert_eq!(
        token.encoded()[at..at + 33]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        field.replace(' ', "")
    );
    let bad = |edit: &dyn Fn(&mut [u8])| {
        let mut bytes = token.encoded().to_vec();
        edit(&mut bytes[at + 1..at + 33]);
        Unverified::<Capability>::decode(&bytes).unwrap_err()
    };
    for e in [
        bad(&|f| f[8..16].copy_from_slice(&0u64.to_be_bytes())),
        bad(&|f| f[0..8].copy_from_slice(&u64::MAX.to_be_bytes())),
        bad(&|f| f[8..16].copy_from_slice(&(1u64 << 32).to_be_bytes())),
        bad(&|f| f[31] = 1),
    ] {
        assert!(matches!(e, ProtoError::Malformed { .. }), "{e:?}");
    }
}

#[test]
fn merkle_capability_needs_the_matching_tree() {
    let cap = Unverified::<Capability>::decode(&fixture("capability_merkle"))
        .unwrap()
        .verify(&mds_key(), NOW)
        .unwrap();
    let Principals::UserTree(root) = cap.users else {
        panic!("fixture uses a user tree")
    };
    assert!(matches!(
        cap.check_user(USER, None),
        Err(ProtoError::UnknownKey { .. })
    ));
    let members = user_tree().verify(SetKind::Users, &root).unwrap();
    cap.check_user(USER, Some(&members)).unwrap();
    cap.check_user(UserId(2000), Some(&members)).unwrap();
    assert!(matches!(
        cap.check_user(UserId(9), Some(&members)),
        Err(ProtoError::PermissionDenied { .. })
    ));
    // A different tree (one member more) does not match the root.
    let other = MerkleTreeMessage::new(SetKind::Users, vec![vec![9, 1001, 1002, 1003], vec![2000]])
        .unwrap();
    assert_eq!(
        other.verify(SetKind::Users, &root).unwrap_err(),
        ProtoError::CommitmentMismatch {
            what: "Merkle tree"
        }
    );
    // The same ids as a file tree never verify as the user tree.
    let as_files =
        MerkleTreeMessage::new(SetKind::Files, vec![vec![1001, 1002, 1003], vec![2000]]).unwrap();
    assert!(as_files.clone().verify(SetKind::Users, &root).is_err());
    assert!(as_files.verify(SetKind::Files, &root).is_err());
    // A user set is never accepted where the file set is checked.
    assert!(matches!(
        cap.check_file(FILE, Some(&members)),
        Err(ProtoError::CommitmentMismatch { .. })
    ));
}

#[test]
fn session_offer_refusals() {
    let k = keys();
    let offer = fixture("session_offer");
    let decode = || Unverified::decode(&offer).unwrap();
    let err = session::accept_offer(decode(), &mds_key(), OsdId(4), &k.osd_seal, NOW).unwrap_err();
    assert!(matches!(err, ProtoError::WrongRecipient { .. }));
    let err = session::accept_offer(decode(), &other_key(), OSD, &k.osd_seal, NOW).unwrap_err();
    assert!(matches!(
        err,
        ProtoError::BadSignature {
            token: "login ticket"
        }
    ));
    let err = session::accept_offer(
        decode(),
        &mds_key(),
        OSD,
        &SealingSecretKey::from_bytes([0x77; 32]),
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, ProtoError::DecryptionFailed { .. }));
    let err = session::accept_offer(decode(), &mds_key(), OSD, &k.osd_seal, T1).unwrap_err();
    assert!(matches!(
        err,
        ProtoError::Expired {
            token: "login ticket",
            ..
        }
    ));
    // An offer signed by someone other than the ticket's client is refused.
    let ticket = ticket(k);
    let mallory = SigningKey::from_seed(&[0x66; 32]);
    let (forged, _) = session::make_offer(
        &ticket,
        &mallory,
        OSD,
        &k.osd_seal.public_key(),
        NOW,
        &mut rng(),
    )
    .unwrap();
    let err = session::accept_offer(
        Unverified::decode(forged.encoded()).unwrap(),
        &mds_key(),
        OSD,
        &k.osd_seal,
        NOW,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ProtoError::BadSignature {
            token: "session offer"
        }
    );
}

#[test]
fn both_sides_derive_the_same_session_key_and_confirm() {
    let k = keys();
    let (offer, client_side) = session(k);
    let (accepted, osd_side) = session::accept_offer(
        Unverified::decode(offer.encoded()).unwrap(),
        &mds_key(),
        OSD,
        &k.osd_seal,
        NOW,
    )
    .unwrap();
    assert_eq!(client_side.key, osd_side.key);
    assert_eq!(client_side.session_id, osd_side.session_id);
    assert_eq!(osd_side.user, USER);
    let confirmation = session::confirm(&accepted, &osd_side, NOW, &mut rng());
    session::check_confirm(
        UnverifiedMac::decode(confirmation.encoded()).unwrap(),
        &offer,
        &client_side,
    )
    .unwrap();
    // A confirmation for another offer (other session) is refused.
    let (offer_b, session_b) = session::make_offer(
        &ticket(k),
        &k.client,
        OSD,
        &k.osd_seal.public_key(),
        NOW,
        &mut maat_crypto::OsRng,
    )
    .unwrap();
    let err = session::check_confirm(
        UnverifiedMac::<SessionConfirm>::decode(confirmation.encoded()).unwrap(),
        &offer_b,
        &session_b,
    )
    .unwrap_err();
    assert!(matches!(err, ProtoError::BadMac { .. }));
}

#[test]
fn delegation_proof_is_bound_to_session_and_key() {
    let k = keys();
    let (_, sess) = session(k);
    let proof = delegation::make_proof(&k.computation, &sess, &mut rng()).unwrap();
    delegation::open_proof(&proof, &sess, &lifetime(k), &mds_key(), NOW).unwrap();
    // A cached lifetime token stops admitting proofs once it expires.
    assert!(matches!(
        delegation::open_proof(&proof, &sess, &lifetime(k), &mds_key(), T1),
        Err(ProtoError::Expired { .. })
    ));
    // Replayed into another session: cannot even be decrypted.
    let (_, other_session) = session::make_offer(
        &ticket(k),
        &k.client,
        OSD,
        &k.osd_seal.public_key(),
        NOW,
        &mut maat_crypto::OsRng,
    )
    .unwrap();
    assert!(matches!(
        delegation::open_proof(&proof, &other_session, &lifetime(k), &mds_key(), NOW),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // Made with another key than the lifetime token names.
    let stranger = SigningKey::from_seed(&[0x55; 32]);
    let forged = delegation::make_proof(&stranger, &sess, &mut rng()).unwrap();
    assert!(matches!(
        delegation::open_proof(&forged, &sess, &lifetime(k), &mds_key(), NOW),
        Err(ProtoError::CommitmentMismatch { .. })
    ));
    // A file handle whose capability is bound to another key is refused.
    let cap = signed::sign(
        capability(
            Principals::ComputationKey(delegation::computation_key_hash(
                &stranger.verifying_key().to_bytes(),
            )),
            Files::File(FILE),
        ),
        &k.mds,
    );
    let handle = delegation::FileHandle {
        handle_id: 1,
        file: FILE,
        path: b"/x".to_vec(),
        mode: Mode::READ,
        flags: 0,
        capability: cap.encoded().to_vec(),
        computation_key: k.computation.verifying_key().to_bytes(),
        start: T0,
        expiry: T1,
    };
    let handle = signed::sign(handle, &k.mds);
    let err = delegation::verify_file_handle(
        Unverified::decode(handle.encoded()).unwrap(),
        &mds_key(),
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, ProtoError::CommitmentMismatch { .. }));
}

#[test]
fn t10_request_refusals() {
    let k = keys();
    let wk = working_keys(k);
    let cred = t10::issue_credential(&t10_capability(), wk.get(2).unwrap());
    let icv = t10_icv(&cred, T10_REQUEST);
    let check = |access: T10Access, now, request: &[u8]| {
        t10_verify(&cred.capability, request, &icv, &wk, access, now)
    };
    check(t10_access(), NOW, T10_REQUEST).unwrap();
    assert!(matches!(
        check(t10_access(), T1, T10_REQUEST),
        Err(ProtoError::Expired { .. })
    ));
    assert!(matches!(
        check(t10_access(), NOW, b"WRITE"),
        Err(ProtoError::BadMac { .. })
    ));
    assert!(matches!(
        check(
            T10Access {
                object_id: 65537,
                ..t10_access()
            },
            NOW,
            T10_REQUEST
        ),
        Err(ProtoError::WrongRecipient { .. })
    ));
    assert!(matches!(
        check(
            T10Access {
                policy_access_tag: Some(2),
                ..t10_access()
            },
            NOW,
            T10_REQUEST
        ),
        Err(ProtoError::Revoked { .. })
    ));
    assert!(matches!(
        check(
            T10Access {
                needed: Permissions::WRITE,
                ..t10_access()
            },
            NOW,
            T10_REQUEST
        ),
        Err(ProtoError::PermissionDenied { .. })
    ));
    // After the working key in slot 2 is replaced (SET KEY), the old credential fails.
    let mut rotated = wk.clone();
    rotated
        .set(2, MacKey::new(Secret32::from_bytes([0x99; 32])))
        .unwrap();
    assert!(matches!(
        t10_verify(
            &cred.capability,
            T10_REQUEST,
            &icv,
            &rotated,
            t10_access(),
            NOW
        ),
        Err(ProtoError::BadMac { .. })
    ));
    // A slot never set is an unknown key.
    let empty = t10::WorkingKeys::default();
    assert!(matches!(
        t10_verify(
            &cred.capability,
            T10_REQUEST,
            &icv,
            &empty,
            t10_access(),
            NOW
        ),
        Err(ProtoError::UnknownKey { .. })
    ));
}

#[test]
fn set_key_and_set_master_key_agree_on_both_sides() {
    let k = keys();
    let partition = partition_pair(k);
    let msg = signed::mac(
        SetKey {
            target: SetKeyTarget::Working {
                partition: 7,
                key_version: 3,
            },
            seed: [1; 32],
            timestamp: NOW,
            nonce: [2; 16],
        },
        &partition.authentication_mac(),
    );
    let received = UnverifiedMac::<SetKey>::decode(msg.encoded())
        .unwrap()
        .verify(&partition.authentication_mac())
        .unwrap();
    let NewKey::Working(osd_key) = t10::apply_set_key(&received, &partition).unwrap() else {
        panic!("working key expected")
    };
    assert_eq!(osd_key, partition.derive_working(7, 3, &[1; 32]).unwrap());
    // A SET KEY MACed with the wrong level's key is refused.
    assert!(matches!(
        UnverifiedMac::<SetKey>::decode(msg.encoded())
            .unwrap()
            .verify(&k.master.authentication_mac()),
        Err(ProtoError::BadMac { .. })
    ));
    // SET MASTER KEY: both sides derive the same fresh pair, different from the old one.
    let offer = master_offer(k);
    let accept = master_accept(k);
    let at_mds = t10::new_master_key(&offer, &accept, &k.mds_ephemeral).unwrap();
    let at_osd = t10::new_master_key(&offer, &accept, &k.osd_ephemeral).unwrap();
    assert_eq!(at_mds, at_osd);
    assert_ne!(at_mds, k.master);
    // An accept echoing another nonce is refused.
    let stale = signed::mac(
        SetMasterKeyAccept {
            osd_public: k.osd_ephemeral.public_key(),
            offer_nonce: [0; 16],
            timestamp: NOW,
        },
        &k.master.authentication_mac(),
    );
    assert!(matches!(
        t10::new_master_key(&offer, &stale, &k.mds_ephemeral),
        Err(ProtoError::WrongRecipient { .. })
    ));
}

#[test]
fn lockbox_and_grant_refusals() {
    let k = keys();
    let lb = lockbox(k);
    assert!(matches!(
        lb.open_as_kds(&k.client_seal),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    assert!(matches!(
        lb.open_as_owner(&k.kds_seal),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // The MDS cannot move a lockbox to another file: the file id is authenticated.
    let mut moved = lb.encode();
    moved[2..10].copy_from_slice(&43u64.to_be_bytes());
    assert!(matches!(
        Lockbox::decode(&moved).unwrap().open_as_kds(&k.kds_seal),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // Keyed lockboxes: only the KDS (under the owner's key) and the owner open them; the
    // owner key named inside is authenticated; neither kind opens as the other.
    let keyed = lockbox_keyed(k);
    let owner = k.client_seal.public_key();
    let kds_key = KdsLockboxKey::new(&k.kds_seal, &owner).unwrap();
    let root = keyed.open_keyed_as_kds(&kds_key).unwrap().root_key;
    assert_eq!(keyed.open_as_owner(&k.client_seal).unwrap().root_key, root);
    assert_eq!(lb.open_as_kds(&k.kds_seal).unwrap().root_key, root);
    let stranger = KdsLockboxKey::new(&k.kds_seal, &k.osd_seal.public_key()).unwrap();
    let other_kds = KdsLockboxKey::new(&k.osd_seal, &owner).unwrap();
    for key in [&stranger, &other_kds] {
        assert!(matches!(
            keyed.open_keyed_as_kds(key),
            Err(ProtoError::DecryptionFailed { .. })
        ));
    }
    assert!(matches!(
        keyed.open_as_owner(&k.osd_seal),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    assert!(matches!(
        keyed.open_as_kds(&k.kds_seal),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    assert!(matches!(
        lb.open_keyed_as_kds(&kds_key),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // Another owner key put in (so that a KDS derives another key), another file: refused.
    let encoded = keyed.encode();
    let at = encoded.len() - 2 * maat_proto::horus::KEYED_LOCKBOX_BOX_BYTES - 32;
    let mut swapped = encoded.clone();
    swapped[at..at + 32].copy_from_slice(&k.osd_seal.public_key().0);
    let swapped = Lockbox::decode(&swapped).unwrap();
    assert!(matches!(
        swapped.open_keyed_as_kds(&stranger),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    let mut moved = encoded;
    moved[2..10].copy_from_slice(&43u64.to_be_bytes());
    assert!(matches!(
        Lockbox::decode(&moved).unwrap().open_keyed_as_kds(&kds_key),
        Err(ProtoError::DecryptionFailed { .. })
    ));

    let grant = RangeGrant::decode(&fixture("range_key_grant")).unwrap();
    let kds = k.kds.verifying_key();
    assert!(matches!(
        grant.open(&k.client_seal, &kds, T1),
        Err(ProtoError::Expired { .. })
    ));
    assert!(matches!(
        grant.open(&k.kds_seal, &kds, NOW),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // Anyone can seal to the client's public key; only the KDS's signature makes a grant.
    let opened_lb = lb.open_as_kds(&k.kds_seal).unwrap();
    let attacker_keys = vec![maat_crypto::kht::RangeKey {
        node: opened_lb.shape.node_at(0, 0).unwrap(),
        key: Secret32::from_bytes([0x66; 32]),
    }];
    let mallory = SigningKey::from_seed(&[0x66; 32]);
    let forged = RangeGrant::issue(
        &opened_lb,
        T1,
        &attacker_keys,
        &k.client_seal.public_key(),
        &mallory,
        &mut rng(),
    )
    .unwrap();
    let forged = RangeGrant::decode(&forged.encode()).unwrap();
    assert_eq!(
        forged.open(&k.client_seal, &kds, NOW).unwrap_err(),
        ProtoError::BadSignature {
            token: "range-key grant"
        }
    );
    // Nodes out of order (or overlapping) are not canonical.
    let leaf = opened_lb.shape.leaf_level();
    let reversed: Vec<_> = [5u64, 4]
        .iter()
        .map(|i| maat_crypto::kht::RangeKey {
            node: maat_crypto::kht::Node {
                level: leaf,
                index: *i,
            },
            key: Secret32::from_bytes([1; 32]),
        })
        .collect();
    assert!(matches!(
        RangeGrant::issue(
            &opened_lb,
            T1,
            &reversed,
            &k.client_seal.public_key(),
            &k.kds,
            &mut rng()
        ),
        Err(ProtoError::Malformed { .. })
    ));
    // The granted keys derive the right leaf keys and nothing outside the range.
    let opened = grant.open(&k.client_seal, &kds, NOW).unwrap();
    let root = lb.open_as_owner(&k.client_seal).unwrap();
    for offset in (4096..5 * 4096).step_by(4096) {
        let rk = opened.keys.iter().find(|rk| {
            let (a, b) = opened.shape.bytes_under(rk.node).unwrap();
            (a..b).contains(&offset)
        });
        let rk = rk.unwrap();
        let leaf = opened
            .shape
            .node_at(opened.shape.leaf_level(), offset)
            .unwrap();
        assert_eq!(
            opened.shape.leaf_key_for_offset(rk, offset).unwrap(),
            root.shape.node_key_from_root(&root.root_key, leaf).unwrap()
        );
    }
    assert!(opened
        .keys
        .iter()
        .all(|rk| opened.shape.leaf_key_for_offset(rk, 0).is_err()));
    assert!(opened
        .keys
        .iter()
        .all(|rk| opened.shape.leaf_key_for_offset(rk, 5 * 4096).is_err()));
}

#[test]
fn keyed_grants_open_only_under_the_key_the_kds_and_the_login_share() {
    let k = keys();
    let grant = RangeGrant::decode(&fixture("range_key_grant_keyed")).unwrap();
    let shared = GrantKey::for_client(&k.client_seal, &k.kds_seal.public_key()).unwrap();
    let opened = grant.open_keyed(&shared, NOW).unwrap();
    // The same keys as the signed grant of the same nodes.
    let signed = RangeGrant::decode(&fixture("range_key_grant"))
        .unwrap()
        .open(&k.client_seal, &k.kds.verifying_key(), NOW)
        .unwrap();
    assert_eq!(opened, signed);
    assert!(matches!(
        grant.open_keyed(&shared, T1),
        Err(ProtoError::Expired { .. })
    ));
    // Another login (or anyone who knows only the public keys) cannot open it, and a
    // grant made under another KDS key does not open for this login: only the KDS and
    // the ticket's holder can make a keyed grant that opens.
    let other_login = SealingSecretKey::from_bytes([0x44; 32]);
    let theirs = GrantKey::for_client(&other_login, &k.kds_seal.public_key()).unwrap();
    assert!(matches!(
        grant.open_keyed(&theirs, NOW),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    let mallory = SealingSecretKey::from_bytes([0x66; 32]);
    let forged_key = GrantKey::for_kds(&mallory, &k.client_seal.public_key()).unwrap();
    let lb = lockbox(k).open_as_kds(&k.kds_seal).unwrap();
    let attacker_keys = vec![maat_crypto::kht::RangeKey {
        node: lb.shape.node_at(0, 0).unwrap(),
        key: Secret32::from_bytes([0x66; 32]),
    }];
    let forged = RangeGrant::issue_keyed(&lb, T1, &attacker_keys, &forged_key, &mut rng()).unwrap();
    let forged = RangeGrant::decode(&forged.encode()).unwrap();
    assert!(matches!(
        forged.open_keyed(&shared, NOW),
        Err(ProtoError::DecryptionFailed { .. })
    ));
    // A signed grant is not taken as keyed, nor a keyed one as signed.
    let signed = RangeGrant::decode(&fixture("range_key_grant")).unwrap();
    assert!(matches!(
        signed.open_keyed(&shared, NOW),
        Err(ProtoError::Malformed { .. })
    ));
    assert!(matches!(
        grant.open(&k.client_seal, &k.kds.verifying_key(), NOW),
        Err(ProtoError::Malformed { .. })
    ));
}

#[test]
fn renewal_extends_a_capability_only_when_it_applies() {
    let cap = fixture("capability_explicit");
    let decode = || Unverified::<Capability>::decode(&cap).unwrap();
    let later = UnixMillis(T1.0 + 60_000);
    // Past its own expiry, a capability verifies when a renewal extends it to `later`.
    decode()
        .verify_with_expiry(&mds_key(), Some(UnixMillis(T1.0 + 240_000)), later)
        .unwrap();
    assert!(matches!(
        decode().verify_with_expiry(&mds_key(), None, later),
        Err(ProtoError::Expired { .. })
    ));
    // A renewal that ended already, or a forged signature, does not help.
    assert!(matches!(
        decode().verify_with_expiry(&mds_key(), Some(later), later),
        Err(ProtoError::Expired { .. })
    ));
    assert!(matches!(
        decode().verify_with_expiry(&other_key(), Some(UnixMillis(T1.0 + 240_000)), later),
        Err(ProtoError::BadSignature { .. })
    ));
}

#[test]
fn renewal_token_names_capabilities() {
    let token = Unverified::<RenewalToken>::decode(&fixture("renewal_token"))
        .unwrap()
        .verify(&mds_key(), NOW)
        .unwrap();
    assert!(token.renews(CapabilityId(9002)));
    assert!(!token.renews(CapabilityId(9003)));
}
