//! Issue 41 at an OSD: the copies held here that missed a change (recorded at the MDS by
//! the client whose change reached the other copies). Learned from the MDS under the
//! join key at the OSD's start, before it serves, and at every check-in; a read of such a
//! copy is refused `CopyStale`, so that the client reads another copy, until a repair
//! puts the copy back and the MDS forgets the record.

//!
//! Learning in time: every check-in tells the MDS up to which record the OSD has applied
//! the list (`applied`), and an OSD that applied a longer list checks in once more at
//! once to say so; the client acknowledges a change that missed a copy only once the
//! MDS knows that the copy's OSD has the record, or once that OSD has been silent for
//! `OSD_DOWN_AFTER_MILLIS`. An OSD whose last check-in is older than
//! [`CHECK_IN_STALE_MILLIS`] (it was hung, or cut off from the MDS) checks in before it
//! serves the next request. So a copy that missed a change while its OSD was down, hung
//! or unreachable is not served, unless the OSD is cut off from the MDS and not from
//! readers (then its list is as old as its last check-in).

use maat_proto::limits::CHECK_IN_STALE_MILLIS;
use maat_proto::msg::{ErrorCode, ObjectId, OsdCommand, WireError};
use maat_proto::sync::{read, write};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// One check-in with the MDS (installed by the daemon shell, which does the I/O): true
/// when the OSD's lists are fresh from the MDS.
pub type CheckInHook = dyn Fn() -> bool + Send + Sync;

/// The (file, stripe) of every copy here that missed a change, as the MDS last said,
/// and when it last said so.
#[derive(Default)]
pub(crate) struct Missed {
    objects: RwLock<HashSet<(u64, u32)>>,
    hook: OnceLock<Arc<CheckInHook>>,
    /// When the list was last fresh, and when a stale list last caused a check-in
    /// (protocol milliseconds).
    fresh_at: AtomicU64,
    tried_at: AtomicU64,
    /// `next` of the MDS's last list applied (told to the MDS at the next check-in).
    applied: AtomicU64,
}

impl std::fmt::Debug for Missed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Missed")
            .field("objects", &self.len())
            .field("fresh_at", &self.fresh_at.load(Ordering::Relaxed))
            .finish()
    }
}

impl Missed {
    /// The MDS's complete list (every record numbered below `next`), fresh at `now`,
    /// replaces what was known.
    /// Check-ins may overlap: a list older than the one applied (a lower `next`) is
    /// not applied over it.
    pub(crate) fn replace(&self, objects: &[(u64, u32)], next: u64, now: u64) {
        let mut known = write(&self.objects);
        if next < self.applied.load(Ordering::Relaxed) {
            return;
        }
        *known = objects.iter().copied().collect();
        self.applied.store(next, Ordering::Relaxed);
        drop(known);
        self.fresh_at.fetch_max(now, Ordering::Relaxed);
    }

    /// `next` of the last list applied.
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Installs the check-in (once).
    pub(crate) fn set_hook(&self, hook: Arc<CheckInHook>) {
        let _first = self.hook.set(hook);
    }

    /// Checks in with the MDS now; true when it did. (No lock is held across the
    /// check-in: it waits on the network, and overlapping ones are harmless.)
    pub(crate) fn check_in(&self) -> bool {
        self.hook.get().is_some_and(|hook| hook())
    }

    /// Checks in first when the list is older than [`CHECK_IN_STALE_MILLIS`] at `now`
    /// (at most once per that time while check-ins fail, so that an MDS that is away
    /// slows one request a period, not every one).
    pub(crate) fn check_in_if_stale(&self, now: u64) {
        let stale =
            |at: &AtomicU64| now.saturating_sub(at.load(Ordering::Relaxed)) > CHECK_IN_STALE_MILLIS;
        if self.hook.get().is_none() || !stale(&self.fresh_at) || !stale(&self.tried_at) {
            return;
        }
        self.tried_at.fetch_max(now, Ordering::Relaxed);
        let _fresh = self.check_in();
    }

    /// How many are known.
    pub(crate) fn len(&self) -> usize {
        read(&self.objects).len()
    }

    /// Refuses a command that would serve `object`'s bytes or attributes while its copy
    /// here is recorded as missed. Changes, digests and conditional replacements (what a
    /// repair uses) go on.
    pub(crate) fn check(&self, object: ObjectId, command: &OsdCommand) -> Result<(), WireError> {
        let serves = matches!(
            command,
            OsdCommand::Read { .. } | OsdCommand::GetAttributes { .. }
        );
        if serves && read(&self.objects).contains(&(object.file, object.stripe)) {
            return Err(WireError::new(
                ErrorCode::CopyStale,
                format!(
                    "this copy of stripe {} of file {} missed a change; read another copy",
                    object.stripe, object.file
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_missed_copy_is_not_read_but_is_written_until_the_mds_forgets_it() {
        let m = Missed::default();
        let object = ObjectId {
            partition: 1,
            file: 9,
            stripe: 2,
        };
        let read = OsdCommand::Read {
            object,
            offset: 0,
            length: 10,
        };
        let write = OsdCommand::Write {
            object,
            offset: 0,
            data: vec![1],
            replace: false,
        };
        assert!(m.check(object, &read).is_ok());
        m.replace(&[(9, 2), (9, 5)], 7, 1_000);
        assert_eq!(m.applied(), 7);
        assert_eq!(m.len(), 2);
        let e = m.check(object, &read).unwrap_err();
        assert_eq!(e.code, ErrorCode::CopyStale);
        assert!(m.check(object, &write).is_ok());
        // Another stripe of the file, another file: served.
        let other = ObjectId {
            stripe: 3,
            ..object
        };
        assert!(m
            .check(
                other,
                &OsdCommand::Read {
                    object: other,
                    offset: 0,
                    length: 1
                }
            )
            .is_ok());
        // An older list (a check-in that overlapped a newer one) is not applied.
        m.replace(&[], 6, 1_500);
        assert_eq!(m.len(), 2);
        m.replace(&[], 8, 2_000);
        assert!(m.check(object, &read).is_ok());
    }
}
