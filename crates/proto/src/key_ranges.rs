//! SPEC H6: the key-range permit, signed by the MDS. A user whose only access to an
//! encrypted file is a range grant from its owner gets, at open, a read capability
//! marked [`crate::capability::Mode::RANGE_KEYS`] (so that no KDS hands out the whole
//! file's keys under it) and this permit: the byte ranges of the file whose keys a KDS
//! may give that user under that capability. The KDS checks it with the MDS's public key
//! alone, like the capability.
//!
//! Ranges are whole leaves of the file's key tree (the MDS refuses others), ascending and
//! disjoint; the permit is bound to one capability id, one user and one file, and (since
//! rekeys, SPEC H7) to the newest key tree the file had when it was issued: a KDS opens
//! no lockbox of a later tree under it, so a grantee revoked and rekeyed away cannot
//! take the new tree's keys of its old ranges while its permit lasts.

use crate::codec::{Reader, Writer};
use crate::signed::{Body, Kind};
use crate::{CapabilityId, FileId, ProtoError, Result, UnixMillis, UserId};
use maat_crypto::kht::{KhtShape, Node};

pub use crate::limits::KEY_RANGES_MAX;

/// Set in the range count word when a tree version follows it (permits from before tree
/// versions have the bit clear and name none).
const TREE_VERSION_FOLLOWS: u32 = 0x8000_0000;

/// The fields of a key-range permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRanges {
    /// The capability (from the same open) this permit limits.
    pub capability: CapabilityId,
    /// The user it was issued to.
    pub user: UserId,
    /// The file.
    pub file: FileId,
    /// The byte ranges `[start, end)` whose keys may be granted: non-empty, ascending,
    /// disjoint, at most [`KEY_RANGES_MAX`].
    pub ranges: Vec<(u64, u64)>,
    /// Start of validity.
    pub start: UnixMillis,
    /// End of validity (the capability's).
    pub expiry: UnixMillis,
    /// The file's newest key tree version at issue: keys come from lockboxes of that
    /// tree or an earlier one only. `None` in permits from before tree versions (any
    /// tree; they are no longer issued).
    pub tree_version: Option<u32>,
}

impl KeyRanges {
    /// Whether every byte under `node` of a tree of shape `shape` lies inside one range
    /// (so its key opens nothing the permit does not name).
    pub fn allows(&self, shape: &KhtShape, node: Node) -> bool {
        shape
            .bytes_under(node)
            .is_ok_and(|(a, b)| self.ranges.iter().any(|&(s, e)| s <= a && b <= e))
    }

    /// Checks `ranges` are what a permit may hold: 1 to [`KEY_RANGES_MAX`], each non-empty,
    /// ascending and disjoint.
    pub fn check_ranges(ranges: &[(u64, u64)]) -> Result<()> {
        if ranges.is_empty() || ranges.len() > KEY_RANGES_MAX {
            return Err(ProtoError::TooLarge {
                what: "key-range permit ranges",
                len: ranges.len(),
                limit: KEY_RANGES_MAX,
            });
        }
        let sound = ranges.iter().all(|(s, e)| s < e)
            && ranges.windows(2).all(|w| matches!(w, [a, b] if a.1 <= b.0));
        if !sound {
            return Err(ProtoError::Malformed {
                what: "key-range permit",
                reason: "ranges empty, out of order or overlapping",
            });
        }
        Ok(())
    }
}

