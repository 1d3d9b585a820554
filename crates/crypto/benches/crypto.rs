//! Criterion benchmarks of the cryptographic core (figures in docs/PERFORMANCE.md).
//! Run: `cargo bench -p maat-crypto --bench crypto`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use maat_crypto::aead::BlockKey;
use maat_crypto::kht::{KhtShape, Node, RangeKey};
use maat_crypto::mac::MacKey;
use maat_crypto::merkle::MerkleTree;
use maat_crypto::sign::{self, BatchItem, SigningKey};
use maat_crypto::Secret32;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::time::Duration;

fn signatures(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let key = SigningKey::generate(&mut rng);
    let public = key.verifying_key();
    let msg = [7u8; 157];
    let sig = key.sign(&msg);
    let mut g = c.benchmark_group("ed25519");
    g.bench_function("sign", |b| b.iter(|| key.sign(black_box(&msg))));
    g.bench_function("verify", |b| {
        b.iter(|| public.verify(black_box(&msg), &sig).unwrap())
    });
    let keys: Vec<SigningKey> = (0..64).map(|_| SigningKey::generate(&mut rng)).collect();
    let publics: Vec<_> = keys.iter().map(SigningKey::verifying_key).collect();
    let messages: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 157]).collect();
    let sigs: Vec<_> = keys.iter().zip(&messages).map(|(k, m)| k.sign(m)).collect();
    let items: Vec<BatchItem<'_>> = (0..64)
        .map(|i| BatchItem {
            message: &messages[i],
            signature: &sigs[i],
            key: &publics[i],
        })
        .collect();
    g.throughput(Throughput::Elements(64));
    g.bench_function("verify_batch_64", |b| {
        b.iter(|| sign::verify_batch(black_box(&items)).unwrap())
    });
    g.finish();
}

fn macs(c: &mut Criterion) {
    let key = MacKey::new(Secret32::from_bytes([3; 32]));
    let msg = [9u8; 100];
    let mut g = c.benchmark_group("hmac_sha256");
    g.throughput(Throughput::Bytes(100));
    g.bench_function("tag_100B", |b| b.iter(|| key.tag(&[black_box(&msg)])));
    g.finish();
}

fn aead(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let block_key = BlockKey::new(Secret32::from_bytes([4; 32]));
    let ring_key = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &[4; 32]).unwrap(),
    );
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    let rust_key = aes_gcm::Aes256Gcm::new_from_slice(&[4; 32]).unwrap();
    let mut g = c.benchmark_group("aead");
    for size in [4096usize, 16384, 1 << 20] {
        g.throughput(Throughput::Bytes(size as u64));
        let plain = vec![0x5au8; size];
        let mut buf = Vec::with_capacity(size + 64);
        g.bench_with_input(
            BenchmarkId::new("ring_aes256gcm_seal", size),
            &size,
            |b, _| {
                let mut counter = 0u64;
                b.iter(|| {
                    buf.clear();
                    buf.extend_from_slice(&plain);
                    counter += 1;
                    let mut nonce = [0u8; 12];
                    nonce[4..].copy_from_slice(&counter.to_be_bytes());
                    ring_key
                        .seal_in_place_append_tag(
                            ring::aead::Nonce::assume_unique_for_key(nonce),
                            ring::aead::Aad::empty(),
                            &mut buf,
                        )
                        .unwrap();
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("rustcrypto_aes256gcm_seal", size),
            &size,
            |b, _| {
                b.iter(|| {
                    buf.clear();
                    buf.extend_from_slice(&plain);
                    rust_key
                        .encrypt_in_place(aes_gcm::Nonce::from_slice(&[1u8; 12]), b"", &mut buf)
                        .unwrap();
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("block_seal", size), &size, |b, _| {
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(&plain);
                block_key
                    .seal_in_place(7, b"file", &mut buf, &mut rng)
                    .unwrap();
            })
        });
        let sealed = block_key.seal(7, b"file", &plain, &mut rng).unwrap();
        let mut work = sealed.clone();
        g.bench_with_input(BenchmarkId::new("block_open", size), &size, |b, _| {
            b.iter(|| {
                work.copy_from_slice(&sealed);
                block_key
                    .open_in_place(7, b"file", &mut work)
                    .unwrap()
                    .len()
            })
        });
    }
    g.finish();
}

fn key_tree(c: &mut Criterion) {
    let shape = KhtShape::default_shape(); // 4 KiB leaves, branching 8, 11 levels
    let root = Secret32::from_bytes([5; 32]);
    let leaf = Node {
        level: shape.leaf_level(),
        index: 123_456,
    };
    let level0 = shape.node_at(0, 123_456 * 4096).unwrap();
    let range = RangeKey {
        node: level0,
        key: shape.node_key_from_root(&root, level0).unwrap(),
    };
    let mut g = c.benchmark_group("kht");
    g.bench_function("leaf_from_root_depth11", |b| {
        b.iter(|| shape.node_key_from_root(&root, black_box(leaf)).unwrap())
    });
    g.bench_function("leaf_from_level0_range_key", |b| {
        b.iter(|| shape.derive(&range, black_box(leaf)).unwrap())
    });
    g.bench_function("cover_1GiB_unaligned", |b| {
        b.iter(|| {
            shape
                .cover(black_box(4096 * 3), (1 << 30) + 4096 * 5)
                .unwrap()
        })
    });
    g.finish();
}

fn merkle(c: &mut Criterion) {
    let mut g = c.benchmark_group("merkle_build");
    for n in [10u64, 1000, 100_000] {
        let members: Vec<[u8; 9]> = (0..n)
            .map(|i| {
                let mut m = [1u8; 9];
                m[1..].copy_from_slice(&i.to_be_bytes());
                m
            })
            .collect();
        g.throughput(Throughput::Elements(n));
        g.bench_with_input(BenchmarkId::from_parameter(n), &members, |b, m| {
            b.iter(|| MerkleTree::from_members(m).unwrap().root())
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! { name = benches; config = config(); targets = signatures, macs, aead, key_tree, merkle }
criterion_main!(benches);
