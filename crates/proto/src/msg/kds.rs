//! Messages to and from a key distribution server (SPEC H4), in Plain frames: the KDS
//! trusts nothing about the connection. Whoever sends a request gets range keys sealed to
//! the X25519 key of the login ticket it presents, so a replayed or stolen request is
//! useless to anyone but the ticket's holder.

use super::WireError;
use serde::{Deserialize, Serialize};

pub use crate::limits::KDS_FILES_PER_REQUEST_MAX;

/// One file's part of a key request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileKeysRequest {
    /// The MDS-signed capability the client got when it opened the file (it must name the
    /// ticket's user and the lockbox's file, and grant reading).
    #[serde(with = "serde_bytes")]
    pub capability: Vec<u8>,
    /// The file's lockbox as the MDS handed it out.
    #[serde(with = "serde_bytes")]
    pub lockbox: Vec<u8>,
    /// Merkle tree messages for the capability's roots (SPEC M4), when it names sets.
    pub trees: Vec<Vec<u8>>,
    /// The key tree nodes wanted, `(level, index)`, in ascending offset order and not
    /// overlapping (SPEC H8: the client picks the level).
    pub nodes: Vec<(u8, u64)>,
    /// SPEC H6: the key-range permit from the same open, when the capability carries
    /// the range-keys mode bit (every node must then lie inside its ranges).
    #[serde(with = "serde_bytes")]
    pub key_ranges: Option<Vec<u8>>,
}

/// Requests to a KDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KdsRequest {
    /// Range keys for one or more files, sealed to `ticket`'s X25519 key.
    Keys {
        /// The requester's MDS-signed login ticket.
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
        /// The files.
        files: Vec<FileKeysRequest>,
    },
    /// This KDS's counters.
    Stats,
    /// SPEC M9: an MDS-signed revocation notice, pushed by the MDS; the KDS refuses keys
    /// to what it names from then on.
    Revoke(#[serde(with = "serde_bytes")] Vec<u8>),
    /// As `Keys`, answered with keyed grants (`horus::GrantKey`: no public-key operation
    /// per grant at either end once the KDS and the login share the key).
    KeysKeyed {
        /// The requester's MDS-signed login ticket.
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
        /// The files.
        files: Vec<FileKeysRequest>,
    },
    /// SPEC M10 with H4: as `KeysKeyed`, for files a job opened (capabilities delegated to
    /// its computation key): `lifetime` is the key's MDS-signed lifetime token, `proof`
    /// the key's Ed25519 signature over `delegation::kds_proof_message(ticket)`.
    KeysForJob {
        /// The requester's MDS-signed login ticket.
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
        /// The files (their capabilities delegated to the job's key).
        files: Vec<FileKeysRequest>,
        /// The job key's lifetime token.
        #[serde(with = "serde_bytes")]
        lifetime: Vec<u8>,
        /// Signature by the job's key.
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
}

/// Answers to [`KdsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KdsResponse {
    /// One signed range-key grant (`horus::RangeGrant`) or refusal per file, in order.
    Grants(Vec<Result<Vec<u8>, WireError>>),
    /// Counters.
    Stats(super::DaemonStats),
    /// The notice was verified and applied.
    Applied,
}
