//! SPEC T2, T3, T4 on a real cluster: opens in a partition with T10 credentials get a
//! capability and capability key per OSD and no signature; the OSDs check requests with
//! MACs under keys the MDS set with SET MASTER KEY and SET KEY. Attacks on raw frames:
//! forged, tampered, replayed, expired, downgraded, wrong-object, wrong-OSD, read-only
//! and revoked credentials are each refused with their own code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{content, counter, Cluster};
use maat_client::Client;
use maat_crypto::OsRng;
use maat_proto::msg::{
    self, Access, ErrorCode, ObjectId, OsdCommand, OsdRequest, OsdResponse, WireError,
    DATA_PARTITION,
};
use maat_proto::protection::{self, EnvelopeKeys, Protection, RequestHeader, Sealing};
use maat_proto::t10;
use maat_proto::wire::FrameType;
use maat_proto::UnixMillis;

/// A cluster whose partition `fast` (method `security`) gives T10 credentials, with
/// `/fast` in it, once every OSD has its keys.
fn t10_cluster(osds: u32, security: &str, extra: &[&str]) -> (Cluster, Client) {
    let cluster = Cluster::start(osds, extra);
    let admin = cluster.admin_client();
    admin
        .partition_create("fast", Protection::parse(security).unwrap())
        .unwrap();
    admin
        .partition_set_credentials("fast", msg::Credentials::T10)
        .unwrap();
    admin.mkdir_in("/fast", 0o777, false, Some("fast")).unwrap();
    // The MDS sets the new partition's keys within a second.
    for _ in 0..100 {
        let keys = admin.t10_keys().unwrap();
        if keys.len() == osds as usize
            && keys.iter().all(|k| {
                k.generations
                    .iter()
                    .any(|(name, _)| name.ends_with("working 0"))
            })
        {
            return (cluster, admin);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the OSDs never got their T10 keys");
}

/// One raw T10 request: the frame payload, and what the answer needs to be opened.
struct Raw {
    payload: Vec<u8>,
    keys: EnvelopeKeys,
    id: [u8; 16],
    nonce: [u8; 16],
    method: Protection,
}

fn raw(
    capability: &[u8],
    key: &[u8; 32],
    method: Protection,
    command: OsdCommand,
    now: u64,
) -> Raw {
    let keys = EnvelopeKeys::new(key);
    let id = t10::credential_id(capability);
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&maat_crypto::Secret32::random(&mut OsRng).expose()[..16]);
    let header = RequestHeader {
        method,
        data_digest: protection::Sealing::current(method).data_digest,
        session_id: id,
        timestamp: UnixMillis(now),
        nonce,
    };
    let request = OsdRequest {
        capability: Vec::new(),
        command,
    };
    let (head, data) = request.split_bulk();
    let message = msg::encode(&head).unwrap();
    let parts =
        protection::seal_request_parts(&keys, &header, &message, data, capability, &mut OsRng)
            .unwrap();
    let mut payload = t10::request_prefix(capability).unwrap();
    for p in parts.iter() {
        payload.extend_from_slice(p);
    }
    Raw {
        payload,
        keys,
        id,
        nonce,
        method,
    }
}

/// Sends a raw T10 request to `osd`: the answer, or the refusal's code.
fn send(c: &mut Client, osd: u64, r: &Raw) -> Result<OsdResponse, ErrorCode> {
    let (t, answer) = c.osd_raw(osd, FrameType::T10Request, &r.payload).unwrap();
    answer_of(r, t, answer)
}

/// Like [`send`], for an OSD that may be restarting: `None` while it cannot be reached.
fn send_if_up(c: &mut Client, osd: u64, r: &Raw) -> Option<Result<OsdResponse, ErrorCode>> {
    match c.osd_raw(osd, FrameType::T10Request, &r.payload) {
        Ok((t, answer)) => Some(answer_of(r, t, answer)),
        Err(maat_client::ClientError::Net { .. }) => None,
        Err(e) => panic!("{e:?}"),
    }
}

fn answer_of(r: &Raw, t: FrameType, answer: Vec<u8>) -> Result<OsdResponse, ErrorCode> {
    match t {
        FrameType::SecResponse => {
            let (_, message, data) = protection::open_response_owned(
                &r.keys,
                Sealing::current(r.method),
                &r.id,
                &r.nonce,
                answer,
            )
            .unwrap();
            let mut result: Result<OsdResponse, WireError> = msg::decode(&message).unwrap();
            msg::put_response_bulk(&mut result, data).unwrap();
            result.map_err(|e| e.code)
        }
        FrameType::Refusal => Err(msg::decode::<WireError>(&answer).unwrap().code),
        other => panic!("unexpected frame {other:?}"),
    }
}

fn put(c: &mut Client, path: &str, data: &[u8]) {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .unwrap();
}

fn get(c: &mut Client, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {}).unwrap();
    out
}

