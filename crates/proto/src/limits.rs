//! Named limits. Every length read from the wire is checked against one of these before
//! anything is allocated.

/// Largest encoded token accepted by any decoder.
pub const TOKEN_BYTES_MAX: usize = 1024 * 1024;
/// Default capability lifetime (SPEC M7: short lifetimes make revocation automatic).
pub const CAPABILITY_LIFETIME_MILLIS_DEFAULT: u64 = 5 * 60 * 1000;
/// Longest validity window any MDS-signed token may carry.
pub const TOKEN_LIFETIME_MILLIS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most capability ids one renewal token may name (SPEC M8).
pub const RENEWAL_CAPABILITY_IDS_MAX: usize = 8192;
/// Most entries (capabilities, users, keys, each) in one revocation notice (SPEC M9).
pub const REVOCATION_ENTRIES_MAX: usize = 8192;
/// Most members in one Merkle tree message (SPEC M4).
pub const MERKLE_MESSAGE_MEMBERS_MAX: usize = 65_536;
/// Most subtrees composed in one Merkle tree message.
pub const MERKLE_MESSAGE_SUBTREES_MAX: usize = 1024;
/// Largest file size the MDS records (1 TiB: two million stripes); clients refuse I/O
/// past it before sending anything.
pub const FILE_BYTES_MAX: u64 = 1 << 40;
/// Longest path carried in a delegation file handle.
pub const PATH_BYTES_MAX: usize = 4096;
/// Most nodes in one range-key grant (SPEC H4).
pub const RANGE_GRANT_NODES_MAX: usize = 4096;
/// Number of T10 working-key slots per partition (paper 003 §5.5).
pub const T10_WORKING_KEYS_PER_PARTITION: usize = 16;
/// Length of request / session nonces.
pub const NONCE_BYTES: usize = 16;
/// Length of a session id.
pub const SESSION_ID_BYTES: usize = 16;
