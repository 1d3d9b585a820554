//! The cluster file and the per-user home directory (`MAAT_HOME`).
//!
//! `client.toml` names the MDS and its public keys. A home holds an optional stored
//! identity (`identity.toml`: user name and key file, written for the administrator by
//! `maat up`) and the current session (`session.json`, mode 0600): ticket, session keys,
//! clock offset, OSD session keys and cached capabilities. Nothing in it is the passphrase.

use crate::ClientError;
use maat_crypto::Secret32;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Secrets in `session.json`: the same JSON array of 32 numbers as before, read into
/// zeroizing storage ([`Secret32`]: wiped on drop, never printed).
mod secret_json {
    use maat_crypto::Secret32;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use zeroize::Zeroize;

    pub(super) fn serialize<S: Serializer>(secret: &Secret32, s: S) -> Result<S::Ok, S::Error> {
        secret.expose().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Secret32, D::Error> {
        let mut bytes = <[u8; 32]>::deserialize(d)?;
        let secret = Secret32::from_bytes(bytes);
        bytes.zeroize();
        Ok(secret)
    }

    /// The same for an optional secret (absent or `null`: none).
    pub(super) mod option {
        use maat_crypto::Secret32;
        use serde::{Deserialize, Deserializer, Serializer};
        use zeroize::Zeroize;

        pub(in super::super) fn serialize<S: Serializer>(
            secret: &Option<Secret32>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match secret {
                Some(k) => s.serialize_some(k.expose()),
                None => s.serialize_none(),
            }
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Secret32>, D::Error> {
            Ok(Option::<[u8; 32]>::deserialize(d)?.map(|mut bytes| {
                let secret = Secret32::from_bytes(bytes);
                bytes.zeroize();
                secret
            }))
        }
    }
}

/// `client.toml`: how to reach and authenticate the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// MDS address.
    pub mds: String,
    /// MDS Ed25519 public key, hex.
    pub mds_verifying_key: String,
    /// MDS X25519 public key, hex.
    pub mds_sealing_key: String,
    /// MDS OPAQUE static public key, hex (optional: when present, a login checks that the
    /// MDS answering is the one users registered with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mds_opaque_key: Option<String>,
    /// Issue 42: the other instances of the MDS (over one shared database), `host:port`.
    /// A client asks one of `mds` and these (chosen at random when it starts) and moves
    /// to the next when it does not answer. Empty: one MDS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mds_others: Vec<String>,
}

/// Creates a home directory (and missing parents) readable by its owner only.
fn io(path: &Path, source: std::io::Error) -> ClientError {
    ClientError::Io {
        what: path.display().to_string(),
        source,
    }
}

fn create_private_dir(dir: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| io(dir, source))
}

/// Replaces `path` with `bytes`, readable by its owner only (mode 0600), through a
/// temporary file renamed over it, so a reader sees the old content or the new, never
/// half; `durable` syncs the data before the rename. The directory must exist.
pub fn write_private_file(path: &Path, bytes: &[u8], durable: bool) -> Result<(), ClientError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut temp_name = path.file_name().unwrap_or_default().to_os_string();
    temp_name.push(format!(".{}.{nanos}.partial", std::process::id()));
    let temp = path.with_file_name(temp_name);
    // A new file only (never through a file or link someone planted at that name).
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| io(&temp, e))?;
    let written = f
        .write_all(bytes)
        .and_then(|()| if durable { f.sync_all() } else { Ok(()) })
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(io(path, e));
    }
    Ok(())
}

/// Refuses a key or session file that group or others can read (as ssh does).
fn check_private(path: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) if m.mode() & 0o077 != 0 => Err(ClientError::Config(format!(
            "{} has mode {:04o}: group or others can read it (it holds keys); run `chmod 600 {}`",
            path.display(),
            m.mode() & 0o7777,
            path.display()
        ))),
        _ => Ok(()),
    }
}

fn key32(what: &str, hex_text: &str) -> Result<[u8; 32], ClientError> {
    hex::decode(hex_text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| ClientError::Config(format!("cluster file: {what} is not 32 bytes of hex")))
}

