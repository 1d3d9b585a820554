//! SPEC T1 against a man in the middle on loopback: the OSD advertises a proxy that can
//! flip one byte of a chosen part of a chosen frame, put an earlier answer in place of
//! the next, or record frames and send them again. For each protection method the test
//! checks what it promises and, honestly, what it does not (docs/THREAT_MODEL.md lists
//! the same). A proxy in front of the MDS shows its requests and answers protected alike.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;
use maat_client::Client;
use maat_proto::msg::{Access, ErrorCode, OsdCommand, OsdRequest};
use maat_proto::protection::{self, Protection, RequestHeader};
use maat_proto::wire::FrameType;
use maat_proto::UnixMillis;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Bytes before the message in a protected request / response envelope.
const REQUEST_HEAD: usize = 1 + 16 + 8 + 16 + 4;
const RESPONSE_HEAD: usize = 1 + 16 + 8 + 4;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    Header,
    /// The last byte of the message (for a write: its `replace` flag).
    MessageEnd,
    Data,
    /// An MDS envelope's timestamp (its last byte), request or answer.
    MdsTimestamp,
    /// The last byte of an MDS envelope's message (before its MAC).
    MdsMessageEnd,
}

#[derive(Clone, Copy, Debug)]
struct Tamper {
    /// Client → OSD (`SecRequest`) or OSD → client (`SecResponse`).
    to_server: bool,
    part: Part,
    /// Only frames with more than this many payload bytes (bulk transfers).
    min_len: usize,
}

#[derive(Default)]
struct ProxyState {
    tamper: Option<Tamper>,
    tampered: u32,
    /// Every client → OSD frame, whole.
    recorded: Vec<Vec<u8>>,
    /// Every OSD → client byte.
    from_server: Vec<u8>,
    /// Put the answer before it in place of the next protected answer.
    substitute: bool,
    substituted: u32,
    /// The last protected answer's payload.
    last_answer: Option<Vec<u8>>,
}

fn flip(payload: &mut [u8], request: bool, part: Part) {
    // MDS envelopes: session id or request nonce [16] ‖ timestamp [8] ‖ message ‖ MAC [32].
    let at = match part {
        Part::MdsTimestamp => 16 + 7,
        Part::MdsMessageEnd => payload.len() - 33,
        _ => {
            let head = if request { REQUEST_HEAD } else { RESPONSE_HEAD };
            let message_len =
                u32::from_be_bytes(payload[head - 4..head].try_into().unwrap()) as usize;
            match part {
                Part::Header => head - 10,
                Part::MessageEnd => head + message_len - 1,
                _ => head + message_len + 100,
            }
        }
    };
    payload[at] ^= 0x01;
}

/// One frame as it came: its header bytes (either version) and its payload.
fn read_raw_frame(
    from: &mut impl Read,
) -> Option<(Vec<u8>, maat_proto::wire::FrameHeader, Vec<u8>)> {
    use maat_proto::wire;
    let mut header = vec![0u8; wire::FRAME_HEADER_START_BYTES];
    from.read_exact(&mut header).ok()?;
    let rest = wire::header_rest_bytes(header.as_slice().try_into().ok()?).ok()?;
    header.resize(wire::FRAME_HEADER_START_BYTES + rest, 0);
    from.read_exact(&mut header[wire::FRAME_HEADER_START_BYTES..])
        .ok()?;
    let decoded = wire::decode_header(&header).ok()?;
    let mut payload = vec![0u8; decoded.payload_bytes];
    from.read_exact(&mut payload).ok()?;
    Some((header, decoded, payload))
}

