//! Maat's metadata server logic: the only trusted party (SPEC M1, M3, M5, T7, T9).
//!
//! [`Mds`] owns every decision the metadata server makes: login and tickets, the MACed
//! request channel with its replay window, POSIX permission checks, the namespace, user and
//! group administration, OSD registration, and issuing (and caching) capabilities. It takes
//! the time and a random generator as arguments and keeps its state in a [`MetaStore`]; it
//! never touches a socket, a file or the clock.

mod namespace;
pub mod store;

use maat_crypto::kdf;
use maat_crypto::mac::{Blake3Mac, MacKey};
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::SigningKey;
use maat_crypto::{hash, Counters, CryptoRngCore, OpCounters, Secret32};
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::login::{
    login_mac_parts, login_ok_mac, mds_session_id, mds_session_key, register_mac_parts,
    registered_mac, USER_KEY_SEAL_CONTEXT,
};
use maat_proto::msg::{
    self, ClusterMap, DaemonStats, ErrorCode, KdfParams, MdsPlainRequest, MdsPlainResponse,
    MdsRequest, MdsResponse, OsdEntry, WireError,
};
use maat_proto::signed;
use maat_proto::ticket::LoginTicket;
use maat_proto::wire::{self, Freshness, ReplayWindow, UnverifiedRequest};
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
pub use namespace::FILE_BYTES_MAX;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
pub use store::{Batch, GroupRecord, Inode, MetaStore, Op, SessionRecord, StoreError, UserRecord};

/// The administrator's user id (superuser: passes every permission check).
pub const ADMIN_UID: u64 = msg::ADMIN_USER_ID;
/// The administrator's group id.
pub const ADMIN_GID: u64 = 1;
/// The root directory's inode.
pub const ROOT_INODE: u64 = 1;
/// Default ticket (login session) lifetime.
pub const TICKET_LIFETIME_MILLIS_DEFAULT: u64 = 10 * 60 * 60 * 1000;
/// Most capabilities the MDS keeps cached (SPEC M5).
pub const CAPABILITY_CACHE_ENTRIES_MAX: usize = 65_536;
/// Expired sessions are deleted from the store every this many logins (and at start).
pub const SESSION_SWEEP_LOGINS: u64 = 1024;
/// Most sessions kept in memory (the store holds all of them).
pub const SESSIONS_CACHED_MAX: usize = 65_536;
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
}

impl MdsError {
    fn refused(code: ErrorCode, detail: impl Into<String>) -> Self {
        MdsError::Refused(WireError::new(code, detail))
    }