impl ClusterFile {
    /// Reads a cluster file.
    pub fn load(path: &Path) -> Result<Self, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClientError::Io {
            what: format!("cluster file {}", path.display()),
            source,
        })?;
        toml::from_str(&text)
            .map_err(|e| ClientError::Config(format!("cluster file {}: {e}", path.display())))
    }

    /// Every MDS instance's address: `mds` first, then `mds_others` (without repeats).
    pub fn mds_addresses(&self) -> Vec<String> {
        let mut all = vec![self.mds.clone()];
        for other in &self.mds_others {
            if !all.contains(other) {
                all.push(other.clone());
            }
        }
        all
    }

    /// The MDS's Ed25519 public key.
    pub fn mds_verifying_key(&self) -> Result<[u8; 32], ClientError> {
        key32("mds_verifying_key", &self.mds_verifying_key)
    }

    /// The MDS's sealing key.
    pub fn mds_sealing_key(&self) -> Result<[u8; 32], ClientError> {
        key32("mds_sealing_key", &self.mds_sealing_key)
    }

    /// The MDS's OPAQUE public key, if the file pins one.
    pub fn mds_opaque_key(&self) -> Result<Option<Vec<u8>>, ClientError> {
        match &self.mds_opaque_key {
            None => Ok(None),
            Some(text) => hex::decode(text.trim())
                .map(Some)
                .map_err(|_| ClientError::Config("cluster file: mds_opaque_key is not hex".into())),
        }
    }
}

/// A session with one OSD (SPEC M2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct OsdSession {
    /// OSD id.
    pub(crate) osd: u64,
    /// Session id.
    pub(crate) session_id: [u8; 16],
    /// K_CD.
    #[serde(with = "secret_json")]
    pub(crate) key: Secret32,
    /// Expiry (the ticket's).
    pub(crate) expiry: u64,
    /// OSD clock minus local clock, ms (from the MACed confirmation).
    #[serde(default)]
    pub(crate) clock_offset: i64,
}

pub(crate) use crate::machines::OpenedEntry;

/// The `session.json` layout this client writes.
pub const SESSION_FORMAT: u32 = 1;

/// Everything a logged-in client keeps between commands: its on-disk form
/// (`session.json`) and what the client holds in memory. Crate-private: its secrets never
/// leave the client except through the test hooks, as [`Secret32`]s.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SessionState {
    /// Layout version ([`SESSION_FORMAT`]; files from before versions have none: 0, the
    /// same layout as 1).
    #[serde(default)]
    pub version: u32,
    /// User name.
    pub user: String,
    /// User id.
    pub uid: u64,
    /// MDS-signed ticket.
    pub ticket: Vec<u8>,
    /// Client–MDS session id.
    pub session_id: [u8; 16],
    /// Client–MDS session key.
    #[serde(with = "secret_json")]
    pub key: Secret32,
    /// Ed25519 seed named in the ticket.
    #[serde(with = "secret_json")]
    pub signing_seed: Secret32,
    /// X25519 secret named in the ticket.
    #[serde(with = "secret_json")]
    pub sealing_secret: Secret32,
    /// The X25519 secret lockboxes are sealed to for this user (SPEC H5), derived from
    /// the OPAQUE export key at login; sessions from before encryption have none.
    #[serde(default, with = "secret_json::option")]
    pub owner_secret: Option<Secret32>,
    /// Ticket expiry.
    pub expiry: u64,
    /// MDS clock minus local clock, ms (SPEC T7).
    pub clock_offset: i64,
    /// OSD sessions.
    pub osd_sessions: Vec<OsdSession>,
    /// Cached opens.
    pub opened: Vec<OpenedEntry>,
    /// Client counters.
    pub stats: crate::ClientStats,
}

