//! Criterion benchmarks of encrypted stripes (SPEC H3; figures in docs/PERFORMANCE.md):
//! sealing and opening one 512 KiB stripe with its leaf keys derived from one level-0
//! range key (Horus with an aggregated key), per leaf size, beside the floor of one
//! AES-256-GCM pass over the same bytes with one key (AEAD only, keys known).
//! Run: `cargo bench -p maat-proto --bench stripes`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use maat_crypto::aead::BlockKey;
use maat_crypto::kht::{KeyedHashAlg, KhtShape, Node, RangeKey};
use maat_crypto::Secret32;
use maat_proto::encrypted::{open_stripe, seal_stripe, LeafKeys, StripeContext};
use maat_proto::msg::STRIPE_UNIT_BYTES;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

fn shape(leaf_log2: u8) -> KhtShape {
    // Branching 8 down to the leaves, level-0 regions of at least 4 TiB.
    let levels = (42 - u32::from(leaf_log2)).div_ceil(3) as usize;
    KhtShape::new(KeyedHashAlg::Blake3, leaf_log2, vec![3; levels]).unwrap()
}

fn granted(shape: &KhtShape) -> Vec<RangeKey> {
    let node = Node { level: 0, index: 0 };
    let key = shape
        .node_key_from_root(&Secret32::from_bytes([7; 32]), node)
        .unwrap();
    vec![RangeKey { node, key }]
}

fn stripes(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let plain: Vec<u8> = (0..STRIPE_UNIT_BYTES).map(|i| (i % 251) as u8).collect();
    let context = StripeContext {
        file: 9,
        tree_version: 1,
        stripe: 5,
        generation: 77,
    };
    let mut g = c.benchmark_group("stripe_512k");
    g.throughput(Throughput::Bytes(STRIPE_UNIT_BYTES));
    for leaf_log2 in [12u8, 14, 16] {
        let shape = shape(leaf_log2);
        let keys = granted(&shape);
        let leaf = format!("{} KiB leaves", 1u32 << (leaf_log2 - 10));
        g.bench_with_input(BenchmarkId::new("seal", &leaf), &(), |b, ()| {
            b.iter(|| {
                let mut k = LeafKeys::new(&shape, &keys).unwrap();
                seal_stripe(&mut k, &context, black_box(&plain), &mut rng).unwrap()
            })
        });
        let mut k = LeafKeys::new(&shape, &keys).unwrap();
        let sealed = seal_stripe(&mut k, &context, &plain, &mut rng).unwrap();
        g.bench_with_input(BenchmarkId::new("open", &leaf), &(), |b, ()| {
            b.iter(|| {
                let mut k = LeafKeys::new(&shape, &keys).unwrap();
                open_stripe(&mut k, &context, black_box(sealed.clone()), 0).unwrap()
            })
        });
    }
    // The floor: the same bytes through AES-256-GCM under one key, in 4 KiB blocks (the
    // block format's per-block subkey included) and as one message.
    let key = BlockKey::new(Secret32::from_bytes([9; 32]));
    let blocks: Vec<Vec<u8>> = plain
        .chunks(4096)
        .enumerate()
        .map(|(i, p)| key.seal(i as u64, b"aad", p, &mut rng).unwrap())
        .collect();
    g.bench_function("open/one key, 4 KiB blocks", |b| {
        b.iter(|| {
            for (i, s) in blocks.iter().enumerate() {
                black_box(key.open(i as u64, b"aad", s).unwrap());
            }
        })
    });
    let whole = key.seal(0, b"aad", &plain, &mut rng).unwrap();
    g.bench_function("open/one key, one block", |b| {
        b.iter(|| black_box(key.open(0, b"aad", &whole).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, stripes);
criterion_main!(benches);
