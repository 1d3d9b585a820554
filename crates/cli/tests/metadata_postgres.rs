//! `maat up --meta postgres` (issue 42): a cluster whose MDS keeps its metadata in a
//! PostgreSQL server of its own, on real daemons. Files, users and modes made through it
//! survive the MDS's restart, the database server's crash (SIGKILL: only its write-ahead
//! log keeps what was acknowledged) and the whole cluster's restart; no password is
//! written anywhere and the server's directory is its account's alone. Skips, saying so,
//! where no PostgreSQL server binaries are installed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{content, signal, Cluster};
use maat_client::Client;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn put(c: &Client, path: &str, data: &[u8]) {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .unwrap();
}

fn get(c: &Client, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    c.get_whole(path, &mut out, &mut |_| {}).unwrap();
    out
}

/// The postmaster's pid, from the first line of `postmaster.pid`.
fn postgres_pid(data: &Path) -> u32 {
    let text = std::fs::read_to_string(data.join("postgres/cluster/postmaster.pid")).unwrap();
    text.lines().next().unwrap().trim().parse().unwrap()
}

/// Retries `f` until it succeeds or 30 s pass (a daemon coming back).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

#[test]
fn a_cluster_on_postgresql_keeps_its_metadata_through_restarts_and_a_database_crash() {
    let Some(mut cluster) = Cluster::start_postgres(
        "a_cluster_on_postgresql_keeps_its_metadata",
        &["--osds", "2", "--umask", "022"],
    ) else {
        return;
    };
    let data = cluster.data();
    let mds_config = std::fs::read_to_string(data.join("mds/mds.toml")).unwrap();
    assert!(mds_config.contains("meta_url"), "{mds_config}");
    assert!(!mds_config.contains("password"), "{mds_config}");
    assert!(
        !data.join("mds/meta.redb").exists(),
        "the MDS made a redb store"
    );
    let pg_dir = std::fs::metadata(data.join("postgres")).unwrap();
    assert_eq!(
        pg_dir.mode() & 0o077,
        0,
        "the database directory is its owner's alone"
    );

    let health: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&cluster.admin_home(), &["health", "--json"], None))
            .unwrap();
    assert_eq!(health["metadata"], "postgresql", "{health}");
    // The lone MDS holds the leader lease (T10 key upkeep) from its start.
    assert_eq!(health["leader"], true, "{health}");
    let token = health["leader_token"].as_u64().unwrap();
    assert!(token >= 1, "{health}");
    cluster.add_user("bob", "bob's passphrase", None);
    let admin = cluster.admin_client();
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| {
            (
                format!("/shared/f{i}"),
                content(i, 10_000 + 300_000 * i as usize),
            )
        })
        .collect();
    admin.mkdir("/shared", 0o755, false).unwrap();
    for (path, bytes) in &files {
        put(&admin, path, bytes);
    }
    admin.chmod("/shared/f0", 0o600).unwrap();

    // The MDS restarts (its supervisor starts it again) and reads it all back.
    signal("-KILL", cluster.pid("mds"));
    let bob = eventually("bob logs in after the MDS restart", || {
        let c = Client::new(
            maat_client::ClusterFile::load(&cluster.cluster_file()).unwrap(),
            None,
        )
        .map_err(|e| e.to_string())?;
        c.login(
            "bob",
            maat_client::Credential::Passphrase(b"bob's passphrase"),
        )
        .map_err(|e| e.to_string())?;
        Ok(c)
    });
    assert_eq!(get(&bob, "/shared/f1"), files[1].1);
    // The restarted MDS is the same instance (host and data directory): it takes its
    // own lease back at once, under the same token, without waiting for it to run out.
    let health: serde_json::Value =
        serde_json::from_slice(&cluster.ok(&cluster.admin_home(), &["health", "--json"], None))
            .unwrap();
    assert_eq!(health["leader"], true, "{health}");
    assert_eq!(health["leader_token"].as_u64(), Some(token), "{health}");
    assert!(bob.stat("/shared/f0").is_ok());
    let mut out = Vec::new();
    assert!(
        bob.get_whole("/shared/f0", &mut out, &mut |_| {}).is_err(),
        "the mode 0600 set before the restart holds"
    );

    // The database server crashes; what was acknowledged is in its log.
    signal("-KILL", postgres_pid(&data));
    let admin = eventually("the admin reads after the database crash", || {
        let c = cluster.local.admin().map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        c.get_whole("/shared/f3", &mut out, &mut |_| {})
            .map_err(|e| e.to_string())?;
        Ok(c)
    });
    for (path, bytes) in &files {
        assert_eq!(&get(&admin, path), bytes, "{path}");
    }
    put(&admin, "/shared/after-crash", b"written after the crash");

    // The whole cluster stops and starts again on the same directory.
    cluster.restart();
    let admin = cluster.admin_client();
    assert_eq!(
        get(&admin, "/shared/after-crash"),
        b"written after the crash"
    );
    assert_eq!(get(&admin, "/shared/f2"), files[2].1);
    let names: Vec<String> = admin
        .readdir("/shared")
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 5, "{names:?}");
    let bob = cluster.user_client("bob", "bob's passphrase");
    assert_eq!(get(&bob, "/shared/f3"), files[3].1);
}
