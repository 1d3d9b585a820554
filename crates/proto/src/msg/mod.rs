//! The messages inside frames (SPEC M1, M2, M3, T5, T9): what clients ask the MDS and the
//! OSDs, and what they answer.
//!
//! Messages are encoded with postcard (a documented, compact serde format: varint integers,
//! length-prefixed byte strings, enum variants as varint indices; see docs/PROTOCOL.md).
//! Security tokens inside them (tickets, offers, capabilities) stay in their own canonical
//! encodings and travel as byte strings, so a message format change never changes what is
//! signed. A message decoder only ever sees bytes whose frame length was already bounded.
//!
//! This module holds the framing of answers and refusals (`ErrorCode`, `WireError`); the
//! messages to the MDS are in `mds.rs`, those to OSDs in `osd.rs`, all re-exported here.

mod kds;
mod mds;
mod osd;
pub use kds::*;
pub use mds::*;
pub use osd::*;

use crate::{ProtoError, Result};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Bytes of file data in one object: files below this are one object; larger files are
/// striped in units of this size (SPEC T8).
pub const STRIPE_UNIT_BYTES: u64 = 512 * 1024;
/// The administrator's user id (superuser at the MDS; the only user allowed OSD
/// partition commands).
pub const ADMIN_USER_ID: u64 = 1;
pub use crate::limits::NAME_BYTES_MAX;

/// Encodes a message.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(message).map_err(|_| ProtoError::Malformed {
        what: "message",
        reason: "cannot encode",
    })
}

/// Decodes a message; trailing bytes are refused.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (value, rest) = postcard::take_from_bytes(bytes).map_err(|_| ProtoError::Malformed {
        what: "message",
        reason: "does not decode",
    })?;
    if !rest.is_empty() {
        return Err(ProtoError::TrailingBytes {
            what: "message",
            count: rest.len(),
        });
    }
    Ok(value)
}

/// Why a daemon refused a request: one code per cause, so callers (and scripts) see why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The bytes do not decode.
    Malformed,
    /// A length exceeds a limit.
    TooLarge,
    /// The protocol version is not spoken here.
    UnsupportedVersion,
    /// The session id is not known here (log in / renegotiate).
    UnknownSession,
    /// The session's ticket expired.
    SessionExpired,
    /// The request's timestamp is outside the window.
    StaleRequest,
    /// The request was seen before.
    ReplayedRequest,
    /// The request MAC does not verify.
    BadMac,
    /// A signature does not verify (forged or tampered token).
    BadSignature,
    /// The capability expired.
    CapabilityExpired,
    /// The capability is not valid yet.
    CapabilityNotYetValid,
    /// The authenticated user is not named in the capability.
    WrongUser,
    /// The object does not belong to the file the capability names.
    WrongFile,
    /// Permissions do not allow this.
    PermissionDenied,
    /// No such file or directory.
    NoSuchFile,
    /// The name already exists.
    AlreadyExists,
    /// A path component is not a directory.
    NotADirectory,
    /// The target is a directory.
    IsADirectory,
    /// The directory is not empty.
    NotEmpty,
    /// No such user.
    NoSuchUser,
    /// No such group.
    NoSuchGroup,
    /// Login failed (unknown user or wrong passphrase; deliberately not distinguished).
    AuthenticationFailed,
    /// The daemon is not ready (an OSD not yet registered with the MDS).
    NotReady,
    /// NOSEC requests are disabled on this daemon.
    InsecureRefused,
    /// An argument is invalid.
    InvalidArgument,
    /// A bounded table is full.
    Busy,
    /// No such object on this OSD.
    NoSuchObject,
    /// A token was addressed to another party.
    WrongRecipient,
    /// The daemon failed internally (I/O); see its log.
    Internal,
    /// The request was sealed with a weaker protection method (SPEC T1) than its
    /// capability (hence the file's partition) requires.
    ProtectionTooWeak,
    /// SPEC M4: the capability names a Merkle root this OSD holds no verified tree for;
    /// the client fetches the tree from the MDS (`GetTree`), supplies it
    /// (`SupplyTree`) and sends the request again.
    UnknownTree,
    /// A supplied Merkle tree does not rebuild the root it was offered for (forged or
    /// corrupted members).
    TreeMismatch,
    /// SPEC M9: the capability or the user was revoked by the administrator; the
    /// revocation lasts until every capability it concerns would have expired anyway.
    Revoked,
    /// SPEC M10: the capability is delegated to a computation key and this session has
    /// not proven possession of it (or the OSD has no key lifetime token for it); the
    /// client supplies the lifetime token and a proof (`SupplyProof`) and sends again.
    ProofRequired,
    /// The stored object fails its own check: its bytes on the OSD's disk are not the
    /// ones written (changed outside Maat, or bit rot). Appended (issue 40).
    ObjectDamaged,
    /// A conditional command's condition no longer holds: the object changed since its
    /// state was read (issue 41, `ReplaceIf`). Appended.
    ObjectChanged,
    /// This copy of the object missed a change that the other copies took (its OSD
    /// could not be reached then, issue 41): it is not read until a repair puts it back.
    /// Appended.
    CopyStale,
    /// This OSD has not reached the MDS within its lease
    /// ([`crate::limits::OSD_LEASE_MILLIS`]): it cannot know which of its copies missed a
    /// change, so it serves none until it checks in again (issue 41). Read another copy.
    /// Appended.
    CutOff,
    /// A key command from an MDS instance that no longer leads: a newer leader's
    /// command was applied here (issue 42). Appended.
    Fenced,
}