fn pump(mut from: TcpStream, mut to: TcpStream, to_server: bool, state: Arc<Mutex<ProxyState>>) {
    while let Some((mut header, decoded, mut payload)) = read_raw_frame(&mut from) {
        let len = payload.len();
        {
            let mut s = state.lock().unwrap();
            // Protected frames: to an OSD or to the MDS, and their answers.
            let kinds = if to_server {
                [FrameType::SecRequest, FrameType::Request]
            } else {
                [FrameType::SecResponse, FrameType::Response]
            };
            let protected = kinds.contains(&decoded.head.frame_type);
            if let Some(t) = s.tamper {
                if t.to_server == to_server && protected && len > t.min_len {
                    flip(&mut payload, to_server, t.part);
                    s.tamper = None;
                    s.tampered += 1;
                }
            }
            if !to_server && protected {
                let earlier = s.last_answer.replace(payload.clone());
                if let (true, Some(earlier)) = (s.substitute, earlier) {
                    // An earlier answer, framed as this one (its request id).
                    header = maat_proto::wire::encode_header(decoded.head, earlier.len())
                        .unwrap()
                        .as_bytes()
                        .to_vec();
                    payload = earlier;
                    s.substitute = false;
                    s.substituted += 1;
                }
            }
            if to_server {
                s.recorded.push([&header[..], &payload].concat());
            } else {
                s.from_server.extend_from_slice(&header);
                s.from_server.extend_from_slice(&payload);
            }
        }
        if to.write_all(&header).is_err() || to.write_all(&payload).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

fn proxy(listener: TcpListener, upstream: String, state: Arc<Mutex<ProxyState>>) {
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let st = state.clone();
            std::thread::spawn(move || pump(client, server, true, st));
            let st = state.clone();
            std::thread::spawn(move || pump(s2, c2, false, st));
        }
    });
}

struct Mitm {
    cluster: Cluster,
    state: Arc<Mutex<ProxyState>>,
}

impl Mitm {
    /// A one-OSD cluster whose OSD clients reach only through the proxy, with one
    /// partition per protected method.
    fn start() -> Mitm {
        let mut cluster = Cluster::start(1, &[]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_address = listener.local_addr().unwrap().to_string();
        let osd_toml = cluster.data().join("osd-1/osd.toml");
        let mut upstream = String::new();
        cluster.restart_with(|_| {
            let text = std::fs::read_to_string(&osd_toml).unwrap();
            upstream = text
                .lines()
                .find_map(|l| l.strip_prefix("listen = "))
                .unwrap()
                .trim_matches('"')
                .to_string();
            std::fs::write(
                &osd_toml,
                format!("advertise = \"{proxy_address}\"\n{text}"),
            )
            .unwrap();
        });
        let state = Arc::new(Mutex::new(ProxyState::default()));
        proxy(listener, upstream, state.clone());
        let admin = cluster.admin_client();
        for m in [
            Protection::CapKey,
            Protection::CmdRsp,
            Protection::AllData,
            Protection::Confidential,
        ] {
            admin.partition_create(m.name(), m).unwrap();
            admin
                .mkdir_in(&format!("/{}", m.name()), 0o755, false, Some(m.name()))
                .unwrap();
        }
        Mitm { cluster, state }
    }

    fn arm(&self, tamper: Tamper) {
        let mut s = self.state.lock().unwrap();
        s.tamper = Some(tamper);
        s.tampered = 0;
    }

    fn fired(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        s.tamper = None;
        s.tampered > 0
    }
}

fn content(seed: u8) -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

fn put(c: &mut Client, path: &str, data: &[u8]) -> Result<(), String> {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .map(drop)
        .map_err(|e| e.to_string())
}

fn get(c: &mut Client, path: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {})
        .map_err(|e| e.to_string())?;
    Ok(out)
}

const WRITE: Tamper = Tamper {
    to_server: true,
    part: Part::Header,
    min_len: 10_000,
};

