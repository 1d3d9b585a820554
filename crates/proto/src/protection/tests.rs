//! Tests of the protected envelopes: what each method protects, responses bound to their
//! request, digests, vectors, and decoding arbitrary bytes.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use rand_chacha::rand_core::SeedableRng;

const SID: [u8; 16] = [5; 16];
const NONCE: [u8; 16] = [6; 16];

/// Every sealing a receiver takes: each method as sent now, and ALLDATA over the data
/// itself (the layout before digests).
const SEALINGS: [Sealing; 5] = [
    Sealing {
        method: Protection::CapKey,
        data_digest: false,
    },
    Sealing {
        method: Protection::CmdRsp,
        data_digest: false,
    },
    Sealing {
        method: Protection::AllData,
        data_digest: true,
    },
    Sealing {
        method: Protection::AllData,
        data_digest: false,
    },
    Sealing {
        method: Protection::Confidential,
        data_digest: false,
    },
];

fn sealed(sealing: Sealing) -> (EnvelopeKeys, Vec<u8>) {
    let keys = EnvelopeKeys::new(&[9; 32]);
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let h = RequestHeader {
        method: sealing.method,
        data_digest: sealing.data_digest,
        session_id: SID,
        timestamp: UnixMillis(1000),
        nonce: NONCE,
    };
    let p = seal_request(&keys, &h, b"CAP+command", b"bulk data", b"CAP", &mut rng).unwrap();
    (keys, p)
}

/// What each method promises for requests: which byte positions a change must be
/// detected at (header, message, data).
#[test]
fn each_method_protects_exactly_what_it_promises() {
    for sealing in SEALINGS {
        let method = sealing.method;
        let (keys, p) = sealed(sealing);
        assert_eq!(p[0], sealing.byte());
        let opened = UnverifiedRequest::decode(&p)
            .unwrap()
            .open_digested(&keys, b"CAP")
            .unwrap();
        assert_eq!(
            (opened.message.as_slice(), opened.data.as_slice()),
            (&b"CAP+command"[..], &b"bulk data"[..])
        );
        let digest = sealing.data_digest.then(|| data_digest(b"bulk data"));
        assert_eq!(opened.digest, digest, "{sealing:?}");
        let message_at = REQUEST_HEADER_BYTES + 5; // inside "command"
        let data_at = REQUEST_HEADER_BYTES + 11 + 2;
        for (at, what) in [
            (3usize, "header"),
            (message_at, "message"),
            (data_at, "data"),
        ] {
            let mut t = p.clone();
            t[at] ^= 1;
            let accepted = UnverifiedRequest::decode(&t)
                .and_then(|r| r.open(&keys, b"CAP"))
                .is_ok();
            let protected = match (method, what) {
                (Protection::CapKey, "header") => true,
                (Protection::CapKey, _) => false,
                (Protection::CmdRsp, "data") => false,
                _ => true,
            };
            assert_eq!(accepted, !protected, "{sealing:?} {what}");
        }
        // The method byte is covered: a digest envelope read as the legacy layout (or
        // the reverse), or turned into another method, is refused.
        for other in [0x03, 0x83, 0x02, 0x82, 0x84] {
            if other == p[0] {
                continue;
            }
            let mut t = p.clone();
            t[0] = other;
            let accepted = UnverifiedRequest::decode(&t)
                .and_then(|r| r.open(&keys, b"CAP"))
                .is_ok();
            assert!(!accepted, "{sealing:?} as byte {other:#x}");
        }
        if method == Protection::Confidential {
            assert!(!p.windows(9).any(|w| w == b"bulk data"));
        }
    }
}

