//! SPEC M10 with H4 at the KDS: a capability a job's lead opened for the job names the
//! job's computation key, not users. It gets keys only in a `KeysForJob` request whose
//! MDS-signed lifetime token names that key and is current and not revoked, and whose
//! proof is that key's signature over the requester's own ticket. Every other way is
//! refused with its reason.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::SigningKey;
use maat_crypto::Secret32;
use maat_kds::{Kds, KdsSecrets};
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::delegation::{computation_key_hash, kds_proof_message, KeyLifetimeToken};
use maat_proto::horus::{Lockbox, LockboxKeys};
use maat_proto::msg::{self, ErrorCode, FileKeysRequest, KdsRequest, KdsResponse, WireError};
use maat_proto::protection::Protection;
use maat_proto::revocation::RevocationNotice;
use maat_proto::signed;
use maat_proto::ticket::LoginTicket;
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

const NOW: UnixMillis = UnixMillis(1_800_000_000_000);
const FILE: FileId = FileId(77);

struct Setup {
    mds: SigningKey,
    kds: Kds,
    job: SigningKey,
    request: FileKeysRequest,
}

fn ticket(mds: &SigningKey, user: u64, client: u8) -> Vec<u8> {
    signed::sign(
        LoginTicket {
            ticket_id: user,
            user: UserId(user),
            client_signing_key: SigningKey::from_seed(&[client; 32])
                .verifying_key()
                .to_bytes(),
            client_sealing_key: SealingSecretKey::from_bytes([client; 32]).public_key(),
            iv: [5; maat_proto::ticket::TICKET_IV_BYTES],
            start: UnixMillis(NOW.0 - 1_000),
            expiry: UnixMillis(NOW.0 + 3_600_000),
        },
        mds,
    )
    .encoded()
    .to_vec()
}

fn lifetime(by: &SigningKey, key: &SigningKey, start: u64, expiry: u64) -> Vec<u8> {
    signed::sign(
        KeyLifetimeToken {
            computation_key: key.verifying_key().to_bytes(),
            lead: UserId(1),
            start: UnixMillis(start),
            expiry: UnixMillis(expiry),
        },
        by,
    )
    .encoded()
    .to_vec()
}

fn setup() -> Setup {
    let mds = SigningKey::from_seed(&[9; 32]);
    let secrets = KdsSecrets::from_seed(&[7; 32]).unwrap();
    let kds_public = maat_crypto::seal::SealingPublicKey(secrets.public_keys().sealing_key);
    let kds = Kds::new(secrets, &mds.verifying_key().to_bytes()).unwrap();
    kds.serve_without_revocations(NOW).unwrap();
    let job = SigningKey::from_seed(&[0x66; 32]);
    let owner = SealingSecretKey::from_bytes([0x55; 32]);
    let lockbox = Lockbox::seal_keyed(
        FILE,
        1,
        maat_proto::encrypted::file_shape(),
        &Secret32::from_bytes([0x31; 32]),
        &LockboxKeys::new(&owner, &kds_public).unwrap(),
        &mut ChaCha20Rng::seed_from_u64(1),
    )
    .unwrap()
    .encode();
    let capability = signed::sign(
        Capability {
            users: Principals::ComputationKey(computation_key_hash(
                &job.verifying_key().to_bytes(),
            )),
            files: Files::File(FILE),
            id: CapabilityId(5),
            mode: Mode::READ,
            protection: Protection::CmdRsp,
            start: UnixMillis(NOW.0 - 1_000),
            expiry: UnixMillis(NOW.0 + 60_000),
        },
        &mds,
    )
    .encoded()
    .to_vec();
    let request = FileKeysRequest {
        capability,
        lockbox,
        trees: Vec::new(),
        nodes: vec![(0, 0)],
        key_ranges: None,
    };
    Setup {
        mds,
        kds,
        job,
        request,
    }
}

/// The whole request's refusal, or each file's answer.
fn ask(kds: &Kds, request: &KdsRequest) -> Result<Vec<Result<Vec<u8>, WireError>>, ErrorCode> {
    let answer = kds.handle(
        &msg::encode(request).unwrap(),
        NOW,
        &mut ChaCha20Rng::seed_from_u64(2),
    );
    match msg::decode::<Result<KdsResponse, WireError>>(&answer).unwrap() {
        Ok(KdsResponse::Grants(grants)) => Ok(grants),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e.code),
    }
}

/// The one file's refusal code (the request itself was taken).
fn file_refusal(r: Result<Vec<Result<Vec<u8>, WireError>>, ErrorCode>) -> ErrorCode {
    r.unwrap()[0].clone().unwrap_err().code
}

