//! Property tests: encode → decode round trips for random field values, and decoding
//! arbitrary or mutated bytes never panics.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use maat_crypto::seal::SealingPublicKey;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::decoders;
use maat_proto::merkle_msg::{MerkleTreeMessage, SetKind};
use maat_proto::renewal::RenewalToken;
use maat_proto::revocation::RevocationNotice;
use maat_proto::signed::{self, Unverified};
use maat_proto::ticket::LoginTicket;
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
use proptest::prelude::*;

fn principals() -> impl Strategy<Value = Principals> {
    prop_oneof![
        any::<u64>().prop_map(|u| Principals::User(UserId(u))),
        any::<[u8; 32]>().prop_map(Principals::UserTree),
        any::<[u8; 32]>().prop_map(Principals::ComputationKey),
    ]
}

fn files() -> impl Strategy<Value = Files> {
    prop_oneof![
        any::<u64>().prop_map(|f| Files::File(FileId(f))),
        any::<[u8; 32]>().prop_map(Files::FileTree),
        (any::<u64>(), 1..=u32::MAX).prop_map(|(f, count)| Files::Range {
            first: FileId(f.min(u64::MAX - u64::from(count))),
            count
        })
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn capability_round_trips(users in principals(), files in files(), id in any::<u64>(), mode in 1u8..4, start in any::<u64>(), expiry in any::<u64>()) {
        let body = Capability { users, files, id: CapabilityId(id), mode: Mode::from_bits(mode).unwrap(), protection: maat_proto::protection::Protection::AllData, start: UnixMillis(start), expiry: UnixMillis(expiry) };
        let token = signed::sign(body.clone(), &common::keys().mds);
        prop_assert_eq!(token.encoded().len(), maat_proto::capability::CAPABILITY_BYTES);
        let decoded = Unverified::<Capability>::decode(token.encoded()).unwrap();
        prop_assert_eq!(decoded.unverified_body(), &body);
        prop_assert_eq!(decoded.to_bytes(), token.encoded().to_vec());
    }

    #[test]
    fn ticket_round_trips(id in any::<u64>(), user in any::<u64>(), sk in any::<[u8; 32]>(), pk in any::<[u8; 32]>(), iv in any::<[u8; 16]>(), start in any::<u64>(), expiry in any::<u64>()) {
        let body = LoginTicket { ticket_id: id, user: UserId(user), client_signing_key: sk, client_sealing_key: SealingPublicKey(pk), iv, start: UnixMillis(start), expiry: UnixMillis(expiry) };
        let token = signed::sign(body.clone(), &common::keys().mds);
        let decoded = Unverified::<LoginTicket>::decode(token.encoded()).unwrap();
        prop_assert_eq!(decoded.unverified_body(), &body);
    }

    #[test]
    fn renewal_and_revocation_round_trip(ids in proptest::collection::vec(any::<u64>(), 0..200), users in proptest::collection::btree_set(any::<u64>(), 0..50), keys in proptest::collection::btree_set(any::<[u8; 32]>(), 0..10)) {
        let renewal = RenewalToken::new(1, ids.iter().copied().map(CapabilityId).collect(), UnixMillis(1), UnixMillis(2)).unwrap();
        let token = signed::sign(renewal.clone(), &common::keys().mds);
        let decoded = Unverified::<RenewalToken>::decode(token.encoded()).unwrap();
        prop_assert_eq!(decoded.unverified_body(), &renewal);
        for id in &ids { prop_assert!(renewal.renews(CapabilityId(*id))); }
        let mut cap_ids: Vec<CapabilityId> = ids.into_iter().map(CapabilityId).collect();
        cap_ids.sort_unstable();
        cap_ids.dedup();
        let notice = RevocationNotice { notice_id: 3, start: UnixMillis(1), expiry: UnixMillis(2), capability_ids: cap_ids, users: users.into_iter().map(UserId).collect(), computation_keys: keys.into_iter().collect() };
        let token = signed::sign(notice.clone(), &common::keys().mds);
        let decoded = Unverified::<RevocationNotice>::decode(token.encoded()).unwrap();
        prop_assert_eq!(decoded.unverified_body(), &notice);
    }

    #[test]
    fn merkle_message_round_trips_and_verifies(groups in proptest::collection::vec(proptest::collection::btree_set(any::<u64>(), 1..40), 1..6)) {
        let subtrees: Vec<Vec<u64>> = groups.into_iter().map(|g| g.into_iter().collect()).collect();
        let msg = MerkleTreeMessage::new(SetKind::Files, subtrees.clone()).unwrap();
        let root = msg.root().unwrap();
        let decoded = MerkleTreeMessage::decode(&msg.encode()).unwrap();
        prop_assert_eq!(&decoded, &msg);
        let set = decoded.verify(SetKind::Files, &root).unwrap();
        for id in subtrees.iter().flatten() { prop_assert!(set.contains(*id)); }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        for (_, decode) in decoders::ALL {
            decode(&data);
        }
    }

    #[test]
    fn decoding_mutated_tokens_never_panics(which in 0usize..18, edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), cut in any::<prop::sample::Index>()) {
        let fixtures = common::fixtures();
        let mut data = fixtures[which % fixtures.len()].bytes.clone();
        for (pos, value) in edits {
            let i = pos.index(data.len());
            data[i] = value;
        }
        let len = cut.index(data.len() + 1);
        for (_, decode) in decoders::ALL {
            decode(&data);
            decode(&data[..len]);
        }
    }
}
