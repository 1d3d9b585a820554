//! Daemon configuration files (TOML). Every address and path is configurable; relative
//! paths are relative to the directory the daemon runs in.

use crate::ServerError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `maat mds --config FILE`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdsFileConfig {
    /// Address to listen on, `HOST:PORT`.
    pub listen: String,
    /// Directory for the metadata database.
    pub data_dir: PathBuf,
    /// Directory of the MDS's own secrets (signing, sealing, decoy and OPAQUE keys), apart
    /// from the database so that a copy of it does not carry them. Default `DATA_DIR/keys`.
    #[serde(default)]
    pub key_dir: Option<PathBuf>,
    /// The administrator's key (created on first start if missing).
    pub admin_key_file: PathBuf,
    /// The key OSDs register with (created on first start if missing; copy it to OSDs).
    pub join_key_file: PathBuf,
    /// Where to write the MDS public keys for client files (optional).
    #[serde(default)]
    pub public_keys_file: Option<PathBuf>,
    /// Login session lifetime.
    #[serde(default = "default_ticket_secs")]
    pub ticket_lifetime_secs: u64,
    /// Capability lifetime (revocation is expiry, so keep it short).
    #[serde(default = "default_capability_secs")]
    pub capability_lifetime_secs: u64,
    /// Accept NOSEC requests. Benchmarks only: anyone can then act as anyone.
    #[serde(default)]
    pub danger_allow_insecure: bool,
    /// Protection method (SPEC T1) of the `default` partition when the MDS creates it:
    /// CAPKEY, CMDRSP, ALLDATA (the default) or CONFIDENTIAL; NOSEC needs
    /// `danger_allow_insecure`. Change it later with `maat admin partition set-security`.
    #[serde(default)]
    pub default_security: Option<String>,
    /// Grouping strategies (SPEC M6): `none`, `all`, or a comma-separated list of
    /// `unix`, `directory`, `batch`, `onthefly`. Default `unix,onthefly` (neither adds
    /// latency to an open). `maat admin grouping set` changes it until the next start.
    #[serde(default)]
    pub grouping: Option<String>,
    /// Temporal batching: opens of one file, or by one user, within `batch_detect_ms`
    /// that start a batch (default 4, paper 000).
    #[serde(default)]
    pub batch_threshold: Option<u32>,
    /// Temporal batching's detection window in ms (default 20).
    #[serde(default)]
    pub batch_detect_ms: Option<u64>,
    /// How long a batch gathers opens before its capability is signed, in ms (default 5).
    #[serde(default)]
    pub batch_gather_ms: Option<u64>,
    /// How long a file stays batched after a detection, in ms (default 1000, paper 000).
    #[serde(default)]
    pub batch_hot_ms: Option<u64>,
    /// Prediction grouping: a successor is predicted when it is at least `predict_j` of
    /// the last `predict_k` seen (defaults 4 and 6, paper 000).
    #[serde(default)]
    pub predict_j: Option<u32>,
    /// See `predict_j`.
    #[serde(default)]
    pub predict_k: Option<u32>,
    /// Where to serve Prometheus metrics (`HOST:PORT`, port 0 for any free one); none:
    /// no metrics endpoint.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Addresses of the key distribution servers clients use (SPEC H4).
    #[serde(default)]
    pub kds: Vec<String>,
    /// The KDS public keys (`kds_sealing_key`, `kds_verifying_key`, hex), as `maat kds`
    /// writes them; none: no encryption.
    #[serde(default)]
    pub kds_public_keys_file: Option<PathBuf>,
    /// Clients encrypt new files unless told not to (SPEC H3; needs the KDS keys).
    #[serde(default = "default_true")]
    pub encrypt_new_files: bool,
    /// Whether the namespace changes (create, size, mkdir, rename, unlink) of concurrent
    /// requests are written together, one fsync for many (group commit; on by default).
    /// Off, each is written and fsynced alone under the MDS's write lock.
    #[serde(default = "default_true")]
    pub group_commit: bool,
    /// The metadata database: unset, a redb file under `data_dir`; a `postgresql://` URL
    /// (or libpq `key=value` pairs), that PostgreSQL database (issue 42). A URL with a
    /// password is refused unless this file is readable by its owner only.
    #[serde(default)]
    pub meta_url: Option<String>,
    /// The umask new users start with, in octal (`"077"` when unset: what they create is
    /// theirs alone until they run `maat umask`; issue 40).
    #[serde(default)]
    pub default_umask: Option<String>,
    /// Copies of each object the `default` partition keeps, set when the MDS makes it (a
    /// new cluster; 3 when unset, fewer while there are fewer OSDs; issue 41). Other
    /// partitions choose theirs: `maat admin partition create NAME --replicas N`.
    #[serde(default)]
    pub default_replicas: Option<u8>,
}

