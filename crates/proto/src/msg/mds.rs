//! Messages to and from the MDS: logins and OSD registration (Plain frames), and the
//! authenticated requests of clients (SPEC M1, M3–M10, T9).

use super::KdfParams;
use serde::{Deserialize, Serialize};

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
    /// SPEC M9 at a KDS: a KDS asks for every revocation notice in force (its catch-up
    /// before it hands out keys, and its periodic check).
    KdsRevocations {
        /// Fresh nonce (the answer's signature covers it).
        nonce: [u8; 16],
        /// The KDS's clock, milliseconds since the epoch (the MDS answers within its
        /// clock-skew window only).
        timestamp: u64,
        /// Ed25519 signature by the KDS signing key over
        /// `revocation::kds_revocations_request_message` (64 bytes): only KDS instances
        /// get the list.
        #[serde(with = "serde_bytes")]
        signature: Vec<u8>,
    },
    /// Issue 41: an OSD asks which of its copies missed a change (at its start, before
    /// it serves, and at every check-in), MACed like `Revocations`.
    MissedCopies {
        /// The OSD's id.
        osd: u64,
        /// Fresh nonce (the answer's MAC covers it).
        nonce: [u8; 16],
        /// `next` of the last answer the OSD applied (0: none yet): every copy recorded
        /// below it is known to the OSD.
        applied: u64,
        /// `copies::missed_request_mac`.
        mac: [u8; 32],
    },
    /// Issue 41: `RegisterOsd` by an OSD that checks in under its own control key
    /// (`control::control_key`) rather than the join key every OSD shares, so that no
    /// OSD can check in as another. Same fields and MAC; answer `RegisteredControl`.
    /// From then on the MDS refuses the join key on that id's check-ins.
    RegisterOsdControl {
        /// The OSD's id.
        id: u64,
        /// Address clients reach it at.
        address: String,
        /// Its X25519 public key (M2 offers are sealed to it; the control key is agreed
        /// with it).
        sealing_key: [u8; 32],
        /// Placement weight.
        weight: u32,
        /// OSD time.
        timestamp: u64,
        /// Fresh nonce.
        nonce: [u8; 16],
        /// HMAC under the join key, as `RegisterOsd`'s.
        mac: [u8; 32],
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
    /// SPEC M9: every revocation notice in force (signed each), for a KDS, and the MDS's
    /// signature over the request nonce and the notices.
    KdsRevocations {
        /// Signed notices.
        notices: Vec<Vec<u8>>,
        /// Ed25519 signature over `revocation::kds_revocations_message` (64 bytes).
        #[serde(with = "serde_bytes")]
        signature: Vec<u8>,
    },
    /// Issue 41: every object (file, stripe) whose copy on the asking OSD missed a
    /// change, and a MAC under the join key over the OSD id, the nonce and the list.
    MissedCopies {
        /// (file, stripe), sorted.
        objects: Vec<(u64, u32)>,
        /// The number the next record will get: the list holds every record below it.
        next: u64,
        /// `copies::missed_mac`.
        mac: [u8; 32],
    },
    /// Registration under a control key accepted (answers `RegisterOsdControl`).
    RegisteredControl {
        /// The MDS's signing public key (capabilities and tickets verify under it).
        mds_verifying_key: [u8; 32],
        /// The MDS's X25519 public key: the OSD's control key is agreed with it.
        mds_sealing_key: [u8; 32],
        /// `control::registered_control_mac`: HMAC under the join key over both keys
        /// and the request nonce.
        mac: [u8; 32],
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
    /// Remove a file; the answer carries a capability to delete its objects. A name of
    /// an inode that keeps other names (hard links, issue 44) is removed alone: answer
    /// `Ok`, nothing to delete.
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
    /// The caller replaces their own credential: only the move of a record from before
    /// OPAQUE to OPAQUE, right after its legacy login (a passphrase change is
    /// `ChangePassphrase`, which proves the current one; issue 40).
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
    /// SPEC M6: `Open` with the files the client predicts it will open next (paper 000
    /// §3.3.3: "clients can provide predicted future file accesses to the MDS with
    /// open()"). At most [`PREDICTED_PATHS_MAX`]. Under prediction grouping, the
    /// capability may also name those the requester (and every user it names) may
    /// access in the same mode; otherwise they are ignored.
    OpenPredicted {
        /// Path.
        path: String,
        /// Access wanted.
        access: Access,
        /// Create with these permission bits if it does not exist.
        create: Option<u16>,
        /// Paths the client expects to open next.
        predicted: Vec<String>,
    },
    /// SPEC M6 user- and application-defined groups: define (or replace) the
    /// requester's file set `name` as the files at `paths` (at most 256). Under the
    /// `defined` strategy a capability for one of them may also name the others; the
    /// administrator's sets apply to everyone's opens, a user's to that user's.
    FileSetDefine {
        /// Set name (1 to 64 bytes, no '/').
        name: String,
        /// Files, resolved as the requester.
        paths: Vec<String>,
    },
    /// Remove the requester's file set `name`.
    FileSetRemove {
        /// Set name.
        name: String,
    },
    /// The requester's file sets and the administrator's (answer `FileSets`).
    FileSetList,
    /// SPEC H5: store the lockbox of an empty file that has none (its owner only). The MDS
    /// checks that it names this file; it cannot open it. Answer `Opened`: a read-write
    /// open of the now encrypted file (its method, so its capability, changed).
    SetLockbox {
        /// Path.
        path: String,
        /// Its id as opened.
        file: u64,
        /// The encoded lockbox.
        #[serde(with = "serde_bytes")]
        lockbox: Vec<u8>,
    },
    /// `SetSize` for an encrypted file: also the write generations of the stripes
    /// written, as `(first stripe, end stripe, generation)` (SPEC H3 rollback detection).
    SetSizeWritten {
        /// Path.
        path: String,
        /// Its id as opened.
        file: u64,
        /// New size.
        size: u64,
        /// Stripe ranges rewritten and their generations.
        written: Vec<(u32, u32, u64)>,
    },
    /// SPEC H6: let `users` read parts of the encrypted file `path` (its owner only): the
    /// byte `ranges` (whole leaves of its key tree), or with `slices` (and no ranges) the
    /// policy where user `i` of `n` reads the `i`-th of `n` equal slices. Grants add to
    /// the permission bits; they never give write access. Answer `Ok`.
    KeysGrant {
        /// Path.
        path: String,
        /// User names (1 to 64).
        users: Vec<String>,
        /// Byte ranges (at most 64).
        ranges: Vec<(u64, u64)>,
        /// Replace the slice policy with one over `users`, in order.
        slices: bool,
    },
    /// SPEC H6: withdraw every range grant of `users` on `path` (its owner only); their
    /// open capabilities and permits end with their lifetime (SPEC M7). Answer `Ok`.
    KeysRevoke {
        /// Path.
        path: String,
        /// User names.
        users: Vec<String>,
    },
    /// SPEC H6: the range grants on `path` (its owner only). Answer `KeyGrants`.
    KeysList {
        /// Path.
        path: String,
    },
    /// `SetSizeWritten` naming the key tree the stripes were sealed under (SPEC H7): the
    /// MDS records them under that tree if it is the current one or an earlier one a
    /// rekey still keeps, and refuses them (`WrongFile`) under a tree it has dropped (a
    /// writer that opened the file before a finished rekey: it must open it again).
    /// `SetSizeWritten` counts as tree version 1 (what clients before rekeys sealed under).
    SetSizeSealed {
        /// Path.
        path: String,
        /// Its id as opened.
        file: u64,
        /// New size.
        size: u64,
        /// The tree version every written stripe was sealed under.
        tree_version: u32,
        /// Stripe ranges rewritten and their generations.
        written: Vec<(u32, u32, u64)>,
    },
    /// SPEC H7: give the encrypted file `path` a new key tree (its owner only): `lockbox`
    /// names this file and the current tree version + 1, with the same shape. Stripes
    /// stay sealed under the earlier tree until rewritten (the MDS records which use
    /// which, and drops an earlier tree's lockbox once none does). Answer `Opened`: a
    /// read-write open showing the new tree.
    Rekey {
        /// Path.
        path: String,
        /// Its id as opened.
        file: u64,
        /// The encoded lockbox of the new tree.
        #[serde(with = "serde_bytes")]
        lockbox: Vec<u8>,
    },
    /// Administrator: the credential format of a partition's opens (SPEC T2). Answer
    /// `Partitions`.
    PartitionSetCredentials {
        /// Name.
        name: String,
        /// Format.
        credentials: Credentials,
    },
    /// Administrator: every OSD's T10 key generations (SPEC T3, never the keys). Answer
    /// `T10Keys`.
    T10KeysShow,
    /// Administrator: refreshes T10 keys now (SPEC T3, T4) on every OSD or one, for every
    /// T10 partition or one: a new partition key and a new working key in the next slot
    /// (credentials in flight stay valid), or with `revoke` every working slot refilled
    /// (every credential of the partition refused at once); `master` runs SET MASTER KEY
    /// first. Answer `T10Keys`, after every OSD reached acknowledged the keys.
    T10KeysRotate {
        /// One OSD, or all.
        osd: Option<u64>,
        /// One partition (name), or every T10 partition.
        partition: Option<String>,
        /// Refill every working slot (revocation by key exchange).
        revoke: bool,
        /// Exchange the master key first.
        master: bool,
    },
    /// Administrator: revokes every T10 credential of one file (SPEC T4, by policy access
    /// tag): the file's tag rises and every OSD is told; credentials made with the old tag
    /// are refused (`Revoked`), later opens carry the new one. An OSD not reached now is
    /// told by the MDS's once-a-second upkeep before it can serve the file again under a
    /// new credential. Answer `T10ObjectRevoked`.
    T10RevokeObject {
        /// The file.
        path: String,
    },
    /// SPEC H3, H5: `Open` for a writer that will encrypt what it creates. A file this
    /// request creates is encrypted from the start, its lockbox to come: its crypt record
    /// has an empty lockbox (`FileCrypt::is_pending`), it travels under the encrypted
    /// files' method (CMDRSP where the partition says ALLDATA), and its writer sends the
    /// lockbox with the size (`SetSizeLockbox`). An existing file opens as with `Open`.
    /// One MDS round trip and store commit fewer per encrypted put than `Open`,
    /// `SetLockbox`, `SetSizeSealed`. Answer `Opened`.
    OpenSealed {
        /// Path.
        path: String,
        /// Access wanted.
        access: Access,
        /// Create with these permission bits if it does not exist.
        create: Option<u16>,
    },
    /// SPEC H3, H5: the first lockbox of a file whose lockbox is to come (its owner only),
    /// with its size and the write generations of the stripes written, all sealed under
    /// that lockbox's tree (version 1), in one commit. The MDS checks that the box names
    /// this file and tree version 1; it cannot open it. Refused (`AlreadyExists`) when the
    /// file has a lockbox already (another writer recorded one first). Answer `Ok`.
    SetSizeLockbox {
        /// Path.
        path: String,
        /// Its id as opened.
        file: u64,
        /// New size.
        size: u64,
        /// Stripe ranges written and their generations.
        written: Vec<(u32, u32, u64)>,
        /// The encoded lockbox.
        #[serde(with = "serde_bytes")]
        lockbox: Vec<u8>,
    },
    /// Reserves file ids for this user's next puts of new files in `dir`'s partition,
    /// with one capability over them all (`Files::Range`, read-write, the partition's
    /// method): a put stores its data under an id first and links a path to it after
    /// (`Link`), one MDS round trip and no signature per put. Refused in a partition with
    /// T10 credentials, and where the user may not create files. Answer `Reserved`.
    Reserve {
        /// A directory the ids are for (any directory of its partition may link them).
        dir: String,
    },
    /// Creates the file `path` with the reserved id `file`, of `size` bytes already
    /// stored: the id must be reserved to this user, unexpired and not linked before,
    /// and `path`'s directory in the reservation's partition. Refused (`AlreadyExists`)
    /// when `path` exists: the put then goes the usual way. Answer `Stat`.
    Link {
        /// Path of the new file.
        path: String,
        /// The reserved id its data was stored under.
        file: u64,
        /// Its size.
        size: u64,
        /// Its permission bits.
        mode: u16,
    },
    /// SPEC H3, H5: `Link` of a new encrypted file, with its first lockbox (its owner's,
    /// naming this id and tree version 1) and the write generations of the stripes
    /// stored, all recorded in the link's one commit. Answer `Stat`.
    LinkSealed {
        /// Path of the new file.
        path: String,
        /// The reserved id its data was stored under.
        file: u64,
        /// Its size.
        size: u64,
        /// Its permission bits.
        mode: u16,
        /// Stripe ranges written and their generations.
        written: Vec<(u32, u32, u64)>,
        /// The encoded lockbox.
        #[serde(with = "serde_bytes")]
        lockbox: Vec<u8>,
    },
    /// `Reserve` for new encrypted files: linked only by `LinkSealed` (and `Link` only
    /// takes ids of a plain `Reserve`), so the capability may carry the method of
    /// encrypted files in the partition (CMDRSP where the partition has ALLDATA: the
    /// block AEAD protects the data). Answer `Reserved`.
    ReserveSealed {
        /// A directory the ids are for.
        dir: String,
    },
    /// `Unlink` of `path` only if it names file `file`, by a client that holds a write
    /// capability for that file already (a put's, kept): no capability is made or
    /// handed out for the removal, so it costs no signature. `WrongFile` when `path`
    /// names another file (nothing is removed; the client unlinks the usual way).
    /// Answer `Stat`, of the file removed; `Opened` as for `Unlink` when the held
    /// capability would not serve (it or its user revoked, T10 credentials now); `Ok`
    /// when the inode keeps other names (nothing to delete).
    UnlinkHeld {
        /// The file's path.
        path: String,
        /// The id the client holds a capability for.
        file: u64,
        /// That capability's id.
        capability: u64,
    },
    /// Administrator: remove a user from a group (not their primary group). Like every
    /// access-control change it takes effect at the MDS at once (SPEC M7): no capability
    /// or renewal is issued for the access the membership gave from then on.
    GroupMemberRm {
        /// Group.
        group: String,
        /// User.
        user: String,
    },
    /// SPEC M10 with H3: a job participant reads the attributes of a file its job opened,
    /// with the crypt record an encrypted file's reads need (lockbox, write generations),
    /// proving the job's key: `proof` is its signature over
    /// `delegation::stat_message(session, handle id)`. Answer `Stat`.
    StatByHandle {
        /// The signed file handle.
        #[serde(with = "serde_bytes")]
        handle: Vec<u8>,
        /// Ed25519 signature by the computation key.
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
    /// SPEC M10 with H6: `OpenG` of an encrypted file for reading by ranges: the
    /// capability carries `Mode::RANGE_KEYS`, so each participant gets keys only for the
    /// ranges the file's owner granted that participant (`KeysGrant`, the slice policy),
    /// with the permit `StatByHandle` gives. Answered by `FileHandle`.
    OpenGRanges {
        /// The job's computation public key.
        computation_key: [u8; 32],
        /// Path.
        path: String,
    },
    /// The caller's umask (issue 40): the permission bits the MDS clears from the mode of
    /// every file and directory the caller creates (default 077: private). `set` replaces
    /// it (at most 0o777). Answered by `Umask` with the umask in force after.
    Umask {
        /// The new umask, or `None` to read it.
        set: Option<u16>,
    },
    /// The caller changes their passphrase, proving the current one (issue 40): `state`
    /// and `ke3` are an OPAQUE login exchange for the caller's name made with the keys
    /// `login::passphrase_proof_keys(this session's id)`, not sent as a login; the new
    /// credential is registered as for `UserAddOpaque`. The caller's other MDS sessions
    /// end. Answer `Ok`.
    ChangePassphrase {
        /// The sealed login state of the proof's `OpaqueLoginChallenge`.
        #[serde(with = "serde_bytes")]
        state: Vec<u8>,
        /// KE3 of the proof, made with the current passphrase.
        #[serde(with = "serde_bytes")]
        ke3: Vec<u8>,
        /// Argon2id parameters of the new passphrase's key stretching.
        params: KdfParams,
        /// The new OPAQUE registration upload sealed to the MDS's X25519 key (AAD: the
        /// name).
        #[serde(with = "serde_bytes")]
        sealed_upload: Vec<u8>,
    },
    /// Administrator: gives user `name` a new passphrase without the current one (a
    /// forgotten passphrase); counted and logged by the MDS, and every session of the
    /// user ends. Answer `Ok`.
    UserResetPassphrase {
        /// The user.
        name: String,
        /// Argon2id parameters of the key stretching.
        params: KdfParams,
        /// The OPAQUE registration upload sealed to the MDS's X25519 key (AAD: the name).
        #[serde(with = "serde_bytes")]
        sealed_upload: Vec<u8>,
    },
    /// Sets the modification time of `path` (issue 44: utimensat, `touch`, `cp -a`,
    /// `rsync -a`): to `mtime` (protocol milliseconds), which only the owner or the
    /// administrator may do (else `PermissionDenied`), or, with `None`, to the MDS's
    /// time now, which write permission also allows. Answer `Ok`.
    SetMtime {
        /// Path.
        path: String,
        /// The time to set, or `None` for now.
        mtime: Option<u64>,
    },
    /// Makes a symbolic link at `path` to `target` (issue 44): at most
    /// [`SYMLINK_TARGET_BYTES_MAX`] bytes, not empty, no NUL; never followed by the MDS
    /// (clients follow links). Its `FileStat` has the mode `S_IFLNK | 0o777` and the
    /// target's length as its size. Answer `Stat`.
    Symlink {
        /// Where the link is made.
        path: String,
        /// What it points to, as given (relative or absolute).
        target: String,
    },
    /// A symbolic link's target. Answer `Link`; `InvalidArgument` for anything else.
    Readlink {
        /// The link.
        path: String,
    },
    /// Makes a FIFO, a socket's name or (the administrator only) a device node at `path`
    /// (issue 44, mknod(2)): `mode` is [`S_IFIFO`], [`S_IFSOCK`], [`S_IFBLK`] or
    /// [`S_IFCHR`] with permission bits (the creator's umask applies). Such an entry holds
    /// no data at the MDS: each machine's kernel serves it. Other types are
    /// `InvalidArgument`, a device by anyone else `PermissionDenied`. Answer `Stat`.
    Mknod {
        /// Where it is made.
        path: String,
        /// Its type bits and permission bits.
        mode: u16,
        /// A device's number (`makedev(major, minor)`); 0 for the others.
        rdev: u32,
    },
    /// Whether the caller may access `path` as `mask` asks (access(2), issue 44): the
    /// bits 4 (read), 2 (write), 1 (execute or search); 0 asks only that it exists and
    /// its directories may be searched. Answer `Ok`, or `PermissionDenied` as an open, a
    /// write or a lookup through it would be refused.
    Access {
        /// Path.
        path: String,
        /// What is asked (at most 7).
        mask: u8,
    },
    /// Administrator: create a partition whose objects are kept in `replicas` copies on
    /// distinct OSDs (issue 41; 1 to [`crate::limits::REPLICAS_MAX`]; fewer while the
    /// cluster has fewer OSDs). Answer `Partitions`.
    PartitionCreateReplicated {
        /// Name.
        name: String,
        /// Method.
        protection: crate::protection::Protection,
        /// Copies of each object.
        replicas: u8,
    },
    /// What a client places copies by besides the cluster map (issue 41): how many
    /// copies each partition keeps, and which OSDs the MDS has heard from lately (reads
    /// ask an OSD that is down last). Any session. Answer `Placement`.
    Placement,
    /// An open that creates (issue 45): `Open` of `path` when it exists (answer
    /// `Opened`, no `create`), else `Link` of the reserved id `file` as `path`, empty,
    /// with permission bits `mode` (answer `Stat`: the file is reached under the
    /// reservation's capability). One round trip either way.
    OpenOrLink {
        /// Path.
        path: String,
        /// Access wanted when `path` exists.
        access: Access,
        /// A reserved id of the caller's, linked when `path` does not exist.
        file: u64,
        /// Permission bits of a new file.
        mode: u16,
    },
    /// Attributes of `path` with its link count and its access and change times (issue
    /// 44; `Stat` has no room for them). Answer `StatFull`.
    StatFull {
        /// Path.
        path: String,
    },
    /// Makes `to` a new name of the file, FIFO, socket, device node or symbolic link at
    /// `from` (link(2), issue 44): a hard link, one inode under both names, its
    /// permissions, capabilities and lockbox the inode's. Directories cannot be linked
    /// (`PermissionDenied`, EPERM); `to` must not exist (`AlreadyExists`); write and
    /// search permission on `to`'s directory; and, as Linux's `protected_hardlinks`,
    /// only the owner, the administrator or a user who may read and write the inode
    /// links it (else `PermissionDenied`). At most [`LINKS_MAX`] names (`TooLarge`).
    /// Answer `StatFull`, of the inode.
    HardLink {
        /// An existing entry (not followed if it is a symbolic link).
        from: String,
        /// The new name.
        to: String,
    },
    /// Sets the access time, the modification time or both of `path` (utimensat(2),
    /// issue 44; `SetMtime` sets only the latter): a time given explicitly is the owner's
    /// or the administrator's to set (else `PermissionDenied`), `Now` also anyone who
    /// may write it. The change time becomes now. Answer `Ok`.
    SetTimes {
        /// Path.
        path: String,
        /// The access time to set, if any.
        atime: Option<SetTime>,
        /// The modification time to set, if any.
        mtime: Option<SetTime>,
    },
    /// Creates the file `path` and opens it read-write, or refuses (`AlreadyExists`) if
    /// the name exists, in one step at the MDS (open(2) with `O_CREAT | O_EXCL`, issue
    /// 44: lock files rely on only one creator succeeding). `sealed`: created encrypted,
    /// its lockbox to come as with `OpenSealed` (read-write opens only). Answer `Opened`.
    OpenExclusive {
        /// Path of the new file.
        path: String,
        /// Access wanted.
        access: Access,
        /// Its permission bits (the creator's umask applies).
        mode: u16,
        /// Encrypted, its first lockbox recorded with its size (SPEC H5).
        sealed: bool,
    },
    /// Changes any of `path`'s owner, group, mode and times in one commit, each under
    /// the rules of `Chown`, `Chmod` and `SetTimes` (checked in that order; a refusal
    /// changes nothing), and answers the attributes after (issue 44: a mount's setattr in
    /// one round trip). Answer `StatFull`.
    SetAttr {
        /// Path.
        path: String,
        /// New permission bits.
        mode: Option<u16>,
        /// New owner (administrator).
        owner: Option<String>,
        /// New group.
        group: Option<String>,
        /// New access time.
        atime: Option<SetTime>,
        /// New modification time.
        mtime: Option<SetTime>,
    },
    /// `Rename`, where a file at `to` is replaced in the same commit (rename(2), issue
    /// 44: `Rename` refuses `AlreadyExists`, and a client that removed the target first
    /// left a moment, and after a crash a state, with neither). The replaced file loses
    /// that name under the rules of `Unlink` (the sticky bit included); answer `Ok`, or,
    /// when that was its last name, `Opened` as `Unlink` answers, to delete its objects.
    RenameReplace {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Issue 41: a change of `file`'s objects reached at least `COPIES_DURABLE_MIN`
    /// copies but not these (their OSDs did not answer). The MDS records them, durably;
    /// their OSDs learn it at their next check-in and refuse to serve those copies
    /// (`CopyStale`) until a repair. Answer `Ok` once every such OSD knows (or counts as
    /// down, so that it checks in before it serves again), else `MissedCopies` with the
    /// records still to be known (ask `MissedCopiesKnown`). The change is acknowledged
    /// only after `Ok`. Needs the right to write the file; at most
    /// `MISSED_COPIES_PER_REQUEST_MAX` copies.
    CopiesMissed {
        /// The file.
        file: u64,
        /// The copies that missed it (`seq` is ignored: the MDS numbers them).
        copies: Vec<MissedCopy>,
    },
    /// Issue 41: whether the OSDs of these records (as `CopiesMissed` answered) know
    /// them now: `Ok`, or `MissedCopies` with those still to be known. Needs the right
    /// to write the file.
    MissedCopiesKnown {
        /// The file.
        file: u64,
        /// The records.
        copies: Vec<MissedCopy>,
    },
    /// Issue 41: the copies of `file` recorded as missed (answers `MissedCopies`).
    /// Administrator only (the scrubber).
    MissedCopiesOf {
        /// The file.
        file: u64,
    },
    /// Issue 41: these copies of `file` were repaired from good ones; each record whose
    /// `seq` is still the one given is forgotten (a copy missed again since keeps its
    /// newer record). Administrator only. Answer `Ok`.
    CopiesRepaired {
        /// The file.
        file: u64,
        /// The records repaired, as `MissedCopies` gave them.
        copies: Vec<MissedCopy>,
    },
    /// Issue 41: what one scrub found and did, for the MDS's counters (`maat stats`,
    /// `/metrics`, `maat health`). Administrator only. Answer `Ok`.
    ScrubDone(ScrubCounts),
    /// Administrator (issue 41): how many copies of an object a change of a file in
    /// partition `name` must reach before it is acknowledged (the MDS refuses to record
    /// more copies as missed than that leaves); 1 to the partition's copies. Answer
    /// `PartitionCopies` (that partition).
    PartitionSetMinSize {
        /// Name.
        name: String,
        /// Copies a change must reach.
        min_size: u8,
    },
    /// Every partition's copies per object and min_size (issue 41). Any session. Answer
    /// `PartitionCopies`.
    PartitionCopies,
    /// Issue 42, exactly once: `request` (a change [`MdsRequest::once_allowed`] lists),
    /// applied at most once per `id` for this user whichever MDS instance receives it.
    /// The instance that applies it stores its answer in the same transaction as the
    /// change (on a store several instances share); the same `id` and request again,
    /// at any instance, answers that stored answer without applying anything; the same
    /// `id` with another request is refused (`InvalidArgument`). A client retrying a
    /// change whose answer it lost (its instance died) sends the same `id` again, with a
    /// new envelope. Answers are kept at least [`ONCE_ANSWERS_KEPT_MILLIS`].
    Once {
        /// Chosen by the client at random, once per change (not per attempt).
        id: [u8; 16],
        /// The change.
        request: Box<MdsRequest>,
    },
}

/// How long an MDS keeps the answer to an [`MdsRequest::Once`] change: longer than any
/// client retries one (a client gives up on a change after its instances' timeouts).
pub const ONCE_ANSWERS_KEPT_MILLIS: u64 = 10 * 60 * 1000;

/// A partition's copies (issue 41; answers `PartitionCopies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCopies {
    /// Name.
    pub name: String,
    /// Copies of each object, on distinct OSDs.
    pub replicas: u8,
    /// Copies a change must reach before it is acknowledged.
    pub min_size: u8,
}

/// What one scrub checked, found and repaired (issue 41; `MdsRequest::ScrubDone`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubCounts {
    /// Every copy read whole (true) or only their digests compared (false).
    pub deep: bool,
    /// Files checked.
    pub files: u64,
    /// Objects (stripes) checked.
    pub objects: u64,
    /// Copies found good.
    pub copies_good: u64,
    /// Copies their OSD does not hold.
    pub copies_missing: u64,
    /// Copies damaged, stale or unreadable.
    pub copies_bad: u64,
    /// Missing or bad copies replaced by a good one.
    pub copies_repaired: u64,
    /// Objects with no good copy.
    pub objects_lost: u64,
    /// Findings left unrepaired (files not checked included).
    pub unrepaired: u64,
    /// How long the scrub took, milliseconds.
    pub millis: u64,
}

/// One copy of an object that missed a change (issue 41).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MissedCopy {
    /// The object's stripe.
    pub stripe: u32,
    /// The OSD holding the copy.
    pub osd: u64,
    /// The record's number at the MDS (0 in `CopiesMissed`).
    pub seq: u64,
}

