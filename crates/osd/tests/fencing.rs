//! Issue 42: an OSD takes key commands (SPEC T3) only from the MDS instance that leads
//! now. The leader sends each inside a `FencedKeyCommand` under its lease's fencing token,
//! MACed under the OSD's control key; the OSD keeps the highest token it applied a
//! command under (durably, with its keys) and refuses `Fenced` a command under a lower
//! one, so a leader whose lease ran out while its command was in flight cannot undo its
//! successor's keys. Driven through the OSD's own plain-message handler.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::OsRng;
use maat_osd::OsdCore;
use maat_proto::msg::{self, ErrorCode, OsdPlainRequest, OsdPlainResponse, WireError};
use maat_proto::t10::{FencedKeyCommand, SetKeyTarget};
use maat_proto::t10_keys::{self, KeyState};
use maat_proto::{OsdId, UnixMillis};
use std::sync::{Arc, Mutex};

const OSD: u64 = 7;
const JOIN: [u8; 32] = [0x10; 32];
const NOW: u64 = 1_800_000_000_000;

struct Osd {
    core: OsdCore,
    /// The last key state the OSD made durable.
    stored: Arc<Mutex<Vec<u8>>>,
}

impl Osd {
    fn start(seal: &SealingSecretKey, mds: &SealingSecretKey, state: KeyState) -> Osd {
        let core = OsdCore::new(
            OsdId(OSD),
            SealingSecretKey::from_bytes(*seal.to_bytes()),
            false,
            UnixMillis(NOW),
        );
        core.control_key(&mds.public_key().0).unwrap();
        let stored = Arc::new(Mutex::new(state.encode()));
        let keep = Arc::clone(&stored);
        core.load_t10_keys(
            state,
            Arc::new(move |bytes: &[u8]| {
                *keep.lock().unwrap() = bytes.to_vec();
                Ok(())
            }),
        );
        Osd { core, stored }
    }

    fn send(&self, request: &OsdPlainRequest) -> Result<OsdPlainResponse, WireError> {
        let answer =
            self.core
                .handle_plain(&msg::encode(request).unwrap(), UnixMillis(NOW), &mut OsRng);
        msg::decode::<Result<OsdPlainResponse, WireError>>(&answer).unwrap()
    }

    fn stored(&self) -> KeyState {
        KeyState::decode(&self.stored.lock().unwrap()).unwrap()
    }
}

/// `request` as a leader under `fence` sends it, MACed under `key`, addressed to `osd`.
fn fenced(request: &OsdPlainRequest, fence: u64, key: &MacKey, osd: u64) -> OsdPlainRequest {
    let token = FencedKeyCommand {
        osd,
        fence,
        command: msg::encode(request).unwrap(),
    };
    OsdPlainRequest::Fenced(maat_proto::signed::mac(token, key).encoded().to_vec())
}

fn code(answer: Result<OsdPlainResponse, WireError>) -> ErrorCode {
    match answer {
        Err(e) => e.code,
        Ok(a) => panic!("applied: {a:?}"),
    }
}

