//! The Horus keyed hash tree (SPEC H1, H2; paper 004 §3.1).
//!
//! `K(x, y) = KH(K(parent), x || y)` where `x` is the level (one byte) and `y` the region
//! index across the whole level (u64, big-endian). The file root key `K_R` sits above
//! level 0: level-0 keys are `KH(K_R, 0 || y)`. Level `d-1` holds the leaves, one per
//! block of `2^leaf_size_log2` bytes; each node of level `x-1` has `2^branching_log2[x-1]`
//! children at level `x`. Level 0 has no width limit, so keys exist for every offset,
//! including past the end of the file: writers extending a file agree on keys without
//! talking.
//!
//! A *range key* is a node key; holding it lets a client derive every leaf key below that
//! node and nothing else. [`KhtShape::cover`] returns the minimal set of nodes whose leaves
//! are exactly the blocks a byte range touches.
//!
//! Compact shape encoding (paper 004 stores ⟨B, f_0 … f_{d-1}⟩ in half-bytes):
//! `version(1)=1 || keyed_hash(1) || leaf_size_log2(1) || depth(1) || nibbles` where the
//! nibbles are `branching_log2 - 1` for levels 1..d-1, two per byte, high nibble first,
//! the last low nibble zero when d-1 is odd.

use crate::counters::{bump, global};
use crate::{hash, mac, CryptoError, Result, Secret32};

pub use crate::limits::KHT_DEPTH_MAX;
/// Smallest leaf (block) size, log2 bytes: 512 B.
pub const KHT_LEAF_SIZE_LOG2_MIN: u8 = 9;
pub use crate::limits::KHT_BRANCHING_LOG2_MAX;
pub use crate::limits::KHT_COVER_NODES_MAX;
pub use crate::limits::KHT_LEAF_SIZE_LOG2_MAX;
pub use crate::limits::KHT_REGION_SIZE_LOG2_MAX;
/// Version byte of the compact shape encoding.
pub const KHT_SHAPE_VERSION: u8 = 1;
pub use crate::limits::KHT_SHAPE_BYTES_MAX;

/// A keyed hash usable as the tree's KH.
pub trait KeyedHash {
    /// `KH(key, message)`.
    fn keyed_hash(&self, key: &[u8; 32], message: &[u8]) -> [u8; 32];
}

/// BLAKE3 in keyed mode.
#[derive(Debug, Clone, Copy)]
pub struct Blake3Keyed;
impl KeyedHash for Blake3Keyed {
    fn keyed_hash(&self, key: &[u8; 32], message: &[u8]) -> [u8; 32] {
        hash::blake3_keyed(key, &[message])
    }
}

/// HMAC-SHA256.
#[derive(Debug, Clone, Copy)]
pub struct HmacSha256Keyed;
impl KeyedHash for HmacSha256Keyed {
    fn keyed_hash(&self, key: &[u8; 32], message: &[u8]) -> [u8; 32] {
        mac::tag_raw(key, &[message])
    }
}

/// Which [`KeyedHash`] a tree uses (stored in its shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum KeyedHashAlg {
    /// [`Blake3Keyed`], the default.
    Blake3 = 1,
    /// [`HmacSha256Keyed`].
    HmacSha256 = 2,
}

impl KeyedHashAlg {
    fn from_byte(b: u8) -> Result<Self> {
        match b {
            1 => Ok(Self::Blake3),
            2 => Ok(Self::HmacSha256),
            _ => Err(CryptoError::InvalidShape("unknown keyed hash")),
        }
    }

    /// The implementation behind the [`KeyedHash`] trait.
    pub fn implementation(self) -> &'static dyn KeyedHash {
        match self {
            Self::Blake3 => &Blake3Keyed,
            Self::HmacSha256 => &HmacSha256Keyed,
        }
    }
}

/// A node of the tree: `(level x, index y)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// Level, 0 (largest regions) to depth-1 (leaves).
    pub level: u8,
    /// Region index across the whole level.
    pub index: u64,
}

/// A node key: the key of one region, from which every leaf key below it derives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeKey {
    /// Which node.
    pub node: Node,
    /// Its key.
    pub key: Secret32,
}

/// A tree's shape ⟨keyed hash, leaf size, branching per level⟩.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KhtShape {
    alg: KeyedHashAlg,
    leaf_size_log2: u8,
    /// `branching_log2[i]`: children per node of level `i`, at level `i+1`.
    branching_log2: Vec<u8>,
}

