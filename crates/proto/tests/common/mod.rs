//! Deterministic instances of every token: fixed key seeds, fixed times, a seeded RNG.
//! The same fixtures produce the committed vectors (test-vectors/tokens.txt, docs/PROTOCOL.md)
//! and drive the tamper tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_crypto::kht::{KeyedHashAlg, KhtShape};
use maat_crypto::mac::MacKey;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::sign::{SigningKey, VerifyingKey};
use maat_crypto::Secret32;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::delegation::{self, computation_key_hash, FileHandle, KeyLifetimeToken};
use maat_proto::horus::{GrantKey, KdsLockboxKey, Lockbox, LockboxKeys, RangeGrant};
use maat_proto::key_ranges::KeyRanges;
use maat_proto::merkle_msg::{self, MerkleTreeMessage, SetKind};
use maat_proto::renewal::RenewalToken;
use maat_proto::revocation::RevocationNotice;
use maat_proto::session::{self, SessionConfirm, SessionKey, SessionOffer};
use maat_proto::signed::{self, Unverified, UnverifiedMac, Verified};
use maat_proto::t10::{
    self, KeyPair, Permissions, SecurityMethod, SetKey, SetKeyTarget, SetMasterKeyAccept,
    SetMasterKeyOffer, SetPolicyTag, T10Access, T10Capability, WorkingKeys,
};
use maat_proto::ticket::LoginTicket;
use maat_proto::{CapabilityId, FileId, OsdId, ProtoError, UnixMillis, UserId};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// Start of every validity window in the fixtures: 2026-11-22T00:00:00Z.
pub const T0: UnixMillis = UnixMillis(1_795_305_600_000);
/// Expiry: five minutes later.
pub const T1: UnixMillis = UnixMillis(1_795_305_600_000 + 300_000);
/// A time inside every window.
pub const NOW: UnixMillis = UnixMillis(1_795_305_600_000 + 60_000);
pub const OSD: OsdId = OsdId(3);
pub const USER: UserId = UserId(1001);
pub const FILE: FileId = FileId(42);
/// A request's ICV under a credential: the T1 envelope MAC under keys derived from the
/// capability key (what the data path sends), over `request`.
pub fn t10_icv(credential: &t10::Credential, request: &[u8]) -> maat_crypto::mac::Tag {
    maat_proto::protection::EnvelopeKeys::new(credential.capability_key.expose())
        .mac
        .tag(&[request])
}

/// The OSD's checks of a T10 request: the capability decoded, its key recomputed from the
/// working key it names, the ICV checked under it, then validity and access.
pub fn t10_verify(
    capability: &[u8],
    request: &[u8],
    icv: &[u8],
    keys: &t10::WorkingKeys,
    access: t10::T10Access,
    now: UnixMillis,
) -> Result<t10::T10Capability, ProtoError> {
    let body = t10::decode_capability(capability)?;
    let working = keys.get(body.key_version).ok_or(ProtoError::UnknownKey {
        what: "working key version",
    })?;
    let ck = t10::capability_key(capability, working);
    maat_proto::protection::EnvelopeKeys::new(ck.expose())
        .mac
        .verify(&[request], icv)
        .map_err(|_| ProtoError::BadMac {
            token: "T10 request",
        })?;
    body.check_access(access, now)?;
    Ok(body)
}

pub const T10_REQUEST: &[u8] =
    b"READ partition=7 object=65536 offset=0 length=4096 ts=1795305660000 nonce=0001";

pub struct Keys {
    pub mds: SigningKey,
    pub client: SigningKey,
    pub client_seal: SealingSecretKey,
    pub osd_seal: SealingSecretKey,
    pub kds_seal: SealingSecretKey,
    pub computation: SigningKey,
    pub master: KeyPair,
    pub mds_ephemeral: SealingSecretKey,
    pub osd_ephemeral: SealingSecretKey,
    pub kds: SigningKey,
    pub mds_seal: SealingSecretKey,
}