/// `maat kds --config FILE`: a key distribution server (SPEC H4). It keeps no state: the
/// same config and key file on any number of machines make interchangeable instances.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KdsFileConfig {
    /// Address to listen on.
    pub listen: String,
    /// The KDS secret (32 bytes of hex, mode 0600), shared by every instance; created if
    /// missing.
    pub key_file: PathBuf,
    /// Where to write the KDS public keys for the MDS config (optional).
    #[serde(default)]
    pub public_keys_file: Option<PathBuf>,
    /// The MDS public keys file (`mds_verifying_key = "hex"`, as the MDS writes it).
    pub mds_public_keys_file: PathBuf,
    /// Where to serve Prometheus metrics (`HOST:PORT`); none: no metrics endpoint.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Where this instance writes `metrics.addr` (it keeps nothing else).
    pub run_dir: PathBuf,
    /// The MDS address, to learn the revocations in force (SPEC M9) before handing out
    /// keys and every second after. Configs from before it load; such a KDS says at start
    /// that it refuses nothing revoked before it expires.
    #[serde(default)]
    pub mds: Option<String>,
    /// Other MDS instances over the same database (issue 42), asked when `mds` does not
    /// answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mds_others: Vec<String>,
}

impl KdsFileConfig {
    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        load(path)
    }
}

/// `maat osd --config FILE`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdFileConfig {
    /// This OSD's id (unique in the cluster, at least 1).
    pub id: u64,
    /// Address to listen on.
    pub listen: String,
    /// Address clients should use (defaults to the bound listen address).
    #[serde(default)]
    pub advertise: Option<String>,
    /// Directory for objects and the OSD's key.
    pub data_dir: PathBuf,
    /// The MDS address to register with.
    pub mds: String,
    /// Other MDS instances over the same database (issue 42), asked when `mds` does not
    /// answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mds_others: Vec<String>,
    /// The cluster join key (same file content as the MDS's).
    pub join_key_file: PathBuf,
    /// Placement weight (relative capacity).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Accept NOSEC requests. Benchmarks only.
    #[serde(default)]
    pub danger_allow_insecure: bool,
    /// Where to serve Prometheus metrics (`HOST:PORT`, port 0 for any free one); none:
    /// no metrics endpoint.
    #[serde(default)]
    pub metrics: Option<String>,
}

fn default_ticket_secs() -> u64 {
    maat_mds::TICKET_LIFETIME_MILLIS_DEFAULT / 1000
}
fn default_capability_secs() -> u64 {
    maat_proto::limits::CAPABILITY_LIFETIME_MILLIS_DEFAULT / 1000
}
fn default_weight() -> u32 {
    1
}
fn default_true() -> bool {
    true
}

