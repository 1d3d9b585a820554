//! What the PostgreSQL tests share: a real server started for the test, and a
//! connection of the test's own.
#![allow(dead_code, clippy::unwrap_used)]

use maat_mds::{Mds, MdsConfig, MdsSecrets, ADMIN_UID};
use maat_proto::msg::{self, InsecureRequest, MdsRequest, MdsResponse, WireError};
use maat_proto::UnixMillis;
use maat_server::pg_server::{cannot_start_here, LocalPostgres};
use maat_server::pg_store::PgStore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::os::unix::fs::PermissionsExt;

/// A server in a fresh directory, or `None` (said on stderr) without PostgreSQL.
pub fn server(test: &str) -> Option<(tempfile::TempDir, LocalPostgres)> {
    if let Some(why) = cannot_start_here() {
        // Past the harness's capture, so that the skip shows in CI output.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "\nSKIPPED {test}: {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    // Run as root, the server is the postgres account's, which must pass through here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let pg = LocalPostgres::start(&dir.path().join("pg")).unwrap();
    Some((dir, pg))
}

/// A connection of the test's own to `pg`'s database (not the store's).
pub fn admin(pg: &LocalPostgres) -> postgres::Client {
    pg.url()
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap()
}

fn config() -> MdsConfig {
    MdsConfig {
        grouping: maat_mds::grouping::GroupingConfig::default(),
        kds: Vec::new(),
        kds_keys: None,
        encrypt_new_files: false,
        default_umask: 0,
        default_replicas: 1,
        ticket_lifetime_millis: 600_000,
        capability_lifetime_millis: 300_000,
        // The requests of these tests are the administrator's, without a session.
        danger_allow_insecure: true,
        join_key: [0x10; 32],
        default_protection: maat_proto::protection::Protection::AllData,
    }
}

/// An MDS instance over `pg`'s database, with the secrets every instance of the test
/// has (as their key files would give).
pub fn mds(pg: &LocalPostgres) -> Mds<PgStore> {
    let secrets = MdsSecrets::generate(&mut ChaCha20Rng::seed_from_u64(99));
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let store = PgStore::open(&pg.url()).unwrap();
    Mds::open(
        store,
        config(),
        secrets,
        &[0x42; 32],
        UnixMillis(1_000_000),
        &mut rng,
    )
    .unwrap()
}

/// `request` as the administrator at `mds`.
pub fn call(mds: &Mds<PgStore>, request: MdsRequest) -> Result<MdsResponse, WireError> {
    let message = msg::encode(&InsecureRequest {
        user: ADMIN_UID,
        request,
    })
    .unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let answer = mds.handle_insecure(&message, UnixMillis(1_000_000), &mut rng);
    msg::decode::<Result<MdsResponse, WireError>>(&answer).unwrap()
}

/// Kills (SIGKILL) the backend holding the writer lock: its connection ends with no word
/// from the server, as when a host or a network fails (PostgreSQL then restarts its
/// other backends too). Whether one held it.
pub fn kill_writer_lock_backend(pg: &LocalPostgres) -> bool {
    use maat_server::pg_writer::WRITER_LOCK;
    let rows = admin(pg)
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND classid = $1 AND objid = $2",
            &[&((WRITER_LOCK >> 32) as u32), &(WRITER_LOCK as u32)],
        )
        .unwrap();
    let Some(pid) = rows.first().map(|r| r.get::<_, i32>(0)) else {
        return false;
    };
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success()
}

/// Ends the server session holding the MDS writer lock (as a network cut or the
/// server's idle limit would); whether one held it.
pub fn end_writer_lock_session(pg: &LocalPostgres) -> bool {
    use maat_server::pg_writer::WRITER_LOCK;
    // The backend holding the advisory lock (classid and objid: the key's halves).
    admin(pg)
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND granted AND classid = $1 AND objid = $2",
            &[&((WRITER_LOCK >> 32) as u32), &(WRITER_LOCK as u32)],
        )
        .unwrap()
        .get(0)
}
