//! Maat's metadata server logic: the only trusted party (SPEC M1, M3, M5, T7, T9).
//!
//! [`Mds`] owns every decision the metadata server makes: login and tickets, the MACed
//! request channel with its replay window, POSIX permission checks, the namespace, user and
//! group administration, OSD registration, and issuing (and caching) capabilities. It takes
//! the time and a random generator as arguments and keeps its state in a [`MetaStore`]; it
//! never touches a socket, a file or the clock.

pub mod limits;

mod access;
mod acl_version;
mod attributes;
mod capabilities;
mod copies_missed;
mod encryption;
mod filesets;
pub mod grouping;
mod jobs;
mod key_grants;
mod links;
mod liveness;
mod namespace;
mod once;
mod osd_control;
mod partitions;
pub mod predict;
mod renewal;
mod requests;
mod reservations;
mod revocations;
mod scrub_counts;
pub mod store;
mod t10;
mod users;

use maat_crypto::kdf;
use maat_crypto::mac::{Blake3Mac, MacKey};
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::SigningKey;
use maat_crypto::{hash, Counters, CryptoRngCore, OpCounters, Secret32};
use maat_proto::login::{login_mac_parts, login_ok_mac, mds_session_id, mds_session_key};
use maat_proto::msg::{
    self, ClusterMap, DaemonStats, ErrorCode, KdfParams, MdsPlainRequest, MdsPlainResponse,
    MdsRequest, MdsResponse, OsdEntry, WireError,
};
use maat_proto::signed;
use maat_proto::ticket::LoginTicket;
use maat_proto::wire::{self, Freshness, ReplayWindow, UnverifiedRequest};
use maat_proto::UnixMillis;
use namespace::Removing;

/// The `meta` key that says directories' link counts are kept (issue 44): a store
/// without it has them counted at the MDS's start.
const DIRECTORY_LINKS_KEY: &str = "directory_links";
pub use namespace::FILE_BYTES_MAX;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
pub use store::{
    Batch, GroupRecord, Inode, KeyGrant, MetaStore, Op, PartitionRecord, SessionRecord, Special,
    StoreError, UserCredential, UserRecord, DEFAULT_PARTITION,
};
pub use t10::{working_refresh_millis, ChannelError, T10Channel};
pub use users::MdsSecrets;

/// The administrator's user id (superuser: passes every permission check).
pub const ADMIN_UID: u64 = msg::ADMIN_USER_ID;
/// The administrator's group id.
pub const ADMIN_GID: u64 = 1;
/// The root directory's inode.
pub const ROOT_INODE: u64 = 1;
/// Issue 42: the store lease whose holder runs the singleton duties (T10 key upkeep).
pub const LEADER_LEASE: &str = "leader";
/// Inode ids an MDS takes from the store's counter at once (a shared store allocates in
/// a transaction of its own; see `Mds::next_ids`).
pub const INODE_IDS_PER_ALLOCATION: u64 = 32;
/// Where a counter that is not stored yet starts.
const FIRST_ALLOCATED_ID: u64 = 2;
pub use crate::limits::TICKET_LIFETIME_MILLIS_DEFAULT;
pub use capabilities::CAPABILITY_CACHE_ENTRIES_MAX;
/// Expired sessions are deleted from the store every this many logins (and at start).
pub const SESSION_SWEEP_LOGINS: u64 = 1024;
/// Key-derivation context of the key that seals session keys in the store.
const SESSION_WRAP_CONTEXT: &[u8] = b"maat/mds/session-at-rest/v1";
pub use crate::limits::SESSIONS_CACHED_MAX;
/// How far before now a capability's validity starts, to tolerate clock offsets (T7).
pub const CLOCK_SKEW_MILLIS: u64 = maat_proto::login::TOKEN_BACKDATE_MILLIS;

/// This crate's error: a refusal the client caused, or a store failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MdsError {
    /// The request is refused for the reason given.
    #[error("{0}")]
    Refused(WireError),
    /// The metadata store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A cryptographic operation of the MDS's own failed (not the client's fault).
    #[error("MDS cryptography: {0}")]
    Crypto(#[from] maat_crypto::CryptoError),
}

