//! A real local cluster for integration tests: `maat up` on loopback with free ports in a
//! temporary directory; stopped with SIGTERM when dropped.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod mount;

use maat_client::{Client, ClusterFile, Credential};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const MAAT: &str = env!("CARGO_BIN_EXE_maat");

/// The refusal code of a result that must be a refusal.
/// `len` bytes of a deterministic, incompressible-looking stream (xorshift from `seed`).
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A read of the first `length` bytes of stripe `stripe` of file `file` under
/// `capability`, as one OSD request (for `Client::osd_call`, to ask one copy alone).
pub fn read_request(
    capability: &[u8],
    file: u64,
    stripe: u32,
    length: u32,
) -> maat_proto::msg::OsdRequest {
    use maat_proto::msg::{ObjectId, OsdCommand, OsdRequest, DATA_PARTITION};
    OsdRequest {
        capability: capability.to_vec(),
        command: OsdCommand::Read {
            object: ObjectId {
                partition: DATA_PARTITION,
                file,
                stripe,
            },
            offset: 0,
            length,
        },
    }
}

pub fn code<T>(r: Result<T, maat_client::ClientError>) -> maat_proto::msg::ErrorCode {
    match r {
        Err(maat_client::ClientError::Refused(e)) => e.code,
        Err(e) => panic!("expected a refusal, got {e:?}"),
        Ok(_) => panic!("expected a refusal, got success"),
    }
}

/// What the test's requests cost of counter `name`, summed over the daemons whose name
/// starts with `prefix`: the counter less its `NAME_background` part (each KDS's
/// once-a-second revocation catch-up signs and checks signatures at the MDS and KDS).
pub fn counter(c: &Client, prefix: &str, name: &str) -> u64 {
    maat_proto::msg::DaemonStats::request_share(&c.daemon_stats().unwrap(), prefix, name)
}

/// A cluster for one test: [`maat_local::LocalCluster`] on `dir/data`, beside the homes
/// and files the test makes in `dir`.
pub struct Cluster {
    pub local: maat_local::LocalCluster,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// A new cluster of `osds` OSDs on free loopback ports, without metrics endpoints
    /// (fewer ports taken while tests run side by side; see `start_with_metrics`), whose
    /// new files are not encrypted unless asked (`put_with`): the suites of other
    /// features check their own properties on plaintext files; `start_encrypting` keeps
    /// `maat up`'s default.
    pub fn start(osds: u32, extra: &[&str]) -> Cluster {
        let mut args = vec!["--no-metrics", "--no-encrypt"];
        args.extend_from_slice(extra);
        Self::start_with_metrics(osds, &args)
    }

    /// A new cluster that encrypts new files by default (as `maat up` does).
    pub fn start_encrypting(osds: u32, extra: &[&str]) -> Cluster {
        let mut args = vec!["--no-metrics"];
        args.extend_from_slice(extra);
        Self::start_with_metrics(osds, &args)
    }

    /// A new cluster whose daemons serve Prometheus metrics (`maat up`'s default), whose
    /// users start with umask 000 unless `extra` says otherwise: the suites of other
    /// features share files by the exact modes they ask for, as before umasks (homes
    /// 0755); `start_as_shipped` keeps every default, 077 included.
    pub fn start_with_metrics(osds: u32, extra: &[&str]) -> Cluster {
        let mut args = vec![];
        if !extra.contains(&"--umask") {
            args.extend(["--umask", "000"]);
        }
        // No scrubber (its reads and repairs would move the counters other suites
        // check) unless the caller sets its period.
        if !extra.contains(&"--scrub-every") {
            args.push("--no-scrubber");
        }
        args.extend_from_slice(extra);
        Self::start_as_shipped(osds, &args)
    }

    /// A new cluster with `maat up`'s defaults but for `extra` (on free loopback ports).
    pub fn start_as_shipped(osds: u32, extra: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("maat-it-")
            .tempdir()
            .unwrap();
        let osds = osds.to_string();
        let mut args = vec!["--osds", &osds];
        if !extra.contains(&"--listen") {
            args.extend(["--listen", "127.0.0.1:0"]);
        }
        args.extend_from_slice(extra);
        let local =
            maat_local::LocalCluster::start(Path::new(MAAT), Some(&dir.path().join("data")), &args)
                .unwrap();
        Cluster { local, dir }
    }