/// A home directory.
#[derive(Debug, Clone)]
pub struct Home {
    dir: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct Identity {
    user: String,
    key_file: PathBuf,
}

impl Home {
    /// The home at `dir` (created on first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records a stored identity (used for the administrator).
    pub fn write_identity(&self, user: &str, key_file: &Path) -> Result<(), ClientError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        create_private_dir(&self.dir)?;
        let text = toml::to_string(&Identity {
            user: user.into(),
            key_file: key_file.to_path_buf(),
        })
        .map_err(|e| ClientError::Internal(format!("encoding the identity: {e}")))?;
        let path = self.dir.join("identity.toml");
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| io(&path, source))
    }

    /// The stored identity, if any: user name and key.
    pub fn identity(&self) -> Result<Option<(String, Secret32)>, ClientError> {
        let path = self.dir.join("identity.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let id: Identity = toml::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
        let key_file = if id.key_file.is_relative() {
            self.dir.join(&id.key_file)
        } else {
            id.key_file
        };
        check_private(&key_file)?;
        let key_text = zeroize::Zeroizing::new(
            std::fs::read_to_string(&key_file).map_err(|source| io(&key_file, source))?,
        );
        let mut key = key32("identity key", &key_text)?;
        let secret = Secret32::from_bytes(key);
        zeroize::Zeroize::zeroize(&mut key);
        Ok(Some((id.user, secret)))
    }

    pub(crate) fn load_session(&self) -> Result<Option<SessionState>, ClientError> {
        let path = self.dir.join("session.json");
        check_private(&path)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => zeroize::Zeroizing::new(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path, e)),
        };
        // Only the version first, so that a newer layout is named as such.
        #[derive(Deserialize)]
        struct Version {
            #[serde(default)]
            version: u32,
        }
        let version = serde_json::from_slice::<Version>(&bytes)
            .map(|v| v.version)
            .unwrap_or(0);
        if version > SESSION_FORMAT {
            return Err(ClientError::Config(format!(
                "{} was written by a newer maat (session format {version}, this one knows {SESSION_FORMAT}): upgrade, or log in again",
                path.display()
            )));
        }
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ClientError::Config(format!(
                "{} is damaged ({e}): run `maat login` again",
                path.display()
            ))
        })
    }

    pub(crate) fn save_session(&self, s: &SessionState) -> Result<(), ClientError> {
        create_private_dir(&self.dir)?;
        let bytes = zeroize::Zeroizing::new(
            serde_json::to_vec(s)
                .map_err(|e| ClientError::Internal(format!("encoding the session: {e}")))?,
        );
        write_private_file(&self.dir.join("session.json"), &bytes, false)
    }

    pub(crate) fn remove_session(&self) -> Result<(), ClientError> {
        match std::fs::remove_file(self.dir.join("session.json")) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&self.dir.join("session.json"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn write_private(path: &Path, bytes: &[u8]) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    /// A session as a client from before session versions wrote it (no `version`, and
    /// file attributes without partition fields).
    const FORMAT0: &str = r#"{"user":"alice","uid":2,"ticket":[1,2],"session_id":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1],"key":[7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7],"signing_seed":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"sealing_secret":[2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2],"expiry":99,"clock_offset":-3,"osd_sessions":[{"osd":1,"session_id":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,2],"key":[3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3],"expiry":99}],"opened":[{"path":"/f","stat":{"id":4,"is_dir":false,"mode":420,"owner":"alice","group":"alice","size":20,"mtime":5},"capability":[9],"expiry":9,"lifetime":9}],"stats":{"capability_cache_hits":0,"capability_cache_misses":1,"requests":8}}"#;

    #[test]
    fn old_sessions_load_and_newer_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let path = dir.path().join("session.json");
        write_private(&path, FORMAT0.as_bytes());
        let s = home.load_session().unwrap().unwrap();
        assert_eq!((s.version, s.uid, s.clock_offset), (0, 2, -3));
        assert_eq!(
            s.opened[0].stat.protection,
            maat_proto::protection::Protection::AllData
        );
        // Saved again, it carries the current version.
        home.save_session(&SessionState {
            version: SESSION_FORMAT,
            ..s
        })
        .unwrap();
        assert_eq!(
            home.load_session().unwrap().unwrap().version,
            SESSION_FORMAT
        );
        let newer = FORMAT0.replacen('{', "{\"version\":99,", 1);
        write_private(&path, newer.as_bytes());
        let e = home.load_session().unwrap_err().to_string();
        assert!(e.contains("newer maat"), "{e}");
        write_private(&path, b"{not json");
        let e = home.load_session().unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
    }
}
