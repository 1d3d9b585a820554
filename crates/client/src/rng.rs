//! Where the client's randomness comes from. Long-lived secrets (login keys, session
//! offers, lockbox roots, OPAQUE) come from the OS each time, so that nothing read from
//! this process later reproduces them; per-request nonces come from a ChaCha20 generator
//! seeded from the OS (no system call each). A simulation (feature `sim`) seeds both from
//! one number, so that its runs repeat.

use maat_crypto::OsRng;
use rand_core::{CryptoRng, RngCore};

/// The generator of long-lived secrets.
pub(crate) enum KeyRng {
    /// The OS.
    Os,
    /// A seeded generator (simulations only).
    #[cfg(feature = "sim")]
    Seeded(Box<rand_chacha::ChaCha20Rng>),
}

impl KeyRng {
    /// A generator for one operation, so that the shared one is not held while it runs:
    /// the OS again, or (simulations) one seeded from this one.
    pub(crate) fn fork(&mut self) -> KeyRng {
        match self {
            KeyRng::Os => KeyRng::Os,
            #[cfg(feature = "sim")]
            KeyRng::Seeded(r) => {
                use rand_core::SeedableRng;
                KeyRng::Seeded(Box::new(
                    rand_chacha::ChaCha20Rng::from_rng(r.as_mut()).unwrap_or_else(|_| {
                        // ChaCha20 never fails to produce bytes; a fixed fallback keeps the
                        // simulation deterministic all the same.
                        rand_chacha::ChaCha20Rng::seed_from_u64(0)
                    }),
                ))
            }
        }
    }
}

impl RngCore for KeyRng {
    fn next_u32(&mut self) -> u32 {
        match self {
            KeyRng::Os => OsRng.next_u32(),
            #[cfg(feature = "sim")]
            KeyRng::Seeded(r) => r.next_u32(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        match self {
            KeyRng::Os => OsRng.next_u64(),
            #[cfg(feature = "sim")]
            KeyRng::Seeded(r) => r.next_u64(),
        }
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        match self {
            KeyRng::Os => OsRng.fill_bytes(dest),
            #[cfg(feature = "sim")]
            KeyRng::Seeded(r) => r.fill_bytes(dest),
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        match self {
            KeyRng::Os => OsRng.try_fill_bytes(dest),
            #[cfg(feature = "sim")]
            KeyRng::Seeded(r) => r.try_fill_bytes(dest),
        }
    }
}

impl CryptoRng for KeyRng {}