/// The fixtures' keys, derived once: a check that derived them per call spent most of the
/// exhaustive tamper test's minute in key derivation rather than in the check under test.
pub fn keys() -> &'static Keys {
    static KEYS: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
    KEYS.get_or_init(derive_keys)
}

fn derive_keys() -> Keys {
    Keys {
        mds: SigningKey::from_seed(&[0x01; 32]),
        client: SigningKey::from_seed(&[0x02; 32]),
        client_seal: SealingSecretKey::from_bytes([0x03; 32]),
        osd_seal: SealingSecretKey::from_bytes([0x04; 32]),
        kds_seal: SealingSecretKey::from_bytes([0x05; 32]),
        computation: SigningKey::from_seed(&[0x06; 32]),
        master: KeyPair {
            authentication: Secret32::from_bytes([0x07; 32]),
            generation: Secret32::from_bytes([0x08; 32]),
        },
        mds_ephemeral: SealingSecretKey::from_bytes([0x09; 32]),
        osd_ephemeral: SealingSecretKey::from_bytes([0x0a; 32]),
        kds: SigningKey::from_seed(&[0x0b; 32]),
        mds_seal: SealingSecretKey::from_bytes([0x0d; 32]),
    }
}

pub fn rng() -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(0x6d61_6174)
}

pub fn ticket(k: &Keys) -> Verified<LoginTicket> {
    signed::sign(
        LoginTicket {
            ticket_id: 7,
            user: USER,
            client_signing_key: k.client.verifying_key().to_bytes(),
            client_sealing_key: k.client_seal.public_key(),
            iv: [0x11; 16],
            start: T0,
            expiry: T1,
        },
        &k.mds,
    )
}

pub fn capability(users: Principals, files: Files) -> Capability {
    Capability {
        users,
        files,
        id: CapabilityId(9001),
        mode: Mode::READ_WRITE,
        protection: maat_proto::protection::Protection::AllData,
        start: T0,
        expiry: T1,
    }
}

pub fn user_tree() -> MerkleTreeMessage {
    MerkleTreeMessage::new(SetKind::Users, vec![vec![1001, 1002, 1003], vec![2000]]).unwrap()
}

pub fn session(k: &Keys) -> (Verified<SessionOffer>, SessionKey) {
    session::make_offer(
        &ticket(k),
        &k.client,
        OSD,
        &k.osd_seal.public_key(),
        NOW,
        &mut rng(),
    )
    .unwrap()
}

pub fn lifetime(k: &Keys) -> Verified<KeyLifetimeToken> {
    signed::sign(
        KeyLifetimeToken {
            computation_key: k.computation.verifying_key().to_bytes(),
            lead: USER,
            start: T0,
            expiry: T1,
        },
        &k.mds,
    )
}

pub fn t10_capability() -> T10Capability {
    T10Capability {
        security_method: SecurityMethod::CmdRsp,
        key_version: 2,
        permissions: Permissions::READ.union(Permissions::GET_ATTR),
        partition_id: 7,
        object_id: 65536,
        policy_access_tag: 1,
        expiry: T1,
        discriminator: [0x0c; 12],
    }
}

pub fn partition_pair(k: &Keys) -> KeyPair {
    let root = k
        .master
        .derive_pair(t10::KeyLevel::Root, 0, &[0x21; 32])
        .unwrap();
    root.derive_pair(t10::KeyLevel::Partition, 7, &[0x22; 32])
        .unwrap()
}

pub fn working_keys(k: &Keys) -> WorkingKeys {
    let mut keys = WorkingKeys::default();
    let wk = partition_pair(k).derive_working(7, 2, &[0x23; 32]).unwrap();
    keys.set(2, MacKey::new(wk)).unwrap();
    keys
}

pub fn t10_access() -> T10Access {
    T10Access {
        object_id: 65536,
        policy_access_tag: Some(1),
        needed: Permissions::READ,
    }
}

pub fn shape() -> KhtShape {
    KhtShape::new(KeyedHashAlg::Blake3, 12, vec![2, 2, 2]).unwrap()
}