impl Body for KeyRanges {
    const KIND: Kind = Kind::KeyRanges;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.capability.0)
            .u64(self.user.0)
            .u64(self.file.0)
            .u64(self.start.0)
            .u64(self.expiry.0);
        let n = u32::try_from(self.ranges.len()).unwrap_or(u32::MAX);
        match self.tree_version {
            Some(version) => w.u32(n | TREE_VERSION_FOLLOWS).u32(version),
            None => w.u32(n),
        };
        for &(start, end) in &self.ranges {
            w.u64(start).u64(end);
        }
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let capability = CapabilityId(r.u64()?);
        let user = UserId(r.u64()?);
        let file = FileId(r.u64()?);
        let start = UnixMillis(r.u64()?);
        let expiry = UnixMillis(r.u64()?);
        let word = r.u32()?;
        let tree_version = if word & TREE_VERSION_FOLLOWS != 0 {
            Some(r.u32()?)
        } else {
            None
        };
        let n = (word & !TREE_VERSION_FOLLOWS) as usize;
        if n > KEY_RANGES_MAX {
            return Err(ProtoError::TooLarge {
                what: "key-range permit ranges",
                len: n,
                limit: KEY_RANGES_MAX,
            });
        }
        if n.saturating_mul(16) > r.remaining() {
            return Err(ProtoError::Truncated {
                what: "key-range permit",
            });
        }
        let ranges = (0..n)
            .map(|_| Ok((r.u64()?, r.u64()?)))
            .collect::<Result<Vec<_>>>()?;
        Self::check_ranges(&ranges)?;
        Ok(Self {
            capability,
            user,
            file,
            ranges,
            start,
            expiry,
            tree_version,
        })
    }
}

crate::signed::timed_by_fields!(KeyRanges);
impl crate::signed::SignedBody for KeyRanges {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::signed::{self, Unverified};
    use maat_crypto::sign::SigningKey;

    fn permit(ranges: Vec<(u64, u64)>) -> KeyRanges {
        KeyRanges {
            capability: CapabilityId(7),
            user: UserId(1001),
            file: FileId(42),
            ranges,
            start: UnixMillis(1_000),
            expiry: UnixMillis(2_000),
            tree_version: Some(3),
        }
    }

    #[test]
    fn a_permit_round_trips_and_allows_only_nodes_inside_its_ranges() {
        let mds = SigningKey::from_seed(&[1; 32]);
        let p = permit(vec![(0, 1 << 20), (3 << 20, 4 << 20)]);
        let bytes = signed::sign(p.clone(), &mds).encoded().to_vec();
        let back = Unverified::<KeyRanges>::decode(&bytes)
            .unwrap()
            .verify(&mds.verifying_key(), UnixMillis(1_500))
            .unwrap();
        assert_eq!(back.body(), &p);
        // A permit from before tree versions still decodes, naming none.
        let older = KeyRanges {
            tree_version: None,
            ..p.clone()
        };
        let bytes = signed::sign(older.clone(), &mds).encoded().to_vec();
        assert_eq!(
            bytes.len() + 4,
            signed::sign(p.clone(), &mds).encoded().len()
        );
        let back = Unverified::<KeyRanges>::decode(&bytes).unwrap();
        assert_eq!(back.unverified_body(), &older);

        let shape = crate::encrypted::file_shape();
        let leaf = shape.leaf_level();
        let leaf_bytes = shape.leaf_size_bytes();
        // Every node of the cover of a granted range is allowed; leaves next to it are not.
        for node in shape.cover(0, 1 << 20).unwrap() {
            assert!(p.allows(&shape, node), "{node:?}");
        }
        let outside = |offset: u64| Node {
            level: leaf,
            index: offset / leaf_bytes,
        };
        assert!(!p.allows(&shape, outside(1 << 20)));
        assert!(!p.allows(&shape, outside((3 << 20) - 1)));
        assert!(p.allows(&shape, outside(3 << 20)));
        // A node above the leaves spanning granted and ungranted bytes is refused.
        assert!(!p.allows(&shape, Node { level: 0, index: 0 }));
    }

    #[test]
    fn unsound_ranges_do_not_decode() {
        let mds = SigningKey::from_seed(&[1; 32]);
        for ranges in [
            vec![],
            vec![(5, 5)],
            vec![(0, 10), (5, 20)],
            vec![(10, 20), (0, 5)],
            vec![(0, 1); KEY_RANGES_MAX + 1],
        ] {
            let bytes = signed::sign(permit(ranges.clone()), &mds)
                .encoded()
                .to_vec();
            assert!(
                Unverified::<KeyRanges>::decode(&bytes).is_err(),
                "{ranges:?}"
            );
        }
    }
}