impl ErrorCode {
    /// The short reason printed to users.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed request",
            ErrorCode::TooLarge => "request too large",
            ErrorCode::UnsupportedVersion => "unsupported protocol version",
            ErrorCode::UnknownSession => "unknown session",
            ErrorCode::SessionExpired => "session expired",
            ErrorCode::StaleRequest => "stale request",
            ErrorCode::ReplayedRequest => "replayed request",
            ErrorCode::BadMac => "bad MAC",
            ErrorCode::BadSignature => "bad signature",
            ErrorCode::CapabilityExpired => "capability expired",
            ErrorCode::CapabilityNotYetValid => "capability not yet valid",
            ErrorCode::WrongUser => "capability names another user",
            ErrorCode::WrongFile => "capability names another file",
            ErrorCode::PermissionDenied => "permission denied",
            ErrorCode::NoSuchFile => "no such file",
            ErrorCode::AlreadyExists => "already exists",
            ErrorCode::NotADirectory => "not a directory",
            ErrorCode::IsADirectory => "is a directory",
            ErrorCode::NotEmpty => "directory not empty",
            ErrorCode::NoSuchUser => "no such user",
            ErrorCode::NoSuchGroup => "no such group",
            ErrorCode::AuthenticationFailed => "authentication failed",
            ErrorCode::NotReady => "daemon not ready",
            ErrorCode::InsecureRefused => "insecure requests disabled",
            ErrorCode::InvalidArgument => "invalid argument",
            ErrorCode::Busy => "busy",
            ErrorCode::NoSuchObject => "no such object",
            ErrorCode::WrongRecipient => "addressed to another party",
            ErrorCode::Internal => "internal error",
            ErrorCode::ProtectionTooWeak => "protection method weaker than the partition requires",
            ErrorCode::UnknownTree => "capability names a Merkle tree this OSD has not seen",
            ErrorCode::TreeMismatch => "Merkle tree does not match the capability's root",
            ErrorCode::Revoked => "revoked (maat admin revoke, or the job was ended)",
            ErrorCode::ProofRequired => "delegated capability: prove possession of the job key",
            ErrorCode::ObjectDamaged => {
                "the stored object fails its check (changed on the OSD's disk since it was written)"
            }
            ErrorCode::ObjectChanged => "the object changed since its state was read",
            ErrorCode::CopyStale => {
                "this copy missed a change the other copies took (repaired by a scrub)"
            }
            ErrorCode::CutOff => {
                "this OSD cannot reach the MDS, so it cannot tell which of its copies are current"
            }
            ErrorCode::Fenced => {
                "a key command from an MDS that no longer leads (a newer leader's was applied)"
            }
        }
    }

    /// The code for a token that failed to decode or verify.
    pub fn from_proto(error: &ProtoError) -> ErrorCode {
        match error {
            ProtoError::Truncated { .. }
            | ProtoError::TrailingBytes { .. }
            | ProtoError::WrongDomain { .. }
            | ProtoError::Malformed { .. } => ErrorCode::Malformed,
            ProtoError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            ProtoError::TooLarge { .. } => ErrorCode::TooLarge,
            ProtoError::BadSignature { .. } => ErrorCode::BadSignature,
            ProtoError::BadMac { .. } => ErrorCode::BadMac,
            ProtoError::DecryptionFailed { .. } => ErrorCode::BadMac,
            // A renewal token's window is a capability's extended window (SPEC M8).
            ProtoError::Expired { token, .. }
                if *token == "capability"
                    || *token == "renewal token"
                    || *token == "T10 capability" =>
            {
                ErrorCode::CapabilityExpired
            }
            ProtoError::NotYetValid { token, .. }
                if *token == "capability" || *token == "renewal token" =>
            {
                ErrorCode::CapabilityNotYetValid
            }
            ProtoError::Expired { .. } | ProtoError::NotYetValid { .. } => {
                ErrorCode::SessionExpired
            }
            ProtoError::WrongRecipient { .. } => ErrorCode::WrongRecipient,
            ProtoError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            ProtoError::CommitmentMismatch { .. } => ErrorCode::TreeMismatch,
            ProtoError::Superseded { .. } => ErrorCode::ReplayedRequest,
            ProtoError::Fenced { .. } => ErrorCode::Fenced,
            ProtoError::Revoked { .. } => ErrorCode::Revoked,
            _ => ErrorCode::Malformed,
        }
    }
}

