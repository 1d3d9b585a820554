//! Issue 42: the access-control version that every MDS instance over one store shares.
//!
//! Each instance keeps what it decides capabilities on in memory: the revocation notices
//! in force (loaded once, rewritten whole by a revoke), the capabilities it signed (to
//! hand out again, SPEC M5), the outstanding ones it renews (M8), and an `acl_version`
//! that invalidates them when its own access-control change commits
//! ([`crate::Mds::acl_change`]). A change at *another* instance (a revoke, a chmod, a
//! group edit) must reach them too, or this instance would hand out a revoked
//! capability from its cache, renew one, or rewrite the notice list without the other's
//! notice.
//!
//! So every access-control change also moves a counter in the store, `meta`
//! [`ACL_VERSION_KEY`], in the change's own batch (under the writer lock, so two
//! instances never write the same value), and an instance that finds the stored value
//! other than the one it last saw catches up before it decides: it drops its caches and
//! its loaded notices (read again from the store), and moves its own `acl_version` on,
//! so that renewal re-checks every outstanding capability, revocations included. Every
//! change reads the stored value once, and so does every issue and renewal on a store
//! other processes share (`MetaStore::shared`; alone, only this process moves it).

use crate::{MetaStore, Op, Result};
use std::sync::atomic::Ordering;

/// `meta` key of the shared access-control version: 8 bytes, big-endian; missing = 0.
pub(crate) const ACL_VERSION_KEY: &str = "acl_version";

/// The version as `store` holds it.
pub(crate) fn stored<S: MetaStore>(store: &S) -> Result<u64> {
    Ok(match store.meta(ACL_VERSION_KEY)? {
        Some(v) => crate::store::counter_value(ACL_VERSION_KEY, v)?,
        None => 0,
    })
}

/// The batch entry that records `version` (pushed into a change's own batch).
pub(crate) fn record(version: u64) -> Op {
    Op::PutMeta(ACL_VERSION_KEY.into(), version.to_be_bytes().to_vec())
}

impl<S: MetaStore> crate::Mds<S> {
    /// The stored version.
    pub(crate) fn stored_acl_version(&self) -> Result<u64> {
        stored(&self.store)
    }

    /// Whether `stored` is the version this instance last saw (none of its caches is
    /// older than the store's access-control state).
    pub(crate) fn acl_current(&self, stored: u64) -> bool {
        self.issuer.acl_seen.load(Ordering::SeqCst) == stored
    }

    /// Brings this instance's memory to the stored access-control state `stored` (another
    /// instance changed it). The caller holds the write side of the issue gate, so no
    /// issue or renewal runs on the old state meanwhile.
    pub(crate) fn catch_up_acl(&self, stored: u64) {
        if self.acl_current(stored) {
            return;
        }
        self.forget_revocations_loaded();
        self.forget_capabilities_cached();
        // A new local version: every cached grant and batch entry made at the old one is
        // stale, the ACL snapshot is rebuilt, and renewal re-checks what it renews.
        self.issuer.acl_version.fetch_add(1, Ordering::SeqCst);
        self.issuer.acl_seen.store(stored, Ordering::SeqCst);
        self.issuer.acl_catch_ups.fetch_add(1, Ordering::Relaxed);
    }
}
