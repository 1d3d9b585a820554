//! The messages inside frames (SPEC M1, M2, M3, T5, T9): what clients ask the MDS and the
//! OSDs, and what they answer.
//!
//! Messages are encoded with postcard (a documented, compact serde format: varint integers,
//! length-prefixed byte strings, enum variants as varint indices; see docs/PROTOCOL.md).
//! Security tokens inside them (tickets, offers, capabilities) stay in their own canonical
//! encodings and travel as byte strings, so a message format change never changes what is
//! signed. A message decoder only ever sees bytes whose frame length was already bounded.

use crate::{ProtoError, Result};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Bytes of file data in one object: files below this are one object; larger files are
/// striped in units of this size (SPEC T8).
pub const STRIPE_UNIT_BYTES: u64 = 512 * 1024;
/// The administrator's user id (superuser at the MDS; the only user allowed OSD
/// partition commands).
pub const ADMIN_USER_ID: u64 = 1;
/// Longest user, group or path component name.
pub const NAME_BYTES_MAX: usize = 255;

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
            ErrorCode::Revoked => "revoked by the administrator",
            ErrorCode::ProofRequired => "delegated capability: prove possession of the job key",
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
                if *token == "capability" || *token == "renewal token" =>
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

/// Unauthenticated messages to the MDS (frame type Plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsPlainRequest {
    /// Login step 1: ask for the user's salt and KDF parameters.
    LoginStart {
        /// User name.
        name: String,
    },
    /// Login step 2 (SPEC M1): prove knowledge of the passphrase-derived key.
    Login {
        /// User name.
        name: String,
        /// Client Ed25519 public key for this login.
        signing_key: [u8; 32],
        /// Client X25519 public key for this login.
        sealing_key: [u8; 32],
        /// Client time.
        timestamp: u64,
        /// Fresh nonce.
        nonce: [u8; 16],
        /// HMAC-SHA256 under the user key over the fields above (see PROTOCOL.md).
        mac: [u8; 32],
    },
    /// An OSD announces itself, MACed under the cluster join key.
    RegisterOsd {
        /// The OSD's id.
        id: u64,
        /// Address clients reach it at.
        address: String,
        /// Its X25519 public key (M2 offers are sealed to it).
        sealing_key: [u8; 32],
        /// Placement weight.
        weight: u32,
        /// OSD time.
        timestamp: u64,
        /// Fresh nonce.
        nonce: [u8; 16],
        /// HMAC-SHA256 under the join key (see PROTOCOL.md).
        mac: [u8; 32],
    },
    /// OPAQUE login, first message (SPEC M1, T6): KE1 and the keys the ticket will name.
    /// Everything but `ke1` is bound into the OPAQUE transcript as its context.
    OpaqueLoginStart {
        /// User name (the OPAQUE credential identifier).
        name: String,
        /// OPAQUE KE1 (blinded passphrase and the client's ephemeral key share).
        #[serde(with = "serde_bytes")]
        ke1: Vec<u8>,
        /// Client Ed25519 public key for this login.
        signing_key: [u8; 32],
        /// Client X25519 public key for this login.
        sealing_key: [u8; 32],
        /// Fresh nonce (the login is accepted once; the MDS's own clock dates it, so a
        /// client's clock offset does not matter at login).
        nonce: [u8; 16],
        /// The anti-clogging cookie (SPEC T6) the MDS handed this address; `None` asks for
        /// one. Without a valid cookie the MDS spends one keyed hash, no group operation.
        cookie: Option<[u8; 32]>,
    },
    /// SPEC M9: an OSD asks for every revocation notice still in force (its catch-up
    /// before serving, and its periodic check).
    Revocations {
        /// The OSD's id.
        osd: u64,
        /// Fresh nonce (the answer's MAC covers it, so an old answer cannot be replayed).
        nonce: [u8; 16],
        /// `revocations_request_mac`: only holders of the join key get the list.
        mac: [u8; 32],
    },
    /// OPAQUE login, last message: KE3 and the state the MDS handed out with KE2.
    OpaqueLoginFinish {
        /// The MDS's login state, sealed to its own key (the MDS keeps none).
        #[serde(with = "serde_bytes")]
        state: Vec<u8>,
        /// OPAQUE KE3 (the client's key-confirmation MAC).
        #[serde(with = "serde_bytes")]
        ke3: Vec<u8>,
    },
}

