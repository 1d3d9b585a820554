//! The PostgreSQL metadata store (issue 42) against a real PostgreSQL server started for
//! the test (`LocalPostgres`, the installed binaries): it answers every read as the redb
//! store does after the same batches, keeps its schema version, and refuses a newer one.
//! Where no PostgreSQL server binaries are installed, each test says it skipped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use maat_mds::store::{Batch, Inode, MetaStore, Op, SessionRecord, UserCredential, UserRecord};
use maat_proto::msg::KdfParams;
use maat_server::meta_store::RedbStore;
use maat_server::pg_server::{cannot_start_here, LocalPostgres};
use maat_server::pg_store::{PgStore, PG_SCHEMA_VERSION};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::os::unix::fs::PermissionsExt;

mod common;
use common::{admin, server};

const NAMES: [&str; 6] = ["a", "b", "ab", "Z", "é", "a b"];
const PREFIXES: [&str; 4] = ["", "p/", "p/1", "q"];

fn random_op(rng: &mut ChaCha8Rng) -> Op {
    let pick = |rng: &mut ChaCha8Rng, n: usize| (rng.next_u32() as usize) % n;
    match rng.next_u32() % 10 {
        // Users, for the session-and-user reads.
        8 => {
            let id = u64::from(rng.next_u32() % 5);
            Op::PutUser(UserRecord {
                id,
                name: format!("u{id}"),
                credential: UserCredential::Opaque {
                    record: vec![rng.next_u32() as u8],
                    params: KdfParams {
                        memory_kib: 8,
                        iterations: 1,
                        lanes: 1,
                    },
                },
                gid: 1,
                groups: Vec::new(),
                umask: 0o022,
            })
        }
        9 => {
            let id = u64::from(rng.next_u32() % 5);
            Op::DeleteUser {
                id,
                name: format!("u{id}"),
            }
        }
        0 | 1 => Op::PutEntry {
            parent: 1 + u64::from(rng.next_u32() % 3),
            name: NAMES[pick(rng, NAMES.len())].into(),
            child: u64::from(rng.next_u32() % 12),
        },
        // Inodes for some of the children (so that entries name some that exist and
        // some that do not).
        6 => Op::PutInode(inode(u64::from(rng.next_u32() % 12), rng.next_u32())),
        7 => Op::DeleteInode(u64::from(rng.next_u32() % 12)),
        2 => Op::DeleteEntry {
            parent: 1 + u64::from(rng.next_u32() % 3),
            name: NAMES[pick(rng, NAMES.len())].into(),
        },
        3 => Op::PutMeta(
            format!(
                "{}{}",
                ["p/1", "p/2", "q", "r"][pick(rng, 4)],
                rng.next_u32() % 4
            ),
            vec![rng.next_u32() as u8; pick(rng, 4)],
        ),
        4 => Op::DeleteMeta(format!(
            "{}{}",
            ["p/1", "p/2", "q", "r"][pick(rng, 4)],
            rng.next_u32() % 4
        )),
        _ => {
            let mut id = [0u8; 16];
            id[0] = (rng.next_u32() % 4) as u8;
            if rng.next_u32() % 3 == 0 {
                Op::DeleteSession(id)
            } else {
                Op::PutSession(
                    id,
                    SessionRecord {
                        user: u64::from(rng.next_u32() % 5),
                        sealed_key: vec![7; 48],
                        expiry: u64::from(rng.next_u32()),
                    },
                )
            }
        }
    }
}

fn inode(id: u64, size: u32) -> Inode {
    Inode {
        id,
        // The entries' parents (1 to 3) are directories, so that paths go deeper.
        is_dir: (1..=3).contains(&id),
        mode: 0o644,
        uid: 2,
        gid: 2,
        size: u64::from(size),
        mtime: 1,
        partition: 1,
        crypt: None,
        key_grants: Vec::new(),
        special: None,
        nlink: 1,
        atime: 1,
        ctime: 1,
    }
}

