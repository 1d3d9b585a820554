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

/// Scrapes of `/metrics` answered at once (each on a thread of its own); more are answered
/// 503 at once.
pub const METRICS_SCRAPES_MAX: usize = 8;

/// How long a scraper has to send its whole request.
pub const METRICS_REQUEST_TIME: Duration = Duration::from_secs(2);

/// Most connections a daemon holds open at once. An idle connection costs a slot in the
/// accept loop's table and its socket, no thread and no buffer (issue 40: at least 10,000
/// per daemon). At the limit the connection idle longest is closed for a new one, one that
/// has not proven a key first; only when every connection is busy is a new one refused
/// (`Busy`, with the reason).
pub const CONNECTIONS_MAX: usize = 16_384;

/// Connections the kernel queues for the accept loop (capped by `net.core.somaxconn`).
pub const LISTEN_BACKLOG: i32 = 4_096;

/// Most connections from one address (IP, no port): one host cannot take more than a
/// quarter of [`CONNECTIONS_MAX`]; at this limit its own connection idle longest is closed
/// for its new one.
pub const CONNECTIONS_PER_PEER_MAX: usize = 4_096;

/// Most threads serving connections at once. A connection has a thread only while its
/// frames arrive back to back (see [`LINGER`]); more busy connections than this wait
/// their turn, frames of connections that proved a key first.
pub const WORKERS_MAX: usize = 1_024;

/// Of [`WORKERS_MAX`], most that serve connections that have not proven a key (no answer
/// under a session key yet) at once, so an unauthenticated flood leaves threads to
/// everyone else and holds at most this many frames in memory.
pub const WORKERS_UNPROVEN_MAX: usize = 64;

/// Idle threads kept for the next busy connection; more exit after [`WORKER_KEEP`].
pub const WORKERS_KEPT: usize = 16;

/// How long an idle thread waits for work before it exits (down to [`WORKERS_KEPT`]).
pub const WORKER_KEEP: Duration = Duration::from_secs(10);

/// How long a thread serving a connection waits for the next bytes before it hands the
/// connection back to the accept loop (which holds idle and slow connections without a
/// thread). Back-to-back requests keep their thread and cost no more system calls than
/// before.
pub const LINGER: Duration = Duration::from_millis(25);

/// How long a thread keeps reading one frame that arrives slowly before it hands the rest
/// to the accept loop: a slow sender holds bytes, never a thread.
pub const WORKER_FRAME_PATIENCE: Duration = Duration::from_millis(500);

/// A frame that has begun must be whole within this long plus its length at
/// [`FRAME_BYTES_PER_SECOND_MIN`], whatever it trickles in between (before issue 40, one
/// byte every 50 s kept a connection forever).
pub const FRAME_SECONDS_MIN: u64 = 10;

/// The slowest transfer a frame's deadline allows for its length: a 2 MiB frame has
/// 18 s in all.
pub const FRAME_BYTES_PER_SECOND_MIN: u64 = 256 * 1024;

/// Bytes of frames still arriving that the accept loop holds for all connections at
/// once; past it, it reads no more until some are whole (TCP then pushes back on the
/// senders).
pub const BUFFERED_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Of [`BUFFERED_BYTES_MAX`], most held for the connections of one address.
pub const BUFFERED_BYTES_PER_PEER_MAX: usize = 64 * 1024 * 1024;

/// A connection that sends no frame for this long is closed, so idle sockets cannot hold
/// every slot.
pub const IDLE_SECONDS_MAX: u32 = 120;

/// The same for a connection that has not proven a key.
pub const IDLE_UNPROVEN_SECONDS_MAX: u32 = 30;

/// Most object digests an OSD keeps in memory (SPEC T1 ALLDATA: answers to reads of whole
/// objects sealed without a pass over their data); about 100 bytes each.
pub const DIGESTS_KEPT_MAX: usize = 65_536;

/// Locks an OSD's object store stripes its objects over. One is held to rename a file over
/// an object and to decide whether a write in place must copy a sealed file, and for the
/// whole copy-on-write of one (a copy and an fsync of up to a stripe), which then delays
/// the other objects of its stripe of locks.
pub const OBJECT_LOCKS: usize = 64;