/// Answers to [`MdsPlainRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsPlainResponse {
    /// Salt and parameters (a deterministic decoy for unknown users).
    LoginChallenge {
        /// Salt.
        salt: [u8; 16],
        /// Argon2id parameters.
        params: KdfParams,
        /// MDS clock (the client keeps an offset, SPEC T7).
        mds_time: u64,
    },
    /// Login accepted.
    LoginOk {
        /// The MDS-signed ticket.
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
        /// HMAC under the new client–MDS key: proves the MDS knew the user key.
        mac: [u8; 32],
        /// MDS clock.
        mds_time: u64,
    },
    /// SPEC M9: every revocation notice in force (signed each), and a MAC under the join
    /// key over the OSD id, the request nonce and the notices (see `revocation`).
    Revocations {
        /// Signed notices.
        notices: Vec<Vec<u8>>,
        /// `revocations_mac`.
        mac: [u8; 32],
    },
    /// Registration accepted.
    Registered {
        /// The MDS's signing public key (capabilities and tickets verify under it).
        mds_verifying_key: [u8; 32],
        /// HMAC under the join key over the key and the request nonce.
        mac: [u8; 32],
    },
    /// OPAQUE KE2 (answers `OpaqueLoginStart`; unknown users get an indistinguishable one).
    OpaqueLoginChallenge {
        /// OPAQUE KE2: the OPRF evaluation, the masked envelope, the MDS's key share and MAC.
        #[serde(with = "serde_bytes")]
        ke2: Vec<u8>,
        /// Argon2id parameters of the key stretching (the user's; defaults for unknown users).
        params: KdfParams,
        /// State to send back with KE3, sealed by the MDS to itself; expires quickly.
        #[serde(with = "serde_bytes")]
        state: Vec<u8>,
        /// MDS clock.
        mds_time: u64,
    },
    /// The user still has a record from before OPAQUE: log in once with `LoginStart` and
    /// `Login`, then replace the record (`SetCredential`).
    LegacyLoginRequired {
        /// MDS clock.
        mds_time: u64,
    },
    /// SPEC T6: send `OpaqueLoginStart` again with this cookie (bound to the sender's
    /// address and a 30-second time slot, valid for two slots).
    LoginCookie {
        /// The cookie.
        cookie: [u8; 32],
    },
}

/// Which access an open asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Read.
    Read,
    /// Read and write.
    ReadWrite,
}

