//! Every limit of the primitives in one place: tree depths and sizes, batch sizes, block
//! and passphrase lengths. Each module that applies one re-exports it under its old path.

/// Largest plaintext block accepted.
pub const BLOCK_PLAINTEXT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Longest passphrase accepted, in bytes.
pub const PASSPHRASE_BYTES_MAX: usize = 1024;

/// Deepest tree accepted (levels 0..d-1).
pub const KHT_DEPTH_MAX: usize = 16;

/// Largest leaf (block) size, log2 bytes: 1 GiB.
pub const KHT_LEAF_SIZE_LOG2_MAX: u8 = 30;

/// Largest level-0 region, log2 bytes.
pub const KHT_REGION_SIZE_LOG2_MAX: u8 = 62;

/// Largest branching per level, log2 (a nibble holds 1..=16).
pub const KHT_BRANCHING_LOG2_MAX: u8 = 16;

/// Most nodes one cover may hold.
pub const KHT_COVER_NODES_MAX: usize = 65_536;

/// Longest compact shape encoding.
pub const KHT_SHAPE_BYTES_MAX: usize = 4 + KHT_DEPTH_MAX / 2;

/// Longest proof (and deepest composed tree) accepted.
pub const MERKLE_DEPTH_MAX: usize = 64;

/// Most leaves in one tree.
pub const MERKLE_LEAVES_MAX: usize = 1 << 24;

/// Largest batch handed to [`verify_batch`] at once.
pub const BATCH_SIGNATURES_MAX: usize = 4096;
