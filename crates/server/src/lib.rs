//! Maat's daemons: thin shells that read frames from sockets, ask the sans-IO logic
//! (`maat-mds`, `maat-osd`) what to do, and keep state on disk (redb for the MDS, files with
//! fsync for OSDs).
//!
//! Concurrency is one thread per connection (bounded by [`CONNECTIONS_MAX`]); the logic
//! crates are `Sync` and lock internally. See docs/ARCHITECTURE.md for why threads and not
//! tokio here.

pub mod config;
pub mod meta_store;
pub mod object_store;
mod serve;

pub use config::{MdsFileConfig, OsdFileConfig};
pub use serve::{Shutdown, CONNECTIONS_MAX, IDLE_SECONDS_MAX};

use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::{OsRng, Secret32};
use maat_mds::{Mds, MdsConfig};
use maat_net::Connection;
use maat_osd::OsdCore;
use maat_proto::msg::{self, MdsPlainRequest, MdsPlainResponse, WireError};
use maat_proto::wire::FrameType;
use maat_proto::{OsdId, UnixMillis};
use rand_core::RngCore;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Reads a 32-byte key stored as hex.
pub fn read_key_file(path: &Path) -> Result<[u8; 32], ServerError> {
    let text = std::fs::read_to_string(path).map_err(|e| ServerError::KeyFile {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let bytes = hex::decode(text.trim()).map_err(|e| ServerError::KeyFile {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    bytes.try_into().map_err(|_| ServerError::KeyFile {
        path: path.display().to_string(),
        reason: "expected 32 bytes of hex".into(),
    })
}

/// Writes a 32-byte key as hex, readable by the owner only, fsynced.
pub fn write_key_file(path: &Path, key: &[u8; 32]) -> Result<(), ServerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("create {}", path.display())))?;
    f.write_all(hex::encode(key).as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", path.display())))
}

/// Reads the key at `path`, or creates a random one there.
pub fn key_file_or_create(path: &Path) -> Result<[u8; 32], ServerError> {
    if path.exists() {
        return read_key_file(path);
    }
    let mut key = [0u8; 32];
    OsRng.fill_bytes(&mut key);
    write_key_file(path, &key)?;
    Ok(key)
}

fn bind(address: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(address).map_err(io(format!("listen on {address}")))
}

/// Runs the MDS until `shutdown` fires. `ready` is called with the bound address once
/// the daemon serves.
pub fn run_mds(
    config: &MdsFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(io(format!("create {}", config.data_dir.display())))?;
    let store = meta_store::RedbStore::open(&config.data_dir.join("meta.redb"))?;
    let admin_key = key_file_or_create(&config.admin_key_file)?;
    let join_key = key_file_or_create(&config.join_key_file)?;
    let boot = now();
    let mds = Mds::open(
        store,
        MdsConfig {
            ticket_lifetime_millis: config.ticket_lifetime_secs.saturating_mul(1000),
            capability_lifetime_millis: config.capability_lifetime_secs.saturating_mul(1000),
            danger_allow_insecure: config.danger_allow_insecure,
            join_key,
        },
        &admin_key,
        boot,
        &mut OsRng,
    )?;
    if let Some(path) = &config.public_keys_file {
        let text = format!(
            "mds_verifying_key = \"{}\"\nmds_sealing_key = \"{}\"\n",
            hex::encode(mds.verifying_key()),
            hex::encode(mds.sealing_public_key())
        );
        std::fs::write(path, text).map_err(io(format!("write {}", path.display())))?;
    }
    let listener = bind(&config.listen)?;
    let local = listener
        .local_addr()
        .map_err(io("local address"))?
        .to_string();
    let mds = Arc::new(mds);
    let handler = move |frame_type: FrameType, payload: &[u8]| -> (FrameType, Vec<u8>) {
        let now = now();
        match frame_type {
            FrameType::Plain => (FrameType::Plain, mds.handle_plain(payload, now, &mut OsRng)),
            FrameType::Request => match mds.handle_request(payload, now, &mut OsRng) {
                Ok(sealed) => (FrameType::Response, sealed),
                Err(refusal) => refusal_frame(&refusal),
            },
            FrameType::Insecure => (
                FrameType::Plain,
                mds.handle_insecure(payload, now, &mut OsRng),
            ),
            FrameType::Response | FrameType::Refusal => refusal_frame(&WireError::new(
                msg::ErrorCode::Malformed,
                "unexpected frame type",
            )),
        }
    };
    ready(&local);
    serve::serve(listener, Arc::new(handler), shutdown, "mds");
    Ok(())
}

/// An unauthenticated refusal frame.
pub fn refusal_frame(error: &WireError) -> (FrameType, Vec<u8>) {
    (FrameType::Refusal, msg::encode(error).unwrap_or_default())
}

/// Runs an OSD until `shutdown` fires.
pub fn run_osd(
    config: &OsdFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(io(format!("create {}", config.data_dir.display())))?;
    let sealing = key_file_or_create(&config.data_dir.join("osd.key"))?;
    let sealing = SealingSecretKey::from_bytes(sealing);
    let join_key = read_key_file(&config.join_key_file)?;
    let store = object_store::FileObjectStore::open(&config.data_dir)?;
    let core = Arc::new(OsdCore::new(
        OsdId(config.id),
        sealing,
        config.danger_allow_insecure,
        now(),
    ));
    let mds_key_path = config.data_dir.join("mds.pub");
    if let Ok(known) = read_key_file(&mds_key_path) {
        // Serve at once after a restart, even while the MDS is away.
        let _ = core.set_mds_key(known);
    }
    let listener = bind(&config.listen)?;
    let local = listener
        .local_addr()
        .map_err(io("local address"))?
        .to_string();
    let advertise = config.advertise.clone().unwrap_or_else(|| local.clone());
    {
        let core = core.clone();
        let mds_address = config.mds.clone();
        let weight = config.weight;
        let id = config.id;
        let stop = shutdown.clone();
        std::thread::spawn(move || {
            register_loop(
                &core,
                &mds_address,
                &advertise,
                id,
                weight,
                &join_key,
                &mds_key_path,
                &stop,
            )
        });
    }
    let store = Arc::new(store);
    let handler = move |frame_type: FrameType, payload: &[u8]| -> (FrameType, Vec<u8>) {
        let now = now();
        match frame_type {
            FrameType::Plain => (
                FrameType::Plain,
                core.handle_plain(payload, now, &mut OsRng),
            ),
            FrameType::Request => match core.open_request(payload, now) {
                Ok((caller, request)) => {
                    let result = core.execute(store.as_ref(), &caller, &request, now);
                    core.seal_response(&caller, &result, now)
                }
                Err(refusal) => refusal_frame(&refusal),
            },
            FrameType::Insecure => match core.open_insecure(payload) {
                Ok((caller, request)) => {
                    let result = core.execute(store.as_ref(), &caller, &request, now);
                    core.seal_response(&caller, &result, now)
                }
                Err(refusal) => refusal_frame(&refusal),
            },
            FrameType::Response | FrameType::Refusal => refusal_frame(&WireError::new(
                msg::ErrorCode::Malformed,
                "unexpected frame type",
            )),
        }
    };
    ready(&local);
    let name = format!("osd {}", config.id);
    serve::serve(listener, Arc::new(handler), shutdown, &name);
    Ok(())
}

/// Registers with the MDS, retrying until it answers; stores the MDS key it learns.
#[allow(clippy::too_many_arguments)]
fn register_loop(
    core: &OsdCore,
    mds_address: &str,
    advertise: &str,
    id: u64,
    weight: u32,
    join_key: &[u8; 32],
    mds_key_path: &Path,
    shutdown: &Shutdown,
) {
    let join = MacKey::new(Secret32::from_bytes(*join_key)).with_counters(core.counters().clone());
    let mut warned = false;
    while !shutdown.is_set() {
        match register_once(core, mds_address, advertise, id, weight, &join) {
            Ok(key) => {
                let _ = core.set_mds_key(key);
                if read_key_file(mds_key_path).ok() != Some(key) {
                    let _ = std::fs::remove_file(mds_key_path);
                    if let Err(e) = write_key_file(mds_key_path, &key) {
                        eprintln!("osd {id}: cannot record the MDS key: {e}");
                    }
                }
                return;
            }
            Err(e) => {
                // Right after the MDS boots it refuses timestamps inside its restart grace
                // (T7); that is expected and retried, not worth a warning.
                let expected = e.contains("stale request");
                if !warned && !expected {
                    eprintln!(
                        "osd {id}: registration with MDS at {mds_address} failed ({e}); retrying"
                    );
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
}

fn register_once(
    core: &OsdCore,
    mds_address: &str,
    advertise: &str,
    id: u64,
    weight: u32,
    join: &MacKey,
) -> Result<[u8; 32], String> {
    let mut nonce = [0u8; 16];
    OsRng.fill_bytes(&mut nonce);
    let timestamp = now().0;
    let sealing_key = core.sealing_public_key();
    let parts = maat_proto::login::register_mac_parts(
        id,
        advertise,
        &sealing_key,
        weight,
        timestamp,
        &nonce,
    );
    let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let request = MdsPlainRequest::RegisterOsd {
        id,
        address: advertise.to_string(),
        sealing_key,
        weight,
        timestamp,
        nonce,
        mac: join.tag(&refs),
    };
    let payload = msg::encode(&request).map_err(|e| e.to_string())?;
    let mut conn = Connection::new(mds_address);
    let (_, answer) = conn
        .call(FrameType::Plain, &payload)
        .map_err(|e| e.to_string())?;
    let answer: Result<MdsPlainResponse, WireError> =
        msg::decode(&answer).map_err(|e| e.to_string())?;
    match answer.map_err(|e| e.to_string())? {
        MdsPlainResponse::Registered {
            mds_verifying_key,
            mac,
        } => {
            let expected = maat_proto::login::registered_mac(join, &mds_verifying_key, &nonce);
            if maat_crypto::ct_eq(&expected, &mac) {
                Ok(mds_verifying_key)
            } else {
                Err("registration answer has a bad MAC".into())
            }
        }
        _ => Err("unexpected answer to registration".into()),
    }
}
