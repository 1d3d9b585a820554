use crate::signed::Kind;
use crate::UnixMillis;
use maat_crypto::CryptoError;

/// Every way a token can fail to decode or verify.
///
/// Grouped by fault: malformed input (`Truncated` … `TooLarge`), a peer's token that does
/// not verify (`BadSignature` … `NotYetValid`), and semantic mismatches between a valid
/// token and the request it came with (`WrongRecipient` … `PermissionDenied`).
/// Each variant maps to one wire status in the daemons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The input ended before the token did.
    #[error("truncated {what}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
    },
    /// Bytes remain after the token.
    #[error("{count} trailing bytes after {what}")]
    TrailingBytes {
        /// What was decoded.
        what: &'static str,
        /// How many bytes were left over.
        count: usize,
    },
    /// The version byte is not one this build speaks.
    #[error("unsupported protocol version {found}")]
    UnsupportedVersion {
        /// The version found.
        found: u8,
    },
    /// The domain tag names another kind of token (a token used where another belongs).
    #[error("wrong domain: expected {expected:?}, found tag {found:#04x}")]
    WrongDomain {
        /// The kind expected here.
        expected: Kind,
        /// The tag found.
        found: u8,
    },
    /// A field holds a value the encoding forbids (non-canonical, unknown tag, bad padding).
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A length exceeds a named limit.
    #[error("{what} has {len} items/bytes, limit {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The named limit.
        limit: usize,
    },
    /// A signature did not verify.
    #[error("bad signature on {token}")]
    BadSignature {
        /// The token kind.
        token: &'static str,
    },
    /// A MAC or integrity check value did not verify.
    #[error("bad MAC on {token}")]
    BadMac {
        /// The token kind.
        token: &'static str,
    },
    /// A sealed part could not be opened (wrong key or tampered).
    #[error("cannot open {token}: wrong key or tampered")]
    DecryptionFailed {
        /// The token kind.
        token: &'static str,
    },
    /// The token's validity ended at `expiry`.
    #[error("{token} expired at {expiry} (now {now})")]
    Expired {
        /// The token kind.
        token: &'static str,
        /// When it expired.
        expiry: UnixMillis,
        /// The verifier's time.
        now: UnixMillis,
    },
    /// The token's validity starts at `start`, after `now`.
    #[error("{token} not valid before {start} (now {now})")]
    NotYetValid {
        /// The token kind.
        token: &'static str,
        /// When it becomes valid.
        start: UnixMillis,
        /// The verifier's time.
        now: UnixMillis,
    },
    /// The token was made for another party (another OSD, session or key).
    #[error("{token} is addressed to someone else: {reason}")]
    WrongRecipient {
        /// The token kind.
        token: &'static str,
        /// What did not match.
        reason: &'static str,
    },
    /// A Merkle tree or key does not match the root / hash it must match.
    #[error("{what} does not match its commitment")]
    CommitmentMismatch {
        /// What did not match.
        what: &'static str,
    },
    /// The key the token names is not known (unknown working-key version, …).
    #[error("unknown key: {what}")]
    UnknownKey {
        /// Which key.
        what: &'static str,
    },
    /// A valid key command not newer than the key it would replace (replayed or reordered;
    /// SPEC T3).
    #[error("{what} is not newer than the key it would replace")]
    Superseded {
        /// The command.
        what: &'static str,
    },
    /// A key command from an MDS that no longer holds the leader lease (issue 42): sent
    /// under fencing token `found` (0: none) after one under `applied`.
    #[error(
        "key command under fencing token {found} after one under {applied}: the MDS that \
         sent it no longer leads"
    )]
    Fenced {
        /// The command's token (0: an unfenced command).
        found: u64,
        /// The highest token applied here.
        applied: u64,
    },
    /// A valid credential that was revoked (SPEC T4: its object's policy access tag
    /// changed since it was made).
    #[error("revoked: {reason}")]
    Revoked {
        /// Why.
        reason: &'static str,
    },
    /// A valid token does not grant what is asked.
    #[error("permission denied: {reason}")]
    PermissionDenied {
        /// Why.
        reason: &'static str,
    },
    /// A cryptographic operation failed for another reason.
    #[error("crypto: {0}")]
    Crypto(#[from] CryptoError),
}