/// Refusals counted by reason, for `maat stats` (every daemon keeps one).
#[derive(Debug, Default)]
pub struct RefusalCounts(std::sync::Mutex<std::collections::BTreeMap<ErrorCode, u64>>);

impl RefusalCounts {
    /// Counts one refusal.
    pub fn add(&self, code: ErrorCode) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(code).or_insert(0) += 1;
        }
    }

    /// `("refused:<Code>", count)` for every reason seen, for a daemon's counters.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.0
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(code, n)| (format!("refused:{code:?}"), *n))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A refusal: the code plus a human detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// Why.
    pub code: ErrorCode,
    /// Detail for logs and users (never secret).
    pub detail: String,
}

impl WireError {
    /// A refusal with a detail.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.code.reason())
        } else {
            write!(f, "{}: {}", self.code.reason(), self.detail)
        }
    }
}

impl std::error::Error for WireError {}

impl From<ProtoError> for WireError {
    fn from(e: ProtoError) -> Self {
        WireError::new(ErrorCode::from_proto(&e), e.to_string())
    }
}

/// Encodes an answer. Encoding a value of these types cannot fail short of running out of
/// memory; should it fail, the answer becomes an `Internal` refusal naming why, never an
/// empty or undecodable frame.
pub fn encode_result<T: Serialize>(result: &std::result::Result<T, WireError>) -> Vec<u8> {
    match encode(result) {
        Ok(bytes) => bytes,
        Err(e) => {
            let refusal: std::result::Result<(), WireError> = Err(WireError::new(
                ErrorCode::Internal,
                format!("encoding the answer failed: {e}"),
            ));
            // `Err` (variant 1), the code's index, an empty detail.
            encode(&refusal).unwrap_or_else(|_| vec![1, ErrorCode::Internal as u8, 0])
        }
    }
}

/// Argon2id parameters as sent in a login challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    /// Memory in KiB.
    pub memory_kib: u32,
    /// Passes.
    pub iterations: u32,
    /// Lanes.
    pub lanes: u32,
}

impl From<maat_crypto::kdf::PassphraseParams> for KdfParams {
    fn from(p: maat_crypto::kdf::PassphraseParams) -> Self {
        KdfParams {
            memory_kib: p.memory_kib,
            iterations: p.iterations,
            lanes: p.lanes,
        }
    }
}

impl From<KdfParams> for maat_crypto::kdf::PassphraseParams {
    fn from(p: KdfParams) -> Self {
        maat_crypto::kdf::PassphraseParams {
            memory_kib: p.memory_kib,
            iterations: p.iterations,
            lanes: p.lanes,
        }
    }
}

/// Fuzz entry: every message decoder over arbitrary bytes must not panic.
pub fn fuzz_messages(data: &[u8]) {
    let _ = decode::<MdsPlainRequest>(data);
    let _ = decode::<MdsPlainResponse>(data);
    let _ = decode::<Result<MdsResponse, WireError>>(data);
    let _ = decode::<MdsRequest>(data);
    let _ = decode::<OsdRequest>(data);
    let _ = decode::<Result<OsdResponse, WireError>>(data);
    let _ = decode::<InsecureRequest<MdsRequest>>(data);
    let _ = decode::<OsdPlainRequest>(data);
    let _ = decode::<Result<OsdPlainResponse, WireError>>(data);
    let _ = decode::<KdsRequest>(data);
    let _ = decode::<Result<KdsResponse, WireError>>(data);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Byte strings are encoded as postcard bytes (`serde_bytes`), which postcard lays out
    /// exactly as the sequence of `u8` it replaced (varint length, raw bytes): the wire
    /// did not change, only the per-byte serde calls that cost a third of the data path.
    #[test]
    fn byte_strings_keep_the_sequence_layout() {
        let data: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let as_bytes = encode(&OsdResponse::Data(data.clone())).unwrap();
        let as_seq = postcard::to_stdvec(&(1u8, &data)).unwrap();
        assert_eq!(as_bytes, as_seq);
        assert_eq!(
            decode::<OsdResponse>(&as_seq).unwrap(),
            OsdResponse::Data(data)
        );
    }
}
