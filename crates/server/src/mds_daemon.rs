//! The MDS daemon: a thin shell around `maat_mds::Mds` (redb store, key files, the
//! channels to OSDs and KDS instances, the accept loop).

use crate::leader::{self, Leader};
use crate::mds_store::MdsStore;
use crate::meta_store::RedbStore;
use crate::pg_store::PgStore;
use crate::serve::Handler;
use crate::shell::Shell;
use crate::{
    control, key_file_or_create_in, metrics, private, read_key_file, refusal_frame, write_key_file,
    Answer, Env, LatencyTimer, MdsFileConfig, ServerError, Shutdown,
};
use maat_crypto::Secret32;
use maat_mds::{Mds, MdsConfig, MdsSecrets, MetaStore};
use maat_proto::msg::{self, WireError};
use maat_proto::wire::FrameType;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File names of the MDS secrets in its key directory.
pub const MDS_KEY_FILES: [&str; 4] = ["signing.key", "sealing.key", "decoy.key", "opaque.key"];

/// The MDS secrets from their key files; missing ones are created, from the secrets a
/// format-0 store held (`legacy`) or at random. A cluster that already has a namespace
/// but lost a key file is refused: a new signing key would orphan every OSD and client.
fn mds_secrets(
    key_dir: &Path,
    legacy: Option<[Secret32; 3]>,
    initialized: bool,
    env: &Env,
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
    let fresh = env.with_rng(|mut rng| MdsSecrets::generate(&mut rng));
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

/// The MDS of `config`, opened as the daemon opens it (store, key files, secrets moved
/// out of a format-0 store), with its channels to the OSDs and KDS instances on `env`'s
/// network. Starts no thread and serves nothing: [`run_mds`] does that, a simulation
/// drives it by hand.
pub fn open_mds(config: &MdsFileConfig, env: &Env) -> Result<Arc<Mds<MdsStore>>, ServerError> {
    private::create_private_dir(&config.data_dir)?;
    let key_dir = config.key_dir();
    private::check_private(&key_dir)?;
    let (store, secrets) = match &config.meta_url {
        Some(url) => {
            let store = PgStore::open(url)?;
            let initialized = store.inode(maat_mds::ROOT_INODE)?.is_some();
            let secrets = mds_secrets(&key_dir, None, initialized, env)?;
            tracing::info!("metadata in PostgreSQL");
            (MdsStore::Postgres(store), secrets)
        }
        None => {
            let (store, secrets) = open_redb(config, &key_dir, env)?;
            (MdsStore::Redb(store), secrets)
        }
    };
    open_mds_with(config, env, store_with_hooks(store, env), secrets)
}

/// [`open_mds`] over `store`, a store of the simulator's own (several instances over one
/// shared database in one process, issue 42): the secrets come from the key files as
/// with PostgreSQL (the first instance makes them).
#[cfg(feature = "sim")]
pub fn open_mds_on(
    config: &MdsFileConfig,
    env: &Env,
    store: MdsStore,
) -> Result<Arc<Mds<MdsStore>>, ServerError> {
    private::create_private_dir(&config.data_dir)?;
    let key_dir = config.key_dir();
    private::check_private(&key_dir)?;
    let initialized = store.inode(maat_mds::ROOT_INODE)?.is_some();
    let secrets = mds_secrets(&key_dir, None, initialized, env)?;
    open_mds_with(config, env, store, secrets)
}

/// The MDS of `config` over `store`, opened with `secrets`.
fn open_mds_with(
    config: &MdsFileConfig,
    env: &Env,
    store: MdsStore,
    secrets: MdsSecrets,
) -> Result<Arc<Mds<MdsStore>>, ServerError> {
    let admin_key = key_file_or_create_in(&config.admin_key_file, env)?;
    let join_key = key_file_or_create_in(&config.join_key_file, env)?;
    let boot = env.now();
    let mds_config = MdsConfig {
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
        default_umask: config.default_umask()?,
        default_replicas: config.default_replicas()?,
    };
    let mds =
        env.with_rng(|mut rng| Mds::open(store, mds_config, secrets, &admin_key, boot, &mut rng))?;
    if let Some(path) = &config.public_keys_file {
        let text = format!(
            "mds_verifying_key = \"{}\"\nmds_sealing_key = \"{}\"\nmds_opaque_key = \"{}\"\n",
            hex::encode(mds.verifying_key()),
            hex::encode(mds.sealing_public_key()),
            hex::encode(mds.opaque_public_key())
        );
        private::replace_file(path, text.as_bytes())?;
    }
    // SPEC M9: a revocation reaches every OSD and KDS before the administrator hears it
    // is done.
    let kds_addresses = config.kds.clone();
    let pusher_env = env.clone();
    mds.set_revocation_pusher(Arc::new(move |notice, osds| {
        control::push_revocation(&pusher_env, notice, osds, &kds_addresses)
    }));
    // Administrative acts that bypass a user's own proof go to the log (issue 40).
    mds.set_audit_log(Arc::new(
        |event| tracing::warn!(target: "maat::audit", "{event}"),
    ));
    // SPEC T3: key commands to OSDs, on demand and from the maintenance thread.
    let t10_env = env.clone();
    mds.set_t10_channel(Arc::new(move |osd, request| {
        control::osd_plain_call(&t10_env, osd, request).map_err(maat_mds::ChannelError::from)
    }));
    Ok(Arc::new(mds))
}

/// The redb store under the MDS's data directory, and the MDS secrets (moved out of a
/// format-0 store into key files, the store then rewritten fresh).
fn open_redb(
    config: &MdsFileConfig,
    key_dir: &std::path::Path,
    env: &Env,
) -> Result<(RedbStore, MdsSecrets), ServerError> {
    let db_path = config.data_dir.join("meta.redb");
    private::check_private(&db_path)?;
    let mut store = RedbStore::open(&db_path)?;
    store.set_group_commit(config.group_commit);
    let initialized = store.inode(maat_mds::ROOT_INODE)?.is_some();
    let legacy = MdsSecrets::legacy_from_store(&store)?;
    let moved = legacy.is_some();
    let secrets = mds_secrets(key_dir, legacy, initialized, env)?;
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
        tracing::info!(
            from = %db_path.display(),
            to = %key_dir.display(),
            "moved the MDS secrets out of the database into key files"
        );
    }
    Ok((store, secrets))
}