#[test]
fn each_method_detects_what_it_promises_under_a_tampering_proxy() {
    let m = Mitm::start();
    let mut c = m.cluster.admin_client();
    for method in [
        Protection::CapKey,
        Protection::CmdRsp,
        Protection::AllData,
        Protection::Confidential,
    ] {
        let dir = format!("/{}", method.name());
        let original = content(method.byte());
        put(&mut c, &format!("{dir}/clean"), &original).unwrap();
        assert_eq!(c.stat(&format!("{dir}/clean")).unwrap().protection, method);

        // Request header (the timestamp) changed: refused under every method.
        m.arm(WRITE);
        let r = put(&mut c, &format!("{dir}/h"), &original);
        assert!(m.fired());
        assert!(r.is_err(), "{method}: changed request header accepted");

        // The command changed (a write's `replace` flag): CAPKEY does not protect it.
        m.arm(Tamper {
            part: Part::MessageEnd,
            ..WRITE
        });
        let r = put(&mut c, &format!("{dir}/m"), &original);
        assert!(m.fired());
        assert_eq!(
            r.is_ok(),
            method == Protection::CapKey,
            "{method}: changed command: {r:?}"
        );

        // A data byte of a write changed: CAPKEY and CMDRSP store it; ALLDATA and
        // CONFIDENTIAL refuse it.
        m.arm(Tamper {
            part: Part::Data,
            ..WRITE
        });
        let r = put(&mut c, &format!("{dir}/d"), &original);
        assert!(m.fired());
        if method >= Protection::AllData {
            assert!(r.is_err(), "{method}: changed request data accepted");
        } else {
            r.unwrap();
            let stored = get(&mut c, &format!("{dir}/d")).unwrap();
            assert_ne!(stored, original, "{method}: the flip should have landed");
        }

        // Response changes: the header is detected by every method, the result message
        // from CMDRSP up, data from ALLDATA up.
        for (part, protected_from) in [
            (Part::Header, Protection::CapKey),
            (Part::MessageEnd, Protection::CmdRsp),
            (Part::Data, Protection::AllData),
        ] {
            m.arm(Tamper {
                to_server: false,
                part,
                min_len: 10_000,
            });
            let r = get(&mut c, &format!("{dir}/clean"));
            assert!(m.fired(), "{method} {part:?}");
            if method >= protected_from {
                assert!(r.is_err(), "{method}: changed response {part:?} accepted");
            } else if part == Part::Data {
                assert_ne!(r.unwrap(), original, "{method}: data flip should land");
            }
        }
        // CAPKEY and CMDRSP put no MAC over a read's data, and ALLDATA's MAC covers the
        // digest the OSD kept when it checked the write: the OSD sends the data straight
        // from the object's file. CONFIDENTIAL reads it to seal it.
        let from_file = |c: &Client| common::counter(c, "osd", "bytes_read_from_file");
        let before = from_file(&c);
        assert_eq!(get(&mut c, &format!("{dir}/clean")).unwrap(), original);
        let expected = match method {
            Protection::Confidential => 0,
            _ => original.len() as u64,
        };
        assert_eq!(from_file(&c) - before, expected, "{method}");
    }
}

#[test]
fn confidential_gets_carry_none_of_the_files_bytes_and_others_do() {
    let m = Mitm::start();
    let mut c = m.cluster.admin_client();
    for method in [Protection::AllData, Protection::Confidential] {
        let path = format!("/{}/secret", method.name());
        let secret = content(0x5a ^ method.byte());
        put(&mut c, &path, &secret).unwrap();
        m.state.lock().unwrap().from_server.clear();
        assert_eq!(get(&mut c, &path).unwrap(), secret);
        let captured = std::mem::take(&mut m.state.lock().unwrap().from_server);
        assert!(captured.len() > secret.len());
        let windows: std::collections::HashSet<&[u8]> = captured.windows(16).collect();
        let leaked = secret
            .chunks_exact(16)
            .filter(|w| windows.contains(w))
            .count();
        if method == Protection::Confidential {
            assert_eq!(leaked, 0, "a CONFIDENTIAL get leaked file bytes");
        } else {
            assert!(leaked > 0, "an ALLDATA get carries the file in clear");
        }
    }
}