#[test]
fn responses_are_bound_to_method_session_and_request() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
    let keys = EnvelopeKeys::new(&[9; 32]);
    for method in SEALINGS {
        let p = seal_response(
            &keys,
            method,
            &SID,
            &NONCE,
            UnixMillis(7),
            b"ok",
            b"DATA",
            &mut rng,
        )
        .unwrap();
        let (t, m, d) = open_response(&keys, method, &SID, &NONCE, &p).unwrap();
        assert_eq!(
            (t.0, m.as_slice(), d.as_slice()),
            (7, &b"ok"[..], &b"DATA"[..])
        );
        assert_eq!(
            open_response_owned(&keys, method, &SID, &NONCE, p.clone()).unwrap(),
            (t, m.clone(), d.clone())
        );
        assert!(open_response(&keys, method, &[1; 16], &NONCE, &p).is_err());
        assert!(open_response(&keys, method, &SID, &[1; 16], &p).is_err());
        for other in SEALINGS.into_iter().filter(|s| *s != method) {
            assert!(
                open_response(&keys, other, &SID, &NONCE, &p).is_err(),
                "{method:?} opened as {other:?}"
            );
        }
        let mut t = p.clone();
        t[RESPONSE_HEADER_BYTES + 3] ^= 1; // inside the data (or the AEAD body)
        let detected = open_response(&keys, method, &SID, &NONCE, &t).is_err();
        let data_protected = method.method >= Protection::AllData;
        assert_eq!(detected, data_protected, "{method:?}");
        assert_eq!(
            open_response_owned(&keys, method, &SID, &NONCE, t.clone()).is_err(),
            detected
        );
    }
}

/// An ALLDATA answer sealed from a kept digest, its data sent apart, opens like one
/// sealed over the data; a kept digest that does not match the data sent (a stale
/// one, or data changed on the way) fails the receiver's check.
#[test]
fn answers_sealed_from_a_kept_digest_check_the_data_sent() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
    let keys = EnvelopeKeys::new(&[9; 32]);
    let sealing = Sealing::current(Protection::AllData);
    let seal = |digest: &DataDigest, rng: &mut rand_chacha::ChaCha20Rng| {
        seal_response_parts(
            &keys,
            sealing,
            &SID,
            &NONCE,
            UnixMillis(7),
            b"ok",
            Vec::new(),
            Some(digest),
            rng,
        )
        .unwrap()
    };
    let [first, empty, trailer] = seal(&data_digest(b"DATA"), &mut rng);
    assert!(empty.is_empty());
    let sent = [first.as_slice(), b"DATA", &trailer].concat();
    let (_, m, d) = open_response(&keys, sealing, &SID, &NONCE, &sent).unwrap();
    assert_eq!((m.as_slice(), d.as_slice()), (&b"ok"[..], &b"DATA"[..]));
    let [first, _, trailer] = seal(&data_digest(b"OLD!"), &mut rng);
    let stale = [first.as_slice(), b"DATA", &trailer].concat();
    assert!(matches!(
        open_response(&keys, sealing, &SID, &NONCE, &stale),
        Err(ProtoError::BadMac { .. })
    ));
    let legacy = Sealing {
        method: Protection::AllData,
        data_digest: false,
    };
    assert!(open_response(&keys, legacy, &SID, &NONCE, &sent).is_err());
}

/// ALLDATA over a digest, computed independently with Python's `blake3` package
/// (docs/PROTOCOL.md gives the inputs).
#[test]
fn digest_envelope_vectors() {
    let keys = EnvelopeKeys::new(&[7; 32]);
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(0);
    let sealing = Sealing::current(Protection::AllData);
    let header = RequestHeader {
        method: sealing.method,
        data_digest: sealing.data_digest,
        session_id: [9; 16],
        timestamp: UnixMillis(1_795_305_600_000),
        nonce: [8; 16],
    };
    let request = seal_request(&keys, &header, b"hello", b"bulk data", b"", &mut rng).unwrap();
    assert_eq!(
        hex::encode(&request),
        "8309090909090909090909090909090909000001a2008d740008080808080808080808080808080808\
         0000000568656c6c6f62756c6b20646174610ba40a80d6ba8944173f89b77aea44fc0cb477f8eec6\
         5c00cbfbdd377b4a86c1"
    );
    let response = seal_response(
        &keys,
        sealing,
        &[9; 16],
        &[8; 16],
        UnixMillis(1_795_305_600_000),
        b"ok",
        b"bulk data",
        &mut rng,
    )
    .unwrap();
    assert_eq!(
        hex::encode(&response),
        "8308080808080808080808080808080808000001a2008d7400000000026f6b62756c6b2064617461\
         6c82b8ea26445339fdce46ee8fc8b51628e17dad3add2bcc0a0186a934c7c5b9"
    );
}

