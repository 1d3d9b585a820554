//! Issue 41: every object in several copies on distinct OSDs, on real daemons. With
//! `maat up`'s defaults (4 OSDs, the `default` partition keeping 3 copies, files
//! encrypted under ALLDATA), every stripe of every file lies on three OSDs; with one OSD
//! killed and held down, every file still reads back byte-identical; with one OSD's
//! objects wiped, or one copy's bytes flipped, likewise; a write that misses a copy is
//! acknowledged only once two copies took it and the third is recorded as missed, and
//! that copy is never served when its OSD comes back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{content, object_files, signal, Cluster, Held};
use maat_client::{Client, ScrubDepth};
use maat_proto::msg::{Access, ErrorCode, STRIPE_UNIT_BYTES};
use std::collections::BTreeSet;
use std::path::Path;

fn put(c: &Client, path: &str, data: &[u8]) -> Result<(), maat_client::ClientError> {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .map(drop)
}

fn get(c: &Client, path: &str) -> Result<Vec<u8>, maat_client::ClientError> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {})?;
    Ok(out)
}

/// The OSD directory ("osd-N") an object file lies in.
fn osd_of(object: &Path) -> String {
    object
        .ancestors()
        .filter_map(|a| a.file_name())
        .map(|n| n.to_string_lossy().to_string())
        .find(|n| n.starts_with("osd-"))
        .unwrap()
}

/// 24 files of 4 KiB to about 3 MiB (so single-object files and striped ones).
fn files() -> Vec<(String, Vec<u8>)> {
    (0..24u64)
        .map(|i| {
            let len = 4096 + (i as usize * 137_909) % (3 << 20);
            (format!("/r{i}"), content(i, len))
        })
        .collect()
}

fn stripes(len: usize) -> u32 {
    (len as u64).div_ceil(STRIPE_UNIT_BYTES).max(1) as u32
}