#[test]
fn replayed_requests_and_downgrades_are_refused() {
    let m = Mitm::start();
    let mut c = m.cluster.admin_client();
    for method in [
        Protection::CapKey,
        Protection::CmdRsp,
        Protection::AllData,
        Protection::Confidential,
    ] {
        put(&mut c, &format!("/{}/f", method.name()), &content(1)).unwrap();
    }
    // An earlier answer put in place of the next: it answers another request (its nonce),
    // so the client rejects it under every method, CAPKEY too (the header is MACed).
    for method in [
        Protection::CapKey,
        Protection::CmdRsp,
        Protection::AllData,
        Protection::Confidential,
    ] {
        let path = format!("/{}/f", method.name());
        assert_eq!(get(&mut c, &path).unwrap(), content(1));
        m.state.lock().unwrap().substitute = true;
        let r = get(&mut c, &path);
        assert_eq!(m.state.lock().unwrap().substituted, 1, "{method}");
        m.state.lock().unwrap().substituted = 0;
        assert!(r.is_err(), "{method}: an earlier answer was taken");
    }
    // Replay every recorded request frame (puts and gets under each method) on a fresh
    // connection to the proxy.
    let frames = std::mem::take(&mut m.state.lock().unwrap().recorded);
    let osd = c.cluster_map().unwrap().osds[0].address.clone();
    let mut replayed = 0;
    for frame in frames
        .iter()
        .filter(|f| f[3] == FrameType::SecRequest as u8)
    {
        let mut s = TcpStream::connect(&osd).unwrap();
        s.write_all(frame).unwrap();
        let (_, header, payload) = read_raw_frame(&mut s).unwrap();
        assert_eq!(header.head.frame_type, FrameType::Refusal);
        let e: maat_proto::msg::WireError = maat_proto::msg::decode(&payload).unwrap();
        assert_eq!(e.code, ErrorCode::ReplayedRequest, "{e:?}");
        replayed += 1;
    }
    assert!(replayed >= 8, "{replayed}");

    // A request sealed with CMDRSP under a CONFIDENTIAL capability: refused, typed.
    let opened = c.open("/CONFIDENTIAL/f", Access::Read, None).unwrap();
    let (sid, secret) = c.osd_session(1).unwrap();
    let secret = *secret.expose();
    let keys = protection::EnvelopeKeys::new(&secret);
    let request = OsdRequest {
        capability: opened.capability.clone(),
        command: OsdCommand::Read {
            object: maat_proto::msg::ObjectId {
                partition: maat_proto::msg::DATA_PARTITION,
                file: opened.stat.id,
                stripe: 0,
            },
            offset: 0,
            length: 100,
        },
    };
    for weaker in [Protection::CapKey, Protection::CmdRsp, Protection::AllData] {
        let header = RequestHeader {
            method: weaker,
            data_digest: protection::Sealing::current(weaker).data_digest,
            session_id: sid,
            timestamp: UnixMillis(c.protocol_now()),
            nonce: [weaker.byte(); 16],
        };
        let payload = protection::seal_request(
            &keys,
            &header,
            &maat_proto::msg::encode(&request).unwrap(),
            &[],
            &request.capability,
            &mut maat_crypto::OsRng,
        )
        .unwrap();
        let (t, answer) = c.osd_raw(1, FrameType::SecRequest, &payload).unwrap();
        let message = if t == FrameType::SecResponse {
            let (_, message, _) =
                protection::open_response(&keys, header.sealing(), &sid, &header.nonce, &answer)
                    .unwrap();
            message
        } else {
            answer
        };
        let r: Result<maat_proto::msg::OsdResponse, maat_proto::msg::WireError> =
            maat_proto::msg::decode(&message).unwrap();
        assert_eq!(
            r.unwrap_err().code,
            ErrorCode::ProtectionTooWeak,
            "{weaker}"
        );
    }
}

