//! Several MDS instances over one PostgreSQL database (issue 42), each with a store of
//! its own on a real server started for the test: ids allocated at once never collide,
//! the leader lease passes from one to the other, and the writer lock keeps their
//! read-decide-commit sequences from interleaving (a rename checked against a namespace
//! another instance is changing would make a cycle). Where no PostgreSQL server
//! binaries are installed, each test says it skipped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use maat_mds::store::{Batch, MetaStore, Op};
use maat_proto::msg::{MdsRequest, MdsResponse};
use maat_server::pg_store::PgStore;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;
use common::{admin, call, server};

/// A server for `test` and two stores on its database (two MDS instances), or `None`
/// (said on stderr) without PostgreSQL.
fn two_stores(
    test: &str,
) -> Option<(
    tempfile::TempDir,
    maat_server::pg_server::LocalPostgres,
    PgStore,
    PgStore,
)> {
    let (dir, pg) = server(test)?;
    let a = PgStore::open(&pg.url()).unwrap();
    let b = PgStore::open(&pg.url()).unwrap();
    Some((dir, pg, a, b))
}

/// Issue 42: two stores on one database (two MDS instances) allocating from one counter
/// at once, from several threads each, never take one value twice, and skip none.
#[test]
fn two_instances_allocating_at_once_never_take_one_id_twice() {
    let Some((_dir, _pg, a, b)) =
        two_stores("two_instances_allocating_at_once_never_take_one_id_twice")
    else {
        return;
    };
    let ranges = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let store = if t % 2 == 0 { &a } else { &b };
            let ranges = &ranges;
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(t);
                for _ in 0..60 {
                    let count = 1 + u64::from(rng.next_u32() % 40);
                    let first = store.allocate("next_inode", count, 2).unwrap();
                    ranges.lock().unwrap().push((first, count));
                }
            });
        }
    });
    let mut ranges = ranges.into_inner().unwrap();
    ranges.sort_unstable();
    let mut next = 2;
    for (first, count) in &ranges {
        assert_eq!(*first, next, "a range overlaps or leaves a gap: {ranges:?}");
        next += count;
    }
    let stored = a.meta("next_inode").unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(stored.try_into().unwrap()), next);
}

/// Issue 42: the leader lease, shared by two stores on one database (two MDS
/// instances). One holds it and renews it under the same token; the other is refused
/// until the holder's time runs out by the database's clock (whatever clock the caller
/// passes), then takes it under a greater token, and the first is refused.
#[test]
fn two_instances_share_one_lease_and_its_token_grows_at_each_handover() {
    let Some((_dir, _pg, a, b)) = two_stores("two_instances_share_one_lease") else {
        return;
    };
    let ttl = 400;
    let held = |s: &PgStore, who: &str, now: u64| s.lease("leader", who, ttl, now).unwrap();
    let first = held(&a, "a", 0);
    assert!(first.granted && first.token == 1, "{first:?}");
    // b's clock says a's grant ran out long ago: the database's clock decides.
    let refused = held(&b, "b", u64::MAX);
    assert!(!refused.granted, "{refused:?}");
    assert_eq!((refused.holder.as_str(), refused.token), ("a", 1));
    let renewed = held(&a, "a", 0);
    assert!(renewed.granted && renewed.token == 1, "{renewed:?}");
    std::thread::sleep(std::time::Duration::from_millis(ttl + 200));
    let taken = held(&b, "b", 0);
    assert!(taken.granted && taken.token == 2, "{taken:?}");
    let lost = held(&a, "a", 0);
    assert!(
        !lost.granted && lost.holder == "b" && lost.token == 2,
        "{lost:?}"
    );
    // Another lease is another row.
    assert!(a.lease("other", "a", ttl, 0).unwrap().granted);
}

/// Issue 42: four instances, each taking the writer lock around reading a counter and
/// writing it back one more, as the MDS does around every change. None of the 160
/// increments is lost: no two sequences interleaved. (Without the lock, an instance
/// writes back a value another has moved on meanwhile.)
#[test]
fn the_writer_lock_runs_one_instances_read_decide_commit_at_a_time() {
    let Some((_dir, pg)) = server("the_writer_lock_runs_one_instances_sequence_at_a_time") else {
        return;
    };
    let stores: Vec<PgStore> = (0..4).map(|_| PgStore::open(&pg.url()).unwrap()).collect();
    const ROUNDS: u64 = 40;
    std::thread::scope(|s| {
        for store in &stores {
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let held = store.exclusive().unwrap();
                    assert!(held.is_held());
                    let n = store
                        .meta("n")
                        .unwrap()
                        .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
                    store
                        .commit(Batch(vec![Op::PutMeta(
                            "n".into(),
                            (n + 1).to_be_bytes().to_vec(),
                        )]))
                        .unwrap();
                    drop(held);
                }
            });
        }
    });
    let n = stores[0].meta("n").unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(n.try_into().unwrap()), 4 * ROUNDS);
}