fn read(file: u64) -> OsdCommand {
    OsdCommand::Read {
        object: ObjectId {
            partition: DATA_PARTITION,
            file,
            stripe: 0,
        },
        offset: 0,
        length: 64,
    }
}

fn write(file: u64) -> OsdCommand {
    OsdCommand::Write {
        object: ObjectId {
            partition: DATA_PARTITION,
            file,
            stripe: 0,
        },
        offset: 0,
        data: b"overwritten".to_vec(),
        replace: true,
    }
}

/// `user`'s get of the one-stripe `path` makes one new credential (counted through
/// `admin`), and it does not allow writing. Returns what the get read.
fn read_gets_a_new_read_only_credential(
    admin: &mut Client,
    user: &mut Client,
    path: &str,
) -> Vec<u8> {
    let issued_before = counter(admin, "mds", "t10_credentials_issued");
    let data = get(user, path);
    assert_eq!(
        counter(admin, "mds", "t10_credentials_issued"),
        issued_before + 1
    );
    let file = user.stat(path).unwrap().id;
    let osd = user.place(file, 0).unwrap();
    let (cap, _) = user.t10_credential(file, osd).unwrap();
    let cap = t10::decode_capability(&cap).unwrap();
    assert!(!cap.permissions.allows(t10::Permissions::WRITE), "{path}");
    data
}

#[test]
fn t10_opens_cost_no_signature_and_data_round_trips() {
    let (cluster, mut admin) = t10_cluster(2, "CMDRSP", &[]);
    let data = content(1, 5 * 1024 * 1024 + 17);
    put(&mut admin, "/fast/big", &data);
    assert_eq!(get(&mut admin, "/fast/big"), data);
    let signed_before = counter(&admin, "mds", "signatures_made");
    let verified_before = counter(&admin, "osd", "signatures_verified");
    let issued_before = counter(&admin, "mds", "t10_credentials_issued");
    let reused_before = counter(&admin, "mds", "t10_credentials_reused");
    let hits_before = admin.client_stats().capability_cache_hits;
    for i in 0..5 {
        let path = format!("/fast/small{i}");
        put(&mut admin, &path, &content(i, 1000));
        assert_eq!(get(&mut admin, &path), content(i, 1000));
    }
    // Five puts and five gets: no signature made or verified anywhere. A write open gets
    // a new credential per OSD (two). The get of what this client just put needs no open
    // at the MDS: the put's open was read-write, and the client keeps it (SPEC M5), so
    // no credential is made or given again.
    assert_eq!(counter(&admin, "mds", "signatures_made"), signed_before);
    assert_eq!(
        counter(&admin, "osd", "signatures_verified"),
        verified_before
    );
    assert_eq!(
        counter(&admin, "mds", "t10_credentials_issued"),
        issued_before + 5 * 2
    );
    assert_eq!(
        counter(&admin, "mds", "t10_credentials_reused"),
        reused_before
    );
    assert_eq!(admin.client_stats().capability_cache_hits, hits_before + 5);
    // A user who may only read gets a read-only credential of its own, never the
    // administrator's read-write one.
    cluster.add_user("reader", "reader pass", None);
    let mut reader = cluster.user_client("reader", "reader pass");
    assert_eq!(
        read_gets_a_new_read_only_credential(&mut admin, &mut reader, "/fast/small1"),
        content(1, 1000)
    );
    // Nor is a user who wrote the file and may no longer (chmod) given its read-write
    // credential again for a read.
    cluster.add_user("writer", "writer pass", None);
    let mut writer = cluster.user_client("writer", "writer pass");
    put(&mut writer, "/fast/w", b"mine");
    writer.chmod("/fast/w", 0o444).unwrap();
    assert_eq!(
        read_gets_a_new_read_only_credential(&mut admin, &mut writer, "/fast/w"),
        b"mine"
    );
    // Another client of the administrator reads the eleven-stripe file, with the put's
    // credentials for both OSDs again, and reads it all.
    let mut again = cluster.admin_client();
    let (issued_before, reused_before) = (
        counter(&again, "mds", "t10_credentials_issued"),
        counter(&again, "mds", "t10_credentials_reused"),
    );
    assert_eq!(get(&mut again, "/fast/big"), data);
    assert_eq!(
        counter(&again, "mds", "t10_credentials_issued"),
        issued_before
    );
    assert_eq!(
        counter(&again, "mds", "t10_credentials_reused"),
        reused_before + 2
    );
    // Removal signs nothing either: the unlink is answered with write credentials for
    // the OSDs that hold the objects, and every object is gone from both.
    let big = admin.stat("/fast/big").unwrap().id;
    let objects = |cluster: &Cluster| {
        walk(&cluster.data())
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{big:016x}.")))
            })
            .count()
    };
    assert_eq!(
        objects(&cluster),
        11,
        "the file's eleven stripes are stored"
    );
    let signed_before = counter(&admin, "mds", "signatures_made");
    let reused_before = counter(&admin, "mds", "t10_credentials_reused");
    admin.unlink("/fast/big").unwrap();
    assert_eq!(counter(&admin, "mds", "signatures_made"), signed_before);
    assert_eq!(
        counter(&admin, "mds", "t10_credentials_reused"),
        reused_before + 2
    );
    assert_eq!(objects(&cluster), 0, "the unlink removed every object");
    // A user who may not read the file gets no credential for it.
    cluster.add_user("mallory", "mallory pass", None);
    admin.chmod("/fast/small0", 0o600).unwrap();
    let mallory = cluster.user_client("mallory", "mallory pass");
    assert_eq!(
        common::code(mallory.open("/fast/small0", Access::Read, None)),
        ErrorCode::PermissionDenied
    );
}