/// SPEC H3 on the wire: an encrypted file in an ALLDATA partition travels under CMDRSP
/// (no MAC over data), and its blocks protect it: a capture of a put and a get holds
/// none of its bytes, and a data byte changed in either direction fails the read with
/// an error naming the block.
#[test]
fn encrypted_files_cross_the_wire_sealed_and_a_changed_byte_names_its_block() {
    let m = Mitm::start();
    let mut c = m.cluster.admin_client();
    let secret = content(0x77);
    let path = "/ALLDATA/sealed";
    {
        let mut s = m.state.lock().unwrap();
        s.recorded.clear();
        s.from_server.clear();
    }
    c.put_with(
        &mut &secret[..],
        secret.len() as u64,
        path,
        Some(true),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(c.stat(path).unwrap().protection, Protection::CmdRsp);
    assert_eq!(get(&mut c, path).unwrap(), secret);
    let captured: Vec<u8> = {
        let s = m.state.lock().unwrap();
        [s.recorded.concat(), s.from_server.clone()].concat()
    };
    assert!(captured.len() > 2 * secret.len());
    let windows: std::collections::HashSet<&[u8]> = captured.windows(16).collect();
    let leaked = secret
        .chunks_exact(16)
        .filter(|w| windows.contains(w))
        .count();
    assert_eq!(
        leaked, 0,
        "an encrypted put or get carried file bytes in clear"
    );

    // OSD → client: a data byte changed in a get. The block fails to open, the client
    // reads the stripe once more (a writer may have rewritten it) and gets it whole:
    // the changed byte is never returned. (A lasting change fails the read: below.)
    m.arm(Tamper {
        to_server: false,
        part: Part::Data,
        min_len: 10_000,
    });
    let r = get(&mut c, path);
    assert!(m.fired());
    assert_eq!(r.unwrap(), secret);

    // Client → OSD: a data byte changed in a put is stored (CMDRSP does not MAC data)
    // and the next read fails naming the block.
    m.arm(Tamper {
        part: Part::Data,
        ..WRITE
    });
    c.put_with(
        &mut &secret[..],
        secret.len() as u64,
        path,
        None,
        &mut |_| {},
    )
    .unwrap();
    assert!(m.fired());
    let e = get(&mut c, path).unwrap_err();
    assert!(e.contains("fails authentication"), "{e}");
}

/// Every MDS request and answer is MACed under the client's session, whatever the
/// partitions' methods (which govern data at the OSDs): through a proxy in front of the
/// MDS, a changed byte of a request's command or timestamp is refused `BadMac` and the
/// command is not carried out, a changed answer or an earlier answer put in place of the
/// next is rejected by the client, and a recorded request sent again is refused
/// `ReplayedRequest`.
#[test]
fn every_mds_request_and_answer_is_protected_against_a_man_in_the_middle() {
    use maat_client::{ClientError, ClusterFile, Credential, Home};
    use maat_proto::msg::MdsRequest;
    let cluster = Cluster::start(1, &[]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut file = ClusterFile::load(&cluster.cluster_file()).unwrap();
    let upstream = std::mem::replace(&mut file.mds, listener.local_addr().unwrap().to_string());
    let state = Arc::new(Mutex::new(ProxyState::default()));
    proxy(listener, upstream.clone(), state.clone());
    let (name, key) = Home::new(cluster.admin_home()).identity().unwrap().unwrap();
    let c = Client::new(file, None).unwrap();
    c.login(&name, Credential::Key(key)).unwrap();
    c.mkdir("/m", 0o755, false).unwrap();
    let arm = |to_server, part| {
        let mut s = state.lock().unwrap();
        s.tamper = Some(Tamper {
            to_server,
            part,
            min_len: 0,
        });
        s.tampered = 0;
    };
    let fired = || {
        let mut s = state.lock().unwrap();
        s.tamper = None;
        s.tampered > 0
    };
    let mkdir = |path: &str| MdsRequest::Mkdir {
        path: path.into(),
        mode: 0o755,
        parents: false,
        partition: None,
    };
    let stat = |path: &str| MdsRequest::Stat { path: path.into() };
    for (part, path) in [(Part::MdsTimestamp, "/m/t"), (Part::MdsMessageEnd, "/m/c")] {
        arm(true, part);
        let r = c.mds_call(mkdir(path));
        assert!(fired(), "{part:?}");
        assert_eq!(common::code(r), ErrorCode::BadMac, "{part:?}");
        assert_eq!(common::code(c.mds_call(stat(path))), ErrorCode::NoSuchFile);
    }
    for part in [Part::MdsTimestamp, Part::MdsMessageEnd] {
        arm(false, part);
        let r = c.mds_call(stat("/m"));
        assert!(fired(), "{part:?}");
        assert!(
            matches!(r, Err(ClientError::BadAnswer { .. })),
            "changed answer {part:?} taken: {r:?}"
        );
    }
    c.mds_call(stat("/m")).unwrap();
    state.lock().unwrap().substitute = true;
    let r = c.mds_call(stat("/"));
    assert_eq!(state.lock().unwrap().substituted, 1);
    assert!(
        matches!(r, Err(ClientError::BadAnswer { .. })),
        "an earlier answer was taken: {r:?}"
    );
    // Every request the MDS took, sent again: refused, none carried out twice.
    let frames = std::mem::take(&mut state.lock().unwrap().recorded);
    let mut replayed = 0;
    for frame in frames.iter().filter(|f| f[3] == FrameType::Request as u8) {
        let mut s = TcpStream::connect(&upstream).unwrap();
        s.write_all(frame).unwrap();
        let (_, header, payload) = read_raw_frame(&mut s).unwrap();
        assert_eq!(header.head.frame_type, FrameType::Refusal);
        let e: maat_proto::msg::WireError = maat_proto::msg::decode(&payload).unwrap();
        // (The requests tampered on the way were refused at the MAC, before their nonce
        // was recorded, and are refused at the MAC again.)
        assert!(
            matches!(e.code, ErrorCode::ReplayedRequest | ErrorCode::BadMac),
            "{e:?}"
        );
        replayed += usize::from(e.code == ErrorCode::ReplayedRequest);
    }
    assert!(replayed >= 5, "{replayed}");
}
