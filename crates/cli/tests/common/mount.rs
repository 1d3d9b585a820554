//! A `maat mount` for tests, and the shell helpers the FUSE tests share. Skipped, with a
//! message in the test output, where /dev/fuse or fusermount3 is missing or mounting is
//! not permitted (MAAT_REQUIRE_FUSE makes that a failure).

use super::{Cluster, MAAT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why FUSE cannot be tested here, if it cannot.
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    let helper = Command::new("fusermount3").arg("--version").output();
    if !helper.is_ok_and(|o| o.status.success()) {
        return Some("fusermount3 is missing (Debian: apt install fuse3)".into());
    }
    None
}

pub fn skip(test: &str, why: &str) {
    if std::env::var_os("MAAT_REQUIRE_FUSE").is_some() {
        panic!("MAAT_REQUIRE_FUSE is set but {why}");
    }
    // Past the harness's capture, so that the skip shows in CI output.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\nSKIPPED {test}: {why}");
}

pub fn mounted(point: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let point = point.to_string_lossy().to_string();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(point.as_str()))
}

/// A `maat mount` child, unmounted when dropped.
pub struct Mount {
    child: Child,
    pub point: PathBuf,
}

impl Mount {
    /// Mounts Maat's `/` as the user whose home is `home`; `None` when mounting is not
    /// permitted here (the reason is printed).
    pub fn new(cluster: &Cluster, home: &Path, test: &str) -> Option<Mount> {
        Self::with(cluster, home, test, &[])
    }

    /// As [`Mount::new`], with more options of `maat mount` (before the paths).
    pub fn with(cluster: &Cluster, home: &Path, test: &str, options: &[&str]) -> Option<Mount> {
        if let Some(why) = unavailable() {
            skip(test, &why);
            return None;
        }
        let point = cluster
            .dir
            .path()
            .join(format!("mnt-{}", home.file_name()?.to_string_lossy()));
        std::fs::create_dir_all(&point).unwrap();
        let mut child = Command::new(MAAT)
            .arg("mount")
            .args(options)
            .arg("/")
            .arg(&point)
            .env("MAAT_CLUSTER", cluster.cluster_file())
            .env("MAAT_HOME", home)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !mounted(&point) {
            if let Ok(Some(_)) = child.try_wait() {
                let out = child.wait_with_output().unwrap();
                let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
                skip(test, &format!("maat mount failed: {why}"));
                return None;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "mount did not appear"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Mount { child, point })
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.point.join(rel)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if mounted(&self.point) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.point)
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a shell command line, asserting success; returns standard output.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a Python script with one argument, asserting success; returns standard output.
pub fn python(script: &str, arg: &Path) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a shell command line that must fail; returns standard error.
pub fn sh_fails(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(!out.status.success(), "`{cmd}` unexpectedly succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
