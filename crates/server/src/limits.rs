//! Every limit of the daemon shell in one place: connections, idle time, request sizes
//! of the metrics endpoint and the control channel's periods. Each module that applies
//! one re-exports it under its old path.

use std::time::Duration;

/// How often an OSD checks the notices in force with the MDS.
pub const REVOCATION_POLL: Duration = Duration::from_secs(1);

/// How often the MDS brings every OSD's T10 keys up to its policy.
pub const T10_MAINTENANCE: Duration = Duration::from_secs(1);

/// How long a starting KDS tries to learn the revocations in force before it announces
/// itself anyway (it then refuses key requests, `NotReady`, until it has learned them).
pub(crate) const FIRST_REVOCATIONS_CHECK: Duration = Duration::from_secs(3);

/// Longest request line and headers read from a scraper.
pub(crate) const REQUEST_BYTES_MAX: usize = 8192;

/// Most connections served at once; more are refused (`Busy`, with the reason) and closed.
pub const CONNECTIONS_MAX: usize = 1024;

/// A connection that sends no frame for this long is closed, so idle sockets cannot hold
/// every slot.
pub const IDLE_SECONDS_MAX: u32 = 120;

/// Most object digests an OSD keeps in memory (SPEC T1 ALLDATA: answers to reads of whole
/// objects sealed without a pass over their data); about 100 bytes each.
pub const DIGESTS_KEPT_MAX: usize = 65_536;

/// Locks an OSD's object store stripes its objects over. One is held to rename a file over
/// an object and to decide whether a write in place must copy a sealed file, and for the
/// whole copy-on-write of one (a copy and an fsync of up to a stripe), which then delays
/// the other objects of its stripe of locks.
pub const OBJECT_LOCKS: usize = 64;
