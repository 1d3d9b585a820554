//! When `maat up`'s supervisor starts a daemon again after it exited. A daemon that ran
//! for a while and died (killed, crashed once) is started again at once: an OSD or an
//! MDS instance back in milliseconds is what the availability tests and the users count
//! on. A daemon that keeps dying soon after it starts (a config it cannot read, a
//! database that is gone, a port taken) is started again after a delay that doubles with
//! each quick exit, up to [`RESTART_DELAY_MAX`], instead of ten times a second with a
//! line of output each time. No I/O here: the supervisor passes the time.

use std::time::{Duration, Instant};

/// A daemon that ran at least this long before it exited is restarted at once.
pub(crate) const RAN_LONG_ENOUGH: Duration = Duration::from_secs(10);
/// The delay after the second quick exit in a row (the first is restarted at once).
pub(crate) const RESTART_DELAY_FIRST: Duration = Duration::from_millis(500);
/// The longest delay between two starts.
pub(crate) const RESTART_DELAY_MAX: Duration = Duration::from_secs(30);

/// One daemon's starts and quick exits, and when it is due to start again.
#[derive(Debug, Clone)]
pub(crate) struct Restarts {
    /// When it was last started.
    started: Instant,
    /// Exits in a row, each less than [`RAN_LONG_ENOUGH`] after its start.
    quick: u32,
    /// When to start it again, once an exit was noticed; none while it runs.
    due: Option<Instant>,
}

impl Restarts {
    /// A daemon started at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            started: now,
            quick: 0,
            due: None,
        }
    }

    /// The daemon was started (again) at `now`.
    pub(crate) fn started(&mut self, now: Instant) {
        self.started = now;
        self.due = None;
    }

    /// When the daemon is to be started again, if its exit was noticed.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The daemon exited, or could not be started, at `now`: how long to wait before
    /// the next start (which [`Restarts::due`] then says).
    pub(crate) fn exited(&mut self, now: Instant) -> Duration {
        let delay = if now.saturating_duration_since(self.started) >= RAN_LONG_ENOUGH {
            self.quick = 0;
            Duration::ZERO
        } else {
            self.quick = self.quick.saturating_add(1);
            match self.quick {
                1 => Duration::ZERO,
                n => RESTART_DELAY_FIRST
                    .saturating_mul(1 << (n - 2).min(16))
                    .min(RESTART_DELAY_MAX),
            }
        };
        self.due = Some(now + delay);
        delay
    }

    /// Quick exits in a row so far (for the supervisor's message).
    pub(crate) fn quick_exits(&self) -> u32 {
        self.quick
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_that_keeps_dying_waits_longer_each_time_and_one_that_ran_does_not() {
        let t0 = Instant::now();
        let mut r = Restarts::new(t0);
        // It ran long: at once.
        let mut now = t0 + RAN_LONG_ENOUGH;
        assert_eq!(r.exited(now), Duration::ZERO);
        r.started(now);
        // The first quick exit: at once too (one kill, one restart).
        now += Duration::from_millis(100);
        assert_eq!(r.exited(now), Duration::ZERO);
        let mut delays = Vec::new();
        for _ in 0..10 {
            r.started(now);
            now += Duration::from_millis(50);
            delays.push(r.exited(now));
        }
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000, 30_000]
        );
        assert_eq!(r.quick_exits(), 11);
        assert_eq!(r.due(), Some(now + RESTART_DELAY_MAX));
        // It stays up long enough once: back to at once.
        r.started(now);
        assert_eq!(r.due(), None);
        now += RAN_LONG_ENOUGH;
        assert_eq!(r.exited(now), Duration::ZERO);
        assert_eq!(r.quick_exits(), 0);
    }

    #[test]
    fn no_overflow_however_many_exits() {
        let t0 = Instant::now();
        let mut r = Restarts::new(t0);
        for _ in 0..100_000 {
            assert!(r.exited(t0) <= RESTART_DELAY_MAX);
        }
    }
}
