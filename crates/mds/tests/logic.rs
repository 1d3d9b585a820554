//! The MDS logic driven in memory (no sockets, no disk): an in-memory `MetaStore`, time and
//! randomness passed in.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_crypto::pake;
use maat_mds::{Mds, MdsConfig, MdsSecrets};
use maat_proto::login;
use maat_proto::msg::{
    self, ErrorCode, MdsPlainRequest, MdsPlainResponse, MdsRequest, MdsResponse, WireError,
};
use maat_proto::UnixMillis;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

mod common;
use common::login::{
    admin_login, call, login_start, opaque_exchange, opaque_login, start_with_cookie, ADMIN_KEY,
    PEER,
};
use common::MemStore;

const T0: u64 = 1_795_305_600_000;

fn config(ticket_millis: u64) -> MdsConfig {
    MdsConfig {
        grouping: maat_mds::grouping::GroupingConfig::default(),
        kds: Vec::new(),
        kds_keys: None,
        encrypt_new_files: false,
        // These tests ask for the modes they mean.
        default_umask: 0,
        default_replicas: 1,
        ticket_lifetime_millis: ticket_millis,
        capability_lifetime_millis: 300_000,
        danger_allow_insecure: false,
        join_key: [0x10; 32],
        default_protection: maat_proto::protection::Protection::AllData,
    }
}

/// An MDS on `store` booted at `boot`, with the fixed secrets and administrator key.
fn open_mds<'a>(
    store: &'a MemStore,
    ticket_millis: u64,
    boot: u64,
    rng: &mut ChaCha20Rng,
) -> Mds<&'a MemStore> {
    Mds::open(
        store,
        config(ticket_millis),
        secrets(),
        &ADMIN_KEY,
        UnixMillis(boot),
        rng,
    )
    .unwrap()
}

/// The same MDS secrets on every start (as the daemon's key files give).
fn secrets() -> MdsSecrets {
    MdsSecrets::generate(&mut ChaCha20Rng::seed_from_u64(99))
}

fn pake_steps(mds: &Mds<&MemStore>) -> u64 {
    mds.stats()
        .counters
        .iter()
        .find(|(k, _)| k == "pake_steps")
        .map(|(_, v)| *v)
        .unwrap()
}

#[test]
fn a_login_start_without_a_valid_cookie_costs_no_group_operation() {
    // SPEC T6: forged first messages (no cookie, a guessed one, one made for another
    // address, an expired one) are answered with a cookie after one keyed hash; only a
    // cookie for this address and time reaches OPAQUE.
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let mds = open_mds(&store, 3_600_000, T0, &mut rng);
    let now = T0 + 1000;
    let (_, ke1) = pake::client_login_start(&ADMIN_KEY, &mut rng).unwrap();
    let keys = ([1; 32], [2; 32]);
    let cookie_at = |peer: &[u8], at: u64, rng: &mut ChaCha20Rng| match login_start(
        &mds, "admin", &ke1, keys, [6; 16], None, peer, at, rng,
    )
    .unwrap()
    {
        MdsPlainResponse::LoginCookie { cookie } => cookie,
        other => panic!("{other:?}"),
    };
    let mine = cookie_at(PEER, now, &mut rng);
    let elsewhere = cookie_at(&[10, 0, 0, 9], now, &mut rng);
    let old = cookie_at(PEER, now - 61_000, &mut rng);
    let before = pake_steps(&mds);
    for forged in [None, Some([0x55; 32]), Some(elsewhere), Some(old)] {
        let answer = login_start(
            &mds, "admin", &ke1, keys, [7; 16], forged, PEER, now, &mut rng,
        );
        assert!(
            matches!(answer, Ok(MdsPlainResponse::LoginCookie { .. })),
            "{answer:?}"
        );
    }
    assert_eq!(
        pake_steps(&mds),
        before,
        "no OPAQUE work without a valid cookie"
    );
    // The cookie works for this address in its slot and the next one.
    for at in [now, now + 29_000] {
        let answer = login_start(
            &mds,
            "admin",
            &ke1,
            keys,
            [8; 16],
            Some(mine),
            PEER,
            at,
            &mut rng,
        );
        assert!(
            matches!(answer, Ok(MdsPlainResponse::OpaqueLoginChallenge { .. })),
            "{answer:?}"
        );
    }
    assert_eq!(pake_steps(&mds), before + 2);
}