/// Reads one hex key named `name` from a TOML public-keys file.
pub fn public_key_from_file(path: &Path, name: &str) -> Result<[u8; 32], ServerError> {
    let bad = |reason: String| ServerError::Config {
        path: path.display().to_string(),
        reason,
    };
    let table: toml::Table = load(path)?;
    let text = table
        .get(name)
        .and_then(|v| v.as_str())
        .ok_or_else(|| bad(format!("no {name}")))?;
    let bytes = hex::decode(text).map_err(|e| bad(format!("{name}: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| bad(format!("{name}: expected 32 bytes of hex")))
}

fn load<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ServerError> {
    let text = std::fs::read_to_string(path).map_err(|e| ServerError::Config {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| ServerError::Config {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

impl MdsFileConfig {
    /// Reads a config file. One whose `meta_url` carries a password must be readable by
    /// its owner only.
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        let config: Self = load(path)?;
        if config.meta_url_has_password()? {
            crate::private::check_private(path)?;
        }
        Ok(config)
    }

    /// Whether `meta_url` names a password (refused as unparseable if it does not parse).
    pub fn meta_url_has_password(&self) -> Result<bool, ServerError> {
        let Some(url) = &self.meta_url else {
            return Ok(false);
        };
        let parsed: postgres::Config = url.parse().map_err(|e| ServerError::Config {
            path: "mds config".into(),
            reason: format!("meta_url does not parse: {e}"),
        })?;
        Ok(parsed.get_password().is_some())
    }

    /// The `default` partition's protection method.
    pub fn default_protection(&self) -> Result<maat_proto::protection::Protection, ServerError> {
        match &self.default_security {
            None => Ok(maat_proto::protection::Protection::AllData),
            Some(name) => maat_proto::protection::Protection::parse(name).ok_or_else(|| {
                ServerError::Config {
                    path: "mds config".into(),
                    reason: format!(
                        "default_security = {name:?}: expected NOSEC, CAPKEY, CMDRSP, ALLDATA or CONFIDENTIAL"
                    ),
                }
            }),
        }
    }

    /// The umask new users start with ([`maat_mds::store::DEFAULT_UMASK`] when unset).
    pub fn default_umask(&self) -> Result<u16, ServerError> {
        match &self.default_umask {
            None => Ok(maat_mds::store::DEFAULT_UMASK),
            Some(text) => u16::from_str_radix(text.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| ServerError::Config {
                    path: "mds config".into(),
                    reason: format!("default_umask = {text:?}: expected octal bits like \"077\""),
                }),
        }
    }

    /// Copies of each object in a new cluster's `default` partition.
    pub fn default_replicas(&self) -> Result<u8, ServerError> {
        let replicas = self
            .default_replicas
            .unwrap_or(maat_proto::limits::REPLICAS_DEFAULT);
        if (1..=maat_proto::limits::REPLICAS_MAX).contains(&replicas) {
            return Ok(replicas);
        }
        Err(ServerError::Config {
            path: "mds config".into(),
            reason: format!(
                "default_replicas = {replicas}: expected 1 to {}",
                maat_proto::limits::REPLICAS_MAX
            ),
        })
    }

    /// The grouping settings (SPEC M6), defaults filled in.
    pub fn grouping(&self) -> Result<maat_mds::grouping::GroupingConfig, ServerError> {
        let mut g = maat_mds::grouping::GroupingConfig::default();
        if let Some(text) = &self.grouping {
            g.strategies = maat_mds::grouping::Strategies::parse(text).map_err(|reason| {
                ServerError::Config {
                    path: "mds config".into(),
                    reason: format!("grouping = {text:?}: {reason}"),
                }
            })?;
        }
        g.batch_threshold = self.batch_threshold.unwrap_or(g.batch_threshold);
        g.batch_detect_millis = self.batch_detect_ms.unwrap_or(g.batch_detect_millis);
        g.batch_gather_millis = self.batch_gather_ms.unwrap_or(g.batch_gather_millis);
        g.batch_hot_millis = self.batch_hot_ms.unwrap_or(g.batch_hot_millis);
        g.predict_j = self.predict_j.unwrap_or(g.predict_j);
        g.predict_k = self.predict_k.unwrap_or(g.predict_k);
        if g.predict_j == 0 || g.predict_j > g.predict_k || g.predict_k > 64 {
            return Err(ServerError::Config {
                path: "mds config".into(),
                reason: format!(
                    "predict_j = {}, predict_k = {}: need 1 <= j <= k <= 64",
                    g.predict_j, g.predict_k
                ),
            });
        }
        Ok(g)
    }

    /// The KDS public keys, when a KDS is configured.
    pub fn kds_keys(&self) -> Result<Option<maat_proto::msg::KdsKeys>, ServerError> {
        let Some(path) = &self.kds_public_keys_file else {
            return Ok(None);
        };
        Ok(Some(maat_proto::msg::KdsKeys {
            sealing_key: public_key_from_file(path, "kds_sealing_key")?,
            verifying_key: public_key_from_file(path, "kds_verifying_key")?,
        }))
    }

    /// Where the MDS keeps its secrets.
    pub fn key_dir(&self) -> PathBuf {
        self.key_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("keys"))
    }
}

impl OsdFileConfig {
    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        let c: Self = load(path)?;
        if c.id == 0 || c.weight == 0 {
            return Err(ServerError::Config {
                path: path.display().to_string(),
                reason: "id and weight must be at least 1".into(),
            });
        }
        Ok(c)
    }
}
