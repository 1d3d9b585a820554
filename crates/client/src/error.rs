//! The client's one error type.

use maat_net::NetError;
use maat_proto::msg::{ErrorCode, WireError};

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A daemon refused the request.
    #[error("{0}")]
    Refused(WireError),
    /// The network failed.
    #[error("cannot reach {address} (is the cluster running?): {source}")]
    Net {
        /// Peer.
        address: String,
        /// Error.
        source: NetError,
    },
    /// A daemon's answer did not authenticate or decode.
    #[error("bad answer from {address}: {reason}")]
    BadAnswer {
        /// Peer.
        address: String,
        /// Why.
        reason: String,
    },
    /// No session: log in first.
    #[error("not logged in: run `maat login NAME`")]
    NotLoggedIn,
    /// The cluster has no OSDs yet.
    #[error("the cluster has no OSDs registered")]
    NoOsds,
    /// A local file (in the home directory, the cluster file, the input or output of a
    /// transfer) could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// The file, or what was being read or written.
        what: String,
        /// Error.
        source: std::io::Error,
    },
    /// The cluster file or a file of the home directory is malformed, unsafe, or written
    /// by a newer maat.
    #[error("{0}")]
    Config(String),
    /// The cluster has no key distribution server, or none answered: encrypted files
    /// cannot be made or read (SPEC H4).
    #[error("{0}")]
    NoKds(String),
    /// An encrypted file's keys are not at hand: its owner has not recorded its lockbox
    /// yet, a stripe is under a key tree whose keys were not asked for, or a request would
    /// need more keys than one may carry.
    #[error("{0}")]
    Keys(String),
    /// The request needs a job key this client does not hold (`maat job join`, SPEC M10).
    #[error("{0}")]
    NotInJob(String),
    /// The request cannot be made as asked.
    #[error("{0}")]
    InvalidArgument(String),
    /// A cryptographic operation of this client failed.
    #[error("{what}: {source}")]
    Crypto {
        /// Which operation.
        what: &'static str,
        /// Why.
        source: maat_crypto::CryptoError,
    },
    /// A failure inside this client (an encoding of its own message, a worker thread).
    #[error("internal error: {0}")]
    Internal(String),
    /// A stripe is missing or short.
    #[error("data missing: {0}")]
    DataMissing(String),
    /// A whole-file read met a new version after it had handed out bytes of the old
    /// one: the bytes given so far are not the file's any more. Nothing mixed is
    /// returned as a success; [`crate::Client::get_whole`] starts such a read over.
    #[error("{0}: replaced by a new version while it was read: read it again")]
    Replaced(String),
    /// A write or truncate through a handle opened for reading only.
    #[error("{0}: not open for writing")]
    NotOpenForWriting(String),
    /// A block of an encrypted file failed authentication or is missing (SPEC H3):
    /// tampered, rolled back, or cut, on the wire or on an OSD's disk.
    #[error("file {file}: {failure}")]
    Integrity {
        /// The file id.
        file: u64,
        /// Which block and why.
        failure: maat_proto::encrypted::BlockFailure,
    },
    /// A token (from a daemon or a file) did not decode or verify.
    #[error("{what}: {source}")]
    Token {
        /// Which token.
        what: &'static str,
        /// Why.
        source: maat_proto::ProtoError,
    },
}

impl ClientError {
    /// The refusal code, if a daemon refused.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Refused(e) => Some(e.code),
            _ => None,
        }
    }
}

impl ClientError {
    /// The same failure again, for another request that met it (a peer that could not
    /// be reached fails every request sent its way). Kinds that carry what cannot be
    /// copied (an I/O error) keep their kind and message.
    pub(crate) fn again(&self) -> ClientError {
        match self {
            ClientError::Refused(w) => ClientError::Refused(w.clone()),
            ClientError::Net { address, source } => ClientError::Net {
                address: address.clone(),
                source: match source {
                    NetError::Io(e) => NetError::Io(std::io::Error::new(e.kind(), e.to_string())),
                    NetError::Closed => NetError::Closed,
                    NetError::Resolve(name) => NetError::Resolve(name.clone()),
                    other => NetError::Io(std::io::Error::other(other.to_string())),
                },
            },
            ClientError::BadAnswer { address, reason } => ClientError::BadAnswer {
                address: address.clone(),
                reason: reason.clone(),
            },
            ClientError::NoOsds => ClientError::NoOsds,
            other => ClientError::Internal(other.to_string()),
        }
    }
}
