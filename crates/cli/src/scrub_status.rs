//! Issue 41: what the scrubber of `maat up` last did, kept beside the cluster file
//! (`DATA/scrub-status.json`, mode 0600, replaced whole), so that `maat health` can say
//! when copies were last checked, what was put back and what is still wrong.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file's name, in the cluster's data directory (beside `client.toml`).
pub const FILE: &str = "scrub-status.json";

/// The layout written ([`ScrubStatus::version`]); later versions add fields, which an
/// older reader ignores.
pub const VERSION: u32 = 1;

/// The scrubber's last run, and its last deep one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ScrubStatus {
    /// Layout version ([`VERSION`]).
    pub version: u32,
    /// When the last run ended (Unix milliseconds).
    pub finished_ms: u64,
    /// `light` or `deep`.
    pub depth: String,
    /// Why it ran.
    pub reasons: Vec<String>,
    /// How long it took.
    pub seconds: f64,
    /// Files and objects it went through.
    pub files: u64,
    pub objects: u64,
    /// Copies it found missing or bad, and put back.
    pub copies_missing: u64,
    pub copies_bad: u64,
    pub copies_repaired: u64,
    /// Findings it left unrepaired (`maat admin scrub` names them).
    pub unrepaired: u64,
    /// Why the run failed, when it did (the counts above are then zero).
    pub error: Option<String>,
    /// When the last deep run ended (Unix milliseconds), if any.
    pub last_deep_ms: Option<u64>,
    /// Copies put back by every run recorded in this file.
    pub copies_repaired_total: u64,
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Writes `status` to `data`'s status file.
pub fn save(data: &Path, status: &ScrubStatus) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(status)?;
    let path = data.join(FILE);
    maat_client::write_private_file(&path, &bytes, true)
        .with_context(|| format!("writing {}", path.display()))
}

/// The last status written beside the cluster file `cluster`, if there is one.
pub fn load_beside(cluster: &Path) -> Result<Option<ScrubStatus>> {
    let path = cluster.with_file_name(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let status = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a scrub status", path.display()))?;
    Ok(Some(status))
}

/// "3 min ago" for a time `ms` (Unix milliseconds) seen at `now`.
pub fn ago(ms: u64, now: u64) -> String {
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_back_and_a_newer_layout_still_loads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cluster = dir.path().join("client.toml");
        assert!(load_beside(&cluster).ok().flatten().is_none());
        let status = ScrubStatus {
            version: VERSION,
            finished_ms: 5,
            depth: "light".into(),
            copies_repaired: 3,
            ..ScrubStatus::default()
        };
        save(dir.path(), &status).unwrap_or_else(|e| panic!("{e}"));
        let back = load_beside(&cluster).ok().flatten();
        assert_eq!(
            back.map(|s| (s.depth, s.copies_repaired)),
            Some(("light".into(), 3))
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o600);
        // A later layout with a field this one does not know.
        std::fs::write(
            dir.path().join(FILE),
            br#"{"version":2,"depth":"deep","unrepaired":1,"zone":"a"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let back = load_beside(&cluster).ok().flatten();
        assert_eq!(back.map(|s| (s.version, s.unrepaired)), Some((2, 1)));
        assert_eq!(ago(0, 90_000), "90 s ago");
        assert_eq!(ago(0, 600_000), "10 min ago");
    }
}