    /// A new cluster with its metadata in a PostgreSQL server of its own (`--meta
    /// postgres` and `extra`), or `None`, said past the harness's capture so that CI
    /// output shows it, where no PostgreSQL server binaries are installed (`test`
    /// names the test that skips).
    pub fn start_postgres(test: &str, extra: &[&str]) -> Option<Cluster> {
        if let Some(why) = maat_server::pg_server::cannot_start_here() {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "\nSKIPPED {test}: {why}");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("maat-it-pg-")
            .tempdir()
            .unwrap();
        // Run as root, the database runs as the postgres account, which must pass
        // through.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--no-metrics",
            "--no-scrubber",
            "--meta",
            "postgres",
        ];
        args.extend_from_slice(extra);
        let local =
            maat_local::LocalCluster::start(Path::new(MAAT), Some(&dir.path().join("data")), &args)
                .unwrap();
        Some(Cluster { local, dir })
    }

    /// Runs `maat up` on an existing cluster directory `dir/data`.
    pub fn adopt(dir: tempfile::TempDir) -> Cluster {
        let local =
            maat_local::LocalCluster::adopt(Path::new(MAAT), &dir.path().join("data")).unwrap();
        Cluster { local, dir }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.data().join("client.toml")
    }

    pub fn admin_home(&self) -> PathBuf {
        self.data().join("admin")
    }

    /// The MDS address the cluster file names.
    pub fn mds_address(&self) -> String {
        toml::from_str::<toml::Table>(&std::fs::read_to_string(self.cluster_file()).unwrap())
            .unwrap()["mds"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A fresh home directory for a user.
    pub fn home(&self, name: &str) -> PathBuf {
        let h = self.dir.path().join(format!("home-{name}"));
        std::fs::create_dir_all(&h).unwrap();
        h
    }

    /// Runs `maat` with MAAT_HOME=home, optional standard input.
    pub fn maat(&self, home: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut child = Command::new(MAAT)
            .args(args)
            .env("MAAT_CLUSTER", self.cluster_file())
            .env("MAAT_HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(data) = stdin {
            input.write_all(data).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    /// Runs `maat` and asserts success.
    pub fn ok(&self, home: &Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
        let out = self.maat(home, args, stdin);
        assert!(
            out.status.success(),
            "maat {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Runs `maat`, asserts failure, returns standard error.
    pub fn fails(&self, home: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.maat(home, args, stdin);
        assert!(
            !out.status.success(),
            "maat {args:?} unexpectedly succeeded"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// An in-process client logged in as the administrator.
    pub fn admin_client(&self) -> Client {
        self.local.admin().unwrap()
    }

    /// An in-process client logged in with a passphrase.
    pub fn user_client(&self, name: &str, passphrase: &str) -> Client {
        let c = Client::new(ClusterFile::load(&self.cluster_file()).unwrap(), None).unwrap();
        c.login(name, Credential::Passphrase(passphrase.as_bytes()))
            .unwrap();
        c
    }

    /// Adds a user through the CLI as the administrator.
    pub fn add_user(&self, name: &str, passphrase: &str, groups: Option<&str>) {
        let mut args = vec!["admin", "user", "add", name, "--passphrase-stdin"];
        if let Some(g) = groups {
            args.push("--groups");
            args.push(g);
        }
        self.ok(
            &self.admin_home(),
            &args,
            Some(format!("{passphrase}\n").as_bytes()),
        );
    }

    /// Stops `maat up` with SIGTERM (asserting a clean exit) and starts it again on the
    /// same data directory.
    pub fn restart(&mut self) {
        self.restart_with(|_| {});
    }

    /// Like [`Cluster::restart`], running `while_stopped` on the data directory between.
    pub fn restart_with(&mut self, while_stopped: impl FnOnce(&Path)) {
        self.stop();
        while_stopped(&self.data());
        self.start_again();
    }

    /// Stops `maat up` with SIGTERM and asserts a clean exit.
    pub fn stop(&mut self) {
        let status = self.local.stop().unwrap();
        assert!(status.success(), "maat up exits 0 on SIGTERM, got {status}");
    }

    /// Starts `maat up` again on the data directory after [`Cluster::stop`].
    pub fn start_again(&mut self) {
        self.local.start_again().unwrap();
    }

    pub fn pid(&self, daemon: &str) -> u32 {
        self.local.pid(daemon).unwrap()
    }
}

/// The object file of stripe `stripe` of file `id`, on whichever OSD under `data` holds it
/// (the first [`object_files`] finds when several hold copies).
pub fn object_file(data: &Path, id: u64, stripe: u32) -> PathBuf {
    object_files(data, id, stripe)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no object {id:016x}.{stripe:08x}"))
}

/// Every copy of stripe `stripe` of file `id` under `data`, one file per OSD holding one,
/// in the order a depth-first walk finds them.
pub fn object_files(data: &Path, id: u64, stripe: u32) -> Vec<PathBuf> {
    let name = format!("{id:016x}.{stripe:08x}");
    let mut found = Vec::new();
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy() == name
                && p.to_string_lossy().contains("/osd-")
            {
                found.push(p);
            }
        }
    }
    found
}

/// Sends `sig` to `pid` (`kill`), asserting it was delivered.
pub fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// A process held with SIGSTOP (the supervisor, so that a daemon killed stays down),
/// released with SIGCONT when dropped, however the test ends.
pub struct Held(u32);

impl Held {
    pub fn stop(pid: u32) -> Held {
        signal("-STOP", pid);
        Held(pid)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
