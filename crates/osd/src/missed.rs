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
//! or unreachable is not served.
//!
//! An OSD cut off from the MDS and not from clients cannot learn its list, so it serves
//! nothing once its lease runs out: every object command is refused `CutOff` when the
//! last check-in that reached the MDS was sent more than [`OSD_LEASE_MILLIS`] ago (and
//! the check-in tried before the request failed too). The MDS counts an OSD silent for
//! `OSD_DOWN_AFTER_MILLIS`, a second longer, as serving nothing it was not told; before
//! the lease, such an OSD served its stale copies for as long as it was cut off.

use maat_proto::limits::{CHECK_IN_STALE_MILLIS, OSD_LEASE_MILLIS};
use maat_proto::msg::{ErrorCode, ObjectId, OsdCommand, WireError};
use maat_proto::sync::{read, write};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

/// One check-in with the MDS (installed by the daemon shell, which does the I/O): true
/// when the OSD's lists are fresh from the MDS.
pub type CheckInHook = dyn Fn() -> bool + Send + Sync;

/// The (file, stripe) of every copy here that missed a change, as the MDS last said,
/// and when it last said so.
#[derive(Default)]
pub(crate) struct Missed {
    objects: RwLock<HashSet<(u64, u32)>>,
    hook: OnceLock<Arc<CheckInHook>>,
    /// When the check-in that brought the list applied last was sent (the lease runs
    /// from there), and when a stale list last caused a check-in (protocol
    /// milliseconds).
    fresh_at: AtomicU64,
    tried_at: AtomicU64,
    /// `next` of the MDS's last list applied (told to the MDS at the next check-in).
    applied: AtomicU64,
    /// Held by a request's check-in: requests that find one in flight wait for it
    /// rather than judge the lease before it lands.
    checking: Mutex<()>,
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
    /// The MDS's complete list (every record numbered below `next`), asked for at
    /// `sent`, replaces what was known.
    /// Check-ins may overlap: a list older than the one applied (a lower `next`) is
    /// not applied over it.
    pub(crate) fn replace(&self, objects: &[(u64, u32)], next: u64, sent: u64) {
        let mut known = write(&self.objects);
        if next < self.applied.load(Ordering::Relaxed) {
            return;
        }
        *known = objects.iter().copied().collect();
        self.applied.store(next, Ordering::Relaxed);
        drop(known);
        self.fresh_at.fetch_max(sent, Ordering::Relaxed);
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
    /// slows one request a period, not every one). Requests that arrive while one is in
    /// flight wait for it.
    pub(crate) fn check_in_if_stale(&self, now: u64) {
        let stale =
            |at: &AtomicU64| now.saturating_sub(at.load(Ordering::Relaxed)) > CHECK_IN_STALE_MILLIS;
        if self.hook.get().is_none() || !stale(&self.fresh_at) {
            return;
        }
        // One check-in at a time; the requests that came meanwhile find the list fresh
        // (or the try too recent) once it is done.
        let _one = self.checking.lock().unwrap_or_else(PoisonError::into_inner);
        if !stale(&self.fresh_at) || !stale(&self.tried_at) {
            return;
        }
        self.tried_at.fetch_max(now, Ordering::Relaxed);
        let _fresh = self.check_in();
    }

    /// How many are known.
    pub(crate) fn len(&self) -> usize {
        read(&self.objects).len()
    }

    /// How long ago (at `now`) the last check-in the MDS answered was sent, if that is
    /// longer than the lease (the OSD serves nothing); `None` while the lease holds or
    /// with no way to check in.
    pub(crate) fn lease_lapsed(&self, now: u64) -> Option<u64> {
        let since = now.saturating_sub(self.fresh_at.load(Ordering::Relaxed));
        (self.hook.get().is_some() && since > OSD_LEASE_MILLIS).then_some(since)
    }

    /// Refuses every object command at `now` once the lease has run out (see the module
    /// documentation), and a command that would serve `object`'s bytes or attributes
    /// while its copy here is recorded as missed. Changes, digests and conditional
    /// replacements (what a repair uses) go on. An OSD with no way to check in (no hook:
    /// one without an MDS) has no lease.
    pub(crate) fn check(
        &self,
        object: ObjectId,
        command: &OsdCommand,
        now: u64,
    ) -> Result<(), WireError> {
        if let Some(since) = self.lease_lapsed(now) {
            return Err(WireError::new(
                ErrorCode::CutOff,
                format!(
                    "this OSD has not reached the MDS for {} ms (its lease is {OSD_LEASE_MILLIS} \
                     ms): it cannot tell which of its copies missed a change; use another copy",
                    since
                ),
            ));
        }
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

    /// Stripe `stripe` of file 9, a read of it and a write to it.
    fn object_read_write(stripe: u32) -> (ObjectId, OsdCommand, OsdCommand) {
        let object = ObjectId {
            partition: 1,
            file: 9,
            stripe,
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
        (object, read, write)
    }

    #[test]
    fn a_missed_copy_is_not_read_but_is_written_until_the_mds_forgets_it() {
        let m = Missed::default();
        let (object, read, write) = object_read_write(2);
        assert!(m.check(object, &read, 1_000).is_ok());
        m.replace(&[(9, 2), (9, 5)], 7, 1_000);
        assert_eq!(m.applied(), 7);
        assert_eq!(m.len(), 2);
        let e = m.check(object, &read, 1_000).unwrap_err();
        assert_eq!(e.code, ErrorCode::CopyStale);
        assert!(m.check(object, &write, 1_000).is_ok());
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
                },
                1_000
            )
            .is_ok());
        // An older list (a check-in that overlapped a newer one) is not applied.
        m.replace(&[], 6, 1_500);
        assert_eq!(m.len(), 2);
        m.replace(&[], 8, 2_000);
        assert!(m.check(object, &read, 1_000).is_ok());
    }

