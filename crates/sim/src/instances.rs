//! The MDS instances of a simulated cluster: one over its redb file (the default), or
//! several over one [`SharedDb`] (issue 42), each at an address of its own, restarted
//! when its store fails, and the singleton duties run where the leader lease is held.

use crate::shared_store::SharedDb;
use crate::{locked, peer, setup, SimError};
use maat_mds::Mds;
use maat_net::MemoryNet;
use maat_server::mds_store::MdsStore;
use maat_server::Env;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The address of MDS instance `index` (0-based): [`crate::MDS`] for the first.
pub fn mds_address(index: usize) -> String {
    match index {
        0 => crate::MDS.to_string(),
        n => format!("{}-{}", crate::MDS, n + 1),
    }
}

/// One MDS instance: the daemon (`None` while it restarts), its environment, and the
/// flag its store raises when it failed for good.
pub(crate) struct MdsSlot {
    pub(crate) address: String,
    pub(crate) mds: Mutex<Option<Arc<Mds<MdsStore>>>>,
    pub(crate) env: Env,
    pub(crate) failed: Arc<AtomicBool>,
    /// The connection the running instance holds to the shared database, broken when
    /// the instance crashes (so that requests it is still serving fail, as a killed
    /// process's would).
    connection: Mutex<Option<Arc<AtomicBool>>>,
    /// The leader lease this instance was last granted: until when (protocol ms) and
    /// its fencing token, as the daemon's `Leader` keeps it; the instance's leadership
    /// probe reads it, so that its key commands go fenced as the daemon's do (issue 42).
    grant: Arc<Mutex<Option<(u64, u64)>>>,
}

impl MdsSlot {
    /// A slot for instance `index` on `env` (whose store-failed hook must raise `failed`).
    pub(crate) fn new(index: usize, env: Env, failed: Arc<AtomicBool>) -> Self {
        Self {
            address: mds_address(index),
            mds: Mutex::new(None),
            env,
            failed,
            connection: Mutex::new(None),
            grant: Arc::new(Mutex::new(None)),
        }
    }

    /// The running daemon.
    pub(crate) fn get(&self) -> Option<Arc<Mds<MdsStore>>> {
        locked(&self.mds).clone()
    }

    /// Opens the instance as the daemon does (over `shared`, or its redb file) and
    /// serves it at its address on `net`.
    pub(crate) fn serve(
        &self,
        net: &MemoryNet,
        config: &maat_server::MdsFileConfig,
        shared: Option<&Arc<SharedDb>>,
    ) -> Result<Arc<Mds<MdsStore>>, SimError> {
        let mds = match shared {
            Some(db) => {
                let connection = db.connect(self.env.store_failed_hook());
                *locked(&self.connection) = Some(connection.breaker());
                let store = MdsStore::Simulated(Box::new(connection));
                maat_server::open_mds_on(config, &self.env, store)?
            }
            None => maat_server::open_mds(config, &self.env)?,
        };
        // As the daemon: leadership is what the last grant says, until it runs out. An
        // instance alone (over its redb file) is granted at its start for good, under
        // token 1, as the daemon's first renewal grants a lone instance.
        if shared.is_none() {
            // (Taken through the MDS, which keeps its grant for the leader-only commits
            // it fences.)
            let state = mds
                .lease(
                    maat_server::leader::LEADER_LEASE,
                    &self.address,
                    u64::MAX,
                    self.env.now(),
                )
                .map_err(|e| crate::setup(format!("the leader lease of a lone instance: {e}")))?;
            *locked(&self.grant) = Some((u64::MAX, state.token));
        }
        let (grant, env) = (self.grant.clone(), self.env.clone());
        mds.set_leadership_probe(Box::new(move || {
            let now = env.now().0;
            locked(&grant)
                .filter(|(until, _)| now < *until)
                .map(|(_, token)| token)
        }));
        net.attach(
            self.address.clone(),
            peer(maat_server::mds_handler(
                mds.clone(),
                self.env.clone(),
                Arc::new(maat_server::metrics::Latencies::default()),
            )),
        );
        *locked(&self.mds) = Some(mds.clone());
        Ok(mds)
    }

    /// Stops the instance (a crash: its connection to a shared database broken, its
    /// memory gone) and opens it again from its files and the database.
    pub(crate) fn restart(
        &self,
        net: &MemoryNet,
        config: &maat_server::MdsFileConfig,
        shared: Option<&Arc<SharedDb>>,
    ) -> Result<(), SimError> {
        net.detach(&self.address);
        if let Some(connection) = locked(&self.connection).take() {
            connection.store(true, Ordering::SeqCst);
            // The answers its death lost are over: the new instance answers.
            net.lose_answers(&self.address, 0);
        }
        // The old instance closes its database before the new one opens it.
        *locked(&self.mds) = None;
        self.failed.store(false, Ordering::SeqCst);
        if let Err(e) = self.serve(net, config, shared) {
            // Not started: the next periodic work tries again.
            self.failed.store(true, Ordering::SeqCst);
            return Err(e);
        }
        Ok(())
    }
}

impl MdsSlot {
    /// `mds`, this slot's running instance, brings the OSDs' T10 keys up to its policy;
    /// the problems it met are the error.
    pub(crate) fn t10_upkeep(&self, mds: &Mds<MdsStore>) -> Result<(), SimError> {
        let now = self.env.now();
        let problems = self.env.with_rng(|mut rng| mds.t10_maintain(now, &mut rng));
        match problems.as_slice() {
            [] => Ok(()),
            _ => Err(setup(problems.join("; "))),
        }
    }
}

/// The singleton duties of several instances: the running instances ask in turn for the
/// leader lease (each named by its address), and the first granted does the T10 upkeep.
pub(crate) fn lead(slots: &[MdsSlot]) -> Result<(), SimError> {
    let ttl = u64::try_from(maat_server::leader::LEADER_TTL.as_millis()).unwrap_or(u64::MAX);
    for slot in slots {
        let Some(mds) = slot.get() else {
            continue;
        };
        let now = slot.env.now();
        let Ok(state) = mds.lease(maat_server::leader::LEADER_LEASE, &slot.address, ttl, now)
        else {
            continue;
        };
        if !state.granted {
            *locked(&slot.grant) = None;
            continue;
        }
        *locked(&slot.grant) = Some((now.0.saturating_add(ttl), state.token));
        return slot.t10_upkeep(&mds);
    }
    Ok(())
}
