/// Every failure of a cryptographic check or a misuse of this crate's API.
///
/// Variants are grouped by whose fault they are: a peer sent something that does not
/// verify (`Bad*`), a peer sent something malformed (`Invalid*`), or the caller asked
/// for something impossible (`OutOfRange`, `InvalidParameter`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// An Ed25519 signature did not verify under the given public key.
    #[error("bad signature")]
    BadSignature,
    /// At least one signature of a batch did not verify.
    #[error("bad signature in batch (index {index})")]
    BadSignatureInBatch {
        /// Index of the first signature that failed individual verification.
        index: usize,
    },
    /// A MAC tag did not match.
    #[error("bad MAC")]
    BadMac,
    /// Authenticated decryption failed: wrong key, wrong context, or tampered ciphertext.
    #[error("decryption failed (wrong key or tampered ciphertext)")]
    DecryptionFailed,
    /// Bytes that should be a public key are not a valid point / are a weak key.
    #[error("invalid public key")]
    InvalidPublicKey,
    /// A Merkle membership proof does not lead to the expected root.
    #[error("Merkle proof does not match the root")]
    BadMerkleProof,
    /// A Merkle proof or tree exceeds a named limit or is otherwise malformed.
    #[error("invalid Merkle input: {0}")]
    InvalidMerkle(&'static str),
    /// A keyed-hash-tree shape is not acceptable.
    #[error("invalid key tree shape: {0}")]
    InvalidShape(&'static str),
    /// A node, leaf or byte range lies outside what the key allows.
    #[error("out of range: {0}")]
    OutOfRange(&'static str),
    /// A parameter supplied by the caller is unusable.
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
    /// Input is longer than a named limit.
    #[error("{what} is {len} bytes, limit {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The named limit.
        limit: usize,
    },
}
