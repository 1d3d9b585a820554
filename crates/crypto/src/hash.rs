//! BLAKE3 hashing helpers.

/// A 32-byte digest.
pub type Digest = [u8; 32];

/// BLAKE3 of the concatenation of `parts`.
pub fn blake3(parts: &[&[u8]]) -> Digest {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

/// BLAKE3 in keyed mode over the concatenation of `parts`.
pub fn blake3_keyed(key: &[u8; 32], parts: &[&[u8]]) -> Digest {
    let mut hasher = blake3::Hasher::new_keyed(key);
    for part in parts {
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

/// BLAKE3 in its key-derivation mode: 32 bytes for `context` (a fixed, unique string)
/// from `material`.
pub fn derive_key(context: &str, material: &[u8]) -> Digest {
    blake3::derive_key(context, material)
}

/// SHA-256 of the concatenation of `parts`.
pub fn sha256(parts: &[&[u8]]) -> Digest {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}
