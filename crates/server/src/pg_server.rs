//! A PostgreSQL server of Maat's own, under a directory it is given (`maat up --meta
//! postgres`, and the tests of the PostgreSQL store): the installed binaries, a cluster
//! made by `initdb` on first start, listening on a unix socket only, in a directory only
//! the server's account can enter (mode 0700), so no password exists anywhere: the
//! socket's directory is the access control.
//!
//! PostgreSQL refuses to run as root. Started by root, the server runs as the `postgres`
//! account (made by Debian's package), which then owns the cluster's directory; the
//! directories above it must let that account pass (`x`), which [`LocalPostgres::start`]
//! checks and says how to fix.

use crate::ServerError;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting server may take to accept connections.
pub const PG_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest path a unix socket may have (`sun_path` less its terminating zero).
pub const SOCKET_PATH_BYTES_MAX: usize = 107;
/// How long a fast shutdown may take before the server is told to stop at once.
pub const PG_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// The superuser `initdb` makes, as whom the MDS connects.
pub const PG_USER: &str = "maat";
/// The database the MDS keeps its tables in.
pub const PG_DATABASE: &str = "maat";

fn fail(reason: impl Into<String>) -> ServerError {
    ServerError::Config {
        path: "postgresql".into(),
        reason: reason.into(),
    }
}

/// Where the PostgreSQL server binaries are: the directory of `initdb` on `PATH`, else
/// the newest `/usr/lib/postgresql/N/bin` (Debian puts them there, off `PATH`).
pub fn pg_bin_dir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Why a server cannot be started here (no binaries; root without a `postgres`
/// account), or `None` when it can: tests that need one skip, saying this.
pub fn cannot_start_here() -> Option<String> {
    if pg_bin_dir().is_none() {
        return Some("no PostgreSQL server binaries (apt-get install postgresql)".into());
    }
    server_account().err().map(|e| e.to_string())
}

/// The account a server started by this process runs as: this one, or `postgres`
/// when this is root. `(uid, gid)`; `None` for this process's own.
fn server_account() -> Result<Option<(u32, u32)>, ServerError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| fail(format!("reading /etc/passwd: {e}")))?;
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if let [name, _, uid, gid, ..] = fields.as_slice() {
            if *name == "postgres" {
                let uid = uid.parse().map_err(|_| fail("/etc/passwd: a bad uid"))?;
                let gid = gid.parse().map_err(|_| fail("/etc/passwd: a bad gid"))?;
                return Ok(Some((uid, gid)));
            }
        }
    }
    Err(fail(
        "PostgreSQL does not run as root and there is no `postgres` account to run it as: install PostgreSQL (apt-get install postgresql) or start Maat as another user",
    ))
}

/// A running PostgreSQL server; stopped (fast shutdown) when dropped.
#[derive(Debug)]
pub struct LocalPostgres {
    child: Child,
    socket_dir: PathBuf,
    cluster: PathBuf,
}

