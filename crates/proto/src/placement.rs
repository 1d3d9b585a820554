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

/// The OSDs that hold the stripes of `file` when it is `size` bytes long and kept in
/// `copies` copies: those of every stripe that holds a byte, and stripe 0's for an empty
/// file (where its first write goes). Stops early once every OSD is in.
pub fn holders(osds: &[OsdEntry], file: u64, size: u64, copies: usize) -> BTreeSet<u64> {
    let stripes = size.div_ceil(STRIPE_UNIT_BYTES).max(1);
    let mut found = BTreeSet::new();
    for stripe in 0..stripes {
        let Ok(stripe) = u32::try_from(stripe) else {
            break;
        };
        found.extend(copies_among(osds, file, stripe, copies.max(1)));
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
        let score = score(osd, file, stripe);
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

/// Issue 41: the OSDs that hold the `copies` copies of stripe `stripe` of `file`, first
/// copy first: the rendezvous ranking taken in order, skipping an OSD whose failure
/// domain ([`failure_domain`]) an earlier copy already uses while unused domains remain,
/// then the highest-ranked OSDs left. The first copy is always [`place_among`]'s OSD, so
/// a file made with one copy keeps it where it was. Fewer than `copies` when the map has
/// fewer OSDs; never the same OSD twice.
pub fn copies_among(osds: &[OsdEntry], file: u64, stripe: u32, copies: usize) -> Vec<u64> {
    let mut ranked: Vec<(f64, &OsdEntry)> =
        osds.iter().map(|o| (score(o, file, stripe), o)).collect();
    // Highest score first; equal scores by id, as `place_among` breaks them.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let domains: BTreeSet<&str> = osds.iter().map(failure_domain).collect();
    let mut chosen: Vec<u64> = Vec::with_capacity(copies);
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for (_, osd) in &ranked {
        if chosen.len() == copies || used.len() == domains.len() {
            break;
        }
        if used.insert(failure_domain(osd)) {
            chosen.push(osd.id);
        }
    }
    for (_, osd) in &ranked {
        if chosen.len() == copies {
            break;
        }
        if !chosen.contains(&osd.id) {
            chosen.push(osd.id);
        }
    }
    chosen
}

/// The failure domain of an OSD: the host part of the address clients reach it at (an
/// IP address or a name), so two copies never share a machine while enough machines
/// hold OSDs. (Zone labels in the cluster map are not built yet: issue 41.)
pub fn failure_domain(osd: &OsdEntry) -> &str {
    let address = osd.address.as_str();
    match address.rsplit_once(':') {
        // "[::1]:7000" → "::1"; "10.0.0.5:7000" → "10.0.0.5"; a bare name stays whole.
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => address,
    }
}

/// One OSD's rendezvous score for (file, stripe): `weight / -ln(u)` with `u` from
/// BLAKE3 (see the module documentation).
fn score(osd: &OsdEntry, file: u64, stripe: u32) -> f64 {
    let h = hash::blake3(&[
        b"maat/place/v1",
        &file.to_be_bytes(),
        &stripe.to_be_bytes(),
        &osd.id.to_be_bytes(),
    ]);
    let mut top = [0u8; 8];
    for (t, b) in top.iter_mut().zip(h.iter()) {
        *t = *b;
    }
    // 53 random bits → u in (0, 1].
    let u = ((u64::from_be_bytes(top) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    f64::from(osd.weight) / -u.ln().min(-f64::MIN_POSITIVE)
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
            assert_eq!(holders(&m.osds, file, 0, 1), first);
            assert_eq!(holders(&m.osds, file, STRIPE_UNIT_BYTES, 1), first);
            // One byte more reaches stripe 1.
            let two: BTreeSet<u64> = [0, 1].map(|s| place(&m, file, s).unwrap()).into();
            assert_eq!(holders(&m.osds, file, STRIPE_UNIT_BYTES + 1, 1), two);
        }
        // A large file spreads over every OSD.
        assert_eq!(holders(&m.osds, 7, 64 * STRIPE_UNIT_BYTES, 1).len(), 4);
        assert!(holders(&[], 7, 1, 1).is_empty());
    }

    fn on_hosts(hosts: &[&str]) -> Vec<OsdEntry> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| OsdEntry {
                id: i as u64 + 1,
                address: format!("{h}:{}", 7000 + i),
                sealing_key: [0; 32],
                weight: 1,
            })
            .collect()
    }

    #[test]
    fn copies_start_at_the_single_placement_and_spread_over_hosts_first() {
        // Two OSDs on each of three hosts.
        let osds = on_hosts(&[
            "10.0.0.1",
            "10.0.0.1",
            "10.0.0.2",
            "10.0.0.2",
            "[fd00::3]",
            "[fd00::3]",
        ]);
        for file in 0..2_000u64 {
            let three = copies_among(&osds, file, 0, 3);
            assert_eq!(three.len(), 3);
            assert_eq!(three[0], place_among(&osds, file, 0).unwrap());
            let hosts: BTreeSet<&str> = three
                .iter()
                .map(|id| failure_domain(&osds[*id as usize - 1]))
                .collect();
            assert_eq!(hosts.len(), 3, "file {file}: {three:?} share a host");
            // More copies than hosts: every host once, then the best-ranked rest.
            let five = copies_among(&osds, file, 0, 5);
            assert_eq!(five.len(), 5);
            assert_eq!(&five[..3], &three[..]);
            assert_eq!(five.iter().collect::<BTreeSet<_>>().len(), 5);
            // Never more than the OSDs there are.
            assert_eq!(copies_among(&osds, file, 0, 9).len(), 6);
        }
        assert_eq!(failure_domain(&osds[4]), "fd00::3");
        assert!(copies_among(&[], 1, 0, 3).is_empty());
    }

    #[test]
    fn one_host_still_gets_every_copy_on_distinct_osds_and_an_added_osd_moves_few() {
        let local = on_hosts(&["127.0.0.1"; 4]);
        let mut moved = 0;
        let bigger = on_hosts(&["127.0.0.1"; 5]);
        for file in 0..2_000u64 {
            let three = copies_among(&local, file, 1, 3);
            assert_eq!(three.iter().collect::<BTreeSet<_>>().len(), 3);
            let after = copies_among(&bigger, file, 1, 3);
            // A new OSD only takes copies; the others keep their relative order.
            let kept: Vec<u64> = after.iter().copied().filter(|id| *id != 5).collect();
            assert!(three.starts_with(&kept), "{three:?} → {after:?}");
            moved += usize::from(after.contains(&5));
        }
        // About 3/5 of the objects get a copy on the fifth OSD.
        assert!((1_000..1_400).contains(&moved), "{moved}");
        // Holders of a file kept in three copies include every copy of every stripe.
        let h = holders(&local, 9, 2 * STRIPE_UNIT_BYTES, 3);
        for stripe in 0..2 {
            for id in copies_among(&local, 9, stripe, 3) {
                assert!(h.contains(&id));
            }
        }
    }
}
