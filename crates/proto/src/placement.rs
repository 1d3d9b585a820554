//! SPEC T8: placement computed from the cluster map, never looked up.
//!
//! Weighted rendezvous hashing (highest random weight): for object (file, stripe) every
//! OSD draws `h = BLAKE3("maat/place/v1" ‖ file ‖ stripe ‖ osd id)` mapped to u ∈ (0, 1),
//! scores `weight / -ln(u)`, and the highest score wins. Adding or removing an OSD moves
//! only the objects that land on or leave it, and an OSD of weight 2 receives twice the
//! objects of one of weight 1.
//!
//! Clients place every stripe they read or write; the MDS places a file's stripes to give
//! a reader T10 credentials (SPEC T2) for the OSDs that hold them and no others.

use crate::msg::{ClusterMap, OsdEntry, STRIPE_UNIT_BYTES};
use maat_crypto::hash;
use std::collections::BTreeSet;

/// The OSD id that holds stripe `stripe` of `file`, or `None` for an empty map.
pub fn place(map: &ClusterMap, file: u64, stripe: u32) -> Option<u64> {
    place_among(&map.osds, file, stripe)
}

/// The OSDs that hold the stripes of `file` when it is `size` bytes long: those of every
/// stripe that holds a byte, and stripe 0's for an empty file (where its first write
/// goes). Stops early once every OSD is in.
pub fn holders(osds: &[OsdEntry], file: u64, size: u64) -> BTreeSet<u64> {
    let stripes = size.div_ceil(STRIPE_UNIT_BYTES).max(1);
    let mut found = BTreeSet::new();
    for stripe in 0..stripes {
        let Ok(stripe) = u32::try_from(stripe) else {
            break;
        };
        found.extend(place_among(osds, file, stripe));
        if found.len() == osds.len() {
            break;
        }
    }
    found
}

/// [`place`] over a list of OSDs.
pub fn place_among(osds: &[OsdEntry], file: u64, stripe: u32) -> Option<u64> {
    let mut best: Option<(f64, u64)> = None;
    for osd in osds {
        let h = hash::blake3(&[
            b"maat/place/v1",
            &file.to_be_bytes(),
            &stripe.to_be_bytes(),
            &osd.id.to_be_bytes(),
        ]);
        let mut top = [0u8; 8];
        top.copy_from_slice(h.get(..8)?);
        // 53 random bits → u in (0, 1].
        let u = ((u64::from_be_bytes(top) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let score = f64::from(osd.weight) / -u.ln().min(-f64::MIN_POSITIVE);
        let better = match best {
            None => true,
            Some((s, id)) => score > s || (score == s && osd.id < id),
        };
        if better {
            best = Some((score, osd.id));
        }
    }
    best.map(|(_, id)| id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn map(weights: &[u32]) -> ClusterMap {
        ClusterMap {
            epoch: 1,
            osds: weights
                .iter()
                .enumerate()
                .map(|(i, w)| OsdEntry {
                    id: i as u64 + 1,
                    address: String::new(),
                    sealing_key: [0; 32],
                    weight: *w,
                })
                .collect(),
            ..ClusterMap::default()
        }
    }

    #[test]
    fn weights_are_respected_and_changes_move_few_objects() {
        let m = map(&[1, 1, 2]);
        let mut counts = [0u32; 3];
        for f in 0..20_000u64 {
            counts[(place(&m, f, 0).unwrap() - 1) as usize] += 1;
        }
        // Expect 5000 / 5000 / 10000 within a few percent.
        assert!((4500..5500).contains(&counts[0]), "{counts:?}");
        assert!((4500..5500).contains(&counts[1]), "{counts:?}");
        assert!((9300..10700).contains(&counts[2]), "{counts:?}");
        // Adding an OSD only moves objects onto it.
        let bigger = map(&[1, 1, 2, 1]);
        for f in 0..5_000u64 {
            let before = place(&m, f, 3).unwrap();
            let after = place(&bigger, f, 3).unwrap();
            assert!(after == before || after == 4);
        }
        assert_eq!(place(&map(&[]), 1, 0), None);
    }

    #[test]
    fn holders_are_the_osds_of_the_stripes_that_hold_bytes() {
        let m = map(&[1, 1, 1, 1]);
        for file in 0..50u64 {
            // Empty and small files: stripe 0's OSD only.
            let first = BTreeSet::from([place(&m, file, 0).unwrap()]);
            assert_eq!(holders(&m.osds, file, 0), first);
            assert_eq!(holders(&m.osds, file, STRIPE_UNIT_BYTES), first);
            // One byte more reaches stripe 1.
            let two: BTreeSet<u64> = [0, 1].map(|s| place(&m, file, s).unwrap()).into();
            assert_eq!(holders(&m.osds, file, STRIPE_UNIT_BYTES + 1), two);
        }
        // A large file spreads over every OSD.
        assert_eq!(holders(&m.osds, 7, 64 * STRIPE_UNIT_BYTES).len(), 4);
        assert!(holders(&[], 7, 1).is_empty());
    }
}
