//! A whole Maat cluster in one process: the MDS, OSDs and a KDS opened by the daemons' own
//! code (`maat_server::open_mds`, `open_osd`, `open_kds`) and served by their own frame
//! handlers, with clients of `maat_client`, all on an in-process network
//! ([`maat_net::MemoryNet`]) instead of sockets, on one simulated clock, every random
//! generator seeded from one number. Nothing runs in the background: periodic work
//! (revocation catch-ups, T10 key upkeep) runs when the test calls [`SimCluster::tick`]
//! or [`SimCluster::advance`], and time moves only when it calls the latter.
//!
//! A single-threaded test is therefore repeatable byte for byte:
//! [`SimCluster::transcript`] digests every frame exchanged, and two runs from one seed
//! give the same digest. This is the seed of a deterministic simulator (quinn's `Pair`,
//! FoundationDB's and TigerBeetle's simulators): what is still real here is listed in
//! docs/ARCHITECTURE.md (files in a temporary directory, fsync included).

use maat_client::{Client, ClusterFile, Credential};
use maat_kds::Kds;
use maat_mds::Mds;
use maat_net::memory::Peer;
use maat_net::{MemoryNet, Network};
use maat_proto::UnixMillis;
use maat_server::faults::StorageFaults;
use maat_server::mds_store::MdsStore;
use maat_server::{Env, Handler, OsdNode};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

mod instances;
pub mod shared_store;
mod start;

pub use instances::mds_address;
use instances::MdsSlot;
use shared_store::SharedDb;

/// The MDS's address on the in-process network.
pub const MDS: &str = "mds";
/// The KDS's address.
pub const KDS: &str = "kds-1";

/// The address of OSD `id`.
pub fn osd_address(id: u64) -> String {
    format!("osd-{id}")
}

/// Where the simulated clock starts (2027-01-15, UTC).
pub const EPOCH: UnixMillis = UnixMillis(1_800_000_000_000);

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A daemon failed to open.
    #[error(transparent)]
    Server(#[from] maat_server::ServerError),
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] maat_client::ClientError),
    /// Setting the cluster up failed.
    #[error("setting up the simulated cluster: {0}")]
    Setup(String),
}

/// What a simulated task's panic said (its message), for a test's report.
pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn setup(what: impl std::fmt::Display) -> SimError {
    SimError::Setup(what.to_string())
}

/// A cluster of one MDS, one KDS and some OSDs in this process.
pub struct SimCluster {
    net: MemoryNet,
    clock: Arc<AtomicU64>,
    /// How far every OSD's clock is from the MDS's, in ms (SPEC T7: hosts need not agree).
    osd_skew: Arc<AtomicI64>,
    seed: u64,
    clients_made: AtomicU64,
    /// The daemons, shared with the periodic work the scheduler runs.
    daemons: Arc<Daemons>,
    storage_faults: Arc<StorageFaults>,
    cluster: ClusterFile,
    admin_key: [u8; 32],
    transcript: Arc<Mutex<blake3::Hasher>>,
    /// Holds every file the daemons keep (dropped last).
    _dir: tempfile::TempDir,
}

/// The daemons of a simulated cluster, as their periodic work sees them.
struct Daemons {
    /// The MDS instances: one over its redb file, or several over `shared` (issue 42).
    /// An instance whose store failed for good (a commit's fsync failed, its database
    /// connection was lost) raises its flag, and the next periodic work restarts it, as
    /// `maat up` restarts a daemon that exited.
    instances: Vec<MdsSlot>,
    /// The database several instances share.
    shared: Option<Arc<SharedDb>>,
    mds_config: maat_server::MdsFileConfig,
    net: MemoryNet,
    /// MDS restarts after a failed store.
    mds_restarts: AtomicU64,
    /// Whether an instance over the shared database whose connection broke leaves the
    /// network at once (see [`MdsInstances::keep_failed_answering`]).
    failed_exit: Arc<AtomicBool>,
    /// Every data access an OSD authorized, with its file's owner and mode then.
    accesses: Arc<Mutex<Vec<Access>>>,
    osds: Mutex<Vec<SimOsd>>,
    kds: Arc<Kds>,
    kds_env: Env,
}

/// A data access an OSD authorized (a command that passed its capability check and
/// reached the store), as [`SimCluster::accesses`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// When (the OSD's clock).
    pub at: UnixMillis,
    /// The OSD.
    pub osd: u64,
    /// The caller's user.
    pub user: u64,
    /// The file (inode) and stripe.
    pub file: u64,
    /// Whether the command writes (else it reads).
    pub writes: bool,
    /// The file's owner and permission bits at the MDS at that moment; `None`: removed,
    /// or the MDS was restarting.
    pub owner: Option<(u64, u16)>,
}