impl MdsError {
    fn refused(code: ErrorCode, detail: impl Into<String>) -> Self {
        MdsError::Refused(WireError::new(code, detail))
    }

    /// The wire form (store failures become `Internal` without detail).
    pub fn to_wire(&self) -> WireError {
        match self {
            MdsError::Refused(e) => e.clone(),
            MdsError::Store(_) | MdsError::Crypto(_) => WireError::new(ErrorCode::Internal, ""),
        }
    }
}

impl From<maat_proto::ProtoError> for MdsError {
    fn from(e: maat_proto::ProtoError) -> Self {
        MdsError::Refused(e.into())
    }
}

type Result<T, E = MdsError> = std::result::Result<T, E>;

/// Operator settings.
#[derive(Debug, Clone)]
pub struct MdsConfig {
    /// Ticket lifetime.
    pub ticket_lifetime_millis: u64,
    /// Capability lifetime.
    pub capability_lifetime_millis: u64,
    /// Accept NOSEC requests (benchmarks only).
    pub danger_allow_insecure: bool,
    /// Key OSDs prove membership with when they register.
    pub join_key: [u8; 32],
    /// Protection method of the `default` partition when the MDS creates it (a new
    /// cluster, or the first start after partitions existed); later changes go through
    /// `maat admin partition set-security`.
    pub default_protection: maat_proto::protection::Protection,
    /// Grouping strategies and their thresholds (SPEC M6).
    pub grouping: grouping::GroupingConfig,
    /// The key distribution servers clients learn from the cluster map (SPEC H4).
    pub kds: Vec<maat_proto::msg::KdsEntry>,
    /// Their shared public keys (`None`: no KDS, no encryption).
    pub kds_keys: Option<maat_proto::msg::KdsKeys>,
    /// Whether clients encrypt new files by default (SPEC H3; needs `kds_keys`).
    pub encrypt_new_files: bool,
    /// The umask a new user starts with (and the administrator, made at the first
    /// start): permission bits cleared from every mode it creates (issue 40; 077 unless
    /// the operator chose otherwise).
    pub default_umask: u16,
    /// Copies of each object in the `default` partition when the MDS creates it (a new
    /// cluster; issue 41): [`maat_proto::limits::REPLICAS_DEFAULT`] unless the operator
    /// chose otherwise. Fewer are kept while the cluster has fewer OSDs.
    pub default_replicas: u8,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    /// Of `requests`: the OSDs' and KDSs' own catch-ups and registrations that were
    /// answered (a forged one is refused and not counted here), which no client request
    /// causes (reported as `requests_background`, so benches subtract
    /// them by name; issue 45).
    background_requests: AtomicU64,
    refusals: AtomicU64,
    refused_by_reason: msg::RefusalCounts,
    logins: AtomicU64,
    login_cookies: AtomicU64,
    /// Issue 41: copies recorded as having missed a change.
    copies_missed: AtomicU64,
    t10_key_exchanges: AtomicU64,
    t10_keys_set: AtomicU64,
    t10_credentials_issued: AtomicU64,
    t10_credentials_reused: AtomicU64,
    t10_policy_tags_set: AtomicU64,
    /// Issue 42: leader lease tokens raised past an OSD's fence ([`Mds::fenced_out`]).
    t10_fence_raises: AtomicU64,
    /// Issue 42: raises put off to the next renewal because an upkeep held the key
    /// exchange ([`Mds::raise_if_fenced_out`]).
    t10_fence_raises_put_off: AtomicU64,
    /// SPEC M9: revocation lists signed for KDS catch-ups (each: the KDS's request
    /// verified, the list signed).
    kds_revocation_lists: AtomicU64,
    /// Passphrases changed by their users (with the current one; issue 40).
    passphrase_changes: AtomicU64,
    /// Passphrases the administrator reset (logged by the daemon).
    passphrase_resets: AtomicU64,
    /// Issue 42: `Once` changes applied, and answered again from the stored answer.
    once_applied: AtomicU64,
    once_answered_again: AtomicU64,
}