/// Paths from the root (1) of up to three names: through directories, files and
/// missing entries.
fn paths() -> Vec<Vec<&'static str>> {
    let mut paths: Vec<Vec<&str>> = vec![Vec::new()];
    for a in NAMES {
        paths.push(vec![a]);
        for b in NAMES {
            paths.push(vec![a, b]);
            for c in &NAMES[..3] {
                paths.push(vec![a, b, c]);
            }
        }
    }
    paths
}

/// Everything the two stores answer, for comparing: the redb store answers the joined
/// reads by the trait's defaults, so they are checked against PostgreSQL's joins.
fn view(s: &dyn MetaStore) -> String {
    let mut out = String::new();
    for parent in 1..=3 {
        out += &format!("entries {parent}: {:?}\n", s.entries(parent).unwrap());
        out += &format!(
            "entries_inodes {parent}: {:?}\n",
            s.entries_inodes(parent).unwrap()
        );
        for name in NAMES {
            out += &format!(
                "lookup {parent} {name}: {:?}\n",
                s.lookup(parent, name).unwrap()
            );
            out += &format!(
                "lookup_inode {parent} {name}: {:?}\n",
                s.lookup_inode(parent, name).unwrap()
            );
        }
    }
    for path in paths() {
        out += &format!("walk {path:?}: {:?}\n", s.walk(&path).unwrap());
    }
    for prefix in PREFIXES {
        out += &format!("metas {prefix:?}: {:?}\n", s.metas(prefix).unwrap());
    }
    out += &format!("meta p/10: {:?}\n", s.meta("p/10").unwrap());
    out += &format!("sessions: {:?}\n", s.sessions().unwrap());
    out += &format!("session 1: {:?}\n", s.session(&[1; 16]).unwrap());
    for first in 0..4u8 {
        let mut id = [0u8; 16];
        id[0] = first;
        for uid in 0..5 {
            out += &format!(
                "session_and_user {first} {uid}: {:?}\n",
                s.session_and_user(&id, uid).unwrap()
            );
        }
    }
    out
}

