//! Attacks against running daemons: each is refused with its own error code and the
//! daemon keeps serving (checked after every attack with a legitimate read). Each attack
//! is its own test on its own cluster, so one failure hides none of the others.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;
use maat_client::{Client, Opened};
use maat_crypto::sign::SigningKey;
use maat_crypto::OsRng;
use maat_net::Connection;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::msg::{
    self, Access, ErrorCode, MdsRequest, ObjectId, OsdCommand, OsdRequest, OsdResponse, WireError,
    DATA_PARTITION,
};
use maat_proto::signed;
use maat_proto::wire::{self, FrameType};
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};

fn object(opened: &Opened) -> ObjectId {
    ObjectId {
        partition: DATA_PARTITION,
        file: opened.stat.id,
        stripe: 0,
    }
}

fn read_with(
    c: &mut Client,
    osd: u64,
    capability: Vec<u8>,
    object: ObjectId,
) -> Result<OsdResponse, ErrorCode> {
    c.osd_call(
        osd,
        OsdRequest {
            capability,
            command: OsdCommand::Read {
                object,
                offset: 0,
                length: 1024,
            },
        },
    )
    .map_err(|e| e.code().unwrap_or_else(|| panic!("not a refusal: {e}")))
}

/// The daemons still serve: a metadata request reaches the MDS and a read reaches the OSD.
fn still_serves(c: &mut Client, path: &str, expected: &[u8]) {
    assert!(c.stat(path).is_ok(), "MDS stopped serving");
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, expected);
}

fn refusal_code(frame: (FrameType, Vec<u8>)) -> ErrorCode {
    assert_eq!(frame.0, FrameType::Refusal, "expected a refusal frame");
    msg::decode::<WireError>(&frame.1).unwrap().code
}

/// Alice with two files (`a` readable by bob, `b` private) and bob, on a fresh cluster.
struct Fx {
    cluster: Cluster,
    alice: Client,
    bob: Client,
    a: Opened,
    b: Opened,
    osd_a: u64,
    osd_b: u64,
    mds_address: String,
}

fn setup(extra: &[&str]) -> Fx {
    let cluster = Cluster::start(2, extra);
    cluster.add_user("alice", "alice pass", None);
    cluster.add_user("bob", "bob pass", None);
    let mut alice = cluster.user_client("alice", "alice pass");
    let bob = cluster.user_client("bob", "bob pass");
    alice
        .put(&mut &b"file A"[..], 6, "/home/alice/a", &mut |_| {})
        .unwrap();
    alice
        .put(&mut &b"file B"[..], 6, "/home/alice/b", &mut |_| {})
        .unwrap();
    alice.chmod("/home/alice/a", 0o644).unwrap();
    alice.chmod("/home/alice/b", 0o600).unwrap();
    let a = alice.open("/home/alice/a", Access::Read, None).unwrap();
    let b = alice.open("/home/alice/b", Access::Read, None).unwrap();
    let osd_a = alice.place(a.stat.id, 0).unwrap();
    let osd_b = alice.place(b.stat.id, 0).unwrap();
    assert!(
        matches!(read_with(&mut alice, osd_a, a.capability.clone(), object(&a)), Ok(OsdResponse::Data(d)) if d == b"file A")
    );
    let mds_address = cluster.mds_address();
    Fx {
        cluster,
        alice,
        bob,
        a,
        b,
        osd_a,
        osd_b,
        mds_address,
    }
}

/// Alice's session with `osd`, its envelope key, and an encoded read request for `a`.
fn envelope_parts(
    alice: &mut Client,
    osd: u64,
    a: &Opened,
) -> ([u8; 16], maat_crypto::mac::Blake3Mac, Vec<u8>) {
    let (sid, key) = alice.osd_session(osd).unwrap();
    let key = *key.expose();
    let body = msg::encode(&OsdRequest {
        capability: a.capability.clone(),
        command: OsdCommand::Read {
            object: object(a),
            offset: 0,
            length: 100,
        },
    })
    .unwrap();
    (sid, wire::envelope_key(&key), body)
}

