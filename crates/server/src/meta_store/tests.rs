//! Tests of the redb store: reopening, group commit's reads and its crash safety.

#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn commit_and_read_back_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        let mut b = Batch::default();
        b.push(Op::PutEntry {
            parent: 1,
            name: "b".into(),
            child: 3,
        });
        b.push(Op::PutEntry {
            parent: 1,
            name: "a".into(),
            child: 2,
        });
        b.push(Op::PutEntry {
            parent: 2,
            name: "x".into(),
            child: 4,
        });
        b.push(Op::PutMeta("k".into(), vec![1, 2]));
        store.commit(b).unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(
        store.entries(1).unwrap(),
        vec![("a".to_string(), 2), ("b".to_string(), 3)]
    );
    assert_eq!(store.entries(2).unwrap(), vec![("x".to_string(), 4)]);
    assert_eq!(store.lookup(1, "b").unwrap(), Some(3));
    assert_eq!(store.meta("k").unwrap(), Some(vec![1, 2]));
}

/// Deferred changes are read before they are written, over what is stored (a
/// deletion hides a stored entry), and read the same after the sync and a restart.
#[test]
fn reads_see_deferred_changes_over_stored_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let entry = |name: &str, child| Op::PutEntry {
        parent: 1,
        name: name.into(),
        child,
    };
    let expected = vec![("b".to_string(), 3), ("c".to_string(), 4)];
    {
        let store = RedbStore::open(&path).unwrap();
        let mut b = Batch::default();
        b.push(entry("a", 2)).push(entry("b", 3));
        b.push(Op::PutMeta("p/1".into(), vec![1]));
        store.commit(b).unwrap();
        let mut b = Batch::default();
        b.push(Op::DeleteEntry {
            parent: 1,
            name: "a".into(),
        });
        b.push(entry("c", 4));
        b.push(Op::DeleteMeta("p/1".into()));
        b.push(Op::PutMeta("p/2".into(), vec![2]));
        store.commit_deferred(b).unwrap();
        for _ in 0..2 {
            assert_eq!(store.entries(1).unwrap(), expected);
            assert_eq!(store.lookup(1, "a").unwrap(), None);
            assert_eq!(store.lookup(1, "c").unwrap(), Some(4));
            assert_eq!(store.metas("p/").unwrap(), vec![("p/2".into(), vec![2])]);
            store.sync().unwrap();
        }
    }
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.entries(1).unwrap(), expected);
    assert_eq!(store.metas("p/").unwrap(), vec![("p/2".into(), vec![2])]);
}

fn put_meta(key: &str) -> Batch {
    let mut b = Batch::default();
    b.push(Op::PutMeta(key.into(), vec![7]));
    b
}

/// Group commit: a deferred batch is read at once; `sync` makes it survive a crash
/// (the process exits at once, nothing dropped), and without `sync` a crash loses it. The
/// crash happens in a child process: this test binary run again on the helper below.
#[test]
fn a_deferred_batch_survives_a_crash_only_after_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    for sync in [false, true] {
        let path = dir.path().join(format!("sync-{sync}.redb"));
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "meta_store::tests::crash_after_a_deferred_batch",
                "--ignored",
                "--nocapture",
            ])
            .env("MAAT_TEST_CRASH_DB", &path)
            .env("MAAT_TEST_CRASH_SYNC", sync.to_string())
            .status()
            .unwrap();
        assert!(!status.success(), "the helper must crash, not finish");
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.meta("durable").unwrap(), Some(vec![7]));
        let deferred = store.meta("deferred").unwrap();
        if sync {
            assert_eq!(
                deferred,
                Some(vec![7]),
                "a synced batch was lost in a crash"
            );
        } else {
            assert_eq!(
                deferred, None,
                "an unsynced batch survived: it cost an fsync"
            );
        }
    }
}

/// Run by the test above (ignored otherwise): commits one batch durably and one
/// deferred, reads it back, syncs if asked, and exits at once (no destructor runs, as in
/// a crash).
#[test]
#[ignore = "a helper: run by a_deferred_batch_survives_a_crash_only_after_a_sync"]
fn crash_after_a_deferred_batch() {
    let Some(path) = std::env::var_os("MAAT_TEST_CRASH_DB") else {
        eprintln!("a helper of a_deferred_batch_survives_a_crash_only_after_a_sync: not run alone");
        return;
    };
    let store = RedbStore::open(Path::new(&path)).unwrap();
    store.set_group_commit(true);
    store.commit(put_meta("durable")).unwrap();
    store.commit_deferred(put_meta("deferred")).unwrap();
    assert_eq!(store.meta("deferred").unwrap(), Some(vec![7]));
    let counts = store.durability_counts();
    assert_eq!((counts.batches, counts.fsyncs), (2, 1));
    if std::env::var("MAAT_TEST_CRASH_SYNC").unwrap() == "true" {
        store.sync().unwrap();
        assert_eq!(store.durability_counts().fsyncs, 2);
        // Nothing new: no second fsync.
        store.sync().unwrap();
        assert_eq!(store.durability_counts().fsyncs, 2);
    }
    std::process::exit(3);
}
