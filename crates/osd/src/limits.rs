//! Every limit of the OSD logic in one place: its caches of trees, delegations and T10
//! credentials. Each module that applies one re-exports it under its old path.

/// Shortest read sent straight from the object's file (zero-copy); shorter ones are read
/// into memory and sent in one write. Sending from the file takes three writes (head,
/// file, trailer), each its own TCP segment: at 4 KiB that made CMDRSP reads 30 % slower
/// (`maat bench t10`, seq read 4 KiB 46.7 -> 60.8 µs), while at 4 MiB saving two copies
/// made them 50 % faster.
pub const ZERO_COPY_READ_BYTES_MIN: u64 = 128 * 1024;

/// Most job keys whose lifetime an OSD keeps.
pub const LIFETIMES_MAX: usize = 65_536;

/// Most job keys one session may prove.
pub const KEYS_PER_SESSION_MAX: usize = 64;

/// Most client sessions an OSD keeps.
pub const SESSIONS_MAX: usize = 65_536;

/// Most sessions one user may hold at an OSD; a new one replaces that user's oldest, so one
/// user cannot fill the table for everyone. Large enough for a job or a gateway that runs
/// a thousand clients as one user (at 256, 1,000 such clients evicted each other's
/// sessions faster than they could use them).
pub const SESSIONS_PER_USER_MAX: usize = 4096;

/// Most verified capabilities an OSD caches (SPEC M5).
pub const CAPABILITY_CACHE_ENTRIES_MAX: usize = 65_536;

/// Most capability ids whose renewed expiry is kept (expired ones are dropped first).
pub const RENEWED_CAPABILITIES_MAX: usize = 1 << 20;

/// Most verified token digests remembered.
pub const RENEWAL_TOKENS_KEPT_MAX: usize = 4096;

/// Most credentials whose capability keys an OSD caches.
pub const T10_CREDENTIALS_CACHED_MAX: usize = 65_536;

/// Most trees an OSD keeps (oldest dropped first).
pub const TREE_CACHE_ENTRIES_MAX: usize = 4096;

/// Most members over all kept trees.
pub const TREE_CACHE_MEMBERS_MAX: usize = 1 << 20;

/// Room a store leaves after the data it reads into memory, so that an answer's envelope
/// can be sealed in the data's own buffer (CONFIDENTIAL puts the message before the data
/// and tag and salt after it) without a new allocation of the data's size. Only speed
/// depends on it.
pub const READ_BUFFER_SLACK_BYTES: usize = 1024;