    #[test]
    fn an_osd_that_cannot_check_in_serves_nothing_once_its_lease_runs_out() {
        let m = Missed::default();
        let reachable = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let m = Arc::new(m);
        {
            let (m2, reachable, sent) = (Arc::downgrade(&m), reachable.clone(), sent.clone());
            m.set_hook(Arc::new(move || {
                let Some(m) = m2.upgrade() else { return false };
                if !reachable.load(Ordering::SeqCst) {
                    return false;
                }
                m.replace(&[], m.applied() + 1, sent.load(Ordering::SeqCst));
                true
            }));
        }
        let (object, read, write) = object_read_write(0);
        // Never checked in: nothing served.
        let start = 1_700_000_000_000;
        assert_eq!(
            m.check(object, &read, start).unwrap_err().code,
            ErrorCode::CutOff
        );
        // A check-in sent at `start` gives a lease to start + OSD_LEASE_MILLIS.
        sent.store(start, Ordering::SeqCst);
        assert!(m.check_in());
        let end = start + OSD_LEASE_MILLIS;
        for command in [&read, &write] {
            assert!(m.check(object, command, end).is_ok());
            let e = m.check(object, command, end + 1).unwrap_err();
            assert_eq!(e.code, ErrorCode::CutOff, "{e}");
        }
        // Cut off from the MDS: the check-in tried before a request fails, and the OSD
        // stays refused.
        reachable.store(false, Ordering::SeqCst);
        m.check_in_if_stale(end + 1);
        assert_eq!(
            m.check(object, &read, end + 1).unwrap_err().code,
            ErrorCode::CutOff
        );
        // Reachable again: the stale list makes the next request check in first, and
        // the lease runs from that check-in.
        reachable.store(true, Ordering::SeqCst);
        sent.store(end + CHECK_IN_STALE_MILLIS + 1, Ordering::SeqCst);
        m.check_in_if_stale(end + CHECK_IN_STALE_MILLIS + 2);
        assert!(m
            .check(object, &read, end + CHECK_IN_STALE_MILLIS + 2)
            .is_ok());
    }
}
