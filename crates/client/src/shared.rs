//! What lets many threads share one [`crate::Client`] (`&self`): its caches and session
//! behind short locks, and its connections in a pool.
//!
//! Invariant: a lock is held only to read or update in-memory state, never across a
//! network call, a file write or another lock of the client (so no lock order exists to
//! get wrong, and no thread waits on another's round trip). The one exception is the
//! client's `login_turn`, held across a login so that threads make one between them.

use maat_net::{Connection, NetError, Network};
use maat_proto::wire::FrameType;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Client state behind a mutex. A thread that panicked while holding it leaves state that
/// is still consistent (every update is a single assignment or map operation), so a
/// poisoned lock is taken over rather than propagated.
#[derive(Debug, Default)]
pub(crate) struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    /// The state, for one short update (see the module's invariant).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state when the client is not shared (`&mut self`): no lock taken.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

pub use crate::limits::IDLE_CONNECTIONS_PER_PEER_MAX;

/// Idle connections by peer address. A call takes one (or opens one), uses it alone and
/// returns it, so that threads sharing a client never wait on each other's requests.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    idle: Locked<HashMap<String, Vec<Connection>>>,
}

impl Pool {
    /// An idle connection to `address`, or a new one on `network`.
    pub(crate) fn take(&self, network: &Network, address: &str) -> Connection {
        let idle = self.idle.lock().get_mut(address).and_then(Vec::pop);
        idle.unwrap_or_else(|| network.connect(address))
    }

    /// Returns `connection` for reuse. One with answers still unread is closed instead:
    /// the next user would read them as its own.
    pub(crate) fn give_back(&self, connection: Connection) {
        if connection.in_flight() > 0 {
            return;
        }
        let mut idle = self.idle.lock();
        let list = idle.entry(connection.address().to_string()).or_default();
        if list.len() < IDLE_CONNECTIONS_PER_PEER_MAX {
            list.push(connection);
        }
    }

    /// Sends one frame to `address` and reads its answer, on a pooled connection. A
    /// connection that failed is dropped, not returned.
    pub(crate) fn call(
        &self,
        network: &Network,
        address: &str,
        frame_type: FrameType,
        payload: &[u8],
        patience: std::time::Duration,
        watch: Option<&maat_net::Watch<'_>>,
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        let mut connection = self.take(network, address);
        connection.set_io_timeout(patience);
        let answer = connection.call_parts_watched(frame_type, &[payload], watch)?;
        self.give_back(connection);
        Ok(answer)
    }
}
