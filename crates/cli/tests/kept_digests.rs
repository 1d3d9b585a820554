//! SPEC T1 ALLDATA over a kept digest, against real daemons: an OSD answers a read of a
//! whole object with the digest its write's check computed, sending the data straight
//! from a *sealed* file, and never writes a sealed file in place (it copies it first), so
//! the bytes a reader sends are always those its digest is of. Envelopes in the layout
//! before digests (method byte 0x03) are still served, answered in kind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{content, counter, object_file, Cluster};
use maat_client::Client;
use maat_proto::msg::{Access, ObjectId, OsdCommand, OsdRequest, OsdResponse, DATA_PARTITION};
use maat_proto::protection::{self, Protection, RequestHeader, Sealing};
use maat_proto::wire::FrameType;
use maat_proto::UnixMillis;
use std::io::Read;
use std::os::unix::fs::MetadataExt;

const KEPT: &str = "bytes_read_digest_kept";

fn call(c: &Client, capability: &[u8], command: OsdCommand) -> OsdResponse {
    c.osd_call(
        1,
        OsdRequest {
            capability: capability.to_vec(),
            command,
        },
    )
    .unwrap()
}

fn read_all(c: &Client, capability: &[u8], object: ObjectId) -> Vec<u8> {
    let command = OsdCommand::Read {
        object,
        offset: 0,
        length: 512 * 1024,
    };
    match call(c, capability, command) {
        OsdResponse::Data(d) => d,
        other => panic!("{other:?}"),
    }
}

fn write(c: &Client, capability: &[u8], object: ObjectId, offset: u64, data: &[u8], replace: bool) {
    let command = OsdCommand::Write {
        object,
        offset,
        data: data.to_vec(),
        replace,
    };
    assert_eq!(call(c, capability, command), OsdResponse::Ok);
}

/// Creates /home/erin/obj (one stripe) as `c`: its read-write capability and object.
fn open_object(c: &Client) -> (Vec<u8>, ObjectId) {
    let opened = c
        .open("/home/erin/obj", Access::ReadWrite, Some(0o600))
        .unwrap();
    let object = ObjectId {
        partition: DATA_PARTITION,
        file: opened.stat.id,
        stripe: 0,
    };
    (opened.capability, object)
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o777
}

#[test]
fn whole_objects_are_read_from_their_kept_digest_and_sealed_files_are_never_written_in_place() {
    let mut cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin pass", None);
    let erin = cluster.user_client("erin", "erin pass");
    let (cap, object) = open_object(&erin);
    // `maat up`'s default method, over a digest.
    let method = maat_proto::signed::Unverified::<maat_proto::capability::Capability>::decode(&cap)
        .unwrap()
        .unverified_body()
        .protection;
    assert_eq!(method, Protection::AllData);

    // A whole-object write leaves a sealed file; a read of all of it (large: sent from
    // the file) is answered from the kept digest, a read of part of it is not.
    let a = content(1, 300 * 1024);
    write(&erin, &cap, object, 0, &a, true);
    let path = object_file(&cluster.data(), object.file, 0);
    assert_eq!(mode(&path), 0o400);
    let before = counter(&erin, "osd", KEPT);
    assert_eq!(read_all(&erin, &cap, object), a);
    assert_eq!(counter(&erin, "osd", KEPT) - before, a.len() as u64);
    let part = OsdCommand::Read {
        object,
        offset: 10,
        length: 100,
    };
    assert_eq!(
        call(&erin, &cap, part),
        OsdResponse::Data(a[10..110].to_vec())
    );
    assert_eq!(counter(&erin, "osd", KEPT) - before, a.len() as u64);

    // A reader holding the sealed file (as a send in flight does) keeps exactly the bytes
    // of its digest across a write in place: the write went to a copy.
    let mut held = std::fs::File::open(&path).unwrap();
    let sealed_inode = std::fs::metadata(&path).unwrap().ino();
    write(&erin, &cap, object, 5, b"XYZ", false);
    let mut expected = a.clone();
    expected[5..8].copy_from_slice(b"XYZ");
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), sealed_inode);
    assert_eq!(mode(&path), 0o600);
    let mut kept = Vec::new();
    held.read_to_end(&mut kept).unwrap();
    assert_eq!(kept, a, "the sealed file was written in place");
    let counted = counter(&erin, "osd", KEPT);
    assert_eq!(read_all(&erin, &cap, object), expected);
    assert_eq!(
        counter(&erin, "osd", KEPT),
        counted,
        "a digest outlived its file"
    );
    // Unsealed files are written in place as before.
    let unsealed_inode = std::fs::metadata(&path).unwrap().ino();
    write(&erin, &cap, object, 0, b"Q", false);
    expected[0] = b'Q';
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), unsealed_inode);
    assert_eq!(read_all(&erin, &cap, object), expected);

    // Append and a truncating write at an offset copy a sealed file too; small objects
    // (read into memory, not sent from the file) are answered from their digest as well.
    let b = content(2, 1000);
    write(&erin, &cap, object, 0, &b, true);
    assert_eq!(mode(&path), 0o400);
    let counted = counter(&erin, "osd", KEPT);
    assert_eq!(read_all(&erin, &cap, object), b);
    assert_eq!(counter(&erin, "osd", KEPT) - counted, b.len() as u64);
    let append = OsdCommand::Append {
        object,
        data: b"tail".to_vec(),
    };
    assert_eq!(call(&erin, &cap, append), OsdResponse::Ok);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(read_all(&erin, &cap, object), [&b[..], b"tail"].concat());
    write(&erin, &cap, object, 0, &b, true);
    let sealed_inode = std::fs::metadata(&path).unwrap().ino();
    write(&erin, &cap, object, 10, b"end", true);
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), sealed_inode);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(read_all(&erin, &cap, object), [&b[..10], b"end"].concat());

    // Digests live in memory only: after a restart a sealed file is read and its answer
    // sealed from the data.
    write(&erin, &cap, object, 0, &a, true);
    assert_eq!(mode(&path), 0o400);
    cluster.restart();
    let erin = cluster.user_client("erin", "erin pass");
    let opened = erin
        .open("/home/erin/obj", Access::ReadWrite, None)
        .unwrap();
    assert_eq!(read_all(&erin, &opened.capability, object), a);
    assert_eq!(counter(&erin, "osd", KEPT), 0);
    write(&erin, &opened.capability, object, 1, b"!", false);
    let mut expected = a.clone();
    expected[1] = b'!';
    assert_eq!(read_all(&erin, &opened.capability, object), expected);
}

