//! Ed25519 signatures (SPEC suite: replaces ESIGN).
//!
//! Verification is strict (`verify_strict`: rejects non-canonical encodings and small-order
//! keys). Batch verification is a fast path for many signatures arriving together; when a
//! batch fails, each signature is checked alone so the caller learns which one was bad.

use crate::counters::{bump, global, Counters};
use crate::{CryptoError, Result};
use ed25519_dalek::Signer as _;

/// Length of an encoded public key.
pub const PUBLIC_KEY_BYTES: usize = 32;
/// Length of an encoded signature.
pub const SIGNATURE_BYTES: usize = 64;
pub use crate::limits::BATCH_SIGNATURES_MAX;

/// An Ed25519 signature.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; SIGNATURE_BYTES]);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

/// An Ed25519 signing key. Zeroized on drop (by `ed25519-dalek`).
#[derive(Clone)]
pub struct SigningKey {
    inner: ed25519_dalek::SigningKey,
    counters: Counters,
}

impl SigningKey {
    /// Generates a new key from the given random generator.
    pub fn generate(rng: &mut impl rand_core::CryptoRngCore) -> Self {
        Self {
            inner: ed25519_dalek::SigningKey::generate(rng),
            counters: global().clone(),
        }
    }

    /// Rebuilds a key from its 32-byte seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            inner: ed25519_dalek::SigningKey::from_bytes(seed),
            counters: global().clone(),
        }
    }

    /// The 32-byte seed, for storing the key. Keep it secret.
    pub fn to_seed(&self) -> zeroize::Zeroizing<[u8; 32]> {
        zeroize::Zeroizing::new(self.inner.to_bytes())
    }

    /// Counts this key's operations into `counters` instead of the global ones.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// The matching public key (sharing this key's counters).
    pub fn verifying_key(&self) -> VerifyingKey {
        VerifyingKey {
            inner: self.inner.verifying_key(),
            counters: self.counters.clone(),
        }
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> Signature {
        bump!(self.counters, signatures_made);
        Signature(self.inner.sign(message).to_bytes())
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("public", &self.verifying_key())
            .finish()
    }
}

/// An Ed25519 public key.
#[derive(Clone)]
pub struct VerifyingKey {
    inner: ed25519_dalek::VerifyingKey,
    counters: Counters,
}

impl VerifyingKey {
    /// Parses a public key, rejecting invalid points and small-order (weak) keys.
    pub fn from_bytes(bytes: &[u8; PUBLIC_KEY_BYTES]) -> Result<Self> {
        let inner = ed25519_dalek::VerifyingKey::from_bytes(bytes)
            .map_err(|_| CryptoError::InvalidPublicKey)?;
        if inner.is_weak() {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(Self {
            inner,
            counters: global().clone(),
        })
    }

    /// Counts this key's operations into `counters` instead of the global ones.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// The counters this key reports into.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; PUBLIC_KEY_BYTES] {
        self.inner.to_bytes()
    }

    /// Verifies `signature` over `message` (strict Ed25519).
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<()> {
        bump!(self.counters, signatures_verified);
        let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
        self.inner
            .verify_strict(message, &sig)
            .map_err(|_| CryptoError::BadSignature)
    }
}

impl PartialEq for VerifyingKey {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}
impl Eq for VerifyingKey {}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.inner.as_bytes();
        write!(
            f,
            "VerifyingKey({:02x}{:02x}{:02x}{:02x}…)",
            b[0], b[1], b[2], b[3]
        )
    }
}

/// One item of a batch: message, signature and the key that should have made it.
pub struct BatchItem<'a> {
    /// The signed message.
    pub message: &'a [u8],
    /// The signature.
    pub signature: &'a Signature,
    /// The signer's public key.
    pub key: &'a VerifyingKey,
}

/// Verifies many signatures at once (counted once per signature, plus one batch).
///
/// For signatures an honest signer made, the batch accepts exactly what individual
/// [`VerifyingKey::verify`] accepts (the two equations can differ only on signatures the
/// signer itself crafted with small-order components; in Maat only the MDS signs batched
/// tokens and it is trusted). A batch that fails is re-checked one by one to name the
/// culprit. Keys have passed [`VerifyingKey::from_bytes`], so none is weak.
pub fn verify_batch(items: &[BatchItem<'_>]) -> Result<()> {
    let Some(first) = items.first() else {
        return Ok(());
    };
    if items.len() > BATCH_SIGNATURES_MAX {
        return Err(CryptoError::TooLarge {
            what: "signature batch",
            len: items.len(),
            limit: BATCH_SIGNATURES_MAX,
        });
    }
    let counters = &first.key.counters;
    bump!(counters, batch_verifications);
    bump!(counters, signatures_verified, items.len());
    let messages: Vec<&[u8]> = items.iter().map(|i| i.message).collect();
    let signatures: Vec<ed25519_dalek::Signature> = items
        .iter()
        .map(|i| ed25519_dalek::Signature::from_bytes(&i.signature.0))
        .collect();
    let keys: Vec<ed25519_dalek::VerifyingKey> = items.iter().map(|i| i.key.inner).collect();
    if ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok() {
        return Ok(());
    }
    for (index, (item, sig)) in items.iter().zip(&signatures).enumerate() {
        if item.key.inner.verify_strict(item.message, sig).is_err() {
            return Err(CryptoError::BadSignatureInBatch { index });
        }
    }
    // Each signature verifies alone but the batch equation failed (possible only for
    // signatures crafted with small-order components): refuse the whole batch.
    Err(CryptoError::BadSignatureInBatch { index: 0 })
}
