//! One `Client` shared by many threads (`&self`), as the Python package, FUSE and a
//! gateway use it: puts and gets of striped files from eight threads at once, each
//! thread's files read back by the others, on a real cluster on loopback. Every request
//! must be accepted (threads drawing the same nonce would be refused as replays, two
//! threads on one connection would read each other's answers) and every byte must come
//! back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{content, Cluster};
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
