//! One entry point per wire decoder, for the fuzz targets (`fuzz/`) and the corpus replay
//! under `cargo test`. Each decodes arbitrary bytes; whatever decodes must re-encode to
//! exactly the same bytes (the encoding is canonical), or the function panics so that
//! the fuzzer reports it. Any other panic is a bug too.
#![allow(clippy::panic)]

use crate::capability::Capability;
use crate::delegation::{FileHandle, KeyLifetimeToken, ProofToken};
use crate::horus::{Lockbox, RangeGrant};
use crate::key_ranges::KeyRanges;
use crate::merkle_msg::MerkleTreeMessage;
use crate::renewal::RenewalToken;
use crate::revocation::RevocationNotice;
use crate::session::{SessionConfirm, SessionOffer};
use crate::signed::{self, Body, MacedBody, SignedBody, Unverified, UnverifiedMac};
use crate::t10::{SetKey, SetMasterKeyAccept, SetMasterKeyOffer, T10Capability};
use crate::ticket::LoginTicket;

fn canonical(what: &str, input: &[u8], reencoded: &[u8]) {
    if input != reencoded {
        panic!("{what}: decoded input does not re-encode to the same bytes");
    }
}

fn signed_token<T: SignedBody>(data: &[u8]) {
    if let Ok(token) = Unverified::<T>::decode(data) {
        canonical(T::KIND.name(), data, &token.to_bytes());
    }
}

fn maced_token<T: MacedBody>(data: &[u8]) {
    if let Ok(token) = UnverifiedMac::<T>::decode(data) {
        canonical(T::KIND.name(), data, &token.to_bytes());
    }
}

fn plain_token<T: Body>(data: &[u8]) {
    let mut r = crate::codec::Reader::new(data, "plain token");
    let decoded = signed::read_header(&mut r, T::KIND)
        .and_then(|()| T::decode_body(&mut r))
        .and_then(|b| r.finish().map(|()| b));
    if let Ok(body) = decoded {
        canonical(T::KIND.name(), data, &signed::encode_unauthenticated(&body));
    }
}

/// Fuzz entry: login ticket.
pub fn login_ticket(data: &[u8]) {
    signed_token::<LoginTicket>(data);
}
/// Fuzz entry: session offer.
pub fn session_offer(data: &[u8]) {
    signed_token::<SessionOffer>(data);
}
/// Fuzz entry: session confirmation.
pub fn session_confirm(data: &[u8]) {
    maced_token::<SessionConfirm>(data);
}
/// Fuzz entry: capability.
pub fn capability(data: &[u8]) {
    signed_token::<Capability>(data);
}
/// Fuzz entry: Merkle tree message.
pub fn merkle_tree_message(data: &[u8]) {
    if let Ok(msg) = MerkleTreeMessage::decode(data) {
        canonical("Merkle tree message", data, &msg.encode());
    }
}
/// Fuzz entry: renewal token.
pub fn renewal_token(data: &[u8]) {
    signed_token::<RenewalToken>(data);
}
/// Fuzz entry: revocation notice.
pub fn revocation_notice(data: &[u8]) {
    signed_token::<RevocationNotice>(data);
}
/// Fuzz entry: file handle.
pub fn file_handle(data: &[u8]) {
    signed_token::<FileHandle>(data);
}
/// Fuzz entry: key lifetime token.
pub fn key_lifetime_token(data: &[u8]) {
    signed_token::<KeyLifetimeToken>(data);
}
/// Fuzz entry: proof token (its signed plaintext).
pub fn proof_token(data: &[u8]) {
    signed_token::<ProofToken>(data);
}
/// Fuzz entry: T10 capability.
pub fn t10_capability(data: &[u8]) {
    plain_token::<T10Capability>(data);
}
/// Fuzz entry: SET KEY.
pub fn set_key(data: &[u8]) {
    maced_token::<SetKey>(data);
}
/// Fuzz entry: SET MASTER KEY offer.
pub fn set_master_key_offer(data: &[u8]) {
    maced_token::<SetMasterKeyOffer>(data);
}
/// Fuzz entry: SET MASTER KEY accept.
pub fn set_master_key_accept(data: &[u8]) {
    maced_token::<SetMasterKeyAccept>(data);
}
/// Fuzz entry: SET POLICY TAG.
pub fn set_policy_tag(data: &[u8]) {
    maced_token::<crate::t10::SetPolicyTag>(data);
}
/// Fuzz entry: a fenced key command (issue 42).
pub fn fenced_key_command(data: &[u8]) {
    maced_token::<crate::t10::FencedKeyCommand>(data);
}
/// Fuzz entry: lockbox.
pub fn lockbox(data: &[u8]) {
    if let Ok(lb) = Lockbox::decode(data) {
        canonical("lockbox", data, &lb.encode());
    }
}
/// Fuzz entry: range-key grant.
pub fn range_key_grant(data: &[u8]) {
    if let Ok(grant) = RangeGrant::decode(data) {
        canonical("range-key grant", data, &grant.encode());
    }
}
/// Fuzz entry: key-range permit.
pub fn key_ranges(data: &[u8]) {
    signed_token::<KeyRanges>(data);
}