    /// The wire form (store failures become `Internal` without detail).
    pub fn to_wire(&self) -> WireError {
        match self {
            MdsError::Refused(e) => e.clone(),
            MdsError::Store(_) => WireError::new(ErrorCode::Internal, ""),
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
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    refusals: AtomicU64,
    logins: AtomicU64,
    capability_cache_hits: AtomicU64,
    capability_cache_misses: AtomicU64,
}

struct CachedCapability {
    encoded: Vec<u8>,
    expiry: UnixMillis,
}

struct Volatile {
    replay: ReplayWindow,
    /// Sessions read from the store, so a request costs no database read (a cache: the
    /// store stays the truth).
    sessions: HashMap<[u8; 16], (SessionRecord, Blake3Mac)>,
    capabilities: HashMap<(u64, u64, u8), CachedCapability>,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// User id.
    pub uid: u64,
    /// Primary and supplementary groups.
    pub gids: Vec<u64>,
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
    sealing: SealingSecretKey,
    decoy_key: [u8; 32],
    counters: Counters,
    stats: Stats,
    volatile: Mutex<Volatile>,
    /// Serializes read-check-commit sequences.
    write: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn meta_array<S: MetaStore>(store: &S, key: &str) -> Result<Option<[u8; 32]>> {
    Ok(match store.meta(key)? {
        Some(v) => Some(
            v.try_into()
                .map_err(|_| StoreError(format!("meta {key} has the wrong length")))?,
        ),
        None => None,
    })
}

fn kdf_params(p: kdf::PassphraseParams) -> KdfParams {
    KdfParams {
        memory_kib: p.memory_kib,
        iterations: p.iterations,
        lanes: p.lanes,
    }
}

impl<S: MetaStore> Mds<S> {
    /// Opens the MDS over `store`, creating keys, the root directory and the administrator
    /// on first start. `admin_key` is the administrator's long-term key, used only when the
    /// administrator is created.
    pub fn open(
        store: S,
        config: MdsConfig,
        admin_key: &[u8; 32],
        boot: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let counters = OpCounters::new_handle();
        let mut batch = Batch::default();
        let key =
            |name: &str, batch: &mut Batch, rng: &mut dyn CryptoRngCore| -> Result<[u8; 32]> {
                if let Some(k) = meta_array(&store, name)? {
                    return Ok(k);
                }
                let mut k = [0u8; 32];
                rng.fill_bytes(&mut k);
                batch.push(Op::PutMeta(name.into(), k.to_vec()));
                Ok(k)
            };
        let signing_seed = key("signing_seed", &mut batch, rng)?;
        let sealing_secret = key("sealing_secret", &mut batch, rng)?;
        let decoy_key = key("decoy_key", &mut batch, rng)?;
        if store.inode(ROOT_INODE)?.is_none() {
            batch.push(Op::PutInode(Inode {
                id: ROOT_INODE,
                is_dir: true,
                mode: 0o755,
                uid: ADMIN_UID,
                gid: ADMIN_GID,
                size: 0,
                mtime: boot.0,
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
                key: *admin_key,
                salt: [0; 16],
                params: kdf_params(kdf::PassphraseParams::DEFAULT),
                gid: ADMIN_GID,
                groups: vec![],
            }));
            batch.push(Op::PutMeta("next_user".into(), 2u64.to_be_bytes().to_vec()));
            batch.push(Op::PutMeta(
                "next_group".into(),
                2u64.to_be_bytes().to_vec(),
            ));
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
        Ok(Self {
            signing: SigningKey::from_seed(&signing_seed).with_counters(counters.clone()),
            sealing: SealingSecretKey::from_bytes(sealing_secret).with_counters(counters.clone()),
            decoy_key,
            counters,
            stats: Stats::default(),
            volatile: Mutex::new(Volatile {
                replay: ReplayWindow::new(boot),
                sessions: HashMap::new(),
                capabilities: HashMap::new(),
            }),
            write: Mutex::new(()),
            store,
            config,
        })
    }

    /// The MDS's Ed25519 public key (tickets and capabilities verify under it).
    pub fn verifying_key(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The MDS's X25519 public key (new users' keys are sealed to it).
    pub fn sealing_public_key(&self) -> [u8; 32] {
        self.sealing.public_key().0
    }

    /// This daemon's operation counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Allocates the next id of counter `name`, counting allocations already pending in
    /// `batch` (one batch may allocate several ids, e.g. `mkdir -p`).
    fn next_id(&self, name: &str, batch: &mut Batch) -> Result<u64> {
        let pending = batch.0.iter().rev().find_map(|op| match op {
            Op::PutMeta(k, v) if k == name => Some(v.clone()),
            _ => None,
        });
        let stored = match pending {
            Some(v) => Some(v),
            None => self.store.meta(name)?,
        };
        let current = match stored {
            Some(v) => u64::from_be_bytes(
                v.try_into()
                    .map_err(|_| StoreError(format!("meta {name} has the wrong length")))?,
            ),
            None => 2,
        };
        batch.push(Op::PutMeta(
            name.into(),
            (current + 1).to_be_bytes().to_vec(),
        ));
        Ok(current)
    }

    fn refuse_counted<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.stats.refusals.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    // ---------------------------------------------------------------- plain messages

    /// Handles an unauthenticated message (login, OSD registration); returns the encoded
    /// `Result<MdsPlainResponse, WireError>`.
    pub fn handle_plain(
        &self,
        message: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result = msg::decode::<MdsPlainRequest>(message)
            .map_err(MdsError::from)
            .and_then(|request| self.plain(request, now, rng));
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        msg::encode(&result).unwrap_or_default()
    }

    fn plain(
        &self,
        request: MdsPlainRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        match request {
            MdsPlainRequest::LoginStart { name } => {
                // Unknown users get a decoy salt derived from the name, so the answer does
                // not reveal who exists.
                let (salt, params) = match self.store.user_by_name(&name)? {
                    Some(u) => (u.salt, u.params),
                    None => {
                        let d = hash::blake3_keyed(&self.decoy_key, &[name.as_bytes()]);
                        let mut salt = [0u8; 16];
                        salt.copy_from_slice(d.get(..16).unwrap_or(&[0u8; 16]));
                        (salt, kdf_params(kdf::PassphraseParams::DEFAULT))
                    }
                };
                Ok(MdsPlainResponse::LoginChallenge {
                    salt,
                    params,
                    mds_time: now.0,
                })
            }
            MdsPlainRequest::Login {
                name,
                signing_key,
                sealing_key,
                timestamp,
                nonce,
                mac,
            } => self.login(
                &name,
                signing_key,
                sealing_key,
                timestamp,
                nonce,
                mac,
                now,
                rng,
            ),
            MdsPlainRequest::RegisterOsd {
                id,
                address,
                sealing_key,
                weight,
                timestamp,
                nonce,
                mac,
            } => {
                let join = MacKey::new(Secret32::from_bytes(self.config.join_key))
                    .with_counters(self.counters.clone());
                join.verify(
                    &register_mac_parts(id, &address, &sealing_key, weight, timestamp, &nonce)
                        .iter()
                        .map(|v| v.as_slice())
                        .collect::<Vec<_>>(),
                    &mac,
                )
                .map_err(|_| MdsError::refused(ErrorCode::AuthenticationFailed, "OSD join key"))?;
                self.fresh(&[0u8; 16], &nonce, UnixMillis(timestamp), now)?;
                if weight == 0 || address.is_empty() {
                    return Err(MdsError::refused(
                        ErrorCode::InvalidArgument,
                        "weight or address",
                    ));
                }
                let _guard = lock(&self.write);
                let existing = self.store.osds()?;
                if existing
                    .iter()
                    .any(|o| o.id == id && o.sealing_key != sealing_key)
                {
                    return Err(MdsError::refused(
                        ErrorCode::AlreadyExists,
                        format!("OSD {id} is registered with another key (a reformatted OSD needs a new id)"),
                    ));
                }
                let entry = OsdEntry {
                    id,
                    address,
                    sealing_key,
                    weight,
                };
                if !existing.contains(&entry) {
                    let epoch = self.epoch()? + 1;
                    let mut batch = Batch::default();
                    batch.push(Op::PutOsd(entry));
                    batch.push(Op::PutMeta(
                        "map_epoch".into(),
                        epoch.to_be_bytes().to_vec(),
                    ));
                    self.store.commit(batch)?;
                }
                let vk = self.verifying_key();
                let tag = registered_mac(&join, &vk, &nonce);
                Ok(MdsPlainResponse::Registered {
                    mds_verifying_key: vk,
                    mac: tag,
                })
            }
        }
    }

    fn epoch(&self) -> Result<u64> {
        Ok(match self.store.meta("map_epoch")? {
            Some(v) => u64::from_be_bytes(
                v.try_into()
                    .map_err(|_| StoreError("map_epoch has the wrong length".into()))?,
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
        lock(&self.volatile)
            .replay
            .check_and_record(sid, nonce, ts, now)
            .map_err(freshness_error)
    }

    #[allow(clippy::too_many_arguments)]
    fn login(
        &self,
        name: &str,
        signing_key: [u8; 32],
        sealing_key: [u8; 32],
        timestamp: u64,
        nonce: [u8; 16],
        mac: [u8; 32],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsPlainResponse> {
        let failed = || MdsError::refused(ErrorCode::AuthenticationFailed, "");
        // Same checks, same order and one error for known and unknown users: time, then a
        // MAC check (against a decoy key when the user does not exist).
        lock(&self.volatile)
            .replay
            .check_time(UnixMillis(timestamp), now)
            .map_err(freshness_error)?;
        let user = self.store.user_by_name(name)?;
        let key = match &user {
            Some(u) => u.key,
            None => hash::blake3_keyed(&self.decoy_key, &[b"decoy user key", name.as_bytes()]),
        };
        let user_key = MacKey::new(Secret32::from_bytes(key)).with_counters(self.counters.clone());
        let mac_ok = user_key
            .verify(
                &login_mac_parts(name, &signing_key, &sealing_key, timestamp, &nonce)
                    .iter()
                    .map(|v| v.as_slice())
                    .collect::<Vec<_>>(),
                &mac,
            )
            .is_ok();
        let user = match (user, mac_ok) {
            (Some(u), true) => u,
            _ => return Err(failed()),
        };
        let mut sid = [0u8; 16];
        if let Some(s) = sid.get_mut(..8) {
            s.copy_from_slice(&user.id.to_be_bytes());
        }
        self.fresh(&sid, &nonce, UnixMillis(timestamp), now)?;
        let sealing_key = maat_crypto::seal::SealingPublicKey(sealing_key);
        let mut iv = [0u8; 16];
        rng.fill_bytes(&mut iv);
        let ticket = LoginTicket {
            ticket_id: rng.next_u64(),
            user: UserId(user.id),
            client_signing_key: signing_key,
            client_sealing_key: sealing_key,
            iv,
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: now.plus_millis(self.config.ticket_lifetime_millis),
        };
        let ticket = signed::sign(ticket, &self.signing);
        let session_key = mds_session_key(&user.key, ticket.encoded(), &nonce)
            .map_err(|e| MdsError::refused(ErrorCode::Internal, e.to_string()))?;
        let session_id = mds_session_id(ticket.encoded());
        let tag = login_ok_mac(
            &MacKey::new(session_key.clone()).with_counters(self.counters.clone()),
            ticket.encoded(),
            &nonce,
        );
        let record = SessionRecord {
            user: user.id,
            key: *session_key.expose(),
            expiry: ticket.expiry.0,
        };
        let mut batch = Batch::default();
        batch.push(Op::PutSession(session_id, record.clone()));
        self.store.commit(batch)?;
        self.remember_session(session_id, record);
        let logins = self.stats.logins.fetch_add(1, Ordering::Relaxed) + 1;
        if logins % SESSION_SWEEP_LOGINS == 0 {
            self.sweep_sessions(now)?;
        }
        Ok(MdsPlainResponse::LoginOk {
            ticket: ticket.encoded().to_vec(),
            mac: tag,
            mds_time: now.0,
        })
    }

    // ------------------------------------------------------------ authenticated requests

    /// Handles an authenticated request envelope. `Ok` is the sealed response payload;
    /// `Err` is a refusal that could not be MACed (unknown session, bad MAC, …).
    pub fn handle_request(
        &self,
        payload: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let authenticated = self.refuse_counted(self.authenticate(payload, now));
        let (request, session_id, nonce, key, principal) =
            authenticated.map_err(|e| e.to_wire())?;
        let result = msg::decode::<MdsRequest>(request)
            .map_err(MdsError::from)
            .and_then(|r| self.dispatch(&principal, Some(&session_id), r, now, rng));
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        let body = msg::encode(&result).unwrap_or_default();
        Ok(wire::seal_response(&key, &session_id, &nonce, now, &body))
    }

    #[allow(clippy::type_complexity)]
    fn authenticate<'a>(
        &self,
        payload: &'a [u8],
        now: UnixMillis,
    ) -> Result<(&'a [u8], [u8; 16], [u8; 16], Blake3Mac, Principal)> {
        let request = UnverifiedRequest::decode(payload)?;
        let (session, key) = self.session(&request.session_id)?;
        if session.expiry <= now.0 {
            return Err(MdsError::refused(ErrorCode::SessionExpired, "log in again"));
        }
        lock(&self.volatile)
            .replay
            .check_time(request.timestamp, now)
            .map_err(freshness_error)?;
        let request = request.verify(&key)?;
        self.fresh(&request.session_id, &request.nonce, request.timestamp, now)?;
        let principal = self.principal(session.user)?;
        Ok((
            request.message,
            request.session_id,
            request.nonce,
            key,
            principal,
        ))
    }

    /// Deletes expired sessions from the store and the memory cache.
    fn sweep_sessions(&self, now: UnixMillis) -> Result<()> {
        let mut batch = Batch::default();
        for (id, session) in self.store.sessions()? {
            if session.expiry <= now.0 {
                batch.push(Op::DeleteSession(id));
            }
        }
        if !batch.0.is_empty() {
            self.store.commit(batch)?;
        }
        lock(&self.volatile)
            .sessions
            .retain(|_, (s, _)| s.expiry > now.0);
        Ok(())
    }

    /// A session and its envelope key, from memory or (after a restart) from the store.
    fn session(&self, id: &[u8; 16]) -> Result<(SessionRecord, Blake3Mac)> {
        if let Some(s) = lock(&self.volatile).sessions.get(id) {
            return Ok(s.clone());
        }
        let session = self
            .store
            .session(id)?
            .ok_or_else(|| MdsError::refused(ErrorCode::UnknownSession, "log in again"))?;
        Ok(self.remember_session(*id, session))
    }

    fn remember_session(&self, id: [u8; 16], session: SessionRecord) -> (SessionRecord, Blake3Mac) {
        let key = wire::envelope_key(&session.key).with_counters(self.counters.clone());
        let entry = (session, key);
        let mut v = lock(&self.volatile);
        if v.sessions.len() >= SESSIONS_CACHED_MAX {
            v.sessions.clear();
        }
        v.sessions.insert(id, entry.clone());
        entry
    }

    fn principal(&self, uid: u64) -> Result<Principal> {
        let user = self
            .store
            .user(uid)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
        let mut gids = vec![user.gid];
        gids.extend(user.groups.iter().copied());
        Ok(Principal { uid, gids })
    }

    /// Handles a NOSEC request (benchmarks): the claimed user is believed and no
    /// capability is made. Refused unless configured with `danger_allow_insecure`.
    pub fn handle_insecure(
        &self,
        message: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result = if !self.config.danger_allow_insecure {
            Err(MdsError::refused(ErrorCode::InsecureRefused, ""))
        } else {
            msg::decode::<msg::InsecureRequest<MdsRequest>>(message)
                .map_err(MdsError::from)
                .and_then(|r| {
                    let principal = self.principal(r.user)?;
                    self.dispatch(&principal, None, r.request, now, rng)
                })
        };
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        msg::encode(&result).unwrap_or_default()
    }

    fn dispatch(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        request: MdsRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        match request {
            MdsRequest::ClusterMap => Ok(MdsResponse::ClusterMap(ClusterMap {
                epoch: self.epoch()?,
                osds: self.store.osds()?,
            })),
            MdsRequest::Stat { path } => {
                let inode = self.resolve(who, &path)?;
                Ok(MdsResponse::Stat(self.stat_of(&inode)?))
            }
            MdsRequest::Readdir { path } => self.readdir(who, &path),
            MdsRequest::Mkdir {
                path,
                mode,
                parents,
            } => self.mkdir(who, &path, mode, parents, now),
            MdsRequest::Rmdir { path } => self.remove(who, &path, true, now, rng),
            MdsRequest::Unlink { path } => self.remove(who, &path, false, now, rng),
            MdsRequest::Open {
                path,
                access,
                create,
            } => self.open_file(who, &path, access, create, session.is_some(), now, rng),
            MdsRequest::SetSize { path, file, size } => self.set_size(who, &path, file, size, now),
            MdsRequest::Rename { from, to } => self.rename(who, &from, &to, now),
            MdsRequest::Chmod { path, mode } => self.chmod(who, &path, mode, now),
            MdsRequest::Chown { path, owner, group } => {
                self.chown(who, &path, owner.as_deref(), group.as_deref(), now)
            }
            MdsRequest::UserAdd {
                name,
                groups,
                salt,
                params,
                sealed_key,
            } => self.user_add(who, &name, &groups, salt, params, &sealed_key, now),
            MdsRequest::UserRm { name } => self.user_rm(who, &name),
            MdsRequest::GroupAdd { name } => self.group_add(who, &name),
            MdsRequest::GroupMemberAdd { group, user } => self.group_member_add(who, &group, &user),
            MdsRequest::Stats => Ok(MdsResponse::Stats(self.stats())),
            MdsRequest::Logout => {
                if let Some(sid) = session {
                    let mut batch = Batch::default();
                    batch.push(Op::DeleteSession(*sid));
                    self.store.commit(batch)?;
                    lock(&self.volatile).sessions.remove(sid);
                }
                Ok(MdsResponse::Ok)
            }
        }
    }

    /// Counters for `maat stats`.
    pub fn stats(&self) -> DaemonStats {
        let s = &self.stats;
        let mut counters: Vec<(String, u64)> = vec![
            ("requests".into(), s.requests.load(Ordering::Relaxed)),
            ("refusals".into(), s.refusals.load(Ordering::Relaxed)),
            ("logins".into(), s.logins.load(Ordering::Relaxed)),
            (
                "capability_cache_hits".into(),
                s.capability_cache_hits.load(Ordering::Relaxed),
            ),
            (
                "capability_cache_misses".into(),
                s.capability_cache_misses.load(Ordering::Relaxed),
            ),
        ];
        counters.extend(
            self.counters
                .snapshot()
                .fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        DaemonStats {
            daemon: "mds".into(),
            counters,
        }
    }

    // ------------------------------------------------------------------ capabilities

    /// SPEC M3 + M5: a capability for (user, file, mode), from the cache when the cached one
    /// still has at least half its lifetime left, otherwise freshly signed.
    fn capability(
        &self,
        uid: u64,
        file: u64,
        mode: Mode,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> (Vec<u8>, bool) {
        let lifetime = self.config.capability_lifetime_millis;
        let key = (uid, file, mode.bits());
        {
            let volatile = lock(&self.volatile);
            if let Some(c) = volatile.capabilities.get(&key) {
                if c.expiry.0.saturating_sub(now.0) >= lifetime / 2 {
                    self.stats
                        .capability_cache_hits
                        .fetch_add(1, Ordering::Relaxed);
                    return (c.encoded.clone(), true);
                }
            }
        }
        self.stats
            .capability_cache_misses
            .fetch_add(1, Ordering::Relaxed);
        let capability = Capability {
            users: Principals::User(UserId(uid)),
            files: Files::File(FileId(file)),
            id: CapabilityId(rng.next_u64()),
            mode,
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: now.plus_millis(lifetime),
        };
        let expiry = capability.expiry;
        let signed = signed::sign(capability, &self.signing);
        let encoded = signed.encoded().to_vec();
        let mut volatile = lock(&self.volatile);
        if volatile.capabilities.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
            volatile.capabilities.retain(|_, c| c.expiry > now);
            if volatile.capabilities.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
                volatile.capabilities.clear();
            }
        }
        volatile.capabilities.insert(
            key,
            CachedCapability {
                encoded: encoded.clone(),
                expiry,
            },
        );
        (encoded, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn user_add(
        &self,
        who: &Principal,
        name: &str,
        groups: &[String],
        salt: [u8; 16],
        params: KdfParams,
        sealed_key: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        namespace::check_name(name)?;
        let key = self
            .sealing
            .open(USER_KEY_SEAL_CONTEXT, name.as_bytes(), sealed_key)
            .map_err(|_| MdsError::refused(ErrorCode::BadMac, "sealed user key does not open"))?;
        let key: [u8; 32] = key
            .as_slice()
            .try_into()
            .map_err(|_| MdsError::refused(ErrorCode::InvalidArgument, "user key length"))?;
        let _guard = lock(&self.write);
        if self.store.user_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("user {name}"),
            ));
        }
        let mut gids = Vec::new();
        for g in groups {
            let group = self
                .store
                .group_by_name(g)?
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchGroup, g.clone()))?;
            gids.push(group.id);
        }
        let mut batch = Batch::default();
        // Each user gets a personal group of the same name; joining an existing group by
        // accident of naming would hand its members the new user's group access.
        if self.store.group_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("a group named {name} exists; pick another user name"),
            ));
        }
        let gid = self.next_id("next_group", &mut batch)?;
        batch.push(Op::PutGroup(GroupRecord {
            id: gid,
            name: name.into(),
        }));
        let uid = self.next_id("next_user", &mut batch)?;
        batch.push(Op::PutUser(UserRecord {
            id: uid,
            name: name.into(),
            key,
            salt,
            params,
            gid,
            groups: gids,
        }));
        // A home directory the user owns: /home/NAME.
        let home = ROOT_INODE + 1;
        if self.store.lookup(home, name)?.is_none() {
            let ino = self.next_id("next_inode", &mut batch)?;
            batch.push(Op::PutInode(Inode {
                id: ino,
                is_dir: true,
                mode: 0o755,
                uid,
                gid,
                size: 0,
                mtime: now.0,
            }));
            batch.push(Op::PutEntry {
                parent: home,
                name: name.into(),
                child: ino,
            });
        }
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    fn user_rm(&self, who: &Principal, name: &str) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = lock(&self.write);
        let user = self
            .store
            .user_by_name(name)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, name.to_string()))?;
        if user.id == ADMIN_UID {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "the administrator cannot be removed",
            ));
        }
        let mut batch = Batch::default();
        batch.push(Op::DeleteUser {
            id: user.id,
            name: user.name,
        });
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    fn group_add(&self, who: &Principal, name: &str) -> Result<MdsResponse> {
        require_admin(who)?;
        namespace::check_name(name)?;
        let _guard = lock(&self.write);
        if self.store.group_by_name(name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("group {name}"),
            ));
        }
        let mut batch = Batch::default();
        let gid = self.next_id("next_group", &mut batch)?;
        batch.push(Op::PutGroup(GroupRecord {
            id: gid,
            name: name.into(),
        }));
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    fn group_member_add(&self, who: &Principal, group: &str, user: &str) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = lock(&self.write);
        let group = self
            .store
            .group_by_name(group)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchGroup, group.to_string()))?;
        let mut user = self
            .store
            .user_by_name(user)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, user.to_string()))?;
        if user.gid != group.id && !user.groups.contains(&group.id) {
            user.groups.push(group.id);
            let mut batch = Batch::default();
            batch.push(Op::PutUser(user));
            self.store.commit(batch)?;
        }
        Ok(MdsResponse::Ok)
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
    match f {
        Freshness::Stale => MdsError::refused(ErrorCode::StaleRequest, "check the clock"),
        Freshness::Replayed => MdsError::refused(ErrorCode::ReplayedRequest, ""),
        Freshness::Busy => MdsError::refused(ErrorCode::Busy, "replay window full"),
    }
}