/// An OSD of the simulation: the daemon, its environment, and the config it reopens from.
struct SimOsd {
    node: Arc<OsdNode>,
    env: Env,
    config: maat_server::OsdFileConfig,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemons {
    /// The periodic work of every daemon, once: each OSD and the KDS catch up on the
    /// revocations in force, and the MDS brings the OSDs' T10 keys up to its policy.
    fn tick(&self) -> Result<(), SimError> {
        for slot in &self.instances {
            if slot.failed.load(Ordering::SeqCst) {
                slot.restart(&self.net, &self.mds_config, self.shared.as_ref())?;
                self.mds_restarts.fetch_add(1, Ordering::SeqCst);
            }
        }
        let osds: Vec<(Arc<OsdNode>, Env)> = locked(&self.osds)
            .iter()
            .map(|o| (o.node.clone(), o.env.clone()))
            .collect();
        for (node, env) in osds {
            // An OSD cut off from the MDS (`SimCluster::cut_from_mds`) fails its
            // check-in, as its thread would, and tries again at the next tick.
            let cut = self.net.is_cut(&osd_address(node.id()));
            match node.sync_revocations(&env) {
                Err(_) if cut => {}
                other => other.map_err(setup)?,
            }
        }
        if let [only] = self.instances.as_slice() {
            maat_server::sync_kds_revocations(&self.kds, MDS, &self.kds_env).map_err(setup)?;
            let Some(mds) = only.get() else {
                return Err(setup("the MDS is restarting"));
            };
            return only.t10_upkeep(&mds);
        }
        // Several instances: the KDS asks one that runs, and the leader keeps the keys.
        let mut asked = Err(setup("no MDS instance runs"));
        for slot in self.instances.iter().filter(|s| s.get().is_some()) {
            asked = maat_server::sync_kds_revocations(&self.kds, &slot.address, &self.kds_env)
                .map_err(setup);
            if asked.is_ok() {
                break;
            }
        }
        asked?;
        instances::lead(&self.instances)
    }

    /// An instance that runs (the first that does).
    fn any_mds(&self) -> Option<Arc<Mds<MdsStore>>> {
        self.instances.iter().find_map(MdsSlot::get)
    }
}

impl Daemons {
    /// The observer an OSD tells of each access it authorizes: records it, with the
    /// file's owner and mode looked up at the MDS then.
    fn access_observer(self: &Arc<Self>, osd: u64) -> maat_osd::AccessObserver {
        let daemons = Arc::downgrade(self);
        Arc::new(move |user, auth, at| {
            let Some(d) = daemons.upgrade() else {
                return;
            };
            let file = auth.object().file;
            let owner = d
                .any_mds()
                .and_then(|mds| mds.inode_owner(file).ok().flatten());
            locked(&d.accesses).push(Access {
                at,
                osd,
                user: user.0,
                file,
                writes: auth.mode().allows(maat_proto::capability::Mode::WRITE),
                owner,
            });
        })
    }
}

/// Opens the OSD of `config` as the daemon does and serves it at its address on `net`.
fn serve_osd(
    net: &MemoryNet,
    config: maat_server::OsdFileConfig,
    env: Env,
    observer: maat_osd::AccessObserver,
) -> Result<SimOsd, SimError> {
    let address = osd_address(config.id);
    let node = Arc::new(maat_server::open_osd(&config, &address, &env)?);
    node.core.observe_access(observer);
    net.attach(
        address,
        peer(node.handler(
            env.clone(),
            Arc::new(maat_server::metrics::Latencies::default()),
        )),
    );
    Ok(SimOsd { node, env, config })
}

/// The frame handler of a daemon as a peer of the in-process network (every peer
/// connects from 127.0.0.1).
fn peer(handler: Arc<Handler>) -> Peer {
    Arc::new(move |frame_type, payload| {
        let answer = handler(&[127, 0, 0, 1], frame_type, payload);
        let frame_type = answer.frame_type;
        match answer.payload() {
            Ok(payload) => (frame_type, payload),
            Err(e) => maat_server::refusal_frame(&maat_proto::msg::WireError::new(
                maat_proto::msg::ErrorCode::Internal,
                format!("reading the object: {e}"),
            )),
        }
    })
}

impl SimCluster {
    /// The periodic work of every daemon, once: each OSD and the KDS catch up on the
    /// revocations in force, and the MDS brings the OSDs' T10 keys up to its policy.
    pub fn tick(&self) -> Result<(), SimError> {
        self.daemons.tick()
    }

    /// Starts `f` as a simulated task (a client operation on a thread of its own, run
    /// when [`SimCluster::run`] gives it the turn).
    pub fn spawn<T: Send + 'static>(
        &self,
        name: impl Into<String>,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> maat_net::memory::Task<T> {
        self.net.spawn(name, f)
    }