/// Logs in as the administrator; returns the session id and envelope key.
#[test]
fn expired_sessions_are_swept_at_start() {
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let boot = T0;
    let mds = open_mds(&store, 60_000, boot, &mut rng);
    let now = boot + 1000;
    let s = admin_login(&mds, now, &mut rng);
    assert!(call(
        &mds,
        &s,
        MdsRequest::Stat { path: "/".into() },
        now + 10,
        1,
        &mut rng
    )
    .is_ok());
    assert_eq!(store.0.lock().unwrap().sessions.len(), 1);
    drop(mds);
    // Restart before expiry: the session survives (persisted).
    let mds = open_mds(&store, 60_000, now + 2000, &mut rng);
    assert!(call(
        &mds,
        &s,
        MdsRequest::Stat { path: "/".into() },
        now + 3000,
        2,
        &mut rng
    )
    .is_ok());
    drop(mds);
    // Restart after expiry: swept from the store.
    let later = now + 120_000;
    let mds = open_mds(&store, 60_000, later, &mut rng);
    assert!(store.0.lock().unwrap().sessions.is_empty());
    let err = call(
        &mds,
        &s,
        MdsRequest::Stat { path: "/".into() },
        later + 1000,
        3,
        &mut rng,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownSession);
}

#[test]
fn mkdir_p_allocates_distinct_inodes_and_login_does_not_reveal_users() {
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let mds = open_mds(&store, 3_600_000, T0, &mut rng);
    let now = T0 + 1000;
    let s = admin_login(&mds, now, &mut rng);
    call(
        &mds,
        &s,
        MdsRequest::Mkdir {
            path: "/a/b/c".into(),
            mode: 0o755,
            parents: true,
            partition: None,
        },
        now,
        1,
        &mut rng,
    )
    .unwrap();
    let ids: Vec<u64> = ["/a", "/a/b", "/a/b/c"]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            match call(
                &mds,
                &s,
                MdsRequest::Stat { path: (*p).into() },
                now,
                10 + i as u8,
                &mut rng,
            )
            .unwrap()
            {
                MdsResponse::Stat(st) => st.id,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    // rmdir of the non-empty middle directory is refused; the leaf goes.
    let err = call(
        &mds,
        &s,
        MdsRequest::Rmdir {
            path: "/a/b".into(),
        },
        now,
        20,
        &mut rng,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotEmpty);
    call(
        &mds,
        &s,
        MdsRequest::Rmdir {
            path: "/a/b/c".into(),
        },
        now,
        21,
        &mut rng,
    )
    .unwrap();

    // A login for an unknown user and a wrong-key login for a known one look the same,
    // also with a stale timestamp.
    for (name, ts) in [("admin", now), ("nobody", now), ("admin", 5), ("nobody", 5)] {
        let req = msg::encode(&MdsPlainRequest::Login {
            name: name.into(),
            signing_key: [1; 32],
            sealing_key: [2; 32],
            timestamp: ts,
            nonce: [9; 16],
            mac: [0; 32],
        })
        .unwrap();
        let answer: Result<MdsPlainResponse, WireError> =
            msg::decode(&mds.handle_plain(PEER, &req, UnixMillis(now), &mut rng)).unwrap();
        let expected = if ts == now {
            ErrorCode::AuthenticationFailed
        } else {
            ErrorCode::StaleRequest
        };
        assert_eq!(answer.unwrap_err().code, expected, "{name} at {ts}");
    }

    // OPAQUE: an unknown user gets a KE2 of the same length as a real one, and both an
    // unknown user and a wrong passphrase fail at KE3 with the same code.
    let ke2_len = |name: &str, rng: &mut ChaCha20Rng| {
        let (_, ke1) = pake::client_login_start(b"x", rng).unwrap();
        let answer = start_with_cookie(&mds, name, ke1, ([1; 32], [2; 32]), [4; 16], now, rng);
        match answer.unwrap() {
            MdsPlainResponse::OpaqueLoginChallenge { ke2, state, .. } => (ke2.len(), state.len()),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(ke2_len("admin", &mut rng).0, ke2_len("nobody", &mut rng).0);
    for (name, password) in [("admin", &[0u8; 32][..]), ("nobody", &ADMIN_KEY[..])] {
        let (answer, _, _) = opaque_login(&mds, name, password, now, &mut rng);
        assert_eq!(
            answer.unwrap_err().code,
            ErrorCode::AuthenticationFailed,
            "{name}"
        );
    }
}

/// A legacy `Login` for `name` with its MAC keyed by `key`, sent at `now`; the answer.
fn legacy_login_with(
    mds: &Mds<&MemStore>,
    name: &str,
    key: [u8; 32],
    nonce: [u8; 16],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> Result<MdsPlainResponse, WireError> {
    let parts = login::login_mac_parts(name, &[1; 32], &[2; 32], now, &nonce);
    let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let mac = maat_crypto::mac::MacKey::new(maat_crypto::Secret32::from_bytes(key)).tag(&refs);
    let req = msg::encode(&MdsPlainRequest::Login {
        name: name.into(),
        signing_key: [1; 32],
        sealing_key: [2; 32],
        timestamp: now,
        nonce,
        mac,
    })
    .unwrap();
    msg::decode(&mds.handle_plain(PEER, &req, UnixMillis(now), rng)).unwrap()
}

#[test]
fn the_decoy_key_logs_nobody_in_and_no_decoy_salt_is_part_of_a_decoy_key() {
    // Issue 40, item 1: the legacy login checked its MAC under a key derived from
    // `decoy.key` for every user without a legacy record, and then issued a ticket: the
    // holder of that file logged in as anyone, the administrator included. Every way of
    // deriving a key from the decoy key, the old one and the new, is tried here.
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let mds = open_mds(&store, 3_600_000, T0, &mut rng);
    let now = T0 + 1000;
    let decoy = *secrets().decoy_key.expose();
    let keyed = |key: &[u8; 32], parts: &[&[u8]]| maat_crypto::hash::blake3_keyed(key, parts);
    let by_context =
        |context: &[u8], name: &str| keyed(&keyed(&decoy, &[context]), &[name.as_bytes()]);
    let candidates = [
        keyed(&decoy, &[b"decoy user key", b"admin"]),
        by_context(b"maat/mds/decoy-key/v2", "admin"),
        by_context(b"maat/mds/decoy-salt/v2", "admin"),
        decoy,
    ];
    for (i, key) in candidates.into_iter().enumerate() {
        let answer = legacy_login_with(&mds, "admin", key, [0x40 + i as u8; 16], now, &mut rng);
        assert_eq!(
            answer.unwrap_err().code,
            ErrorCode::AuthenticationFailed,
            "candidate {i} logged in as the administrator"
        );
    }
    // An unauthenticated LoginStart for a crafted name gives no part of any name's decoy
    // key (before: the salt of "decoy user key" ‖ name was the first half of name's key).
    let salt_for = |name: &str, rng: &mut ChaCha20Rng| {
        let req = msg::encode(&MdsPlainRequest::LoginStart { name: name.into() }).unwrap();
        let answer: Result<MdsPlainResponse, WireError> =
            msg::decode(&mds.handle_plain(PEER, &req, UnixMillis(now), rng)).unwrap();
        match answer.unwrap() {
            MdsPlainResponse::LoginChallenge { salt, .. } => salt,
            other => panic!("{other:?}"),
        }
    };
    for target in ["admin", "alice"] {
        let crafted = format!("decoy user key{target}");
        let salt = salt_for(&crafted, &mut rng);
        for key in [
            keyed(&decoy, &[b"decoy user key", target.as_bytes()]),
            by_context(b"maat/mds/decoy-key/v2", target),
        ] {
            assert_ne!(&key[..16], &salt[..], "a salt leaks {target}'s decoy key");
        }
    }
    // The administrator's real key still logs in (the test can fail).
    let (answer, _, _) = opaque_login(&mds, "admin", &ADMIN_KEY, now, &mut rng);
    assert!(matches!(answer, Ok(MdsPlainResponse::LoginOk { .. })));
}

#[test]
fn a_stolen_store_does_not_log_in() {
    // SPEC M1, T6 (issue 12): everything the store holds about a user, tried as the
    // password, fails; so does the legacy MAC login keyed with any 32 bytes of it.
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let mds = open_mds(&store, 3_600_000, T0, &mut rng);
    let now = T0 + 1000;
    let record = store.0.lock().unwrap().users.get(&1).cloned().unwrap();
    let stored = match &record.credential {
        maat_mds::UserCredential::Opaque { record, .. } => record.clone(),
        other => panic!("{other:?}"),
    };
    let mut guesses: Vec<Vec<u8>> = vec![stored.clone()];
    guesses.extend(stored.chunks(32).map(|c| c.to_vec()));
    for guess in &guesses {
        let (answer, _, _) = opaque_login(&mds, "admin", guess, now, &mut rng);
        assert_eq!(answer.unwrap_err().code, ErrorCode::AuthenticationFailed);
    }
    for (i, chunk) in stored.chunks_exact(32).enumerate() {
        let key: [u8; 32] = chunk.try_into().unwrap();
        let nonce = [i as u8; 16];
        let parts = login::login_mac_parts("admin", &[1; 32], &[2; 32], now, &nonce);
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        let mac = maat_crypto::mac::MacKey::new(maat_crypto::Secret32::from_bytes(key)).tag(&refs);
        let req = msg::encode(&MdsPlainRequest::Login {
            name: "admin".into(),
            signing_key: [1; 32],
            sealing_key: [2; 32],
            timestamp: now,
            nonce,
            mac,
        })
        .unwrap();
        let answer: Result<MdsPlainResponse, WireError> =
            msg::decode(&mds.handle_plain(PEER, &req, UnixMillis(now), &mut rng)).unwrap();
        assert_eq!(answer.unwrap_err().code, ErrorCode::AuthenticationFailed);
    }
    // The real key still works (the test can fail).
    let (answer, _, _) = opaque_login(&mds, "admin", &ADMIN_KEY, now, &mut rng);
    assert!(matches!(answer, Ok(MdsPlainResponse::LoginOk { .. })));
}

/// The OPAQUE registration of `password` for `name`, sealed to `mds`, through `session`.
fn registration(
    mds: &Mds<&MemStore>,
    session: &([u8; 16], maat_crypto::mac::Blake3Mac),
    name: &str,
    password: &[u8],
    now: u64,
    rng: &mut ChaCha20Rng,
) -> Vec<u8> {
    let (state, request) = pake::client_registration_start(password, rng).unwrap();
    let response = match call(
        mds,
        session,
        MdsRequest::RegisterStart {
            name: name.into(),
            request,
        },
        now,
        0x70,
        rng,
    )
    .unwrap()
    {
        MdsResponse::RegistrationResponse { response } => response,
        other => panic!("{other:?}"),
    };
    let counters = maat_crypto::OpCounters::new_handle();
    let (upload, _) = state
        .finish(
            password,
            &response,
            login::KEY_CREDENTIAL_PARAMS,
            &counters,
            rng,
        )
        .unwrap();
    login::seal_registration_upload(&mds.sealing_public_key(), name, &upload, rng).unwrap()
}

/// Issue 40, item 8: `SetCredential` replaced a passphrase without the current one, so a
/// stolen session became a permanent account takeover. A change now proves the current
/// passphrase with an OPAQUE exchange made for the session that asks, once; the old
/// request moves only records from before OPAQUE.
#[test]
fn a_passphrase_changes_only_with_a_fresh_proof_of_the_current_one_for_this_session() {
    let store = MemStore::default();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let mds = open_mds(&store, 3_600_000, T0, &mut rng);
    let now = T0 + 1000;
    let session = admin_login(&mds, now, &mut rng);
    let other_session = admin_login(&mds, now + 1, &mut rng);
    let params: msg::KdfParams = login::KEY_CREDENTIAL_PARAMS.into();
    let new_key = [0x4e; 32];
    let upload = registration(&mds, &session, "admin", &new_key, now, &mut rng);
    let change = |state: Vec<u8>, ke3: Vec<u8>, nonce: u8, rng: &mut ChaCha20Rng| {
        call(
            &mds,
            &session,
            MdsRequest::ChangePassphrase {
                state,
                ke3,
                params,
                sealed_upload: upload.clone(),
            },
            now + 10,
            nonce,
            rng,
        )
    };
    let refused = |r: Result<MdsResponse, WireError>, code: ErrorCode, what: &str| {
        assert_eq!(r.unwrap_err().code, code, "{what}");
    };
    // The old request, as anyone holding a session would send it: refused.
    refused(
        call(
            &mds,
            &session,
            MdsRequest::SetCredential {
                params,
                sealed_upload: upload.clone(),
            },
            now + 5,
            0x71,
            &mut rng,
        ),
        ErrorCode::PermissionDenied,
        "SetCredential for an OPAQUE record",
    );
    let proof_keys = login::passphrase_proof_keys(&session.0);
    // A proof with the wrong current passphrase.
    let (state, ke3, _) = opaque_exchange(
        &mds,
        "admin",
        &[0x55; 32],
        proof_keys,
        [0x21; 16],
        now,
        &mut rng,
    );
    refused(
        change(state, ke3, 0x72, &mut rng),
        ErrorCode::AuthenticationFailed,
        "wrong passphrase",
    );
    // A login's exchange (as captured on the wire): its keys are a login's.
    let (state, ke3, _) = opaque_exchange(
        &mds,
        "admin",
        &ADMIN_KEY,
        ([1; 32], [2; 32]),
        [0x22; 16],
        now,
        &mut rng,
    );
    refused(
        change(state, ke3, 0x73, &mut rng),
        ErrorCode::AuthenticationFailed,
        "a login's exchange",
    );
    // A proof made for another session.
    let (state, ke3, _) = opaque_exchange(
        &mds,
        "admin",
        &ADMIN_KEY,
        login::passphrase_proof_keys(&other_session.0),
        [0x23; 16],
        now,
        &mut rng,
    );
    refused(
        change(state, ke3, 0x74, &mut rng),
        ErrorCode::AuthenticationFailed,
        "another session's proof",
    );
    // A proof for this session, made too long ago.
    let (state, ke3, _) = opaque_exchange(
        &mds,
        "admin",
        &ADMIN_KEY,
        proof_keys,
        [0x24; 16],
        now - 120_000,
        &mut rng,
    );
    refused(
        change(state, ke3, 0x75, &mut rng),
        ErrorCode::AuthenticationFailed,
        "an old proof",
    );
    // The right proof: the change is made, once.
    let (state, ke3, _) = opaque_exchange(
        &mds, "admin", &ADMIN_KEY, proof_keys, [0x25; 16], now, &mut rng,
    );
    assert!(matches!(
        change(state.clone(), ke3.clone(), 0x76, &mut rng),
        Ok(MdsResponse::Ok)
    ));
    refused(
        change(state, ke3, 0x77, &mut rng),
        ErrorCode::ReplayedRequest,
        "the same proof again",
    );
    // The old key no longer logs in, the new one does; the other session has ended.
    let (answer, _, _) = opaque_login(&mds, "admin", &ADMIN_KEY, now + 20, &mut rng);
    assert_eq!(answer.unwrap_err().code, ErrorCode::AuthenticationFailed);
    let (answer, _, _) = opaque_login(&mds, "admin", &new_key, now + 21, &mut rng);
    assert!(matches!(answer, Ok(MdsPlainResponse::LoginOk { .. })));
    let e = call(
        &mds,
        &other_session,
        MdsRequest::Stats,
        now + 22,
        0x78,
        &mut rng,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownSession, "{e:?}");
    assert!(matches!(
        call(&mds, &session, MdsRequest::Stats, now + 23, 0x79, &mut rng),
        Ok(MdsResponse::Stats(_))
    ));
}
