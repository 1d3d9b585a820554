//! Every limit of the KDS logic in one place: its cache of verified capabilities and how
//! stale its view of the revocations in force may get. Each module that applies one
//! re-exports it under its old path.

/// How old the KDS's last catch-up with the MDS's revocations (SPEC M9) may be before it
/// refuses keys (`NotReady`): it checks every second, so this is several missed checks.
/// A KDS cut off from the MDS stops handing out keys rather than ignore what was revoked
/// meanwhile.
pub const REVOCATIONS_STALE_MILLIS: u64 = 10_000;

/// Most entries of each cache (tickets, capabilities, trees, lockboxes); a full cache is
/// emptied of what expired, then cleared.
pub const KDS_CACHE_ENTRIES_MAX: usize = 16_384;
