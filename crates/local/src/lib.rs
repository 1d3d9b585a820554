//! A whole Maat cluster on this host as `maat up` runs it (MDS, OSDs, KDS, each a process
//! under one supervisor), started as a child process and stopped with SIGTERM: the one
//! launcher that `maat bench` and the integration tests share (issue 39).
//!
//! The launcher only starts, waits and stops; what runs is the shipping `maat` binary,
//! named by the caller (`std::env::current_exe()` in `maat bench`,
//! `env!("CARGO_BIN_EXE_maat")` in tests).

use maat_client::{Client, ClusterFile, Credential, Home};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a stopped cluster may take to exit after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// Starting `maat up`, or reading from it, failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// `maat up` ended before it said it was ready.
    #[error("maat up ended before the cluster was ready")]
    NotReady,
    /// The data directory holds a cluster already, and a fresh one was asked for.
    #[error("{0} already holds a cluster; a fresh directory is needed")]
    NotFresh(PathBuf),
    /// The cluster's files (client.toml, the administrator's identity) are not usable.
    #[error("{0}")]
    Files(String),
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] maat_client::ClientError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
    let what = what.into();
    move |source| LocalError::Io { what, source }
}

/// The options of `maat up` that apply to one run, not to the cluster made at its first
/// start (with the number of values each takes): given again when it starts again.
const EVERY_RUN_OPTIONS: &[(&str, usize)] = &[("--no-scrubber", 0), ("--scrub-every", 1)];

/// The options among `args` that [`EVERY_RUN_OPTIONS`] names, with their values.
fn every_run(args: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let takes = EVERY_RUN_OPTIONS
            .iter()
            .find(|(name, _)| name == arg)
            .map(|(_, n)| *n);
        if let Some(n) = takes {
            kept.extend(args.iter().skip(i).take(n + 1).map(|a| a.to_string()));
            i += n;
        }
        i += 1;
    }
    kept
}

/// A cluster run by `maat up` (the child process); stopped when dropped.
pub struct LocalCluster {
    exe: PathBuf,
    child: Child,
    data: PathBuf,
    /// The options given again at every start ([`EVERY_RUN_OPTIONS`]).
    again: Vec<String>,
    /// The temporary directory holding `data`, when the launcher made it.
    _temp: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Starts `exe up ARGS --data DATA` on a fresh data directory (`None`: a new temporary
    /// one, removed when the cluster is dropped) and waits until it says it is ready.
    pub fn start(exe: &Path, data: Option<&Path>, args: &[&str]) -> Result<Self, LocalError> {
        let (data, temp) = match data {
            Some(d) => {
                if d.join("mds/mds.toml").exists() {
                    return Err(LocalError::NotFresh(d.to_path_buf()));
                }
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("maat-local-")
                    .tempdir()
                    .map_err(io("creating a temporary data directory"))?;
                if args.windows(2).any(|a| a == ["--meta", "postgres"]) {
                    // Run by root, the cluster's PostgreSQL runs as the postgres account,
                    // which must pass through (not list) the directory above DATA.
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o711))
                        .map_err(io("letting the postgres account pass through"))?;
                }
                (t.path().join("data"), Some(t))
            }
        };
        let child = spawn_up(exe, args, &data)?;
        Ok(Self {
            exe: exe.to_path_buf(),
            child,
            data,
            again: every_run(args),
            _temp: temp,
        })
    }

    /// Runs `exe up` on the existing cluster in `data` (as after a reboot).
    pub fn adopt(exe: &Path, data: &Path) -> Result<Self, LocalError> {
        let child = spawn_up(exe, &[], data)?;
        Ok(Self {
            exe: exe.to_path_buf(),
            child,
            data: data.to_path_buf(),
            again: Vec::new(),
            _temp: None,
        })
    }

    /// The cluster's data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Where clients find the cluster (`client.toml`).
    pub fn cluster_file_path(&self) -> PathBuf {
        self.data.join("client.toml")
    }

    /// The cluster file clients connect with.
    pub fn cluster_file(&self) -> Result<ClusterFile, LocalError> {
        let path = self.cluster_file_path();
        ClusterFile::load(&path).map_err(|e| LocalError::Files(format!("{}: {e}", path.display())))
    }

    /// The administrator's home (its identity key), as `maat up` wrote it.
    pub fn admin_home(&self) -> PathBuf {
        self.data.join("admin")
    }

    /// A client logged in as the administrator.
    pub fn admin(&self) -> Result<Client, LocalError> {
        let (name, key) = Home::new(self.admin_home())
            .identity()
            .map_err(|e| LocalError::Files(format!("the administrator's identity: {e}")))?
            .ok_or_else(|| LocalError::Files("no administrator identity".into()))?;
        let c = Client::new(self.cluster_file()?, None)?;
        c.login(&name, Credential::Key(key))?;
        Ok(c)
    }

    /// The supervisor's process id.
    pub fn supervisor_pid(&self) -> u32 {
        self.child.id()
    }

    /// The process id of `daemon` (`mds`, `osd-1`, `kds-1`, ...) from its pid file.
    pub fn pid(&self, daemon: &str) -> Result<u32, LocalError> {
        let path = self.data.join(format!("{daemon}.pid"));
        std::fs::read_to_string(&path)
            .map_err(io(format!("reading {}", path.display())))?
            .trim()
            .parse()
            .map_err(|e| LocalError::Files(format!("{}: {e}", path.display())))
    }

    /// Stops the cluster with SIGTERM (the supervisor stops its daemons first) and
    /// returns how the supervisor exited; killed if it takes longer than [`STOP_GRACE`].
    pub fn stop(&mut self) -> Result<ExitStatus, LocalError> {
        if let Some(status) = self.child.try_wait().map_err(io("checking maat up"))? {
            return Ok(status);
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            // Gone already is fine: the wait below collects it.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let until = Instant::now() + STOP_GRACE;
        loop {
            if let Some(status) = self.child.try_wait().map_err(io("waiting for maat up"))? {
                return Ok(status);
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                return self.child.wait().map_err(io("waiting for maat up"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `maat up` again on the same data directory after [`LocalCluster::stop`].
    pub fn start_again(&mut self) -> Result<(), LocalError> {
        let again: Vec<&str> = self.again.iter().map(String::as_str).collect();
        self.child = spawn_up(&self.exe, &again, &self.data)?;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Starts `exe up ARGS --data DATA` and waits for its `ready` line; the rest of its
/// standard output is read (and dropped) by a thread, so that it never blocks on a full
/// pipe.
fn spawn_up(exe: &Path, args: &[&str], data: &Path) -> Result<Child, LocalError> {
    let mut child = Command::new(exe)
        .arg("up")
        .args(args)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io(format!("starting {} up", exe.display())))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(LocalError::NotReady);
    };
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("ready") => break,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(io("reading maat up's output")(e)),
            None => {
                let _ = child.wait();
                return Err(LocalError::NotReady);
            }
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Ok(child)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_options_of_every_run_are_kept_with_their_values() {
        let args = [
            "--osds",
            "4",
            "--no-scrubber",
            "--listen",
            "127.0.0.1:0",
            "--scrub-every",
            "60",
        ];
        assert_eq!(
            super::every_run(&args),
            ["--no-scrubber", "--scrub-every", "60"]
        );
        assert!(super::every_run(&["--osds", "2"]).is_empty());
    }
}
