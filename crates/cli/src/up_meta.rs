//! `maat up --meta`: where the MDS keeps its metadata (issue 42). `redb` (the default) is
//! one file in `DATA/mds`; `postgres` is a PostgreSQL server of the cluster's own in
//! `DATA/postgres`, started before the MDS and stopped after it, on a unix socket in a
//! 0700 directory (no password); `--meta-url` names an existing server instead.

use anyhow::{Context, Result};
use maat_server::pg_server::LocalPostgres;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// The cluster's own PostgreSQL server, kept running.
pub struct OwnServer {
    server: Option<LocalPostgres>,
    dir: PathBuf,
    /// After a failed restart: not before then again.
    retry_at: Option<Instant>,
}

/// How long after a failed restart of the server the next is tried.
const RESTART_BACKOFF: Duration = Duration::from_secs(5);

/// Starts the cluster's own PostgreSQL server if it has one (`DATA/postgres`).
pub fn start_own_server(data: &Path) -> Result<Option<OwnServer>> {
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
    Ok(Some(OwnServer {
        server: Some(server),
        dir,
        retry_at: None,
    }))
}

impl OwnServer {
    /// Starts the server again if it exited (the MDS reconnects by itself); after a
    /// failed start, tries again [`RESTART_BACKOFF`] later.
    pub fn keep_running(&mut self) {
        if let Some(s) = &mut self.server {
            if !s.exited() {
                return;
            }
            eprintln!("maat: PostgreSQL exited unexpectedly; restarting");
            self.server = None;
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        match LocalPostgres::start(&self.dir) {
            Ok(again) => {
                self.server = Some(again);
                self.retry_at = None;
            }
            Err(e) => {
                eprintln!(
                    "maat: restarting PostgreSQL failed: {e}; trying again in {} s",
                    RESTART_BACKOFF.as_secs()
                );
                self.retry_at = Some(Instant::now() + RESTART_BACKOFF);
            }
        }
    }

    /// Stops the server (after the MDS).
    pub fn stop(self) {
        if let Some(server) = self.server {
            if let Err(e) = server.stop() {
                eprintln!("maat: stopping PostgreSQL: {e}");
            }
        }
    }
}