/// The daemon's hooks on its store: a commit that may be half on disk (redb: a failed
/// fsync) or whose outcome is unknown (PostgreSQL: the connection died after COMMIT was
/// sent) ends the daemon, which restarts from what the store holds; and a simulation's
/// disk faults.
fn store_with_hooks(store: MdsStore, env: &Env) -> MdsStore {
    match store {
        MdsStore::Redb(s) => {
            s.on_failure(env.store_failed_hook());
            #[cfg(feature = "sim")]
            let s = s.with_faults(env.storage_faults());
            MdsStore::Redb(s)
        }
        MdsStore::Postgres(s) => {
            s.on_failure(env.store_failed_hook());
            MdsStore::Postgres(s)
        }
        #[cfg(feature = "sim")]
        store @ MdsStore::Simulated(_) => store,
    }
}

/// The MDS's frame handler: what it answers to each frame, timed into `latencies`.
pub fn mds_handler(
    mds: Arc<Mds<MdsStore>>,
    env: Env,
    latencies: Arc<metrics::Latencies>,
) -> Arc<Handler> {
    Arc::new(
        move |peer: &[u8], frame_type: FrameType, payload: &[u8]| -> Answer {
            let mut timer = LatencyTimer::start(&latencies, frame_type);
            let now = env.now();
            let answer = match frame_type {
                FrameType::Plain => (
                    FrameType::Plain,
                    env.with_rng(|mut rng| mds.handle_plain(peer, payload, now, &mut rng)),
                ),
                FrameType::Request => {
                    let (name, answer) =
                        env.with_rng(|mut rng| mds.handle_request_named(payload, now, &mut rng));
                    timer.request = name.unwrap_or("-");
                    match answer {
                        Ok(sealed) => (FrameType::Response, sealed),
                        Err(refusal) => refusal_frame(&refusal),
                    }
                }
                FrameType::Insecure => {
                    let answer: Answer = (
                        FrameType::Plain,
                        env.with_rng(|mut rng| mds.handle_insecure(payload, now, &mut rng)),
                    )
                        .into();
                    // A daemon that takes NOSEC requests has no key to ask for.
                    return if mds.allows_insecure() {
                        answer.proving()
                    } else {
                        answer
                    };
                }
                FrameType::SecRequest | FrameType::T10Request | FrameType::InsecureBulk => {
                    refusal_frame(&WireError::new(
                        msg::ErrorCode::Malformed,
                        "the MDS takes version-1 envelopes only",
                    ))
                }
                FrameType::Response
                | FrameType::SecResponse
                | FrameType::Refusal
                | FrameType::PlainBulk => refusal_frame(&WireError::new(
                    msg::ErrorCode::Malformed,
                    "unexpected frame type",
                )),
            };
            answer.into()
        },
    )
}

/// Runs the MDS until `shutdown` fires. `ready` is called with the bound address once
/// the daemon serves.
pub fn run_mds(
    config: &MdsFileConfig,
    shutdown: &Shutdown,
    ready: impl FnOnce(&str),
) -> Result<(), ServerError> {
    let env = Env::system();
    let mds = open_mds(config, &env)?;
    let shell = Shell::bind(&config.listen)?;
    // Issue 42: the singleton duties run where the store's lease is held. (Asked once
    // before the maintenance starts, so that a lone instance leads from its start.)
    let leader = Arc::new(Leader::new(leader::holder_name(&config.data_dir)));
    leader.renew(mds.as_ref(), &env);
    {
        let leader = leader.clone();
        mds.set_leadership_probe(Box::new(move || leader.token()));
    }
    {
        let (mds, leader) = (mds.clone(), leader.clone());
        let stop = shutdown.clone();
        let env = env.clone();
        std::thread::spawn(move || leader.run(mds.as_ref(), &env, &stop));
    }
    {
        let (mds, leader) = (mds.clone(), leader.clone());
        let stop = shutdown.clone();
        let env = env.clone();
        std::thread::spawn(move || {
            control::t10_maintenance(mds.as_ref(), &env, &stop, &|| leader.is_leader())
        });
    }
    let local = shell.local.clone();
    let source = mds.clone();
    shell.serve(
        "mds",
        config.metrics.as_deref(),
        &config.data_dir,
        Arc::new(move || source.stats()),
        |latencies| mds_handler(mds, env, latencies),
        shutdown,
        &local,
        ready,
    )
}