    /// Runs the tasks, the frames between them and the daemons, and the daemons'
    /// periodic work, until nothing is left (or the simulated time `until`).
    pub fn run(&self, until: Option<UnixMillis>) -> maat_net::memory::Run {
        self.net.run(until.map(|u| u.0))
    }

    /// OSD `id`'s calls to every MDS instance fail until the simulated time `until`,
    /// while clients still reach it (issue 41: the OSD's lease).
    pub fn cut_from_mds(&self, id: u64, until: UnixMillis) {
        for i in 0..self.daemons.instances.len() {
            self.net.cut(&osd_address(id), &mds_address(i), until.0);
        }
    }

    /// The simulated clock itself (what the scheduler moves), for tasks that read it.
    pub fn clock(&self) -> Arc<AtomicU64> {
        self.clock.clone()
    }

    /// The simulated time now.
    pub fn now(&self) -> UnixMillis {
        UnixMillis(self.clock.load(Ordering::SeqCst))
    }

    /// Moves the clock on by `millis`, then runs the daemons' periodic work once (as
    /// their threads would have done by then: each task is a catch-up, so once at the end
    /// is what any number in between would leave).
    pub fn advance(&self, millis: u64) -> Result<(), SimError> {
        self.advance_quietly(millis);
        self.tick()
    }

    /// Sets every OSD's clock `millis` from the MDS's (negative: behind), from now on.
    pub fn set_osd_clock_skew(&self, millis: i64) {
        self.osd_skew.store(millis, Ordering::SeqCst);
    }

    /// Moves the clock on by `millis` and nothing else (a daemon's periodic work is then
    /// overdue, as if its thread had stalled).
    pub fn advance_quietly(&self, millis: u64) {
        self.clock.fetch_add(millis, Ordering::SeqCst);
    }

    /// The KDS (its counters).
    pub fn kds(&self) -> &Kds {
        &self.daemons.kds
    }

    /// The in-process network (for faults: a peer down, answers lost).
    pub fn net(&self) -> &MemoryNet {
        &self.net
    }

    /// The MDS (the first instance).
    pub fn mds(&self) -> Result<Arc<Mds<MdsStore>>, SimError> {
        self.daemons
            .instances
            .first()
            .and_then(MdsSlot::get)
            .ok_or_else(|| setup("the MDS is restarting"))
    }

    /// Stops the MDS (its database closed, everything not on disk gone) and opens it
    /// again from its files, as a restart of the daemon does; then lets its restart
    /// grace (SPEC T7) pass.
    pub fn restart_mds(&mut self) -> Result<(), SimError> {
        self.mds_instances().restart(0)?;
        self.advance_quietly(1_000);
        Ok(())
    }

    /// A handle on the MDS instances that a simulated task may keep (to crash one).
    pub fn mds_instances(&self) -> MdsInstances {
        MdsInstances(self.daemons.clone())
    }

    /// The disks' faults (every daemon's: the MDS's database, the OSDs' object files);
    /// none strike until [`StorageFaults::set_rates`] says.
    pub fn storage_faults(&self) -> Arc<StorageFaults> {
        self.storage_faults.clone()
    }

    /// Every data access the OSDs authorized so far, in order.
    pub fn accesses(&self) -> Vec<Access> {
        locked(&self.daemons.accesses).clone()
    }

    /// How often the MDS restarted because its store failed for good.
    pub fn mds_restarts(&self) -> u64 {
        self.daemons.mds_restarts.load(Ordering::SeqCst)
    }

    /// Stops OSD `id` (its sessions, caches and revocations in memory gone) and opens it
    /// again from its files; it registers and catches up before it serves, as the
    /// daemon does.
    pub fn restart_osd(&mut self, id: u64) -> Result<(), SimError> {
        let mut osds = locked(&self.daemons.osds);
        let slot = usize::try_from(id)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| osds.get_mut(i))
            .ok_or_else(|| setup(format!("no osd {id}")))?;
        self.net.detach(&osd_address(id));
        let observer = self.daemons.access_observer(id);
        let osd = serve_osd(&self.net, slot.config.clone(), slot.env.clone(), observer)?;
        osd.node.register(&osd.env).map_err(setup)?;
        osd.node.sync_revocations(&osd.env).map_err(setup)?;
        *slot = osd;
        Ok(())
    }

