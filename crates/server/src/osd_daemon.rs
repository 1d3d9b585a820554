//! The OSD daemon: a thin shell around `maat_osd::OsdCore` (object files, key files,
//! registration with the MDS and its revocation catch-up, the accept loop).

use crate::mds_addresses::MdsAddresses;
use crate::object_store::FileObjectStore;
use crate::serve::Handler;
use crate::shell::Shell;
use crate::{
    control, key_file_or_create_in, metrics, private, read_key_file, refusal_frame, write_key_file,
    Answer, Env, LatencyTimer, OsdFileConfig, ServerError, Shutdown,
};
use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::Secret32;
use maat_osd::{OsdCore, ReadAside};
use maat_proto::msg::{self, MdsPlainResponse, WireError};
use maat_proto::wire::FrameType;
use maat_proto::OsdId;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long an MDS may take to answer a check-in made on demand before a request (issue
/// 41); the periodic check-ins wait the network's whole timeout.
const CHECK_IN_ON_DEMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// An OSD opened as the daemon opens it: its logic, its object store, and what it needs
/// to register with the MDS. Starts no thread and serves nothing: [`run_osd`] does that,
/// a simulation drives it by hand.
pub struct OsdNode {
    /// The OSD's decisions.
    pub core: Arc<OsdCore>,
    /// Its objects.
    pub store: Arc<FileObjectStore>,
    id: u64,
    weight: u32,
    advertise: String,
    /// The MDS instances it registers and checks in at (issue 42).
    mds: Arc<MdsAddresses>,
    join: MacKey,
    /// What check-ins are MACed under: the control key once the MDS gave its sealing
    /// key (issue 41), the join key before (and with an MDS from before control keys).
    check_in: Arc<std::sync::Mutex<MacKey>>,
    /// Whether the lease was last seen lapsed (so that the log says so once).
    lapsed: std::sync::atomic::AtomicBool,
    mds_key_path: PathBuf,
    mds_sealing_path: PathBuf,
}

/// Opens the OSD of `config` that clients reach at `advertise`.
pub fn open_osd(
    config: &OsdFileConfig,
    advertise: &str,
    env: &Env,
) -> Result<OsdNode, ServerError> {
    private::create_private_dir(&config.data_dir)?;
    let sealing = key_file_or_create_in(&config.data_dir.join("osd.key"), env)?;
    let sealing = SealingSecretKey::from_bytes(sealing);
    let join_key = read_key_file(&config.join_key_file)?;
    let store = FileObjectStore::open(&config.data_dir)?.dated_by(env.simulated_clock());
    #[cfg(feature = "sim")]
    let store = store.with_faults(env.storage_faults());
    let core = Arc::new(OsdCore::new(
        OsdId(config.id),
        sealing,
        config.danger_allow_insecure,
        env.now(),
    ));
    load_t10_keys(
        &core,
        &config.data_dir.join(T10_KEY_FILE),
        &join_key,
        config.id,
    )?;
    let mds_key_path = config.data_dir.join("mds.pub");
    if let Ok(known) = read_key_file(&mds_key_path) {
        // Serve at once after a restart, even while the MDS is away. A key file that
        // holds no key is said, not skipped (the OSD would then trust whatever MDS it
        // registers with next).
        core.set_mds_key(known).map_err(|e| ServerError::KeyFile {
            path: mds_key_path.display().to_string(),
            reason: format!(
                "{e}: not an MDS verifying key (remove it and the OSD learns the key at its next registration)"
            ),
        })?;
    }
    // The join key's MACs (registration, catch-ups) are background work, by name.
    let join = MacKey::new(Secret32::from_bytes(join_key))
        .with_counters(core.background_counters().clone());
    // Check in under the control key agreed with the MDS at the last registration, so
    // that the first check-ins after a restart need no registration first.
    let mds_sealing_path = config.data_dir.join("mds-sealing.pub");
    let check_in = match read_key_file(&mds_sealing_path) {
        Ok(mds_sealing) => core.control_key(&mds_sealing).map_err(|e| ServerError::KeyFile {
            path: mds_sealing_path.display().to_string(),
            reason: format!(
                "{e}: not an MDS sealing key (remove it and the OSD learns the key at its next registration)"
            ),
        })?,
        Err(_) => join.clone(),
    };
    Ok(OsdNode {
        core,
        store: Arc::new(store),
        id: config.id,
        weight: config.weight,
        advertise: advertise.to_string(),
        mds: Arc::new(MdsAddresses::new(&config.mds, &config.mds_others)),
        join,
        check_in: Arc::new(std::sync::Mutex::new(check_in)),
        lapsed: std::sync::atomic::AtomicBool::new(false),
        mds_key_path,
        mds_sealing_path,
    })
}

impl OsdNode {
    /// One registration with the MDS; on success the OSD knows (and has stored) the MDS
    /// key. Returns why it failed otherwise.
    pub fn register(&self, env: &Env) -> Result<(), ServerError> {
        self.register_failing(env).map_err(|e| match e.code {
            Some(code) => ServerError::Refused {
                address: self.mds.current().to_string(),
                error: msg::WireError::new(code, e.reason),
            },
            None => ServerError::BadAnswer {
                address: self.mds.current().to_string(),
                reason: e.reason,
            },
        })
    }

    fn register_failing(&self, env: &Env) -> Result<(), RegisterFailure> {
        let (key, mds_sealing) = register_once(self, env)?;
        // A key that is not one is a failed registration: nothing is recorded.
        self.core
            .set_mds_key(key)
            .map_err(|e| RegisterFailure::local(format!("the MDS's key: {e}")))?;
        record_key(&self.mds_key_path, &key, "MDS key");
        if let Some(mds_sealing) = mds_sealing {
            let control = self
                .core
                .control_key(&mds_sealing)
                .map_err(|e| RegisterFailure::local(format!("the MDS's sealing key: {e}")))?;
            *self.check_in_key_slot() = control;
            record_key(&self.mds_sealing_path, &mds_sealing, "MDS sealing key");
        }
        Ok(())
    }

    fn check_in_key_slot(&self) -> std::sync::MutexGuard<'_, MacKey> {
        self.check_in.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key check-ins are MACed under now.
    fn check_in_key(&self) -> MacKey {
        self.check_in_key_slot().clone()
    }

    /// The OSD's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Says in the log when the OSD's lease lapses (issue 41: it then serves no object
    /// until a check-in reaches the MDS) and when it holds again.
    fn log_lease(&self, now: maat_proto::UnixMillis) {
        use std::sync::atomic::Ordering;
        let lapsed = self.core.lease_lapsed(now);
        if lapsed.is_some() == self.lapsed.swap(lapsed.is_some(), Ordering::Relaxed) {
            return;
        }
        match lapsed {
            // Never checked in since the start.
            Some(ms) if ms >= now.0 => tracing::warn!(
                mds = %self.mds.current(),
                "no check-in has reached the MDS since the start: serving no object until one does"
            ),
            Some(ms) => tracing::warn!(
                mds = %self.mds.current(),
                since_ms = ms,
                lease_ms = maat_proto::limits::OSD_LEASE_MILLIS,
                "no check-in has reached the MDS within the lease: serving no object until one does (clients read other copies)"
            ),
            None => {
                tracing::info!(mds = %self.mds.current(), "checked in with the MDS again: serving")
            }
        }
    }

    /// One check-in with the MDS: the revocations in force (SPEC M9) and the copies here
    /// that missed a change (issue 41), both before the OSD serves after a start.
    pub fn sync_revocations(&self, env: &Env) -> Result<(), ServerError> {
        let key = self.check_in_key();
        self.mds.call(|a| {
            control::sync_revocations(env, &self.core, a, self.id, &key)?;
            control::sync_missed(env, &self.core, a, self.id, &key).map(|_| ())
        })
    }

    /// The OSD's frame handler: what it answers to each frame, timed into `latencies`.
    pub fn handler(&self, env: Env, latencies: Arc<metrics::Latencies>) -> Arc<Handler> {
        let core = self.core.clone();
        let store = self.store.clone();
        // Issue 41: a check-in on demand (a stale list of missed copies before a
        // request). It holds the request up, so a hung MDS gets a short time to answer:
        // the OSD serves on while its lease lasts and refuses after (`CutOff`), rather
        // than every request waiting out the network's timeout.
        let check_env = env.clone().with_io_timeout(CHECK_IN_ON_DEMAND_TIMEOUT);
        let check_core = self.core.clone();
        let (mds, id, slot) = (self.mds.clone(), self.id, self.check_in.clone());
        self.core.set_check_in(Arc::new(move || {
            let key = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
            mds.call(|a| {
                control::sync_revocations(&check_env, &check_core, a, id, &key)
                    .and_then(|()| control::sync_missed(&check_env, &check_core, a, id, &key))
            })
            .is_ok()
        }));
        Arc::new(
            move |_peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
                let mut timer = LatencyTimer::start(&latencies, frame_type);
                let now = env.now();
                match frame_type {
                    FrameType::Plain => (
                        FrameType::Plain,
                        env.with_rng(|mut rng| core.handle_plain(payload, now, &mut rng)),
                    )
                        .into(),
                    FrameType::Request
                    | FrameType::SecRequest
                    | FrameType::T10Request
                    | FrameType::Insecure
                    | FrameType::InsecureBulk => {
                        core.check_in_if_stale(now);
                        let opened = match frame_type {
                            FrameType::Request => core.open_request(payload, now),
                            FrameType::SecRequest => core.open_sec_request(payload, now),
                            FrameType::T10Request => core.open_t10_request(payload, now),
                            FrameType::InsecureBulk => core.open_insecure_bulk(payload),
                            _ => core.open_insecure(payload),
                        };
                        match opened {
                            Ok((caller, request)) => {
                                timer.request = request.command.kind();
                                // Answers that carry bulk data apart from the message may
                                // send a read's data straight from the object's file.
                                let (result, aside) = match frame_type {
                                    FrameType::Request | FrameType::Insecure => (
                                        core.execute(store.as_ref(), &caller, &request, now),
                                        ReadAside::default(),
                                    ),
                                    _ => core.execute_zero_copy(
                                        store.as_ref(),
                                        &caller,
                                        &request,
                                        now,
                                    ),
                                };
                                let mut answer = if frame_type == FrameType::InsecureBulk {
                                    match msg::plain_bulk_response(result) {
                                        Ok(parts) => Answer::parts(FrameType::PlainBulk, parts),
                                        Err(e) => refusal_frame(&WireError::from(e)).into(),
                                    }
                                } else {
                                    let (frame_type, parts) = env.with_rng(|mut rng| {
                                        let digest = aside.digest.as_ref();
                                        core.seal_response(&caller, result, digest, now, &mut rng)
                                    });
                                    Answer::parts(frame_type, parts)
                                };
                                // The data part is the second, after the message, in both
                                // layouts; a sealing failure (a refusal) sends no file.
                                if matches!(
                                    answer.frame_type,
                                    FrameType::PlainBulk | FrameType::SecResponse
                                ) {
                                    answer.file = aside.file.map(|f| (1, f));
                                }
                                // Opened insecure: this OSD takes NOSEC requests, and
                                // has no key to ask for.
                                if matches!(
                                    frame_type,
                                    FrameType::Insecure | FrameType::InsecureBulk
                                ) {
                                    answer.proves = true;
                                }
                                answer
                            }
                            Err(refusal) => refusal_frame(&refusal).into(),
                        }
                    }
                    FrameType::Response
                    | FrameType::SecResponse
                    | FrameType::Refusal
                    | FrameType::PlainBulk => refusal_frame(&WireError::new(
                        msg::ErrorCode::Malformed,
                        "unexpected frame type",
                    ))
                    .into(),
                }
            },
        )
    }
}

