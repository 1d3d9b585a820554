//! The MDS's lease on its singleton duties (issue 42): T10 key upkeep runs only at the
//! instance that holds the store's lease `leader`, so that instances sharing one
//! database never both rotate an OSD's keys. The lease is renewed every third of its
//! lifetime; an instance that dies hands it on when it runs out ([`LEADER_TTL`]). An
//! instance names itself by its host and data directory, so a restarted instance takes
//! its own lease back at once.

use crate::env::Env;
use maat_mds::{Mds, MetaStore};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lease's name in the store (the MDS's leader-only commits require it by name).
pub use maat_mds::LEADER_LEASE;
/// How long a grant lasts.
pub const LEADER_TTL: Duration = Duration::from_secs(10);
/// How often the holder renews it (and others ask).
const LEADER_RENEW: Duration = Duration::from_millis(3_000);

/// What this instance knows of its leadership.
pub(crate) struct Leader {
    /// This instance's name in the lease.
    holder: String,
    /// Until when (by this process's monotonic clock) it may act, and under which
    /// fencing token; none while another instance leads or the store did not answer.
    held: Mutex<Option<(Instant, u64)>>,
}

impl Leader {
    pub(crate) fn new(holder: String) -> Self {
        Self {
            holder,
            held: Mutex::new(None),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<(Instant, u64)>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this instance leads now (its last grant has not run out).
    pub(crate) fn is_leader(&self) -> bool {
        self.token().is_some()
    }

    /// The fencing token of the grant this instance holds now, if any.
    pub(crate) fn token(&self) -> Option<u64> {
        match *self.held() {
            Some((until, token)) if Instant::now() < until => Some(token),
            _ => None,
        }
    }

    /// Asks the store once; a grant lasts [`LEADER_TTL`] from when the request was
    /// sent. A store that does not answer leaves the last grant to run out by itself.
    pub(crate) fn renew<S: MetaStore>(&self, mds: &Mds<S>, env: &Env) {
        let sent = Instant::now();
        let ttl = u64::try_from(LEADER_TTL.as_millis()).unwrap_or(u64::MAX);
        match mds.lease(LEADER_LEASE, &self.holder, ttl, env.now()) {
            Ok(state) if state.granted => {
                let was = self.held().replace((sent + LEADER_TTL, state.token));
                if was.is_none_or(|(_, t)| t != state.token) {
                    tracing::info!(token = state.token, "this MDS leads the singleton duties");
                }
            }
            Ok(state) => {
                if self.held().take().is_some() {
                    tracing::warn!(leader = %state.holder, "another MDS leads the singleton duties now");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not renew the leader lease"),
        }
    }

    /// Renews the lease until `shutdown`.
    pub(crate) fn run<S: MetaStore>(&self, mds: &Mds<S>, env: &Env, shutdown: &crate::Shutdown) {
        while !shutdown.is_set() {
            self.renew(mds, env);
            let mut waited = Duration::ZERO;
            while waited < LEADER_RENEW && !shutdown.is_set() {
                std::thread::sleep(Duration::from_millis(50));
                waited += Duration::from_millis(50);
            }
        }
    }
}

/// This instance's name in the lease: its host and data directory.
pub(crate) fn holder_name(data_dir: &std::path::Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("{host}:{}", dir.display())
}
