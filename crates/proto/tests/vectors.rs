//! The committed test vectors: every token, byte for byte, must be reproduced from the
//! fixed inputs, must verify, and must appear in docs/PROTOCOL.md.
//! Regenerate after an intentional format change with `MAAT_BLESS=1 cargo test -p maat-proto --test vectors`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::PathBuf;

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../test-vectors/tokens.txt")
}

fn render() -> String {
    common::fixtures()
        .iter()
        .map(|f| format!("{} {}\n", f.name, hex::encode(&f.bytes)))
        .collect()
}

#[test]
fn vectors_match_committed_file() {
    let rendered = render();
    if std::env::var_os("MAAT_BLESS").is_some() {
        std::fs::write(vectors_path(), &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(vectors_path()).expect("test-vectors/tokens.txt");
    for (got, want) in rendered.lines().zip(committed.lines()) {
        assert_eq!(
            got, want,
            "encoding changed: bless only if the format change is intended"
        );
    }
    assert_eq!(rendered.lines().count(), committed.lines().count());
}

#[test]
fn committed_vectors_verify() {
    let committed = std::fs::read_to_string(vectors_path()).unwrap();
    let fixtures = common::fixtures();
    for line in committed.lines() {
        let (name, hex_bytes) = line.split_once(' ').unwrap();
        let bytes = hex::decode(hex_bytes).unwrap();
        let fixture = fixtures.iter().find(|f| f.name == name).unwrap();
        (fixture.check)(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn vectors_are_documented_in_protocol_md() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/PROTOCOL.md"),
    )
    .unwrap();
    for f in common::fixtures() {
        assert!(
            doc.contains(&hex::encode(&f.bytes)),
            "docs/PROTOCOL.md lacks the vector for {}",
            f.name
        );
    }
}