#[test]
fn every_stripe_has_three_copies_and_every_file_survives_a_lost_osd() {
    let cluster = Cluster::start_encrypting(4, &[]);
    let c = cluster.admin_client();
    let files = files();
    for (path, data) in &files {
        put(&c, path, data).unwrap();
    }
    // Three copies of every stripe, on three distinct OSDs.
    let data_dir = cluster.data();
    let mut on_osd2 = Vec::new();
    for (path, data) in &files {
        let id = c.stat(path).unwrap().id;
        for stripe in 0..stripes(data.len()) {
            let copies = object_files(&data_dir, id, stripe);
            let osds: BTreeSet<String> = copies.iter().map(|p| osd_of(p)).collect();
            assert_eq!(osds.len(), 3, "{path} stripe {stripe}: {copies:?}");
            let expected: BTreeSet<String> = c
                .copies_of("default", id, stripe)
                .unwrap()
                .iter()
                .map(|o| format!("osd-{o}"))
                .collect();
            assert_eq!(
                osds, expected,
                "{path} stripe {stripe} lies where placement says"
            );
            if osds.contains("osd-2") {
                on_osd2.push(path.clone());
            }
        }
    }
    // With one copy per object, most of these files would be lost with osd-2.
    assert!(on_osd2.len() >= 12, "{on_osd2:?}");

    // osd-2 killed and kept down (its supervisor held): every file reads back.
    let held = Held::stop(cluster.local.supervisor_pid());
    signal("-KILL", cluster.pid("osd-2"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let reader = cluster.admin_client();
    for (path, data) in &files {
        assert_eq!(&get(&reader, path).unwrap(), data, "{path} with osd-2 down");
    }
    // A write that misses a copy (osd-2 down) is acknowledged once two copies took it
    // and the MDS recorded the third as missed (the first waits until the MDS counts
    // osd-2 down, at most 5 s: until then osd-2 might be serving without knowing).
    let small = content(99, 1000);
    let mut degraded = Vec::new();
    for (path, _) in &files {
        let id = reader.stat(path).unwrap().id;
        if reader.copies_of("default", id, 0).unwrap().contains(&2) {
            put(&reader, path, &small).unwrap();
            degraded.push((path.clone(), id));
        }
    }
    assert!(!degraded.is_empty());
    let recorded = reader.client_stats().copies_recorded_missed;
    assert!(recorded >= degraded.len() as u64, "{recorded}");
    // `maat health` and `maat admin osd ls` count them: one degraded object per file
    // written (its one stripe; the stripes its put cut off are past the end), all on
    // osd-2.
    let admin = cluster.admin_home();
    let health: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&admin, &["health", "--json"], None)).unwrap();
    assert_eq!(health["status"], "HEALTH_WARN", "{health}");
    assert_eq!(health["objects_degraded"], degraded.len(), "{health}");
    assert_eq!(health["copies_missed"], degraded.len(), "{health}");
    let osds: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&admin, &["admin", "osd", "ls", "--json"], None))
            .unwrap();
    for osd in osds.as_array().unwrap() {
        let expected = if osd["id"] == 2 { degraded.len() } else { 0 };
        assert_eq!(osd["copies_missed"], expected, "{osds}");
    }
    // osd-2 comes back (its supervisor restarts it) with its old copies: it serves none
    // of those that missed a write, and every file reads the bytes acknowledged.
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let fresh = cluster.admin_client();
    let (first, first_id) = degraded[0].clone();
    let ask_osd2 = |path: &str, id: u64| {
        let opened = fresh.open(path, Access::Read, None).unwrap();
        let length = maat_proto::limits::ENCRYPTED_OBJECT_BYTES_MAX as u32;
        let request = common::read_request(&opened.capability, id, 0, length);
        fresh.osd_call(2, request)
    };
    loop {
        match ask_osd2(&first, first_id) {
            Err(maat_client::ClientError::Net { .. }) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "osd-2 never came back"
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            other => break assert_copy_stale(&first, other),
        }
    }
    for (path, id) in &degraded {
        assert_copy_stale(path, ask_osd2(path, *id));
        assert_eq!(
            get(&fresh, path).unwrap(),
            small,
            "{path} after osd-2 came back"
        );
    }
    for (path, data) in files
        .iter()
        .filter(|(p, _)| !degraded.iter().any(|(d, _)| d == p))
    {
        assert_eq!(
            &get(&fresh, path).unwrap(),
            data,
            "{path} after osd-2 came back"
        );
    }
    // A repairing scrub (this one, or the scrubber's after osd-2's restart) puts the
    // copies back; the MDS's counters (`maat stats`, `/metrics`) say so.
    let report = fresh
        .scrub("/", ScrubDepth::Deep, true, &mut |_| {})
        .unwrap();
    let mds_counter = |name: &str| {
        (fresh.mds_stats().unwrap().counter(name)).unwrap_or_else(|| panic!("{name} not counted"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while mds_counter("copies_missed") > 0 {
        assert!(std::time::Instant::now() < deadline, "{report:?}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert_eq!(mds_counter("objects_degraded"), 0);
    assert!(mds_counter("scrub_runs") >= 1);
    assert!(mds_counter("scrub_runs_deep") >= 1);
    assert!(
        mds_counter("scrub_copies_repaired") >= degraded.len() as u64,
        "{report:?}"
    );
    assert!(mds_counter("scrub_last_run_timestamp_seconds") > 1_700_000_000);
}

/// Bytes each OSD has read out, by OSD id.
fn bytes_read_by_osd(c: &Client) -> std::collections::BTreeMap<u64, u64> {
    c.daemon_stats()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let id = s.daemon.strip_prefix("osd ")?.parse().ok()?;
            Some((id, s.counter("bytes_read")?))
        })
        .collect()
}

#[test]
fn reads_of_one_object_by_many_clients_spread_over_its_copies() {
    let cluster = Cluster::start(4, &[]);
    let writer = cluster.admin_client();
    let data = content(7, 60_000);
    put(&writer, "/hot", &data).unwrap();
    let id = writer.stat("/hot").unwrap().id;
    let copies = writer.copies_of("default", id, 0).unwrap();
    assert_eq!(copies.len(), 3);
    // Twelve clients read the one object, each twice: each asks the copy its own spread
    // picks, every time (reading from the first copy only, the chance that twelve do so
    // by luck is 3 in 3^12).
    let before = bytes_read_by_osd(&writer);
    for _ in 0..12 {
        let reader = cluster.admin_client();
        for _ in 0..2 {
            assert_eq!(get(&reader, "/hot").unwrap(), data);
        }
        assert_eq!(reader.client_stats().copy_failovers, 0);
    }
    let after = bytes_read_by_osd(&writer);
    let served: Vec<u64> = copies
        .iter()
        .copied()
        .filter(|osd| after.get(osd) > before.get(osd))
        .collect();
    assert!(served.len() >= 2, "served by {served:?} of {copies:?}");
    // Nothing was read from the OSD that holds no copy.
    for (osd, read) in &after {
        if !copies.contains(osd) {
            assert_eq!(before.get(osd), Some(read), "osd {osd}");
        }
    }
    // Each read took the whole object from one copy: 24 reads' bytes in all.
    let total: u64 = copies
        .iter()
        .map(|o| after.get(o).copied().unwrap_or(0) - before.get(o).copied().unwrap_or(0))
        .sum();
    assert_eq!(total, 24 * data.len() as u64);
}

#[test]
fn the_copies_of_a_change_share_one_digest_of_its_data() {
    // ALLDATA (the default method) seals each copy's request under its own OSD session
    // over a digest of the data: made once per stripe, not once per copy.
    let cluster = Cluster::start(4, &[]);
    let c = cluster.admin_client();
    let made = |c: &Client| c.client_stats().data_digests;
    let before = made(&c);
    put(&c, "/one", &content(3, 60_000)).unwrap();
    assert_eq!(made(&c) - before, 1);
    let before = made(&c);
    let data = content(4, 3 * STRIPE_UNIT_BYTES as usize);
    put(&c, "/three", &data).unwrap();
    // (And one for the look past its end, a whole number of stripes: one request shared
    // by the three copies, asked at once.)
    assert_eq!(made(&c) - before, 3 + 1);
    // Every copy took its stripe under that digest, and each serves it.
    let id = c.stat("/three").unwrap().id;
    for stripe in 0..3 {
        assert_eq!(object_files(&cluster.data(), id, stripe).len(), 3);
    }
    let reader = cluster.admin_client();
    assert_eq!(get(&reader, "/three").unwrap(), data);
}

/// osd-2's answer to a read of a copy that missed a write: refused `CopyStale`.
fn assert_copy_stale(
    path: &str,
    answer: Result<maat_proto::msg::OsdResponse, maat_client::ClientError>,
) {
    match answer {
        Err(maat_client::ClientError::Refused(e)) => {
            assert_eq!(e.code, ErrorCode::CopyStale, "{path}: {e}")
        }
        Err(e) => panic!("{path}: osd-2 refused, but not as a copy that missed a write: {e}"),
        Ok(answer) => panic!(
            "{path}: osd-2 served a copy that missed a write ({})",
            match answer {
                maat_proto::msg::OsdResponse::Data(bytes) => format!("{} bytes", bytes.len()),
                _ => "not data".to_string(),
            }
        ),
    }
}

#[test]
fn a_wiped_osd_and_a_flipped_byte_are_read_around() {
    let mut cluster = Cluster::start_encrypting(4, &[]);
    let c = cluster.admin_client();
    let files = files();
    for (path, data) in &files {
        put(&c, path, data).unwrap();
    }
    let ids: Vec<u64> = files.iter().map(|(p, _)| c.stat(p).unwrap().id).collect();
    let objects: u64 = files.iter().map(|(_, d)| u64::from(stripes(d.len()))).sum();
    // A healthy cluster scrubs clean: every copy of every object read and good.
    let clean = c.scrub("/", ScrubDepth::Deep, false, &mut |_| {}).unwrap();
    assert_eq!((clean.files, clean.objects), (24, objects), "{clean:?}");
    assert_eq!(clean.copies_good, 3 * objects, "{clean:?}");
    assert!(clean.findings.is_empty(), "{clean:?}");
    let admin = cluster.admin_home();
    let out = cluster.ok(&admin, &["admin", "scrub"], None);
    assert!(
        String::from_utf8_lossy(&out).contains("0 missing, 0 bad"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // One OSD loses every object (its identity stays, as a replaced disk under the same
    // OSD id would after `maat osd` formats it... here: the objects deleted while down).
    let wiped = std::cell::Cell::new(0u64);
    cluster.restart_with(|data| {
        let mut wiped_here = 0;
        for ((_, bytes), id) in files.iter().zip(&ids) {
            for stripe in 0..stripes(bytes.len()) {
                for p in object_files(data, *id, stripe) {
                    if osd_of(&p) == "osd-3" {
                        std::fs::remove_file(&p).unwrap();
                        wiped_here += 1;
                    }
                }
            }
        }
        assert!(wiped_here >= 12, "{wiped_here}");
        wiped.set(wiped_here);
    });
    // The reader asks osd-3 first for some stripe (reads spread over copies by client:
    // its spread is chosen so), so some read must fail over.
    let mut reader = cluster.admin_client();
    let spread = (0..64u64)
        .find(|s| {
            reader.set_read_spread(*s);
            files.iter().zip(&ids).any(|((_, bytes), id)| {
                (0..stripes(bytes.len()))
                    .any(|stripe| reader.reads_ask("default", *id, stripe).unwrap()[0] == 3)
            })
        })
        .expect("a spread that asks osd-3 first somewhere");
    reader.set_read_spread(spread);
    for (path, data) in &files {
        assert_eq!(
            &get(&reader, path).unwrap(),
            data,
            "{path} with osd-3 wiped"
        );
    }
    assert!(reader.client_stats().copy_failovers > 0);
    // Scrub finds exactly the wiped copies, and no object without a good copy.
    let after_wipe = reader
        .scrub("/", ScrubDepth::Deep, false, &mut |_| {})
        .unwrap();
    assert_eq!(after_wipe.copies_missing, wiped.get(), "{after_wipe:?}");
    assert_eq!(
        (after_wipe.copies_bad, after_wipe.objects_lost),
        (0, 0),
        "{after_wipe:?}"
    );
    assert_eq!(after_wipe.copies_good, 3 * objects - wiped.get());
    assert!(after_wipe
        .findings
        .iter()
        .all(|f| f.contains("osd 3: missing")));
    let failed = cluster.maat(&admin, &["admin", "scrub", "--json"], None);
    assert_eq!(failed.status.code(), Some(1), "findings exit 1");
    let json: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(json["copies_missing"], wiped.get(), "{json}");

    // A light repair (digests compared, only good copies read) puts every wiped copy
    // back from a good one, on the OSD placement names; a deep scrub then finds every
    // copy good.
    let repaired = reader
        .scrub("/", ScrubDepth::Light, true, &mut |_| {})
        .unwrap();
    assert_eq!(repaired.copies_repaired, wiped.get(), "{repaired:?}");
    assert!(
        repaired.findings.iter().all(|f| f.ends_with("; repaired")),
        "{repaired:?}"
    );
    let on_osd3 = |data: &Path| -> u64 {
        let mut n = 0;
        for ((_, bytes), id) in files.iter().zip(&ids) {
            for stripe in 0..stripes(bytes.len()) {
                n += object_files(data, *id, stripe)
                    .iter()
                    .filter(|p| osd_of(p) == "osd-3")
                    .count() as u64;
            }
        }
        n
    };
    assert_eq!(on_osd3(&cluster.data()), wiped.get());
    let healed = reader
        .scrub("/", ScrubDepth::Deep, false, &mut |_| {})
        .unwrap();
    assert!(healed.findings.is_empty(), "{healed:?}");
    assert_eq!(healed.copies_good, 3 * objects, "{healed:?}");

    // One byte flipped in the copy of each stripe-0 object that the reader below asks
    // first (reads spread over copies by client: its spread is set): still the right
    // bytes.
    const SPREAD: u64 = 5;
    let mut order = cluster.admin_client();
    order.set_read_spread(SPREAD);
    let firsts: Vec<u64> = ids
        .iter()
        .take(6)
        .map(|id| order.reads_ask("default", *id, 0).unwrap()[0])
        .collect();
    let flipped = std::cell::Cell::new(0u64);
    cluster.restart_with(|data| {
        for (id, first) in ids.iter().zip(&firsts) {
            let copy = object_files(data, *id, 0)
                .into_iter()
                .find(|p| osd_of(p) == format!("osd-{first}"));
            let Some(copy) = copy else {
                continue; // wiped above
            };
            let mut bytes = std::fs::read(&copy).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0x40;
            std::fs::write(&copy, bytes).unwrap();
            flipped.set(flipped.get() + 1);
        }
    });
    let mut reader = cluster.admin_client();
    reader.set_read_spread(SPREAD);
    // A light scrub names each flipped copy (its digest differs from the two others')
    // before any read.
    let after_flip = reader
        .scrub("/", ScrubDepth::Light, false, &mut |_| {})
        .unwrap();
    assert_eq!(flipped.get(), 6);
    assert_eq!(after_flip.copies_missing, 0, "{after_flip:?}");
    assert_eq!(after_flip.copies_bad, flipped.get(), "{after_flip:?}");
    assert_eq!(after_flip.objects_lost, 0, "{after_flip:?}");
    for (path, data) in files.iter().take(6) {
        assert_eq!(
            &get(&reader, path).unwrap(),
            data,
            "{path} with a flipped byte"
        );
    }
    assert!(reader.client_stats().copy_failovers > 0);
    // `maat admin scrub --repair` replaces each flipped copy (exit 0: all repaired);
    // then no read needs another copy.
    let out = cluster.maat(&admin, &["admin", "scrub", "--repair", "--json"], None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["copies_repaired"], flipped.get(), "{json}");
    let fresh = cluster.admin_client();
    for (path, data) in &files {
        assert_eq!(&get(&fresh, path).unwrap(), data, "{path} after repair");
    }
    assert_eq!(fresh.client_stats().copy_failovers, 0);
    let healed = fresh
        .scrub("/", ScrubDepth::Deep, false, &mut |_| {})
        .unwrap();
    assert!(healed.findings.is_empty(), "{healed:?}");
}

/// A repair is a write like any other, checked by the OSD that takes it: a read
/// capability cannot make one, nor another user's capability, nor one for another file;
/// and the OSD replaces a copy only if it is still in the state the repair read, so a
/// write that landed in between is never undone.
#[test]
fn a_repair_needs_write_access_and_never_overwrites_a_changed_copy() {
    use maat_proto::msg::{Access, ErrorCode, ObjectId, OsdCommand, OsdRequest, OsdResponse};
    let cluster = Cluster::start(3, &[]);
    cluster.add_user("alice", "alice pass phrase", None);
    let admin = cluster.admin_client();
    put(&admin, "/f", b"the right bytes").unwrap();
    put(&admin, "/g", b"another file").unwrap();
    let alice = cluster.user_client("alice", "alice pass phrase");
    let f = admin.open("/f", Access::ReadWrite, None).unwrap();
    let g = admin.open("/g", Access::ReadWrite, None).unwrap();
    let object = |id: u64| ObjectId {
        partition: maat_proto::msg::DATA_PARTITION,
        file: id,
        stripe: 0,
    };
    let osd = admin.copies_of("default", f.stat.id, 0).unwrap()[1];
    let call = |c: &Client, capability: &[u8], command: OsdCommand| {
        c.osd_call(
            osd,
            OsdRequest {
                capability: capability.to_vec(),
                command,
            },
        )
    };
    let digest = |c: &Client, capability: &[u8]| match call(
        c,
        capability,
        OsdCommand::Digest {
            object: object(f.stat.id),
        },
    ) {
        Ok(OsdResponse::Digest(d)) => d,
        other => panic!("{other:?}"),
    };
    let before = digest(&admin, &f.capability);
    assert_eq!(before, maat_crypto::hash::blake3(&[b"the right bytes"]));
    let replace = |expect: Option<[u8; 32]>| OsdCommand::ReplaceIf {
        object: object(f.stat.id),
        expect,
        data: b"a forged copy!!".to_vec(),
    };
    let refused = |r: Result<OsdResponse, maat_client::ClientError>| {
        r.unwrap_err().code().expect("a typed refusal")
    };
    // Alice may read /f (0644), so she may ask its digest, but not replace it.
    let alice_read = alice.open("/f", Access::Read, None).unwrap();
    assert_eq!(digest(&alice, &alice_read.capability), before);
    assert_eq!(
        refused(call(&alice, &alice_read.capability, replace(Some(before)))),
        ErrorCode::PermissionDenied
    );
    // With write access alone (/f made 0602), she could learn from ReplaceIf's answer
    // whether /f holds bytes she guesses: it needs read access too.
    admin.chmod("/f", 0o602).unwrap();
    let alice_write = alice.open("/f", Access::ReadWrite, None).unwrap();
    assert_eq!(
        refused(call(&alice, &alice_write.capability, replace(Some(before)))),
        ErrorCode::PermissionDenied
    );
    admin.chmod("/f", 0o644).unwrap();
    // The administrator's capability in alice's hands: not hers.
    assert_eq!(
        refused(call(&alice, &f.capability, replace(Some(before)))),
        ErrorCode::WrongUser
    );
    // A capability for /g on /f's object.
    assert_eq!(
        refused(call(&admin, &g.capability, replace(Some(before)))),
        ErrorCode::WrongFile
    );
    // The right capability, but the copy is not in the state expected: it exists
    // (expected absent), or has other bytes (a write landed since it was read).
    assert_eq!(
        refused(call(&admin, &f.capability, replace(None))),
        ErrorCode::ObjectChanged
    );
    let stale = maat_crypto::hash::blake3(&[b"what it held before a write"]);
    assert_eq!(
        refused(call(&admin, &f.capability, replace(Some(stale)))),
        ErrorCode::ObjectChanged
    );
    // Nothing of any of these was written.
    assert_eq!(digest(&admin, &f.capability), before);
    assert_eq!(get(&admin, "/f").unwrap(), b"the right bytes");
    // In the state expected, it is replaced.
    call(&admin, &f.capability, replace(Some(before))).unwrap();
    assert_eq!(
        digest(&admin, &f.capability),
        maat_crypto::hash::blake3(&[b"a forged copy!!"])
    );
    // ... and a scrub finds that copy differs from the two others, and repairs it back.
    let report = admin
        .scrub("/f", ScrubDepth::Deep, true, &mut |_| {})
        .unwrap();
    assert_eq!(report.copies_repaired, 1, "{report:?}");
    assert!(
        report.findings.len() == 1 && report.findings[0].ends_with("; repaired"),
        "{report:?}"
    );
    assert_eq!(digest(&admin, &f.capability), before);
}

/// The first case: one OSD hung (SIGSTOP), not dead. The MDS stops hearing from
/// it and shows it down (`maat health`, `maat admin osd ls`); a new client learns that
/// with the cluster map and reads every file from other copies without asking the hung
/// OSD first (no failover needed: the copies are ordered before the first request).
#[test]
fn a_hung_osd_is_shown_down_and_read_around_without_waiting_for_it() {
    let cluster = Cluster::start(4, &[]);
    let admin = cluster.admin_home();
    let c = cluster.admin_client();
    let files = files();
    for (path, data) in &files {
        put(&c, path, data).unwrap();
    }
    let health = |cluster: &Cluster| -> serde_json::Value {
        serde_json::from_slice(&cluster.ok(&admin, &["health", "--json"], None)).unwrap()
    };
    let h = health(&cluster);
    assert_eq!(h["status"], "HEALTH_OK", "{h}");
    assert_eq!(h["osds_up"], 4, "{h}");
    assert_eq!(h["metadata"], "redb", "{h}");

    let _supervisor = Held::stop(cluster.local.supervisor_pid());
    let hung = Held::stop(cluster.pid("osd-2"));
    // A put by a client with sessions with every OSD, begun as osd-2 stops: its copies
    // there are given up on once the MDS reports osd-2 down (about 5 s), not after the
    // whole answer timeout (15 s): 6-8 s here, bounded at 14 s for a loaded machine;
    // unwatched, each wave of stripes waited 15 s (45 s). (8 stripes: some have a copy
    // on osd-2, but for odds of 4^-8. A whole number of stripes: such a put first looks
    // for stripes past its end, and a read of it looks at the next stripe too; with a
    // copy of that stripe on the hung OSD, both failed before.)
    let big = vec![7u8; 8 * 512 * 1024];
    let put_took = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let t0 = std::time::Instant::now();
            put(&c, "/during-hang", &big).unwrap();
            t0.elapsed()
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while health(&cluster)["osds_up"] != 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "osd-2 never shown down"
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        writer.join().unwrap()
    });
    let s = c.client_stats();
    eprintln!("a put in flight as osd-2 hung took {put_took:?}");
    assert!(
        put_took < std::time::Duration::from_secs(14),
        "a put in flight as osd-2 hung took {put_took:?}: {s:?}"
    );
    assert!(s.copies_given_up >= 1, "{s:?}");
    let h = health(&cluster);
    assert_eq!(h["status"], "HEALTH_WARN", "{h}");
    // (Besides the copies the put above missed.)
    assert!(
        h["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("osd 2 ")),
        "{h}"
    );
    let ls: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&admin, &["admin", "osd", "ls", "--json"], None))
            .unwrap();
    let states: Vec<(u64, bool)> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_u64().unwrap(), o["up"].as_bool().unwrap()))
        .collect();
    assert_eq!(states, vec![(1, true), (2, false), (3, true), (4, true)]);

    // The reader's spread is chosen so that the hung OSD comes first in the order
    // of several files' copies (a random spread left it first for only 2 of 24 files
    // once in CI, about 1 run in 25): the reads below must go around it.
    let mut reader = cluster.admin_client();
    let ids: Vec<u64> = files
        .iter()
        .map(|(path, _)| reader.stat(path).unwrap().id)
        .collect();
    let first_on_hung = |reader: &Client| -> usize {
        ids.iter()
            .filter(|id| reader.reads_ask("default", **id, 0).unwrap()[0] == 2)
            .count()
    };
    let spread = (0..64u64)
        .find(|s| {
            reader.set_read_spread(*s);
            first_on_hung(&reader) >= 4
        })
        .expect("a spread that asks osd-2 first for 4 files");
    reader.set_read_spread(spread);
    assert!(first_on_hung(&reader) >= 4);
    for (path, data) in &files {
        assert_eq!(&get(&reader, path).unwrap(), data, "{path} with osd-2 hung");
    }
    assert_eq!(
        reader.client_stats().copy_failovers,
        0,
        "the hung OSD was asked (and waited for) first"
    );
    assert_eq!(get(&reader, "/during-hang").unwrap(), big);
    // An unlink with osd-2 still stopped stands (before, it failed, the name gone all
    // the same), and says what it left there.
    let rm = cluster.maat(&admin, &["rm", "/during-hang"], None);
    let said = String::from_utf8_lossy(&rm.stderr);
    assert!(rm.status.success(), "maat rm failed: {said}");
    assert!(said.contains("stay there, unnamed"), "{said}");
    let gone = cluster.fails(&admin, &["stat", "/during-hang"], None);
    assert!(gone.contains("no such file"), "{gone}");
    drop(hung);
}