pub fn lockbox(k: &Keys) -> Lockbox {
    Lockbox::seal(
        FILE,
        1,
        shape(),
        &Secret32::from_bytes([0x31; 32]),
        &k.kds_seal.public_key(),
        &k.client_seal.public_key(),
        &mut rng(),
    )
    .unwrap()
}

/// The lockbox of [`lockbox`] keyed (kind 0x14): the client's sealing key as the owner's.
pub fn lockbox_keyed(k: &Keys) -> Lockbox {
    let keys = LockboxKeys::new(&k.client_seal, &k.kds_seal.public_key()).unwrap();
    Lockbox::seal_keyed(
        FILE,
        1,
        shape(),
        &Secret32::from_bytes([0x31; 32]),
        &keys,
        &mut rng(),
    )
    .unwrap()
}

pub fn master_offer(k: &Keys) -> Verified<SetMasterKeyOffer> {
    signed::mac(
        SetMasterKeyOffer {
            mds_public: k.mds_ephemeral.public_key(),
            timestamp: NOW,
            nonce: [0x41; 16],
        },
        &k.master.authentication_mac(),
    )
}

pub fn master_accept(k: &Keys) -> Verified<SetMasterKeyAccept> {
    signed::mac(
        SetMasterKeyAccept {
            osd_public: k.osd_ephemeral.public_key(),
            offer_nonce: [0x41; 16],
            timestamp: NOW,
        },
        &k.master.authentication_mac(),
    )
}

/// The full receiver-side check of one token's bytes.
pub type Check = Box<dyn Fn(&[u8]) -> Result<(), ProtoError>>;

/// A token fixture: its canonical bytes and the full receiver-side check.
pub struct Fixture {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub check: Check,
}

fn fx(
    name: &'static str,
    bytes: Vec<u8>,
    check: impl Fn(&[u8]) -> Result<(), ProtoError> + 'static,
) -> Fixture {
    Fixture {
        name,
        bytes,
        check: Box::new(check),
    }
}

