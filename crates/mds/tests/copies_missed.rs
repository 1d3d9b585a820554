//! Issue 41 at the MDS: copies that missed a change. Only a writer of the file records
//! them; only the administrator lists and forgets them; a record never leaves an object
//! fewer than two current copies; an OSD's list is MACed under the join key over its
//! nonce and what it applied, and a record counts as known only once the OSD said it
//! applied a list past it (or once it is silent long enough to count as down).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{add_users, call, mds, MemStore, JOIN, T0};

use maat_crypto::mac::MacKey;
use maat_crypto::Secret32;
use maat_mds::{Batch, Mds, MetaStore, Op, ADMIN_UID};
use maat_proto::copies::{missed_mac, missed_request_mac};
use maat_proto::limits::{OSD_DOWN_AFTER_MILLIS, OSD_HEARD_LAG_MILLIS};
use maat_proto::msg::{
    self, Access, ErrorCode, MdsPlainRequest, MdsPlainResponse, MdsRequest, MdsResponse,
    MissedCopy, OsdEntry, WireError,
};
use maat_proto::placement::copies_among;
use maat_proto::protection::Protection;
use maat_proto::UnixMillis;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

const ALICE: u64 = 100;
const BOB: u64 = 101;

fn osds() -> Vec<OsdEntry> {
    (1..=4)
        .map(|id| OsdEntry {
            id,
            address: format!("10.0.0.{id}:7000"),
            sealing_key: [0; 32],
            weight: 1,
        })
        .collect()
}

/// An MDS with four OSDs, alice and bob, and alice's file `/d/a` (mode 0644) in a
/// partition of three copies; the file's id.
fn setup(store: &MemStore) -> (Mds<&MemStore>, u64) {
    add_users(store, &["alice", "bob"]);
    store
        .commit(Batch(osds().into_iter().map(Op::PutOsd).collect()))
        .unwrap();
    let mds = mds(store);
    call(
        &mds,
        ADMIN_UID,
        MdsRequest::PartitionCreateReplicated {
            name: "three".into(),
            protection: Protection::AllData,
            replicas: 3,
        },
        T0 + 1_000,
    )
    .unwrap();
    call(
        &mds,
        ADMIN_UID,
        MdsRequest::Mkdir {
            path: "/d".into(),
            mode: 0o777,
            parents: false,
            partition: Some("three".into()),
        },
        T0 + 1_000,
    )
    .unwrap();
    let MdsResponse::Opened { stat, .. } = call(
        &mds,
        ALICE,
        MdsRequest::Open {
            path: "/d/a".into(),
            access: Access::ReadWrite,
            create: Some(0o644),
        },
        T0 + 1_000,
    )
    .unwrap() else {
        panic!("not opened")
    };
    (mds, stat.id)
}

fn record(
    mds: &Mds<&MemStore>,
    uid: u64,
    file: u64,
    copies: &[(u32, u64)],
    now: u64,
) -> Result<MdsResponse, WireError> {
    let copies = copies
        .iter()
        .map(|&(stripe, osd)| MissedCopy {
            stripe,
            osd,
            seq: 0,
        })
        .collect();
    call(mds, uid, MdsRequest::CopiesMissed { file, copies }, now)
}

/// An OSD's check-in for its list, the answer's MAC checked as the OSD checks it.
fn list_for(mds: &Mds<&MemStore>, osd: u64, applied: u64, now: u64) -> (Vec<(u64, u32)>, u64) {
    let nonce = [osd as u8; 16];
    let join = MacKey::new(Secret32::from_bytes(JOIN));
    let mac = missed_request_mac(&join, osd, &nonce, applied);
    let request = MdsPlainRequest::MissedCopies {
        osd,
        nonce,
        applied,
        mac,
    };
    let answer = mds.handle_plain(
        b"peer",
        &msg::encode(&request).unwrap(),
        UnixMillis(now),
        &mut ChaCha20Rng::seed_from_u64(1),
    );
    let answer: Result<MdsPlainResponse, WireError> = msg::decode(&answer).unwrap();
    let MdsPlainResponse::MissedCopies { objects, next, mac } = answer.unwrap() else {
        panic!("not a list of missed copies")
    };
    assert_eq!(missed_mac(&join, osd, &nonce, next, &objects), mac);
    // Bound to the OSD, the nonce and the list: none of them can be swapped.
    assert_ne!(missed_mac(&join, osd + 1, &nonce, next, &objects), mac);
    assert_ne!(missed_mac(&join, osd, &[0xee; 16], next, &objects), mac);
    assert_ne!(missed_mac(&join, osd, &nonce, next + 1, &objects), mac);
    (objects, next)
}