#[test]
fn t10_attacks_are_refused_with_their_reasons() {
    let (cluster, mut admin) = t10_cluster(2, "CMDRSP", &[]);
    put(&mut admin, "/fast/a", b"file a");
    put(&mut admin, "/fast/b", b"file b");
    let b = admin.open("/fast/b", Access::Read, None).unwrap().stat.id;
    // A read-only credential: a user who may only read the file (0644, the
    // administrator's) opens it; the administrator, who may write, would be given the
    // read-write credential of its put again.
    cluster.add_user("reader", "reader pass", None);
    let reader = cluster.user_client("reader", "reader pass");
    let opened = reader.open("/fast/a", Access::Read, None).unwrap();
    let a = opened.stat.id;
    let osd = reader.place(a, 0).unwrap();
    let other = if osd == 1 { 2 } else { 1 };
    let (cap, key) = reader.t10_credential(a, osd).unwrap();
    let key = *key.expose();
    let now = admin.protocol_now();

    // The honest request works.
    match send(
        &mut admin,
        osd,
        &raw(&cap, &key, Protection::CmdRsp, read(a), now),
    ) {
        Ok(OsdResponse::Data(d)) => assert_eq!(d, b"file a"),
        other => panic!("honest read: {other:?}"),
    }
    // Replayed: the same frame twice.
    let once = raw(&cap, &key, Protection::CmdRsp, read(a), now);
    send(&mut admin, osd, &once).unwrap();
    assert_eq!(
        send(&mut admin, osd, &once).unwrap_err(),
        ErrorCode::ReplayedRequest
    );
    // Forged key: a request MACed under a key the MDS never gave out.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &[7; 32], Protection::CmdRsp, read(a), now)
        )
        .unwrap_err(),
        ErrorCode::BadMac
    );
    // Tampered capability: read-only turned into read-write (its key no longer matches).
    let mut forged = t10::decode_capability(&cap).unwrap();
    assert!(!forged.permissions.allows(t10::Permissions::WRITE));
    forged.permissions = forged.permissions.union(t10::Permissions::WRITE);
    let forged = maat_proto::signed::encode_unauthenticated(&forged);
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&forged, &key, Protection::CmdRsp, write(a), now)
        )
        .unwrap_err(),
        ErrorCode::BadMac
    );
    // Read-only credential, write command.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &key, Protection::CmdRsp, write(a), now)
        )
        .unwrap_err(),
        ErrorCode::PermissionDenied
    );
    // Confused deputy: file a's credential used on file b's object.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &key, Protection::CmdRsp, read(b), now)
        )
        .unwrap_err(),
        ErrorCode::WrongFile
    );
    // Another OSD: its working keys differ, so the capability key is not its.
    assert_eq!(
        send(
            &mut admin,
            other,
            &raw(&cap, &key, Protection::CmdRsp, read(a), now)
        )
        .unwrap_err(),
        ErrorCode::BadMac
    );
    // Downgrade: sealed with CAPKEY under a CMDRSP credential.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &key, Protection::CapKey, read(a), now)
        )
        .unwrap_err(),
        ErrorCode::ProtectionTooWeak
    );
    // Stale: dated a minute ago.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &key, Protection::CmdRsp, read(a), now - 60_000)
        )
        .unwrap_err(),
        ErrorCode::StaleRequest
    );
    // Administrative commands are not object commands.
    assert_eq!(
        send(
            &mut admin,
            osd,
            &raw(&cap, &key, Protection::CmdRsp, OsdCommand::Format, now)
        )
        .unwrap_err(),
        ErrorCode::PermissionDenied
    );
    // SPEC T5 under credentials: the reader may get attributes, not append or set them.
    let object = ObjectId {
        partition: DATA_PARTITION,
        file: a,
        stripe: 0,
    };
    let append = || OsdCommand::Append {
        object,
        data: b" and more".to_vec(),
    };
    let set_attributes = |policy_tag| OsdCommand::SetAttributes {
        object,
        policy_tag,
        user: vec![("color".into(), b"blue".to_vec())],
    };
    let get_attributes = OsdCommand::GetAttributes { object };
    let as_reader = |command| raw(&cap, &key, Protection::CmdRsp, command, now);
    assert!(matches!(
        send(&mut admin, osd, &as_reader(get_attributes.clone())),
        Ok(OsdResponse::Attributes(a)) if a.size == 6
    ));
    for command in [append(), set_attributes(0)] {
        assert_eq!(
            send(&mut admin, osd, &as_reader(command)).unwrap_err(),
            ErrorCode::PermissionDenied
        );
    }
    // The writer (its put's read-write credential) appends and sets user attributes;
    // the policy access tag is the MDS's to move (SET POLICY TAG), not a writer's.
    let (rw_cap, rw_key) = admin.t10_credential(a, osd).unwrap();
    let rw_key = *rw_key.expose();
    let as_writer = |command| raw(&rw_cap, &rw_key, Protection::CmdRsp, command, now);
    assert_eq!(
        send(&mut admin, osd, &as_writer(append())),
        Ok(OsdResponse::Ok)
    );
    assert_eq!(
        send(&mut admin, osd, &as_writer(set_attributes(0))),
        Ok(OsdResponse::Ok)
    );
    assert_eq!(
        send(&mut admin, osd, &as_writer(set_attributes(5))).unwrap_err(),
        ErrorCode::PermissionDenied
    );
    match send(&mut admin, osd, &as_writer(get_attributes)) {
        Ok(OsdResponse::Attributes(a)) => {
            assert_eq!(a.size, 6 + 9);
            assert_eq!(a.policy_tag, 0);
            assert_eq!(a.user, vec![("color".to_string(), b"blue".to_vec())]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        send(&mut admin, osd, &as_writer(read(a))),
        Ok(OsdResponse::Data(b"file a and more".to_vec()))
    );
    // An envelope not bound to its capability (another credential's id).
    let mut unbound = raw(&cap, &key, Protection::CmdRsp, read(a), now);
    unbound.payload[2 + cap.len() + 1] ^= 1;
    assert_eq!(
        send(&mut admin, osd, &unbound).unwrap_err(),
        ErrorCode::Malformed
    );
}

#[test]
fn t10_credentials_expire_and_key_exchange_revokes_them_at_once() {
    let (cluster, mut admin) = t10_cluster(1, "ALLDATA", &["--capability-lifetime", "3"]);
    put(&mut admin, "/fast/a", b"file a");
    let a = admin.open("/fast/a", Access::Read, None).unwrap().stat.id;
    let try_read = |c: &mut Client, cap: &[u8], key: &[u8; 32]| {
        let now = c.protocol_now();
        send(c, 1, &raw(cap, key, Protection::AllData, read(a), now))
    };
    let (cap, key) = admin.t10_credential(a, 1).unwrap();
    let key = *key.expose();
    try_read(&mut admin, &cap, &key).unwrap();
    // A refresh (not a revocation) leaves credentials in flight valid: here with a new
    // master (`keys rotate --master`, through the CLI), which brings a new root and new
    // partition keys, while the working slots credentials use stay.
    let generation = |keys: &[maat_proto::msg::T10KeyInfo], name: &str| {
        keys[0]
            .generations
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, g)| *g)
            .unwrap_or_else(|| panic!("no {name} in {keys:?}"))
    };
    let before = admin.t10_keys().unwrap();
    let home = cluster.admin_home();
    cluster.ok(
        &home,
        &["admin", "keys", "rotate", "--partition", "fast", "--master"],
        None,
    );
    let after = admin.t10_keys().unwrap();
    for key in ["master", "root"] {
        assert!(
            generation(&after, key) > generation(&before, key),
            "{key}: {before:?} -> {after:?}"
        );
    }
    try_read(&mut admin, &cap, &key).unwrap();
    let shown = String::from_utf8(cluster.ok(&home, &["admin", "keys", "show"], None)).unwrap();
    assert!(
        shown.contains(&format!("generation {}", generation(&after, "root"))),
        "{shown}"
    );
    // Revocation by key exchange: refused at once, with its reason; a fresh open works.
    admin.t10_rotate(None, Some("fast"), true, false).unwrap();
    assert_eq!(
        try_read(&mut admin, &cap, &key).unwrap_err(),
        ErrorCode::Revoked
    );
    assert_eq!(get(&mut admin, "/fast/a"), b"file a");
    // Expiry: a credential of a 3-second lifetime, 3.5 s later.
    let opened = admin.open("/fast/a", Access::Read, None).unwrap();
    let (cap, key) = admin.t10_credential(opened.stat.id, 1).unwrap();
    let key = *key.expose();
    try_read(&mut admin, &cap, &key).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(
        try_read(&mut admin, &cap, &key).unwrap_err(),
        ErrorCode::CapabilityExpired
    );
    // Rotating a partition without T10 credentials is refused by name.
    let e = admin.t10_rotate(None, Some("default"), false, false);
    assert_eq!(common::code(e), ErrorCode::InvalidArgument);
}

