//! Maat's daemons: thin shells that read frames from sockets, ask the sans-IO logic
//! (`maat-mds`, `maat-osd`) what to do, and keep state on disk (redb for the MDS, files with
//! fsync for OSDs).
//!
//! Concurrency is one thread per connection (bounded by [`CONNECTIONS_MAX`]); the logic
//! crates are `Sync` and lock internally. See docs/ARCHITECTURE.md for why threads and not
//! tokio here.

pub mod config;
mod control;
mod group_commit;
mod kds;
mod listen;
pub mod meta_store;
pub mod metrics;
pub mod object_store;
mod overlay;
pub mod private;
mod serve;

pub use config::{KdsFileConfig, MdsFileConfig, OsdFileConfig};
pub use kds::{kds_public_keys_text, run_kds};
pub use listen::adopt_handed_down_listener;
use listen::bind;
pub use serve::{Answer, Shutdown, CONNECTIONS_MAX, IDLE_SECONDS_MAX};

use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::{OsRng, Secret32};
use maat_mds::{Mds, MdsConfig, MdsSecrets, MetaStore};
use maat_net::Connection;
use maat_osd::OsdCore;
use maat_proto::msg::{self, MdsPlainRequest, MdsPlainResponse, WireError};
use maat_proto::wire::FrameType;
use maat_proto::{OsdId, UnixMillis};
use rand_core::RngCore;
use std::path::{Path, PathBuf};
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
    if path.exists() {
        return read_key_file(path);
    }
    let mut key = [0u8; 32];
    OsRng.fill_bytes(&mut key);
    write_key_file(path, &key)?;
    Ok(key)
}

/// File names of the MDS secrets in its key directory.
pub const MDS_KEY_FILES: [&str; 4] = ["signing.key", "sealing.key", "decoy.key", "opaque.key"];

/// The MDS secrets from their key files; missing ones are created, from the secrets a
/// format-0 store held (`legacy`) or at random. A cluster that already has a namespace
/// but lost a key file is refused: a new signing key would orphan every OSD and client.
fn mds_secrets(
    key_dir: &Path,
    legacy: Option<[Secret32; 3]>,
    initialized: bool,
) -> Result<MdsSecrets, ServerError> {
    let paths = MDS_KEY_FILES.map(|f| key_dir.join(f));
    let missing: Vec<&PathBuf> = paths.iter().filter(|p| !p.exists()).collect();
    if initialized && legacy.is_none() && !missing.is_empty() {
        return Err(ServerError::KeyFile {
            path: missing
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            reason: "missing, but this MDS already has a namespace signed with it; restore the key files from a backup".into(),
        });
    }
    let fresh = MdsSecrets::generate(&mut OsRng);
    let [signing, sealing, decoy] = match legacy {
        Some(l) => l,
        None => [fresh.signing_seed, fresh.sealing_secret, fresh.decoy_key],
    };
    let [p_signing, p_sealing, p_decoy, p_opaque] = &paths;
    let load32 = |path: &Path, value: Secret32| -> Result<Secret32, ServerError> {
        if !path.exists() {
            write_key_file(path, value.expose())?;
        }
        Ok(Secret32::from_bytes(read_key_file(path)?))
    };
    let signing_seed = load32(p_signing, signing)?;
    let sealing_secret = load32(p_sealing, sealing)?;
    let decoy_key = load32(p_decoy, decoy)?;
    if !p_opaque.exists() {
        private::write_secret_file(p_opaque, &fresh.opaque_setup)?;
    }
    let opaque_setup = private::read_secret_file(p_opaque)?;
    Ok(MdsSecrets {
        signing_seed,
        sealing_secret,
        decoy_key,
        opaque_setup,
    })
}