impl KhtShape {
    /// A shape with the given leaf size and per-level branching (`depth = branching.len() + 1`).
    pub fn new(alg: KeyedHashAlg, leaf_size_log2: u8, branching_log2: Vec<u8>) -> Result<Self> {
        if !(KHT_LEAF_SIZE_LOG2_MIN..=KHT_LEAF_SIZE_LOG2_MAX).contains(&leaf_size_log2) {
            return Err(CryptoError::InvalidShape("leaf size out of range"));
        }
        if branching_log2.len() + 1 > KHT_DEPTH_MAX {
            return Err(CryptoError::InvalidShape("tree too deep"));
        }
        if branching_log2
            .iter()
            .any(|b| !(1..=KHT_BRANCHING_LOG2_MAX).contains(b))
        {
            return Err(CryptoError::InvalidShape("branching out of range"));
        }
        let region: u32 =
            u32::from(leaf_size_log2) + branching_log2.iter().map(|b| u32::from(*b)).sum::<u32>();
        if region > u32::from(KHT_REGION_SIZE_LOG2_MAX) {
            return Err(CryptoError::InvalidShape("level-0 region too large"));
        }
        Ok(Self {
            alg,
            leaf_size_log2,
            branching_log2,
        })
    }

    /// Paper 004's IOR shape: 4 KiB leaves, branching 8, leaves at level 10 (level-0 regions
    /// of 2^42 bytes = 4 TiB, so a file of up to 4 TiB has a single level-0 key), BLAKE3.
    pub fn default_shape() -> Self {
        Self {
            alg: KeyedHashAlg::Blake3,
            leaf_size_log2: 12,
            branching_log2: vec![3; 10],
        }
    }

    /// Number of levels, `d`.
    pub fn depth(&self) -> u8 {
        // Bounded by KHT_DEPTH_MAX in every constructor.
        u8::try_from(self.branching_log2.len() + 1).unwrap_or(u8::MAX)
    }

    /// The leaf level, `d - 1`.
    pub fn leaf_level(&self) -> u8 {
        self.depth() - 1
    }

    /// Leaf (block) size in bytes.
    pub fn leaf_size_bytes(&self) -> u64 {
        1u64 << self.leaf_size_log2
    }

    /// The keyed hash in use.
    pub fn alg(&self) -> KeyedHashAlg {
        self.alg
    }

    /// log2 of the bytes one node of `level` covers.
    pub fn region_size_log2(&self, level: u8) -> Result<u32> {
        let below = self
            .branching_log2
            .get(usize::from(level)..)
            .ok_or(CryptoError::OutOfRange("level deeper than the tree"))?;
        Ok(u32::from(self.leaf_size_log2) + below.iter().map(|b| u32::from(*b)).sum::<u32>())
    }

