//! What the PostgreSQL tests share: a real server started for the test, and a
//! connection of the test's own.
#![allow(dead_code, clippy::unwrap_used)]

use maat_server::pg_server::{cannot_start_here, LocalPostgres};
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
