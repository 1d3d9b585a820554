//! Every limit of the MDS in one place: cache and index bounds, jobs, file sets,
//! groups, prediction, batching, lifetimes. Each module that applies one re-exports it
//! under its old path, so that tests and docs keep naming it there.

/// Most capabilities the MDS keeps cached (SPEC M5).
pub const CAPABILITY_CACHE_ENTRIES_MAX: usize = 65_536;

/// Most keys in the (user, file) index of cached capabilities over file sets.
pub const COVER_INDEX_ENTRIES_MAX: usize = 262_144;

/// Most cached capabilities over sets of users indexed per (file, mode): one per UNIX
/// class, and one more.
pub const COVERS_PER_FILE_MAX: usize = 4;

/// Most users and files, summed over the capabilities the index holds (it is emptied
/// beyond): bounds its memory whatever the sets' sizes.
pub const COVER_INDEX_MEMBERS_MAX: usize = 4 << 20;

/// Most computed grants kept (per requester, file, mode and access-control version).
pub const GRANT_CACHE_ENTRIES_MAX: usize = 65_536;

/// Most subtree roots remembered for composition.
pub const SUBTREE_ROOTS_MAX: usize = 16_384;

/// Longest a request waits for a gathered batch before asking alone.
pub const BATCH_WAIT_MILLIS_MAX: u64 = 2_000;

/// Most files and users whose recent opens are tracked for temporal batching.
pub const BATCH_TRACKED_FILES_MAX: usize = 65_536;

/// Most Merkle trees the MDS keeps for `GetTree` (oldest dropped first).
pub const TREE_CACHE_ENTRIES_MAX: usize = 16_384;

/// Most members over all kept trees.
pub const TREE_CACHE_MEMBERS_MAX: usize = 4 << 20;

/// Most files in one set.
pub const FILESET_FILES_MAX: usize = 256;

/// Most sets one user may define.
pub const FILESETS_PER_USER_MAX: usize = 64;

/// Longest set name, bytes.
pub const FILESET_NAME_MAX: usize = 64;

/// Most files one directory-grouped capability names (larger directories are grouped
/// in their first this many entries that qualify).
pub const DIRECTORY_GROUP_FILES_MAX: usize = 256;

/// Most (user, file) pair checks one directory grouping may spend on files whose
/// permissions differ from the opened file's; beyond it only same-permission files join.
pub const DIRECTORY_GROUP_CHECKS_MAX: usize = 65_536;

/// How long a job's file handle (and its capability) is valid; the key lifetime token,
/// renewed by the lead, is what bounds access within it.
pub const JOB_HANDLE_LIFETIME_MILLIS: u64 = 12 * 60 * 60 * 1000;

/// Most jobs the MDS keeps.
pub const JOBS_MAX: usize = 65_536;

/// Most jobs one lead may hold at once (ended ones count until their handles expire, so
/// ending jobs cannot flood the revocation budget).
pub const JOBS_PER_LEAD_MAX: usize = 64;

/// Most files one job may open.
pub const JOB_FILES_MAX: usize = 4096;

/// Most users one grant request names (and most members of a slice policy).
pub const KEY_GRANT_USERS_MAX: usize = 64;

/// Default ticket (login session) lifetime.
pub const TICKET_LIFETIME_MILLIS_DEFAULT: u64 = 10 * 60 * 60 * 1000;

/// Most sessions kept in memory (the store holds all of them).
pub const SESSIONS_CACHED_MAX: usize = 65_536;

/// Longest partition name.
pub const PARTITION_NAME_BYTES_MAX: usize = 64;

/// Most files whose successors are kept (the table is cleared when full).
pub const PREDICT_FILES_MAX: usize = 65_536;

/// Most users whose last open is kept (cleared when full).
pub const PREDICT_USERS_MAX: usize = 65_536;

/// Longest chain of predictions followed from one file.
pub const PREDICT_CHAIN_MAX: usize = 8;

/// Most outstanding capabilities tracked; past it, a new capability is not renewable
/// (its holder opens the file again when it expires).
pub const OUTSTANDING_CAPABILITIES_MAX: usize = 1 << 20;

/// Most users plus files named over all outstanding capabilities (the same bound in
/// memory as the tree cache's members).
pub const OUTSTANDING_MEMBERS_MAX: usize = 4 << 20;

/// Most revoked entries (capabilities plus users) in force at once; more is `Busy`, so
/// that every OSD's table stays bounded too.
pub const REVOKED_ENTRIES_IN_FORCE_MAX: usize = 65_536;

/// Most credentials kept for reuse (all are dropped when full and none has expired).
pub(crate) const ISSUED_MAX: usize = 65_536;

/// A login cookie is made for a 30-second slot and accepted in that slot and the next.
pub(crate) const COOKIE_SLOT_MILLIS: u64 = 30_000;

/// A gathering batch closes once it has not grown for this long (or at the gather window).
pub const BATCH_QUIET_MICROS: u64 = 300;

/// The shortest quiet period a dense crowd's batch waits (see `quiet_period`).
pub const BATCH_QUIET_MIN_MICROS: u64 = 50;

/// File ids one `Reserve` hands out (one signature for this many puts of new files).
pub const RESERVED_IDS_PER_REQUEST: u32 = 64;

/// Most reservations in use kept per user (beyond, `Reserve` is refused `Busy` and puts
/// go the usual way; a block expired or wholly linked makes room).
pub const RESERVATIONS_PER_USER_MAX: usize = 64;

/// Most reservations kept in all (expired ones are dropped first; beyond, `Busy`).
pub const RESERVATIONS_MAX: usize = 65_536;

/// Grants of at most this many (user, file) pairs are checked against the access-control
/// state in every build before they are signed; larger ones in debug builds only.
pub const GRANT_CHECKED_PAIRS_MAX: usize = 256;
