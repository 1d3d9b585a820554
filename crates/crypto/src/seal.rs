//! Sealing a message to a public key: X25519 + HKDF-SHA256 + AES-256-GCM.
//!
//! Layout of a sealed box: `ephemeral_public(32) || ciphertext || tag(16)`.
//! The AEAD key is `HKDF-SHA256(salt = SEAL_SALT, ikm = X25519(eph, recipient),
//! info = [context, ephemeral_public, recipient_public])` (parts length-prefixed), and the
//! nonce is all zeros: every box has a fresh ephemeral key, hence a fresh AEAD key.
//! `context` is a domain-separation string chosen by the caller (one per token kind) and
//! `aad` binds the box to the data around it.

use crate::counters::{bump, global, Counters};
use crate::{kdf, CryptoError, Result};
use ring::aead;
use zeroize::Zeroizing;

/// Bytes a sealed box adds to its plaintext.
pub const SEAL_OVERHEAD_BYTES: usize = 32 + 16;
/// Length of an X25519 public key.
pub const SEALING_PUBLIC_KEY_BYTES: usize = 32;
const SEAL_SALT: &[u8] = b"maat-seal-v1";

/// An X25519 secret key that can open boxes sealed to its public key. Zeroized on drop.
#[derive(Clone)]
pub struct SealingSecretKey {
    inner: x25519_dalek::StaticSecret,
    counters: Counters,
}

/// An X25519 public key to seal messages to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SealingPublicKey(pub [u8; SEALING_PUBLIC_KEY_BYTES]);

impl std::fmt::Debug for SealingPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SealingPublicKey({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

impl SealingSecretKey {
    /// Generates a new key pair.
    pub fn generate(rng: &mut impl rand_core::CryptoRngCore) -> Self {
        Self {
            inner: x25519_dalek::StaticSecret::random_from_rng(rng),
            counters: global().clone(),
        }
    }

    /// Rebuilds a key from its 32 secret bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self {
            inner: x25519_dalek::StaticSecret::from(bytes),
            counters: global().clone(),
        }
    }

    /// The secret bytes, for storage. Keep them secret.
    pub fn to_bytes(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.inner.to_bytes())
    }

    /// Counts this key's operations into `counters`.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// The public key boxes are sealed to.
    pub fn public_key(&self) -> SealingPublicKey {
        SealingPublicKey(x25519_dalek::PublicKey::from(&self.inner).to_bytes())
    }

    /// Raw X25519 agreement with a peer's public key (for SET MASTER KEY style exchanges).
    /// Refuses non-contributory results (small-order peer keys).
    pub fn agree(&self, peer: &SealingPublicKey) -> Result<Zeroizing<[u8; 32]>> {
        bump!(self.counters, key_agreements);
        self.agree_uncounted(peer)
    }

    fn agree_uncounted(&self, peer: &SealingPublicKey) -> Result<Zeroizing<[u8; 32]>> {
        let shared = self
            .inner
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer.0));
        if !shared.was_contributory() {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(Zeroizing::new(shared.to_bytes()))
    }

    /// Opens a box sealed to this key under the same `context` and `aad`.
    pub fn open(&self, context: &[u8], aad: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        bump!(self.counters, unseals);
        let (eph, body) = sealed
            .split_first_chunk::<32>()
            .ok_or(CryptoError::DecryptionFailed)?;
        if body.len() < 16 {
            return Err(CryptoError::DecryptionFailed);
        }
        let eph = SealingPublicKey(*eph);
        let shared = self
            .agree_uncounted(&eph)
            .map_err(|_| CryptoError::DecryptionFailed)?;
        let key = box_key(&shared, context, &eph, &self.public_key())?;
        let mut buf = Zeroizing::new(body.to_vec());
        let plain_len = key
            .open_in_place(
                aead::Nonce::assume_unique_for_key([0u8; 12]),
                aead::Aad::from(aad),
                &mut buf,
            )
            .map_err(|_| CryptoError::DecryptionFailed)?
            .len();
        buf.truncate(plain_len);
        Ok(buf)
    }
}

impl std::fmt::Debug for SealingSecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingSecretKey")
            .field("public", &self.public_key())
            .finish()
    }
}

impl SealingPublicKey {
    /// Seals `plaintext` so that only the holder of the matching secret key can open it.
    pub fn seal(
        &self,
        context: &[u8],
        aad: &[u8],
        plaintext: &[u8],
        rng: &mut impl rand_core::CryptoRngCore,
    ) -> Result<Vec<u8>> {
        self.seal_counted(context, aad, plaintext, rng, global())
    }

    /// [`SealingPublicKey::seal`] counting into the given counters.
    pub fn seal_counted(
        &self,
        context: &[u8],
        aad: &[u8],
        plaintext: &[u8],
        rng: &mut impl rand_core::CryptoRngCore,
        counters: &Counters,
    ) -> Result<Vec<u8>> {
        bump!(counters, seals);
        let eph_secret = x25519_dalek::StaticSecret::random_from_rng(rng);
        let eph = SealingPublicKey(x25519_dalek::PublicKey::from(&eph_secret).to_bytes());
        let shared = eph_secret.diffie_hellman(&x25519_dalek::PublicKey::from(self.0));
        if !shared.was_contributory() {
            return Err(CryptoError::InvalidPublicKey);
        }
        let key = box_key(shared.as_bytes(), context, &eph, self)?;
        let mut out = Vec::with_capacity(SEAL_OVERHEAD_BYTES + plaintext.len());
        out.extend_from_slice(&eph.0);
        let mut body = plaintext.to_vec();
        key.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key([0u8; 12]),
            aead::Aad::from(aad),
            &mut body,
        )
        .map_err(|_| CryptoError::InvalidParameter("plaintext too long to seal"))?;
        out.extend_from_slice(&body);
        Ok(out)
    }
}

fn box_key(
    shared: &[u8; 32],
    context: &[u8],
    eph: &SealingPublicKey,
    recipient: &SealingPublicKey,
) -> Result<aead::LessSafeKey> {
    let secret = kdf::hkdf_sha256(SEAL_SALT, shared, &[context, &eph.0, &recipient.0])?;
    let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, secret.expose())
        .map_err(|_| CryptoError::InvalidParameter("AES-256-GCM key"))?;
    Ok(aead::LessSafeKey::new(unbound))
}