#[test]
fn the_digest_bit_is_refused_on_methods_that_do_not_cover_data() {
    for b in [0x81u8, 0x82, 0x84, 0x80] {
        assert_eq!(Sealing::from_byte(b), None, "{b:#x}");
    }
    assert_eq!(
        Sealing::from_byte(0x83),
        Some(Sealing::current(Protection::AllData))
    );
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(4);
    let keys = EnvelopeKeys::new(&[9; 32]);
    let header = RequestHeader {
        method: Protection::CmdRsp,
        data_digest: true,
        session_id: SID,
        timestamp: UnixMillis(1),
        nonce: NONCE,
    };
    assert!(seal_request(&keys, &header, b"m", b"d", b"", &mut rng).is_err());
    // Nor is a response opened so, even one MACed with the byte 0x82.
    let mut head = vec![0x82];
    head.extend_from_slice(&NONCE);
    head.extend_from_slice(&1u64.to_be_bytes());
    head.extend_from_slice(&2u32.to_be_bytes());
    let ctx = [RESPONSE_CONTEXT, &SID[..]].concat();
    let tag = keys.mac.tag(&[&ctx, &head, b"ok"]);
    let p = [&head[..], b"ok", &tag].concat();
    let bad = Sealing {
        method: Protection::CmdRsp,
        data_digest: true,
    };
    assert!(open_response(&keys, bad, &SID, &NONCE, &p).is_err());
}

proptest::proptest! {
    /// Arbitrary bytes never panic the envelope decoders, under every method byte.
    #[test]
    fn arbitrary_envelopes_are_refused_without_panicking(
        method in proptest::prop_oneof![0u8..6, 0x80u8..0x86],
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
    ) {
        let keys = EnvelopeKeys::new(&[3; 32]);
        let mut payload = vec![method];
        payload.extend_from_slice(&body);
        if let Ok(r) = UnverifiedRequest::decode(&payload) {
            let _ = r.peek_message();
            proptest::prop_assert!(r.open(&keys, b"").is_err());
        }
        for m in Protection::ALL {
            let sealing = Sealing { method: m, data_digest: false };
            proptest::prop_assert!(open_response(&keys, sealing, &SID, &NONCE, &payload).is_err());
            let current = Sealing::current(m);
            proptest::prop_assert!(open_response(&keys, current, &SID, &NONCE, &payload).is_err());
        }
    }
}

/// The copies of one change share one digest of their data: sealed with it, an envelope
/// is the one sealed by hashing the data itself, and the receiver opens it; sealed with
/// any other digest, the receiver refuses it.
#[test]
fn a_request_sealed_with_a_shared_digest_is_the_same_envelope_and_a_wrong_one_is_refused() {
    let keys = EnvelopeKeys::new(&[9; 32]);
    let header = RequestHeader {
        method: Protection::AllData,
        data_digest: true,
        session_id: SID,
        timestamp: UnixMillis(1000),
        nonce: NONCE,
    };
    let data = b"bulk data shared by three copies";
    let seal = |digest: DataDigest| {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        seal_request_parts_digested(&keys, &header, b"m", data, || digest, b"", &mut rng)
            .unwrap()
            .concat()
    };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let hashed = seal_request(&keys, &header, b"m", data, b"", &mut rng).unwrap();
    assert_eq!(seal(data_digest(data)), hashed);
    assert!(UnverifiedRequest::decode(&hashed)
        .unwrap()
        .open(&keys, b"")
        .is_ok());
    let mut wrong = data_digest(data);
    wrong[0] ^= 1;
    assert!(matches!(
        UnverifiedRequest::decode(&seal(wrong))
            .unwrap()
            .open(&keys, b""),
        Err(ProtoError::BadMac { .. })
    ));
}