#[test]
fn the_postgresql_store_answers_as_the_redb_store_after_the_same_batches() {
    let Some((dir, pg)) = server("the_postgresql_store_answers_as_the_redb_store") else {
        return;
    };
    let redb = RedbStore::open(&dir.path().join("meta.redb")).unwrap();
    let postgres = PgStore::open(&pg.url()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut deepest = 0;
    for round in 0..120 {
        let mut batch = Batch::default();
        for _ in 0..(1 + rng.next_u32() % 5) {
            batch.push(random_op(&mut rng));
        }
        redb.commit(batch.clone()).unwrap();
        postgres.commit(batch).unwrap();
        let (a, b) = (view(&redb), view(&postgres));
        assert_eq!(a, b, "after batch {round}");
        for path in paths() {
            deepest = deepest.max(redb.walk(&path).unwrap().len());
        }
    }
    // (The walks compared went through directories, not only to the root's entries.)
    assert!(deepest >= 3, "the deepest walk found {deepest} inodes");
    // What was committed is there after the server restarts, for the same store (its
    // pooled connections died with the server: it connects again without failing a
    // request) and for a new one.
    let before = view(&postgres);
    pg.stop().unwrap();
    let pg = LocalPostgres::start(&dir.path().join("pg")).unwrap();
    assert_eq!(view(&postgres), before);
    pg.stop().unwrap();
    let pg = LocalPostgres::start(&dir.path().join("pg")).unwrap();
    let mut batch = Batch::default();
    batch.push(Op::PutMeta("p/1 after".into(), vec![9]));
    postgres.commit(batch).unwrap();
    let reopened = PgStore::open(&pg.url()).unwrap();
    assert_eq!(reopened.meta("p/1 after").unwrap(), Some(vec![9]));
    assert!(
        before.contains("\"é\""),
        "the run wrote non-ASCII names: {before}"
    );
}

#[test]
fn a_batch_that_fails_half_way_leaves_nothing() {
    let Some((_dir, pg)) = server("a_batch_that_fails_half_way_leaves_nothing") else {
        return;
    };
    let store = PgStore::open(&pg.url()).unwrap();
    let mut batch = Batch::default();
    batch.push(Op::PutMeta("p/1".into(), vec![1]));
    // A name PostgreSQL refuses in a `bytea` key is impossible; a session record that
    // does not encode is too. The table dropped under the store is what fails here.
    batch.push(Op::PutEntry {
        parent: 1,
        name: "x".into(),
        child: 2,
    });
    let mut admin: postgres::Client = pg
        .url()
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap();
    admin
        .batch_execute("ALTER TABLE entries RENAME TO entries_gone")
        .unwrap();
    let failed = store.commit(batch);
    assert!(failed.is_err(), "a write to a missing table must fail");
    admin
        .batch_execute("ALTER TABLE entries_gone RENAME TO entries")
        .unwrap();
    assert_eq!(
        store.meta("p/1").unwrap(),
        None,
        "the batch's first change stayed"
    );
    assert_eq!(store.lookup(1, "x").unwrap(), None);
}

#[test]
fn the_schema_is_versioned_and_a_newer_one_is_refused() {
    let Some((_dir, pg)) = server("the_schema_is_versioned_and_a_newer_one_is_refused") else {
        return;
    };
    // Two opens at once (two MDS instances starting) apply the migrations once.
    let url = pg.url();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| PgStore::open(&url));
        let b = s.spawn(|| PgStore::open(&url));
        (a.join().unwrap(), b.join().unwrap())
    });
    a.unwrap();
    b.unwrap();
    let mut admin: postgres::Client = url
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap();
    let versions: Vec<i32> = admin
        .query("SELECT version FROM maat_schema ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=PG_SCHEMA_VERSION).collect::<Vec<_>>());
    let store = PgStore::open(&url).unwrap();
    assert_eq!(
        store.meta(maat_mds::store::STORE_FORMAT_KEY).unwrap(),
        Some(maat_mds::store::STORE_FORMAT.to_be_bytes().to_vec())
    );
    admin
        .execute(
            "INSERT INTO maat_schema (version) VALUES ($1)",
            &[&(PG_SCHEMA_VERSION + 1)],
        )
        .unwrap();
    let refused = PgStore::open(&url).unwrap_err().to_string();
    assert!(refused.contains("newer than this MDS knows"), "{refused}");
}

#[test]
fn an_mds_config_with_a_database_password_must_be_its_owners_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.toml");
    let text = |url: &str| {
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"d\"\nadmin_key_file = \"a\"\njoin_key_file = \"j\"\nmeta_url = \"{url}\"\n"
        )
    };
    let mode = |m: u32| {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
    };
    std::fs::write(
        &path,
        text("host=/s user=maat password=hunter2 dbname=maat"),
    )
    .unwrap();
    mode(0o644);
    let refused = maat_server::MdsFileConfig::load(&path).unwrap_err();
    assert!(
        matches!(refused, maat_server::ServerError::Exposed { .. }),
        "{refused}"
    );
    mode(0o600);
    let loaded = maat_server::MdsFileConfig::load(&path).unwrap();
    assert!(loaded.meta_url.unwrap().contains("hunter2"));
    // Without a password, the file may be readable (it holds nothing secret).
    std::fs::write(&path, text("host=/s user=maat dbname=maat")).unwrap();
    mode(0o644);
    maat_server::MdsFileConfig::load(&path).unwrap();
    // A URL that does not parse is refused, saying so.
    std::fs::write(&path, text("host=/s port=notaport")).unwrap();
    let bad = maat_server::MdsFileConfig::load(&path)
        .unwrap_err()
        .to_string();
    assert!(bad.contains("meta_url does not parse"), "{bad}");
}