/// Sessions read from the store, so a request costs no database read (a cache: the
/// store stays the truth).
type SessionCache = HashMap<[u8; 16], (SessionRecord, Blake3Mac)>;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// User id.
    pub uid: u64,
    /// Primary and supplementary groups.
    pub gids: Vec<u64>,
    /// Permission bits cleared from the modes of what the user creates.
    pub umask: u16,
    /// The user's name as read for this request (shown as the owner of what it owns,
    /// without reading the user again).
    pub name: String,
}

impl Principal {
    fn is_admin(&self) -> bool {
        self.uid == ADMIN_UID
    }
}

/// The metadata server.
pub struct Mds<S: MetaStore> {
    store: S,
    config: MdsConfig,
    signing: SigningKey,
    /// The same key, counting into `background`: it signs the revocation lists of each
    /// KDS's once-a-second catch-up (also counted as `kds_revocation_lists`), which no
    /// request causes; `maat stats` reports that work inside `signatures_made` and on its
    /// own as `signatures_made_background`.
    background_signing: SigningKey,
    /// Counts the background duties' operations (see `background_signing`).
    background: Counters,
    sealing: SealingSecretKey,
    /// Seals session keys for the store (derived from the sealing secret).
    session_wrap: maat_crypto::aead::BlockKey,
    /// Keys login cookies (SPEC T6; derived from the sealing secret, so stateless).
    cookie_key: Secret32,
    decoy_key: Secret32,
    pake: maat_crypto::pake::ServerSetup,
    counters: Counters,
    stats: Stats,
    /// Nonces seen inside the window (SPEC T7).
    replay: Mutex<ReplayWindow>,
    /// Read by every request, written at login and on a miss: apart from the replay
    /// window, so that neither waits on the other.
    sessions: std::sync::RwLock<SessionCache>,
    /// Capabilities, their caches and grouping (SPEC M3–M6).
    issuer: capabilities::Issuer,
    /// Revocation notices in force (SPEC M9).
    revocations: revocations::Revocations,
    /// Jobs and their computation keys (SPEC M10).
    jobs: jobs::Jobs,
    filesets: filesets::FileSets,
    /// File ids reserved for puts, per user (`MdsRequest::Reserve`).
    reservations: Mutex<reservations::Reservations>,
    /// Each user's newest login ticket (job leads seal keys to it).
    tickets: Mutex<HashMap<u64, Vec<u8>>>,
    /// SPEC T2, T3: each OSD's T10 keys and the channel key commands travel on.
    t10: t10::T10Keys,
    /// Seals T10 key states for the store (derived from the sealing secret).
    t10_wrap: maat_crypto::aead::BlockKey,
    /// Issue 41: when each OSD last checked in.
    liveness: liveness::Liveness,
    /// Issue 41: telling OSDs of the copies they hold that missed a change.
    missed: copies_missed::MissedState,
    /// Issue 41: what the scrubs reported.
    scrubs: scrub_counts::ScrubTotals,
    /// Issue 41: each OSD's control key, as agreed with its sealing key (computed once).
    control_keys: Mutex<HashMap<u64, MacKey>>,
    /// Ids taken from the store's counters and not handed out yet, per counter.
    ids: Mutex<HashMap<String, std::ops::Range<u64>>>,
    /// Serializes read-check-commit sequences in this process ([`Mds::writing`]).
    write: Mutex<()>,
    /// Where the shell records administrative acts that bypass a user's own proof (a
    /// passphrase reset); none: not recorded beyond the counters.
    audit: Mutex<Option<Arc<AuditLog>>>,
    /// Issue 42: asked by `stats` whether this instance holds the leader lease (its
    /// fencing token); set by the daemon that renews the lease.
    leadership: std::sync::OnceLock<LeadershipProbe>,
    /// Issue 42: the last grant of [`LEADER_LEASE`] this instance was given through
    /// [`Mds::lease`] (holder, token), which its leader-only commits require.
    leader_grant: Mutex<Option<(String, u64)>>,
    /// Serializes this instance's lease requests and raises (a store one process holds
    /// alone keeps leases by read and write).
    leases: Mutex<()>,
}

