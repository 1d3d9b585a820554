//! One `Client` shared by many threads (`&self`), as the Python package, FUSE and a
//! gateway use it: puts and gets of striped files from eight threads at once, each
//! thread's files read back by the others, on a real cluster on loopback. Every request
//! must be accepted (threads drawing the same nonce would be refused as replays, two
//! threads on one connection would read each other's answers) and every byte must come
//! back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{code, content, Cluster};
use maat_client::Credential;
use maat_proto::msg::ErrorCode;
use std::sync::Arc;

const THREADS: u64 = 8;
const ROUNDS: u64 = 3;

fn size(thread: u64, round: u64) -> usize {
    // Across stripe boundaries (512 KiB), different per file.
    (1_100_000 + thread * 7_919 + round * 104_729) as usize
}

fn share(cluster: &Cluster) {
    let client = Arc::new(cluster.admin_client());
    client.mkdir("/shared", 0o755, false).unwrap();
    let before = client.client_stats().requests;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let client = Arc::clone(&client);
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let path = format!("/shared/t{t}-{round}");
                    let data = content(t * 100 + round, size(t, round));
                    client
                        .put(&mut &data[..], data.len() as u64, &path, &mut |_| {})
                        .unwrap_or_else(|e| panic!("thread {t}: put {path}: {e}"));
                    let mut back = Vec::new();
                    client
                        .get(&path, &mut back, &mut |_| {})
                        .unwrap_or_else(|e| panic!("thread {t}: get {path}: {e}"));
                    assert!(back == data, "thread {t}: {path} read back differs");
                }
            });
        }
    });
    // Each thread reads the others' files, all at once.
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let client = Arc::clone(&client);
            scope.spawn(move || {
                for other in (0..THREADS).filter(|&o| o != t) {
                    let path = format!("/shared/t{other}-{}", ROUNDS - 1);
                    let mut back = Vec::new();
                    client
                        .get(&path, &mut back, &mut |_| {})
                        .unwrap_or_else(|e| panic!("thread {t}: get {path}: {e}"));
                    assert!(
                        back == content(other * 100 + ROUNDS - 1, size(other, ROUNDS - 1)),
                        "thread {t}: {path} differs"
                    );
                }
            });
        }
    });
    // The counters are the client's, kept across threads: every file has at least three
    // stripes, so each put and get made at least three OSD requests.
    let requests = client.client_stats().requests - before;
    let transfers = THREADS * ROUNDS * 2 + THREADS * (THREADS - 1);
    assert!(
        requests >= 3 * transfers,
        "{requests} requests for {transfers} transfers"
    );
    assert_eq!(
        client.readdir("/shared").unwrap().len() as u64,
        THREADS * ROUNDS
    );
}

#[test]
fn threads_share_one_client() {
    let cluster = Cluster::start(2, &[]);
    share(&cluster);
}

#[test]
fn threads_share_one_client_on_encrypted_files() {
    let cluster = Cluster::start_encrypting(2, &[]);
    share(&cluster);
}

/// One client per user, sharing connections (`Client::for_another_user`), used from
/// several threads at once: each acts as its own user only.
#[test]
fn users_share_connections_not_rights() {
    let cluster = Cluster::start(2, &[]);
    cluster.add_user("bob", "bob-pass-1", None);
    let admin = cluster.admin_client();
    let bob = admin.for_another_user(None).unwrap();
    // Before logging in, the new client has none of the administrator's rights.
    assert_eq!(bob.uid(), None);
    assert!(matches!(
        bob.stat("/"),
        Err(maat_client::ClientError::NotLoggedIn)
    ));
    bob.login("bob", Credential::Passphrase(b"bob-pass-1"))
        .unwrap();
    assert_eq!(bob.user_name().as_deref(), Some("bob"));
    assert_eq!(admin.user_name().as_deref(), Some("admin"));
    admin.mkdir("/pub", 0o777, false).unwrap();
    let secret = content(7, 600_000);
    admin
        .put(
            &mut &secret[..],
            secret.len() as u64,
            "/secret",
            &mut |_| {},
        )
        .unwrap();
    admin.chmod("/secret", 0o600).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (admin, bob, secret) = (&admin, &bob, &secret);
            scope.spawn(move || {
                let mine = content(100 + t, 700_000);
                let path = format!("/pub/bob-{t}");
                bob.put(&mut &mine[..], mine.len() as u64, &path, &mut |_| {})
                    .unwrap();
                // bob's file is bob's, the administrator's is not bob's to read.
                assert_eq!(admin.stat(&path).unwrap().owner, "bob");
                assert_eq!(
                    code(bob.get("/secret", &mut Vec::new(), &mut |_| {})),
                    ErrorCode::PermissionDenied
                );
                let mut back = Vec::new();
                admin.get(&path, &mut back, &mut |_| {}).unwrap();
                assert!(back == mine);
                let mut back = Vec::new();
                admin.get("/secret", &mut back, &mut |_| {}).unwrap();
                assert!(&back == secret);
            });
        }
    });
}

/// Threads that find the session near its end log in again once between them, not once
/// each (a login replaces the session the others are using).
#[test]
fn threads_finding_the_session_ending_log_in_once_between_them() {
    let mut cluster = Cluster::start(1, &[]);
    // Tickets of 62 s: a session counts as ending a minute before its expiry, so two
    // seconds after a login the next call logs in again.
    cluster.restart_with(|data| {
        let path = data.join("mds/mds.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let text: String = text
            .lines()
            .map(|l| match l.starts_with("ticket_lifetime_secs") {
                true => "ticket_lifetime_secs = 62".to_string(),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&path, text).unwrap();
    });
    let home = maat_client::Home::new(cluster.admin_home());
    let (name, key) = home.identity().unwrap().unwrap();
    let client = Arc::new(
        maat_client::Client::new(
            maat_client::ClusterFile::load(&cluster.cluster_file()).unwrap(),
            Some(home),
        )
        .unwrap(),
    );
    // A login now: its ticket is one of 62 s.
    client.login(&name, Credential::Key(key)).unwrap();
    let logins = |c: &maat_client::Client| common::counter(c, "mds", "logins");
    let before = logins(&client);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let start = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (client, start) = (&client, &start);
            scope.spawn(move || {
                start.wait();
                client.stat("/").unwrap();
            });
        }
    });
    let made = logins(&client) - before;
    assert!(made >= 1, "the ending session was not replaced");
    assert!(made <= 2, "{made} logins for one ending session");
}