/// A time `SetTimes` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    /// The MDS's time now.
    Now,
    /// This time (protocol milliseconds).
    At(u64),
}

/// The most names (hard links) one inode may have.
pub const LINKS_MAX: u32 = 65_000;

/// What `StatFull` adds to [`FileStat`] (issue 44): links, times, a device's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatMore {
    /// Names the inode has (a directory: 2).
    pub nlink: u32,
    /// Access time (ms since the epoch): set by `SetTimes` and at creation; reads do
    /// not move it (as a `noatime` mount).
    pub atime: u64,
    /// Change time (ms since the epoch): when the inode last changed (its data, mode,
    /// owner, names or times).
    pub ctime: u64,
    /// A device node's number (`makedev(major, minor)`); 0 for everything else.
    pub rdev: u32,
}

/// The longest symbolic link target (Linux's `PATH_MAX`).
pub const SYMLINK_TARGET_BYTES_MAX: usize = 4096;

/// The file-type bits of a symbolic link in [`FileStat::mode`] (as `st_mode` has them);
/// files and directories carry none.
pub const S_IFLNK: u16 = 0o120000;
/// The file-type bits of a FIFO in [`FileStat::mode`].
pub const S_IFIFO: u16 = 0o010000;
/// The file-type bits of a socket's name in [`FileStat::mode`].
pub const S_IFSOCK: u16 = 0o140000;
/// The file-type bits of a block device node in [`FileStat::mode`].
pub const S_IFBLK: u16 = 0o060000;
/// The file-type bits of a character device node in [`FileStat::mode`].
pub const S_IFCHR: u16 = 0o020000;
/// The mask of the file-type bits.
pub const S_IFMT: u16 = 0o170000;

