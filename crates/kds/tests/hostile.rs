//! Hostile key requests never panic the KDS and always get an answer that decodes: the
//! fuzz corpus (fuzz/corpus/kds_request, and every frame the frame target found), random
//! bytes, and structurally valid requests behind a valid ticket whose capabilities,
//! lockboxes, trees and nodes are garbage, which the KDS must refuse file by file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_kds::fuzzing::Target;
use maat_proto::msg::{self, ErrorCode, FileKeysRequest, KdsResponse, WireError};
use proptest::prelude::*;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| std::fs::read(e.path()).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

fn garbage_files() -> Vec<FileKeysRequest> {
    vec![
        FileKeysRequest {
            capability: vec![1; 200],
            lockbox: vec![2; 150],
            trees: vec![vec![3; 64]],
            nodes: vec![(0, 0), (9, u64::MAX)],
            key_ranges: Some(vec![4; 130]),
        },
        FileKeysRequest {
            capability: Vec::new(),
            lockbox: Vec::new(),
            trees: Vec::new(),
            nodes: Vec::new(),
            key_ranges: None,
        },
    ]
}

#[test]
fn the_corpus_and_its_seeds_get_answers() {
    let target = Target::new().unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let seeds = [("garbage-files", msg::encode(&garbage_files()).unwrap())];
    if std::env::var_os("MAAT_BLESS").is_some() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/kds_request");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
        }
    }
    let kds_corpus = corpus("kds_request");
    assert!(!kds_corpus.is_empty(), "fuzz/corpus/kds_request has seeds");
    let mut n = 0;
    for data in kds_corpus.iter().chain(&corpus("frame")) {
        target.run(data, &mut rng);
        n += 1;
    }
    assert!(n > kds_corpus.len(), "the frame corpus was replayed too");
}

#[test]
fn garbage_behind_a_valid_ticket_is_refused_file_by_file() {
    // Through the public entry point (`handle`), with the ticket the target signed.
    let target = Target::new().unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let answer = target.answer_with_ticket(&garbage_files(), &mut rng);
    let Ok(KdsResponse::Grants(grants)) =
        msg::decode::<Result<KdsResponse, WireError>>(&answer).unwrap()
    else {
        panic!("the ticket is valid: the request is answered file by file");
    };
    // Garbage tokens are malformed; a file asking for no node is refused before any
    // token is looked at.
    let codes: Vec<ErrorCode> = grants.into_iter().map(|g| g.unwrap_err().code).collect();
    assert_eq!(codes, vec![ErrorCode::Malformed, ErrorCode::TooLarge]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn random_bytes_get_answers(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let target = Target::new().unwrap();
        target.run(&data, &mut ChaCha20Rng::seed_from_u64(3));
    }
}
