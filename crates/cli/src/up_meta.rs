//! `maat up --meta`: where the MDS keeps its metadata (issue 42). `redb` (the default) is
//! one file in `DATA/mds`; `postgres` is a PostgreSQL server of the cluster's own in
//! `DATA/postgres`, started before the MDS and stopped after it, on a unix socket in a
//! 0700 directory (no password); `--meta-url` names an existing server instead.

use anyhow::{Context, Result};
use maat_server::pg_server::LocalPostgres;
use std::path::Path;

/// The metadata engines `maat up --meta` takes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Meta {
    /// One redb file under the data directory (embedded, nothing else to run).
    #[default]
    Redb,
    /// PostgreSQL: a local server of the cluster's own (the installed binaries), or the
    /// one `--meta-url` names.
    Postgres,
}

/// The MDS config's `meta_url` for a new cluster in `data`: `url` if given, a server of
/// the cluster's own for `postgres` (its directory made now, so that every later `maat
/// up` starts it), none for redb.
pub fn new_cluster_url(meta: Meta, url: Option<&str>, data: &Path) -> Result<Option<String>> {
    if let Some(url) = url {
        return Ok(Some(url.to_string()));
    }
    if meta == Meta::Redb {
        return Ok(None);
    }
    let data = data
        .canonicalize()
        .with_context(|| format!("{}", data.display()))?;
    let dir = data.join("postgres");
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    Ok(Some(LocalPostgres::url_for(&dir)))
}

/// Starts the cluster's own PostgreSQL server if it has one (`DATA/postgres`).
pub fn start_own_server(data: &Path) -> Result<Option<LocalPostgres>> {
    let dir = data.join("postgres");
    if !dir.is_dir() {
        return Ok(None);
    }
    if rustix::process::geteuid().is_root() {
        // The server runs as the postgres account, which must pass through DATA to its
        // own 0700 directory: others get `x` on DATA (pass, not list; everything in it
        // stays 0700 or 0600).
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data)
            .with_context(|| format!("{}", data.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(
                data,
                std::fs::Permissions::from_mode((mode | 0o001) & 0o7777),
            )
            .with_context(|| format!("chmod o+x {}", data.display()))?;
        }
    }
    let server = LocalPostgres::start(&dir).context("starting the metadata database")?;
    eprintln!(
        "maat: PostgreSQL (metadata) running in {} (pid {})",
        dir.display(),
        server.pid()
    );
    Ok(Some(server))
}

/// Starts the server again if it exited (the MDS reconnects by itself).
pub fn keep_running(server: &mut Option<LocalPostgres>, data: &Path) {
    if let Some(s) = server {
        if s.exited() {
            eprintln!("maat: PostgreSQL exited unexpectedly; restarting");
            match LocalPostgres::start(&data.join("postgres")) {
                Ok(again) => *server = Some(again),
                Err(e) => eprintln!("maat: restarting PostgreSQL failed: {e}"),
            }
        }
    }
}