/// The credential format a partition's opens get (SPEC T2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Credentials {
    /// Maat's MDS-signed extended capabilities over sessions with each OSD (SPEC M2, M3).
    #[default]
    Maat,
    /// T10 credentials: a capability and its capability key per OSD, MACs only.
    T10,
}

impl Credentials {
    /// The name users type and see.
    pub fn name(self) -> &'static str {
        match self {
            Credentials::Maat => "maat",
            Credentials::T10 => "t10",
        }
    }
    /// Parses a name (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        [Credentials::Maat, Credentials::T10]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

/// A T10 credential for one OSD (SPEC T2), as the MDS hands it to a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct T10Grant {
    /// The OSD it is for.
    pub osd: u64,
    /// The T10 capability's encoding.
    #[serde(with = "serde_bytes")]
    pub capability: Vec<u8>,
    /// Its capability key, sealed under the session (`t10::seal_capability_key`).
    #[serde(with = "serde_bytes")]
    pub sealed_key: Vec<u8>,
}

/// One OSD's T10 key generations (`maat admin keys show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct T10KeyInfo {
    /// The OSD.
    pub osd: u64,
    /// (key, generation) pairs: master, root, partitions, working slots.
    pub generations: Vec<(String, u64)>,
    /// Why the OSD is not up to date (not reached; a revocation still to reach it), if so.
    pub problem: Option<String>,
}

