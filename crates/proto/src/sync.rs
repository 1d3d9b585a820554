//! Locks whose poisoning ends the program's use of them (issue 39): a thread that panicked
//! while holding one may have left what it guards half changed, so no other thread goes
//! on with it. The daemons abort on any panic (`maat_server::abort_on_panic`), so there a
//! poisoned lock is never even seen; elsewhere (tests, a simulation, an embedder) taking
//! one is a panic of its own, naming why, instead of carrying on with broken state.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

const POISONED: &str =
    "a lock whose holder panicked: the state it guards may be half changed, so nothing goes on with it";

/// For a condition variable's wait, whose poisoning reaches the waiter: panics, naming
/// why.
#[allow(clippy::panic)]
pub fn poisoned() -> ! {
    panic!("{POISONED}")
}

/// Takes `m`.
#[allow(clippy::panic)]
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(_) => panic!("{POISONED}"),
    }
}

/// Takes `m` if no one holds it; `None` if someone does.
#[allow(clippy::panic)]
pub fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::WouldBlock) => None,
        Err(std::sync::TryLockError::Poisoned(_)) => panic!("{POISONED}"),
    }
}

/// Reads `l`.
#[allow(clippy::panic)]
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match l.read() {
        Ok(g) => g,
        Err(_) => panic!("{POISONED}"),
    }
}

/// Writes `l`.
#[allow(clippy::panic)]
pub fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    match l.write() {
        Ok(g) => g,
        Err(_) => panic!("{POISONED}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_never_taken_over() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = lock(&m2);
            std::panic::panic_any("a broken invariant");
        })
        .join();
        let taken = std::panic::catch_unwind(|| *lock(&m));
        assert!(taken.is_err(), "a poisoned lock was taken over");
    }
}
