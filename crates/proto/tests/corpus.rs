//! Replays the fuzz corpus (fuzz/corpus/<target>/*) under stable `cargo test`: every file
//! goes through every decoder. Seeds come from the token fixtures
//! (`MAAT_BLESS=1 cargo test -p maat-proto --test corpus` rewrites them); files that
//! cargo-fuzz finds are committed beside them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use maat_proto::decoders;
use maat_proto::delegation::{computation_key_hash, ProofToken};
use maat_proto::signed;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn target_of(fixture: &str) -> Option<&'static str> {
    Some(match fixture {
        "capability_explicit" | "capability_merkle" => "capability",
        "proof_token_sealed" | "t10_request_icv" => return None,
        other => decoders::ALL.iter().find(|(n, _)| *n == other)?.0,
    })
}

fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out: Vec<_> = common::fixtures()
        .into_iter()
        .filter_map(|f| Some((target_of(f.name)?, format!("seed-{}", f.name), f.bytes)))
        .collect();
    let k = common::keys();
    let proof = ProofToken {
        key_hash: computation_key_hash(&k.computation.verifying_key().to_bytes()),
        osd: common::OSD,
        session_id: [5; 16],
    };
    out.push((
        "proof_token",
        "seed-proof_token".into(),
        signed::sign(proof, &k.computation).encoded().to_vec(),
    ));
    out
}

#[test]
fn corpus_replays_through_every_decoder() {
    if std::env::var_os("MAAT_BLESS").is_some() {
        for (target, name, bytes) in seeds() {
            let dir = corpus_dir().join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut files = 0;
    for (target, _) in decoders::ALL {
        let dir = corpus_dir().join(target);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .collect();
        assert!(!entries.is_empty(), "fuzz corpus for {target} is empty");
        for entry in entries {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            for (_, decode) in decoders::ALL {
                decode(&data);
            }
            files += 1;
        }
    }
    assert!(files >= decoders::ALL.len());
}

#[test]
fn seeds_decode_with_their_own_decoder() {
    // The seeds are valid tokens, so each must decode (and re-encode canonically).
    for (target, name, bytes) in seeds() {
        let (_, decode) = decoders::ALL.iter().find(|(n, _)| *n == target).unwrap();
        decode(&bytes);
        let committed = std::fs::read(corpus_dir().join(target).join(&name)).unwrap();
        assert_eq!(
            committed, bytes,
            "{target}/{name} is stale: bless the corpus"
        );
    }
}