/// Authenticated requests to the MDS (SPEC T9 and capabilities).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsRequest {
    /// The current cluster map.
    ClusterMap,
    /// Attributes of a path.
    Stat {
        /// Path.
        path: String,
    },
    /// List a directory.
    Readdir {
        /// Path.
        path: String,
    },
    /// Make a directory.
    Mkdir {
        /// Path.
        path: String,
        /// Permission bits.
        mode: u16,
        /// Create missing parents, and succeed if it exists.
        parents: bool,
        /// The partition of the new directories (default: the parent's); everything made
        /// below them inherits it.
        partition: Option<String>,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Path.
        path: String,
    },
    /// Open a file for reading or writing; creates it when `create` is set.
    Open {
        /// Path.
        path: String,
        /// Access wanted.
        access: Access,
        /// Create with these permission bits if it does not exist.
        create: Option<u16>,
    },
    /// Record the size after writing (the "close" of a writer).
    SetSize {
        /// Path of the file.
        path: String,
        /// Its id as opened (refused if the path now names another file).
        file: u64,
        /// New size in bytes.
        size: u64,
    },
    /// Remove a file; the answer carries a capability to delete its objects.
    Unlink {
        /// Path.
        path: String,
    },
    /// Rename.
    Rename {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Change permission bits.
    Chmod {
        /// Path.
        path: String,
        /// New bits (0o7777 mask).
        mode: u16,
    },
    /// Change owner and/or group.
    Chown {
        /// Path.
        path: String,
        /// New owner name.
        owner: Option<String>,
        /// New group name.
        group: Option<String>,
    },
    /// Administrator: add a user.
    UserAdd {
        /// Name.
        name: String,
        /// Supplementary groups (must exist).
        groups: Vec<String>,
        /// Salt of the passphrase key.
        salt: [u8; 16],
        /// Argon2id parameters used.
        params: KdfParams,
        /// The passphrase-derived key sealed to the MDS's X25519 key (AAD: the name).
        #[serde(with = "serde_bytes")]
        sealed_key: Vec<u8>,
    },
    /// Administrator: remove a user.
    UserRm {
        /// Name.
        name: String,
    },
    /// Administrator: add a group.
    GroupAdd {
        /// Name.
        name: String,
    },
    /// Administrator: add a user to a group.
    GroupMemberAdd {
        /// Group.
        group: String,
        /// User.
        user: String,
    },
    /// Counters of this daemon.
    Stats,
    /// End this session.
    Logout,
    /// OPAQUE registration, first step: the MDS's OPRF answer for `name`. The
    /// administrator may ask for any name; a user only for their own.
    RegisterStart {
        /// The user the registration is for (the OPAQUE credential identifier).
        name: String,
        /// OPAQUE registration request (the blinded passphrase).
        #[serde(with = "serde_bytes")]
        request: Vec<u8>,
    },
    /// Administrator: add a user with an OPAQUE registration record.
    UserAddOpaque {
        /// Name.
        name: String,
        /// Supplementary groups (must exist).
        groups: Vec<String>,
        /// Argon2id parameters of the key stretching.
        params: KdfParams,
        /// The OPAQUE registration upload sealed to the MDS's X25519 key (AAD: the name).
        #[serde(with = "serde_bytes")]
        sealed_upload: Vec<u8>,
    },
    /// The caller replaces their own credential: a passphrase change, or the move of a
    /// record from before OPAQUE to OPAQUE.
    SetCredential {
        /// Argon2id parameters of the key stretching.
        params: KdfParams,
        /// The OPAQUE registration upload sealed to the MDS's X25519 key (AAD: the name).
        #[serde(with = "serde_bytes")]
        sealed_upload: Vec<u8>,
    },
    /// Administrator: create a partition with a protection method (SPEC T1).
    PartitionCreate {
        /// Name.
        name: String,
        /// Method.
        protection: crate::protection::Protection,
    },
    /// Administrator: change a partition's method; capabilities issued afterwards carry it
    /// (ones already issued keep theirs until they expire).
    PartitionSetSecurity {
        /// Name.
        name: String,
        /// Method.
        protection: crate::protection::Protection,
    },
    /// List the partitions.
    PartitionList,
    /// SPEC M4: the Merkle tree message of a root named in a capability this MDS issued
    /// (the caller must be in the capability's user set).
    GetTree {
        /// The root.
        root: [u8; 32],
    },
    /// Administrator: the grouping strategies (SPEC M6) used from now on, as in the MDS
    /// config (`unix,directory,batch,onthefly` or `none`); not written to the config file.
    SetGrouping {
        /// Comma-separated strategy names.
        strategies: String,
    },
    /// SPEC M8: renew capabilities in use (ids, at most `RENEWAL_CAPABILITY_IDS_MAX`).
    /// Answered by `Renewed`.
    Renew {
        /// Ids of the capabilities to renew.
        ids: Vec<u64>,
    },
    /// SPEC M9, administrator: make every OSD refuse these users and capabilities now.
    /// Answered by `Revoked` once every reachable OSD has been told.
    Revoke {
        /// User names.
        users: Vec<String>,
        /// Capability ids.
        capabilities: Vec<u64>,
    },
    /// SPEC M10: start a job whose lead is the requester, for this computation public key
    /// (Ed25519). Answered by `JobLifetime`.
    JobCreate {
        /// The job's computation public key.
        computation_key: [u8; 32],
    },
    /// SPEC M10 `openg`: open a file for a job (lead only). Answered by `FileHandle`.
    OpenG {
        /// The job's computation public key.
        computation_key: [u8; 32],
        /// Path.
        path: String,
        /// Access wanted.
        access: Access,
        /// Create with these permission bits if it does not exist.
        create: Option<u16>,
    },
    /// SPEC M10: extend the job key's lifetime (lead only); refused once the lead may no
    /// longer access every file the job opened. Answered by `JobLifetime`.
    JobRenew {
        /// The job's computation public key.
        computation_key: [u8; 32],
    },
    /// SPEC M10: the newest lifetime token of a job key (any user: participants fetch the
    /// lead's renewals). Answered by `JobLifetime`.
    JobLifetime {
        /// Hash of the computation key (`delegation::computation_key_hash`).
        key_hash: [u8; 32],
    },
    /// SPEC M9 + M10: end a job now (its lead or the administrator): every OSD refuses its
    /// key at once. Answered by `Revoked`.
    JobEnd {
        /// Hash of the computation key.
        key_hash: [u8; 32],
    },
    /// The MDS-signed login ticket of a user's newest login (its X25519 key is what a
    /// job's lead seals the computation key to). Answered by `Ticket`.
    UserTicket {
        /// User name.
        name: String,
    },
    /// SPEC M10: record the size of a file written through a job's file handle; `proof`
    /// is the computation key's signature over `delegation::set_size_message`.
    SetSizeByHandle {
        /// The signed file handle.
        #[serde(with = "serde_bytes")]
        handle: Vec<u8>,
        /// New size.
        size: u64,
        /// Ed25519 signature by the computation key.
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
}

/// File or directory attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// Inode number (the file id its objects carry).
    pub id: u64,
    /// Directory or file.
    pub is_dir: bool,
    /// Permission bits.
    pub mode: u16,
    /// Owner name.
    pub owner: String,
    /// Group name.
    pub group: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (ms since the epoch).
    pub mtime: u64,
    /// The partition's name (JSON copies from before partitions: empty).
    #[serde(default)]
    pub partition: String,
    /// The protection method of the partition's data path (SPEC T1; JSON copies from
    /// before partitions: ALLDATA, what they were protected with).
    #[serde(default)]
    pub protection: crate::protection::Protection,
}

