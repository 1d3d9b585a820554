//! SPEC H3 on the data path: how an encrypted file's bytes sit in its stripe objects, and
//! which write generation each stripe holds.
//!
//! **Layout.** A file is striped as before ([`STRIPE_UNIT_BYTES`] of *plaintext* per
//! stripe object). Inside a stripe, plaintext block `b` (one Horus leaf, `leaf` bytes; the
//! last block of the file may be shorter) is sealed with its leaf key by
//! [`maat_crypto::aead::BlockKey`] and stored at object offset `b · (leaf + 40)` as
//! `ciphertext ‖ tag(16) ‖ salt(24)`. The AEAD's block index is the block's index in the
//! whole file, so a block moved to another place fails to open.
//!
//! **Additional data** of every block: `"maat/h3/v1" ‖ file(u64) ‖ tree_version(u32) ‖
//! generation(u64)`, big-endian. The generation is a random non-zero number a writer draws
//! for each stripe it (re)writes; the MDS records it with the size ([`FileCrypt`]), so
//! an older ciphertext of the same block put back in its place (a rollback, on the wire
//! or on the OSD's disk) was sealed under another generation and fails to open.
//!
//! The metadata an encrypted file keeps at the MDS (generations, key tree versions) is
//! [`FileCrypt`], in [`crate::file_crypt`].

pub use crate::file_crypt::{EarlierTree, FileCrypt, EARLIER_TREES_MAX, GENERATION_RUNS_MAX};
use crate::msg::STRIPE_UNIT_BYTES;
use crate::{ProtoError, Result};
use maat_crypto::aead::{BlockKey, BLOCK_OVERHEAD_BYTES};
use maat_crypto::kht::{KeyedHashAlg, KhtShape, Node, RangeKey};
use maat_crypto::{CryptoRngCore, Secret32};

/// Smallest leaf an encrypted file may use (log2 bytes): 4 KiB keeps the overhead at 1 %.
pub const ENCRYPTED_LEAF_LOG2_MIN: u8 = 12;
pub use crate::limits::ENCRYPTED_LEAF_LOG2_MAX;
pub use crate::limits::ENCRYPTED_OBJECT_BYTES_MAX;

/// The leaf size of new encrypted files (log2 bytes): 64 KiB. Each leaf costs a key
/// derivation, a block subkey and an AES key schedule; measured (`cargo bench -p
/// maat-proto --bench stripes`), opening a 512 KiB stripe took 159 µs with 4 KiB leaves,
/// 67 µs with 64 KiB leaves and 58 µs for one AES-GCM pass. Range grants are made in
/// whole leaves, so this is also their granularity.
pub const FILE_LEAF_LOG2: u8 = 16;

/// The key tree shape of new encrypted files: [`FILE_LEAF_LOG2`] leaves, branching 8,
/// BLAKE3, level-0 regions of 8 TiB (one level-0 key covers any file).
pub fn file_shape() -> KhtShape {
    // 16 + 9 × 3 = 43: within every KhtShape bound.
    KhtShape::new(KeyedHashAlg::Blake3, FILE_LEAF_LOG2, vec![3; 9])
        .unwrap_or_else(|_| KhtShape::default_shape())
}

const AAD_DOMAIN: &[u8; 10] = b"maat/h3/v1";

/// Who and what a stripe's blocks are bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeContext {
    /// The file.
    pub file: u64,
    /// Its key tree version.
    pub tree_version: u32,
    /// The stripe.
    pub stripe: u32,
    /// The write generation of the stripe.
    pub generation: u64,
}

impl StripeContext {
    fn aad(&self) -> [u8; 30] {
        let mut aad = [0u8; 30];
        aad[..10].copy_from_slice(AAD_DOMAIN);
        aad[10..18].copy_from_slice(&self.file.to_be_bytes());
        aad[18..22].copy_from_slice(&self.tree_version.to_be_bytes());
        aad[22..30].copy_from_slice(&self.generation.to_be_bytes());
        aad
    }
}

/// A block of an encrypted file failed to open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("block {block} (bytes {offset}..{end}) {reason}")]
pub struct BlockFailure {
    /// Its index in the file.
    pub block: u64,
    /// Its first plaintext byte.
    pub offset: u64,
    /// One past its last plaintext byte (as expected).
    pub end: u64,
    /// Why.
    pub reason: &'static str,
}