/// What [`Mds::writing`] holds; the store's lock goes first when dropped. `None` when the
/// thread held the locks already (a `Once` change holds them across the change it wraps).
pub(crate) struct Writing<'a> {
    held: Option<(store::Exclusive<'a>, std::sync::MutexGuard<'a, ()>)>,
    mds: usize,
}

thread_local! {
    /// The MDS values (by address) whose write locks this thread holds.
    static WRITING: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if self.held.take().is_some() {
            WRITING.with(|w| w.borrow_mut().retain(|m| *m != self.mds));
        }
    }
}

/// Whether an instance holds the leader lease now, and under which token.
pub type LeadershipProbe = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// The shell's record of an administrative act, as one line of text.
pub type AuditLog = dyn Fn(&str) + Send + Sync;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    maat_proto::sync::lock(m)
}

pub(crate) fn read_lock<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    maat_proto::sync::read(l)
}

pub(crate) fn write_lock<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    maat_proto::sync::write(l)
}

fn meta_array<S: MetaStore>(store: &S, key: &str) -> Result<Option<[u8; 32]>> {
    Ok(match store.meta(key)? {
        Some(v) => Some(
            v.try_into()
                .map_err(|_| StoreError::corrupt(format!("meta {key}"), "wrong length"))?,
        ),
        None => None,
    })
}

impl<S: MetaStore> Mds<S> {
    /// Whether this MDS takes NOSEC requests (`danger_allow_insecure`, benchmarks only).
    pub fn allows_insecure(&self) -> bool {
        self.config.danger_allow_insecure
    }