/// Sends `request` sealed as `sealing` on the client's own session with OSD 1, its bulk
/// data apart unless `data_in_message`; the answer opened and the data put back.
fn raw(c: &Client, request: &OsdRequest, sealing: Sealing, data_in_message: bool) -> OsdResponse {
    let (sid, secret) = c.osd_session(1).unwrap();
    let secret = *secret.expose();
    let keys = protection::EnvelopeKeys::new(&secret);
    let (head, bulk) = if data_in_message {
        (request.clone(), &[][..])
    } else {
        request.split_bulk()
    };
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let mut nonce = [0; 16];
    let n = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    nonce[..8].copy_from_slice(&n.to_be_bytes());
    let header = RequestHeader {
        method: sealing.method,
        data_digest: sealing.data_digest,
        session_id: sid,
        timestamp: UnixMillis(c.protocol_now()),
        nonce,
    };
    let payload = protection::seal_request(
        &keys,
        &header,
        &maat_proto::msg::encode(&head).unwrap(),
        bulk,
        &request.capability,
        &mut maat_crypto::OsRng,
    )
    .unwrap();
    assert_eq!(payload[0], sealing.byte());
    let (t, answer) = c.osd_raw(1, FrameType::SecRequest, &payload).unwrap();
    assert_eq!(t, FrameType::SecResponse);
    // Answered as asked: not in the other layout.
    let other = Sealing {
        data_digest: !sealing.data_digest,
        ..sealing
    };
    assert!(protection::open_response(&keys, other, &sid, &nonce, &answer).is_err());
    let (_, message, data) =
        protection::open_response(&keys, sealing, &sid, &nonce, &answer).unwrap();
    let mut r: Result<OsdResponse, maat_proto::msg::WireError> =
        maat_proto::msg::decode(&message).unwrap();
    maat_proto::msg::put_response_bulk(&mut r, data).unwrap();
    r.unwrap()
}

