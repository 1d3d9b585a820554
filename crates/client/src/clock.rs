//! The client's local clock: the system's, or a simulation's (feature `sim`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A clock in protocol time (milliseconds since the epoch).
pub type ClockFn = Arc<dyn Fn() -> u64 + Send + Sync>;

/// This client's local clock: the system's, or a simulation's.
#[derive(Clone, Default)]
pub(crate) struct LocalClock(Option<ClockFn>);

impl LocalClock {
    #[cfg(feature = "sim")]
    pub(crate) fn simulated(clock: ClockFn) -> Self {
        LocalClock(Some(clock))
    }

    pub(crate) fn now(&self) -> u64 {
        match &self.0 {
            Some(clock) => clock(),
            None => local_now(),
        }
    }
}

/// The local clock as protocol time.
pub fn local_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