    /// Opens the MDS over `store` with `secrets`, creating the root directory and the
    /// administrator on first start. `admin_key` is the administrator's long-term key,
    /// used only when the administrator is created (registered as an OPAQUE password).
    /// Secrets a format-0 store still holds are deleted from it: the daemon has moved them
    /// into key files first ([`MdsSecrets::legacy_from_store`]).
    pub fn open(
        store: S,
        config: MdsConfig,
        secrets: MdsSecrets,
        admin_key: &[u8; 32],
        boot: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let counters = OpCounters::new_handle();
        let background = OpCounters::new_handle();
        let pake = maat_crypto::pake::ServerSetup::from_bytes(&secrets.opaque_setup)?;
        let mut batch = Batch::default();
        for key in store::LEGACY_SECRET_KEYS {
            if store.meta(key)?.is_some() {
                batch.push(Op::DeleteMeta(key.into()));
            }
        }
        if config.default_protection == maat_proto::protection::Protection::NoSec
            && !config.danger_allow_insecure
        {
            return Err(MdsError::refused(
                ErrorCode::InsecureRefused,
                "a NOSEC default partition needs the danger flag",
            ));
        }
        if let Some(op) =
            Self::default_partition_op(&store, config.default_protection, config.default_replicas)?
        {
            batch.push(op);
        }
        if store.inode(ROOT_INODE)?.is_none() {
            batch.push(Op::PutInode(Inode {
                id: ROOT_INODE,
                is_dir: true,
                mode: 0o755,
                uid: ADMIN_UID,
                gid: ADMIN_GID,
                size: 0,
                mtime: boot.0,
                partition: DEFAULT_PARTITION,
                crypt: None,
                key_grants: Vec::new(),
                special: None,
                nlink: 3,
                atime: boot.0,
                ctime: boot.0,
            }));
            batch.push(Op::PutEntry {
                parent: ROOT_INODE,
                name: "home".into(),
                child: ROOT_INODE + 1,
            });
            batch.push(Op::PutInode(Inode {
                id: ROOT_INODE + 1,
                is_dir: true,
                mode: 0o755,
                uid: ADMIN_UID,
                gid: ADMIN_GID,
                size: 0,
                mtime: boot.0,
                partition: DEFAULT_PARTITION,
                crypt: None,
                key_grants: Vec::new(),
                special: None,
                nlink: 2,
                atime: boot.0,
                ctime: boot.0,
            }));
            batch.push(Op::PutMeta(
                "next_inode".into(),
                (ROOT_INODE + 2).to_be_bytes().to_vec(),
            ));
            batch.push(Op::PutGroup(GroupRecord {
                id: ADMIN_GID,
                name: "admin".into(),
            }));
            batch.push(Op::PutUser(UserRecord {
                id: ADMIN_UID,
                name: "admin".into(),
                credential: users::register_stored_key(&pake, "admin", admin_key, &counters, rng)?,
                gid: ADMIN_GID,
                groups: vec![],
                umask: config.default_umask & 0o777,
            }));
            batch.push(Op::PutMeta("next_user".into(), 2u64.to_be_bytes().to_vec()));
            batch.push(Op::PutMeta(
                "next_group".into(),
                2u64.to_be_bytes().to_vec(),
            ));
        }
        // Directories' link counts (2 and one per subdirectory, issue 44), counted once
        // in a store from before they were kept.
        if store.meta(DIRECTORY_LINKS_KEY)?.is_none() {
            namespace::count_directory_links(&store, &mut batch)?;
            batch.push(Op::PutMeta(DIRECTORY_LINKS_KEY.into(), vec![1]));
        }
        // Expired sessions are dropped at start (and every SESSION_SWEEP_LOGINS logins).
        for (id, session) in store.sessions()? {
            if session.expiry <= boot.0 {
                batch.push(Op::DeleteSession(id));
            }
        }
        if !batch.0.is_empty() {
            store.commit(batch)?;
        }
        let acl_seen = acl_version::stored(&store)?;
        Ok(Self {
            signing: SigningKey::from_seed(secrets.signing_seed.expose())
                .with_counters(counters.clone()),
            background_signing: SigningKey::from_seed(secrets.signing_seed.expose())
                .with_counters(background.clone()),
            background,
            sealing: SealingSecretKey::from_bytes(*secrets.sealing_secret.expose())
                .with_counters(counters.clone()),
            cookie_key: Secret32::from_bytes(maat_crypto::hash::blake3_keyed(
                secrets.sealing_secret.expose(),
                &[users::COOKIE_KEY_CONTEXT],
            )),
            session_wrap: maat_crypto::aead::BlockKey::new(Secret32::from_bytes(
                maat_crypto::hash::blake3_keyed(
                    secrets.sealing_secret.expose(),
                    &[SESSION_WRAP_CONTEXT],
                ),
            ))
            .with_counters(counters.clone()),
            t10_wrap: maat_crypto::aead::BlockKey::new(Secret32::from_bytes(
                maat_crypto::hash::blake3_keyed(
                    secrets.sealing_secret.expose(),
                    &[t10::T10_WRAP_CONTEXT],
                ),
            ))
            .with_counters(counters.clone()),
            t10: t10::T10Keys::default(),
            decoy_key: secrets.decoy_key,
            pake,
            counters,
            stats: Stats::default(),
            audit: Mutex::new(None),
            leadership: std::sync::OnceLock::new(),
            leader_grant: Mutex::new(None),
            leases: Mutex::new(()),
            replay: Mutex::new(ReplayWindow::new(boot)),
            liveness: liveness::Liveness::new(boot.0),
            missed: copies_missed::MissedState::default(),
            scrubs: scrub_counts::ScrubTotals::default(),
            control_keys: Mutex::new(HashMap::new()),
            sessions: std::sync::RwLock::new(HashMap::new()),
            issuer: capabilities::Issuer::new(config.grouping, acl_seen),
            revocations: revocations::Revocations::default(),
            jobs: jobs::Jobs::default(),
            filesets: filesets::FileSets::default(),
            reservations: Mutex::default(),
            tickets: Mutex::new(HashMap::new()),
            ids: Mutex::new(HashMap::new()),
            write: Mutex::new(()),
            store,
            config,
        })
    }