/// A client of the layout before digests (ALLDATA's MAC over the data itself, method byte
/// 0x03) is still served, answered in that layout, and its whole-object writes leave
/// unsealed files (no digest was computed). A write whose data travels inside the message
/// (no bulk) under 0x83 keeps no digest either: the envelope's digest is of the empty
/// bulk, not of the data written.
#[test]
fn alldata_without_a_digest_is_still_served_and_keeps_no_digest() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin pass", None);
    let c = cluster.user_client("erin", "erin pass");
    let (cap, object) = open_object(&c);
    let command = |data: &[u8]| OsdRequest {
        capability: cap.clone(),
        command: OsdCommand::Write {
            object,
            offset: 0,
            data: data.to_vec(),
            replace: true,
        },
    };
    let read = OsdRequest {
        capability: cap.clone(),
        command: OsdCommand::Read {
            object,
            offset: 0,
            length: 512 * 1024,
        },
    };
    let legacy = Sealing {
        method: Protection::AllData,
        data_digest: false,
    };
    let current = Sealing::current(Protection::AllData);
    let path = || object_file(&cluster.data(), object.file, 0);

    let a = content(3, 200 * 1024);
    assert_eq!(raw(&c, &command(&a), legacy, false), OsdResponse::Ok);
    assert_eq!(mode(&path()), 0o600);
    assert_eq!(raw(&c, &read, legacy, false), OsdResponse::Data(a.clone()));
    assert_eq!(raw(&c, &read, current, false), OsdResponse::Data(a.clone()));
    assert_eq!(counter(&c, "osd", KEPT), 0);

    let b = content(4, 200 * 1024);
    assert_eq!(raw(&c, &command(&b), current, true), OsdResponse::Ok);
    assert_eq!(mode(&path()), 0o600);
    assert_eq!(read_all(&c, &cap, object), b);
    assert_eq!(counter(&c, "osd", KEPT), 0);

    // The same write with its data as bulk is sealed, and read under its digest, in
    // either layout of the read.
    assert_eq!(raw(&c, &command(&b), current, false), OsdResponse::Ok);
    assert_eq!(mode(&path()), 0o400);
    assert_eq!(raw(&c, &read, current, false), OsdResponse::Data(b.clone()));
    assert_eq!(counter(&c, "osd", KEPT), b.len() as u64);
    assert_eq!(raw(&c, &read, legacy, false), OsdResponse::Data(b.clone()));
}

/// Whole-object writes (which leave sealed files with kept digests), writes in place
/// (which copy a sealed file first) and whole-object reads, all at once on one object:
/// every read's answer verifies at the client. An answer sealed from a kept digest whose
/// file was being written in place would fail the client's check of the data's digest.
/// Seen failing (two runs in three) with the kept digest matched by length but not by
/// inode: a copy renamed into place briefly answered with its sealed original's digest.
#[test]
fn concurrent_replacements_writes_in_place_and_reads_always_verify() {
    const LEN: usize = 200 * 1024;
    const ROUNDS: u64 = 100;
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin pass", None);
    let replacer = cluster.user_client("erin", "erin pass");
    let patcher = cluster.user_client("erin", "erin pass");
    let reader = cluster.user_client("erin", "erin pass");
    let (cap, object) = open_object(&replacer);
    write(&replacer, &cap, object, 0, &content(100, LEN), true);
    let done = std::sync::atomic::AtomicBool::new(false);
    /// Stops the reader however the writers end (a failed write must fail the test,
    /// not leave the reader looping and the scope waiting for it).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let reads = std::thread::scope(|s| {
        let readers = s.spawn(|| {
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                assert_eq!(read_all(&reader, &cap, object).len(), LEN);
                reads += 1;
            }
            reads
        });
        let patches = s.spawn(|| {
            for k in 0..ROUNDS {
                let at = (k * 4096 * 7) % (LEN as u64 - 4096);
                write(&patcher, &cap, object, at, &[k as u8; 4096], false);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        {
            let _stop = Stop(&done);
            for v in 0..ROUNDS {
                write(&replacer, &cap, object, 0, &content(v, LEN), true);
            }
            patches.join().unwrap();
        }
        readers.join().unwrap()
    });
    assert!(reads > 0);
    // The kept-digest path was exercised, not only reads sealed from the data.
    assert!(
        counter(&reader, "osd", KEPT) > 0,
        "no read used a kept digest"
    );
    let last = content(999, LEN);
    write(&replacer, &cap, object, 0, &last, true);
    assert_eq!(read_all(&reader, &cap, object), last);
}

/// Issue 40, item 9: a sealed object changed on the OSD's disk (outside Maat) was sent
/// under the digest its write kept, and the client reported "bad MAC on response", as if
/// the wire had been tampered with. The OSD now sees the file changed since (its change
/// time), checks it, and refuses with `ObjectDamaged`; a file touched but not changed is
/// still served from its digest.
#[test]
fn an_object_changed_on_disk_is_refused_as_damaged_not_as_a_bad_mac() {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin pass", None);
    let erin = cluster.user_client("erin", "erin pass");
    let (cap, object) = open_object(&erin);
    let a = content(3, 300 * 1024);
    write(&erin, &cap, object, 0, &a, true);
    let path = object_file(&cluster.data(), object.file, 0);
    assert_eq!(mode(&path), 0o400);
    assert_eq!(read_all(&erin, &cap, object), a);
    // Touched (its change time moves), not changed: served as before.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(read_all(&erin, &cap, object), a);
    // One byte flipped in place, its mode put back.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_at(&[a[1000] ^ 0x01], 1000).unwrap();
    drop(f);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let e = erin
        .osd_call(
            1,
            OsdRequest {
                capability: cap.clone(),
                command: OsdCommand::Read {
                    object,
                    offset: 0,
                    length: 512 * 1024,
                },
            },
        )
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(maat_proto::msg::ErrorCode::ObjectDamaged),
        "{e}"
    );
    assert!(e.to_string().contains("changed on disk"), "{e}");
}