    /// The canonical compact encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![
            KHT_SHAPE_VERSION,
            self.alg as u8,
            self.leaf_size_log2,
            self.depth(),
        ];
        for pair in self.branching_log2.chunks(2) {
            let hi = pair.first().map_or(0, |b| b - 1);
            let lo = pair.get(1).map_or(0, |b| b - 1);
            out.push(hi << 4 | lo);
        }
        out
    }

    /// Decodes the compact encoding, enforcing every limit and canonical padding.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let [version, alg, leaf, depth, rest @ ..] = bytes else {
            return Err(CryptoError::InvalidShape("truncated shape"));
        };
        if *version != KHT_SHAPE_VERSION {
            return Err(CryptoError::InvalidShape("unknown shape version"));
        }
        let depth = usize::from(*depth);
        if depth == 0 || depth > KHT_DEPTH_MAX {
            return Err(CryptoError::InvalidShape("depth out of range"));
        }
        let levels = depth - 1;
        if rest.len() != levels.div_ceil(2) {
            return Err(CryptoError::InvalidShape(
                "shape length does not match depth",
            ));
        }
        let mut branching = Vec::with_capacity(levels);
        for (i, byte) in rest.iter().enumerate() {
            branching.push((byte >> 4) + 1);
            if 2 * i + 1 < levels {
                branching.push((byte & 0x0f) + 1);
            } else if byte & 0x0f != 0 {
                return Err(CryptoError::InvalidShape("non-zero padding nibble"));
            }
        }
        Self::new(KeyedHashAlg::from_byte(*alg)?, *leaf, branching)
    }

    /// The node of `level` containing byte `offset`.
    pub fn node_at(&self, level: u8, offset: u64) -> Result<Node> {
        Ok(Node {
            level,
            index: offset >> self.region_size_log2(level)?,
        })
    }

    /// The half-open range of leaf indices under `node`.
    pub fn leaves_under(&self, node: Node) -> Result<(u64, u64)> {
        let shift = self.region_size_log2(node.level)? - u32::from(self.leaf_size_log2);
        let first = node
            .index
            .checked_shl(shift)
            .filter(|f| f >> shift == node.index);
        let first = first.ok_or(CryptoError::OutOfRange("node index beyond 2^64 bytes"))?;
        let end = first.saturating_add(1u64 << shift);
        Ok((first, end))
    }

    /// The byte range `[start, end)` a node covers (saturating at `u64::MAX`).
    pub fn bytes_under(&self, node: Node) -> Result<(u64, u64)> {
        let (first, end) = self.leaves_under(node)?;
        let to_bytes = |leaf: u64| {
            leaf.checked_shl(u32::from(self.leaf_size_log2))
                .filter(|b| b >> self.leaf_size_log2 == leaf)
                .unwrap_or(u64::MAX)
        };
        Ok((to_bytes(first), to_bytes(end)))
    }

    fn step(&self, parent: &Secret32, node: Node) -> Secret32 {
        bump!(global(), kht_derivations);
        let mut msg = [0u8; 9];
        msg[0] = node.level;
        msg[1..].copy_from_slice(&node.index.to_be_bytes());
        Secret32::from_bytes(self.alg.implementation().keyed_hash(parent.expose(), &msg))
    }

    /// Derives the key of `node` from the file root key `K_R`.
    pub fn node_key_from_root(&self, root: &Secret32, node: Node) -> Result<Secret32> {
        if node.level > self.leaf_level() {
            return Err(CryptoError::OutOfRange("level deeper than the tree"));
        }
        let target_shift = self.region_size_log2(node.level)?;
        let level0 = Node {
            level: 0,
            index: ancestor_index(node.index, self.region_size_log2(0)? - target_shift),
        };
        let start = RangeKey {
            node: level0,
            key: self.step(root, level0),
        };
        Ok(self.derive(&start, node)?.key)
    }

    /// Derives the key of `target` from a range key. Refuses any node not below (or equal
    /// to) the range key's node: a range key never yields keys outside its range.
    pub fn derive(&self, from: &RangeKey, target: Node) -> Result<RangeKey> {
        if target.level < from.node.level || target.level > self.leaf_level() {
            return Err(CryptoError::OutOfRange("target not below the range key"));
        }
        let target_shift = self.region_size_log2(target.level)?;
        let from_shift = self.region_size_log2(from.node.level)?;
        if ancestor_index(target.index, from_shift - target_shift) != from.node.index {
            return Err(CryptoError::OutOfRange("target not below the range key"));
        }
        let mut key = from.key.clone();
        for level in from.node.level + 1..=target.level {
            let index = ancestor_index(target.index, self.region_size_log2(level)? - target_shift);
            key = self.step(&key, Node { level, index });
        }
        Ok(RangeKey { node: target, key })
    }

    /// The key of the leaf holding byte `offset`, from a range key.
    pub fn leaf_key_for_offset(&self, from: &RangeKey, offset: u64) -> Result<Secret32> {
        let leaf = Node {
            level: self.leaf_level(),
            index: offset >> self.leaf_size_log2,
        };
        Ok(self.derive(from, leaf)?.key)
    }

    /// The minimal set of nodes whose leaves are exactly the blocks that bytes
    /// `[start, end)` touch, in ascending offset order.
    pub fn cover(&self, start: u64, end: u64) -> Result<Vec<Node>> {
        if start >= end {
            return Err(CryptoError::OutOfRange("empty byte range"));
        }
        let first_leaf = start >> self.leaf_size_log2;
        let end_leaf = ((end - 1) >> self.leaf_size_log2) + 1; // exclusive
        let mut out = Vec::new();
        let level0_shift = self.region_size_log2(0)? - u32::from(self.leaf_size_log2);
        let first0 = first_leaf >> level0_shift;
        let last0 = (end_leaf - 1) >> level0_shift;
        self.cover_nodes(0, first0, last0, first_leaf, end_leaf, &mut out)?;
        Ok(out)
    }

    fn cover_nodes(
        &self,
        level: u8,
        first: u64,
        last: u64,
        lo: u64,
        hi: u64,
        out: &mut Vec<Node>,
    ) -> Result<()> {
        let mut index = first;
        loop {
            let node = Node { level, index };
            let (a, b) = self.leaves_under(node)?;
            if lo <= a && b <= hi {
                if out.len() >= KHT_COVER_NODES_MAX {
                    return Err(CryptoError::TooLarge {
                        what: "key cover",
                        len: out.len() + 1,
                        limit: KHT_COVER_NODES_MAX,
                    });
                }
                out.push(node);
            } else if level < self.leaf_level() {
                let child_shift =
                    self.region_size_log2(level + 1)? - u32::from(self.leaf_size_log2);
                let child_first = a.max(lo) >> child_shift;
                let child_last = (b.min(hi) - 1) >> child_shift;
                self.cover_nodes(level + 1, child_first, child_last, lo, hi, out)?;
            }
            if index >= last {
                return Ok(());
            }
            index += 1;
        }
    }
}

fn ancestor_index(index: u64, shift: u32) -> u64 {
    index.checked_shr(shift).unwrap_or(0)
}