/// The scrubber `maat up` runs: an OSD whose disk is lost with its process (killed,
/// every object deleted, restarted by the supervisor) gets every copy back without
/// anyone asking, and every file reads back byte-identical from any copy.
#[test]
fn the_scrubber_puts_back_the_copies_of_an_osd_restarted_with_an_empty_disk() {
    let cluster = Cluster::start_encrypting(4, &["--scrub-every", "0"]);
    let c = cluster.admin_client();
    let files: Vec<(String, Vec<u8>)> = files().into_iter().take(10).collect();
    for (path, data) in &files {
        put(&c, path, data).unwrap();
    }
    let ids: Vec<u64> = files.iter().map(|(p, _)| c.stat(p).unwrap().id).collect();
    let on_osd2 = |data: &Path| -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for ((_, bytes), id) in files.iter().zip(&ids) {
            for stripe in 0..stripes(bytes.len()) {
                found.extend(
                    object_files(data, *id, stripe)
                        .into_iter()
                        .filter(|p| osd_of(p) == "osd-2"),
                );
            }
        }
        found
    };
    let held = Held::stop(cluster.local.supervisor_pid());
    signal("-KILL", cluster.pid("osd-2"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let lost = on_osd2(&cluster.data());
    assert!(lost.len() >= 5, "{lost:?}");
    for p in &lost {
        std::fs::remove_file(p).unwrap();
    }
    assert!(on_osd2(&cluster.data()).is_empty());
    drop(held); // the supervisor restarts osd-2, empty, and asks the scrubber for a run
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while on_osd2(&cluster.data()).len() < lost.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "the scrubber put back {} of {} copies in 90 s",
            on_osd2(&cluster.data()).len(),
            lost.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let reader = cluster.admin_client();
    let report = reader
        .scrub("/", ScrubDepth::Deep, false, &mut |_| {})
        .unwrap();
    assert!(report.findings.is_empty(), "{report:?}");
    for (path, data) in &files {
        assert_eq!(&get(&reader, path).unwrap(), data, "{path} after recovery");
    }
    assert_eq!(reader.client_stats().copy_failovers, 0);
    // `maat health` says what the scrubber did: every copy put back, by one run or
    // more (its status is written just after the run's last copy: a moment later).
    let admin = cluster.admin_home();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let scrub = loop {
        let h: serde_json::Value =
            serde_json::from_slice(&cluster.ok(&admin, &["health", "--json"], None)).unwrap();
        let total = h["scrub"]["copies_repaired_total"].as_u64().unwrap_or(0);
        if total >= lost.len() as u64 {
            assert_eq!(h["status"], "HEALTH_OK", "{h}");
            break h["scrub"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "{h}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert_eq!(
        scrub["copies_repaired_total"].as_u64(),
        Some(lost.len() as u64),
        "{scrub}"
    );
    assert_eq!(scrub["unrepaired"], 0, "{scrub}");
    assert_eq!(scrub["depth"], "light", "{scrub}");
    let text = String::from_utf8(cluster.ok(&admin, &["health"], None)).unwrap();
    assert!(text.contains("scrub:      last light run"), "{text}");
}

/// Issue 41: a partition's min_size. With `--min-size 3` a change is acknowledged only
/// once all three copies took it, so with one OSD down a write to an object with a copy
/// there fails; `set-min-size 2` lets it through on the other two (the third recorded as
/// missed). `partition list` and `maat health` show it.
#[test]
fn a_partitions_min_size_decides_whether_a_write_with_an_osd_down_is_acknowledged() {
    let cluster = Cluster::start(4, &[]);
    let admin = cluster.admin_home();
    let c = cluster.admin_client();
    let fails = cluster.fails(
        &admin,
        &[
            "admin",
            "partition",
            "create",
            "loose",
            "--security",
            "ALLDATA",
            "--replicas",
            "2",
            "--min-size",
            "3",
        ],
        None,
    );
    assert!(fails.contains("more than the 2 copies"), "{fails}");
    cluster.ok(
        &admin,
        &[
            "admin",
            "partition",
            "create",
            "strict",
            "--security",
            "ALLDATA",
            "--min-size",
            "3",
        ],
        None,
    );
    let list =
        String::from_utf8(cluster.ok(&admin, &["admin", "partition", "list"], None)).unwrap();
    let line = list.lines().find(|l| l.contains("strict")).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words[words.len() - 2..],
        ["3", "3"],
        "copies, min_size: {list}"
    );
    cluster.ok(&admin, &["mkdir", "--partition", "strict", "/s"], None);
    let mut target = None;
    for i in 0..20 {
        let path = format!("/s/f{i}");
        put(&c, &path, b"first").unwrap();
        let id = c.stat(&path).unwrap().id;
        if c.copies_of("strict", id, 0).unwrap().contains(&2) {
            target = Some(path);
        }
    }
    let target = target.expect("no file of 20 with a copy on osd-2");

    let _held = Held::stop(cluster.local.supervisor_pid());
    signal("-KILL", cluster.pid("osd-2"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let writer = cluster.admin_client();
    assert!(
        put(&writer, &target, b"second").is_err(),
        "acknowledged on two copies with min_size 3"
    );
    assert_eq!(writer.client_stats().copies_recorded_missed, 0);
    cluster.ok(
        &admin,
        &["admin", "partition", "set-min-size", "strict", "2"],
        None,
    );
    let h: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&admin, &["health", "--json"], None)).unwrap();
    let strict = h["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "strict")
        .unwrap();
    assert_eq!(strict["min_size"], 2, "{h}");
    put(&writer, &target, b"third").unwrap();
    assert!(writer.client_stats().copies_recorded_missed >= 1);
    assert_eq!(get(&cluster.admin_client(), &target).unwrap(), b"third");
}

/// Issue 41, "no OSD trusting another", on real daemons: every OSD holds the join key,
/// but `maat up`'s OSDs check in under their own control keys (agreed with the MDS at
/// registration, the MDS's half kept 0600 in each OSD's directory), so a rogue OSD with
/// the join key cannot tell the MDS that osd-2 applied its list of copies that missed a
/// change (clients would then acknowledge a write that osd-2 may still serve stale), nor
/// keep it looking up; osd-2's own check-ins go on.
#[test]
fn a_rogue_osd_with_the_join_key_cannot_check_in_as_another_osd() {
    use maat_crypto::mac::MacKey;
    use maat_proto::msg::{self, MdsPlainRequest, MdsPlainResponse, WireError};
    use maat_proto::wire::FrameType;
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start(4, &[]);
    let data = cluster.data();
    let sealing = data.join("osd-2/mds-sealing.pub");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !sealing.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "osd-2 never registered"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mode = std::fs::metadata(&sealing).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    let join = maat_server::read_key_file(&data.join("mds/join.key")).unwrap();
    let join = MacKey::new(maat_crypto::Secret32::from_bytes(join));
    let mds_address = cluster.mds_address();
    let ask = |request: MdsPlainRequest| -> Result<MdsPlainResponse, WireError> {
        let mut conn = maat_net::Connection::new(mds_address.clone());
        let (_, answer) = conn
            .call(FrameType::Plain, &msg::encode(&request).unwrap())
            .unwrap();
        msg::decode(&answer).unwrap()
    };
    let nonce = [0x5a; 16];
    let claimed = u64::MAX;
    let e = ask(MdsPlainRequest::MissedCopies {
        osd: 2,
        nonce,
        applied: claimed,
        mac: maat_proto::copies::missed_request_mac(&join, 2, &nonce, claimed),
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");
    let e = ask(MdsPlainRequest::Revocations {
        osd: 2,
        nonce,
        mac: maat_proto::revocation::revocations_request_mac(&join, 2, &nonce),
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthenticationFailed, "{e}");
    // osd-2 itself checks in (every second): the MDS keeps it up and it serves.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let h: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&cluster.admin_home(), &["health", "--json"], None))
            .unwrap();
    assert_eq!(h["osds_up"], 4, "{h}");
    let c = cluster.admin_client();
    put(&c, "/after", b"still served").unwrap();
    assert_eq!(get(&c, "/after").unwrap(), b"still served");
}
