//! Hostile input for fuzzing (`fuzz/fuzz_targets/kds_request.rs`) and its replay under
//! `cargo test`: a KDS with fixed keys takes `data` as a whole request payload, and, past
//! a valid MDS-signed ticket, as the files of a key request, so that the checks behind
//! the ticket see arbitrary capabilities, lockboxes, trees and nodes, as a job's
//! lifetime token and proof, and as the MDS's answer to a revocations request. Every
//! answer must decode, and no list or job key be taken; a panic anywhere is a bug.

use super::*;
use maat_crypto::seal::SealingPublicKey;
use maat_proto::UserId;

/// When the fuzzed requests arrive (inside the ticket's validity).
pub const NOW: UnixMillis = UnixMillis(1_800_000_000_000);

/// The KDS under test and a ticket its MDS key signed.
pub struct Target {
    kds: Kds,
    ticket: Vec<u8>,
}

impl Target {
    /// Fixed keys: KDS seed `[7; 32]`, MDS signing seed `[9; 32]`.
    pub fn new() -> Result<Self, KdsError> {
        let mds = SigningKey::from_seed(&[9; 32]);
        let kds = Kds::new(
            KdsSecrets::from_seed(&[7; 32])?,
            &mds.verifying_key().to_bytes(),
        )?;
        let ticket = signed::sign(
            LoginTicket {
                ticket_id: 1,
                user: UserId(1000),
                client_signing_key: SigningKey::from_seed(&[3; 32]).verifying_key().to_bytes(),
                client_sealing_key: SealingPublicKey([4; 32]),
                iv: [5; maat_proto::ticket::TICKET_IV_BYTES],
                start: UnixMillis(NOW.0 - 1_000),
                expiry: UnixMillis(NOW.0 + 3_600_000),
            },
            &mds,
        )
        .encoded()
        .to_vec();
        kds.serve_without_revocations(NOW)
            .map_err(KdsError::Revocations)?;
        Ok(Self { kds, ticket })
    }

    /// The raw answer to a key request for `files` behind the valid ticket.
    pub fn answer_with_ticket(
        &self,
        files: &[FileKeysRequest],
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        let request = KdsRequest::Keys {
            ticket: self.ticket.clone(),
            files: files.to_vec(),
        };
        match msg::encode(&request) {
            Ok(payload) => self.kds.handle(&payload, NOW, rng),
            Err(_) => Vec::new(),
        }
    }

    /// Feeds `data` both ways; panics when an answer does not decode.
    pub fn run(&self, data: &[u8], rng: &mut impl CryptoRngCore) {
        let answer = self.kds.handle(data, NOW, rng);
        if msg::decode::<Result<KdsResponse, WireError>>(&answer).is_err() {
            panic!("a KDS answer does not decode");
        }
        if let Ok(files) = msg::decode::<Vec<FileKeysRequest>>(data) {
            let answer = self.answer_with_ticket(&files, rng);
            if msg::decode::<Result<KdsResponse, WireError>>(&answer).is_err() {
                panic!("a KDS answer does not decode");
            }
            // The same files asked for keyed grants (sealed under the login's grant key).
            let keyed = KdsRequest::KeysKeyed {
                ticket: self.ticket.clone(),
                files,
            };
            if let Ok(payload) = msg::encode(&keyed) {
                let answer = self.kds.handle(&payload, NOW, rng);
                if msg::decode::<Result<KdsResponse, WireError>>(&answer).is_err() {
                    panic!("a KDS answer does not decode");
                }
            }
        }
        // The bytes as a job's lifetime token and proof (SPEC M10): refused, never taken
        // (nothing but the MDS's key signs a lifetime), never a panic.
        let for_job = KdsRequest::KeysForJob {
            ticket: self.ticket.clone(),
            files: Vec::new(),
            lifetime: data.to_vec(),
            proof: data.get(..64).unwrap_or(data).to_vec(),
        };
        if let Ok(payload) = msg::encode(&for_job) {
            let answer = self.kds.handle(&payload, NOW, rng);
            match msg::decode::<Result<KdsResponse, WireError>>(&answer) {
                Err(_) => panic!("a KDS answer does not decode"),
                Ok(Ok(_)) => panic!("a job's keys were granted on fuzzed bytes"),
                Ok(Err(_)) => {}
            }
        }
        // The same bytes as the MDS's answer to a revocations request (SPEC M9): they
        // must be refused (nothing but the MDS's key signs a list), never panic.
        if let Ok(ask) = self.kds.revocations_request(NOW, rng) {
            if self.kds.accept_revocations(&ask, data, NOW).is_ok() {
                panic!("a revocation list not signed by the MDS was taken");
            }
        }
    }
}
