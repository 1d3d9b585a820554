//! HMAC-SHA256 (SPEC suite: replaces HMAC-SHA1), verified in constant time.

use crate::counters::{bump, global, Counters};
use crate::secret::ct_eq;
use crate::{CryptoError, Result, Secret32};
use hmac::Mac as _;

/// Length of a MAC tag.
pub const TAG_BYTES: usize = 32;

/// A MAC tag.
pub type Tag = [u8; TAG_BYTES];

/// A 32-byte HMAC-SHA256 key. Zeroized on drop.
#[derive(Clone)]
pub struct MacKey {
    key: Secret32,
    counters: Counters,
}

impl MacKey {
    /// Wraps a secret as a MAC key.
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

    /// The counters this key reports into.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The underlying secret (for deriving further keys from it).
    pub fn secret(&self) -> &Secret32 {
        &self.key
    }

    /// HMAC-SHA256 over the concatenation of `parts`.
    pub fn tag(&self, parts: &[&[u8]]) -> Tag {
        bump!(self.counters, macs_computed);
        tag_raw(self.key.expose(), parts)
    }

    /// Checks `tag` over `parts` in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> Result<()> {
        bump!(self.counters, macs_verified);
        let expected = self.tag(parts);
        if ct_eq(&expected, tag) {
            Ok(())
        } else {
            Err(CryptoError::BadMac)
        }
    }
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(<redacted>)")
    }
}

/// HMAC-SHA256 of `parts` under `key`, uncounted (used as a keyed hash inside the key tree).
pub(crate) fn tag_raw(key: &[u8; 32], parts: &[&[u8]]) -> Tag {
    // HMAC accepts keys of any length, so construction cannot fail for 32 bytes; fall back
    // to an all-zero tag rather than panic (unreachable, and any tag check would then fail).
    match hmac::Hmac::<sha2::Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().into()
        }
        Err(_) => [0u8; TAG_BYTES],
    }
}

/// Keyed BLAKE3 as a MAC (SPEC suite: "keyed BLAKE3 where no T10 compatibility is
/// implied"): one pass over the message, where HMAC-SHA256 of a BLAKE3 digest would be
/// two. Used for request/response envelopes (T7). The key is derived from a session
/// secret with BLAKE3's key-derivation mode and a context string, so the same secret never
/// keys two MAC algorithms.
#[derive(Clone)]
pub struct Blake3Mac {
    key: Secret32,
    counters: Counters,
}

impl Blake3Mac {
    /// Derives the MAC key for `context` from `secret`.
    pub fn derive(secret: &Secret32, context: &str) -> Self {
        Self {
            key: Secret32::from_bytes(blake3::derive_key(context, secret.expose())),
            counters: global().clone(),
        }
    }

    /// Counts this key's operations into `counters`.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// Keyed BLAKE3 over the concatenation of `parts`.
    pub fn tag(&self, parts: &[&[u8]]) -> Tag {
        bump!(self.counters, macs_computed);
        let mut hasher = blake3::Hasher::new_keyed(self.key.expose());
        for part in parts {
            hasher.update(part);
        }
        *hasher.finalize().as_bytes()
    }

    /// Checks `tag` over `parts` in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> Result<()> {
        bump!(self.counters, macs_verified);
        let expected = self.tag(parts);
        if ct_eq(&expected, tag) {
            Ok(())
        } else {
            Err(CryptoError::BadMac)
        }
    }
}

impl std::fmt::Debug for Blake3Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Blake3Mac(<redacted>)")
    }
}
