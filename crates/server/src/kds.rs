//! The KDS daemon (SPEC H4): a thin shell around `maat_kds::Kds`. It reads its key file and
//! the MDS's public key at start and keeps nothing else, so any number of instances with
//! the same key file are interchangeable and a restarted one serves at once.

use crate::config::{public_key_from_file, KdsFileConfig};
use crate::mds_addresses::MdsAddresses;
use crate::serve::Handler;
use crate::shell::Shell;
use crate::{
    control, key_file_or_create_in, metrics, private, refusal_frame, Answer, Env, LatencyTimer,
    ServerError, Shutdown,
};
use maat_kds::{Kds, KdsSecrets};
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::wire::FrameType;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The TOML text of a KDS public-keys file (what the MDS config's
/// `kds_public_keys_file` names).
pub fn kds_public_keys_text(seed: &[u8; 32]) -> Result<String, ServerError> {
    let keys = KdsSecrets::from_seed(seed)?.public_keys();
    Ok(format!(
        "kds_sealing_key = \"{}\"\nkds_verifying_key = \"{}\"\n",
        hex::encode(keys.sealing_key),
        hex::encode(keys.verifying_key)
    ))
}

use crate::limits::FIRST_REVOCATIONS_CHECK;

/// SPEC M9: learns the revocations in force from the MDS at `mds` before the KDS is
/// announced (for up to [`FIRST_REVOCATIONS_CHECK`]), then every second in a thread of
/// its own. Without an MDS address the KDS serves with no revocation check, and says so.
fn revocations(
    kds: &Arc<Kds>,
    mds: Option<Arc<MdsAddresses>>,
    env: &Env,
    shutdown: &Shutdown,
) -> Result<(), ServerError> {
    let Some(mds) = mds else {
        tracing::warn!(
            "the config names no `mds` address, so this KDS cannot learn revocations \
             (SPEC M9): revoked users and capabilities get keys until their capabilities \
             expire. Add `mds = \"HOST:PORT\"` to the config."
        );
        return kds
            .serve_without_revocations(env.now())
            .map_err(|e| maat_kds::KdsError::Revocations(e).into());
    };
    let started = Instant::now();
    while mds
        .call(|a| control::sync_kds_revocations(env, kds, a))
        .is_err()
        && started.elapsed() < FIRST_REVOCATIONS_CHECK
        && !shutdown.is_set()
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let kds = kds.clone();
    let stop = shutdown.clone();
    let env = env.clone();
    std::thread::spawn(move || {
        control::revocation_loop(mds.current(), &stop, || {
            mds.call(|a| control::sync_kds_revocations(&env, &kds, a))
                .map(|_| ())
        })
    });
    Ok(())
}

/// The KDS of `config`, opened as the daemon opens it (key file, public keys written).
/// Starts no thread, learns no revocation and serves nothing: [`run_kds`] does that, a
/// simulation drives it by hand.
pub fn open_kds(config: &KdsFileConfig, env: &Env) -> Result<Arc<Kds>, ServerError> {
    private::create_private_dir(&config.run_dir)?;
    if let Some(dir) = config.key_file.parent() {
        private::create_private_dir(dir)?;
    }
    let seed = key_file_or_create_in(&config.key_file, env)?;
    if let Some(path) = &config.public_keys_file {
        private::replace_file(path, kds_public_keys_text(&seed)?.as_bytes())?;
    }
    let mds_key = public_key_from_file(&config.mds_public_keys_file, "mds_verifying_key")?;
    Ok(Arc::new(Kds::new(KdsSecrets::from_seed(&seed)?, &mds_key)?))
}

/// One revocation catch-up of `kds` with the MDS at `mds` (SPEC M9); how many notices
/// are in force.
pub fn sync_kds_revocations(kds: &Kds, mds: &str, env: &Env) -> Result<usize, ServerError> {
    control::sync_kds_revocations(env, kds, mds)
}

/// The KDS's frame handler: what it answers to each frame, timed into `latencies`.
pub fn kds_handler(kds: Arc<Kds>, env: Env, latencies: Arc<metrics::Latencies>) -> Arc<Handler> {
    Arc::new(
        move |_peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
            let mut timer = LatencyTimer::start(&latencies, frame_type);
            match frame_type {
                FrameType::Plain => {
                    timer.request = "keys";
                    let now = env.now();
                    (
                        FrameType::Plain,
                        env.with_rng(|mut rng| kds.handle(payload, now, &mut rng)),
                    )
                        .into()
                }
                _ => refusal_frame(&WireError::new(
                    ErrorCode::Malformed,
                    "a KDS takes Plain frames only",
                ))
                .into(),
            }
        },
    )
}

/// Runs a KDS until `shutdown` fires.
pub fn run_kds(
    config: &KdsFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    let env = Env::system();
    let kds = open_kds(config, &env)?;
    let mds = config
        .mds
        .as_deref()
        .map(|first| Arc::new(MdsAddresses::new(first, &config.mds_others)));
    revocations(&kds, mds, &env, shutdown)?;
    let shell = Shell::bind(&config.listen)?;
    let local = shell.local.clone();
    let source = kds.clone();
    shell.serve(
        "kds",
        config.metrics.as_deref(),
        &config.run_dir,
        Arc::new(move || source.stats()),
        |latencies| kds_handler(kds, env, latencies),
        shutdown,
        &local,
        ready,
    )
}