pub use crate::limits::WRITTEN_RANGES_MAX;

pub use crate::limits::PREDICTED_PATHS_MAX;

/// An OSD's registration as `RegisterOsd` and `RegisterOsdControl` carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdRegistration {
    /// The OSD as the cluster map will list it.
    pub entry: OsdEntry,
    /// OSD time.
    pub timestamp: u64,
    /// Fresh nonce.
    pub nonce: [u8; 16],
    /// HMAC under the join key (`login::register_mac_parts`).
    pub mac: [u8; 32],
}

impl OsdRegistration {
    /// The request: `RegisterOsdControl` with `control` (issue 41), else `RegisterOsd`.
    pub fn into_request(self, control: bool) -> MdsPlainRequest {
        let OsdRegistration {
            entry:
                OsdEntry {
                    id,
                    address,
                    sealing_key,
                    weight,
                },
            timestamp,
            nonce,
            mac,
        } = self;
        if control {
            MdsPlainRequest::RegisterOsdControl {
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            }
        } else {
            MdsPlainRequest::RegisterOsd {
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            }
        }
    }
}

impl MdsPlainRequest {
    /// Whether a daemon (an OSD or a KDS) sends this on its own schedule, not a client:
    /// registrations and the periodic catch-ups.
    pub fn is_daemons_own(&self) -> bool {
        match self {
            MdsPlainRequest::RegisterOsd { .. }
            | MdsPlainRequest::RegisterOsdControl { .. }
            | MdsPlainRequest::Revocations { .. }
            | MdsPlainRequest::MissedCopies { .. }
            | MdsPlainRequest::KdsRevocations { .. } => true,
            MdsPlainRequest::LoginStart { .. }
            | MdsPlainRequest::Login { .. }
            | MdsPlainRequest::OpaqueLoginStart { .. }
            | MdsPlainRequest::OpaqueLoginFinish { .. } => false,
        }
    }