#[test]
fn t10_keys_are_durable_and_not_reset_by_a_restart() {
    let (mut cluster, mut admin) = t10_cluster(2, "CMDRSP", &[]);
    put(&mut admin, "/fast/a", b"kept");
    let before = admin.t10_keys().unwrap();
    assert!(before.iter().all(|k| k.generations[0].1 > 0), "{before:?}");
    drop(admin);
    cluster.restart();
    let mut admin = cluster.admin_client();
    let after = admin.t10_keys().unwrap();
    // The same keys on both sides (no exchange was needed), and data still reads.
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            b.generations[..2],
            a.generations[..2],
            "master and root kept"
        );
    }
    assert_eq!(get(&mut admin, "/fast/a"), b"kept");
    // The OSD's key file holds secrets: owner-only.
    use std::os::unix::fs::PermissionsExt;
    let mut found = 0;
    for entry in walk(&cluster.data()) {
        if entry.file_name().is_some_and(|n| n == "t10.keys") {
            let mode = std::fs::metadata(&entry).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", entry.display());
            // Issue 42: the keys came from the leader, fenced under its lease's token
            // (the OSD keeps the token with its keys, and takes no lower one).
            let state =
                maat_proto::t10_keys::KeyState::decode(&std::fs::read(&entry).unwrap()).unwrap();
            assert!(state.fence() >= 1, "{}", entry.display());
            found += 1;
        }
    }
    assert_eq!(found, 2, "one key file per OSD");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Authorized: the command ran (or found no object there), it was not refused.
