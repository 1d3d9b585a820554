//! The client's local clock: the system's, or a simulation's (feature `sim`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A clock in protocol time (milliseconds since the epoch).
pub type ClockFn = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Waits a number of milliseconds (a simulation moves its clock instead).
pub type SleepFn = Arc<dyn Fn(u64) + Send + Sync>;

/// This client's local clock: the system's, or a simulation's (its time, and how to wait).
#[derive(Clone, Default)]
pub(crate) struct LocalClock(Option<(ClockFn, SleepFn)>);

impl LocalClock {
    #[cfg(feature = "sim")]
    pub(crate) fn simulated(clock: ClockFn, sleep: SleepFn) -> Self {
        LocalClock(Some((clock, sleep)))
    }

    /// Waits `millis` milliseconds.
    pub(crate) fn sleep(&self, millis: u64) {
        match &self.0 {
            Some((_, sleep)) => sleep(millis),
            None => std::thread::sleep(std::time::Duration::from_millis(millis)),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        match &self.0 {
            Some((clock, _)) => clock(),
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
