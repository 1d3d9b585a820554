//! Key derivation: HKDF-SHA256 for keys from shared secrets, Argon2id for passphrases.

use crate::counters::{bump, global, Counters};
use crate::{CryptoError, Result, Secret32};

/// HKDF-SHA256 (RFC 5869) extract-and-expand to one 32-byte key.
///
/// `info` parts are length-prefixed (u16 big-endian) before concatenation so that no
/// two different part lists give the same info string.
pub fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> Result<Secret32> {
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), ikm);
    let mut info_bytes = Vec::with_capacity(info.iter().map(|p| p.len() + 2).sum());
    for part in info {
        let len = u16::try_from(part.len())
            .map_err(|_| CryptoError::InvalidParameter("HKDF info part longer than 65535"))?;
        info_bytes.extend_from_slice(&len.to_be_bytes());
        info_bytes.extend_from_slice(part);
    }
    let mut out = [0u8; 32];
    hk.expand(&info_bytes, &mut out)
        .map_err(|_| CryptoError::InvalidParameter("HKDF output length"))?;
    Ok(Secret32::from_bytes(out))
}

/// Length of the salt stored with each passphrase-derived key.
pub const PASSPHRASE_SALT_BYTES: usize = 16;
pub use crate::limits::PASSPHRASE_BYTES_MAX;

/// Argon2id cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassphraseParams {
    /// Memory cost in KiB.
    pub memory_kib: u32,
    /// Number of passes.
    pub iterations: u32,
    /// Degree of parallelism.
    pub lanes: u32,
}

impl PassphraseParams {
    /// RFC 9106 §4 second recommended option: 64 MiB, 3 passes, 4 lanes.
    pub const DEFAULT: PassphraseParams = PassphraseParams {
        memory_kib: 64 * 1024,
        iterations: 3,
        lanes: 4,
    };

    /// Cheap parameters for tests only: they make passphrase guessing fast.
    pub const DANGER_FAST_FOR_TESTS: PassphraseParams = PassphraseParams {
        memory_kib: 64,
        iterations: 1,
        lanes: 1,
    };
}

/// Derives a 32-byte key from a passphrase with Argon2id (SPEC M1: the passphrase itself
/// never leaves the client; only keys derived from it are used).
pub fn passphrase_key(
    passphrase: &[u8],
    salt: &[u8; PASSPHRASE_SALT_BYTES],
    params: PassphraseParams,
) -> Result<Secret32> {
    passphrase_key_counted(passphrase, salt, params, global())
}

/// [`passphrase_key`] counting into the given counters.
pub fn passphrase_key_counted(
    passphrase: &[u8],
    salt: &[u8; PASSPHRASE_SALT_BYTES],
    params: PassphraseParams,
    counters: &Counters,
) -> Result<Secret32> {
    if passphrase.len() > PASSPHRASE_BYTES_MAX {
        return Err(CryptoError::TooLarge {
            what: "passphrase",
            len: passphrase.len(),
            limit: PASSPHRASE_BYTES_MAX,
        });
    }
    let argon_params =
        argon2::Params::new(params.memory_kib, params.iterations, params.lanes, Some(32))
            .map_err(|_| CryptoError::InvalidParameter("Argon2id parameters"))?;
    let argon = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon_params,
    );
    let mut out = zeroize::Zeroizing::new([0u8; 32]);
    argon
        .hash_password_into(passphrase, salt, out.as_mut())
        .map_err(|_| CryptoError::InvalidParameter("Argon2id derivation"))?;
    bump!(counters, passphrase_derivations);
    Ok(Secret32::from_bytes(*out))
}
