//! Several MDS instances over one database (issue 42): which one this client asks, and
//! when a request may go to the next one after the current one did not answer.
//!
//! A client starts at a random instance (so that clients spread over them) and stays
//! with it while it answers: renewals and reservations are an instance's own, so staying
//! keeps them working. When an instance does not answer, the client moves to the next
//! and sends the request there if that is safe: always when the request was never sent
//! (the connection failed before it), else only for a read (asking again changes
//! nothing) or a change that travels as `MdsRequest::Once` (the instances answer a
//! second attempt from the first one's stored answer). Any other request whose answer
//! was lost fails, as with one MDS: it may have been applied.

use maat_proto::msg::MdsRequest;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The MDS instances of a cluster file, and the one asked now.
#[derive(Debug)]
pub(crate) struct MdsInstances {
    addresses: Vec<String>,
    at: AtomicUsize,
}

impl MdsInstances {
    /// `addresses` (at least one: the cluster file's `mds`), starting at the one `pick`
    /// selects.
    pub(crate) fn new(addresses: Vec<String>, pick: u32) -> Self {
        let n = addresses.len().max(1);
        Self {
            at: AtomicUsize::new(pick as usize % n),
            addresses,
        }
    }

    /// How many instances the cluster file lists.
    pub(crate) fn len(&self) -> usize {
        self.addresses.len()
    }

    /// The instance asked now: its index and address.
    pub(crate) fn current(&self) -> (usize, &str) {
        let i = self.at.load(Ordering::Relaxed) % self.addresses.len().max(1);
        (i, self.addresses.get(i).map_or("", String::as_str))
    }

    /// Instance `index` did not answer: the next one is asked from now on (unless another
    /// thread moved on already).
    pub(crate) fn failed(&self, index: usize) {
        let next = (index + 1) % self.addresses.len().max(1);
        let _ = self
            .at
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// `request` as it is sent to an MDS of `instances` instances: a change that may need a
/// second attempt elsewhere travels as `Once` under `id` (the same for every attempt).
pub(crate) fn wrapped(instances: usize, request: MdsRequest, id: [u8; 16]) -> MdsRequest {
    if instances > 1 && request.once_allowed() {
        MdsRequest::Once {
            id,
            request: Box::new(request),
        }
    } else {
        request
    }
}

/// Whether a request whose answer was lost may be sent again to another instance: a
/// `Once` change, a read, or a request whose second application is harmless (a second
/// block of reserved ids or renewal of the same capabilities: the first, if applied, is
/// simply never used).
pub(crate) fn may_repeat(request: &MdsRequest) -> bool {
    matches!(
        request,
        MdsRequest::Once { .. }
            | MdsRequest::Reserve { .. }
            | MdsRequest::ReserveSealed { .. }
            | MdsRequest::Renew { .. }
    ) || request.is_read_only()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_on_once_per_failure_and_wraps_around() {
        let m = MdsInstances::new(vec!["a".into(), "b".into(), "c".into()], 4);
        assert_eq!(m.current(), (1, "b"));
        m.failed(1);
        m.failed(1); // a second thread's report of the same failure
        assert_eq!(m.current(), (2, "c"));
        m.failed(2);
        assert_eq!(m.current(), (0, "a"));
    }

    #[test]
    fn only_changes_with_several_instances_travel_once() {
        let mkdir = MdsRequest::Mkdir {
            path: "/d".into(),
            mode: 0o755,
            parents: false,
            partition: None,
        };
        assert_eq!(wrapped(1, mkdir.clone(), [1; 16]), mkdir);
        assert!(may_repeat(&wrapped(2, mkdir.clone(), [1; 16])));
        let end = MdsRequest::JobEnd { key_hash: [2; 32] };
        assert!(!may_repeat(&wrapped(2, end, [1; 16])));
        assert!(!may_repeat(&mkdir));
        assert!(may_repeat(&MdsRequest::Stat { path: "/".into() }));
    }
}
