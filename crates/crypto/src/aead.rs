//! Per-block authenticated encryption (SPEC H3; suite: AES-256-GCM via ring).
//!
//! A rewritten block must never reuse a (key, nonce) pair, even when two writers that
//! never talk (Horus: writers of one region share its leaf key) write the same block.
//! Counters cannot guarantee that without coordination, so each write draws a fresh
//! 24-byte random salt and encrypts under a **per-write subkey**
//! `BLAKE3-keyed(block_key, "maat-block-v1" || block_index_be || salt)` with a zero nonce.
//! Two writes share a (key, nonce) pair only if their 192-bit salts collide.
//!
//! Sealed layout: `ciphertext || tag(16) || salt(24)` (salt last so sealing works in place).
//! The AEAD additional data is `block_index_be || aad`, so a block moved to another index
//! or another context fails to open.

use crate::counters::{bump, global, Counters};
use crate::{hash, CryptoError, Result, Secret32};
use ring::aead;

/// Random salt drawn for every block write.
pub const BLOCK_SALT_BYTES: usize = 24;
/// AEAD tag length.
pub const BLOCK_TAG_BYTES: usize = 16;
/// Bytes a sealed block adds to its plaintext.
pub const BLOCK_OVERHEAD_BYTES: usize = BLOCK_TAG_BYTES + BLOCK_SALT_BYTES;
pub use crate::limits::BLOCK_PLAINTEXT_BYTES_MAX;
const BLOCK_DOMAIN: &[u8] = b"maat-block-v1";

/// A key for encrypting blocks (for example a Horus leaf key). Zeroized on drop.
#[derive(Clone)]
pub struct BlockKey {
    key: Secret32,
    counters: Counters,
}

impl std::fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockKey(<redacted>)")
    }
}

impl BlockKey {
    /// Wraps a secret as a block key.
    pub fn new(key: Secret32) -> Self {
        Self {
            key,
            counters: global().clone(),
        }
    }

    /// Counts this key's operations into `counters`.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    fn subkey(&self, block_index: u64, salt: &[u8; BLOCK_SALT_BYTES]) -> Result<aead::LessSafeKey> {
        let sub = Secret32::from_bytes(hash::blake3_keyed(
            self.key.expose(),
            &[BLOCK_DOMAIN, &block_index.to_be_bytes(), salt],
        ));
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, sub.expose())
            .map_err(|_| CryptoError::InvalidParameter("AES-256-GCM key"))?;
        Ok(aead::LessSafeKey::new(unbound))
    }

    /// Encrypts `buf` (plaintext) in place, appending tag and salt.
    pub fn seal_in_place(
        &self,
        block_index: u64,
        aad: &[u8],
        buf: &mut Vec<u8>,
        rng: &mut impl rand_core::CryptoRngCore,
    ) -> Result<()> {
        if buf.len() > BLOCK_PLAINTEXT_BYTES_MAX {
            return Err(CryptoError::TooLarge {
                what: "block",
                len: buf.len(),
                limit: BLOCK_PLAINTEXT_BYTES_MAX,
            });
        }
        let mut salt = [0u8; BLOCK_SALT_BYTES];
        rng.fill_bytes(&mut salt);
        let key = self.subkey(block_index, &salt)?;
        bump!(self.counters, aead_bytes_sealed, buf.len());
        let full_aad = [&block_index.to_be_bytes()[..], aad].concat();
        key.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key([0u8; 12]),
            aead::Aad::from(&full_aad),
            buf,
        )
        .map_err(|_| CryptoError::InvalidParameter("block too long"))?;
        buf.extend_from_slice(&salt);
        Ok(())
    }

    /// Encrypts one block, returning `ciphertext || tag || salt`.
    pub fn seal(
        &self,
        block_index: u64,
        aad: &[u8],
        plaintext: &[u8],
        rng: &mut impl rand_core::CryptoRngCore,
    ) -> Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(plaintext.len() + BLOCK_OVERHEAD_BYTES);
        buf.extend_from_slice(plaintext);
        self.seal_in_place(block_index, aad, &mut buf, rng)?;
        Ok(buf)
    }

    /// Decrypts and authenticates a sealed block in place; returns the plaintext slice.
    pub fn open_in_place<'a>(
        &self,
        block_index: u64,
        aad: &[u8],
        sealed: &'a mut [u8],
    ) -> Result<&'a mut [u8]> {
        let body_len = sealed
            .len()
            .checked_sub(BLOCK_SALT_BYTES)
            .ok_or(CryptoError::DecryptionFailed)?;
        if body_len < BLOCK_TAG_BYTES {
            return Err(CryptoError::DecryptionFailed);
        }
        let (body, salt) = sealed.split_at_mut(body_len);
        let salt: [u8; BLOCK_SALT_BYTES] = (&*salt)
            .try_into()
            .map_err(|_| CryptoError::DecryptionFailed)?;
        let key = self.subkey(block_index, &salt)?;
        bump!(self.counters, aead_bytes_opened, body_len - BLOCK_TAG_BYTES);
        let full_aad = [&block_index.to_be_bytes()[..], aad].concat();
        key.open_in_place(
            aead::Nonce::assume_unique_for_key([0u8; 12]),
            aead::Aad::from(&full_aad),
            body,
        )
        .map_err(|_| CryptoError::DecryptionFailed)
    }

    /// Decrypts one sealed block into a new vector.
    pub fn open(&self, block_index: u64, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>> {
        let mut buf = sealed.to_vec();
        let len = self.open_in_place(block_index, aad, &mut buf)?.len();
        buf.truncate(len);
        Ok(buf)
    }
}
