//! Issue 42: several MDS instances over one store, changing one namespace at once from
//! several threads each. Every instance runs its read-decide-commit sequences under the
//! store's writer lock ([`maat_mds::store::MetaStore::exclusive`]), so whatever the
//! interleaving, the namespace stays a tree: every directory reachable from the root by
//! exactly one entry, none in a cycle, every link count right. Without the lock (its
//! `lock_off` switch) the same runs break these. Each read of an inode or entry pauses
//! 50 µs, as a database's round trip would.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::login::{admin_login, call as in_session};
use common::{call, mds, MemStore, T0};

use maat_mds::store::{Batch, MetaStore, Op};
use maat_mds::{ADMIN_UID, ROOT_INODE};
use maat_proto::msg::{ErrorCode, MdsRequest};
use maat_proto::{wire, UnixMillis};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::{ChaCha20Rng, ChaCha8Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// A path of one to three of [`NAMES`].
fn path(rng: &mut ChaCha8Rng) -> String {
    let depth = 1 + rng.next_u32() % 3;
    (0..depth)
        .map(|_| format!("/{}", NAMES[(rng.next_u32() % 3) as usize]))
        .collect()
}

fn request(rng: &mut ChaCha8Rng) -> MdsRequest {
    match rng.next_u32() % 20 {
        0..=8 => MdsRequest::Mkdir {
            path: path(rng),
            mode: 0o755,
            parents: false,
            partition: None,
        },
        9..=16 => MdsRequest::Rename {
            from: path(rng),
            to: path(rng),
        },
        _ => MdsRequest::Rmdir { path: path(rng) },
    }
}

/// What is wrong with the namespace in `store`; empty when it is a tree with the right
/// link counts.
fn faults(store: &MemStore) -> Vec<String> {
    let t = store.0.lock().unwrap();
    let mut faults = Vec::new();
    let mut referenced: BTreeMap<u64, usize> = BTreeMap::new();
    for ((parent, name), child) in &t.entries {
        *referenced.entry(*child).or_default() += 1;
        if !t.inodes.contains_key(child) {
            faults.push(format!("{parent}/{name} names missing inode {child}"));
        }
    }
    let mut reached = BTreeSet::from([ROOT_INODE]);
    let mut todo = vec![ROOT_INODE];
    while let Some(dir) = todo.pop() {
        let children: Vec<u64> = (t.entries.iter())
            .filter(|((p, _), _)| *p == dir)
            .map(|(_, c)| *c)
            .collect();
        for c in children {
            if reached.insert(c) {
                todo.push(c);
            }
        }
    }
    for (id, inode) in &t.inodes {
        if !reached.contains(id) {
            faults.push(format!(
                "inode {id} is not reachable from the root (a cycle)"
            ));
        }
        if *id != ROOT_INODE && referenced.get(id) != Some(&1) {
            faults.push(format!("inode {id} has {:?} entries", referenced.get(id)));
        }
        if inode.is_dir {
            let subdirs = (t.entries.iter())
                .filter(|((p, _), c)| p == id && t.inodes.get(c).is_some_and(|i| i.is_dir))
                .count() as u32;
            if inode.nlink != 2 + subdirs {
                faults.push(format!(
                    "directory {id}: link count {} with {subdirs} subdirectories",
                    inode.nlink
                ));
            }
        }
    }
    faults
}

/// Three instances, four threads each taking a random instance per request; `rounds`
/// runs from `seed`. The faults found and the requests that succeeded, per run.
fn run(seed: u64, rounds: usize, lock: bool) -> Vec<(Vec<String>, u64)> {
    (0..rounds)
        .map(|round| {
            let store = MemStore::default();
            store.1.lock_off.store(!lock, Ordering::SeqCst);
            store.1.read_micros.store(50, Ordering::SeqCst);
            let instances = [mds(&store), mds(&store), mds(&store)];
            let done = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for thread in 0..4u64 {
                    let (instances, done) = (&instances, &done);
                    s.spawn(move || {
                        let mut rng =
                            ChaCha8Rng::seed_from_u64(seed ^ (round as u64) << 8 ^ thread);
                        for i in 0..150u64 {
                            let at = &instances[(rng.next_u32() % 3) as usize];
                            if call(at, ADMIN_UID, request(&mut rng), T0 + 1_000 + i).is_ok() {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            (faults(&store), done.into_inner())
        })
        .collect()
}

#[test]
fn three_instances_changing_one_namespace_at_once_keep_it_a_tree() {
    for (round, (found, done)) in run(42, 6, true).iter().enumerate() {
        assert!(found.is_empty(), "round {round}: {found:#?}");
        // Not a run of refusals: at least a tenth of the 600 requests changed something (about a fifth do).
        assert!(*done >= 60, "round {round}: {done} requests succeeded");
    }
}

/// The check above can fail: without the writer lock, the instances' sequences
/// interleave and some run leaves a cycle, a lost entry or a wrong link count.
#[test]
fn without_the_writer_lock_the_same_runs_break_the_namespace() {
    let broken = run(42, 6, false)
        .iter()
        .filter(|(f, _)| !f.is_empty())
        .count();
    assert!(broken > 0, "no run broke the namespace without the lock");
}

/// Issue 42: a session made at one instance works at another (read from the store), and
/// once it ends at one (logout), it works at none, though the other had it in memory.
#[test]
fn a_session_works_at_every_instance_until_it_ends_at_any() {
    let store = MemStore::default();
    let (a, b) = (mds(&store), mds(&store));
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let now = T0 + 1_000;
    let session = admin_login(&a, now, &mut rng);
    let stat = || MdsRequest::Stat { path: "/".into() };
    in_session(&b, &session, stat(), now + 1, 1, &mut rng).unwrap();
    in_session(&a, &session, stat(), now + 2, 2, &mut rng).unwrap();
    in_session(&b, &session, stat(), now + 3, 3, &mut rng).unwrap();
    in_session(&a, &session, MdsRequest::Logout, now + 4, 4, &mut rng).unwrap();
    for (at, n) in [(&b, 5), (&a, 6)] {
        let refused = in_session(at, &session, stat(), now + 5, n, &mut rng).unwrap_err();
        assert_eq!(refused.code, ErrorCode::UnknownSession);
    }
}

/// Issue 42: an instance that has a session in memory reads the session and its user
/// from the store in one go; a user removed meanwhile (by any instance) is refused there
/// at once, as when both are read one by one.
#[test]
fn a_user_removed_in_the_store_is_refused_at_an_instance_that_knew_the_session() {
    let store = MemStore::default();
    let (a, b) = (mds(&store), mds(&store));
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let now = T0 + 1_000;
    let session = admin_login(&a, now, &mut rng);
    let stat = || MdsRequest::Stat { path: "/".into() };
    // Both instances have the session in memory now.
    in_session(&a, &session, stat(), now + 1, 1, &mut rng).unwrap();
    in_session(&b, &session, stat(), now + 2, 2, &mut rng).unwrap();
    let admin = (&store).user(ADMIN_UID).unwrap().unwrap();
    (&store)
        .commit(Batch(vec![Op::DeleteUser {
            id: admin.id,
            name: admin.name.clone(),
        }]))
        .unwrap();
    for (at, n) in [(&b, 3), (&a, 4)] {
        let refused = in_session(at, &session, stat(), now + 3, n, &mut rng).unwrap_err();
        assert_eq!(refused.code, ErrorCode::NoSuchUser, "{refused:?}");
    }
}

/// Issue 42: a request captured on its way to one instance and replayed to another
/// within the replay window is refused there (each instance's window in memory saw only
/// its own requests; the nonce is recorded in the shared store).
#[test]
fn a_request_replayed_to_another_instance_is_refused() {
    let store = MemStore::default();
    let (a, b) = (mds(&store), mds(&store));
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let now = T0 + 1_000;
    let (id, key) = admin_login(&a, now, &mut rng);
    let body = maat_proto::msg::encode(&MdsRequest::Mkdir {
        path: "/once".into(),
        mode: 0o755,
        parents: false,
        partition: None,
    })
    .unwrap();
    let payload = wire::seal_request(&key, &id, UnixMillis(now + 1), &[9; 16], &body);
    a.handle_request(&payload, UnixMillis(now + 1), &mut rng)
        .unwrap();
    for at in [&b, &a] {
        let refused = at
            .handle_request(&payload, UnixMillis(now + 2), &mut rng)
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::ReplayedRequest);
    }
}

/// Issue 42, exactly once: three MDS instances over one store, four clients each
/// changing a directory of its own through random instances, every change sent as
/// `MdsRequest::Once`. Answers are lost (the client sends the same change again, to
/// another instance), instances die before a commit (the store fails one unit in seven
/// at its end) and instances restart (a new `Mds` over the same store). Checked against
/// each client's model: every change answered `Ok` once it finally has an answer (a
/// second application would answer "exists" or "no such file"), and at the end each
/// directory holds exactly what its model says. With units that are not one
/// transaction, a change whose answer was never stored is applied twice and the run
/// fails.
mod once {
    use crate::common::{call, mds, MemStore, T0};

    use maat_mds::ADMIN_UID;
    use maat_proto::msg::{MdsRequest, MdsResponse, WireError};
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeSet;
    use std::sync::atomic::Ordering;
    use std::sync::RwLock;

    const CLIENTS: u64 = 4;

    /// What a change does to a client's model once it is answered `Ok`.
    type Apply = Box<dyn Fn(&mut BTreeSet<String>)>;
    const CHANGES: u64 = 60;

    fn mkdir(path: String) -> MdsRequest {
        MdsRequest::Mkdir {
            path,
            mode: 0o755,
            parents: false,
            partition: None,
        }
    }

    /// One client's run: its changes, each sent until it has an answer. Returns the
    /// directories its model holds at the end, and what went wrong.
    fn client<'s>(
        instances: &[RwLock<maat_mds::Mds<&'s MemStore>>],
        store: &'s MemStore,
        seed: u64,
        me: u64,
    ) -> (BTreeSet<String>, Vec<String>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 ^ me);
        let home = format!("/c{me}");
        let mut model: BTreeSet<String> = BTreeSet::new();
        let mut wrong = Vec::new();
        let mut next = 0u64;
        for step in 0..CHANGES {
            // A change the model says must succeed: a new directory, the removal of one,
            // or a rename of one to a new name.
            let (request, apply): (MdsRequest, Apply) =
                match (rng.next_u32() % 4, model.iter().next().cloned()) {
                    (0, Some(old)) => {
                        let path = old.clone();
                        (
                            MdsRequest::Rmdir { path: old },
                            Box::new(move |m| {
                                m.remove(&path);
                            }),
                        )
                    }
                    (1, Some(old)) => {
                        next += 1;
                        let to = format!("{home}/r{next}");
                        let (from, to2) = (old.clone(), to.clone());
                        (
                            MdsRequest::Rename { from: old, to },
                            Box::new(move |m| {
                                m.remove(&from);
                                m.insert(to2.clone());
                            }),
                        )
                    }
                    _ => {
                        next += 1;
                        let path = format!("{home}/d{next}");
                        let p2 = path.clone();
                        (
                            mkdir(path),
                            Box::new(move |m| {
                                m.insert(p2.clone());
                            }),
                        )
                    }
                };
            let mut id = [0u8; 16];
            rng.fill_bytes(&mut id);
            let once = MdsRequest::Once {
                id,
                request: Box::new(request.clone()),
            };
            let mut answer: Option<Result<MdsResponse, WireError>> = None;
            for attempt in 0..20u64 {
                let at = (rng.next_u32() % 3) as usize;
                let now = T0 + 10_000 + step * 100 + attempt;
                let got = call(&instances[at].read().unwrap(), ADMIN_UID, once.clone(), now);
                // An instance that died before its commit: its client hears nothing.
                let died = matches!(&got, Err(e) if e.code == maat_proto::msg::ErrorCode::Internal);
                // An answer lost on the way back, one in four.
                let lost = rng.next_u32() % 4 == 0;
                if died || lost {
                    if rng.next_u32() % 5 == 0 {
                        // The instance restarts: a new MDS over the same store.
                        *instances[at].write().unwrap() = mds(store);
                    }
                    continue;
                }
                answer = Some(got);
                break;
            }
            match answer {
                Some(Ok(_)) => apply(&mut model),
                Some(Err(e)) => wrong.push(format!("client {me} step {step}: {request:?}: {e:?}")),
                None => wrong.push(format!("client {me} step {step}: no answer in 20 attempts")),
            }
        }
        (model, wrong)
    }

    /// `rounds` runs from `seed`: what went wrong in each, and the units that failed and
    /// answers given again over all of them.
    fn run(seed: u64, rounds: u64, units: bool) -> (Vec<Vec<String>>, u64, u64) {
        let mut crashes = 0;
        let mut again = 0;
        let results = (0..rounds)
            .map(|round| {
                let store = MemStore::default();
                store.1.units_off.store(!units, Ordering::SeqCst);
                store.1.crash_every.store(7, Ordering::SeqCst);
                let instances = [mds(&store), mds(&store), mds(&store)].map(RwLock::new);
                for me in 0..CLIENTS {
                    call(
                        &instances[0].read().unwrap(),
                        ADMIN_UID,
                        mkdir(format!("/c{me}")),
                        T0,
                    )
                    .unwrap();
                }
                let outcomes: Vec<(BTreeSet<String>, Vec<String>)> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..CLIENTS)
                        .map(|me| {
                            let (instances, store) = (&instances, &store);
                            s.spawn(move || client(instances, store, seed ^ round, me))
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                let mut wrong = Vec::new();
                for (me, (model, w)) in outcomes.into_iter().enumerate() {
                    wrong.extend(w);
                    let listed = call(
                        &instances[0].read().unwrap(),
                        ADMIN_UID,
                        MdsRequest::Readdir {
                            path: format!("/c{me}"),
                        },
                        T0 + 1_000_000,
                    );
                    let Ok(MdsResponse::Entries(entries)) = listed else {
                        panic!("{listed:?}");
                    };
                    let stored: BTreeSet<String> = entries
                        .into_iter()
                        .map(|(name, _)| format!("/c{me}/{name}"))
                        .collect();
                    if stored != model {
                        wrong.push(format!("client {me}: stored {stored:?}, model {model:?}"));
                    }
                }
                crashes += store.1.crashes.load(Ordering::SeqCst);
                for i in &instances {
                    let stats = call(&i.read().unwrap(), ADMIN_UID, MdsRequest::Stats, T0 + 1);
                    if let Ok(MdsResponse::Stats(s)) = stats {
                        again += s.counter("once_answered_again").unwrap_or(0);
                    }
                }
                wrong
            })
            .collect();
        (results, crashes, again)
    }

    #[test]
    fn changes_sent_again_through_lost_answers_crashes_and_restarts_apply_once() {
        let (results, crashes, again) = run(7, 4, true);
        for (round, wrong) in results.iter().enumerate() {
            assert!(wrong.is_empty(), "round {round}: {wrong:#?}");
        }
        // The faults happened: units failed, and lost answers were answered again.
        assert!(crashes >= 10, "{crashes} units failed");
        assert!(again >= 10, "{again} changes answered again");
    }

    /// The check above can fail: with a unit's commits applied one by one, a change whose
    /// instance died before its answer was stored is applied, and its retry is applied
    /// again (or refused): some run goes wrong.
    #[test]
    fn without_atomic_units_a_retried_change_applies_twice() {
        let (results, crashes, _) = run(7, 4, false);
        assert!(crashes > 0);
        assert!(
            results.iter().any(|wrong| !wrong.is_empty()),
            "no run went wrong without atomic units"
        );
    }
}
