//! The client's decisions, without I/O (issue 39; quinn-proto is the model): each
//! concern is a state machine that takes the time (`now`, protocol milliseconds) and
//! what came back from the network, and answers with what to do next. The [`Client`]
//! is the driver: it owns the locks, the connections and the clock, carries out what a
//! machine says (send this request to that peer, renew, give up) and reports the
//! outcome back. Here nothing reads a clock, opens a socket or a file, starts a thread
//! or takes a lock (a test below reads these files and fails if one does), so every
//! decision is tested by calling it with chosen times and answers.
//!
//! So far: the capabilities held and their renewal (SPEC M8, [`held`]), the read opens
//! kept (SPEC M5, [`open_cache`]), the dating of T10 requests (SPEC T7, [`t10_clock`])
//! and object requests over an object's copies (issue 41, [`copies`]; where the copies
//! are is `maat_proto::placement`). Still in the driver and to move here: sessions,
//! jobs, the key store and striping.
//!
//! [`Client`]: crate::Client

pub(crate) mod copies;
pub(crate) mod held;
pub(crate) mod open_cache;
pub(crate) mod t10_clock;

pub(crate) use copies::{
    change_outcome, past_end, spread, CopyAnswer, Liveness, PastEnd, ReadOverCopies, ReadStep,
    Suspects,
};
pub use held::RenewalOutcome;
pub(crate) use held::{AfterExpired, HeldCapabilities};
pub(crate) use open_cache::{OpenCache, OpenedEntry};
pub(crate) use t10_clock::T10Clock;

#[cfg(test)]
mod tests {
    /// Every file of this module, by name.
    const FILES: [(&str, &str); 5] = [
        ("mod.rs", include_str!("mod.rs")),
        ("copies.rs", include_str!("copies.rs")),
        ("held.rs", include_str!("held.rs")),
        ("open_cache.rs", include_str!("open_cache.rs")),
        ("t10_clock.rs", include_str!("t10_clock.rs")),
    ];

    /// What code without I/O never names: sockets, files, threads, clocks, locks, the
    /// network crate, and the rest of the client (its driver), except plain constants.
    const FORBIDDEN: [&str; 12] = [
        "maat_net",
        "std::net",
        "std::fs",
        "std::io",
        "std::thread",
        "std::time",
        "SystemTime",
        "Instant",
        "Mutex",
        "RwLock",
        "Locked",
        "crate::",
    ];

    #[test]
    fn the_machines_do_no_io_and_import_nothing_from_their_driver() {
        let mut found = Vec::new();
        for (file, text) in FILES {
            // This list itself, and doc links to the driver, are not code.
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            for (n, line) in code.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                for word in FORBIDDEN {
                    let allowed = word == "crate::"
                        && (line.contains("crate::limits::") || line.contains("crate::machines::"));
                    if line.contains(word) && !allowed {
                        found.push(format!("{file}:{}: {word}: {line}", n + 1));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "I/O or driver code in the machines:\n{}",
            found.join("\n")
        );
    }
}
