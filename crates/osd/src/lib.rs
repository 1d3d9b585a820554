//! Maat's object storage daemon logic (SPEC M2, M3, M5, T5, T7), without I/O.
//!
//! [`OsdCore`] decides whether a request may run: it accepts M2 session offers, checks each
//! request envelope (session, expiry, timestamp window, MAC, nonce), and checks the
//! capability the request carries (MDS signature and validity, cached after the first
//! verification; the *authenticated* user named in it; the object's file named in it; the
//! mode). Only then does it hand out an [`Authorized`] value, and the [`ObjectStore`] trait
//! takes one for every data operation, so a store call without the checks does not compile.
//! The real store (files with fsync) lives in `maat-server`.

pub mod limits;

mod authorize;
mod delegation;
mod execute;
mod missed;
mod plain;
mod renewals;
mod t10;
mod trees;

pub use missed::CheckInHook;
pub use t10::{KeyPersister, T10_NO_USER};

use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::VerifyingKey;
use maat_crypto::{hash, Counters, CryptoRngCore, OpCounters};
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::merkle_msg::{MerkleTreeMessage, SetKind};
use maat_proto::msg::{
    self, DaemonStats, ErrorCode, InsecureRequest, ObjectAttributes, ObjectId, OsdCommand,
    OsdPlainRequest, OsdPlainResponse, OsdRequest, OsdResponse, WireError, ADMIN_USER_ID,
    DATA_PARTITION,
};
use maat_proto::protection::{self, DataDigest, EnvelopeKeys, Protection, Sealing};
use maat_proto::renewal::RenewalToken;
use maat_proto::session::{self, SessionOffer};
use maat_proto::signed::Unverified;
use maat_proto::wire::{Freshness, ReplayWindow, UnverifiedRequest};
use maat_proto::{FileId, OsdId, UnixMillis, UserId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use crate::limits::CAPABILITY_CACHE_ENTRIES_MAX;
pub use crate::limits::SESSIONS_MAX;
pub use crate::limits::SESSIONS_PER_USER_MAX;

/// An object store failure (I/O); the daemon's fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The object does not exist.
    #[error("no such object")]
    NotFound,
    /// The partition does not exist or is not empty.
    #[error("partition: {0}")]
    Partition(&'static str),
    /// The store failed.
    #[error("object store I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The object's bytes are not the ones written (changed on disk since).
    #[error("the stored object fails its check: {0}")]
    Damaged(String),
    /// A conditional replace found the object changed since its state was read.
    #[error("the object changed since its state was read")]
    Changed,
}

/// Proof that a data command passed every check for this object and mode.
#[derive(Debug)]
pub struct Authorized {
    object: ObjectId,
    mode: Mode,
    /// Under a T10 credential: the object's policy access tag in force (SPEC T4), which
    /// GET ATTRIBUTES reports and SET ATTRIBUTES may not change.
    policy_tag: Option<u32>,
}

impl Authorized {
    /// An authorization no OSD checked: for a store's own tests only (feature
    /// `store-tests`, which no daemon enables).
    #[cfg(feature = "store-tests")]
    #[doc(hidden)]
    pub fn for_store_tests(object: ObjectId, mode: Mode) -> Self {
        Authorized {
            object,
            mode,
            policy_tag: None,
        }
    }

    /// The object the checks were for.
    pub fn object(&self) -> ObjectId {
        self.object
    }
    /// The mode granted.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

/// Proof that the caller is the administrator (partition commands, FORMAT, LIST).
#[derive(Debug)]
pub struct AdminAuthorized(());

/// A range of an object's file, which the daemon sends to the wire straight from the file
/// (zero-copy) instead of reading it into memory first.
#[derive(Debug)]
pub struct FileRange {
    /// The object's file, opened for reading. A whole-object write renames a new file into
    /// place, so this one keeps the object as it was; a write in place (a byte range, a
    /// truncation) during the send may show in it, as it may in a read into memory,
    /// over a longer window. Under CMDRSP nothing checks data; encrypted files' blocks
    /// check themselves.
    pub file: std::fs::File,
    /// Where the range starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// A range of an object's file to send from, or, for a range shorter than asked for, the
/// bytes themselves.
#[derive(Debug)]
pub enum ReadOut {
    /// Send these bytes of the object's file.
    File(FileRange),
    /// The bytes, read.
    Bytes(Vec<u8>),
}

/// What [`ObjectStore::read_file`] gives.
#[derive(Debug)]
pub struct ObjectRead {
    /// The data, or the file range to send it from.
    pub out: ReadOut,
    /// The [`protection::data_digest`] of exactly these bytes, when the store kept it from
    /// the write that made them (the write's envelope check computed it). The store
    /// guarantees the bytes cannot change while the range is sent: a file with a kept
    /// digest is never written in place.
    pub digest: Option<DataDigest>,
}

/// What a read answer sends beside its message: the file range its data comes from, and
/// the kept digest of that data (SPEC T1 ALLDATA), each when there is one.
#[derive(Debug, Default)]
pub struct ReadAside {
    /// Send the data straight from this range of the object's file.
    pub file: Option<FileRange>,
    /// The data's digest, so that sealing need not read it.
    pub digest: Option<DataDigest>,
}

/// Durable object storage (SPEC T5). Every data call takes the proof of its checks.
pub trait ObjectStore: Send + Sync {
    /// Creates an empty object (no-op if it exists).
    fn create(&self, auth: &Authorized) -> Result<(), StoreError>;
    /// Removes an object (no-op if absent).
    fn remove(&self, auth: &Authorized) -> Result<(), StoreError>;
    /// Reads up to `length` bytes at `offset`.
    fn read(&self, auth: &Authorized, offset: u64, length: u32) -> Result<Vec<u8>, StoreError>;
    /// What [`ObjectStore::read`] would read, as a range of the object's file for a send
    /// straight from the file when it is at least `from_file_min` bytes long, else read,
    /// with the kept digest of the bytes when there is one; `None` when this store keeps
    /// no file per object.
    fn read_file(
        &self,
        _auth: &Authorized,
        _offset: u64,
        _length: u32,
        _from_file_min: u64,
    ) -> Result<Option<ObjectRead>, StoreError> {
        Ok(None)
    }
    /// Writes at `offset` (`replace`: the object becomes exactly `data`, atomically); durable
    /// before it returns. A cut (`replace` past offset 0) of an object the store does not
    /// hold is [`StoreError::NotFound`], never made. `digest` is `data`'s
    /// [`protection::data_digest`] when the request's check computed it; a store may keep
    /// it for reads of exactly these bytes.
    fn write(
        &self,
        auth: &Authorized,
        offset: u64,
        data: &[u8],
        replace: bool,
        digest: Option<&DataDigest>,
    ) -> Result<(), StoreError>;
    /// Appends; durable before it returns.
    fn append(&self, auth: &Authorized, data: &[u8]) -> Result<(), StoreError>;
    /// The BLAKE3 digest of the object's stored bytes, as they are on the disk (no
    /// check): [`StoreError::NotFound`] when it does not exist.
    fn digest(&self, auth: &Authorized) -> Result<[u8; 32], StoreError>;
    /// [`ObjectStore::write`] of the whole object (`replace`), only if the object's
    /// stored bytes still have the digest `expect` (`None`: it does not exist), decided
    /// and done atomically against every other change of the object; else
    /// [`StoreError::Changed`] and nothing written.
    fn replace_if(
        &self,
        auth: &Authorized,
        expect: Option<&[u8; 32]>,
        data: &[u8],
        digest: Option<&DataDigest>,
    ) -> Result<(), StoreError>;
    /// Attributes.
    fn attributes(&self, auth: &Authorized) -> Result<ObjectAttributes, StoreError>;
    /// Sets the policy tag and user attributes.
    fn set_attributes(
        &self,
        auth: &Authorized,
        policy_tag: u32,
        user: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError>;
    /// Lists a partition's objects.
    fn list(&self, auth: &AdminAuthorized, partition: u64) -> Result<Vec<ObjectId>, StoreError>;
    /// Creates a partition.
    fn create_partition(&self, auth: &AdminAuthorized, partition: u64) -> Result<(), StoreError>;
    /// Removes an empty partition.
    fn remove_partition(&self, auth: &AdminAuthorized, partition: u64) -> Result<(), StoreError>;
    /// Erases everything and recreates the data partition.
    fn format(&self, auth: &AdminAuthorized) -> Result<(), StoreError>;
}

struct Session {
    user: UserId,
    expiry: UnixMillis,
    keys: EnvelopeKeys,
    /// The key SPEC M10 proofs on this session are sealed under.
    proof: maat_crypto::aead::BlockKey,
    /// Hashes of the job keys this session proved (SPEC M10).
    proven: Vec<[u8; 32]>,
}

struct CachedCapability {
    capability: Capability,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    refusals: AtomicU64,
    refused_by_reason: msg::RefusalCounts,
    sessions_accepted: AtomicU64,
    capability_cache_hits: AtomicU64,
    capability_cache_misses: AtomicU64,
    trees_supplied: AtomicU64,
    renewal_tokens_verified: AtomicU64,
    renewal_tokens_known: AtomicU64,
    lifetime_tokens_verified: AtomicU64,
    proofs_verified: AtomicU64,
    revocations_applied: AtomicU64,
    bytes_read: AtomicU64,
    /// Of `bytes_read`, those sent straight from the object's file (no MAC over them).
    bytes_read_from_file: AtomicU64,
    /// Of `bytes_read`, those answered under ALLDATA with the digest kept from their
    /// write (no pass over them to seal the answer).
    bytes_read_digest_kept: AtomicU64,
    bytes_written: AtomicU64,
}

/// The session id, request nonce and session key of an authenticated request.
#[derive(Debug, Clone)]
struct SecureContext {
    session_id: [u8; 16],
    nonce: [u8; 16],
    keys: EnvelopeKeys,
    /// How a `SecRequest` (or T10) envelope was sealed; `None` for the version-1
    /// envelope, which MACs everything (as ALLDATA) and encrypts nothing.
    method: Option<Sealing>,
    /// The digest of the request's bulk data, when its check computed one (ALLDATA).
    request_digest: Option<DataDigest>,
}

impl SecureContext {
    /// The method the request was protected with.
    fn protection(&self) -> Protection {
        self.method.map_or(Protection::AllData, |s| s.method)
    }
}

/// Who sent a request, after the envelope checks.
#[derive(Debug, Clone)]
pub struct Caller {
    user: UserId,
    secure: Option<SecureContext>,
    /// SPEC T2: the capability of a request under a T10 credential (then `user` is
    /// [`T10_NO_USER`]).
    t10: Option<maat_proto::t10::T10Capability>,
}

impl Caller {
    /// The authenticated (or, in NOSEC mode, claimed) user.
    pub fn user(&self) -> UserId {
        self.user
    }
}

/// The OSD's decision logic.
pub struct OsdCore {
    id: OsdId,
    sealing: SealingSecretKey,
    mds_key: RwLock<Option<VerifyingKey>>,
    /// The key agreed with the MDS for check-ins (issue 41), which also MACs fenced key
    /// commands (issue 42); none before the OSD learned the MDS's sealing key.
    control: RwLock<Option<maat_crypto::mac::MacKey>>,
    danger_allow_insecure: bool,
    counters: Counters,
    /// See [`OsdCore::background_counters`].
    background: Counters,
    sessions: RwLock<HashMap<[u8; 16], Session>>,
    replay: Mutex<ReplayWindow>,
    capabilities: RwLock<HashMap<[u8; 32], CachedCapability>>,
    trees: trees::TreeCache,
    /// Renewed capability expiries (SPEC M8).
    renewed: renewals::Renewed,
    /// Revocation notices in force (SPEC M9).
    revoked: maat_proto::revocation::RevokedTable,
    /// Copies here that missed a change (issue 41).
    missed: missed::Missed,
    /// Job key lifetimes and proofs of possession (SPEC M10).
    delegations: delegation::Delegations,
    /// SPEC T2, T3: key hierarchy and cached credentials.
    t10: t10::T10State,
    stats: Stats,
    /// Told of every access authorized (a simulation's check of who reached what).
    access_observer: std::sync::OnceLock<AccessObserver>,
}

/// What [`OsdCore::observe_access`] installs: told the caller's user, the object and the
/// mode of every data command authorized, and when.
pub type AccessObserver = Arc<dyn Fn(UserId, &Authorized, UnixMillis) + Send + Sync>;

/// The refusal a store failure is answered with.
fn store_refusal(e: StoreError) -> WireError {
    match e {
        StoreError::NotFound => refuse(ErrorCode::NoSuchObject, ""),
        StoreError::Partition(why) => refuse(ErrorCode::InvalidArgument, why),
        StoreError::Io(e) => refuse(ErrorCode::Internal, e.to_string()),
        StoreError::Damaged(why) => refuse(ErrorCode::ObjectDamaged, why),
        StoreError::Changed => refuse(ErrorCode::ObjectChanged, ""),
    }
}

fn refuse(code: ErrorCode, detail: impl Into<String>) -> WireError {
    WireError::new(code, detail)
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    maat_proto::sync::read(l)
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    maat_proto::sync::write(l)
}

impl OsdCore {
    /// An OSD with its sealing key, booted at `boot`. The MDS key arrives with
    /// registration ([`OsdCore::set_mds_key`]); until then data requests are refused.
    pub fn new(
        id: OsdId,
        sealing: SealingSecretKey,
        danger_allow_insecure: bool,
        boot: UnixMillis,
    ) -> Self {
        let counters = OpCounters::new_handle();
        Self {
            id,
            sealing: sealing.with_counters(counters.clone()),
            mds_key: RwLock::new(None),
            control: RwLock::new(None),
            danger_allow_insecure,
            counters,
            background: OpCounters::new_handle(),
            sessions: RwLock::new(HashMap::new()),
            replay: Mutex::new(ReplayWindow::new(boot)),
            capabilities: RwLock::new(HashMap::new()),
            trees: trees::TreeCache::default(),
            renewed: renewals::Renewed::default(),
            revoked: maat_proto::revocation::RevokedTable::default(),
            missed: missed::Missed::default(),
            delegations: delegation::Delegations::default(),
            t10: t10::T10State::default(),
            stats: Stats::default(),
            access_observer: std::sync::OnceLock::new(),
        }
    }

    /// Installs the MDS's verifying key (learned at registration).
    pub fn set_mds_key(&self, key: [u8; 32]) -> Result<(), WireError> {
        let key = VerifyingKey::from_bytes(&key)
            .map_err(|_| refuse(ErrorCode::Malformed, "MDS key"))?
            .with_counters(self.counters.clone());
        let mut current = write(&self.mds_key);
        if current.as_ref().map(|k| k.to_bytes()) != Some(key.to_bytes()) {
            // Capabilities verified under another key must be verified again.
            write(&self.capabilities).clear();
            self.trees.clear();
        }
        *current = Some(key);
        Ok(())
    }

    /// Tells `observer` of every access authorized from now on (once per OSD; false if
    /// one was installed before). For simulations that check who reached what.
    pub fn observe_access(&self, observer: AccessObserver) -> bool {
        self.access_observer.set(observer).is_ok()
    }

    /// This OSD's id.
    pub fn id(&self) -> OsdId {
        self.id
    }

    /// The public half of the key offers are sealed to.
    pub fn sealing_public_key(&self) -> [u8; 32] {
        self.sealing.public_key().0
    }

    /// Issue 41: the key this OSD checks in with at the MDS whose sealing key is
    /// `mds_sealing` (`maat_proto::control`); its one X25519 agreement counts as
    /// background work. Kept: the MDS MACs fenced key commands under it (issue 42).
    pub fn control_key(
        &self,
        mds_sealing: &[u8; 32],
    ) -> Result<maat_crypto::mac::MacKey, maat_proto::ProtoError> {
        let shared = SealingSecretKey::from_bytes(*self.sealing.to_bytes())
            .with_counters(self.background.clone())
            .agree(&maat_crypto::seal::SealingPublicKey(*mds_sealing))?;
        let key = maat_proto::control::control_key(&shared, self.id.0)?;
        let key = maat_crypto::mac::MacKey::new(key).with_counters(self.background.clone());
        // Fenced key commands from the MDS are MACed under it too (issue 42).
        *write(&self.control) = Some(key.clone());
        Ok(key)
    }

    fn mds_key(&self) -> Result<VerifyingKey, WireError> {
        read(&self.mds_key)
            .clone()
            .ok_or_else(|| refuse(ErrorCode::NotReady, "not yet registered with the MDS"))
    }

    fn counted<T>(&self, r: Result<T, WireError>) -> Result<T, WireError> {
        if let Err(e) = &r {
            self.stats.refused_by_reason.add(e.code);
            // "Not ready" (just started, or not yet registered) is an expected, retried
            // wait, not a refusal.
            if e.code != ErrorCode::NotReady {
                self.stats.refusals.fetch_add(1, Ordering::Relaxed);
            }
        }
        r
    }

    /// The user and keys of a session that is known and not expired, once the request's
    /// timestamp is inside the window (SPEC T7; the MAC and nonce are checked after).
    fn live_session(
        &self,
        session_id: &[u8; 16],
        timestamp: UnixMillis,
        now: UnixMillis,
    ) -> Result<(UserId, EnvelopeKeys), WireError> {
        let (user, keys) = {
            let sessions = read(&self.sessions);
            let session = sessions.get(session_id).ok_or_else(|| {
                refuse(ErrorCode::UnknownSession, "negotiate a session key first")
            })?;
            if session.expiry <= now {
                return Err(refuse(ErrorCode::SessionExpired, "log in again"));
            }
            (session.user, session.keys.clone())
        };
        lock(&self.replay)
            .check_time(timestamp, now)
            .map_err(freshness)?;
        Ok((user, keys))
    }

    /// SPEC T7: checks an authenticated request envelope and decodes the request.
    /// Refusals here cannot be MACed (the session may be unknown), so they go back plain.
    pub fn open_request(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let r = self.open_request_inner(payload, now);
        self.counted(r)
    }

    fn open_request_inner(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        let request = UnverifiedRequest::decode(payload)?;
        let (user, key) = self.live_session(&request.session_id, request.timestamp, now)?;
        let request = request.verify(&key.mac)?;
        lock(&self.replay)
            .check_and_record(&request.session_id, &request.nonce, request.timestamp, now)
            .map_err(freshness)?;
        let decoded: OsdRequest = msg::decode(request.message)?;
        Ok((
            Caller {
                user,
                secure: Some(SecureContext {
                    session_id: request.session_id,
                    nonce: request.nonce,
                    keys: key,
                    method: None,
                    request_digest: None,
                }),
                t10: None,
            },
            decoded,
        ))
    }

    /// SPEC T1 + T7: checks a protected envelope (`SecRequest`) and decodes the request.
    /// The method is checked against the capability later, in [`OsdCore::authorize`].
    pub fn open_sec_request(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let r = self.open_sec_request_inner(payload, now);
        self.counted(r)
    }

    fn open_sec_request_inner(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        let envelope = protection::UnverifiedRequest::decode(payload)?;
        let header = envelope.header;
        let (user, keys) = self.live_session(&header.session_id, header.timestamp, now)?;
        // CAPKEY's MAC covers the capability, which only the (unprotected) message names:
        // that message is decoded once, before the check, and used after it.
        let peeked = match header.method {
            Protection::CapKey => Some(msg::decode::<OsdRequest>(
                envelope.peek_message().unwrap_or_default(),
            )?),
            _ => None,
        };
        let capability = peeked.as_ref().map_or(&[][..], |r| r.capability.as_slice());
        let opened = envelope.open_digested(&keys, capability)?;
        lock(&self.replay)
            .check_and_record(&header.session_id, &header.nonce, header.timestamp, now)
            .map_err(freshness)?;
        let mut decoded: OsdRequest = match peeked {
            Some(request) => request,
            None => msg::decode(&opened.message)?,
        };
        let request_digest = decoded.put_bulk_digested(opened.data, opened.digest)?;
        Ok((
            Caller {
                user,
                secure: Some(SecureContext {
                    session_id: header.session_id,
                    nonce: header.nonce,
                    keys,
                    method: Some(header.sealing()),
                    request_digest,
                }),
                t10: None,
            },
            decoded,
        ))
    }

    /// Decodes a NOSEC request; refused unless `danger_allow_insecure`.
    pub fn open_insecure(&self, message: &[u8]) -> Result<(Caller, OsdRequest), WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if !self.danger_allow_insecure {
            return self.counted(Err(refuse(ErrorCode::InsecureRefused, "")));
        }
        let r: InsecureRequest<OsdRequest> =
            self.counted(msg::decode(message).map_err(Into::into))?;
        Ok(Self::insecure_caller(r))
    }

    /// A NOSEC request with its bulk data outside the message (`FrameType::InsecureBulk`),
    /// refused as [`OsdCore::open_insecure`]'s are.
    pub fn open_insecure_bulk(&self, payload: &[u8]) -> Result<(Caller, OsdRequest), WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if !self.danger_allow_insecure {
            return self.counted(Err(refuse(ErrorCode::InsecureRefused, "")));
        }
        let r = self.counted(msg::open_insecure_bulk_request(payload).map_err(Into::into))?;
        Ok(Self::insecure_caller(r))
    }

    fn insecure_caller(r: InsecureRequest<OsdRequest>) -> (Caller, OsdRequest) {
        (
            Caller {
                user: UserId(r.user),
                secure: None,
                t10: None,
            },
            r.request,
        )
    }

    /// Counters for `maat stats`.
    pub fn stats(&self) -> DaemonStats {
        let s = &self.stats;
        let mut counters = DaemonStats::load(&[
            ("requests", &s.requests),
            ("refusals", &s.refusals),
            ("sessions_accepted", &s.sessions_accepted),
            ("capability_cache_hits", &s.capability_cache_hits),
            ("capability_cache_misses", &s.capability_cache_misses),
            ("trees_supplied", &s.trees_supplied),
            ("renewal_tokens_verified", &s.renewal_tokens_verified),
            ("renewal_tokens_known", &s.renewal_tokens_known),
            ("lifetime_tokens_verified", &s.lifetime_tokens_verified),
            ("proofs_verified", &s.proofs_verified),
            ("revocations_applied", &s.revocations_applied),
            ("bytes_read", &s.bytes_read),
            ("bytes_read_from_file", &s.bytes_read_from_file),
            ("bytes_read_digest_kept", &s.bytes_read_digest_kept),
            ("bytes_written", &s.bytes_written),
        ]);
        counters.push(("trees_cached".into(), self.trees.len() as u64));
        // Nonce streams in the replay window: about one per client connection.
        counters.push(("replay_streams".into(), lock(&self.replay).len() as u64));
        counters.push(("capabilities_renewed".into(), self.renewed.len() as u64));
        counters.push(("revoked_entries".into(), self.revoked.entries() as u64));
        counters.push(("job_keys".into(), self.delegations.keys() as u64));
        counters.extend(DaemonStats::operations_with_background(
            &self.counters,
            &self.background,
        ));
        counters.extend(self.stats.refused_by_reason.counters());
        DaemonStats {
            daemon: format!("osd {}", self.id),
            counters,
        }
    }

    /// This daemon's crypto counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The counters of work no request causes (the daemon's control channel to the MDS:
    /// registration and the once-a-second revocation catch-up, SPEC M9). `stats` reports
    /// it inside each total and on its own as `NAME_background`.
    pub fn background_counters(&self) -> &Counters {
        &self.background
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    maat_proto::sync::lock(m)
}

fn freshness(f: Freshness) -> WireError {
    let (code, detail) = f.refusal();
    refuse(code, detail)
}
