//! Named limits. Every length read from the wire is checked against one of these before
//! anything is allocated.

use crate::encrypted::ENCRYPTED_LEAF_LOG2_MIN;
use crate::msg::STRIPE_UNIT_BYTES;
use maat_crypto::aead::BLOCK_OVERHEAD_BYTES;

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
/// Longest absolute path the MDS resolves, also carried in a delegation file handle:
/// four times Linux's `PATH_MAX`, which bounds what a program passes, not the absolute
/// path (a relative path of `PATH_MAX` bytes under a directory deep in a mount must
/// resolve: issue 44, pjdfstest's `*/03.t`). 4,096 until 2026-11-27; a longer handle
/// only names a path an older MDS could not hold.
pub const PATH_BYTES_MAX: usize = 16_384;
/// Most nodes in one range-key grant (SPEC H4).
pub const RANGE_GRANT_NODES_MAX: usize = 4096;
/// Most copies a partition may keep of each object (issue 41).
pub const REPLICAS_MAX: u8 = 7;
/// Copies of each object in a new cluster's `default` partition (issue 41; fewer while
/// the cluster has fewer OSDs).
pub const REPLICAS_DEFAULT: u8 = 3;
/// An OSD the MDS has not heard from for this long is shown down and asked last by
/// reads (issue 41; OSDs check in every second).
pub const OSD_DOWN_AFTER_MILLIS: u64 = 5_000;
/// An OSD whose last check-in that reached the MDS was sent longer ago than this serves
/// no object command (`ErrorCode::CutOff`) until it checks in again (issue 41). The
/// MDS takes an OSD it has not heard from for [`OSD_DOWN_AFTER_MILLIS`] to serve
/// nothing it has not been told (a client then acknowledges a change that missed the
/// OSD's copy without waiting for the OSD to learn it): shorter by a second, so that
/// this holds while the two clocks' rates differ by less than 20 %, for an OSD cut off
/// from the MDS and not from clients.
pub const OSD_LEASE_MILLIS: u64 = 4_000;
const _: () = assert!(OSD_LEASE_MILLIS < OSD_DOWN_AFTER_MILLIS);
/// Issue 42: with several MDS instances over one store, an instance learns the time
/// another heard an OSD from the store, where it is copied at most once a second and
/// only when that instance hears a check-in: it may see it up to this much late. Such
/// an instance lets a change that missed an OSD's copy be acknowledged without the OSD
/// knowing only once the OSD has been silent for `OSD_DOWN_AFTER_MILLIS` plus this, so
/// that the OSD's lease has surely ended.
pub const OSD_HEARD_LAG_MILLIS: u64 = 2_000;
/// A change to an object with several copies is acknowledged when at least this many
/// copies took it (or every copy, for fewer), the rest recorded at the MDS as missed
/// (issue 41, Ceph's `min_size`).
pub const COPIES_DURABLE_MIN: usize = 2;
/// Most copies recorded as missed at the MDS at once (each 12 bytes in an OSD's
/// check-in answer); past it a change must reach every copy again.
pub const MISSED_COPIES_MAX: usize = 65_536;
/// An OSD whose last check-in with the MDS is older than this checks in before it
/// serves the next request (issue 41: it may have been hung or cut off while copies it
/// holds were recorded as missed). Twice the check-in period.
pub const CHECK_IN_STALE_MILLIS: u64 = 2_000;
/// Most copies one `CopiesMissed` or `CopiesRepaired` request names.
pub const MISSED_COPIES_PER_REQUEST_MAX: usize = 4_096;
/// Number of T10 working-key slots per partition (paper 003 §5.5).
pub const T10_WORKING_KEYS_PER_PARTITION: usize = 16;
/// Length of request / session nonces.
pub const NONCE_BYTES: usize = 16;
/// Length of a session id.
pub const SESSION_ID_BYTES: usize = 16;

/// Largest leaf an encrypted file may use (log2 bytes): one stripe unit.
pub const ENCRYPTED_LEAF_LOG2_MAX: u8 = 19;

/// Largest stripe object an encrypted file can have: a full stripe of the smallest leaves.
pub const ENCRYPTED_OBJECT_BYTES_MAX: u64 = STRIPE_UNIT_BYTES
    + (STRIPE_UNIT_BYTES >> ENCRYPTED_LEAF_LOG2_MIN) * BLOCK_OVERHEAD_BYTES as u64;

/// Most generation runs one file may have (a file rewritten piecemeal in more separate
/// places than this must be rewritten whole).
pub const GENERATION_RUNS_MAX: usize = 65_536;

/// Most earlier key trees one file may keep while a rekey is in progress (SPEC H7): a
/// new rekey past this must wait until a running one has rewritten the file.
pub const EARLIER_TREES_MAX: usize = 4;

/// Most file handles one bundle carries.
pub const BUNDLE_HANDLES_MAX: usize = 4096;

/// Longest job name.
pub const JOB_NAME_BYTES_MAX: usize = 255;

pub(crate) const HANDLE_BYTES_MAX: usize = PATH_BYTES_MAX + 1024;

pub(crate) const LIFETIME_BYTES_MAX: usize = 1024;

pub(crate) const SEALED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most ranges one permit names.
pub const KEY_RANGES_MAX: usize = 64;

/// Most files one key request may name.
pub const KDS_FILES_PER_REQUEST_MAX: usize = 256;

/// Most stripe ranges one `SetSizeWritten` may carry.
pub const WRITTEN_RANGES_MAX: usize = 4096;

/// Most predicted paths one `OpenPredicted` may carry.
pub const PREDICTED_PATHS_MAX: usize = 64;

/// Longest user, group or path component name.
pub const NAME_BYTES_MAX: usize = 255;

/// Most partitions one OSD's key state holds.
pub const T10_PARTITIONS_MAX: usize = 4096;

/// Most bytes of the key command inside a fenced one (`t10::FencedKeyCommand`, issue
/// 42); a SET KEY is under 100.
pub const FENCED_COMMAND_BYTES_MAX: usize = 4096;

/// Most objects with a policy access tag other than 0 one OSD's key state holds (across
/// partitions): each is a revocation of one file's credentials (SPEC T4).
pub const T10_POLICY_TAGS_MAX: usize = 65_536;

/// Largest payload a frame may carry: one stripe unit of data plus room for headers.
pub const FRAME_PAYLOAD_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Most (session, nonce stream) pairs a receiver remembers (`replay.rs`); beyond this it
/// refuses requests on new streams as busy rather than forget one inside the window. A
/// client that sequences its nonces uses one stream per connection; one that draws them
/// at random uses a stream per request.
pub const REPLAY_ENTRIES_MAX: usize = 1 << 20;

/// Most nonce streams one session may have in the window, so a single session cannot fill
/// the window for everyone (connections used within the last 30 s, or, with random nonces,
/// about 2,000 requests a second).
pub const REPLAY_ENTRIES_PER_SESSION_MAX: u32 = 1 << 16;