/// Issue 42: an instance whose lock's connection dies (the server ended it: a network
/// cut, an idle limit) has lost the lock. Another instance takes it, and the first one's
/// commit then fails with an error saying so instead of writing over what the other
/// decided.
#[test]
fn a_holder_whose_connection_died_gets_an_error_not_a_lost_update() {
    let Some((_dir, pg, a, b)) = two_stores("a_holder_whose_connection_died_gets_an_error") else {
        return;
    };
    let held = a.exclusive().unwrap();
    assert!(common::end_writer_lock_session(&pg));
    let taken = b.exclusive().unwrap();
    b.commit(Batch(vec![Op::PutMeta("decided".into(), b"by b".to_vec())]))
        .unwrap();
    drop(taken);
    let lost = a
        .commit(Batch(vec![Op::PutMeta("decided".into(), b"by a".to_vec())]))
        .unwrap_err()
        .to_string();
    assert!(lost.contains("writer lock"), "{lost}");
    drop(held);
    assert_eq!(b.meta("decided").unwrap(), Some(b"by b".to_vec()));
    // Both carry on: the next sequences take the lock on fresh connections.
    for store in [&a, &b] {
        let again = store.exclusive().unwrap();
        store
            .commit(Batch(vec![Op::PutMeta("after".into(), vec![1])]))
            .unwrap();
        drop(again);
    }
}

fn rename(from: String, to: String) -> MdsRequest {
    MdsRequest::Rename { from, to }
}

/// Issue 42: two MDS instances over one database, each told at the same moment to move
/// one of two sibling directories into the other (`x` into `y`, `y` into `x`). Each
/// rename alone is fine; both together would make a cycle cut off from the root. With
/// the instances' sequences one at a time, the second sees the first's move and is
/// refused: every round ends with one directory inside the other, both reachable.
#[test]
fn crosswise_renames_at_two_instances_never_make_a_cycle() {
    let Some((_dir, pg)) = server("crosswise_renames_at_two_instances_never_make_a_cycle") else {
        return;
    };
    let open = || common::mds(&pg);
    let (a, b) = (open(), open());
    const ROUNDS: usize = 30;
    let mut refused = 0;
    for round in 0..ROUNDS {
        let dir = format!("/r{round}");
        for path in [dir.clone(), format!("{dir}/x"), format!("{dir}/y")] {
            let made = call(
                &a,
                MdsRequest::Mkdir {
                    path,
                    mode: 0o755,
                    parents: false,
                    partition: None,
                },
            );
            assert!(made.is_ok(), "{made:?}");
        }
        let barrier = std::sync::Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let one = s.spawn(|| {
                barrier.wait();
                call(&a, rename(format!("{dir}/x"), format!("{dir}/y/x")))
            });
            let two = s.spawn(|| {
                barrier.wait();
                call(&b, rename(format!("{dir}/y"), format!("{dir}/x/y")))
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        refused += usize::from(ra.is_err()) + usize::from(rb.is_err());
        assert!(
            ra.is_ok() != rb.is_ok(),
            "round {round}: exactly one rename may succeed: {ra:?} {rb:?}"
        );
        let listed = call(&b, MdsRequest::Readdir { path: dir.clone() });
        let Ok(MdsResponse::Entries(entries)) = listed else {
            panic!("round {round}: {listed:?}");
        };
        assert_eq!(
            entries.len(),
            1,
            "round {round}: {entries:?} left under {dir}"
        );
    }
    assert_eq!(refused, ROUNDS);
}

/// Issue 42: a request's nonce recorded through one instance's store is a replay at
/// another's; other nonces and sessions are not; and nonces far older than the newest
/// are forgotten at a sweep, so the table does not grow with every request.
#[test]
fn a_nonce_recorded_at_one_instance_is_a_replay_at_another() {
    use maat_server::pg_store::NONCES_PER_SWEEP;
    let Some((_dir, pg, a, b)) =
        two_stores("a_nonce_recorded_at_one_instance_is_a_replay_at_another")
    else {
        return;
    };
    let keep = 60_000;
    assert!(a.record_nonce(&[1; 16], &[7; 16], 1_000, keep).unwrap());
    assert!(!b.record_nonce(&[1; 16], &[7; 16], 1_000, keep).unwrap());
    assert!(!a.record_nonce(&[1; 16], &[7; 16], 1_001, keep).unwrap());
    assert!(b.record_nonce(&[1; 16], &[8; 16], 1_000, keep).unwrap());
    assert!(b.record_nonce(&[2; 16], &[7; 16], 1_000, keep).unwrap());
    // A sweep's worth of later requests at `a`: the ones of time 1,000 are forgotten.
    let later = 1_000 + keep + 1;
    for n in 0..NONCES_PER_SWEEP {
        let mut nonce = [0; 16];
        nonce[..8].copy_from_slice(&n.to_be_bytes());
        assert!(a.record_nonce(&[3; 16], &nonce, later, keep).unwrap());
    }
    let left: i64 = admin(&pg)
        .query_one("SELECT count(*) FROM nonces WHERE at = 1000", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