#[test]
fn only_a_holder_of_the_jobs_key_gets_keys_for_its_files() {
    let s = setup();
    let bob = ticket(&s.mds, 1001, 0x44);
    let life = lifetime(&s.mds, &s.job, NOW.0 - 1_000, NOW.0 + 60_000);
    let for_job = |ticket: &[u8], lifetime: &[u8], proof: Vec<u8>| KdsRequest::KeysForJob {
        ticket: ticket.to_vec(),
        files: vec![s.request.clone()],
        lifetime: lifetime.to_vec(),
        proof,
    };
    let proof_by =
        |key: &SigningKey, ticket: &[u8]| key.sign(&kds_proof_message(ticket)).0.to_vec();

    // The honest request: the job's key signed over bob's own ticket.
    let grants = ask(&s.kds, &for_job(&bob, &life, proof_by(&s.job, &bob))).unwrap();
    assert!(!grants[0].as_ref().unwrap().is_empty());

    // The same capability without the job's proof: refused, naming what is missing.
    let keyed = KdsRequest::KeysKeyed {
        ticket: bob.clone(),
        files: vec![s.request.clone()],
    };
    assert_eq!(file_refusal(ask(&s.kds, &keyed)), ErrorCode::WrongUser);
    // A proof made with another key, or for another login's ticket (seen on the wire):
    // the whole request is refused.
    let mallory = SigningKey::from_seed(&[0x77; 32]);
    assert_eq!(
        ask(&s.kds, &for_job(&bob, &life, proof_by(&mallory, &bob))).unwrap_err(),
        ErrorCode::BadSignature
    );
    let carol = ticket(&s.mds, 1002, 0x45);
    assert_eq!(
        ask(&s.kds, &for_job(&carol, &life, proof_by(&s.job, &bob))).unwrap_err(),
        ErrorCode::BadSignature
    );
    // Another job's key, with its own valid lifetime and proof: not this capability's.
    let other = lifetime(&s.mds, &mallory, NOW.0 - 1_000, NOW.0 + 60_000);
    assert_eq!(
        file_refusal(ask(
            &s.kds,
            &for_job(&bob, &other, proof_by(&mallory, &bob))
        )),
        ErrorCode::WrongUser
    );
    // A lifetime token the MDS did not sign, and one that ran out.
    let forged = lifetime(&mallory, &s.job, NOW.0 - 1_000, NOW.0 + 60_000);
    assert_eq!(
        ask(&s.kds, &for_job(&bob, &forged, proof_by(&s.job, &bob))).unwrap_err(),
        ErrorCode::BadSignature
    );
    let lapsed = lifetime(&s.mds, &s.job, NOW.0 - 120_000, NOW.0 - 1);
    assert_eq!(
        ask(&s.kds, &for_job(&bob, &lapsed, proof_by(&s.job, &bob))).unwrap_err(),
        ErrorCode::CapabilityExpired
    );
    // The job ended (a revocation notice names its key): refused at once.
    let notice = signed::sign(
        RevocationNotice {
            notice_id: 1,
            start: UnixMillis(NOW.0 - 1_000),
            expiry: UnixMillis(NOW.0 + 60_000),
            capability_ids: vec![],
            users: vec![],
            computation_keys: vec![computation_key_hash(&s.job.verifying_key().to_bytes())],
        },
        &s.mds,
    )
    .encoded()
    .to_vec();
    s.kds.apply_revocation(&notice, NOW).unwrap();
    assert_eq!(
        file_refusal(ask(&s.kds, &for_job(&bob, &life, proof_by(&s.job, &bob)))),
        ErrorCode::Revoked
    );
}

/// SPEC H6 per job: a job's capability marked for ranges gets keys only with the permit
/// the MDS gave the requesting participant, and only for its ranges.
#[test]
fn a_ranged_job_capability_needs_the_participants_permit_and_keeps_to_it() {
    let s = setup();
    let bob = ticket(&s.mds, 1001, 0x44);
    let life = lifetime(&s.mds, &s.job, NOW.0 - 1_000, NOW.0 + 60_000);
    let proof = s.job.sign(&kds_proof_message(&bob)).0.to_vec();
    let hash = computation_key_hash(&s.job.verifying_key().to_bytes());
    let capability = |mode| Capability {
        users: Principals::ComputationKey(hash),
        files: Files::File(FILE),
        id: CapabilityId(6),
        mode,
        protection: Protection::CmdRsp,
        start: UnixMillis(NOW.0 - 1_000),
        expiry: UnixMillis(NOW.0 + 60_000),
    };
    let ranged = signed::sign(capability(Mode::READ.with(Mode::RANGE_KEYS)), &s.mds)
        .encoded()
        .to_vec();
    let permit = |user: u64, capability: u64| {
        signed::sign(
            maat_proto::key_ranges::KeyRanges {
                capability: CapabilityId(capability),
                user: UserId(user),
                file: FILE,
                // The first 8 MiB: 16 nodes of level 8 (512 KiB each: 64 KiB leaves,
                // branching 8).
                ranges: vec![(0, 8 << 20)],
                start: UnixMillis(NOW.0 - 1_000),
                expiry: UnixMillis(NOW.0 + 60_000),
                tree_version: Some(1),
            },
            &s.mds,
        )
        .encoded()
        .to_vec()
    };
    let ask_for = |nodes: Vec<(u8, u64)>, key_ranges: Option<Vec<u8>>| {
        let mut request = s.request.clone();
        request.capability = ranged.clone();
        request.nodes = nodes;
        request.key_ranges = key_ranges;
        ask(
            &s.kds,
            &KdsRequest::KeysForJob {
                ticket: bob.clone(),
                files: vec![request],
                lifetime: life.clone(),
                proof: proof.clone(),
            },
        )
    };
    let inside = vec![(8, 0), (8, 15)];
    assert!(ask_for(inside.clone(), Some(permit(1001, 6))).unwrap()[0].is_ok());
    // No permit, another participant's permit, another capability's permit.
    assert_eq!(
        file_refusal(ask_for(inside.clone(), None)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        file_refusal(ask_for(inside.clone(), Some(permit(1002, 6)))),
        ErrorCode::WrongUser
    );
    assert_eq!(
        file_refusal(ask_for(inside, Some(permit(1001, 5)))),
        ErrorCode::PermissionDenied
    );
    // A node past the permit's ranges, and the level-0 key over the whole file.
    assert_eq!(
        file_refusal(ask_for(vec![(8, 16)], Some(permit(1001, 6)))),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        file_refusal(ask_for(vec![(0, 0)], Some(permit(1001, 6)))),
        ErrorCode::PermissionDenied
    );
}