/// The leaf keys of one file, from the range keys a client was granted.
pub struct LeafKeys<'a> {
    shape: &'a KhtShape,
    granted: &'a [RangeKey],
    /// The last intermediate node derived and its key (blocks of one stripe share it).
    memo: Option<RangeKey>,
}

impl<'a> LeafKeys<'a> {
    /// Leaf keys derived from `granted` (range keys of the file's tree).
    pub fn new(shape: &'a KhtShape, granted: &'a [RangeKey]) -> Result<Self> {
        let leaf = shape.leaf_size_bytes();
        if !(1u64 << ENCRYPTED_LEAF_LOG2_MIN..=1u64 << ENCRYPTED_LEAF_LOG2_MAX).contains(&leaf) {
            return Err(ProtoError::Malformed {
                what: "key tree shape",
                reason: "leaf size unfit for file encryption",
            });
        }
        Ok(Self {
            shape,
            granted,
            memo: None,
        })
    }

    /// The leaf size in bytes.
    pub fn leaf_bytes(&self) -> u64 {
        self.shape.leaf_size_bytes()
    }

    /// The key of leaf `block` (`None`: no granted range covers it).
    pub fn key(&mut self, block: u64) -> Option<Secret32> {
        let leaf = Node {
            level: self.shape.leaf_level(),
            index: block,
        };
        if let Some(memo) = &self.memo {
            if let Ok(k) = self.shape.derive(memo, leaf) {
                return Some(k.key);
            }
        }
        let offset = block.checked_mul(self.leaf_bytes())?;
        let holds = |k: &&RangeKey| {
            self.shape
                .bytes_under(k.node)
                .is_ok_and(|(a, b)| a <= offset && offset < b)
        };
        // Granted keys come in offset order: the last one starting at or before the block
        // holds it, unless keys of several levels are mixed (then a scan finds it).
        let at = self.granted.partition_point(|k| {
            self.shape
                .bytes_under(k.node)
                .is_ok_and(|(a, _)| a <= offset)
        });
        let from = at
            .checked_sub(1)
            .and_then(|i| self.granted.get(i))
            .filter(holds)
            .or_else(|| self.granted.iter().find(holds))?;
        // Remember the deepest node that holds a whole stripe (or the granted node when
        // it is smaller), so the other blocks of the stripe cost a few steps each.
        let stripe_log2 = STRIPE_UNIT_BYTES.trailing_zeros();
        let mut level = from.node.level;
        while level < self.shape.leaf_level()
            && self
                .shape
                .region_size_log2(level + 1)
                .is_ok_and(|r| r >= stripe_log2)
        {
            level += 1;
        }
        let mid = self
            .shape
            .node_at(level, offset)
            .and_then(|n| self.shape.derive(from, n))
            .ok()?;
        let key = self.shape.derive(&mid, leaf).ok()?.key;
        self.memo = Some(mid);
        Some(key)
    }
}

/// Bytes a stripe of `plain` plaintext bytes takes sealed, with `leaf`-byte blocks.
pub fn sealed_len(plain: u64, leaf: u64) -> u64 {
    let overhead = BLOCK_OVERHEAD_BYTES as u64;
    let full = plain / leaf;
    let rest = plain % leaf;
    full * (leaf + overhead) + if rest > 0 { rest + overhead } else { 0 }
}

/// Plaintext bytes in a sealed stripe of `sealed` bytes (`None`: no valid layout has that
/// length, so blocks were cut).
pub fn plain_len(sealed: u64, leaf: u64) -> Option<u64> {
    let overhead = BLOCK_OVERHEAD_BYTES as u64;
    let full = sealed / (leaf + overhead);
    let rest = sealed % (leaf + overhead);
    match rest {
        0 => Some(full * leaf),
        r if r > overhead => Some(full * leaf + r - overhead),
        _ => None,
    }
}