#[test]
fn a_second_server_on_a_running_clusters_directory_is_refused() {
    let Some((dir, _pg)) = server("a_second_server_on_a_running_clusters_directory_is_refused")
    else {
        return;
    };
    let refused = LocalPostgres::start(&dir.path().join("pg"))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("already runs"), "{refused}");
}

/// The server's directory is the server account's: a link it plants where the socket
/// directory or the log goes is refused, never followed (run as root, following it
/// would chown or chmod another file for that account).
#[test]
fn links_in_the_servers_directory_are_refused_not_followed() {
    if let Some(why) = cannot_start_here() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\nSKIPPED links_in_the_servers_directory_are_refused_not_followed: {why}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pg = dir.path().join("pg");
    std::fs::create_dir(&pg).unwrap();
    std::os::unix::fs::symlink(&victim, pg.join("socket")).unwrap();
    let refused = LocalPostgres::start(&pg).unwrap_err().to_string();
    assert!(refused.contains("socket"), "{refused}");
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "the link's target was changed");

    let victim_file = dir.path().join("victim-file");
    std::fs::write(&victim_file, b"not the server's").unwrap();
    std::fs::set_permissions(&victim_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::remove_file(pg.join("socket")).unwrap();
    std::os::unix::fs::symlink(&victim_file, pg.join("server.log")).unwrap();
    let refused = LocalPostgres::start(&pg).unwrap_err().to_string();
    assert!(refused.contains("server.log"), "{refused}");
    let mode = std::fs::metadata(&victim_file)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o644, "the log link's target was changed");
    assert_eq!(std::fs::read(&victim_file).unwrap(), b"not the server's");
}

#[test]
fn a_column_of_another_type_than_the_schema_says_is_an_error_not_a_panic() {
    let Some((_dir, pg)) = server("a_column_of_another_type_than_the_schema_says_is_an_error")
    else {
        return;
    };
    let store = PgStore::open(&pg.url()).unwrap();
    let entry = Op::PutEntry {
        parent: 1,
        name: "a".into(),
        child: 2,
    };
    store
        .commit(Batch(vec![entry, Op::PutMeta("k".into(), vec![1, 2])]))
        .unwrap();
    assert_eq!(store.lookup(1, "a").unwrap(), Some(2));
    drop(store);
    // Someone with the database's rights changes a column's type under the MDS.
    admin(&pg)
        .batch_execute("ALTER TABLE meta ALTER COLUMN v TYPE text USING encode(v, 'hex');")
        .unwrap();
    // A store that prepares its statements now gets text where it reads bytea: each
    // read says so (with the driver's `Row::get`, the thread panicked).
    let store = PgStore::open(&pg.url()).unwrap();
    for refused in [
        store.meta("k").unwrap_err().to_string(),
        store.metas("").unwrap_err().to_string(),
    ] {
        assert!(
            refused.contains("does not hold what this MDS's schema says"),
            "{refused}"
        );
    }
    // One that a statement joins on: a new connection cannot prepare its statements,
    // and every read on it says which.
    admin(&pg)
        .batch_execute("ALTER TABLE entries ALTER COLUMN child TYPE text;")
        .unwrap();
    let changed = PgStore::open(&pg.url()).unwrap();
    let refused = changed.lookup(1, "a").unwrap_err().to_string();
    assert!(
        refused.contains("preparing") && refused.contains("entries"),
        "{refused}"
    );
    // What did not change still reads, at the store opened before.
    assert_eq!(store.sessions().unwrap(), vec![]);
}