/// Runs the MDS until `shutdown` fires. `ready` is called with the bound address once
/// the daemon serves.
pub fn run_mds(
    config: &MdsFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    private::create_private_dir(&config.data_dir)?;
    let db_path = config.data_dir.join("meta.redb");
    private::check_private(&db_path)?;
    let mut store = meta_store::RedbStore::open(&db_path)?;
    store.set_group_commit(config.group_commit);
    let key_dir = config.key_dir();
    private::check_private(&key_dir)?;
    let initialized = store.inode(maat_mds::ROOT_INODE)?.is_some();
    let legacy = MdsSecrets::legacy_from_store(&store)?;
    let moved = legacy.is_some();
    let secrets = mds_secrets(&key_dir, legacy, initialized)?;
    if moved {
        // The key files are durable now; take the secrets out of the database, and rewrite
        // it into a fresh file so that their bytes do not linger in free pages. (A copy of
        // the format-0 database taken before this must still be treated as holding them.)
        let mut batch = maat_mds::Batch::default();
        for key in maat_mds::store::LEGACY_SECRET_KEYS {
            batch.push(maat_mds::Op::DeleteMeta(key.into()));
        }
        store.commit(batch)?;
        store = store.rewrite_fresh(&db_path)?;
        store.set_group_commit(config.group_commit);
        eprintln!(
            "mds: moved the MDS secrets out of {} into {}",
            db_path.display(),
            key_dir.display()
        );
    }
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
            default_protection: config.default_protection()?,
            grouping: config.grouping()?,
            kds: config
                .kds
                .iter()
                .map(|address| maat_proto::msg::KdsEntry {
                    address: address.clone(),
                })
                .collect(),
            kds_keys: config.kds_keys()?,
            encrypt_new_files: config.encrypt_new_files,
        },
        secrets,
        &admin_key,
        boot,
        &mut OsRng,
    )?;
    if let Some(path) = &config.public_keys_file {
        let text = format!(
            "mds_verifying_key = \"{}\"\nmds_sealing_key = \"{}\"\nmds_opaque_key = \"{}\"\n",
            hex::encode(mds.verifying_key()),
            hex::encode(mds.sealing_public_key()),
            hex::encode(mds.opaque_public_key())
        );
        private::replace_file(path, text.as_bytes())?;
    }
    let listener = bind(&config.listen)?;
    let local = listener
        .local_addr()
        .map_err(io("local address"))?
        .to_string();
    // SPEC M9: a revocation reaches every OSD and KDS before the administrator hears it
    // is done.
    let kds_addresses = config.kds.clone();
    mds.set_revocation_pusher(Arc::new(move |notice, osds| {
        control::push_revocation(notice, osds, &kds_addresses)
    }));
    // SPEC T3: key commands to OSDs, on demand and from the maintenance thread.
    mds.set_t10_channel(Arc::new(control::osd_plain_call));
    let mds = Arc::new(mds);
    {
        let mds = mds.clone();
        let stop = shutdown.clone();
        std::thread::spawn(move || control::t10_maintenance(mds.as_ref(), &stop));
    }
    let latencies = Arc::new(metrics::Latencies::default());
    if let Some(listen) = &config.metrics {
        let source = mds.clone();
        let served = metrics::serve(listen, Arc::new(move || source.stats()), latencies.clone());
        announce_metrics(&config.data_dir, "mds", served)?;
    }
    let handler = move |peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
        let mut timer = LatencyTimer::start(&latencies, frame_type);
        let now = now();
        let answer = match frame_type {
            FrameType::Plain => (
                FrameType::Plain,
                mds.handle_plain(peer, payload, now, &mut OsRng),
            ),
            FrameType::Request => {
                let (name, answer) = mds.handle_request_named(payload, now, &mut OsRng);
                timer.request = name.unwrap_or("-");
                match answer {
                    Ok(sealed) => (FrameType::Response, sealed),
                    Err(refusal) => refusal_frame(&refusal),
                }
            }
            FrameType::Insecure => (
                FrameType::Plain,
                mds.handle_insecure(payload, now, &mut OsRng),
            ),
            FrameType::SecRequest | FrameType::T10Request => refusal_frame(&WireError::new(
                msg::ErrorCode::Malformed,
                "the MDS takes version-1 envelopes only",
            )),
            FrameType::Response | FrameType::SecResponse | FrameType::Refusal => refusal_frame(
                &WireError::new(msg::ErrorCode::Malformed, "unexpected frame type"),
            ),
        };
        answer.into()
    };
    ready(&local);
    serve::serve(listener, Arc::new(handler), shutdown, "mds");
    Ok(())
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
            FrameType::Insecure => "insecure",
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
    name: &str,
    served: Result<String, ServerError>,
) -> Result<(), ServerError> {
    let path = data_dir.join("metrics.addr");
    match served {
        Ok(addr) => {
            private::replace_file(&path, addr.as_bytes())?;
            eprintln!("maat {name}: metrics on http://{addr}/metrics");
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            eprintln!("maat {name}: serving without metrics: {e}");
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

/// Runs an OSD until `shutdown` fires.
pub fn run_osd(
    config: &OsdFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    private::create_private_dir(&config.data_dir)?;
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
    load_t10_keys(
        &core,
        &config.data_dir.join(T10_KEY_FILE),
        &join_key,
        config.id,
    )?;
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
    let advertise_ready = advertise.clone();
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
    let latencies = Arc::new(metrics::Latencies::default());
    if let Some(listen) = &config.metrics {
        let source = core.clone();
        let served = metrics::serve(listen, Arc::new(move || source.stats()), latencies.clone());
        announce_metrics(&config.data_dir, &format!("osd {}", config.id), served)?;
    }
    let handler = move |_peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
        let mut timer = LatencyTimer::start(&latencies, frame_type);
        let now = now();
        match frame_type {
            FrameType::Plain => (
                FrameType::Plain,
                core.handle_plain(payload, now, &mut OsRng),
            )
                .into(),
            FrameType::Request
            | FrameType::SecRequest
            | FrameType::T10Request
            | FrameType::Insecure => {
                let opened = match frame_type {
                    FrameType::Request => core.open_request(payload, now),
                    FrameType::SecRequest => core.open_sec_request(payload, now),
                    FrameType::T10Request => core.open_t10_request(payload, now),
                    _ => core.open_insecure(payload),
                };
                match opened {
                    Ok((caller, request)) => {
                        timer.request = request.command.kind();
                        let result = core.execute(store.as_ref(), &caller, &request, now);
                        let (frame_type, parts) =
                            core.seal_response(&caller, result, now, &mut OsRng);
                        Answer { frame_type, parts }
                    }
                    Err(refusal) => refusal_frame(&refusal).into(),
                }
            }
            FrameType::Response | FrameType::SecResponse | FrameType::Refusal => refusal_frame(
                &WireError::new(msg::ErrorCode::Malformed, "unexpected frame type"),
            )
            .into(),
        }
    };
    // The address clients reach it at (what it registered), which is what `maat up`
    // waits to see in the map.
    ready(&advertise_ready);
    let name = format!("osd {}", config.id);
    serve::serve(listener, Arc::new(handler), shutdown, &name);
    Ok(())
}

/// The OSD's T10 key file (SPEC T3): its key hierarchy and generations, mode 0600.
pub const T10_KEY_FILE: &str = "t10.keys";

/// Loads an OSD's T10 key state from `path` (refused when group- or other-readable), or
/// starts from the bootstrap state of a new OSD; later states are written there before
/// the OSD acknowledges them.
fn load_t10_keys(
    core: &OsdCore,
    path: &Path,
    join_key: &[u8; 32],
    id: u64,
) -> Result<(), ServerError> {
    let bad = |reason: String| ServerError::KeyFile {
        path: path.display().to_string(),
        reason,
    };
    let state = match std::fs::read(path) {
        Ok(bytes) => {
            private::check_private(path)?;
            let bytes = zeroize::Zeroizing::new(bytes);
            maat_proto::t10_keys::KeyState::decode(&bytes).map_err(|e| bad(e.to_string()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            maat_proto::t10_keys::KeyState::bootstrap(join_key, id)
                .map_err(|e| bad(e.to_string()))?
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    let path = path.to_path_buf();
    core.load_t10_keys(
        state,
        Arc::new(move |bytes: &[u8]| {
            private::replace_file(&path, bytes).map_err(|e| e.to_string())
        }),
    );
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
                control::revocation_loop(&format!("osd {id}"), mds_address, shutdown, || {
                    control::sync_revocations(core, mds_address, id, &join)
                });
                return;
            }
            Err(e) => {
                // Right after the MDS boots it answers "not ready" to timestamps inside its
                // restart grace (T7); that is expected and retried, not worth a warning.
                let expected = matches!(
                    e.code,
                    Some(msg::ErrorCode::NotReady | msg::ErrorCode::StaleRequest)
                );
                if !warned && !expected {
                    eprintln!(
                        "osd {id}: registration with MDS at {mds_address} failed ({}); retrying",
                        e.reason
                    );
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
}

/// Why one registration attempt failed: the MDS's refusal code when it refused.
struct RegisterFailure {
    code: Option<msg::ErrorCode>,
    reason: String,
}

impl RegisterFailure {
    fn local(reason: impl std::fmt::Display) -> Self {
        RegisterFailure {
            code: None,
            reason: reason.to_string(),
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
) -> Result<[u8; 32], RegisterFailure> {
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
    let payload = msg::encode(&request).map_err(RegisterFailure::local)?;
    let mut conn = Connection::new(mds_address);
    let (_, answer) = conn
        .call(FrameType::Plain, &payload)
        .map_err(RegisterFailure::local)?;
    let answer: Result<MdsPlainResponse, WireError> =
        msg::decode(&answer).map_err(RegisterFailure::local)?;
    let answer = answer.map_err(|e| RegisterFailure {
        code: Some(e.code),
        reason: e.to_string(),
    })?;
    match answer {
        MdsPlainResponse::Registered {
            mds_verifying_key,
            mac,
        } => {
            let expected = maat_proto::login::registered_mac(join, &mds_verifying_key, &nonce);
            if maat_crypto::ct_eq(&expected, &mac) {
                Ok(mds_verifying_key)
            } else {
                Err(RegisterFailure::local("registration answer has a bad MAC"))
            }
        }
        _ => Err(RegisterFailure::local("unexpected answer to registration")),
    }
}
