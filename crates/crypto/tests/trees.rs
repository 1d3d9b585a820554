//! Property tests of the Merkle tree and the Horus keyed hash tree.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_crypto::kht::{KeyedHashAlg, KhtShape, Node, RangeKey, KHT_DEPTH_MAX};
use maat_crypto::merkle::{leaf_hash, MerkleProof, MerkleTree, Side};
use maat_crypto::{CryptoError, Secret32};
use proptest::prelude::*;

fn members(n: usize, salt: u64) -> Vec<[u8; 8]> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) ^ salt).to_be_bytes())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_member_proves_and_outsiders_do_not(n in 1usize..300, salt in any::<u64>()) {
        let m = members(n, salt);
        let tree = MerkleTree::from_members(&m).unwrap();
        let root = tree.root();
        for (i, member) in m.iter().enumerate() {
            let proof = tree.prove(i).unwrap();
            prop_assert!(proof.steps().len() <= 64);
            proof.verify_member(member, &root).unwrap();
            prop_assert_eq!(proof.verify_member(b"not-a-member", &root), Err(CryptoError::BadMerkleProof));
        }
    }

    #[test]
    fn composing_power_of_two_subtrees_equals_building_from_scratch(k in 0u32..8, right_frac in 0.0f64..1.0, salt in any::<u64>()) {
        let left_len = 1usize << k;
        let right_len = ((left_len as f64 * right_frac).floor() as usize).clamp(1, left_len);
        let all = members(left_len + right_len, salt);
        let left = MerkleTree::from_members(&all[..left_len]).unwrap();
        let right = MerkleTree::from_members(&all[left_len..]).unwrap();
        let composed = MerkleTree::from_nodes(vec![left.root(), right.root()]).unwrap();
        let scratch = MerkleTree::from_members(&all).unwrap();
        prop_assert_eq!(composed.root(), scratch.root());
    }

    #[test]
    fn composed_trees_give_chained_proofs(sizes in proptest::collection::vec(1usize..40, 1..6), extra in 0usize..4, salt in any::<u64>()) {
        // Group trees (cached) plus individual users, composed into one tree (paper 000 §3.3).
        let groups: Vec<Vec<[u8; 8]>> = sizes.iter().enumerate().map(|(g, n)| members(*n, salt ^ g as u64)).collect();
        let trees: Vec<MerkleTree> = groups.iter().map(|g| MerkleTree::from_members(g).unwrap()).collect();
        let singles = members(extra, !salt);
        let mut nodes: Vec<[u8; 32]> = trees.iter().map(MerkleTree::root).collect();
        nodes.extend(singles.iter().map(|s| leaf_hash(s)));
        let outer = MerkleTree::from_nodes(nodes).unwrap();
        let root = outer.root();
        for (g, tree) in trees.iter().enumerate() {
            for (i, member) in groups[g].iter().enumerate() {
                let proof = tree.prove(i).unwrap().then(outer.prove(g).unwrap()).unwrap();
                proof.verify_member(member, &root).unwrap();
            }
            // A group root is not itself a member.
            prop_assert!(outer.prove(g).unwrap().verify_member(&tree.root(), &root).is_err());
        }
        for (j, single) in singles.iter().enumerate() {
            outer.prove(trees.len() + j).unwrap().verify_member(single, &root).unwrap();
        }
    }
}

#[test]
fn merkle_refuses_empty_and_deep_proofs() {
    assert!(matches!(
        MerkleTree::from_members::<[u8; 1]>(&[]),
        Err(CryptoError::InvalidMerkle(_))
    ));
    let steps = vec![(Side::Left, [0u8; 32]); 65];
    assert!(matches!(
        MerkleProof::from_steps(steps),
        Err(CryptoError::TooLarge { .. })
    ));
}

#[test]
fn merkle_leaf_and_inner_are_domain_separated() {
    // A two-member tree's root must differ from the leaf hash of the two hashes concatenated.
    let t = MerkleTree::from_members(&[b"a", b"b"]).unwrap();
    let concat = [leaf_hash(b"a"), leaf_hash(b"b")].concat();
    assert_ne!(t.root(), leaf_hash(&concat));
}