    /// The owner and permission bits of inode `id` as stored now (applied changes
    /// included); `None` once it is removed. For checks from outside the request path
    /// (a simulation's access audit).
    pub fn inode_owner(&self, id: u64) -> Result<Option<(u64, u16)>> {
        Ok(self.store.inode(id)?.map(|i| (i.uid, i.mode)))
    }

    /// Takes or renews the store's lease `name` for `holder` ([`MetaStore::lease`]): the
    /// daemon's leadership of singleton duties (issue 42).
    pub fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
        now: UnixMillis,
    ) -> Result<store::LeaseState> {
        let state = {
            let _one = lock(&self.leases);
            self.store.lease(name, holder, ttl_millis, now.0)?
        };
        let state = self.raise_if_fenced_out(name, holder, state, now)?;
        if name == LEADER_LEASE && state.granted {
            *lock(&self.leader_grant) = Some((holder.to_string(), state.token));
        }
        Ok(state)
    }

    /// Tells `stats` how to learn whether this instance leads (the counters `leader`,
    /// 0 or 1, and `leader_token`); without it, they are not reported. Set once.
    pub fn set_leadership_probe(&self, probe: LeadershipProbe) {
        let _ = self.leadership.set(probe);
    }

    /// Whether this instance may run a singleton duty now: it holds the leader lease, or
    /// no daemon set a probe (one MDS alone, or a test).
    pub(crate) fn leads(&self) -> bool {
        self.leadership.get().is_none_or(|probe| probe().is_some())
    }

    /// Issue 42: what a leader-only commit adds to its batch so that it applies only
    /// while this instance still holds the leader lease under the token it leads by
    /// ([`store::Op::RequireLease`]): checked by the store in the commit's own
    /// transaction, it closes the window between [`Mds::leads`] and the commit. `None`
    /// only where no lease is kept (no daemon set a leadership probe: one MDS in a
    /// test). Fails closed: refused (`NotReady`, naming `what`) when the probe says this
    /// instance does not lead now, or names a token it was not granted through
    /// [`Mds::lease`]. The probe is read once, here.
    pub(crate) fn leader_requirement(&self, what: &str) -> Result<Option<store::Op>> {
        let Some(probe) = self.leadership.get() else {
            return Ok(None);
        };
        let refused =
            |why: String| MdsError::refused(ErrorCode::NotReady, format!("{what}: {why}"));
        let token = probe().ok_or_else(|| {
            refused(
                "this MDS instance no longer holds the leader lease; its successor \
                     keeps this state"
                    .into(),
            )
        })?;
        let grant = lock(&self.leader_grant);
        match grant.as_ref() {
            Some((holder, granted)) if *granted == token => Ok(Some(store::Op::RequireLease {
                name: LEADER_LEASE.to_string(),
                holder: holder.clone(),
                token,
            })),
            _ => Err(refused(format!(
                "this MDS instance was granted no leader lease under token {token}"
            ))),
        }
    }

    /// Commits `batch`, a leader-only change of `what`, under
    /// [`Mds::leader_requirement`]: refused, with nothing written, once another instance
    /// took the lease.
    pub(crate) fn commit_as_leader(&self, mut batch: store::Batch, what: &str) -> Result<()> {
        if let Some(requirement) = self.leader_requirement(what)? {
            batch.push(requirement);
        }
        match self.store.commit(batch) {
            Err(StoreError::LeaseLost { holder, found, .. }) => Err(MdsError::refused(
                ErrorCode::NotReady,
                format!(
                    "{what}: the leader lease passed to {holder:?} (token {found}); its \
                     successor keeps this state"
                ),
            )),
            other => Ok(other?),
        }
    }

    /// The MDS's Ed25519 public key (tickets and capabilities verify under it).
    pub fn verifying_key(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The MDS's X25519 public key (new users' keys are sealed to it).
    pub fn sealing_public_key(&self) -> [u8; 32] {
        self.sealing.public_key().0
    }

    /// The MDS's OPAQUE static public key (clients may pin it).
    pub fn opaque_public_key(&self) -> Vec<u8> {
        self.pake.public_key()
    }

    /// This daemon's operation counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Held for every read-check-commit sequence: this process's write lock, then the
    /// store's writer lock ([`MetaStore::exclusive`]), which keeps the sequences of other
    /// instances sharing the store (issue 42) from interleaving with this one.
    /// A thread that holds them already gets a guard that holds nothing (the outer one
    /// keeps them).
    pub(crate) fn writing(&self) -> Result<Writing<'_>> {
        let me = std::ptr::from_ref(self) as usize;
        if WRITING.with(|w| w.borrow().contains(&me)) {
            return Ok(Writing {
                held: None,
                mds: me,
            });
        }
        let local = lock(&self.write);
        let store = self.store.exclusive()?;
        WRITING.with(|w| w.borrow_mut().push(me));
        Ok(Writing {
            held: Some((store, local)),
            mds: me,
        })
    }

    /// Issue 42: on a shared store, copies the check-ins heard into it now and then, for
    /// the other instances (blind writes of independent keys: no writer lock).
    fn share_liveness(&self, now: UnixMillis) -> Result<()> {
        if self.store.shared() {
            if let Some(batch) = self.liveness.due(now.0) {
                self.store.commit(batch.clone())?;
                self.liveness.committed(&batch);
            }
        }
        Ok(())
    }

    /// Issue 42: on a shared store, takes in the check-ins other instances heard.
    pub(crate) fn stored_liveness(&self) -> Result<()> {
        if self.store.shared() {
            self.liveness
                .merge(self.store.metas(liveness::HEARD_PREFIX)?);
        }
        Ok(())
    }

    /// Allocates the next id of counter `name`.
    fn next_id(&self, name: &str) -> Result<u64> {
        self.next_ids(name, 1)
    }

    /// Allocates `count` consecutive ids of counter `name`; the first of them. Inode ids
    /// come from blocks of [`INODE_IDS_PER_ALLOCATION`] taken from the store at once (a
    /// shared store's allocation is a transaction of its own); the rest of a block is
    /// never used after a restart, so inode numbers may skip, and are never reused.
    fn next_ids(&self, name: &str, count: u64) -> Result<u64> {
        let mut ids = lock(&self.ids);
        let block = ids.entry(name.to_string()).or_insert(0..0);
        if block.end.saturating_sub(block.start) >= count {
            let first = block.start;
            block.start += count;
            return Ok(first);
        }
        let size = if name == "next_inode" {
            count.max(INODE_IDS_PER_ALLOCATION)
        } else {
            count
        };
        let first = self.store.allocate(name, size, FIRST_ALLOCATED_ID)?;
        *block = first.saturating_add(count)..first.saturating_add(size);
        Ok(first)
    }

    fn refuse_counted<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            let code = e.to_wire().code;
            self.stats.refused_by_reason.add(code);
            // "Not ready" right after a start is an expected, retried wait, not a refusal.
            if code != ErrorCode::NotReady {
                self.stats.refusals.fetch_add(1, Ordering::Relaxed);
            }
        }
        r
    }

    // ---------------------------------------------------------------- plain messages

    /// Handles an unauthenticated message (login, OSD registration); returns the encoded
    /// `Result<MdsPlainResponse, WireError>`.
    ///
    /// `peer` names the sender as the network sees it (its IP address, without the port):
    /// login cookies are bound to it (SPEC T6).
    pub fn handle_plain(
        &self,
        peer: &[u8],
        message: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result = msg::decode::<MdsPlainRequest>(message)
            .map_err(MdsError::from)
            .and_then(|request| {
                // Counted once answered: a forged one is not the daemons' own work.
                let own = request.is_daemons_own();
                let answer = self.plain(peer, request, now, rng);
                if own && answer.is_ok() {
                    self.stats
                        .background_requests
                        .fetch_add(1, Ordering::Relaxed);
                }
                answer
            });
        let result = self.durable(result);
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        msg::encode_result(&result)
    }

    fn plain(
        &self,
        peer: &[u8],
        request: MdsPlainRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        match request {
            MdsPlainRequest::LoginStart { name } => self.legacy_login_start(&name, now),
            MdsPlainRequest::Login {
                name,
                signing_key,
                sealing_key,
                timestamp,
                nonce,
                mac,
            } => self.legacy_login(
                &name,
                signing_key,
                sealing_key,
                timestamp,
                nonce,
                mac,
                now,
                rng,
            ),
            MdsPlainRequest::OpaqueLoginStart {
                name,
                ke1,
                signing_key,
                sealing_key,
                nonce,
                cookie,
            } => {
                // SPEC T6: one keyed hash decides whether any group operation is spent
                // (the previous slot's cookie is computed only for a cookie that is not
                // the current one).
                let expected = users::login_cookie(&self.cookie_key, peer, now);
                let previous = || {
                    users::login_cookie(
                        &self.cookie_key,
                        peer,
                        UnixMillis(now.0.saturating_sub(users::COOKIE_SLOT_MILLIS)),
                    )
                };
                match cookie {
                    Some(c)
                        if maat_crypto::ct_eq(&c, &expected)
                            || maat_crypto::ct_eq(&c, &previous()) =>
                    {
                        self.opaque_login_start(
                            &name,
                            &ke1,
                            signing_key,
                            sealing_key,
                            nonce,
                            now,
                            rng,
                        )
                    }
                    _ => {
                        self.stats.login_cookies.fetch_add(1, Ordering::Relaxed);
                        Ok(MdsPlainResponse::LoginCookie { cookie: expected })
                    }
                }
            }
            MdsPlainRequest::Revocations { osd, nonce, mac } => {
                let answer = self.revocations_for(osd, &nonce, &mac, now)?;
                // An OSD's catch-up (MACed under the join key) is its check-in.
                self.liveness.heard(osd, now.0);
                self.share_liveness(now)?;
                Ok(answer)
            }
            MdsPlainRequest::MissedCopies {
                osd,
                nonce,
                applied,
                mac,
            } => {
                let answer = self.missed_for_osd(osd, &nonce, applied, &mac, now)?;
                self.share_liveness(now)?;
                Ok(answer)
            }
            MdsPlainRequest::KdsRevocations {
                nonce,
                timestamp,
                signature,
            } => self.revocations_for_kds(&nonce, UnixMillis(timestamp), &signature, now),
            MdsPlainRequest::OpaqueLoginFinish { state, ke3 } => {
                self.opaque_login_finish(&state, &ke3, now, rng)
            }
            request @ (MdsPlainRequest::RegisterOsd { .. }
            | MdsPlainRequest::RegisterOsdControl { .. }) => {
                let Some((registration, control)) = request.into_registration() else {
                    return Err(MdsError::refused(ErrorCode::Internal, "not a registration"));
                };
                self.registered(registration, control, now)
            }
        }
    }

    fn epoch(&self) -> Result<u64> {
        Ok(match self.store.meta("map_epoch")? {
            Some(v) => u64::from_be_bytes(
                v.try_into()
                    .map_err(|_| StoreError::corrupt("meta map_epoch", "wrong length"))?,
            ),
            None => 0,
        })
    }

    fn fresh(
        &self,
        sid: &[u8; 16],
        nonce: &[u8; 16],
        ts: UnixMillis,
        now: UnixMillis,
    ) -> Result<()> {
        lock(&self.replay)
            .check_and_record(sid, nonce, ts, now)
            .map_err(freshness_error)
    }
}

fn require_admin(who: &Principal) -> Result<()> {
    if who.is_admin() {
        Ok(())
    } else {
        Err(MdsError::refused(
            ErrorCode::PermissionDenied,
            "administrator only",
        ))
    }
}

fn freshness_error(f: Freshness) -> MdsError {
    let (code, detail) = f.refusal();
    MdsError::refused(code, detail)
}