    /// OSD `id` loses its disk's objects (issue 41: a replaced disk): stopped, every
    /// object file deleted (its identity and T10 keys stay, as an OSD re-made under the
    /// same id would have them), started again as [`SimCluster::restart_osd`] does.
    /// Returns how many object files went.
    pub fn lose_osd_objects(&mut self, id: u64) -> Result<usize, SimError> {
        let objects = {
            let osds = locked(&self.daemons.osds);
            let slot = usize::try_from(id)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| osds.get(i))
                .ok_or_else(|| setup(format!("no osd {id}")))?;
            slot.config.data_dir.join("objects")
        };
        self.net.detach(&osd_address(id));
        let mut lost = 0;
        let mut stack = vec![objects];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.map_err(setup)?.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    std::fs::remove_file(&path).map_err(setup)?;
                    lost += 1;
                }
            }
        }
        self.restart_osd(id)?;
        Ok(lost)
    }

    /// OSD `id`.
    pub fn osd(&self, id: u64) -> Option<Arc<OsdNode>> {
        locked(&self.daemons.osds)
            .get(usize::try_from(id).ok()?.checked_sub(1)?)
            .map(|o| o.node.clone())
    }

    /// A new client, not logged in, on the simulated clock and network, its generator
    /// seeded from the cluster's seed and how many clients came before it.
    pub fn client(&self) -> Result<Client, SimError> {
        let n = self.clients_made.fetch_add(1, Ordering::SeqCst);
        let time = self.clock.clone();
        let net = self.net.clone();
        Ok(Client::new(self.cluster.clone(), None)?
            .with_network(Network::Memory(self.net.clone()))
            .simulated(
                Arc::new(move || time.load(Ordering::SeqCst)),
                // A client that waits lets simulated time pass: a task sleeps until its
                // timer (others run meanwhile); outside a task the clock moves on.
                Arc::new(move |millis| net.sleep(millis)),
                mix(self.seed, 1_000 + n),
            ))
    }

    /// A new client logged in as the administrator.
    pub fn admin(&self) -> Result<Client, SimError> {
        let c = self.client()?;
        c.login(
            "admin",
            Credential::Key(maat_crypto::Secret32::from_bytes(self.admin_key)),
        )?;
        Ok(c)
    }

    /// Adds the user `name` with `passphrase` (as `admin`, the administrator) and returns
    /// a new client logged in as them.
    pub fn user(
        &self,
        admin: &mut Client,
        name: &str,
        passphrase: &[u8],
    ) -> Result<Client, SimError> {
        admin.user_add(
            name,
            &[],
            passphrase,
            maat_crypto::kdf::PassphraseParams::DEFAULT,
        )?;
        let c = self.client()?;
        c.login(name, Credential::Passphrase(passphrase))?;
        Ok(c)
    }

    /// A digest of every frame exchanged so far (address, request, answer, in order).
    pub fn transcript(&self) -> [u8; 32] {
        *self
            .transcript
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .finalize()
            .as_bytes()
    }
}

/// The MDS instances of a [`SimCluster`], for a task that crashes them.
#[derive(Clone)]
pub struct MdsInstances(Arc<Daemons>);

impl MdsInstances {
    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.instances.len()
    }

    /// Whether there are none (never: a cluster has one at least).
    pub fn is_empty(&self) -> bool {
        self.0.instances.is_empty()
    }

    /// Crashes instance `index` (everything it held in memory and any request it was
    /// serving lost; with a shared database, its connection broken) and starts it again
    /// from its files and the database, as `maat up` restarts a daemon that died.
    pub fn restart(&self, index: usize) -> Result<(), SimError> {
        let d = &self.0;
        let slot = d
            .instances
            .get(index)
            .ok_or_else(|| setup(format!("no MDS instance {index}")))?;
        slot.restart(&d.net, &d.mds_config, d.shared.as_ref())
    }

    /// Lets an instance whose database connection broke go on answering ("internal
    /// error") until the periodic work restarts it, instead of leaving the network at
    /// once as the daemon does: the first several-instances model, for the seeds found
    /// under it.
    pub fn keep_failed_answering(&self) {
        self.0.failed_exit.store(false, Ordering::SeqCst);
    }

    /// Makes the shared database's next unit commit (a change sent as `Once`) fail as a
    /// lost connection does, applied first if `applied` (nothing without a shared
    /// database).
    pub fn fail_next_unit(&self, applied: bool) {
        if let Some(db) = &self.0.shared {
            db.fail_next_unit(applied);
        }
    }

    /// Changes that the shared database applied but reported as failed (the instance
    /// died not knowing whether it had committed): the exactly-once cases.
    pub fn applied_then_failed(&self) -> u64 {
        self.0
            .shared
            .as_ref()
            .map_or(0, |db| db.applied_then_failed())
    }
}

/// A generator seed for part `n` of the cluster seeded with `seed`.
fn mix(seed: u64, n: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(&n.to_le_bytes());
    let mut out = [0u8; 8];
    for (o, b) in out.iter_mut().zip(h.finalize().as_bytes()) {
        *o = *b;
    }
    u64::from_le_bytes(out)
}
