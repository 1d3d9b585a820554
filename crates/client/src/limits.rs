//! Every limit of the client in one place: cache bounds, requests in flight, retries and
//! renewal points. Each module that applies one re-exports it under its old path.

use maat_proto::msg::STRIPE_UNIT_BYTES;

/// Most Argon2id memory a login may ask for (1 GiB).
pub const KDF_MEMORY_KIB_MAX: u32 = 1024 * 1024;

/// Most Argon2id passes a login may ask for.
pub const KDF_ITERATIONS_MAX: u32 = 16;

/// Most Argon2id lanes a login may ask for.
pub const KDF_LANES_MAX: u32 = 16;

/// Most range keys held for one file (two requests' worth).
pub const HELD_KEYS_PER_FILE_MAX: usize = 2 * maat_proto::limits::RANGE_GRANT_NODES_MAX;

/// Most files whose range keys a client holds at once.
pub const FILE_KEYS_CACHED_MAX: usize = 4096;

/// Most stripes a handle of an encrypted file keeps unsent (4 MiB of plaintext).
pub const PENDING_STRIPES_MAX: usize = 8;

/// Files a scrub checks at once (each its objects one after another): repairs wait on
/// their OSDs' fsyncs, so one at a time leaves the disks idle.
pub const SCRUB_FILES_AT_ONCE: usize = 8;

/// Most stripes of one file in flight at once (memory: this many stripe units per put or
/// get).
pub const STRIPES_IN_FLIGHT_MAX: u32 = 16;

/// How long an OSD may stay silent in the middle of a data request before the client
/// takes it for failed and (for a read) asks another copy, and asks it last for a while
/// (issue 41). Daemons and the other peers keep `maat_net::IO_TIMEOUT` (60 s).
pub const OSD_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a read waits for a copy's answer when another copy is left to ask: an OSD
/// silent this long (no byte of its answer) is taken for failed, asked last for a while,
/// and the read asks the next copy; the last copy gets [`OSD_ANSWER_TIMEOUT`]. A read
/// costs no fsync, so an OSD that is alive answers well within it; one that is only slow
/// costs a read from another copy, never a wrong answer (issue 41: a hung OSD held each
/// new client's first read for the whole answer timeout).
pub const OSD_READ_FAILOVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How often a lane waiting for a change's copy asks whether to go on (issue 41): after
/// each second of the OSD's silence it checks the MDS's report (asking the MDS again at
/// most this often, whichever lane asks), and gives the copy up once a report made
/// since the change was sent shows the OSD down; the copy is then recorded as missed,
/// as one that timed out. An OSD that hung mid-change costs the change the MDS's time to
/// notice (`OSD_DOWN_AFTER_MILLIS`, 5 s) and a second, not the whole
/// [`OSD_ANSWER_TIMEOUT`].
pub const CHANGE_WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a copy that exists but is bad must keep the state a scrub found it in before
/// a repair replaces it: longer than a client waits for a write's answers
/// ([`OSD_ANSWER_TIMEOUT`]), so that a write that reached that copy first is by then on
/// the good copies too, or was never acknowledged (see `repair.rs`).
pub const REPAIR_SETTLE: std::time::Duration =
    std::time::Duration::from_secs(OSD_ANSWER_TIMEOUT.as_secs() + 5);

/// Largest single read or write call (bounds the memory one call holds).
pub const FILE_IO_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Zeros written per call when filling a gap.
pub(crate) const ZERO_FILL_CHUNK: u64 = 4 * STRIPE_UNIT_BYTES;

/// Renew (lead) or refetch (participant) a job key's lifetime once this share of it is
/// left.
pub const JOB_REFRESH_AT_PERCENT_LEFT: u64 = 20;

/// How many times a request refused as stale or sent too early (a daemon just started)
/// is sent again (`mds.rs`, `retry_stale`).
pub(crate) const STALE_RETRIES: u32 = 3;

/// How far back from the MDS's time a first message to an OSD is dated after a stale
/// refusal, while nothing authenticated has shown that OSD's clock (a session offer,
/// `sessions.rs`; a T10 request, `data::T10Clock`): half the replay window, so that an
/// OSD up to this far behind the MDS, or as far ahead, takes it.
pub(crate) const PROBE_BACKDATE_MILLIS: i64 = (maat_proto::wire::REPLAY_WINDOW_MILLIS / 2) as i64;

/// Most T10 credentials a client keeps.
pub(crate) const T10_CREDENTIALS_MAX: usize = 4096;

/// Renew once this share of a capability's lifetime has passed (paper 000: 4 of 5 min).
pub const RENEW_AT_PERCENT: u64 = 80;

/// Most capabilities a client tracks for renewal (least recently used dropped first).
pub const HELD_CAPABILITIES_MAX: usize = 4096;

/// Most idle connections kept per peer: one per lane (two per OSD per batch) of each
/// thread that used the client at once, up to this; more are closed when returned.
pub const IDLE_CONNECTIONS_PER_PEER_MAX: usize = 32;

/// Most tree messages a client keeps.
pub const TREES_CACHED_MAX: usize = 1024;

/// Most read opens kept in the client capability cache (SPEC M5): enough for a client
/// that writes and then reads back tens of thousands of files (an entry is a few hundred
/// bytes).
pub const OPENED_CACHED_MAX: usize = 65_536;

/// Most read opens saved with the session (the newest), for the next command.
pub const OPENED_SAVED_MAX: usize = 1024;

/// How long an insecure (NOSEC) read open is kept in the client cache: as long as the
/// MDS's default capability lifetime (paper 000: 5 min), so that NOSEC and the secure
/// methods cache alike.
pub const INSECURE_OPEN_CACHED_MS: u64 = 300_000;

/// Most envelope keys kept (one per MDS or OSD session or T10 credential).
pub const ENVELOPE_KEYS_CACHED_MAX: usize = 1024;

/// Most directories whose reserved file ids a client holds at once (all are forgotten
/// beyond).
pub const RESERVED_DIRECTORIES_MAX: usize = 256;

/// How long a client does not ask again for file ids in a directory where the MDS
/// reserved none.
pub const RESERVE_RETRY_MILLIS: u64 = 60_000;