impl LocalPostgres {
    /// Starts the server of the cluster in `dir` (made with `initdb` if `dir` holds
    /// none), waits until it accepts connections, and makes the [`PG_DATABASE`]
    /// database if it is missing. Its log goes to `dir/server.log`.
    pub fn start(dir: &Path) -> Result<Self, ServerError> {
        let bin = pg_bin_dir().ok_or_else(|| {
            fail("no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql: apt-get install postgresql")
        })?;
        let account = server_account()?;
        // (The server changes into its cluster directory: a relative socket path would
        // be taken from there.)
        let dir = std::path::absolute(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        let cluster = dir.join("cluster");
        let socket_dir = dir.join("socket");
        let socket = socket_dir.join(".s.PGSQL.5432");
        if socket.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
            return Err(fail(format!(
                "{} is longer than a unix socket path may be ({SOCKET_PATH_BYTES_MAX} bytes): use a shorter data directory",
                socket.display()
            )));
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| fail(format!("{}: {e}", parent.display())))?;
        }
        // `dir` and what is in it may be the server account's: everything done in it as
        // root goes through descriptors opened without following links, so that
        // account cannot turn a link into a chown or chmod of another file.
        private_dir(&dir, account)?;
        private_dir(&socket_dir, account)?;
        if let Some((uid, _)) = account {
            check_passable(&dir, uid)?;
        }
        if let Some(pid) = running_postmaster(&cluster) {
            return Err(fail(format!(
                "a PostgreSQL server (pid {pid}) already runs on {}, left by an earlier run: stop it (kill -INT {pid}) and start again",
                cluster.display()
            )));
        }
        let as_account = |program: &str| {
            let mut c = Command::new(bin.join(program));
            c.current_dir(&dir);
            if let Some((uid, gid)) = account {
                c.uid(uid).gid(gid);
            }
            c
        };
        if !cluster.join("PG_VERSION").exists() {
            let out = as_account("initdb")
                .arg("-D")
                .arg(&cluster)
                .args(["-U", PG_USER, "--auth-local=trust", "--auth-host=reject"])
                .args(["-E", "UTF8", "--no-locale"])
                .output()
                .map_err(|e| fail(format!("running initdb: {e}")))?;
            if !out.status.success() {
                return Err(fail(format!(
                    "initdb failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        let log_path = dir.join("server.log");
        let log = private_log(&log_path, account)?;
        let log_err = log
            .try_clone()
            .map_err(|e| fail(format!("{}: {e}", log_path.display())))?;
        let child = as_account("postgres")
            .arg("-D")
            .arg(&cluster)
            .arg("-k")
            .arg(&socket_dir)
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "unix_socket_permissions=0700",
            ])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            // Its own process group: a Ctrl-C at the terminal reaches `maat up`, which
            // stops the server after the MDS, not at once beside it.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| fail(format!("starting postgres: {e}")))?;
        let mut server = Self {
            child,
            socket_dir,
            cluster,
        };
        server.wait_ready(&log_path)?;
        server.create_database()?;
        Ok(server)
    }

    /// The URL of [`PG_DATABASE`] on this server (the MDS config's `meta_url`).
    pub fn url(&self) -> String {
        Self::url_in(&self.socket_dir, PG_DATABASE)
    }

    /// The URL [`LocalPostgres::url`] gives for a server started in `dir` (an absolute
    /// path), known before it starts.
    pub fn url_for(dir: &Path) -> String {
        Self::url_in(&dir.join("socket"), PG_DATABASE)
    }

    /// Whether the server has exited (it is then to be started again).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    fn url_in(socket_dir: &Path, database: &str) -> String {
        format!(
            "host={} user={PG_USER} dbname={database}",
            socket_dir.display()
        )
    }

    fn wait_ready(&mut self, log: &Path) -> Result<(), ServerError> {
        let until = Instant::now() + PG_START_TIMEOUT;
        let url = Self::url_in(&self.socket_dir, "postgres");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(fail(format!(
                    "postgres exited ({status}) while starting; see {}",
                    log.display()
                )));
            }
            let attempt = url
                .parse::<postgres::Config>()
                .map_err(|e| fail(e.to_string()))?
                .connect(postgres::NoTls);
            match attempt {
                // (Only once the server answering is this child: another one on the same
                // directory would answer too.)
                Ok(_) if running_postmaster(&self.cluster) == Some(self.child.id()) => {
                    return Ok(())
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) if Instant::now() >= until => {
                    return Err(fail(format!(
                        "postgres did not accept connections within {} s: {e}; see {}",
                        PG_START_TIMEOUT.as_secs(),
                        log.display()
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn create_database(&self) -> Result<(), ServerError> {
        let mut client = Self::url_in(&self.socket_dir, "postgres")
            .parse::<postgres::Config>()
            .map_err(|e| fail(e.to_string()))?
            .connect(postgres::NoTls)
            .map_err(|e| fail(format!("connecting: {e}")))?;
        let exists = client
            .query_opt(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&PG_DATABASE],
            )
            .map_err(|e| fail(format!("looking for database {PG_DATABASE}: {e}")))?
            .is_some();
        if !exists {
            client
                .batch_execute(&format!("CREATE DATABASE {PG_DATABASE}"))
                .map_err(|e| fail(format!("creating database {PG_DATABASE}: {e}")))?;
        }
        Ok(())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server (fast shutdown: open transactions are rolled back, everything
    /// committed is on disk) and waits for it.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), ServerError> {
        if self.child.try_wait().ok().flatten().is_some() {
            return Ok(());
        }
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32);
        if let Some(pid) = pid {
            // SIGINT: PostgreSQL's fast shutdown.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
        let until = Instant::now() + PG_STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
                Ok(None) => {
                    // SIGQUIT: immediate shutdown (crash recovery at the next start; what
                    // was committed is in the log).
                    if let Some(pid) = pid {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::QUIT);
                    }
                    return self
                        .child
                        .wait()
                        .map(drop)
                        .map_err(|e| fail(format!("waiting for postgres: {e}")));
                }
                Err(e) => return Err(fail(format!("waiting for postgres: {e}"))),
            }
        }
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Makes `d` (if missing) or takes it as it is, and gives it to `account` with mode
/// 0700, through a descriptor opened without following a link: a link in its place is
/// refused, never followed.
fn private_dir(d: &Path, account: Option<(u32, u32)>) -> Result<(), ServerError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::create_dir(d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(format!("{}: {e}", d.display()))),
    }
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::DIRECTORY;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(d)
        .map_err(|e| {
            fail(format!(
                "{} (a link, or not a directory?): {e}",
                d.display()
            ))
        })?;
    f.set_permissions(std::fs::Permissions::from_mode(0o700))
        .map_err(|e| fail(format!("chmod {}: {e}", d.display())))?;
    if let Some((uid, gid)) = account {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
            .map_err(|e| fail(format!("chown {}: {e}", d.display())))?;
    }
    Ok(())
}

/// The server's log, opened for appending without following a link, a regular file
/// with one name, 0600 and the account's.
fn private_log(path: &Path, account: Option<(u32, u32)>) -> Result<std::fs::File, ServerError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| fail(format!("{} (a link?): {e}", path.display())))?;
    let meta = f
        .metadata()
        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(fail(format!(
            "{} is not a regular file with one name: remove it and start again",
            path.display()
        )));
    }
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| fail(format!("chmod {}: {e}", path.display())))?;
    if let Some((uid, gid)) = account {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
            .map_err(|e| fail(format!("chown {}: {e}", path.display())))?;
    }
    Ok(f)
}

/// The pid in `cluster/postmaster.pid`, if that process is alive.
fn running_postmaster(cluster: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(cluster.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    let raw = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::test_kill_process(raw).ok().map(|()| pid)
}

/// Refuses, with the fix, a directory above `dir` that the account `uid` cannot pass
/// through (PostgreSQL, run as that account, could not reach its cluster).
fn check_passable(dir: &Path, uid: u32) -> Result<(), ServerError> {
    let dir = dir
        .canonicalize()
        .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    for above in dir.ancestors().skip(1) {
        let meta =
            std::fs::metadata(above).map_err(|e| fail(format!("{}: {e}", above.display())))?;
        let mode = meta.mode();
        let passable = if meta.uid() == uid {
            mode & 0o100 != 0
        } else {
            mode & 0o001 != 0
        };
        if !passable {
            return Err(fail(format!(
                "PostgreSQL runs as the postgres account, which cannot pass through {} (mode {:04o}): run `chmod o+x {}` (others may then pass through it, not list it)",
                above.display(),
                mode & 0o7777,
                above.display()
            )));
        }
    }
    Ok(())
}