fn shape_strategy() -> impl Strategy<Value = KhtShape> {
    (
        prop_oneof![Just(KeyedHashAlg::Blake3), Just(KeyedHashAlg::HmacSha256)],
        9u8..13,
        proptest::collection::vec(1u8..4, 0..5),
    )
        .prop_map(|(alg, leaf, branching)| KhtShape::new(alg, leaf, branching).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn shape_encoding_round_trips(shape in shape_strategy()) {
        let bytes = shape.encode();
        prop_assert_eq!(bytes.len(), 4 + (usize::from(shape.depth()) - 1).div_ceil(2));
        prop_assert_eq!(KhtShape::decode(&bytes).unwrap(), shape);
    }

    #[test]
    fn shape_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Ok(shape) = KhtShape::decode(&bytes) {
            prop_assert_eq!(shape.encode(), bytes);
        }
    }

    #[test]
    fn cover_derives_exactly_the_range(shape in shape_strategy(), start_frac in 0.0f64..1.0, len_frac in 0.0f64..1.0, root_seed in any::<[u8; 32]>()) {
        let root = Secret32::from_bytes(root_seed);
        let leaf = shape.leaf_size_bytes();
        let region0 = 1u64 << shape.region_size_log2(0).unwrap();
        // Ranges over the first three level-0 regions, so partial nodes at both ends occur.
        let span = (3 * region0).min(4096 * leaf);
        let start = (span as f64 * start_frac) as u64;
        let end = start + 1 + ((span - start) as f64 * len_frac) as u64;
        let cover = shape.cover(start, end).unwrap();
        let first_leaf = start / leaf;
        let end_leaf = (end - 1) / leaf + 1;
        let leaf_level = shape.leaf_level();

        // The cover's leaves are disjoint, ascending, and exactly [first_leaf, end_leaf).
        let mut next = first_leaf;
        let range_keys: Vec<RangeKey> = cover.iter().map(|n| RangeKey { node: *n, key: shape.node_key_from_root(&root, *n).unwrap() }).collect();
        for rk in &range_keys {
            let (a, b) = shape.leaves_under(rk.node).unwrap();
            prop_assert_eq!(a, next);
            next = b;
            // Minimality: a node's parent is never wholly inside the range.
            if rk.node.level > 0 {
                let parent = shape.node_at(rk.node.level - 1, a * leaf).unwrap();
                let (pa, pb) = shape.leaves_under(parent).unwrap();
                prop_assert!(pa < first_leaf || pb > end_leaf, "cover not minimal at {:?}", rk.node);
            }
            // Every leaf below the range key agrees with derivation from the root.
            for l in a..b.min(a + 64) {
                let target = Node { level: leaf_level, index: l };
                let from_range = shape.derive(rk, target).unwrap().key;
                prop_assert_eq!(&from_range, &shape.node_key_from_root(&root, target).unwrap());
            }
            // No range key derives a leaf outside the range.
            for outside in [first_leaf.checked_sub(1), Some(end_leaf)].into_iter().flatten() {
                let target = Node { level: leaf_level, index: outside };
                prop_assert!(matches!(shape.derive(rk, target), Err(CryptoError::OutOfRange(_))));
            }
            // Nor a node above itself.
            if rk.node.level > 0 {
                let up = Node { level: rk.node.level - 1, index: rk.node.index };
                prop_assert!(shape.derive(rk, up).is_err());
            }
        }
        prop_assert_eq!(next, end_leaf);
    }
}

#[test]
fn keys_exist_past_end_of_file_and_differ() {
    let shape = KhtShape::default_shape();
    let root = Secret32::from_bytes([3; 32]);
    let far = shape.node_at(shape.leaf_level(), 1 << 50).unwrap();
    let near = shape.node_at(shape.leaf_level(), 0).unwrap();
    let a = shape.node_key_from_root(&root, far).unwrap();
    let b = shape.node_key_from_root(&root, near).unwrap();
    assert_ne!(a, b);
    // Changing the keyed hash changes every key.
    let hmac_shape = KhtShape::new(KeyedHashAlg::HmacSha256, 12, vec![3; 10]).unwrap();
    assert_ne!(hmac_shape.node_key_from_root(&root, near).unwrap(), b);
}

#[test]
fn shape_limits_are_enforced() {
    assert!(KhtShape::new(KeyedHashAlg::Blake3, 8, vec![]).is_err());
    assert!(KhtShape::new(KeyedHashAlg::Blake3, 12, vec![1; KHT_DEPTH_MAX]).is_err());
    assert!(KhtShape::new(KeyedHashAlg::Blake3, 12, vec![0]).is_err());
    assert!(KhtShape::new(KeyedHashAlg::Blake3, 30, vec![16, 16, 1]).is_err());
    assert!(
        KhtShape::decode(&[1, 1, 12, 2, 0x01]).is_err(),
        "padding nibble must be zero"
    );
    assert!(KhtShape::decode(&[2, 1, 12, 1]).is_err(), "unknown version");
    assert!(
        KhtShape::decode(&[1, 9, 12, 1]).is_err(),
        "unknown keyed hash"
    );
    assert!(matches!(
        KhtShape::default_shape().cover(5, 5),
        Err(CryptoError::OutOfRange(_))
    ));
    // A cover over too many level-0 regions is refused, not allocated.
    let small = KhtShape::new(KeyedHashAlg::Blake3, 9, vec![]).unwrap();
    assert!(matches!(
        small.cover(0, u64::MAX),
        Err(CryptoError::TooLarge { .. })
    ));
}

#[test]
fn paper_example_blocks_1_to_3() {
    // Paper 004 §3.1: with branching 2 and leaves at level 3, blocks 1..=3 are covered by
    // {K(3,1), K(2,1)}. (In our shape a level-0 region here spans 8 blocks, so the first 8
    // blocks are one level-0 key; the paper's figure draws one more level above.)
    let shape = KhtShape::new(KeyedHashAlg::Blake3, 12, vec![1, 1, 1]).unwrap();
    let cover = shape.cover(4096, 4 * 4096).unwrap();
    assert_eq!(
        cover,
        vec![Node { level: 3, index: 1 }, Node { level: 2, index: 1 }]
    );
    let cover = shape.cover(0, 8 * 4096).unwrap();
    assert_eq!(cover, vec![Node { level: 0, index: 0 }]);
}