#[test]
fn the_store_keeps_at_most_its_bound_of_connections_however_many_threads_ask() {
    let Some((_dir, pg)) = server("the_store_keeps_at_most_its_bound_of_connections") else {
        return;
    };
    const BOUND: usize = 3;
    const THREADS: usize = 12;
    let store = PgStore::open_with_connections(&pg.url(), BOUND).unwrap();
    store
        .commit(Batch(vec![Op::PutMeta("k".into(), vec![7])]))
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut counter = admin(&pg);
    let barrier = std::sync::Barrier::new(THREADS);
    let most = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut most = 0i64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let n: i64 = counter
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                        &[&maat_server::pg_pool::PG_APPLICATION_NAME],
                    )
                    .unwrap()
                    .get(0);
                most = most.max(n);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            most
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..150 {
                        assert_eq!(store.meta("k").unwrap(), Some(vec![7]));
                        store
                            .commit(Batch(vec![Op::PutMeta("w".into(), vec![1])]))
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        sampler.join().unwrap()
    });
    // Every read and commit of twelve threads went through; the server never saw more
    // than the bound of the store's connections (without one: as many as threads).
    assert!(most >= 1, "the sampler never saw the store's connections");
    assert!(
        most <= BOUND as i64,
        "{most} connections open at once, bound {BOUND}"
    );
}

/// A database at schema version 1 (before leases and nonces) is brought to the current
/// version when an MDS opens it, its records kept, and leases and nonces then work.
#[test]
fn a_version_1_database_is_migrated_and_keeps_its_records() {
    let Some((_dir, pg)) = server("a_version_1_database_is_migrated") else {
        return;
    };
    let store = PgStore::open(&pg.url()).unwrap();
    store
        .commit(Batch(vec![Op::PutMeta("kept".into(), vec![4, 2])]))
        .unwrap();
    drop(store);
    // What schema 1 left: no leases table, versions up to 1.
    admin(&pg)
        .batch_execute(
            "DROP TABLE leases; DROP TABLE nonces; DELETE FROM maat_schema WHERE version > 1;",
        )
        .unwrap();
    let store = PgStore::open(&pg.url()).unwrap();
    assert_eq!(store.meta("kept").unwrap(), Some(vec![4, 2]));
    assert!(store.lease("leader", "a", 1000, 0).unwrap().granted);
    assert!(store.record_nonce(&[1; 16], &[2; 16], 5, 1000).unwrap());
    let versions: Vec<i32> = admin(&pg)
        .query("SELECT version FROM maat_schema ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![1, 2, 3]);
}

/// Issue 42: commits on the writer lock's connection do not wait for the disk (the lock
/// is held for round trips, not for fsyncs); `sync` makes every one made before it
/// durable. With the server's log writer told to wait 10 s, only `sync` can have
/// written the change to the log when the whole server is killed at once (SIGKILL to
/// its process group): it is there after the restart.
#[test]
fn changes_under_the_writer_lock_are_durable_after_sync() {
    let Some((dir, pg)) = server("changes_under_the_writer_lock_are_durable_after_sync") else {
        return;
    };
    let mut server_admin = admin(&pg);
    server_admin
        .batch_execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        .unwrap();
    server_admin
        .batch_execute("SELECT pg_reload_conf()")
        .unwrap();
    drop(server_admin);
    let store = PgStore::open(&pg.url()).unwrap();
    let before = store.durability_counts().fsyncs;
    let held = store.exclusive().unwrap();
    store
        .commit_deferred(Batch(vec![Op::PutMeta("deferred".into(), vec![1])]))
        .unwrap();
    drop(held);
    assert_eq!(
        store.durability_counts().fsyncs,
        before,
        "a deferred commit waited for the disk"
    );
    store.sync().unwrap();
    store.sync().unwrap();
    assert_eq!(
        store.durability_counts().fsyncs,
        before + 1,
        "one flush for one deferred commit, none when nothing is left"
    );
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", pg.pid())])
        .status()
        .unwrap();
    assert!(killed.success());
    pg.stop().unwrap();
    drop(store);
    let pg = LocalPostgres::start(&dir.path().join("pg")).unwrap();
    let reopened = PgStore::open(&pg.url()).unwrap();
    assert_eq!(reopened.meta("deferred").unwrap(), Some(vec![1]));
}