/// A partition as `maat admin partition list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Protection method.
    pub protection: crate::protection::Protection,
}

/// An OSD in the cluster map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdEntry {
    /// Id.
    pub id: u64,
    /// Address.
    pub address: String,
    /// X25519 public key.
    pub sealing_key: [u8; 32],
    /// Placement weight.
    pub weight: u32,
}

/// The cluster map: everything needed to compute where an object lives (SPEC T8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ClusterMap {
    /// Bumped on every change.
    pub epoch: u64,
    /// The OSDs.
    pub osds: Vec<OsdEntry>,
}

/// Counters a daemon reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DaemonStats {
    /// "mds" or "osd N".
    pub daemon: String,
    /// `(name, value)` pairs: requests, refusals, crypto operation counts, cache hits.
    pub counters: Vec<(String, u64)>,
}

/// Answers to [`MdsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsResponse {
    /// Done.
    Ok,
    /// The cluster map.
    ClusterMap(ClusterMap),
    /// Attributes.
    Stat(FileStat),
    /// Directory entries.
    Entries(Vec<(String, FileStat)>),
    /// An opened file.
    Opened {
        /// Its attributes.
        stat: FileStat,
        /// MDS-signed capability (empty in NOSEC mode).
        #[serde(with = "serde_bytes")]
        capability: Vec<u8>,
        /// Whether the MDS served it from its cache (SPEC M5).
        cached: bool,
    },
    /// Counters.
    Stats(DaemonStats),
    /// OPAQUE registration response (answers `RegisterStart`).
    RegistrationResponse {
        /// The OPRF evaluation and the MDS's static public key.
        #[serde(with = "serde_bytes")]
        response: Vec<u8>,
    },
    /// The partitions.
    Partitions(Vec<PartitionInfo>),
    /// A Merkle tree message (answers `GetTree`; see `merkle_msg`).
    Tree(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC M8: a signed renewal token (answers `Renew`). It names the requested
    /// capabilities the MDS still allows and every other outstanding valid one; a
    /// requested id it leaves out is not renewed (expired, unknown or revoked).
    Renewed(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC M9: the signed revocation notice (answers `Revoke`), and how many of the
    /// registered OSDs applied it before this answer (the others learn it at their next
    /// check with the MDS, within a second of reaching it).
    Revoked {
        /// The signed notice.
        #[serde(with = "serde_bytes")]
        notice: Vec<u8>,
        /// OSDs that applied it.
        osds_told: u32,
        /// OSDs registered.
        osds: u32,
    },
    /// SPEC M10: a signed key lifetime token (answers `JobCreate`, `JobRenew`,
    /// `JobLifetime`).
    JobLifetime(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC M10: a signed file handle and the file's attributes (answers `OpenG`).
    FileHandle {
        /// The signed handle (its capability is bound to the computation key).
        #[serde(with = "serde_bytes")]
        handle: Vec<u8>,
        /// The file's attributes at open time.
        stat: FileStat,
    },
    /// A signed login ticket (answers `UserTicket`).
    Ticket(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// Where an object lives in an OSD's object model (SPEC T5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId {
    /// Partition.
    pub partition: u64,
    /// The file the object belongs to (checked against the capability).
    pub file: u64,
    /// Stripe index within the file.
    pub stripe: u32,
}

/// The partition user data lives in.
pub const DATA_PARTITION: u64 = 1;

/// Object attributes (SPEC T5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectAttributes {
    /// Logical length.
    pub size: u64,
    /// Last modification (ms since the epoch).
    pub mtime: u64,
    /// Policy access tag (T2).
    pub policy_tag: u32,
    /// User-defined attributes.
    pub user: Vec<(String, Vec<u8>)>,
}

/// An OSD command (SPEC T5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdCommand {
    /// Create an empty object.
    Create {
        /// Object.
        object: ObjectId,
    },
    /// Remove an object.
    Remove {
        /// Object.
        object: ObjectId,
    },
    /// Read bytes.
    Read {
        /// Object.
        object: ObjectId,
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
    },
    /// Write bytes at an offset; `replace` makes the object exactly `data` (atomic).
    Write {
        /// Object.
        object: ObjectId,
        /// Offset.
        offset: u64,
        /// Data.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// Replace the whole object.
        replace: bool,
    },
    /// Append bytes.
    Append {
        /// Object.
        object: ObjectId,
        /// Data.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Read attributes.
    GetAttributes {
        /// Object.
        object: ObjectId,
    },
    /// Set the policy tag and user attributes.
    SetAttributes {
        /// Object.
        object: ObjectId,
        /// Policy tag.
        policy_tag: u32,
        /// User attributes (replace).
        user: Vec<(String, Vec<u8>)>,
    },
    /// List the objects of a partition (administrator).
    List {
        /// Partition.
        partition: u64,
    },
    /// Create a partition (administrator).
    CreatePartition {
        /// Partition.
        partition: u64,
    },
    /// Remove an empty partition (administrator).
    RemovePartition {
        /// Partition.
        partition: u64,
    },
    /// Erase everything (administrator).
    Format,
    /// Counters of this daemon.
    Stats,
    /// SPEC M4: the members of a Merkle root named by this request's capability (a
    /// `merkle_msg` message). The OSD verifies the capability, rebuilds the root from the
    /// members and keeps them only when it equals one of the capability's roots.
    SupplyTree {
        /// The tree message.
        #[serde(with = "serde_bytes")]
        tree: Vec<u8>,
    },
    /// SPEC M8: an MDS-signed renewal token (`renewal`). The OSD verifies it once, keeps
    /// the new expiry of every capability it names, and from then on accepts those
    /// capabilities until that expiry. Needs an authenticated session, no capability.
    SupplyRenewal {
        /// The signed token.
        #[serde(with = "serde_bytes")]
        token: Vec<u8>,
    },
    /// SPEC M10: the MDS-signed key lifetime token of a job's computation key and a proof
    /// of possession made for this OSD and session (`delegation::make_proof`). The OSD
    /// verifies the token once, keeps the latest expiry per key, and from then on serves
    /// this session under capabilities delegated to that key while the lifetime lasts.
    SupplyProof {
        /// The signed key lifetime token.
        #[serde(with = "serde_bytes")]
        lifetime: Vec<u8>,
        /// The sealed proof token.
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
}

impl OsdCommand {
    /// The object a data command acts on, and the access it needs; `None` for
    /// administrative commands.
    pub fn object_access(&self) -> Option<(ObjectId, crate::capability::Mode)> {
        use crate::capability::Mode;
        match self {
            OsdCommand::Read { object, .. } | OsdCommand::GetAttributes { object } => {
                Some((*object, Mode::READ))
            }
            OsdCommand::Create { object }
            | OsdCommand::Remove { object }
            | OsdCommand::Write { object, .. }
            | OsdCommand::Append { object, .. }
            | OsdCommand::SetAttributes { object, .. } => Some((*object, Mode::WRITE)),
            _ => None,
        }
    }
}

/// An authenticated OSD request: the capability (empty for administrative and stats
/// commands) and the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdRequest {
    /// MDS-signed capability bytes.
    #[serde(with = "serde_bytes")]
    pub capability: Vec<u8>,
    /// The command.
    pub command: OsdCommand,
}

impl OsdRequest {
    /// Moves the bulk data out (a protected envelope carries it apart from the message,
    /// see `protection`); empty for commands without data.
    pub fn take_bulk(&mut self) -> Vec<u8> {
        match &mut self.command {
            OsdCommand::Write { data, .. } | OsdCommand::Append { data, .. } => {
                std::mem::take(data)
            }
            _ => Vec::new(),
        }
    }

    /// The request without its bulk data, and the data (borrowed: nothing is copied but
    /// the small fields).
    pub fn split_bulk(&self) -> (OsdRequest, &[u8]) {
        let (command, data) = match &self.command {
            OsdCommand::Write {
                object,
                offset,
                data,
                replace,
            } => (
                OsdCommand::Write {
                    object: *object,
                    offset: *offset,
                    data: Vec::new(),
                    replace: *replace,
                },
                data.as_slice(),
            ),
            OsdCommand::Append { object, data } => (
                OsdCommand::Append {
                    object: *object,
                    data: Vec::new(),
                },
                data.as_slice(),
            ),
            other => (other.clone(), &[][..]),
        };
        (
            OsdRequest {
                capability: self.capability.clone(),
                command,
            },
            data,
        )
    }

    /// Puts bulk data taken by [`OsdRequest::take_bulk`] back; refuses data for a command
    /// that carries none.
    pub fn put_bulk(&mut self, bulk: Vec<u8>) -> Result<()> {
        match &mut self.command {
            OsdCommand::Write { data, .. } | OsdCommand::Append { data, .. } if data.is_empty() => {
                *data = bulk;
                Ok(())
            }
            _ if bulk.is_empty() => Ok(()),
            _ => Err(ProtoError::Malformed {
                what: "OSD request",
                reason: "bulk data for a command without data",
            }),
        }
    }
}

/// Moves the bulk data out of an OSD answer (see [`OsdRequest::take_bulk`]).
pub fn take_response_bulk(result: &mut std::result::Result<OsdResponse, WireError>) -> Vec<u8> {
    match result {
        Ok(OsdResponse::Data(data)) => std::mem::take(data),
        _ => Vec::new(),
    }
}

/// Puts bulk data back into an OSD answer.
pub fn put_response_bulk(
    result: &mut std::result::Result<OsdResponse, WireError>,
    bulk: Vec<u8>,
) -> Result<()> {
    match result {
        Ok(OsdResponse::Data(data)) if data.is_empty() => {
            *data = bulk;
            Ok(())
        }
        _ if bulk.is_empty() => Ok(()),
        _ => Err(ProtoError::Malformed {
            what: "OSD response",
            reason: "bulk data for an answer without data",
        }),
    }
}

/// A NOSEC request (benchmarks): the claimed user and the command, nothing checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsecureRequest<T> {
    /// Claimed user id.
    pub user: u64,
    /// The request.
    pub request: T,
}

/// Answers to [`OsdCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdResponse {
    /// Done.
    Ok,
    /// Bytes read.
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Attributes.
    Attributes(ObjectAttributes),
    /// Objects.
    Objects(Vec<ObjectId>),
    /// Counters.
    Stats(DaemonStats),
}

/// Unauthenticated messages to an OSD (frame type Plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdPlainRequest {
    /// SPEC M2: a signed session offer.
    Offer(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC M9: a revocation notice pushed by the MDS (signed: who carries it does not
    /// matter; applying one twice changes nothing).
    Revoke(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// Answer to [`OsdPlainRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdPlainResponse {
    /// The MACed confirmation.
    Confirm(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The notice is applied.
    Applied,
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
