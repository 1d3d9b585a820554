//! Several MDS instances over one PostgreSQL database (issue 42), each with a store of
//! its own on a real server started for the test: ids allocated at once never collide,
//! the leader lease passes from one to the other, and the writer lock keeps their
//! read-decide-commit sequences from interleaving (a rename checked against a namespace
//! another instance is changing would make a cycle); and a change retried at another
//! instance after the first applied it is answered with the first answer, not applied
//! again (exactly once: the change and its answer commit together or not at all).
//! Where no PostgreSQL server binaries are installed, each test says it skipped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use maat_mds::store::{Batch, MetaStore, Op};
use maat_proto::msg::{ErrorCode, MdsRequest, MdsResponse};
use maat_server::pg_store::PgStore;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;
use common::{admin, call, mds, server};

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

// ------------------------------------------------------------------ exactly once

fn mkdir(path: &str) -> MdsRequest {
    MdsRequest::Mkdir {
        path: path.into(),
        mode: 0o755,
        parents: false,
        partition: None,
    }
}

fn once(id: u8, request: MdsRequest) -> MdsRequest {
    MdsRequest::Once {
        id: [id; 16],
        request: Box::new(request),
    }
}

fn stat(mds: &maat_mds::Mds<PgStore>, name: &str) -> u64 {
    match call(mds, MdsRequest::Stats).unwrap() {
        MdsResponse::Stats(stats) => stats.counter(name).unwrap_or(0),
        other => panic!("{other:?}"),
    }
}

