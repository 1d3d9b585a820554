//! What a daemon takes from the world: time, randomness and the network. A daemon on a
//! host uses the system clock, the OS generator and TCP ([`Env::system`]); a whole cluster
//! in one process runs the same daemon code on a shared simulated clock, a seeded
//! generator and an in-process network ([`Env::simulated`]), so that a run is repeatable.

use maat_crypto::{CryptoRngCore, OsRng};
use maat_net::{Connection, Network};
use maat_proto::UnixMillis;
use std::sync::{Arc, Mutex, PoisonError};

/// A clock in protocol time.
pub type Clock = Arc<dyn Fn() -> UnixMillis + Send + Sync>;

/// Time, randomness and network for one daemon.
#[derive(Clone, Default)]
pub struct Env {
    network: Network,
    /// `None`: the system clock.
    clock: Option<Clock>,
    /// `None`: the OS generator.
    rng: Option<Arc<Mutex<rand_chacha::ChaCha20Rng>>>,
    /// What a store that can no longer make writes durable does; `None`: the daemon
    /// exits (its supervisor restarts it from what is on disk).
    store_failed: Option<StoreFailed>,
    /// A simulated disk's faults.
    #[cfg(feature = "sim")]
    storage_faults: Option<Arc<crate::faults::StorageFaults>>,
    /// How long a peer may stay silent in a call made through [`Env::connect`]; `None`:
    /// the network's default (`maat_net::IO_TIMEOUT`).
    io_timeout: Option<std::time::Duration>,
}

/// A hook told why a store failed for good.
pub type StoreFailed = Arc<dyn Fn(&str) + Send + Sync>;

impl Env {
    /// The system clock, the OS generator and TCP.
    pub fn system() -> Self {
        Self::default()
    }

    /// `clock`, a generator seeded with `seed`, and the in-process network `net`. Never
    /// for a daemon that guards real data: anyone who knows the seed knows every key
    /// (feature `sim`, which only `maat-sim` turns on).
    #[cfg(feature = "sim")]
    pub fn simulated(net: maat_net::MemoryNet, clock: Clock, seed: u64) -> Self {
        use rand_chacha::rand_core::SeedableRng;
        Self {
            network: Network::Memory(net),
            clock: Some(clock),
            rng: Some(Arc::new(Mutex::new(
                rand_chacha::ChaCha20Rng::seed_from_u64(seed),
            ))),
            store_failed: None,
            storage_faults: None,
            io_timeout: None,
        }
    }

    /// This environment, its disks failing with `faults` (a simulation's).
    #[cfg(feature = "sim")]
    pub fn with_storage_faults(mut self, faults: Arc<crate::faults::StorageFaults>) -> Self {
        self.storage_faults = Some(faults);
        self
    }

    /// The simulated disk's faults, if any.
    #[cfg(feature = "sim")]
    pub fn storage_faults(&self) -> Option<Arc<crate::faults::StorageFaults>> {
        self.storage_faults.clone()
    }

    /// This environment, `hook` told when a store fails for good instead of the daemon
    /// exiting (a simulation restarts the daemon itself).
    pub fn on_store_failed(mut self, hook: StoreFailed) -> Self {
        self.store_failed = Some(hook);
        self
    }

    /// What a store that failed for good calls: the hook given, or one that logs why
    /// and ends the process with status 75 (EX_TEMPFAIL; `maat up` restarts it).
    pub fn store_failed_hook(&self) -> StoreFailed {
        match &self.store_failed {
            Some(hook) => hook.clone(),
            None => Arc::new(|why: &str| {
                tracing::error!(
                    reason = why,
                    "the metadata store cannot make changes durable; exiting so that the daemon restarts from what is on disk"
                );
                std::process::exit(75);
            }),
        }
    }

    /// The simulated clock, if this is a simulation's environment.
    pub fn simulated_clock(&self) -> Option<Clock> {
        self.clock.clone()
    }

    /// The time now.
    pub fn now(&self) -> UnixMillis {
        match &self.clock {
            Some(clock) => clock(),
            None => crate::now(),
        }
    }

    /// Runs `f` with this daemon's random generator.
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut dyn CryptoRngCore) -> R) -> R {
        match &self.rng {
            None => f(&mut OsRng),
            Some(rng) => f(&mut *rng.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    /// 32 random bytes.
    pub fn random32(&self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        self.with_rng(|rng| rng.fill_bytes(&mut bytes));
        bytes
    }

    /// This environment, a peer allowed to stay silent for `timeout` in each call (a
    /// call that must not hold up a request long; no effect on a simulated network).
    pub fn with_io_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.io_timeout = Some(timeout);
        self
    }

    /// A connection to `address` on this daemon's network.
    pub fn connect(&self, address: &str) -> Connection {
        let mut connection = self.network.connect(address);
        if let Some(timeout) = self.io_timeout {
            connection.set_io_timeout(timeout);
        }
        connection
    }
}