/// Seals one stripe's plaintext (at most [`STRIPE_UNIT_BYTES`]).
pub fn seal_stripe(
    keys: &mut LeafKeys<'_>,
    context: &StripeContext,
    plaintext: &[u8],
    rng: &mut impl CryptoRngCore,
) -> std::result::Result<Vec<u8>, BlockFailure> {
    let leaf = keys.leaf_bytes();
    let aad = context.aad();
    let first_block = u64::from(context.stripe) * (STRIPE_UNIT_BYTES / leaf);
    let mut out = Vec::with_capacity(sealed_len(plaintext.len() as u64, leaf) as usize);
    for (i, chunk) in plaintext.chunks(leaf as usize).enumerate() {
        let block = first_block + i as u64;
        let offset = block * leaf;
        let failure = |reason| BlockFailure {
            block,
            offset,
            end: offset + chunk.len() as u64,
            reason,
        };
        let key = keys
            .key(block)
            .ok_or_else(|| failure("has no key granted"))?;
        let sealed = BlockKey::new(key)
            .seal(block, &aad, chunk, rng)
            .map_err(|_| failure("cannot be sealed"))?;
        out.extend_from_slice(&sealed);
    }
    Ok(out)
}

/// Opens a sealed stripe in place and returns its plaintext. `expected` is how many
/// plaintext bytes the file's size says the stripe holds at least (a stripe cut short is
/// an error naming the first missing block).
pub fn open_stripe(
    keys: &mut LeafKeys<'_>,
    context: &StripeContext,
    sealed: Vec<u8>,
    expected: u64,
) -> std::result::Result<Vec<u8>, BlockFailure> {
    open_stripe_part(keys, context, sealed, expected, 0..STRIPE_UNIT_BYTES)
}