    /// A registration and whether it asks for a control key; `None` for any other
    /// request.
    pub fn into_registration(self) -> Option<(OsdRegistration, bool)> {
        let (control, id, address, sealing_key, weight, timestamp, nonce, mac) = match self {
            MdsPlainRequest::RegisterOsd {
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            } => (
                false,
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            ),
            MdsPlainRequest::RegisterOsdControl {
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            } => (
                true,
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            ),
            _ => return None,
        };
        let entry = OsdEntry {
            id,
            address,
            sealing_key,
            weight,
        };
        Some((
            OsdRegistration {
                entry,
                timestamp,
                nonce,
                mac,
            },
            control,
        ))
    }
}

impl MdsRequest {
    /// The request's name in metrics (`maat_request_duration_seconds{request=…}`).
    pub fn kind(&self) -> &'static str {
        match self {
            MdsRequest::ClusterMap => "cluster_map",
            MdsRequest::Stat { .. } => "stat",
            MdsRequest::Readdir { .. } => "readdir",
            MdsRequest::Mkdir { .. } => "mkdir",
            MdsRequest::Rmdir { .. } => "rmdir",
            MdsRequest::Open { .. } => "open",
            MdsRequest::SetSize { .. } => "set_size",
            MdsRequest::Unlink { .. } => "unlink",
            MdsRequest::Rename { .. } => "rename",
            MdsRequest::Chmod { .. } => "chmod",
            MdsRequest::Chown { .. } => "chown",
            MdsRequest::UserAdd { .. } => "user_add",
            MdsRequest::UserRm { .. } => "user_rm",
            MdsRequest::GroupAdd { .. } => "group_add",
            MdsRequest::GroupMemberAdd { .. } => "group_member_add",
            MdsRequest::Stats => "stats",
            MdsRequest::Logout => "logout",
            MdsRequest::RegisterStart { .. } => "register_start",
            MdsRequest::UserAddOpaque { .. } => "user_add_opaque",
            MdsRequest::SetCredential { .. } => "set_credential",
            MdsRequest::PartitionCreate { .. } => "partition_create",
            MdsRequest::PartitionSetSecurity { .. } => "partition_set_security",
            MdsRequest::PartitionList => "partition_list",
            MdsRequest::GetTree { .. } => "get_tree",
            MdsRequest::SetGrouping { .. } => "set_grouping",
            MdsRequest::Renew { .. } => "renew",
            MdsRequest::Revoke { .. } => "revoke",
            MdsRequest::JobCreate { .. } => "job_create",
            MdsRequest::OpenG { .. } => "open_g",
            MdsRequest::JobRenew { .. } => "job_renew",
            MdsRequest::JobLifetime { .. } => "job_lifetime",
            MdsRequest::JobEnd { .. } => "job_end",
            MdsRequest::UserTicket { .. } => "user_ticket",
            MdsRequest::SetSizeByHandle { .. } => "set_size_by_handle",
            MdsRequest::OpenPredicted { .. } => "open_predicted",
            MdsRequest::FileSetDefine { .. } => "fileset_define",
            MdsRequest::FileSetRemove { .. } => "fileset_remove",
            MdsRequest::FileSetList => "fileset_list",
            MdsRequest::SetLockbox { .. } => "set_lockbox",
            MdsRequest::SetSizeWritten { .. } => "set_size",
            MdsRequest::KeysGrant { .. } => "keys_grant",
            MdsRequest::KeysRevoke { .. } => "keys_revoke",
            MdsRequest::KeysList { .. } => "keys_list",
            MdsRequest::Rekey { .. } => "rekey",
            MdsRequest::PartitionSetCredentials { .. } => "partition_set_credentials",
            MdsRequest::PartitionCreateReplicated { .. } => "partition_create",
            MdsRequest::Placement => "placement",
            MdsRequest::CopiesMissed { .. } => "copies_missed",
            MdsRequest::MissedCopiesOf { .. } => "missed_copies_of",
            MdsRequest::MissedCopiesKnown { .. } => "missed_copies_known",
            MdsRequest::CopiesRepaired { .. } => "copies_repaired",
            MdsRequest::ScrubDone(_) => "scrub_done",
            MdsRequest::PartitionSetMinSize { .. } => "partition_set_min_size",
            MdsRequest::PartitionCopies => "partition_copies",
            MdsRequest::OpenOrLink { .. } => "open_or_link",
            MdsRequest::T10KeysShow => "t10_keys_show",
            MdsRequest::T10KeysRotate { .. } => "t10_keys_rotate",
            MdsRequest::T10RevokeObject { .. } => "t10_revoke_object",
            MdsRequest::SetSizeSealed { .. } => "set_size_sealed",
            MdsRequest::OpenSealed { .. } => "open_sealed",
            MdsRequest::SetSizeLockbox { .. } => "set_size_lockbox",
            MdsRequest::Reserve { .. } => "reserve",
            MdsRequest::Link { .. } => "link",
            MdsRequest::LinkSealed { .. } => "link_sealed",
            MdsRequest::ReserveSealed { .. } => "reserve_sealed",
            MdsRequest::UnlinkHeld { .. } => "unlink_held",
            MdsRequest::GroupMemberRm { .. } => "group_member_rm",
            MdsRequest::StatByHandle { .. } => "stat_by_handle",
            MdsRequest::OpenGRanges { .. } => "open_g",
            MdsRequest::Umask { .. } => "umask",
            MdsRequest::ChangePassphrase { .. } => "change_passphrase",
            MdsRequest::UserResetPassphrase { .. } => "user_reset_passphrase",
            MdsRequest::SetMtime { .. } => "set_mtime",
            MdsRequest::Symlink { .. } => "symlink",
            MdsRequest::Readlink { .. } => "readlink",
            MdsRequest::Mknod { .. } => "mknod",
            MdsRequest::Access { .. } => "access",
            MdsRequest::StatFull { .. } => "stat",
            MdsRequest::HardLink { .. } => "hard_link",
            MdsRequest::SetTimes { .. } => "set_times",
            MdsRequest::OpenExclusive { .. } => "open",
            MdsRequest::SetAttr { .. } => "set_attr",
            MdsRequest::RenameReplace { .. } => "rename",
            MdsRequest::Once { request, .. } => request.kind(),
        }
    }

    /// Whether this request changes nothing at the MDS, so that asking it again (at
    /// another instance, after an answer was lost) is harmless: reads, and opens that do
    /// not create (a capability more is issued, nothing stored).
    pub fn is_read_only(&self) -> bool {
        use MdsRequest as R;
        match self {
            R::Open { create, .. } | R::OpenPredicted { create, .. } => create.is_none(),
            R::OpenSealed { create, .. } => create.is_none(),
            R::Umask { set } => set.is_none(),
            R::ClusterMap
            | R::Stat { .. }
            | R::StatFull { .. }
            | R::Readdir { .. }
            | R::Readlink { .. }
            | R::Access { .. }
            | R::Stats
            | R::PartitionList
            | R::PartitionCopies
            | R::Placement
            | R::GetTree { .. }
            | R::JobLifetime { .. }
            | R::UserTicket { .. }
            | R::FileSetList
            | R::KeysList { .. }
            | R::T10KeysShow => true,
            _ => false,
        }
    }

    /// Whether only the instance that holds the leader lease carries this request out
    /// (issue 42: T10 key changes, which go to the OSDs); another instance refuses it
    /// `WrongRecipient` before it changes anything, and a client asks the next instance.
    pub fn leader_only(&self) -> bool {
        match self {
            MdsRequest::T10KeysRotate { .. } | MdsRequest::T10RevokeObject { .. } => true,
            MdsRequest::Once { request, .. } => request.leader_only(),
            _ => false,
        }
    }

    /// Whether this request may travel inside [`MdsRequest::Once`]: the namespace,
    /// attribute, user, group, partition and key-grant changes a client may need to
    /// retry at another MDS instance. Not: reads (a retry is harmless), logout,
    /// renewals, revocations, jobs, reservations and T10 key commands (their state or
    /// their effect on OSDs is not one store transaction), and `Once` itself.
    pub fn once_allowed(&self) -> bool {
        use MdsRequest as R;
        match self {
            R::Open { create, .. } | R::OpenPredicted { create, .. } => create.is_some(),
            R::OpenSealed { create, .. } => create.is_some(),
            R::Umask { set } => set.is_some(),
            R::Mkdir { .. }
            | R::Rmdir { .. }
            | R::OpenExclusive { .. }
            | R::OpenOrLink { .. }
            | R::SetSize { .. }
            | R::SetSizeWritten { .. }
            | R::SetSizeSealed { .. }
            | R::SetSizeLockbox { .. }
            | R::SetLockbox { .. }
            | R::Rekey { .. }
            | R::Unlink { .. }
            | R::UnlinkHeld { .. }
            | R::Rename { .. }
            | R::RenameReplace { .. }
            | R::Chmod { .. }
            | R::Chown { .. }
            | R::SetAttr { .. }
            | R::SetMtime { .. }
            | R::SetTimes { .. }
            | R::Symlink { .. }
            | R::Mknod { .. }
            | R::HardLink { .. }
            | R::Link { .. }
            | R::LinkSealed { .. }
            | R::UserAdd { .. }
            | R::UserAddOpaque { .. }
            | R::UserRm { .. }
            | R::GroupAdd { .. }
            | R::GroupMemberAdd { .. }
            | R::GroupMemberRm { .. }
            | R::PartitionCreate { .. }
            | R::PartitionCreateReplicated { .. }
            | R::PartitionSetSecurity { .. }
            | R::PartitionSetCredentials { .. }
            | R::PartitionSetMinSize { .. }
            | R::FileSetDefine { .. }
            | R::FileSetRemove { .. }
            | R::KeysGrant { .. }
            | R::KeysRevoke { .. } => true,
            _ => false,
        }
    }
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
    /// The protection method of the file's data path (SPEC T1; JSON copies from before
    /// partitions: ALLDATA, what they were protected with). An encrypted file in an
    /// ALLDATA partition uses CMDRSP: its blocks carry their own authentication (H3).
    #[serde(default)]
    pub protection: crate::protection::Protection,
    /// Whether the file's data is encrypted end to end (SPEC H3).
    #[serde(default)]
    pub encrypted: bool,
    /// Its lockbox and write generations (answers to opens only).
    #[serde(default)]
    pub crypt: Option<crate::encrypted::FileCrypt>,
    /// SPEC H6: when the opener may read only ranges the owner granted, the MDS-signed
    /// key-range permit (`key_ranges::KeyRanges`) to show a KDS with the capability
    /// (answers to opens only).
    #[serde(default, with = "serde_bytes")]
    pub key_ranges: Option<Vec<u8>>,
}

