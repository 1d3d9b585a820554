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
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { exhaustive(stringify!($name)); } )*
        /// The fixtures that have a tamper test above.
        const TESTED: &[&str] = &[$(stringify!($name)),*];
    };
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
    set_policy_tag,
    fenced_key_command,
    lockbox,
    lockbox_keyed,
    range_key_grant,
    range_key_grant_keyed,
    key_ranges,
    key_ranges_tree,
    osd_control_key,
    osd_registered_control_mac,
    // Not a token (it travels inside the MACed envelope): every change to its bytes
    // decodes to another request or to none, never to the same one.
    mds_request_once,
);

#[test]
fn every_fixture_has_a_tamper_test() {
    let mut names: Vec<&str> = common::fixtures().iter().map(|f| f.name).collect();
    let mut tested = TESTED.to_vec();
    names.sort_unstable();
    tested.sort_unstable();
    assert_eq!(names, tested, "add the new fixture to tamper_tests!");
}

#[test]
fn every_token_kind_has_a_fixture() {
    // Tokens start `version ‖ kind`; each kind must be among the fixtures tampered with.
    // A token that only ever travels sealed is tampered with in its sealed form.
    const SEALED: &[(&str, maat_proto::Kind)] = &[("proof_token_sealed", maat_proto::Kind::Proof)];
    let fixtures = common::fixtures();
    for kind in maat_proto::signed::Kind::ALL {
        let headed = |f: &common::Fixture| {
            f.bytes.first() == Some(&maat_proto::PROTOCOL_VERSION)
                && f.bytes.get(1) == Some(&(kind as u8))
        };
        assert!(
            fixtures
                .iter()
                .any(|f| headed(f) || SEALED.contains(&(f.name, kind))),
            "no fixture for {} tokens: add one to tests/common and tamper_tests!",
            kind.name()
        );
    }
}
