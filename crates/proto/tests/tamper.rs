//! Exhaustive tamper test: for every token, every byte position, every one of the 255
//! non-zero XOR masks: the receiver's full check must refuse the result.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

fn exhaustive(name: &str) {
    let fixtures = common::fixtures();
    let f = fixtures.iter().find(|f| f.name == name).unwrap();
    (f.check)(&f.bytes).unwrap_or_else(|e| panic!("{name} does not verify untouched: {e}"));
    let mut buf = f.bytes.clone();
    for i in 0..buf.len() {
        for mask in 1..=255u8 {
            buf[i] ^= mask;
            assert!(
                (f.check)(&buf).is_err(),
                "{name}: byte {i} ^ {mask:#04x} accepted"
            );
            buf[i] ^= mask;
        }
    }
    // Truncation at every length and one extra byte are refused too.
    for len in 0..buf.len() {
        assert!(
            (f.check)(&buf[..len]).is_err(),
            "{name}: truncated to {len} accepted"
        );
    }
    buf.push(0);
    assert!((f.check)(&buf).is_err(), "{name}: trailing byte accepted");
}

macro_rules! tamper_tests {
    ($($name:ident),* $(,)?) => { $( #[test] fn $name() { exhaustive(stringify!($name)); } )* };
}

tamper_tests!(
    login_ticket,
    session_offer,
    session_confirm,
    capability_explicit,
    capability_merkle,
    merkle_tree_message,
    renewal_token,
    revocation_notice,
    file_handle,
    key_lifetime_token,
    proof_token_sealed,
    t10_capability,
    t10_request_icv,
    set_key,
    set_master_key_offer,
    set_master_key_accept,
    lockbox,
    range_key_grant,
);

#[test]
fn every_fixture_has_a_tamper_test() {
    let names: Vec<&str> = common::fixtures().iter().map(|f| f.name).collect();
    assert_eq!(
        names.len(),
        18,
        "add the new token to tamper_tests!: {names:?}"
    );
}