impl FileStat {
    /// A symbolic link (issue 44: the mode's file-type bits are [`S_IFLNK`]).
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }

    /// A FIFO ([`S_IFIFO`]).
    pub fn is_fifo(&self) -> bool {
        self.mode & S_IFMT == S_IFIFO
    }

    /// A socket's name ([`S_IFSOCK`]).
    pub fn is_socket(&self) -> bool {
        self.mode & S_IFMT == S_IFSOCK
    }

    /// A block ([`S_IFBLK`]) or character ([`S_IFCHR`]) device node.
    pub fn is_device(&self) -> Option<bool> {
        match self.mode & S_IFMT {
            S_IFBLK => Some(true),
            S_IFCHR => Some(false),
            _ => None,
        }
    }
}

/// SPEC H6: one user's range grant on a file, as `maat keys list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGrantInfo {
    /// The user's name.
    pub user: String,
    /// Byte ranges granted explicitly.
    pub ranges: Vec<(u64, u64)>,
    /// Under the slice policy: `(rank, members)`; the rank's slice follows the size.
    pub slice: Option<(u32, u32)>,
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
    /// Credential format (SPEC T2).
    pub credentials: Credentials,
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
    /// The key distribution servers (SPEC H4); they share one key pair.
    pub kds: Vec<KdsEntry>,
    /// The KDS public keys (`None`: no KDS, so no encrypted files).
    pub kds_keys: Option<KdsKeys>,
    /// Whether clients encrypt new files by default (SPEC H3).
    pub encrypt_new_files: bool,
}

