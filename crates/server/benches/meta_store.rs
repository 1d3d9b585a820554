//! Criterion benchmarks of the MDS store's commits (figures in docs/PERFORMANCE.md, "Group
//! commit"): one batch of a file create's shape (an entry and an inode-sized value)
//! committed durably, deferred with a sync after each, and four deferred with one sync,
//! on one thread: what group commit (`group_commit` in the MDS config) saves per batch.
//! Run: `MAAT_BENCH_DIR=/dev/shm cargo bench -p maat-server --bench meta_store` (the
//! directory holds the database: tmpfs, or a disk; default the system's temporary one).
//!
//! `meta_store_postgres` (where PostgreSQL's server binaries are installed; said on
//! stderr where not): a change's read-decide-commit sequence on a PostgreSQL store (one
//! read, one commit), bare and inside the writer lock that several MDS instances share
//! (issue 42, `MetaStore::exclusive`): what the lock costs each change.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use maat_mds::store::{Batch, MetaStore, Op};
use maat_server::meta_store::RedbStore;

fn batch(i: u64) -> Batch {
    let mut b = Batch::default();
    b.push(Op::PutEntry {
        parent: 1,
        name: format!("file-{i}"),
        child: i,
    });
    b.push(Op::PutMeta(format!("inode-{i}"), vec![0x5a; 200]));
    b
}

fn commits(c: &mut Criterion) {
    let base = std::env::var_os("MAAT_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    let store = RedbStore::open(&dir.path().join("meta.redb")).unwrap();
    store.set_group_commit(true);
    let mut i = 0u64;
    let mut next = move || {
        i += 1;
        batch(i)
    };
    let mut g = c.benchmark_group("meta_store");
    g.bench_function("commit_durable", |b| {
        b.iter(|| store.commit(next()).unwrap())
    });
    g.bench_function("commit_deferred_then_sync", |b| {
        b.iter(|| {
            store.commit_deferred(next()).unwrap();
            store.sync().unwrap();
        })
    });
    g.bench_function("four_deferred_then_sync", |b| {
        b.iter(|| {
            for _ in 0..4 {
                store.commit_deferred(next()).unwrap();
            }
            store.sync().unwrap();
        })
    });
    g.finish();
}

fn postgres(c: &mut Criterion) {
    use maat_server::pg_server::{cannot_start_here, LocalPostgres};
    use maat_server::pg_store::PgStore;
    use std::os::unix::fs::PermissionsExt;
    if let Some(why) = cannot_start_here() {
        eprintln!("SKIPPED meta_store_postgres: {why}");
        return;
    }
    let base = std::env::var_os("MAAT_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    // Run as root, the server is the postgres account's, which must pass through here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let pg = LocalPostgres::start(&dir.path().join("pg")).unwrap();
    let store = PgStore::open(&pg.url()).unwrap();
    let mut i = 0u64;
    let mut next = move || {
        i += 1;
        batch(i)
    };
    let mut g = c.benchmark_group("meta_store_postgres");
    g.bench_function("read_commit", |b| {
        b.iter(|| {
            store.meta("inode-1").unwrap();
            store.commit(next()).unwrap();
        })
    });
    g.bench_function("read_commit_under_writer_lock", |b| {
        b.iter(|| {
            let held = store.exclusive().unwrap();
            store.meta("inode-1").unwrap();
            store.commit(next()).unwrap();
            drop(held);
        })
    });
    g.finish();
}

criterion_group!(benches, commits, postgres);
criterion_main!(benches);
