//! Starting a simulated cluster: the daemons' config files written as `maat up` writes
//! them, the daemons opened by their own code and attached to the in-process network,
//! the OSDs registered, and the periodic work scheduled.

use crate::instances::MdsSlot;
use crate::shared_store::SharedDb;
use crate::{
    locked, mds_address, mix, osd_address, peer, serve_osd, setup, Daemons, SimCluster, SimError,
    EPOCH, KDS, MDS,
};
use maat_client::ClusterFile;
use maat_net::MemoryNet;
use maat_proto::UnixMillis;
use maat_server::faults::StorageFaults;
use maat_server::Env;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

fn write(path: &Path, text: &str) -> Result<(), SimError> {
    std::fs::write(path, text).map_err(|e| setup(format!("{}: {e}", path.display())))
}

fn config<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, SimError> {
    toml::from_str(text).map_err(setup)
}

fn path_text(path: &Path) -> String {
    // TOML basic strings: a temporary directory's path needs no escapes but backslashes
    // and quotes, which are escaped anyway.
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

impl SimCluster {
    /// Starts a cluster of `osds` OSDs (ids 1..=osds), everything seeded from `seed`,
    /// the clock at [`EPOCH`]. Files are encrypted by default, as in `maat up`.
    pub fn start(seed: u64, osds: u64) -> Result<Self, SimError> {
        Self::start_with_lifetime(
            seed,
            osds,
            maat_proto::limits::CAPABILITY_LIFETIME_MILLIS_DEFAULT / 1000,
        )
    }

    /// [`SimCluster::start`] with capabilities that last `lifetime_secs` (short ones bring
    /// expiry and renewal into a short run).
    pub fn start_with_lifetime(seed: u64, osds: u64, lifetime_secs: u64) -> Result<Self, SimError> {
        Self::start_instances(seed, osds, lifetime_secs, 1)
    }

    /// [`SimCluster::start_with_lifetime`] with `instances` MDS instances: one runs over
    /// its redb file; two or more share one database ([`shared_store::SharedDb`], on the
    /// disk faults of [`SimCluster::storage_faults`]), at [`mds_address`] 0, 1, ...,
    /// listed in the cluster file and in the OSDs' and KDS's configs (issue 42).
    pub fn start_instances(
        seed: u64,
        osds: u64,
        lifetime_secs: u64,
        instances: usize,
    ) -> Result<Self, SimError> {
        let instances = instances.max(1);
        let others: Vec<String> = (1..instances).map(mds_address).collect();
        // Config lines naming the other instances (none for one: the configs stay as
        // they were before instances existed, and so do the seeds' runs).
        let others_line = match others.is_empty() {
            true => String::new(),
            false => format!(
                "mds_others = [{}]\n",
                others
                    .iter()
                    .map(|o| format!("\"{o}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let dir = tempfile::tempdir().map_err(setup)?;
        let root = dir.path();
        let net = MemoryNet::new();
        let clock = Arc::new(AtomicU64::new(EPOCH.0));
        // The scheduler moves this clock and draws its choices from the seed.
        net.set_clock(clock.clone());
        net.set_seed(mix(seed, 7));
        let time = clock.clone();
        let clock_fn: maat_server::Clock =
            Arc::new(move || UnixMillis(time.load(Ordering::SeqCst)));
        // Each daemon draws from its own generator, seeded from `seed` and its place.
        let env = |n: u64| Env::simulated(net.clone(), clock_fn.clone(), mix(seed, n));
        // The OSDs' clock: the MDS's plus a skew the test may set (`set_osd_clock_skew`).
        let osd_skew = Arc::new(AtomicI64::new(0));
        let (time, skew) = (clock.clone(), osd_skew.clone());
        let osd_clock_fn: maat_server::Clock = Arc::new(move || {
            let t = time.load(Ordering::SeqCst);
            UnixMillis(t.saturating_add_signed(skew.load(Ordering::SeqCst)))
        });
        // Each OSD calls as itself, so that a test can cut it off from the MDS alone.
        let osd_env = |id: u64| {
            let party = net.as_party(&osd_address(id));
            Env::simulated(party, osd_clock_fn.clone(), mix(seed, 1 + id))
        };
        let transcript = Arc::new(Mutex::new(blake3::Hasher::new()));
        {
            let t = transcript.clone();
            net.observe(Arc::new(move |x: &maat_net::memory::Exchange<'_>| {
                let mut h = t.lock().unwrap_or_else(PoisonError::into_inner);
                for part in [x.to.as_bytes(), x.request, x.answer] {
                    h.update(&(part.len() as u64).to_le_bytes());
                    h.update(part);
                }
            }));
        }

        // The KDS key comes first: the MDS config names its public keys.
        let kds_env = env(1);
        let kds_dir = root.join("kds");
        std::fs::create_dir(&kds_dir).map_err(setup)?;
        let kds_key = kds_dir.join("kds.key");
        maat_server::write_key_file(&kds_key, &kds_env.random32())?;

        // Every daemon's disk fails as the test says (no faults until it does).
        let storage_faults = Arc::new(StorageFaults::new(mix(seed, 11)));
        let failed_exit = Arc::new(AtomicBool::new(instances > 1));
        let slots: Vec<MdsSlot> = (0..instances)
            .map(|i| {
                let failed = Arc::new(AtomicBool::new(false));
                let raise = failed.clone();
                let n = if i == 0 { 0 } else { 500 + i as u64 };
                // An instance whose database connection broke exits, as the daemon
                // does: its address refuses connections until it is restarted, so that
                // clients move to another instance. (One instance over redb keeps
                // answering until then, as it did before there were instances: its
                // seeds replay as they were found.)
                let (exits, address) = (failed_exit.clone(), mds_address(i));
                let net = net.clone();
                let env = env(n)
                    .with_storage_faults(storage_faults.clone())
                    .on_store_failed(Arc::new(move |_why: &str| {
                        raise.store(true, Ordering::SeqCst);
                        if exits.load(Ordering::SeqCst) {
                            // Nothing it was still serving is answered either.
                            net.lose_answers(&address, u32::MAX);
                            net.detach(&address);
                        }
                    }));
                MdsSlot::new(i, env, failed)
            })
            .collect();
        let shared = (instances > 1).then(|| SharedDb::new(storage_faults.clone()));
        let mds_config: maat_server::MdsFileConfig = config(&format!(
            "listen = \"{MDS}\"\n\
             data_dir = \"{data}\"\n\
             admin_key_file = \"{admin}\"\n\
             join_key_file = \"{join}\"\n\
             public_keys_file = \"{public}\"\n\
             kds = [\"{KDS}\"]\n\
             kds_public_keys_file = \"{kds_public}\"\n\
             capability_lifetime_secs = {lifetime_secs}\n",
            data = path_text(&root.join("mds")),
            admin = path_text(&root.join("admin.key")),
            join = path_text(&root.join("join.key")),
            public = path_text(&root.join("mds.pub")),
            kds_public = path_text(&root.join("kds.pub")),
        ))?;
        let kds_config: maat_server::KdsFileConfig = config(&format!(
            "listen = \"{KDS}\"\n\
             key_file = \"{key}\"\n\
             public_keys_file = \"{public}\"\n\
             mds_public_keys_file = \"{mds_public}\"\n\
             run_dir = \"{run}\"\n\
             mds = \"{MDS}\"\n\
             {others_line}",
            key = path_text(&kds_key),
            public = path_text(&root.join("kds.pub")),
            mds_public = path_text(&root.join("mds.pub")),
            run = path_text(&kds_dir),
        ))?;
        let seed_bytes = maat_server::read_key_file(&kds_key)?;
        write(
            &root.join("kds.pub"),
            &maat_server::kds_public_keys_text(&seed_bytes)?,
        )?;

        let mut mds = None;
        for slot in &slots {
            let opened = slot.serve(&net, &mds_config, shared.as_ref())?;
            mds.get_or_insert(opened);
        }
        let mds = mds.ok_or_else(|| setup("no MDS instance"))?;
        let kds = maat_server::open_kds(&kds_config, &kds_env)?;
        net.attach(
            KDS,
            peer(maat_server::kds_handler(
                kds.clone(),
                kds_env.clone(),
                Arc::new(maat_server::metrics::Latencies::default()),
            )),
        );
        let cluster = ClusterFile {
            mds: MDS.into(),
            mds_verifying_key: hex::encode(mds.verifying_key()),
            mds_sealing_key: hex::encode(mds.sealing_public_key()),
            mds_opaque_key: Some(hex::encode(mds.opaque_public_key())),
            mds_others: others.clone(),
        };
        let daemons = Arc::new(Daemons {
            instances: slots,
            shared,
            mds_config: mds_config.clone(),
            net: net.clone(),
            mds_restarts: AtomicU64::new(0),
            failed_exit,
            accesses: Arc::default(),
            osds: Mutex::new(Vec::new()),
            kds,
            kds_env,
        });
        for id in 1..=osds {
            let osd_config: maat_server::OsdFileConfig = config(&format!(
                "id = {id}\n\
                 listen = \"{address}\"\n\
                 data_dir = \"{data}\"\n\
                 mds = \"{MDS}\"\n\
                 {others_line}\
                 join_key_file = \"{join}\"\n",
                address = osd_address(id),
                data = path_text(&root.join(osd_address(id))),
                join = path_text(&root.join("join.key")),
            ))?;
            let env = osd_env(id).with_storage_faults(storage_faults.clone());
            let osd = serve_osd(&net, osd_config, env, daemons.access_observer(id))?;
            locked(&daemons.osds).push(osd);
        }
        let admin_key = maat_server::read_key_file(&root.join("admin.key"))?;
        let sim = SimCluster {
            net,
            clock,
            osd_skew,
            seed,
            clients_made: AtomicU64::new(0),
            daemons,
            storage_faults,
            cluster,
            admin_key,
            transcript,
            _dir: dir,
        };
        // A daemon refuses requests dated inside its first 500 ms (SPEC T7).
        sim.advance_quietly(1_000);
        for osd in locked(&sim.daemons.osds).iter() {
            osd.node.register(&osd.env).map_err(setup)?;
        }
        sim.tick()?;
        // While the scheduler runs, the daemons' periodic work runs every second of
        // simulated time, as their threads do (a failed catch-up is retried next time,
        // as there).
        let daemons = sim.daemons.clone();
        sim.net.every(
            maat_server::limits::REVOCATION_POLL.as_millis() as u64,
            Arc::new(move || {
                let _ = daemons.tick();
            }),
        );
        Ok(sim)
    }
}