#[test]
fn a_deposed_leaders_key_command_is_refused_after_its_successors() {
    let (seal, mds_seal) = (
        SealingSecretKey::generate(&mut OsRng),
        SealingSecretKey::generate(&mut OsRng),
    );
    let control = MacKey::new(
        maat_proto::control::control_key(&mds_seal.agree(&seal.public_key()).unwrap(), OSD)
            .unwrap(),
    );
    let mut mds = KeyState::bootstrap(&JOIN, OSD).unwrap();
    let osd = Osd::start(&seal, &mds_seal, KeyState::bootstrap(&JOIN, OSD).unwrap());

    // Leader A (token 4) exchanges the master key and sets the root.
    let (offer, ephemeral) = t10_keys::mds_master_offer(&mds, UnixMillis(NOW), &mut OsRng);
    let request = OsdPlainRequest::SetMasterKey(offer.encoded().to_vec());
    let Ok(OsdPlainResponse::MasterKeyAccepted(accept)) =
        osd.send(&fenced(&request, 4, &control, OSD))
    else {
        panic!("master exchange refused")
    };
    t10_keys::mds_master_accept(&mut mds, &offer, &ephemeral, &accept).unwrap();
    let set = |mds: &KeyState, at: u64| {
        let command =
            t10_keys::mds_set_key(mds, SetKeyTarget::Root, UnixMillis(at), &mut OsRng).unwrap();
        (OsdPlainRequest::SetKey(command.encoded().to_vec()), command)
    };
    let (root, command) = set(&mds, NOW + 1);
    let Ok(OsdPlainResponse::KeySet { ack }) = osd.send(&fenced(&root, 4, &control, OSD)) else {
        panic!("root refused")
    };
    t10_keys::mds_confirm_set_key(&mut mds, &command, &ack).unwrap();
    assert_eq!(osd.stored().fence(), 4);

    // A's lease runs out while it prepares a new root; B (token 5) sets one first.
    let (from_a, _) = set(&mds, NOW + 2);
    let (from_b, command) = set(&mds, NOW + 3);
    let Ok(OsdPlainResponse::KeySet { ack }) = osd.send(&fenced(&from_b, 5, &control, OSD)) else {
        panic!("the new leader's root refused")
    };
    t10_keys::mds_confirm_set_key(&mut mds, &command, &ack).unwrap();
    let after_b = osd.stored();
    assert_eq!(after_b.fence(), 5);
    // A's command lands after B's: refused, the OSD's keys stay B's.
    assert_eq!(
        code(osd.send(&fenced(&from_a, 4, &control, OSD))),
        ErrorCode::Fenced
    );
    // A newer root from A (a later generation, so only the fence stops it): refused.
    let (later_from_a, _) = set(&mds, NOW + 10);
    assert_eq!(
        code(osd.send(&fenced(&later_from_a, 4, &control, OSD))),
        ErrorCode::Fenced
    );
    // Sent bare (as an MDS before fencing would): refused too.
    assert_eq!(code(osd.send(&later_from_a)), ErrorCode::Fenced);
    assert_eq!(osd.stored(), after_b);

    // Forged: a high token MACed under another key, or B's token for another OSD.
    let other = MacKey::new(maat_crypto::Secret32::from_bytes([9; 32]));
    assert_eq!(
        code(osd.send(&fenced(&later_from_a, 99, &other, OSD))),
        ErrorCode::BadMac
    );
    assert_eq!(
        code(osd.send(&fenced(&later_from_a, 6, &control, OSD + 1))),
        ErrorCode::WrongRecipient
    );
    // Only key commands travel fenced.
    assert_eq!(
        code(osd.send(&fenced(&OsdPlainRequest::Revoke(vec![1]), 6, &control, OSD))),
        ErrorCode::InvalidArgument
    );
    assert_eq!(osd.stored(), after_b);

    // The fence outlives a restart: the OSD started again from its stored keys still
    // refuses A, and takes B's next command.
    let restarted = Osd::start(&seal, &mds_seal, osd.stored());
    assert_eq!(
        code(restarted.send(&fenced(&later_from_a, 4, &control, OSD))),
        ErrorCode::Fenced
    );
    let (next_from_b, _) = set(&mds, NOW + 11);
    assert!(matches!(
        restarted.send(&fenced(&next_from_b, 5, &control, OSD)),
        Ok(OsdPlainResponse::KeySet { .. })
    ));
}

#[test]
fn an_osd_that_never_saw_a_fenced_command_takes_bare_ones_and_none_without_a_control_key() {
    let (seal, mds_seal) = (
        SealingSecretKey::generate(&mut OsRng),
        SealingSecretKey::generate(&mut OsRng),
    );
    let mds = KeyState::bootstrap(&JOIN, OSD).unwrap();
    let (offer, _) = t10_keys::mds_master_offer(&mds, UnixMillis(NOW), &mut OsRng);
    let request = OsdPlainRequest::SetMasterKey(offer.encoded().to_vec());
    // An MDS from before fencing: its bare command is applied; the state stays version 2.
    let osd = Osd::start(&seal, &mds_seal, KeyState::bootstrap(&JOIN, OSD).unwrap());
    assert!(matches!(
        osd.send(&request),
        Ok(OsdPlainResponse::MasterKeyAccepted(_))
    ));
    assert_eq!(osd.stored().fence(), 0);
    assert_eq!(osd.stored.lock().unwrap()[0], 2);
    // An OSD that has not agreed a control key with the MDS cannot check a fenced one.
    let core = OsdCore::new(
        OsdId(OSD),
        SealingSecretKey::from_bytes(*seal.to_bytes()),
        false,
        UnixMillis(NOW),
    );
    core.load_t10_keys(
        KeyState::bootstrap(&JOIN, OSD).unwrap(),
        Arc::new(|_: &[u8]| Ok(())),
    );
    let control = MacKey::new(maat_crypto::Secret32::from_bytes([3; 32]));
    let answer = core.handle_plain(
        &msg::encode(&fenced(&request, 1, &control, OSD)).unwrap(),
        UnixMillis(NOW),
        &mut OsRng,
    );
    assert_eq!(
        code(msg::decode::<Result<OsdPlainResponse, WireError>>(&answer).unwrap()),
        ErrorCode::NotReady
    );
}
