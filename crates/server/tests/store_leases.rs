//! Issue 42, `Op::RequireLease`: leader-only commits fenced by the leader lease in the
//! store itself, on redb and on a real PostgreSQL server started for the test (which
//! says it skipped where no PostgreSQL server binaries are installed).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use maat_mds::store::{Batch, MetaStore, Op};
use maat_server::meta_store::RedbStore;
use maat_server::pg_store::PgStore;

mod common;
use common::server;

/// Issue 42, `Op::RequireLease`: a batch applies only while its committer holds the
/// lease under the token it names, on PostgreSQL and on redb alike; once another holder
/// took the lease, the batch fails `LeaseLost` and none of it is applied.
fn a_batch_applies_only_under_the_lease_it_requires(store: &dyn MetaStore, expire: impl Fn()) {
    use maat_mds::store::StoreError;
    let require = |holder: &str, token: u64, value: u8| {
        Batch(vec![
            Op::PutMeta("t10/osd/1".into(), vec![value]),
            Op::RequireLease {
                name: "leader".into(),
                holder: holder.into(),
                token,
            },
        ])
    };
    // Nobody took the lease yet: nothing may be written under it.
    assert!(matches!(
        store.commit(require("a", 1, 1)),
        Err(StoreError::LeaseLost { found: 0, .. })
    ));
    let ttl = 50;
    assert!(store.lease("leader", "a", ttl, 1_000).unwrap().granted);
    store.commit(require("a", 1, 1)).unwrap();
    assert_eq!(store.meta("t10/osd/1").unwrap(), Some(vec![1]));
    expire();
    let b = store.lease("leader", "b", ttl, 2_000).unwrap();
    assert_eq!((b.granted, b.token), (true, 2));
    for deferred in [false, true] {
        let batch = require("a", 1, 7);
        let refused = match deferred {
            false => store.commit(batch),
            true => store.commit_deferred(batch),
        };
        assert!(
            matches!(refused, Err(StoreError::LeaseLost { ref holder, found: 2, .. }) if holder == "b"),
            "{refused:?}"
        );
        assert_eq!(store.meta("t10/osd/1").unwrap(), Some(vec![1]));
    }
    store.commit(require("b", 2, 2)).unwrap();
    assert_eq!(store.meta("t10/osd/1").unwrap(), Some(vec![2]));
}

#[test]
fn a_batch_applies_only_under_the_lease_it_requires_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(&dir.path().join("meta.redb")).unwrap();
    // (redb leases run on the caller's clock: the second grant is asked 1 s later.)
    a_batch_applies_only_under_the_lease_it_requires(&redb, || {});
}

#[test]
fn a_batch_applies_only_under_the_lease_it_requires_on_postgresql() {
    let Some((_dir, pg)) = server("a_batch_applies_only_under_the_lease_it_requires") else {
        return;
    };
    let store = PgStore::open(&pg.url()).unwrap();
    // (PostgreSQL's leases run on the database's clock.)
    a_batch_applies_only_under_the_lease_it_requires(&store, || {
        std::thread::sleep(std::time::Duration::from_millis(120));
    });
}

/// Issue 42, `MetaStore::raise_lease`: only the holder, while its lease runs, raises the
/// token (past an OSD's fence the store no longer knows); never lower; a renewal keeps
/// the raised token, commits under the old one are refused, and a takeover goes on from
/// it.
fn only_the_holder_raises_its_token(store: &dyn MetaStore, expire: impl Fn()) {
    use maat_mds::store::StoreError;
    let require = |token: u64| {
        Batch(vec![
            Op::PutMeta("t10/osd/1".into(), vec![token as u8]),
            Op::RequireLease {
                name: "leader".into(),
                holder: "a".into(),
                token,
            },
        ])
    };
    assert_eq!(store.raise_lease("leader", "a", 5, 1_000).unwrap(), None);
    let ttl = 600_000;
    assert_eq!(store.lease("leader", "a", ttl, 1_000).unwrap().token, 1);
    assert_eq!(store.raise_lease("leader", "b", 50, 1_001).unwrap(), None);
    assert_eq!(
        store.raise_lease("leader", "a", 50, 1_001).unwrap(),
        Some(50)
    );
    assert_eq!(
        store.raise_lease("leader", "a", 7, 1_002).unwrap(),
        Some(50)
    );
    assert_eq!(store.lease("leader", "a", ttl, 1_003).unwrap().token, 50);
    assert!(matches!(
        store.commit(require(1)),
        Err(StoreError::LeaseLost { found: 50, .. })
    ));
    store.commit(require(50)).unwrap();
    // Run out, the lease raises nothing; taken over, its token goes on from the raise.
    assert!(store.lease("leader", "a", 50, 1_004).unwrap().granted);
    expire();
    assert_eq!(store.raise_lease("leader", "a", 90, 2_000).unwrap(), None);
    let b = store.lease("leader", "b", ttl, 2_001).unwrap();
    assert_eq!((b.granted, b.token), (true, 51));
}

#[test]
fn only_the_holder_raises_its_token_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(&dir.path().join("meta.redb")).unwrap();
    only_the_holder_raises_its_token(&redb, || {});
}

#[test]
fn only_the_holder_raises_its_token_on_postgresql() {
    let Some((_dir, pg)) = server("only_the_holder_raises_its_token") else {
        return;
    };
    let store = PgStore::open(&pg.url()).unwrap();
    only_the_holder_raises_its_token(&store, || {
        std::thread::sleep(std::time::Duration::from_millis(120));
    });
}
