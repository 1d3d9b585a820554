//! The KDS daemon (SPEC H4): a thin shell around `maat_kds::Kds`. It reads its key file and
//! the MDS's public key at start and keeps nothing else, so any number of instances with
//! the same key file are interchangeable and a restarted one serves at once.

use crate::config::{public_key_from_file, KdsFileConfig};
use crate::{
    announce_metrics, bind, io, key_file_or_create, metrics, now, private, refusal_frame, serve,
    Answer, LatencyTimer, ServerError, Shutdown,
};
use maat_crypto::OsRng;
use maat_kds::{Kds, KdsSecrets};
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::wire::FrameType;
use std::sync::Arc;

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

/// Runs a KDS until `shutdown` fires.
pub fn run_kds(
    config: &KdsFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    private::create_private_dir(&config.run_dir)?;
    if let Some(dir) = config.key_file.parent() {
        private::create_private_dir(dir)?;
    }
    let seed = key_file_or_create(&config.key_file)?;
    if let Some(path) = &config.public_keys_file {
        private::replace_file(path, kds_public_keys_text(&seed)?.as_bytes())?;
    }
    let mds_key = public_key_from_file(&config.mds_public_keys_file, "mds_verifying_key")?;
    let kds = Arc::new(Kds::new(KdsSecrets::from_seed(&seed)?, &mds_key)?);
    let listener = bind(&config.listen)?;
    let local = listener
        .local_addr()
        .map_err(io("local address"))?
        .to_string();
    let latencies = Arc::new(metrics::Latencies::default());
    if let Some(listen) = &config.metrics {
        let source = kds.clone();
        let served = metrics::serve(listen, Arc::new(move || source.stats()), latencies.clone());
        announce_metrics(&config.run_dir, "kds", served)?;
    }
    let handler = move |_peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
        let mut timer = LatencyTimer::start(&latencies, frame_type);
        match frame_type {
            FrameType::Plain => {
                timer.request = "keys";
                (FrameType::Plain, kds.handle(payload, now(), &mut OsRng)).into()
            }
            _ => refusal_frame(&WireError::new(
                ErrorCode::Malformed,
                "a KDS takes Plain frames only",
            ))
            .into(),
        }
    };
    ready(&local);
    serve::serve(listener, Arc::new(handler), shutdown, "kds");
    Ok(())
}
