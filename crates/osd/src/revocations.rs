//! SPEC M9 at the OSD: revocation notices in force. A data request whose capability a
//! notice names, whose authenticated user a notice names, or whose capability is delegated
//! to a job key a notice names (M10), is refused with `Revoked`.
//! A notice is forgotten at its expiry (when everything it concerns has expired anyway),
//! so the table shrinks by itself; its size is bounded by what the MDS keeps in force.
//!
//! An OSD serves data requests only after it has learned every notice in force from the
//! MDS once since it started (`synced`): an OSD that was down when a notice was pushed
//! catches up before it serves again.

use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::revocation::RevocationNotice;
use maat_proto::{CapabilityId, UnixMillis, UserId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// Notices in force, and whether the list was learned from the MDS since start.
#[derive(Default)]
pub(crate) struct Revoked {
    notices: RwLock<Vec<RevocationNotice>>,
    synced: AtomicBool,
}

impl Revoked {
    /// Applies a verified notice (once: a notice id already held changes nothing).
    pub fn apply(&self, notice: RevocationNotice, now: UnixMillis) {
        let mut notices = self.notices.write().unwrap_or_else(|p| p.into_inner());
        notices.retain(|n| n.expiry > now);
        if notice.expiry > now && !notices.iter().any(|n| n.notice_id == notice.notice_id) {
            notices.push(notice);
        }
    }

    /// Applies the complete list the MDS has in force, and records the catch-up.
    pub fn sync(&self, list: Vec<RevocationNotice>, now: UnixMillis) {
        self.notices
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n.expiry > now);
        for notice in list {
            self.apply(notice, now);
        }
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Whether the OSD has caught up with the MDS since it started.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Refuses a request by `user` under capability `id` (delegated to the job key with
    /// hash `key`, if any) that a notice in force names.
    pub fn check(
        &self,
        id: CapabilityId,
        user: UserId,
        key: Option<&[u8; 32]>,
        now: UnixMillis,
    ) -> Result<(), WireError> {
        let notices = self.notices.read().unwrap_or_else(|p| p.into_inner());
        for n in notices.iter().filter(|n| n.expiry > now) {
            if n.capability_ids.binary_search(&id).is_ok() {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("capability {} was revoked (notice {})", id.0, n.notice_id),
                ));
            }
            if key.is_some_and(|k| n.computation_keys.binary_search(k).is_ok()) {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("the job key was revoked (notice {})", n.notice_id),
                ));
            }
            if n.users.binary_search(&user).is_ok() {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("user {} was revoked (notice {})", user.0, n.notice_id),
                ));
            }
        }
        Ok(())
    }

    /// Revoked entries (capabilities plus users) held; expired notices are dropped at
    /// every push and every catch-up with the MDS (once a second).
    pub fn entries(&self) -> usize {
        self.notices
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|n| n.capability_ids.len() + n.users.len() + n.computation_keys.len())
            .sum()
    }
}
