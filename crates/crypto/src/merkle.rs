//! Domain-separated Merkle trees over sets of identifiers (SPEC M3, M4).
//!
//! * leaf hash  `BLAKE3(0x00 || member)`, inner hash `BLAKE3(0x01 || left || right)`;
//!   the tags make a leaf impossible to pass off as an inner node and vice versa.
//! * Shape: RFC 6962's (split at the largest power of two below `n`), built level by level
//!   by pairing nodes and promoting an odd last node unchanged.
//! * Composition: a tree can be built over *existing nodes* ([`MerkleTree::from_nodes`]),
//!   typically the roots of cached group trees plus a few leaf hashes. That costs one inner
//!   hash per node instead of rebuilding the members, and a member's proof is its proof in
//!   the subtree chained ([`MerkleProof::then`]) with the subtree root's proof in the outer tree.
//!   When the left subtree has `2^k` leaves and the right one at most `2^k`, the composed
//!   root equals the root built from scratch over all members.

use crate::counters::{bump, global};
use crate::hash::Digest;
use crate::{CryptoError, Result};

pub use crate::limits::MERKLE_DEPTH_MAX;
pub use crate::limits::MERKLE_LEAVES_MAX;
const LEAF_TAG: u8 = 0x00;
const INNER_TAG: u8 = 0x01;

/// Hash of one member identifier (its canonical bytes).
pub fn leaf_hash(member: &[u8]) -> Digest {
    bump!(global(), merkle_hashes);
    crate::hash::blake3(&[&[LEAF_TAG], member])
}

/// Hash of an inner node.
pub fn inner_hash(left: &Digest, right: &Digest) -> Digest {
    bump!(global(), merkle_hashes);
    crate::hash::blake3(&[&[INNER_TAG], left, right])
}

/// A Merkle tree with every level kept, so proofs are cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleTree {
    /// `levels[0]` are the nodes the tree was built over; the last level has one node.
    levels: Vec<Vec<Digest>>,
}

impl MerkleTree {
    /// Builds the tree over members' canonical bytes.
    pub fn from_members<M: AsRef<[u8]>>(members: &[M]) -> Result<Self> {
        Self::check_len(members.len())?;
        Self::from_nodes(members.iter().map(|m| leaf_hash(m.as_ref())).collect())
    }

    /// Builds the tree over existing nodes: leaf hashes or roots of other trees.
    pub fn from_nodes(nodes: Vec<Digest>) -> Result<Self> {
        Self::check_len(nodes.len())?;
        let mut levels = vec![nodes];
        while let Some(last) = levels.last() {
            if last.len() <= 1 {
                break;
            }
            let next: Vec<Digest> = last
                .chunks(2)
                .map(|pair| match pair {
                    [l, r] => inner_hash(l, r),
                    [single] => *single,
                    _ => [0u8; 32], // chunks(2) yields 1 or 2 items
                })
                .collect();
            levels.push(next);
        }
        Ok(Self { levels })
    }

    fn check_len(len: usize) -> Result<()> {
        if len == 0 {
            return Err(CryptoError::InvalidMerkle("empty set"));
        }
        if len > MERKLE_LEAVES_MAX {
            return Err(CryptoError::TooLarge {
                what: "Merkle tree",
                len,
                limit: MERKLE_LEAVES_MAX,
            });
        }
        Ok(())
    }

    /// The root hash.
    pub fn root(&self) -> Digest {
        self.levels
            .last()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or([0u8; 32])
    }

    /// Number of nodes the tree was built over.
    pub fn len(&self) -> usize {
        self.levels.first().map_or(0, Vec::len)
    }

    /// Always false: empty trees cannot be built.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Proof that the node at `index` (of those the tree was built over) is in the tree.
    pub fn prove(&self, index: usize) -> Result<MerkleProof> {
        if index >= self.len() {
            return Err(CryptoError::OutOfRange("Merkle leaf index"));
        }
        let mut steps = Vec::new();
        let mut i = index;
        for level in self.levels.iter().take(self.levels.len().saturating_sub(1)) {
            let sibling = i ^ 1;
            if let Some(node) = level.get(sibling) {
                let side = if sibling < i { Side::Left } else { Side::Right };
                steps.push((side, *node));
            }
            i /= 2;
        }
        Ok(MerkleProof { steps })
    }
}

/// Which side of the path a sibling hash sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The sibling is the left child.
    Left,
    /// The sibling is the right child.
    Right,
}

/// A membership proof: sibling hashes from the leaf up to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleProof {
    steps: Vec<(Side, Digest)>,
}

impl MerkleProof {
    /// Builds a proof from received steps, enforcing the depth limit.
    pub fn from_steps(steps: Vec<(Side, Digest)>) -> Result<Self> {
        if steps.len() > MERKLE_DEPTH_MAX {
            return Err(CryptoError::TooLarge {
                what: "Merkle proof",
                len: steps.len(),
                limit: MERKLE_DEPTH_MAX,
            });
        }
        Ok(Self { steps })
    }

    /// The steps, leaf first.
    pub fn steps(&self) -> &[(Side, Digest)] {
        &self.steps
    }

    /// Extends a proof inside a subtree with the subtree root's proof in an outer tree.
    pub fn then(mut self, outer: MerkleProof) -> Result<Self> {
        self.steps.extend(outer.steps);
        Self::from_steps(self.steps)
    }

    /// The root this proof leads to from `node`.
    pub fn root_from_node(&self, node: Digest) -> Digest {
        self.steps
            .iter()
            .fold(node, |acc, (side, sibling)| match side {
                Side::Left => inner_hash(sibling, &acc),
                Side::Right => inner_hash(&acc, sibling),
            })
    }

    /// Checks that `member` is in the tree with root `root` (constant-time comparison).
    pub fn verify_member(&self, member: &[u8], root: &Digest) -> Result<()> {
        let computed = self.root_from_node(leaf_hash(member));
        if crate::secret::ct_eq(&computed, root) {
            Ok(())
        } else {
            Err(CryptoError::BadMerkleProof)
        }
    }
}