/// Runs an OSD until `shutdown` fires.
pub fn run_osd(
    config: &OsdFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    let env = Env::system();
    let shell = Shell::bind(&config.listen)?;
    let advertise = config
        .advertise
        .clone()
        .unwrap_or_else(|| shell.local.clone());
    let node = Arc::new(open_osd(config, &advertise, &env)?);
    {
        let node = node.clone();
        let stop = shutdown.clone();
        let env = env.clone();
        std::thread::spawn(move || register_loop(&node, &env, &stop));
    }
    let source = node.core.clone();
    // Ready at the address clients reach it at (what it registered), which is what
    // `maat up` waits to see in the map.
    shell.serve(
        &format!("osd {}", config.id),
        config.metrics.as_deref(),
        &config.data_dir,
        Arc::new(move || source.stats()),
        |latencies| node.handler(env, latencies),
        shutdown,
        &advertise,
        ready,
    )?;
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
            private::replace_file(&path, bytes).map_err(std::io::Error::other)
        }),
    );
    Ok(())
}

/// Registers with the MDS, retrying until it answers; then checks revocations with it
/// until shutdown.
fn register_loop(node: &OsdNode, env: &Env, shutdown: &Shutdown) {
    let mut warned = false;
    while !shutdown.is_set() {
        match node.register_failing(env) {
            Ok(()) => {
                control::revocation_loop(node.mds.current(), shutdown, || {
                    let synced = node.sync_revocations(env);
                    node.log_lease(env.now());
                    synced
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
                    tracing::warn!(
                        mds = %node.mds.current(),
                        error = %e.reason,
                        "registration with the MDS failed; retrying"
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

/// Writes `key` to `path` (0600) unless it holds it already; a failure is logged (the
/// key is learnt again at the next registration).
fn record_key(path: &Path, key: &[u8; 32], what: &str) {
    if read_key_file(path).ok() != Some(*key) {
        let _ = std::fs::remove_file(path);
        if let Err(e) = write_key_file(path, key) {
            tracing::error!(error = %e, "cannot record the {what}");
        }
    }
}

/// One registration: the MDS's verifying key, and its sealing key when it gives one
/// (`RegisterOsdControl`; an MDS from before control keys refuses that as `Malformed`,
/// and the OSD registers the old way and checks in under the join key).
fn register_once(
    node: &OsdNode,
    env: &Env,
) -> Result<([u8; 32], Option<[u8; 32]>), RegisterFailure> {
    node.mds
        .call(|mds| match register_as(node, env, mds, true) {
            Err(RegisterFailure {
                code: Some(msg::ErrorCode::Malformed),
                ..
            }) => register_as(node, env, mds, false),
            other => other,
        })
}

fn register_as(
    node: &OsdNode,
    env: &Env,
    mds: &str,
    control: bool,
) -> Result<([u8; 32], Option<[u8; 32]>), RegisterFailure> {
    let (core, id, weight, join) = (&node.core, node.id, node.weight, &node.join);
    let advertise = node.advertise.as_str();
    let mut nonce = [0u8; 16];
    env.with_rng(|rng| rng.fill_bytes(&mut nonce));
    let timestamp = env.now().0;
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
    let request = msg::OsdRegistration {
        entry: msg::OsdEntry {
            id,
            address: advertise.to_string(),
            sealing_key,
            weight,
        },
        timestamp,
        nonce,
        mac: join.tag(&refs),
    }
    .into_request(control);
    let payload = msg::encode(&request).map_err(RegisterFailure::local)?;
    let mut conn = env.connect(mds);
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
        } if !control => {
            let expected = maat_proto::login::registered_mac(join, &mds_verifying_key, &nonce);
            if maat_crypto::ct_eq(&expected, &mac) {
                Ok((mds_verifying_key, None))
            } else {
                Err(RegisterFailure::local("registration answer has a bad MAC"))
            }
        }
        MdsPlainResponse::RegisteredControl {
            mds_verifying_key,
            mds_sealing_key,
            mac,
        } if control => {
            let expected = maat_proto::control::registered_control_mac(
                join,
                &mds_verifying_key,
                &mds_sealing_key,
                &nonce,
            );
            if maat_crypto::ct_eq(&expected, &mac) {
                Ok((mds_verifying_key, Some(mds_sealing_key)))
            } else {
                Err(RegisterFailure::local("registration answer has a bad MAC"))
            }
        }
        _ => Err(RegisterFailure::local("unexpected answer to registration")),
    }
}