#[test]
fn forged_capabilities_are_refused() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        b,
        osd_a,
        osd_b,
        ..
    } = setup(&[]);
    // 1. Forged capability: a byte of the signature flipped, and one signed by another key.
    let mut tampered = a.capability.clone();
    *tampered.last_mut().unwrap() ^= 1;
    assert_eq!(
        read_with(&mut alice, osd_a, tampered, object(&a)).unwrap_err(),
        ErrorCode::BadSignature
    );
    let forger = SigningKey::generate(&mut OsRng);
    let forged = signed::sign(
        Capability {
            users: Principals::User(UserId(alice_uid(&mut alice))),
            files: Files::File(FileId(b.stat.id)),
            id: CapabilityId(1),
            mode: Mode::READ_WRITE,
            protection: maat_proto::protection::Protection::AllData,
            start: UnixMillis(alice.protocol_now() - 1000),
            expiry: UnixMillis(alice.protocol_now() + 60_000),
        },
        &forger,
    );
    assert_eq!(
        read_with(&mut alice, osd_b, forged.encoded().to_vec(), object(&b)).unwrap_err(),
        ErrorCode::BadSignature
    );
    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn a_stolen_capability_is_refused_for_another_user() {
    let Fx {
        cluster: _cluster,
        mut bob,
        b,
        osd_b,
        ..
    } = setup(&[]);
    // 2. A valid capability presented by another user (stolen): bob is not named in it.
    // (Alice's capability for her private file: one for `a`, which all may read, names
    // every user under UNIX grouping.)
    assert_eq!(
        read_with(&mut bob, osd_b, b.capability.clone(), object(&b)).unwrap_err(),
        ErrorCode::WrongUser
    );

    still_serves(&mut bob, "/home/alice/a", b"file A");
}

