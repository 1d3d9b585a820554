//! Issue 41: copies that missed a change. A change of an object is acknowledged once
//! [`COPIES_DURABLE_MIN`](crate::limits::COPIES_DURABLE_MIN) of its copies took it; the
//! client records the others at the MDS (`MdsRequest::CopiesMissed`) before it
//! acknowledges, and each OSD asks the MDS, under the join key, which of its copies
//! missed one (`MdsPlainRequest::MissedCopies`, at its start before it serves and at each
//! check-in), refusing to serve those (`ErrorCode::CopyStale`) until a repair.

use maat_crypto::mac::MacKey;

/// Domain separation of [`missed_request_mac`].
const MISSED_REQUEST_CONTEXT: &[u8] = b"maat/missed-copies-request/v1\0";
/// Domain separation of [`missed_mac`].
const MISSED_CONTEXT: &[u8] = b"maat/missed-copies/v1\0";

/// The MAC under the join key on an OSD's request for its missed copies:
/// `HMAC(join, context ‖ osd (8, BE) ‖ nonce (16) ‖ applied (8, BE))`.
pub fn missed_request_mac(join: &MacKey, osd: u64, nonce: &[u8; 16], applied: u64) -> [u8; 32] {
    join.tag(&[
        MISSED_REQUEST_CONTEXT,
        &osd.to_be_bytes(),
        nonce,
        &applied.to_be_bytes(),
    ])
}

/// The MAC under the join key on the MDS's answer: `HMAC(join, context ‖ osd (8, BE) ‖
/// nonce (16) ‖ next (8, BE) ‖ n (4, BE) ‖ (file (8, BE) ‖ stripe (4, BE))·n)`.
pub fn missed_mac(
    join: &MacKey,
    osd: u64,
    nonce: &[u8; 16],
    next: u64,
    objects: &[(u64, u32)],
) -> [u8; 32] {
    let mut list = Vec::with_capacity(4 + 12 * objects.len());
    list.extend_from_slice(&(objects.len() as u32).to_be_bytes());
    for (file, stripe) in objects {
        list.extend_from_slice(&file.to_be_bytes());
        list.extend_from_slice(&stripe.to_be_bytes());
    }
    join.tag(&[
        MISSED_CONTEXT,
        &osd.to_be_bytes(),
        nonce,
        &next.to_be_bytes(),
        &list,
    ])
}

/// How many of `copies` copies a change must reach to be acknowledged by default (a new
/// partition's min_size).
pub fn durable_min(copies: usize) -> usize {
    copies.clamp(1, crate::limits::COPIES_DURABLE_MIN.max(1))
}

/// How many of the `placed` copies of an object a change must reach in a partition of
/// min_size `min_size`: at least 1, and never more than there are (a cluster with fewer
/// OSDs than the partition's copies places fewer).
pub fn effective_min(min_size: u8, placed: usize) -> usize {
    usize::from(min_size).clamp(1, placed.max(1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_macs_bind_the_osd_the_nonce_and_the_list() {
        let join = MacKey::new(maat_crypto::Secret32::from_bytes([7u8; 32]));
        let nonce = [1u8; 16];
        let objects = [(10, 0), (11, 2)];
        let a = missed_mac(&join, 3, &nonce, 5, &objects);
        assert_ne!(a, missed_mac(&join, 4, &nonce, 5, &objects));
        assert_ne!(a, missed_mac(&join, 3, &[2u8; 16], 5, &objects));
        assert_ne!(a, missed_mac(&join, 3, &nonce, 6, &objects));
        assert_ne!(a, missed_mac(&join, 3, &nonce, 5, &[(10, 0)]));
        assert_ne!(a, missed_mac(&join, 3, &nonce, 5, &[(10, 0), (11, 3)]));
        let q = missed_request_mac(&join, 3, &nonce, 5);
        assert_ne!(q, missed_request_mac(&join, 4, &nonce, 5));
        assert_ne!(q, missed_request_mac(&join, 3, &nonce, 6));
        // A request's MAC is never an answer's.
        assert_ne!(
            missed_request_mac(&join, 3, &nonce, 0),
            missed_mac(&join, 3, &nonce, 0, &[])
        );
    }

    #[test]
    fn a_change_needs_two_copies_or_all_of_fewer() {
        assert_eq!(durable_min(1), 1);
        assert_eq!(durable_min(2), 2);
        assert_eq!(durable_min(3), 2);
        assert_eq!(durable_min(5), 2);
        assert_eq!(durable_min(0), 1);
    }
}