/// [`open_stripe`] for a reader that needs only plaintext bytes `need` of the stripe
/// (offsets inside it) and may hold keys for part of it (SPEC H6 range grants): a block
/// outside `need` with no key granted comes back as zeros; every other block must open.
pub fn open_stripe_part(
    keys: &mut LeafKeys<'_>,
    context: &StripeContext,
    mut sealed: Vec<u8>,
    expected: u64,
    need: std::ops::Range<u64>,
) -> std::result::Result<Vec<u8>, BlockFailure> {
    let leaf = keys.leaf_bytes();
    let aad = context.aad();
    let first_block = u64::from(context.stripe) * (STRIPE_UNIT_BYTES / leaf);
    let unit = (leaf as usize) + BLOCK_OVERHEAD_BYTES;
    let plain = plain_len(sealed.len() as u64, leaf);
    if plain.is_none_or(|p| p < expected.min(STRIPE_UNIT_BYTES)) {
        let have = plain.unwrap_or(sealed.len() as u64 / unit as u64 * leaf);
        let block = first_block + have / leaf;
        return Err(BlockFailure {
            block,
            offset: block * leaf,
            end: (block + 1) * leaf,
            reason: "is missing or cut short",
        });
    }
    let mut written = 0usize;
    let mut read = 0usize;
    let mut i = 0u64;
    while read < sealed.len() {
        let block = first_block + i;
        let len = unit.min(sealed.len() - read);
        let offset = block * leaf;
        let failure = |reason| BlockFailure {
            block,
            offset,
            end: offset + (len - BLOCK_OVERHEAD_BYTES) as u64,
            reason,
        };
        let plain_at = i * leaf;
        let plain_len = (len - BLOCK_OVERHEAD_BYTES) as u64;
        let Some(key) = keys.key(block) else {
            if plain_at < need.end && need.start < plain_at + plain_len {
                return Err(failure("has no key granted"));
            }
            sealed
                .get_mut(written..written + plain_len as usize)
                .ok_or_else(|| failure("is cut short"))?
                .fill(0);
            written += plain_len as usize;
            read += len;
            i += 1;
            continue;
        };
        let piece = sealed
            .get_mut(read..read + len)
            .ok_or_else(|| failure("is cut short"))?;
        let opened = BlockKey::new(key)
            .open_in_place(block, &aad, piece)
            .map_err(|_| {
                failure("fails authentication (tampered, rolled back, or not this file's)")
            })?;
        let n = opened.len();
        sealed.copy_within(read..read + n, written);
        written += n;
        read += len;
        i += 1;
    }
    sealed.truncate(written);
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use maat_crypto::OsRng;

    fn keys(shape: &KhtShape) -> Vec<RangeKey> {
        let root = Secret32::from_bytes([7; 32]);
        let node = Node { level: 0, index: 0 };
        vec![RangeKey {
            node,
            key: shape.node_key_from_root(&root, node).unwrap(),
        }]
    }

    fn context(generation: u64) -> StripeContext {
        StripeContext {
            file: 9,
            tree_version: 1,
            stripe: 3,
            generation,
        }
    }

    #[test]
    fn new_files_use_64_kib_leaves_and_one_level_0_key_covers_any_file() {
        let shape = file_shape();
        assert_eq!(shape.leaf_size_bytes(), 1 << FILE_LEAF_LOG2);
        assert!(shape.region_size_log2(0).unwrap() >= 40);
        assert_ne!(shape, KhtShape::default_shape());
    }

    #[test]
    fn a_reader_granted_part_of_a_stripe_opens_that_part_only() {
        let shape = file_shape();
        let leaf = shape.leaf_size_bytes();
        let root = Secret32::from_bytes([7; 32]);
        let plain: Vec<u8> = (0..STRIPE_UNIT_BYTES).map(|i| (i % 253) as u8).collect();
        let everything = keys(&shape);
        let mut all = LeafKeys::new(&shape, &everything).unwrap();
        let sealed = seal_stripe(&mut all, &context(5), &plain, &mut OsRng).unwrap();
        // Granted: the stripe's first three blocks (stripe 3 starts at block 3·8).
        let first = 3 * STRIPE_UNIT_BYTES;
        let part: Vec<RangeKey> = shape
            .cover(first, first + 3 * leaf)
            .unwrap()
            .into_iter()
            .map(|node| RangeKey {
                node,
                key: shape.node_key_from_root(&root, node).unwrap(),
            })
            .collect();
        let mut k = LeafKeys::new(&shape, &part).unwrap();
        let opened =
            open_stripe_part(&mut k, &context(5), sealed.clone(), 0, 10..3 * leaf).unwrap();
        assert_eq!(opened[..(3 * leaf) as usize], plain[..(3 * leaf) as usize]);
        assert!(opened[(3 * leaf) as usize..].iter().all(|b| *b == 0));
        // A byte of the fourth block needed: refused, naming it.
        let e =
            open_stripe_part(&mut k, &context(5), sealed.clone(), 0, 0..3 * leaf + 1).unwrap_err();
        assert_eq!((e.block, e.reason), (3 * 8 + 3, "has no key granted"));
        assert!(open_stripe(&mut k, &context(5), sealed, 0).is_err());
    }

    #[test]
    fn stripes_round_trip_and_bind_their_context() {
        let shape = KhtShape::default_shape();
        let granted = keys(&shape);
        for len in [
            0usize,
            1,
            4095,
            4096,
            4097,
            100_000,
            STRIPE_UNIT_BYTES as usize,
        ] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut k = LeafKeys::new(&shape, &granted).unwrap();
            let sealed = seal_stripe(&mut k, &context(5), &plain, &mut OsRng).unwrap();
            assert_eq!(sealed.len() as u64, sealed_len(len as u64, 4096));
            assert_eq!(plain_len(sealed.len() as u64, 4096), Some(len as u64));
            let opened = open_stripe(&mut k, &context(5), sealed.clone(), len as u64).unwrap();
            assert_eq!(opened, plain);
            if len > 0 {
                // Another generation (a rollback) or another stripe fails, naming block 0
                // of the stripe.
                let e = open_stripe(&mut k, &context(6), sealed.clone(), 0).unwrap_err();
                assert_eq!(e.block, 3 * 128);
                let mut other = context(5);
                other.stripe = 4;
                assert!(open_stripe(&mut k, &other, sealed.clone(), 0).is_err());
                // A flipped byte names its block.
                let mut flipped = sealed.clone();
                let at = flipped.len() - 1;
                flipped[at] ^= 1;
                let e = open_stripe(&mut k, &context(5), flipped, 0).unwrap_err();
                assert_eq!(e.block, 3 * 128 + (len as u64 - 1) / 4096);
                // A stripe cut short of what the size promises.
                let cut = sealed[..sealed.len() - 1].to_vec();
                assert!(open_stripe(&mut k, &context(5), cut, len as u64).is_err());
            }
        }
    }
}
