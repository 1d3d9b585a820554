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

/// `maat up --meta postgres --mds 3` (issue 42): three MDS instances over one database,
/// on real daemons. The cluster file lists them; a client keeps working while instances
/// are killed (SIGKILL) under a stream of creates, chmods and puts, with every change it
/// was told about there afterwards, once; a chmod at one instance holds at once at
/// another. Skips, saying so, where no PostgreSQL server binaries are installed.
mod instances {
    use crate::common::{code, content, signal, Cluster};
    use maat_client::{Client, ClusterFile, Credential, Home};
    use maat_proto::msg::ErrorCode;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn start() -> Option<Cluster> {
        Cluster::start_postgres(
            "mds_instances",
            // Encrypting (`maat up`'s default): every put and get also asks the KDS,
            // which must move its revocation catch-ups to another instance when its own
            // stops, or it refuses keys once its view is stale (10 s).
            &["--osds", "2", "--umask", "022", "--mds", "3"],
        )
    }

    /// The cluster file with only the instance at `index` (0: `mds`), so that a client
    /// asks that one and no other.
    fn pinned(cluster: &Cluster, index: usize) -> ClusterFile {
        let mut file = ClusterFile::load(&cluster.cluster_file()).unwrap();
        file.mds = file.mds_addresses()[index].clone();
        file.mds_others.clear();
        file
    }

    #[test]
    fn three_instances_serve_through_kills_and_agree_at_once() {
        let Some(cluster) = start() else {
            return;
        };
        let file = ClusterFile::load(&cluster.cluster_file()).unwrap();
        assert_eq!(file.mds_addresses().len(), 3, "{file:?}");
        let health: serde_json::Value =
            serde_json::from_slice(&cluster.ok(&cluster.admin_home(), &["health", "--json"], None))
                .unwrap();
        let instances = health["mds_instances"].as_array().unwrap();
        assert_eq!(instances.len(), 3, "{health}");
        assert!(instances.iter().all(|i| i["up"] == true), "{health}");
        let leaders = instances.iter().filter(|i| i["leader"] == true).count();
        assert_eq!(leaders, 1, "one instance holds the lease: {health}");

        // A chmod at instance 1 holds at instance 2 at once.
        cluster.add_user("bob", "bob's passphrase", None);
        let admin_at_1 =
            Client::new(pinned(&cluster, 0), Some(Home::new(cluster.admin_home()))).unwrap();
        let bob_at_2 = Client::new(pinned(&cluster, 1), None).unwrap();
        bob_at_2
            .login("bob", Credential::Passphrase(b"bob's passphrase"))
            .unwrap();
        let data = content(1, 5_000);
        admin_at_1
            .put(&mut &data[..], data.len() as u64, "/p", &mut |_| {})
            .unwrap();
        let mut out = Vec::new();
        bob_at_2.get_whole("/p", &mut out, &mut |_| {}).unwrap();
        assert_eq!(out, data);
        admin_at_1.chmod("/p", 0o600).unwrap();
        // A fresh client, so that the open goes to the MDS (a capability already held stays
        // valid until it expires, with one instance as with three).
        let bob_at_2 = Client::new(pinned(&cluster, 1), None).unwrap();
        bob_at_2
            .login("bob", Credential::Passphrase(b"bob's passphrase"))
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            code(bob_at_2.get_whole("/p", &mut out, &mut |_| {})),
            ErrorCode::PermissionDenied,
            "instance 2 served what instance 1 had just closed"
        );

        // One client, a stream of changes; instances killed under it (each restarted by
        // `maat up`'s supervisor). No operation fails, and every one is there once.
        let admin = cluster.admin_client();
        admin.mkdir("/s", 0o755, false).unwrap();
        // The kills run while the stream does; the stream goes on until they are over.
        let killed = AtomicBool::new(false);
        let mut n = 0;
        // The longest one round (mkdir, put, chmod) took: the pause a kill costs a client.
        let mut longest = Duration::ZERO;
        std::thread::scope(|s| {
            s.spawn(|| {
                // One at a time: the next is killed once the last one's restart is serving
                // (all three down at once is an outage, as one MDS down is today).
                for daemon in ["mds-2", "mds", "mds-3", "mds-2", "mds"] {
                    std::thread::sleep(Duration::from_millis(250));
                    let pid = cluster.pid(daemon);
                    signal("-KILL", pid);
                    while cluster.local.pid(daemon).map_or(true, |p| p == pid) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    std::thread::sleep(Duration::from_millis(600));
                }
                killed.store(true, Ordering::Relaxed);
            });
            while n < 20 || !killed.load(Ordering::Relaxed) {
                let round = std::time::Instant::now();
                admin.mkdir(&format!("/s/d{n}"), 0o755, false).unwrap();
                let bytes = content(n as u64, 3_000 + 500 * n);
                let path = format!("/s/d{n}/f");
                admin
                    .put(&mut &bytes[..], bytes.len() as u64, &path, &mut |_| {})
                    .unwrap();
                admin.chmod(&path, 0o640).unwrap();
                longest = longest.max(round.elapsed());
                n += 1;
            }
        });
        let failovers = admin.client_stats().mds_failovers;
        assert!(failovers > 0, "no request moved to another instance");
        let check = cluster.admin_client();
        assert_eq!(check.readdir("/s").unwrap().len(), n);
        for i in 0..n {
            let path = format!("/s/d{i}/f");
            assert_eq!(check.stat(&path).unwrap().mode & 0o7777, 0o640, "{path}");
            let mut out = Vec::new();
            check.get_whole(&path, &mut out, &mut |_| {}).unwrap();
            assert_eq!(out, content(i as u64, 3_000 + 500 * i), "{path}");
        }
        eprintln!(
            "mds_instances: {n} rounds, {failovers} requests moved to another instance, \
             longest round {longest:?}"
        );

        // The first instance gone for good (its config moved away, so `maat up` cannot
        // start it again): the OSDs check in at another, so that instances still count them
        // up past `OSD_DOWN_AFTER_MILLIS`; the leader lease passes on once it runs out.
        let config = cluster.data().join("mds/mds.toml");
        let aside = cluster.data().join("mds.toml.aside");
        std::fs::rename(&config, &aside).unwrap();
        signal("-KILL", cluster.pid("mds"));
        std::thread::sleep(Duration::from_millis(
            maat_server::leader::LEADER_TTL.as_millis() as u64 + 1_500,
        ));
        let health: serde_json::Value =
            serde_json::from_slice(&cluster.ok(&cluster.admin_home(), &["health", "--json"], None))
                .unwrap();
        // An encrypted put and get while the first instance is still gone: the KDS, whose
        // catch-ups went to it, still hands out keys (its view of the revocations would
        // be stale by now, past `REVOCATIONS_STALE_MILLIS`).
        let bytes = content(9, 10_000);
        let put = admin.put(&mut &bytes[..], bytes.len() as u64, "/after", &mut |_| {});
        let reader = cluster.admin_client();
        let mut out = Vec::new();
        let got = reader.get_whole("/after", &mut out, &mut |_| {});
        std::fs::rename(&aside, &config).unwrap();
        put.unwrap();
        got.unwrap();
        assert_eq!(out, bytes);
        assert!(
            admin.stat("/after").unwrap().encrypted,
            "/after is not encrypted"
        );
        assert_eq!(health["osds_up"], 2, "{health}");
        let instances = health["mds_instances"].as_array().unwrap();
        assert_eq!(instances[0]["up"], false, "{health}");
        let leaders = instances.iter().filter(|i| i["leader"] == true).count();
        assert_eq!(leaders, 1, "another instance took the lease: {health}");
    }
}