/// Issue 42: instance A applies a change and its answer is lost (A "died" before
/// answering); the client sends the same change, same id, to instance B: B answers A's
/// answer and applies nothing (without the id, B refuses: the directory exists). The
/// same id with another change is refused; a change B may not apply is not stored.
#[test]
fn a_change_retried_at_another_instance_gets_the_first_answer() {
    let Some((_dir, pg)) = server("a_change_retried_at_another_instance_gets_the_first_answer")
    else {
        return;
    };
    let (a, b) = (mds(&pg), mds(&pg));
    let create = || {
        once(
            1,
            MdsRequest::Open {
                path: "/f".into(),
                access: maat_proto::msg::Access::ReadWrite,
                create: Some(0o644),
            },
        )
    };
    let first = call(&a, create()).unwrap();
    let again = call(&b, create()).unwrap();
    assert_eq!(first, again, "the retry got another answer");
    assert_eq!(stat(&b, "once_answered_again"), 1);

    call(&a, once(2, mkdir("/d"))).unwrap();
    assert!(matches!(
        call(&b, once(2, mkdir("/d"))),
        Ok(MdsResponse::Ok)
    ));
    let plain = call(&b, mkdir("/d")).unwrap_err();
    assert_eq!(plain.code, ErrorCode::AlreadyExists);
    let reused = call(&b, once(2, mkdir("/e"))).unwrap_err();
    assert_eq!(reused.code, ErrorCode::InvalidArgument, "{reused:?}");
    // Refused changes are not answered from the store: the retry decides again.
    let refused = call(&a, once(3, mkdir("/missing/x"))).unwrap_err();
    call(&a, mkdir("/missing")).unwrap();
    assert!(
        call(&b, once(3, mkdir("/missing/x"))).is_ok(),
        "{refused:?} was kept as the answer"
    );
    // Reads and `Once` itself do not travel inside `Once`.
    for inner in [MdsRequest::Stat { path: "/d".into() }, once(5, mkdir("/g"))] {
        let e = call(&a, once(4, inner)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
    }
}

/// Issue 42: the same change sent to two instances at once (a client that gave up on
/// one too early) is applied once: both answer `Ok`, and one of them from the other's
/// stored answer.
#[test]
fn one_change_at_two_instances_at_once_is_applied_once() {
    let Some((_dir, pg)) = server("one_change_at_two_instances_at_once_is_applied_once") else {
        return;
    };
    let (a, b) = (mds(&pg), mds(&pg));
    for round in 0..20u8 {
        let path = format!("/r{round}");
        let barrier = std::sync::Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let one = s.spawn(|| {
                barrier.wait();
                call(&a, once(round, mkdir(&path)))
            });
            let two = s.spawn(|| {
                barrier.wait();
                call(&b, once(round, mkdir(&path)))
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        assert!(ra.is_ok() && rb.is_ok(), "round {round}: {ra:?} {rb:?}");
    }
    assert_eq!(
        stat(&a, "once_answered_again") + stat(&b, "once_answered_again"),
        20
    );
}

/// Under the writer lock, a unit that commits `y`, then has the lock's session ended
/// (the server cut the connection) before it ends with `z`: the end fails.
fn unit_cut_before_its_end(a: &impl MetaStore, pg: &maat_server::pg_server::LocalPostgres) {
    let put = |k: &str| Batch(vec![Op::PutMeta(k.into(), vec![1])]);
    let held = a.exclusive().unwrap();
    a.begin_unit().unwrap();
    a.commit(put("y")).unwrap();
    assert!(common::end_writer_lock_session(pg));
    assert!(a.end_unit(put("z")).is_err());
    drop(held);
}

/// Issue 42: a unit whose `COMMIT` got no word from the server (its connection broke)
/// may have been applied, so the store tells its failure hook (the daemon exits instead
/// of answering, and the client sends the change again at another instance, where the
/// stored answer is found). A unit whose session the server ended before its end was
/// not applied, and the server said so: no hook.
#[test]
fn a_unit_whose_commit_goes_unanswered_fails_the_store() {
    let Some((_dir, pg)) = server("a_unit_whose_commit_goes_unanswered_fails_the_store") else {
        return;
    };
    let a = PgStore::open(&pg.url()).unwrap();
    let fired = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = fired.clone();
    a.on_failure(std::sync::Arc::new(move |why: &str| {
        seen.lock().unwrap().push(why.to_string())
    }));
    let put = |k: &str| Batch(vec![Op::PutMeta(k.into(), vec![1])]);

    unit_cut_before_its_end(&a, &pg);
    assert!(
        fired.lock().unwrap().is_empty(),
        "{:?}",
        fired.lock().unwrap()
    );

    let held = a.exclusive().unwrap();
    a.begin_unit().unwrap();
    a.commit(put("w")).unwrap();
    assert!(common::kill_writer_lock_backend(&pg));
    assert!(a.end_unit(Batch::default()).is_err());
    drop(held);
    let fired = fired.lock().unwrap();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].contains("outcome is unknown"), "{fired:?}");
}

/// Issue 42: a unit's commits are seen by its own thread only until it ends; a unit
/// that never ends (its instance died), or whose connection was cut before its end,
/// leaves nothing; one that ends commits its commits and its last ops together.
#[test]
fn a_unit_commits_whole_or_not_at_all() {
    let Some((_dir, pg)) = server("a_unit_commits_whole_or_not_at_all") else {
        return;
    };
    // As the daemon holds it: through `MdsStore`, which must forward the unit.
    let a = maat_server::mds_store::MdsStore::Postgres(PgStore::open(&pg.url()).unwrap());
    let b = PgStore::open(&pg.url()).unwrap();
    assert!(a.atomic_units());
    let put = |k: &str| Batch(vec![Op::PutMeta(k.into(), vec![1])]);

    let held = a.exclusive().unwrap();
    a.begin_unit().unwrap();
    a.commit(put("x")).unwrap();
    assert_eq!(a.meta("x").unwrap(), Some(vec![1]), "the unit's own reads");
    assert_eq!(b.meta("x").unwrap(), None, "seen outside before the end");
    drop(held);
    assert_eq!(b.meta("x").unwrap(), None, "a unit never ended was kept");

    unit_cut_before_its_end(&a, &pg);
    assert_eq!((b.meta("y").unwrap(), b.meta("z").unwrap()), (None, None));

    let held = a.exclusive().unwrap();
    a.begin_unit().unwrap();
    a.commit(put("y")).unwrap();
    a.end_unit(put("z")).unwrap();
    drop(held);
    assert_eq!(b.meta("y").unwrap(), Some(vec![1]));
    assert_eq!(b.meta("z").unwrap(), Some(vec![1]));
    // Allocation inside a unit is not undone with it (its ids may be in use).
    let held = a.exclusive().unwrap();
    a.begin_unit().unwrap();
    let first = a.allocate("next_test", 5, 10).unwrap();
    drop(held);
    assert_eq!(b.allocate("next_test", 1, 10).unwrap(), first + 5);
}