#[test]
fn only_a_writer_records_and_only_the_administrator_lists_and_forgets() {
    let store = MemStore::default();
    let (mds, file) = setup(&store);
    let placed = copies_among(&osds(), file, 0, 3);
    let now = T0 + 2_000;
    // Bob may read alice's file, not write it: refused, nothing recorded.
    let e = record(&mds, BOB, file, &[(0, placed[0])], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    // A file that does not exist (nor is reserved to the caller).
    let e = record(&mds, ALICE, file + 1000, &[(0, placed[0])], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoSuchFile);
    // An OSD that holds no copy of the stripe.
    let elsewhere = (1..=4).find(|o| !placed.contains(o)).unwrap();
    let e = record(&mds, ALICE, file, &[(0, elsewhere)], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(
        record(&mds, ALICE, file, &[], now).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    // Alice's record: her OSD has not said it knows it yet.
    let MdsResponse::MissedCopies(pending) =
        record(&mds, ALICE, file, &[(0, placed[0])], now).unwrap()
    else {
        panic!("known before its OSD was told")
    };
    assert_eq!(pending.len(), 1);
    // Listing and forgetting are the administrator's.
    for uid in [ALICE, BOB] {
        let e = call(&mds, uid, MdsRequest::MissedCopiesOf { file }, now).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        let e = call(
            &mds,
            uid,
            MdsRequest::CopiesRepaired {
                file,
                copies: pending.clone(),
            },
            now,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
    }
    // Bob cannot ask about alice's records either.
    let e = call(
        &mds,
        BOB,
        MdsRequest::MissedCopiesKnown {
            file,
            copies: pending.clone(),
        },
        now,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    let MdsResponse::MissedCopies(all) =
        call(&mds, ADMIN_UID, MdsRequest::MissedCopiesOf { file }, now).unwrap()
    else {
        panic!()
    };
    assert_eq!(all, pending);
}

#[test]
fn a_record_never_leaves_fewer_than_two_current_copies() {
    let store = MemStore::default();
    let (mds, file) = setup(&store);
    let placed = copies_among(&osds(), file, 0, 3);
    let now = T0 + 2_000;
    // Two of three copies at once: one current copy would be left.
    let e = record(&mds, ALICE, file, &[(0, placed[0]), (0, placed[1])], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy);
    // One, then another one of the same stripe: the second is refused too.
    record(&mds, ALICE, file, &[(0, placed[0])], now).unwrap();
    let e = record(&mds, ALICE, file, &[(0, placed[1])], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy, "{e}");
    // The same copy again (a later change that missed it too) is fine, renumbered.
    record(&mds, ALICE, file, &[(0, placed[0])], now).unwrap();
    // Another stripe is another object.
    let other = copies_among(&osds(), file, 1, 3);
    record(&mds, ALICE, file, &[(1, other[2])], now).unwrap();
}

#[test]
fn a_record_is_known_once_its_osd_applied_a_list_past_it_or_counts_as_down() {
    let store = MemStore::default();
    let (mds, file) = setup(&store);
    let placed = copies_among(&osds(), file, 0, 3);
    let osd = placed[0];
    let now = T0 + 2_000;
    let MdsResponse::MissedCopies(pending) = record(&mds, ALICE, file, &[(0, osd)], now).unwrap()
    else {
        panic!()
    };
    let known = |now| {
        call(
            &mds,
            ALICE,
            MdsRequest::MissedCopiesKnown {
                file,
                copies: pending.clone(),
            },
            now,
        )
        .unwrap()
    };
    // The OSD fetches its list: the MDS does not yet know it applied it.
    let (objects, next) = list_for(&mds, osd, 0, now + 100);
    assert_eq!(objects, vec![(file, 0)]);
    assert!(next > pending[0].seq);
    assert!(matches!(known(now + 200), MdsResponse::MissedCopies(_)));
    // Another OSD's list holds nothing of it.
    let (others, _) = list_for(&mds, placed[1], 0, now + 100);
    assert!(others.is_empty());
    // The OSD says it applied that list: known.
    list_for(&mds, osd, next, now + 300);
    assert_eq!(known(now + 400), MdsResponse::Ok);

    // A second record; the OSD goes silent: known once it counts as down (5 s).
    let MdsResponse::MissedCopies(again) =
        record(&mds, ALICE, file, &[(0, osd)], now + 1_000).unwrap()
    else {
        panic!()
    };
    let known_again = |now| {
        call(
            &mds,
            ALICE,
            MdsRequest::MissedCopiesKnown {
                file,
                copies: again.clone(),
            },
            now,
        )
        .unwrap()
    };
    // (Its last check-in, the list it asked for, was at now + 300: the OSD's lease runs
    // from then, so the MDS counts it silent 5 s after, plus the lag of a shared store,
    // which this one is, and not before.)
    let silent = now + 300 + OSD_DOWN_AFTER_MILLIS + OSD_HEARD_LAG_MILLIS;
    assert!(matches!(
        known_again(now + 1_100),
        MdsResponse::MissedCopies(_)
    ));
    assert!(matches!(
        known_again(silent - 1),
        MdsResponse::MissedCopies(_)
    ));
    assert_eq!(known_again(silent), MdsResponse::Ok);

    // Repaired and forgotten: the OSD's list empties; a stale number forgets nothing.
    let stale = MissedCopy {
        seq: pending[0].seq,
        ..again[0]
    };
    call(
        &mds,
        ADMIN_UID,
        MdsRequest::CopiesRepaired {
            file,
            copies: vec![stale],
        },
        now + 6_000,
    )
    .unwrap();
    assert_eq!(list_for(&mds, osd, next, now + 6_100).0, vec![(file, 0)]);
    call(
        &mds,
        ADMIN_UID,
        MdsRequest::CopiesRepaired {
            file,
            copies: again.clone(),
        },
        now + 6_200,
    )
    .unwrap();
    assert!(list_for(&mds, osd, next, now + 6_300).0.is_empty());
}

#[test]
fn a_check_in_without_the_join_key_is_refused() {
    let store = MemStore::default();
    let (mds, _) = setup(&store);
    let nonce = [3u8; 16];
    let wrong = MacKey::new(Secret32::from_bytes([0x11; 32]));
    let join = MacKey::new(Secret32::from_bytes(JOIN));
    for (osd, applied, mac) in [
        // Forged: another key.
        (2, 0, missed_request_mac(&wrong, 2, &nonce, 0)),
        // Tampered: another OSD's request, or another `applied` than the MAC covers.
        (2, 0, missed_request_mac(&join, 3, &nonce, 0)),
        (2, 99, missed_request_mac(&join, 2, &nonce, 0)),
    ] {
        let request = MdsPlainRequest::MissedCopies {
            osd,
            nonce,
            applied,
            mac,
        };
        let answer = mds.handle_plain(
            b"peer",
            &msg::encode(&request).unwrap(),
            UnixMillis(T0 + 2_000),
            &mut ChaCha20Rng::seed_from_u64(1),
        );
        let answer: Result<MdsPlainResponse, WireError> = msg::decode(&answer).unwrap();
        assert_eq!(answer.unwrap_err().code, ErrorCode::AuthenticationFailed);
    }
}

/// Issue 41, "health at a glance": `maat stats` (and so `/metrics` and `maat health`)
/// counts the copies recorded as missed, the objects they belong to and each OSD's share,
/// leaving out records that hold nothing anyone reads (stripes past the end, removed
/// files); the scrubs' counts are the administrator's to report.
#[test]
fn degraded_copies_and_scrub_counts_are_in_the_mds_counters() {
    let store = MemStore::default();
    let (mds, file) = setup(&store);
    let now = T0 + 2_000;
    let counter = |name: &str| {
        let MdsResponse::Stats(s) = call(&mds, ALICE, MdsRequest::Stats, now).unwrap() else {
            panic!("no stats")
        };
        s.counter(name)
            .unwrap_or_else(|| panic!("{name} not counted: {:?}", s.counters))
    };
    let set_size = |size: u64| {
        call(
            &mds,
            ALICE,
            MdsRequest::SetSize {
                path: "/d/a".into(),
                file,
                size,
            },
            now,
        )
        .unwrap()
    };
    set_size(2 * msg::STRIPE_UNIT_BYTES);
    assert_eq!(counter("copies_missed"), 0);
    for osd in 1..=4 {
        assert_eq!(counter(&format!("copies_missed_on:{osd}")), 0);
    }
    let first = copies_among(&osds(), file, 0, 3);
    let second = copies_among(&osds(), file, 1, 3);
    record(&mds, ALICE, file, &[(0, first[0])], now).unwrap();
    record(&mds, ALICE, file, &[(1, second[2])], now).unwrap();
    // The same copy missing a second change is still one copy.
    record(&mds, ALICE, file, &[(0, first[0])], now).unwrap();
    assert_eq!(counter("copies_missed"), 2);
    assert_eq!(counter("objects_degraded"), 2);
    let on = |osd: u64| counter(&format!("copies_missed_on:{osd}"));
    assert_eq!(
        (1..=4).map(on).sum::<u64>(),
        2,
        "each record counts on its own OSD"
    );
    assert!(on(first[0]) >= 1 && on(second[2]) >= 1);
    // Cut to one stripe: stripe 1's record holds nothing read.
    set_size(msg::STRIPE_UNIT_BYTES);
    assert_eq!(counter("copies_missed"), 1);
    assert_eq!(counter("objects_degraded"), 1);
    assert_eq!(on(first[0]), 1);
    // Removed: nothing degraded is left.
    call(
        &mds,
        ALICE,
        MdsRequest::Unlink {
            path: "/d/a".into(),
        },
        now,
    )
    .unwrap();
    assert_eq!(counter("copies_missed"), 0);
    assert_eq!(counter("objects_degraded"), 0);

    // Scrub counts: alice's report is refused and counts nothing.
    let counts = msg::ScrubCounts {
        deep: true,
        files: 5,
        objects: 7,
        copies_good: 18,
        copies_missing: 2,
        copies_bad: 1,
        copies_repaired: 3,
        objects_lost: 0,
        unrepaired: 0,
        millis: 40,
    };
    let e = call(&mds, ALICE, MdsRequest::ScrubDone(counts), now).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(counter("scrub_runs"), 0);
    assert_eq!(counter("scrub_copies_repaired"), 0);
    call(&mds, ADMIN_UID, MdsRequest::ScrubDone(counts), now).unwrap();
    call(
        &mds,
        ADMIN_UID,
        MdsRequest::ScrubDone(msg::ScrubCounts {
            deep: false,
            unrepaired: 4,
            ..counts
        }),
        now + 1_000,
    )
    .unwrap();
    assert_eq!(counter("scrub_runs"), 2);
    assert_eq!(counter("scrub_runs_deep"), 1);
    assert_eq!(counter("scrub_copies_repaired"), 6);
    assert_eq!(counter("scrub_copies_missing"), 4);
    assert_eq!(counter("scrub_objects"), 14);
    assert_eq!(counter("scrub_last_run_unrepaired"), 4);
    assert_eq!(
        counter("scrub_last_run_timestamp_seconds"),
        (now + 1_000) / 1000
    );
}

/// Issue 41: how many copies a change must reach is the partition's min_size (default
/// two), set by the administrator only, from 1 to the partition's copies; the MDS
/// refuses records that leave fewer current copies.
#[test]
fn min_size_is_the_partitions_and_only_the_administrator_sets_it() {
    let store = MemStore::default();
    let (mds, file) = setup(&store);
    let now = T0 + 2_000;
    let copies = |uid| match call(&mds, uid, MdsRequest::PartitionCopies, now).unwrap() {
        MdsResponse::PartitionCopies(all) => all,
        other => panic!("{other:?}"),
    };
    let three = |uid| copies(uid).into_iter().find(|p| p.name == "three").unwrap();
    assert_eq!((three(BOB).replicas, three(BOB).min_size), (3, 2));
    let set = |uid, min_size| {
        call(
            &mds,
            uid,
            MdsRequest::PartitionSetMinSize {
                name: "three".into(),
                min_size,
            },
            now,
        )
    };
    assert_eq!(set(ALICE, 1).unwrap_err().code, ErrorCode::PermissionDenied);
    for wrong in [0, 4] {
        assert_eq!(
            set(ADMIN_UID, wrong).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
    assert_eq!(three(ALICE).min_size, 2);
    // min_size 1: two copies of three may be recorded at once.
    set(ADMIN_UID, 1).unwrap();
    let placed = copies_among(&osds(), file, 0, 3);
    record(&mds, ALICE, file, &[(0, placed[0]), (0, placed[1])], now).unwrap();
    // min_size 3: not even one.
    set(ADMIN_UID, 3).unwrap();
    assert_eq!(three(ALICE).min_size, 3);
    let other = copies_among(&osds(), file, 1, 3);
    let e = record(&mds, ALICE, file, &[(1, other[0])], now).unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy);
    assert!(e.detail.contains("three needs 3"), "{e}");
}