#[test]
fn a_capability_for_one_file_does_not_reach_another() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        b,
        osd_b,
        ..
    } = setup(&[]);
    // 3. A capability for file A used on an object of file B (confused deputy).
    assert_eq!(
        read_with(&mut alice, osd_b, a.capability.clone(), object(&b)).unwrap_err(),
        ErrorCode::WrongFile
    );

    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn a_read_capability_cannot_write() {
    let Fx {
        cluster: _cluster,
        mut alice,
        bob,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 4. A read capability used to write. (Bob's: he may read alice's 0644 file but not
    // write it. Alice's own read opens may return her cached read-write capability.)
    let bob_read = bob.open("/home/alice/a", Access::Read, None).unwrap();
    assert_eq!(
        signed::Unverified::<Capability>::decode(&bob_read.capability)
            .unwrap()
            .unverified_body()
            .mode,
        Mode::READ
    );
    let w = bob
        .osd_call(
            osd_a,
            OsdRequest {
                capability: bob_read.capability.clone(),
                command: OsdCommand::Write {
                    object: object(&a),
                    offset: 0,
                    data: b"overwritten".to_vec(),
                    replace: true,
                },
            },
        )
        .unwrap_err();
    assert_eq!(w.code(), Some(ErrorCode::PermissionDenied), "{w}");
    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn a_replayed_osd_request_is_refused() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 5. Replayed request: the same sealed envelope twice.
    let (sid, key, body) = envelope_parts(&mut alice, osd_a, &a);
    let nonce = [42u8; 16];
    let sealed = wire::seal_request(&key, &sid, UnixMillis(alice.protocol_now()), &nonce, &body);
    let first = alice.osd_raw(osd_a, FrameType::Request, &sealed).unwrap();
    assert_eq!(first.0, FrameType::Response);
    let second = alice.osd_raw(osd_a, FrameType::Request, &sealed).unwrap();
    assert_eq!(refusal_code(second), ErrorCode::ReplayedRequest);

    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn tampered_osd_requests_are_refused() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 6. Tampered MAC, and a tampered body under the original MAC.
    let (sid, key, body) = envelope_parts(&mut alice, osd_a, &a);
    let mut bad_mac = wire::seal_request(
        &key,
        &sid,
        UnixMillis(alice.protocol_now()),
        &[43u8; 16],
        &body,
    );
    *bad_mac.last_mut().unwrap() ^= 0x80;
    assert_eq!(
        refusal_code(alice.osd_raw(osd_a, FrameType::Request, &bad_mac).unwrap()),
        ErrorCode::BadMac
    );
    let mut bad_body = wire::seal_request(
        &key,
        &sid,
        UnixMillis(alice.protocol_now()),
        &[44u8; 16],
        &body,
    );
    bad_body[50] ^= 1;
    assert_eq!(
        refusal_code(alice.osd_raw(osd_a, FrameType::Request, &bad_body).unwrap()),
        ErrorCode::BadMac
    );

    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn a_stale_osd_request_is_refused() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 7. Stale request: a timestamp a minute old.
    let (sid, key, body) = envelope_parts(&mut alice, osd_a, &a);
    let stale = wire::seal_request(
        &key,
        &sid,
        UnixMillis(alice.protocol_now() - 60_000),
        &[45u8; 16],
        &body,
    );
    assert_eq!(
        refusal_code(alice.osd_raw(osd_a, FrameType::Request, &stale).unwrap()),
        ErrorCode::StaleRequest
    );

    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn an_unknown_session_is_refused() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 8. Unknown session.
    let (_sid, key, body) = envelope_parts(&mut alice, osd_a, &a);
    let unknown = wire::seal_request(
        &key,
        &[9u8; 16],
        UnixMillis(alice.protocol_now()),
        &[46u8; 16],
        &body,
    );
    assert_eq!(
        refusal_code(alice.osd_raw(osd_a, FrameType::Request, &unknown).unwrap()),
        ErrorCode::UnknownSession
    );
    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn nosec_is_refused_without_the_danger_flag() {
    let Fx {
        cluster: _cluster,
        mut alice,
        a,
        osd_a,
        ..
    } = setup(&[]);
    // 9. NOSEC requests are refused by a cluster not started for benchmarks, in both
    // frame types (the bulk data inside the message, or after it).
    let read = OsdRequest {
        capability: vec![],
        command: OsdCommand::Read {
            object: object(&a),
            offset: 0,
            length: 10,
        },
    };
    let insecure = msg::encode(&msg::InsecureRequest {
        user: 1,
        request: read.clone(),
    })
    .unwrap();
    assert_eq!(
        refusal_code(
            alice
                .osd_raw(osd_a, FrameType::Insecure, &insecure)
                .unwrap()
        ),
        ErrorCode::InsecureRefused
    );
    let (head, _) = msg::insecure_bulk_request(1, &read).unwrap();
    assert_eq!(
        refusal_code(
            alice
                .osd_raw(osd_a, FrameType::InsecureBulk, &head)
                .unwrap()
        ),
        ErrorCode::InsecureRefused
    );

    still_serves(&mut alice, "/home/alice/a", b"file A");
}

#[test]
fn mds_refuses_replays_tampering_and_user_admin_requests() {
    let Fx {
        cluster,
        mut bob,
        mds_address,
        ..
    } = setup(&[]);
    // 10. MDS: replayed and tampered requests, and an admin request from a user.
    let err = bob
        .mds_call(MdsRequest::GroupAdd { name: "x".into() })
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied));
    let mut mds = Connection::new(mds_address.clone());
    let session = serde_session(&cluster, &mut bob);
    let (msid, mkey) = session;
    let mkey = wire::envelope_key(&mkey);
    let stat = msg::encode(&MdsRequest::Stat {
        path: "/home".into(),
    })
    .unwrap();
    let sealed = wire::seal_request(
        &mkey,
        &msid,
        UnixMillis(bob.protocol_now()),
        &[47u8; 16],
        &stat,
    );
    assert_eq!(
        mds.call(FrameType::Request, &sealed).unwrap().0,
        FrameType::Response
    );
    assert_eq!(
        refusal_code(mds.call(FrameType::Request, &sealed).unwrap()),
        ErrorCode::ReplayedRequest
    );
    let mut tampered = wire::seal_request(
        &mkey,
        &msid,
        UnixMillis(bob.protocol_now()),
        &[48u8; 16],
        &stat,
    );
    *tampered.last_mut().unwrap() ^= 1;
    assert_eq!(
        refusal_code(mds.call(FrameType::Request, &tampered).unwrap()),
        ErrorCode::BadMac
    );

    let mut body_flip = wire::seal_request(
        &mkey,
        &msid,
        UnixMillis(bob.protocol_now()),
        &[49u8; 16],
        &stat,
    );
    body_flip[45] ^= 1;
    assert_eq!(
        refusal_code(mds.call(FrameType::Request, &body_flip).unwrap()),
        ErrorCode::BadMac
    );
    still_serves(&mut bob, "/home/alice/a", b"file A");
}

#[test]
fn malformed_frames_get_typed_refusals_and_daemons_serve_on() {
    let Fx {
        cluster: _cluster,
        mut alice,
        osd_a,
        mds_address,
        ..
    } = setup(&[]);
    // 11. Malformed, oversized and truncated frames: refused (or dropped), daemon serves on.
    for address in [mds_address.clone(), osd_address(&mut alice, osd_a)] {
        let mut raw = Connection::new(address.clone());
        assert_eq!(
            refusal_code(raw.call_raw(b"XX\x01\x02\x00\x00\x00\x00").unwrap()),
            ErrorCode::Malformed
        );
        let mut raw = Connection::new(address.clone());
        assert_eq!(
            refusal_code(raw.call_raw(b"MT\x01\x02\xff\xff\xff\xff").unwrap()),
            ErrorCode::TooLarge
        );
        let mut raw = Connection::new(address.clone());
        assert_eq!(
            refusal_code(raw.call_raw(b"MT\x09\x02\x00\x00\x00\x00").unwrap()),
            ErrorCode::UnsupportedVersion
        );
        let mut raw = Connection::new(address.clone());
        let plain = raw
            .call_raw(b"MT\x01\x01\x00\x00\x00\x03\xff\xff\xff")
            .unwrap();
        assert_eq!(plain.0, FrameType::Plain);
        let r: Result<msg::MdsPlainResponse, WireError> = msg::decode(&plain.1).unwrap();
        assert_eq!(r.unwrap_err().code, ErrorCode::Malformed);
        // Truncated: a header promising 100 bytes, then 10 bytes and the end of our
        // sending side. The daemon answers nothing and closes the connection.
        let mut s = std::net::TcpStream::connect(&address).unwrap();
        std::io::Write::write_all(&mut s, b"MT\x01\x02\x00\x00\x00\x64abcdefghij").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        let n = std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
        assert_eq!(
            n, 0,
            "no answer to a truncated frame, and the connection is closed"
        );
        // Garbage inside a valid frame of every type: each daemon gives the refusal its
        // checks reach first, exactly.
        let is_mds = address == mds_address;
        for (t, expected) in [
            (FrameType::Plain, (FrameType::Plain, ErrorCode::Malformed)),
            (
                FrameType::Request,
                (FrameType::Refusal, ErrorCode::UnknownSession),
            ),
            (
                FrameType::Insecure,
                (
                    if is_mds {
                        FrameType::Plain
                    } else {
                        FrameType::Refusal
                    },
                    ErrorCode::InsecureRefused,
                ),
            ),
            (
                FrameType::Response,
                (FrameType::Refusal, ErrorCode::Malformed),
            ),
            (
                FrameType::SecRequest,
                (FrameType::Refusal, ErrorCode::Malformed),
            ),
            (
                FrameType::SecResponse,
                (FrameType::Refusal, ErrorCode::Malformed),
            ),
            (
                FrameType::InsecureBulk,
                (
                    FrameType::Refusal,
                    if is_mds {
                        ErrorCode::Malformed
                    } else {
                        ErrorCode::InsecureRefused
                    },
                ),
            ),
            (
                FrameType::PlainBulk,
                (FrameType::Refusal, ErrorCode::Malformed),
            ),
        ] {
            let mut raw = Connection::new(address.clone());
            let (answer_type, answer) = raw.call(t, &[0xff; 200]).unwrap();
            let code = if answer_type == FrameType::Plain {
                let r: Result<msg::MdsPlainResponse, WireError> = msg::decode(&answer).unwrap();
                r.unwrap_err().code
            } else {
                msg::decode::<WireError>(&answer).unwrap().code
            };
            assert_eq!(
                (answer_type, code),
                expected,
                "{} answering garbage in a {t:?} frame",
                if is_mds { "MDS" } else { "OSD" }
            );
        }
    }
    still_serves(&mut alice, "/home/alice/a", b"file A");
}

// (An expired capability refused even when cached: crates/sim/tests/cluster.rs, on the
// simulated clock.)

fn alice_uid(c: &mut Client) -> u64 {
    // The capability a client holds for its private file names its user alone; read it
    // back from a fresh open.
    let o = c.open("/home/alice/b", Access::Read, None).unwrap();
    let cap = maat_proto::Unverified::<Capability>::decode(&o.capability).unwrap();
    match cap.unverified_body().users {
        Principals::User(u) => u.0,
        _ => panic!("explicit user expected"),
    }
}

fn osd_address(c: &mut Client, osd: u64) -> String {
    c.cluster_map()
        .unwrap()
        .osds
        .into_iter()
        .find(|o| o.id == osd)
        .unwrap()
        .address
}

fn serde_session(_cluster: &Cluster, c: &mut Client) -> ([u8; 16], [u8; 32]) {
    let (sid, key) = c.mds_session().unwrap();
    (sid, *key.expose())
}

/// Alice's reservation in her home: the first id, how many, and the capability.
fn reserve(c: &mut Client) -> (u64, u64, Vec<u8>) {
    match c
        .mds_call(MdsRequest::Reserve {
            dir: "/home/alice".into(),
        })
        .unwrap()
    {
        msg::MdsResponse::Reserved {
            first,
            count,
            capability,
            ..
        } => (first, u64::from(count), capability),
        other => panic!("{other:?}"),
    }
}

fn write_with(
    c: &mut Client,
    capability: &[u8],
    file: u64,
    data: &[u8],
) -> Result<OsdResponse, ErrorCode> {
    let osd = c.place(file, 0).unwrap();
    c.osd_call(
        osd,
        OsdRequest {
            capability: capability.to_vec(),
            command: OsdCommand::Write {
                object: ObjectId {
                    partition: DATA_PARTITION,
                    file,
                    stripe: 0,
                },
                offset: 0,
                data: data.to_vec(),
                replace: true,
            },
        },
    )
    .map_err(|e| e.code().unwrap_or_else(|| panic!("not a refusal: {e}")))
}

#[test]
fn a_capability_over_reserved_ids_reaches_them_alone_and_only_its_user_links_them() {
    let Fx {
        cluster: _cluster,
        mut alice,
        mut bob,
        a,
        ..
    } = setup(&[]);
    let (first, count, range) = reserve(&mut alice);
    assert!(write_with(&mut alice, &range, first, b"reserved").is_ok());
    // Not alice's existing file, nor an id past the block, nor in bob's hands.
    for outside in [a.stat.id, first + count] {
        assert_eq!(
            write_with(&mut alice, &range, outside, b"x"),
            Err(ErrorCode::WrongFile)
        );
    }
    assert_eq!(
        write_with(&mut bob, &range, first + 1, b"x"),
        Err(ErrorCode::WrongUser)
    );
    // Only alice links her ids, each once; bob cannot put his name on her data.
    let link = |c: &mut Client, path: &str, file: u64| {
        c.mds_call(MdsRequest::Link {
            path: path.into(),
            file,
            size: 8,
            mode: 0o644,
        })
        .map_err(|e| e.code().unwrap_or_else(|| panic!("not a refusal: {e}")))
    };
    assert_eq!(
        link(&mut bob, "/home/bob/stolen", first).unwrap_err(),
        ErrorCode::PermissionDenied
    );
    link(&mut alice, "/home/alice/linked", first).unwrap();
    assert_eq!(
        link(&mut alice, "/home/alice/again", first).unwrap_err(),
        ErrorCode::AlreadyExists
    );
    still_serves(&mut alice, "/home/alice/linked", b"reserved");
    still_serves(&mut alice, "/home/alice/a", b"file A");
}