pub fn fixtures() -> Vec<Fixture> {
    let k = keys();
    let mds_pk = || keys().mds.verifying_key();
    let mut out = Vec::new();

    out.push(fx("login_ticket", ticket(k).encoded().to_vec(), move |b| {
        Unverified::<LoginTicket>::decode(b)?
            .verify(&mds_pk(), NOW)
            .map(drop)
    }));

    let (offer, sess) = session(k);
    out.push(fx("session_offer", offer.encoded().to_vec(), move |b| {
        let k = keys();
        session::accept_offer(
            Unverified::decode(b)?,
            &k.mds.verifying_key(),
            OSD,
            &k.osd_seal,
            NOW,
        )
        .map(drop)
    }));

    let confirm = session::confirm(&offer, &sess, NOW, &mut rng());
    let (offer2, sess2) = (offer.clone(), sess.clone());
    out.push(fx(
        "session_confirm",
        confirm.encoded().to_vec(),
        move |b| {
            session::check_confirm(UnverifiedMac::<SessionConfirm>::decode(b)?, &offer2, &sess2)
                .map(drop)
        },
    ));

    let cap = signed::sign(
        capability(Principals::User(USER), Files::File(FILE)),
        &k.mds,
    );
    out.push(fx(
        "capability_explicit",
        cap.encoded().to_vec(),
        move |b| {
            Unverified::<Capability>::decode(b)?
                .verify(&mds_pk(), NOW)
                .map(drop)
        },
    ));

    let tree = user_tree();
    let root = tree.root().unwrap();
    let file_root = merkle_msg::subtree(SetKind::Files, &[42, 43])
        .unwrap()
        .root();
    let cap_tree = signed::sign(
        capability(Principals::UserTree(root), Files::FileTree(file_root)),
        &k.mds,
    );
    out.push(fx(
        "capability_merkle",
        cap_tree.encoded().to_vec(),
        move |b| {
            Unverified::<Capability>::decode(b)?
                .verify(&mds_pk(), NOW)
                .map(drop)
        },
    ));

    out.push(fx("merkle_tree_message", tree.encode(), move |b| {
        MerkleTreeMessage::decode(b)?
            .verify(SetKind::Users, &root)
            .map(drop)
    }));

    let renewal = RenewalToken::new(
        11,
        vec![CapabilityId(9001), CapabilityId(9002), CapabilityId(9100)],
        T0,
        T1,
    )
    .unwrap();
    out.push(fx(
        "renewal_token",
        signed::sign(renewal, &k.mds).encoded().to_vec(),
        move |b| {
            Unverified::<RenewalToken>::decode(b)?
                .verify(&mds_pk(), NOW)
                .map(drop)
        },
    ));

    let notice = RevocationNotice {
        notice_id: 12,
        start: T0,
        expiry: T1,
        capability_ids: vec![CapabilityId(9001)],
        users: vec![UserId(1002)],
        computation_keys: vec![computation_key_hash(
            &k.computation.verifying_key().to_bytes(),
        )],
    };
    out.push(fx(
        "revocation_notice",
        signed::sign(notice, &k.mds).encoded().to_vec(),
        move |b| {
            Unverified::<RevocationNotice>::decode(b)?
                .verify(&mds_pk(), NOW)
                .map(drop)
        },
    ));

    let comp_pk = k.computation.verifying_key().to_bytes();
    let bound_cap = signed::sign(
        capability(
            Principals::ComputationKey(computation_key_hash(&comp_pk)),
            Files::File(FILE),
        ),
        &k.mds,
    );
    let handle = FileHandle {
        handle_id: 13,
        file: FILE,
        path: b"/proj/run1/output.h5".to_vec(),
        mode: Mode::READ_WRITE,
        flags: 0,
        capability: bound_cap.encoded().to_vec(),
        computation_key: comp_pk,
        start: T0,
        expiry: T1,
    };
    out.push(fx(
        "file_handle",
        signed::sign(handle, &k.mds).encoded().to_vec(),
        move |b| delegation::verify_file_handle(Unverified::decode(b)?, &mds_pk(), NOW).map(drop),
    ));

    out.push(fx(
        "key_lifetime_token",
        lifetime(k).encoded().to_vec(),
        move |b| {
            Unverified::<KeyLifetimeToken>::decode(b)?
                .verify(&mds_pk(), NOW)
                .map(drop)
        },
    ));

    let proof = delegation::make_proof(&k.computation, &sess, &mut rng()).unwrap();
    let sess3 = sess.clone();
    out.push(fx("proof_token_sealed", proof, move |b| {
        let k = keys();
        delegation::open_proof(b, &sess3, &lifetime(k), &k.mds.verifying_key(), NOW).map(drop)
    }));

    let wk = working_keys(k);
    let credential = t10::issue_credential(&t10_capability(), wk.get(2).unwrap());
    let icv = t10_icv(&credential, T10_REQUEST);
    let wk2 = wk.clone();
    out.push(fx(
        "t10_capability",
        credential.capability.clone(),
        move |b| t10_verify(b, T10_REQUEST, &icv, &wk2, t10_access(), NOW).map(drop),
    ));
    let cap_bytes = credential.capability.clone();
    out.push(fx("t10_request_icv", icv.to_vec(), move |b| {
        t10_verify(&cap_bytes, T10_REQUEST, b, &wk, t10_access(), NOW).map(drop)
    }));

    let set_key = SetKey {
        target: SetKeyTarget::Working {
            partition: 7,
            key_version: 3,
        },
        seed: [0x24; 32],
        timestamp: NOW,
        nonce: [0x25; 16],
    };
    let part_auth = partition_pair(k).authentication_mac();
    out.push(fx(
        "set_key",
        signed::mac(set_key, &part_auth).encoded().to_vec(),
        move |b| {
            UnverifiedMac::<SetKey>::decode(b)?
                .verify(&partition_pair(keys()).authentication_mac())
                .map(drop)
        },
    ));

    let set_policy_tag = SetPolicyTag {
        partition: 7,
        object_id: 65536,
        tag: 3,
        timestamp: NOW,
        nonce: [0x26; 16],
    };
    out.push(fx(
        "set_policy_tag",
        signed::mac(set_policy_tag, &part_auth).encoded().to_vec(),
        move |b| {
            UnverifiedMac::<SetPolicyTag>::decode(b)?
                .verify(&partition_pair(keys()).authentication_mac())
                .map(drop)
        },
    ));

    out.push(fx(
        "set_master_key_offer",
        master_offer(k).encoded().to_vec(),
        move |b| {
            UnverifiedMac::<SetMasterKeyOffer>::decode(b)?
                .verify(&keys().master.authentication_mac())
                .map(drop)
        },
    ));
    out.push(fx(
        "set_master_key_accept",
        master_accept(k).encoded().to_vec(),
        move |b| {
            let k = keys();
            let accept = UnverifiedMac::<SetMasterKeyAccept>::decode(b)?
                .verify(&k.master.authentication_mac())?;
            t10::new_master_key(&master_offer(k), &accept, &k.mds_ephemeral).map(drop)
        },
    ));

    out.push(fx("lockbox", lockbox(k).encode(), move |b| {
        let k = keys();
        let lb = Lockbox::decode(b)?;
        lb.open_as_kds(&k.kds_seal)?;
        lb.open_as_owner(&k.client_seal).map(drop)
    }));
    out.push(fx("lockbox_keyed", lockbox_keyed(k).encode(), move |b| {
        let k = keys();
        let lb = Lockbox::decode(b)?;
        let owner = lb.owner_key().copied().unwrap_or(SealingPublicKey([0; 32]));
        lb.open_keyed_as_kds(&KdsLockboxKey::new(&k.kds_seal, &owner)?)?;
        lb.open_as_owner(&k.client_seal).map(drop)
    }));

    let opened = lockbox(k).open_as_kds(&k.kds_seal).unwrap();
    let cover = opened.shape.cover(4096, 5 * 4096).unwrap();
    let range_keys: Vec<_> = cover
        .iter()
        .map(|n| maat_crypto::kht::RangeKey {
            node: *n,
            key: opened
                .shape
                .node_key_from_root(&opened.root_key, *n)
                .unwrap(),
        })
        .collect();
    let grant = RangeGrant::issue(
        &opened,
        T1,
        &range_keys,
        &k.client_seal.public_key(),
        &k.kds,
        &mut rng(),
    )
    .unwrap();
    out.push(fx("range_key_grant", grant.encode(), move |b| {
        let k = keys();
        RangeGrant::decode(b)?
            .open(&k.client_seal, &k.kds.verifying_key(), NOW)
            .map(drop)
    }));
    let grant_key = GrantKey::for_kds(&k.kds_seal, &k.client_seal.public_key()).unwrap();
    let keyed = RangeGrant::issue_keyed(&opened, T1, &range_keys, &grant_key, &mut rng()).unwrap();
    out.push(fx("range_key_grant_keyed", keyed.encode(), move |b| {
        let k = keys();
        let key = GrantKey::for_client(&k.client_seal, &k.kds_seal.public_key())?;
        RangeGrant::decode(b)?.open_keyed(&key, NOW).map(drop)
    }));

    let permit = KeyRanges {
        capability: CapabilityId(0x0102_0304_0506_0708),
        user: USER,
        file: FILE,
        ranges: vec![(0, 1 << 20), (3 << 20, 4 << 20)],
        start: T0,
        expiry: T1,
        // As permits were before tree versions (SPEC H7); `key_ranges_tree` names one.
        tree_version: None,
    };
    let check = move |b: &[u8]| {
        Unverified::<KeyRanges>::decode(b)?
            .verify(&mds_pk(), NOW)
            .map(drop)
    };
    out.push(fx(
        "key_ranges",
        signed::sign(permit.clone(), &k.mds).encoded().to_vec(),
        check,
    ));
    let permit = KeyRanges {
        tree_version: Some(2),
        ..permit
    };
    out.push(fx(
        "key_ranges_tree",
        signed::sign(permit, &k.mds).encoded().to_vec(),
        check,
    ));

    // Issue 41: OSD 7's control key, computed at the OSD; the MDS's side must agree.
    let (mds_seal, osd_seal) = (k.mds_seal.clone(), k.osd_seal.clone());
    let control = |shared: &[u8; 32]| -> Result<Vec<u8>, ProtoError> {
        Ok(maat_proto::control::control_key(shared, 7)?
            .expose()
            .to_vec())
    };
    out.push(fx(
        "osd_control_key",
        control(&k.osd_seal.agree(&k.mds_seal.public_key()).unwrap()).unwrap(),
        move |b| {
            let at_mds = control(&*mds_seal.agree(&osd_seal.public_key())?)?;
            if at_mds == b {
                Ok(())
            } else {
                Err(ProtoError::Malformed {
                    what: "control key",
                    reason: "the MDS derives another",
                })
            }
        },
    ));
    let join = MacKey::new(Secret32::from_bytes([0x10; 32]));
    let registered = move |join: &MacKey, seal: &SealingSecretKey| {
        maat_proto::control::registered_control_mac(
            join,
            &mds_pk().to_bytes(),
            &seal.public_key().0,
            &[0x11; 16],
        )
        .to_vec()
    };
    let mds_seal = k.mds_seal.clone();
    out.push(fx(
        "osd_registered_control_mac",
        registered(&join, &k.mds_seal),
        move |b| {
            if registered(&join, &mds_seal) == b {
                Ok(())
            } else {
                Err(ProtoError::Malformed {
                    what: "registration MAC",
                    reason: "differs",
                })
            }
        },
    ));

    // Issue 42: a key command to OSD 7 under the leader lease's fencing token 3, MACed
    // under OSD 7's control key (as the MDS derives it; the OSD checks under its own).
    let fenced_key = |seal: &SealingSecretKey, public: &SealingPublicKey| {
        MacKey::new(maat_proto::control::control_key(&seal.agree(public).unwrap(), 7).unwrap())
    };
    let inner = maat_proto::msg::encode(&maat_proto::msg::OsdPlainRequest::SetPolicyTag(vec![
        0x26;
        8
    ]))
    .unwrap();
    let fenced = maat_proto::t10::FencedKeyCommand {
        osd: 7,
        fence: 3,
        command: inner,
    };
    let (mds_seal, osd_seal) = (k.mds_seal.clone(), k.osd_seal.clone());
    out.push(fx(
        "fenced_key_command",
        signed::mac(fenced, &fenced_key(&k.mds_seal, &k.osd_seal.public_key()))
            .encoded()
            .to_vec(),
        move |b| {
            UnverifiedMac::<maat_proto::t10::FencedKeyCommand>::decode(b)?
                .verify(&fenced_key(&osd_seal, &mds_seal.public_key()))
                .map(drop)
        },
    ));

    // Issue 42: a change applied once whichever MDS instance receives it.
    let once = || maat_proto::msg::MdsRequest::Once {
        id: [0x07; 16],
        request: Box::new(maat_proto::msg::MdsRequest::Mkdir {
            path: "/d".into(),
            mode: 0o755,
            parents: false,
            partition: None,
        }),
    };
    out.push(fx(
        "mds_request_once",
        maat_proto::msg::encode(&once()).unwrap(),
        move |b| {
            let decoded: maat_proto::msg::MdsRequest = maat_proto::msg::decode(b)?;
            match decoded == once() {
                true => Ok(()),
                false => Err(ProtoError::Malformed {
                    what: "Once request",
                    reason: "decodes to another request",
                }),
            }
        },
    ));

    out
}

pub fn mds_key() -> VerifyingKey {
    keys().mds.verifying_key()
}
