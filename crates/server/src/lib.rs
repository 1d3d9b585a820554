//! Maat's daemons: thin shells that read frames from sockets, ask the sans-IO logic
//! (`maat-mds`, `maat-osd`) what to do, and keep state on disk (redb for the MDS, files with
//! fsync for OSDs).
//!
//! Concurrency: one thread holds every idle connection in an epoll set (up to
//! [`CONNECTIONS_MAX`]) and threads serve the busy ones; the logic crates are `Sync` and
//! lock internally. See docs/ARCHITECTURE.md ("Connections") for the shape and docs/DECISIONS.md
//! for why.

pub mod limits;

pub mod config;
mod control;
mod env;
pub mod faults;
mod group_commit;
mod kds;
pub mod leader;
mod listen;
mod log;
mod mds_addresses;
mod mds_daemon;
pub mod mds_store;
pub mod meta_store;
pub mod metrics;
pub mod object_store;
mod osd_daemon;
mod overlay;
pub mod pg_pool;
pub mod pg_server;
mod pg_sql;
pub mod pg_store;
pub mod pg_writer;
pub mod private;
mod serve;
mod shell;

pub use config::{KdsFileConfig, MdsFileConfig, OsdFileConfig};
pub use env::{Clock, Env, StoreFailed};
pub use kds::{kds_handler, kds_public_keys_text, open_kds, run_kds, sync_kds_revocations};
pub use listen::adopt_handed_down_listener;
use listen::bind;
pub use log::{init_logging, LOG_ENV};
#[cfg(feature = "sim")]
pub use mds_daemon::open_mds_on;
pub use mds_daemon::{mds_handler, open_mds, run_mds, MDS_KEY_FILES};
pub use osd_daemon::{open_osd, run_osd, OsdNode, T10_KEY_FILE};
pub use serve::{
    Answer, Handler, ServeLimits, ServeStats, Shutdown, CONNECTIONS_MAX, IDLE_SECONDS_MAX,
};
pub use shell::{abort_on_panic, open_files_limit};

use maat_proto::msg::{self, WireError};
use maat_proto::wire::FrameType;
use maat_proto::UnixMillis;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is invalid.
    #[error("config {path}: {reason}")]
    Config {
        /// File.
        path: String,
        /// Why.
        reason: String,
    },
    /// A key file is missing or invalid.
    #[error("key file {path}: {reason}")]
    KeyFile {
        /// File.
        path: String,
        /// Why.
        reason: String,
    },
    /// A key file, database or data directory is readable or writable by group or others.
    #[error("{path} has mode {mode:04o}: group or others can read it (it holds keys or data); run `{fix}` and start again")]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
        /// The command that fixes it.
        fix: String,
    },
    /// Another daemon could not be reached (the control channel, a registration).
    #[error("{address} unreachable: {source}")]
    Unreachable {
        /// Where.
        address: String,
        /// What the network said.
        source: maat_net::NetError,
    },
    /// Another daemon refused a control message.
    #[error("{address} refused: {error}")]
    Refused {
        /// Where.
        address: String,
        /// Its refusal.
        error: WireError,
    },
    /// Another daemon's answer is not one (does not decode, answers something else, or
    /// fails its check).
    #[error("bad answer from {address}: {reason}")]
    BadAnswer {
        /// Where.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// I/O failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The metadata store failed.
    #[error(transparent)]
    MetaStore(#[from] maat_mds::StoreError),
    /// The object store failed.
    #[error(transparent)]
    ObjectStore(#[from] maat_osd::StoreError),
    /// The KDS keys are unusable.
    #[error(transparent)]
    Kds(#[from] maat_kds::KdsError),
    /// The MDS logic refused to start.
    #[error(transparent)]
    Mds(#[from] maat_mds::MdsError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

/// The system clock as protocol time.
pub fn now() -> UnixMillis {
    UnixMillis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
}

/// Reads a 32-byte key stored as hex (refused when group or others can read it).
pub fn read_key_file(path: &Path) -> Result<[u8; 32], ServerError> {
    let bytes = private::read_secret_file(path)?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| ServerError::KeyFile {
            path: path.display().to_string(),
            reason: "expected 32 bytes of hex".into(),
        })
}

/// Writes a 32-byte key as hex, readable by the owner only, fsynced.
pub fn write_key_file(path: &Path, key: &[u8; 32]) -> Result<(), ServerError> {
    private::write_secret_file(path, key)
}

/// Reads the key at `path`, or creates a random one there.
pub fn key_file_or_create(path: &Path) -> Result<[u8; 32], ServerError> {
    key_file_or_create_in(path, &Env::system())
}

/// Reads the key at `path`, or creates one there from `env`'s generator.
fn key_file_or_create_in(path: &Path, env: &Env) -> Result<[u8; 32], ServerError> {
    if path.exists() {
        return read_key_file(path);
    }
    let key = env.random32();
    write_key_file(path, &key)?;
    Ok(key)
}

/// Times one request into the latency histogram of its frame kind and, once known, its
/// request name, when dropped.
pub(crate) struct LatencyTimer<'a> {
    latencies: &'a metrics::Latencies,
    kind: &'static str,
    request: &'static str,
    started: std::time::Instant,
}

impl<'a> LatencyTimer<'a> {
    pub(crate) fn start(latencies: &'a metrics::Latencies, frame_type: FrameType) -> Self {
        let kind = match frame_type {
            FrameType::Plain => "plain",
            FrameType::Request => "request",
            FrameType::SecRequest => "sec_request",
            FrameType::T10Request => "t10_request",
            FrameType::Insecure | FrameType::InsecureBulk => "insecure",
            _ => "other",
        };
        LatencyTimer {
            latencies,
            kind,
            request: "-",
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for LatencyTimer<'_> {
    fn drop(&mut self) {
        self.latencies
            .observe(self.kind, self.request, self.started.elapsed());
    }
}

/// Records where a daemon serves metrics (`DATA_DIR/metrics.addr`, for `maat up` and
/// scrapers' discovery) and says so. Metrics are an aid: a daemon whose metrics address
/// cannot be bound says why and serves without them.
pub(crate) fn announce_metrics(
    data_dir: &Path,
    served: Result<String, ServerError>,
) -> Result<(), ServerError> {
    let path = data_dir.join("metrics.addr");
    match served {
        Ok(addr) => {
            private::replace_file(&path, addr.as_bytes())?;
            tracing::info!("metrics on http://{addr}/metrics");
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            tracing::warn!(error = %e, "serving without metrics");
        }
    }
    Ok(())
}

/// An unauthenticated refusal frame.
pub fn refusal_frame(error: &WireError) -> (FrameType, Vec<u8>) {
    // Encoding a refusal cannot fail short of memory running out; even then the peer
    // gets a decodable `Internal` refusal, never an empty frame.
    let bytes = msg::encode(error)
        .or_else(|_| msg::encode(&WireError::new(msg::ErrorCode::Internal, "")))
        .unwrap_or_else(|_| vec![msg::ErrorCode::Internal as u8, 0]);
    (FrameType::Refusal, bytes)
}

impl From<ServerError> for maat_mds::ChannelError {
    fn from(e: ServerError) -> Self {
        match e {
            ServerError::Unreachable { source, .. } => {
                maat_mds::ChannelError::Unreachable(source.to_string())
            }
            ServerError::Refused { error, .. } => maat_mds::ChannelError::Refused(error),
            other => maat_mds::ChannelError::BadAnswer(other.to_string()),
        }
    }
}