/// Fuzz entry: a job bundle's layout (SPEC M10; checking it needs keys).
pub fn job_bundle(data: &[u8]) {
    let _ = crate::job_bundle::BundleParts::parse(data);
}

/// A decoder entry point.
pub type Decoder = fn(&[u8]);

/// Every decoder, by fuzz-target name.
pub const ALL: &[(&str, Decoder)] = &[
    ("login_ticket", login_ticket),
    ("session_offer", session_offer),
    ("session_confirm", session_confirm),
    ("capability", capability),
    ("merkle_tree_message", merkle_tree_message),
    ("renewal_token", renewal_token),
    ("revocation_notice", revocation_notice),
    ("file_handle", file_handle),
    ("key_lifetime_token", key_lifetime_token),
    ("proof_token", proof_token),
    ("t10_capability", t10_capability),
    ("set_key", set_key),
    ("set_master_key_offer", set_master_key_offer),
    ("set_master_key_accept", set_master_key_accept),
    ("set_policy_tag", set_policy_tag),
    ("fenced_key_command", fenced_key_command),
    ("lockbox", lockbox),
    ("range_key_grant", range_key_grant),
    ("key_ranges", key_ranges),
    ("job_bundle", job_bundle),
    ("frame", frame),
];

/// A T10 request payload (SPEC T2): the capability split off and decoded, its key made
/// under a fixed working key, the envelope opened under it.
fn t10_request(payload: &[u8]) {
    use crate::protection::{EnvelopeKeys, UnverifiedRequest};
    if let Ok((capability, envelope)) = crate::t10::split_request(payload) {
        let _ = crate::t10::decode_capability(capability);
        let working = maat_crypto::mac::MacKey::new(maat_crypto::Secret32::from_bytes([7; 32]));
        let key = crate::t10::capability_key(capability, &working);
        if let Ok(request) = UnverifiedRequest::decode(envelope) {
            let _ = request.open(&EnvelopeKeys::new(key.expose()), capability);
        }
    }
}

/// The protected envelopes (SPEC T1): split, peek and open under a fixed key, every method.
fn protected_envelopes(payload: &[u8]) {
    use crate::protection::{self, EnvelopeKeys, Protection, Sealing};
    let keys = EnvelopeKeys::new(&[7; 32]);
    if let Ok(request) = protection::UnverifiedRequest::decode(payload) {
        let _ = request.peek_message();
        let _ = request.open_digested(&keys, b"capability");
    }
    for method in Protection::ALL {
        let legacy = Sealing {
            method,
            data_digest: false,
        };
        for sealing in [legacy, Sealing::current(method)] {
            let _ = protection::open_response(&keys, sealing, &[1; 16], &[2; 16], payload);
        }
    }
}

/// Fuzz entry: a frame, the request envelope inside it and every message decoder.
pub fn frame(data: &[u8]) {
    if let Ok((kind, payload)) = crate::wire::decode_frame(data) {
        let re = crate::wire::encode_frame(kind, payload).unwrap_or_default();
        canonical("frame", data, &re);
        let _ = crate::wire::UnverifiedRequest::decode(payload);
        protected_envelopes(payload);
        t10_request(payload);
        let _ = crate::msg::open_insecure_bulk_request(payload);
        let _ = crate::msg::open_plain_bulk_response(payload.to_vec());
        crate::msg::fuzz_messages(payload);
    }
    crate::msg::fuzz_messages(data);
}