/// A key distribution server in the cluster map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdsEntry {
    /// Address clients reach it at.
    pub address: String,
}

/// The public keys every KDS instance holds the secrets of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdsKeys {
    /// X25519: lockboxes are sealed to it.
    pub sealing_key: [u8; 32],
    /// Ed25519: range-key grants verify under it.
    pub verifying_key: [u8; 32],
}

/// Counters a daemon reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DaemonStats {
    /// "mds" or "osd N".
    pub daemon: String,
    /// `(name, value)` pairs: requests, refusals, crypto operation counts, cache hits.
    pub counters: Vec<(String, u64)>,
}

impl DaemonStats {
    /// The counter named `name`, if this daemon reports it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// `(name, value)` pairs of named atomic counters, read now.
    pub fn load(table: &[(&str, &std::sync::atomic::AtomicU64)]) -> Vec<(String, u64)> {
        table
            .iter()
            .map(|(k, v)| (k.to_string(), v.load(std::sync::atomic::Ordering::Relaxed)))
            .collect()
    }

    /// `(name, value)` pairs of a daemon's cryptographic operation counts.
    pub fn operations(counters: &maat_crypto::Counters) -> Vec<(String, u64)> {
        counters
            .snapshot()
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// What requests cost of counter `name` over the daemons of `stats` whose name starts
    /// with `prefix`: each daemon's `name` less its `NAME_background` (absent: zero).
    pub fn request_share(stats: &[DaemonStats], prefix: &str, name: &str) -> u64 {
        let background = format!("{name}_background");
        stats
            .iter()
            .filter(|d| d.daemon.starts_with(prefix))
            .map(|d| {
                let get = |n: &str| {
                    d.counters
                        .iter()
                        .filter(|(k, _)| k == n)
                        .map(|(_, v)| *v)
                        .sum::<u64>()
                };
                get(name).saturating_sub(get(&background))
            })
            .sum()
    }

    /// Like [`operations`](Self::operations), for a daemon whose background duties
    /// (work no request causes, such as the KDS's revocation catch-up, SPEC M9) use keys
    /// counting into `background`: each count is the daemon's whole work, and every
    /// operation the background did is also reported on its own as `NAME_background`, so
    /// that a reader subtracts it openly, by name. Both come from one read of
    /// `background`, so the difference is exactly what requests cost.
    pub fn operations_with_background(
        counters: &maat_crypto::Counters,
        background: &maat_crypto::Counters,
    ) -> Vec<(String, u64)> {
        let background = background.snapshot().fields();
        let mut out: Vec<(String, u64)> = counters
            .snapshot()
            .fields()
            .into_iter()
            .zip(&background)
            .map(|((k, v), (_, b))| (k.to_string(), v.saturating_add(*b)))
            .collect();
        out.extend(
            background
                .iter()
                .filter(|(_, b)| *b > 0)
                .map(|(k, b)| (format!("{k}_background"), *b)),
        );
        out
    }
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
        /// SPEC T2: in a partition with T10 credentials, one per OSD (then `capability`
        /// is empty unless the file is encrypted: the KDS takes signed capabilities).
        t10: Vec<T10Grant>,
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
    /// File sets (answers `FileSetList`).
    FileSets(Vec<FileSetInfo>),
    /// A file's range grants (answers `KeysList`).
    KeyGrants(Vec<KeyGrantInfo>),
    /// T10 key generations per OSD (answers `T10KeysShow`, `T10KeysRotate`).
    T10Keys(Vec<T10KeyInfo>),
    /// A file's T10 credentials revoked (answers `T10RevokeObject`).
    T10ObjectRevoked(T10ObjectRevocation),
    /// File ids reserved for puts (answers `Reserve`).
    Reserved {
        /// The first id.
        first: u64,
        /// How many.
        count: u32,
        /// The partition's protection method.
        protection: crate::protection::Protection,
        /// The signed capability over them (`Files::Range`; empty under NOSEC).
        #[serde(with = "serde_bytes")]
        capability: Vec<u8>,
        /// Until when they may be linked (the capability's expiry).
        expiry: crate::UnixMillis,
    },
    /// The caller's umask (answers `Umask`).
    Umask(u16),
    /// A symbolic link's target (answers `Readlink`).
    Link(String),
    /// Copies per partition and OSD liveness (answers `Placement`).
    Placement(Placement),
    /// Attributes with the link count and times (answers `StatFull`).
    StatFull {
        /// What `Stat` says.
        stat: FileStat,
        /// The rest.
        more: StatMore,
    },
    /// Copies of a file recorded as missed (answers `MissedCopiesOf`; for
    /// `CopiesMissed` and `MissedCopiesKnown`, those whose OSD does not know yet).
    MissedCopies(Vec<MissedCopy>),
    /// Partitions' copies and min_size (answers `PartitionCopies`, `PartitionSetMinSize`).
    PartitionCopies(Vec<PartitionCopies>),
}

/// What a client places copies by besides the cluster map (issue 41).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Each partition's name and copies per object.
    pub partitions: Vec<(String, u8)>,
    /// Each registered OSD as the MDS sees it.
    pub osds: Vec<OsdState>,
}

/// One OSD as the MDS sees it (`maat admin osd ls`, issue 41).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdState {
    /// Id.
    pub id: u64,
    /// Address clients reach it at (its host part is its failure domain).
    pub address: String,
    /// Placement weight.
    pub weight: u32,
    /// Whether it checked in with the MDS within
    /// [`crate::limits::OSD_DOWN_AFTER_MILLIS`] (or the MDS started more recently than
    /// that and has not heard from it yet).
    pub up: bool,
    /// Milliseconds since the MDS last heard from it; `None`: not since the MDS started.
    pub heard_ms_ago: Option<u64>,
}

/// What `maat admin keys revoke-object` did (SPEC T4 by policy access tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct T10ObjectRevocation {
    /// The file.
    pub file: u64,
    /// Its new policy access tag.
    pub tag: u32,
    /// Each registered OSD, and why it does not hold the tag yet, if it does not.
    pub osds: Vec<(u64, Option<String>)>,
}

/// A file set as `maat fileset ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSetInfo {
    /// Name.
    pub name: String,
    /// Defined by the administrator: it shapes everyone's opens.
    pub everyone: bool,
    /// Files in it.
    pub files: u32,
}