fn authorized(r: Result<OsdResponse, ErrorCode>) -> bool {
    matches!(r, Ok(_) | Err(ErrorCode::NoSuchObject))
}

#[test]
fn t10_revocation_by_tag_is_per_file_durable_and_reaches_an_osd_that_was_down() {
    let (mut cluster, mut admin) = t10_cluster(2, "CMDRSP", &[]);
    put(&mut admin, "/fast/a", b"file a");
    put(&mut admin, "/fast/b", b"file b");
    let a = admin
        .open("/fast/a", Access::ReadWrite, None)
        .unwrap()
        .stat
        .id;
    let b = admin
        .open("/fast/b", Access::ReadWrite, None)
        .unwrap()
        .stat
        .id;
    let cred = |c: &Client, file, osd| {
        let (cap, key) = c.t10_credential(file, osd).unwrap();
        (cap, *key.expose())
    };
    let (old_a1, old_a2, old_b1, old_b2) = (
        cred(&admin, a, 1),
        cred(&admin, a, 2),
        cred(&admin, b, 1),
        cred(&admin, b, 2),
    );
    let try_read = |c: &mut Client, osd, file, (cap, key): &(Vec<u8>, [u8; 32])| {
        let now = c.protocol_now();
        send(c, osd, &raw(cap, key, Protection::CmdRsp, read(file), now))
    };
    for (osd, file, c) in [(1, a, &old_a1), (2, a, &old_a2), (1, b, &old_b1)] {
        assert!(authorized(try_read(&mut admin, osd, file, c)));
    }

    // The supervisor is held and OSD 2 killed, so it stays down.
    let held = common::Held::stop(cluster.local.supervisor_pid());
    common::signal("-KILL", cluster.pid("osd-2"));

    // Revoking file a by tag: OSD 1 refuses a's old credential at once, OSD 2 is named as
    // not told; b's credential is untouched.
    let msg::T10ObjectRevocation { file, tag, osds } = admin.t10_revoke_object("/fast/a").unwrap();
    assert_eq!((file, tag), (a, 1));
    assert_eq!(osds.len(), 2);
    assert!(osds.iter().any(|(o, p)| *o == 1 && p.is_none()), "{osds:?}");
    assert!(osds.iter().any(|(o, p)| *o == 2 && p.is_some()), "{osds:?}");
    assert_eq!(
        try_read(&mut admin, 1, a, &old_a1).unwrap_err(),
        ErrorCode::Revoked
    );
    assert!(authorized(try_read(&mut admin, 1, b, &old_b1)));
    // A fresh open carries the new tag and works.
    admin.open("/fast/a", Access::ReadWrite, None).unwrap();
    let tagged_a1 = cred(&admin, a, 1);
    assert!(authorized(try_read(&mut admin, 1, a, &tagged_a1)));
    // GET ATTRIBUTES under a credential reports the tag in force.
    let get_attributes = OsdCommand::GetAttributes {
        object: ObjectId {
            partition: DATA_PARTITION,
            file: a,
            stripe: 0,
        },
    };
    let now = admin.protocol_now();
    let (cap, key) = &tagged_a1;
    match send(
        &mut admin,
        1,
        &raw(cap, key, Protection::CmdRsp, get_attributes, now),
    ) {
        Ok(OsdResponse::Attributes(attributes)) => assert_eq!(attributes.policy_tag, 1),
        other => panic!("{other:?}"),
    }

    // Revocation by key exchange with OSD 2 down: OSD 1 is revoked and the answer names
    // OSD 2; until OSD 2 has new keys no credential is issued for it.
    let info = admin.t10_rotate(None, Some("fast"), true, false).unwrap();
    assert!(
        info.iter().any(|i| i.osd == 1 && i.problem.is_none()),
        "{info:?}"
    );
    assert!(
        info.iter().any(|i| i.osd == 2 && i.problem.is_some()),
        "{info:?}"
    );
    for (file, c) in [(a, &tagged_a1), (b, &old_b1)] {
        assert_eq!(
            try_read(&mut admin, 1, file, c).unwrap_err(),
            ErrorCode::Revoked
        );
    }
    admin.open("/fast/a", Access::ReadWrite, None).unwrap();
    let new_a1 = cred(&admin, a, 1);
    assert!(
        admin.t10_credential(a, 2).is_none(),
        "issued under revoked keys"
    );
    assert!(authorized(try_read(&mut admin, 1, a, &new_a1)));

    // Released, the supervisor restarts OSD 2, and the MDS brings it up to both
    // revocations within seconds.
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let probe = |c: &mut Client, file, (cap, key): &(Vec<u8>, [u8; 32])| {
        let now = c.protocol_now();
        send_if_up(c, 2, &raw(cap, key, Protection::CmdRsp, read(file), now))
    };
    loop {
        let revoked = (probe(&mut admin, a, &old_a2), probe(&mut admin, b, &old_b2));
        let refused = Some(Err(ErrorCode::Revoked));
        if revoked == (refused.clone(), refused) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "OSD 2 never learned the revocations: {revoked:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for (file, path) in [(a, "/fast/a"), (b, "/fast/b")] {
        admin.open(path, Access::ReadWrite, None).unwrap();
        let fresh = cred(&admin, file, 2);
        // (A restarted OSD answers NotReady until it has learnt the signed revocations
        // too, SPEC M9: its own catch-up, once a second.)
        let mut r = try_read(&mut admin, 2, file, &fresh);
        while r == Err(ErrorCode::NotReady) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
            r = try_read(&mut admin, 2, file, &fresh);
        }
        assert!(authorized(r.clone()), "{path} at OSD 2: {r:?}");
    }
    assert_eq!(get(&mut admin, "/fast/a"), b"file a");

    // Tags are durable at the OSDs. A credential under live keys, revoked by tag only, is
    // still refused after a restart (the MDS has nothing to push: its copy says the OSDs
    // hold the tag), and the newest works.
    admin.open("/fast/a", Access::ReadWrite, None).unwrap();
    let before_a1 = cred(&admin, a, 1);
    let msg::T10ObjectRevocation { tag, osds, .. } = admin.t10_revoke_object("/fast/a").unwrap();
    assert_eq!(tag, 2);
    assert!(osds.iter().all(|(_, p)| p.is_none()), "{osds:?}");
    admin.open("/fast/a", Access::ReadWrite, None).unwrap();
    let newest_a1 = cred(&admin, a, 1);
    drop(admin);
    cluster.restart();
    let mut admin = cluster.admin_client();
    assert_eq!(
        try_read(&mut admin, 1, a, &before_a1).unwrap_err(),
        ErrorCode::Revoked
    );
    assert!(authorized(try_read(&mut admin, 1, a, &newest_a1)));

    // Only the administrator revokes, and only in partitions with T10 credentials.
    cluster.add_user("eve", "eve-pass", None);
    let eve = cluster.user_client("eve", "eve-pass");
    assert_eq!(
        common::code(eve.t10_revoke_object("/fast/a")),
        ErrorCode::PermissionDenied
    );
    put(&mut admin, "/plain", b"signed capabilities");
    assert_eq!(
        common::code(admin.t10_revoke_object("/plain")),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn t10_read_opens_are_cached_until_a_credential_is_revoked() {
    let (_cluster, mut admin) = t10_cluster(1, "CMDRSP", &[]);
    put(&mut admin, "/fast/a", b"file a");
    assert_eq!(get(&mut admin, "/fast/a"), b"file a");
    // Later read opens are answered from the client's cache: the MDS issues nothing.
    let issued = counter(&admin, "mds", "t10_credentials_issued");
    for _ in 0..5 {
        assert_eq!(get(&mut admin, "/fast/a"), b"file a");
    }
    assert_eq!(counter(&admin, "mds", "t10_credentials_issued"), issued);
    // Revoked by tag: the cached open's credential is refused, dropped with the cached
    // open, and the get opens at the MDS again (which decides anew) and works.
    admin.t10_revoke_object("/fast/a").unwrap();
    assert_eq!(get(&mut admin, "/fast/a"), b"file a");
    let reissued = counter(&admin, "mds", "t10_credentials_issued");
    assert!(reissued > issued);
    // A read through a cached open handle is refused once, then the file opens afresh.
    let opened = admin.open("/fast/a", Access::Read, None).unwrap();
    admin.t10_revoke_object("/fast/a").unwrap();
    assert_eq!(
        common::code(admin.read_at(&opened, 0, 6)),
        ErrorCode::Revoked
    );
    let opened = admin.open("/fast/a", Access::Read, None).unwrap();
    assert_eq!(admin.read_at(&opened, 0, 6).unwrap(), b"file a");
    assert!(counter(&admin, "mds", "t10_credentials_issued") > reissued);
}
