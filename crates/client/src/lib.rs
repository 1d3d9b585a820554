//! Maat's client library: what the CLI (and later FUSE and the Python SDK) build on.
//!
//! A [`Client`] logs in (SPEC M1: the passphrase is stretched locally with Argon2id and
//! never sent), keeps its ticket, client–MDS key and client–OSD session keys (M2) in a
//! home directory, MACs every request with a timestamp and nonce (T7) using a clock offset
//! learned from the servers, computes object placement from the cluster map (T8), stripes
//! large files, and caches opened capabilities (M5).

mod auth;
mod clock;
mod error;
mod rng;
pub(crate) use clock::LocalClock;
pub use clock::{local_now, ClockFn, SleepFn};
pub use error::ClientError;
mod crypt;
mod crypt_files;
pub use crypt::FILE_KEYS_CACHED_MAX;
pub use crypt_files::PENDING_STRIPES_MAX;
mod data;
pub use data::stripes_for;
mod files;
pub use files::{FileHandle, OpenFlags, FILE_IO_BYTES_MAX};
mod home;
mod jobs;
mod kds_keys;
mod key_grants;
mod namespace;
mod sessions;
pub use jobs::{JobHandle, JOB_REFRESH_AT_PERCENT_LEFT};
pub use maat_proto::placement;
mod rekey;
mod shared;
pub use rekey::RekeyReport;
pub use shared::IDLE_CONNECTIONS_PER_PEER_MAX;
pub(crate) use shared::{Locked, Pool};
mod renewal;
mod transfer;
mod trees;

pub use auth::{KDF_ITERATIONS_MAX, KDF_LANES_MAX, KDF_MEMORY_KIB_MAX};
pub use home::{write_private_file, ClusterFile, Home, SessionState};

use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::{SigningKey, VerifyingKey};
use maat_crypto::{kdf, CryptoRngCore, OsRng, Secret32};
use maat_net::{Connection, Network};
use maat_proto::login;
use maat_proto::msg::{
    self, Access, ClusterMap, DaemonStats, ErrorCode, FileStat, InsecureRequest, KdfParams,
    MdsPlainRequest, MdsPlainResponse, MdsRequest, MdsResponse, ObjectId, OsdCommand,
    OsdPlainRequest, OsdPlainResponse, OsdRequest, OsdResponse, WireError, DATA_PARTITION,
    STRIPE_UNIT_BYTES,
};
use maat_proto::protection::{self, Protection};
use maat_proto::session::{self, SessionConfirm};
use maat_proto::signed::{Unverified, UnverifiedMac};
use maat_proto::ticket::LoginTicket;
use maat_proto::wire::{self, FrameType};
use maat_proto::{OsdId, UnixMillis};
use rand_core::{RngCore, SeedableRng};
use std::collections::HashMap;
use std::io::{Read, Write};

type Result<T, E = ClientError> = std::result::Result<T, E>;

/// `message` encoded for the wire (the client's own messages: a failure is a bug).
pub(crate) fn encode<T: serde::Serialize>(message: &T) -> Result<Vec<u8>> {
    msg::encode(message).map_err(|e| ClientError::Internal(format!("encoding a message: {e}")))
}

/// How a user proves who they are at login.
pub enum Credential<'a> {
    /// A passphrase (stretched locally with the MDS-supplied salt and parameters).
    Passphrase(&'a [u8]),
    /// A stored long-term key (the administrator identity `maat up` creates).
    Key([u8; 32]),
}

/// Counters of this client (persisted in the session).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct ClientStats {
    /// Opens answered from the client cache.
    pub capability_cache_hits: u64,
    /// Opens that went to the MDS.
    pub capability_cache_misses: u64,
    /// Requests sent.
    pub requests: u64,
    /// Renewal tokens received (SPEC M8).
    #[serde(default)]
    pub renewals: u64,
}

/// An opened file: attributes and the capability for its objects.
#[derive(Debug, Clone)]
pub struct Opened {
    /// Attributes at open time.
    pub stat: FileStat,
    /// The MDS-signed capability (empty in NOSEC mode).
    pub capability: Vec<u8>,
    /// Whether the MDS served it from its cache.
    pub mds_cached: bool,
}

/// What `Client::revoke` did (SPEC M9).
#[derive(Debug, Clone)]
pub struct Revocation {
    /// The MDS-signed notice (verified).
    pub notice: maat_proto::revocation::RevocationNotice,
    /// OSDs that applied it before the MDS answered.
    pub osds_told: u32,
    /// OSDs registered.
    pub osds: u32,
}

/// Progress callback: bytes done so far.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// A key made once per login and KDS key: (KDS sealing key, a hash of the login's secret
/// it was made from, the key).
type PerKdsKey<K> = Option<([u8; 32], [u8; 32], K)>;

/// A client of one cluster acting for one user.
///
/// Many threads may share one client (`&self`, e.g. in an `Arc`): its session, caches
/// and counters sit behind short locks (`shared.rs`) and each call takes a connection of
/// its own from a pool. Settings (`danger_insecure_as`, the key level) take `&self`:
/// they are made before the client is shared.
pub struct Client {
    cluster: ClusterFile,
    home: Option<Home>,
    /// Where connections go (TCP unless a test wires an in-process network).
    network: Network,
    /// The local clock (the system's unless a simulation sets one).
    clock: LocalClock,
    /// Idle connections to the MDS, OSDs and KDS instances, by address.
    connections: Pool,
    map: Locked<Option<ClusterMap>>,
    session: Locked<Option<SessionState>>,
    mds_key: VerifyingKey,
    insecure_user: Option<u64>,
    /// Envelope keys derived from session secrets, kept for the life of the client.
    envelope_keys: Locked<EnvelopeKeys>,
    /// SPEC T2: the newest T10 credential per (file, OSD), from opens in partitions with
    /// T10 credentials.
    t10: Locked<HashMap<(u64, u64), T10Credential>>,
    /// Nonces come from a ChaCha20 generator seeded from the OS, not a syscall each.
    rng: Locked<rand_chacha::ChaCha20Rng>,
    /// Long-lived secrets come from the OS each time (`rng.rs`).
    key_rng: Locked<rng::KeyRng>,
    /// Merkle tree messages fetched from the MDS, by root (SPEC M4).
    trees: Locked<HashMap<[u8; 32], Vec<u8>>>,
    /// Capabilities in use and the renewal tokens that extend them, by id (SPEC M8).
    held: Locked<HashMap<u64, renewal::HeldCapability>>,
    /// Job keys held, by key hash (SPEC M10).
    jobs: Locked<HashMap<[u8; 32], jobs::HeldJob>>,
    /// Range keys of encrypted files, by file id (SPEC H4).
    file_keys: Locked<HashMap<(u64, u32), crypt::HeldKeys>>,
    /// The key shared with the KDS for keyed grants: (KDS sealing key, a hash of this
    /// login's sealing secret, the key), made once per login.
    grant_key: Locked<PerKdsKey<maat_proto::horus::GrantKey>>,
    /// The owner's keys for keyed lockboxes: (KDS sealing key, a hash of the owner's
    /// sealing secret, the keys), made once per login.
    lockbox_keys: Locked<PerKdsKey<maat_proto::horus::LockboxKeys>>,
    /// The key tree level key requests ask for (SPEC H8).
    key_level: u8,
    key_prefetch: u64,
    /// Counters.
    stats: Locked<ClientStats>,
}

// Many threads share one client: it must stay `Send + Sync` (a compile-time check).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Client>();
};

fn decode_answer<T: serde::de::DeserializeOwned>(address: &str, bytes: &[u8]) -> Result<T> {
    decode_answer_raw(address, bytes)?.map_err(ClientError::Refused)
}

fn decode_answer_raw<T: serde::de::DeserializeOwned>(
    address: &str,
    bytes: &[u8],
) -> Result<std::result::Result<T, WireError>> {
    msg::decode(bytes).map_err(|e| ClientError::BadAnswer {
        address: address.to_string(),
        reason: e.to_string(),
    })
}

fn refusal(address: &str, bytes: &[u8]) -> ClientError {
    match msg::decode::<WireError>(bytes) {
        Ok(e) => ClientError::Refused(e),
        Err(e) => ClientError::BadAnswer {
            address: address.to_string(),
            reason: e.to_string(),
        },
    }
}

impl Client {
    /// A client for `cluster`, keeping identity and session in `home` (none: in memory).
    pub fn new(cluster: ClusterFile, home: Option<Home>) -> Result<Self> {
        let mds_key = VerifyingKey::from_bytes(&cluster.mds_verifying_key()?)
            .map_err(|e| ClientError::Config(format!("cluster file: the MDS key: {e}")))?;
        let session = match &home {
            Some(h) => h.load_session()?,
            None => None,
        };
        let stats = session
            .as_ref()
            .map(|s| s.stats.clone())
            .unwrap_or_default();
        Ok(Self {
            network: Network::Tcp,
            clock: LocalClock::default(),
            cluster,
            home,
            connections: Pool::default(),
            map: Locked::default(),
            session: Locked::new(session),
            mds_key,
            insecure_user: None,
            envelope_keys: Locked::default(),
            t10: Locked::default(),
            rng: Locked::new(rand_chacha::ChaCha20Rng::from_rng(OsRng).map_err(|e| {
                ClientError::Internal(format!("seeding the random generator: {e}"))
            })?),
            key_rng: Locked::new(rng::KeyRng::Os),
            trees: Locked::default(),
            held: Locked::default(),
            jobs: Locked::default(),
            file_keys: Locked::default(),
            grant_key: Locked::default(),
            lockbox_keys: Locked::default(),
            key_level: 0,
            key_prefetch: 0,
            stats: Locked::new(stats),
        })
    }

    /// This client with its connections on `network` (an in-process network runs a whole
    /// cluster in one process, for tests).
    pub fn with_network(mut self, network: Network) -> Self {
        self.connections.clear();
        self.network = network;
        self
    }

    /// This client on a simulation's `clock` (waits go through `sleep`, which moves it),
    /// its random generator seeded with `seed`, so that a whole-cluster test repeats
    /// exactly. Never for real data: the seed gives away every key this client makes.
    #[cfg(feature = "sim")]
    pub fn simulated(mut self, clock: ClockFn, sleep: SleepFn, seed: u64) -> Self {
        self.clock = LocalClock::simulated(clock, sleep);
        *self.rng.get_mut() = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        *self.key_rng.get_mut() = rng::KeyRng::Seeded(Box::new(
            rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x6b65_7973), // "keys"
        ));
        self
    }

    /// Sends one frame to `address` on a connection of its own and reads the answer
    /// (see [`Pool`]); a failure names the address.
    pub(crate) fn call_at(
        &self,
        address: &str,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<(FrameType, Vec<u8>)> {
        self.connections
            .call(&self.network, address, frame_type, payload)
            .map_err(|source| ClientError::Net {
                address: address.to_string(),
                source,
            })
    }

    /// 16 fresh random bytes (nonces), from the client's generator.
    pub(crate) fn nonce(&self) -> [u8; 16] {
        let mut nonce = [0u8; 16];
        self.rng.lock().fill_bytes(&mut nonce);
        nonce
    }

    /// A nonce generator for one operation (many nonces, or a long one), seeded from the
    /// client's, so that the shared generator is not held while it runs.
    pub(crate) fn nonce_rng(&self) -> rand_chacha::ChaCha20Rng {
        let mut seed = [0u8; 32];
        self.rng.lock().fill_bytes(&mut seed);
        rand_chacha::ChaCha20Rng::from_seed(seed)
    }

    /// The generator of long-lived secrets for one operation (`rng.rs`).
    pub(crate) fn key_rng(&self) -> rng::KeyRng {
        self.key_rng.lock().fork()
    }

    /// Switches to NOSEC mode acting as `user` (benchmarks; daemons must allow it).
    pub fn danger_insecure_as(&mut self, user: u64) {
        self.insecure_user = Some(user);
    }

    /// Leaves NOSEC mode.
    pub fn secure(&mut self) {
        self.insecure_user = None;
    }

    /// The logged-in user's id, if any.
    pub fn uid(&self) -> Option<u64> {
        self.session.lock().as_ref().map(|s| s.uid)
    }

    /// The logged-in user's name.
    pub fn user_name(&self) -> Option<String> {
        self.session.lock().as_ref().map(|s| s.user.clone())
    }

    /// This client's counters: requests it sent to the MDS and OSDs, its capability
    /// cache's hits and misses, renewals.
    pub fn client_stats(&self) -> ClientStats {
        self.stats.lock().clone()
    }

    /// Saves session state (keys, clock offset, caches) to the home directory.
    pub fn save(&self) -> Result<()> {
        let Some(home) = &self.home else {
            return Ok(());
        };
        let stats = self.client_stats();
        let session = {
            let mut session = self.session.lock();
            let Some(s) = session.as_mut() else {
                return Ok(());
            };
            s.stats = stats;
            s.clone()
        };
        home.save_session(&session)
    }

    fn now(&self) -> u64 {
        let offset = self
            .session
            .lock()
            .as_ref()
            .map(|s| s.clock_offset)
            .unwrap_or(0);
        self.clock.now().saturating_add_signed(offset)
    }

    // ------------------------------------------------------------------ login

    /// Logs in with the home's stored key if there is one and no live session.
    pub fn ensure_session(&self) -> Result<()> {
        if self.insecure_user.is_some() {
            return Ok(());
        }
        let now = self.now();
        if self
            .session
            .lock()
            .as_ref()
            .is_some_and(|s| s.expiry > now + 60_000)
        {
            return Ok(());
        }
        self.relogin()
    }

    fn relogin(&self) -> Result<()> {
        let identity = self.home.as_ref().and_then(|h| h.identity().ok().flatten());
        match identity {
            Some((name, key)) => self.login(&name, Credential::Key(key)),
            None => {
                let now = self.now();
                if self
                    .session
                    .lock()
                    .as_ref()
                    .is_some_and(|s| s.expiry <= now)
                {
                    Err(ClientError::Refused(WireError::new(
                        ErrorCode::SessionExpired,
                        "run `maat login` again",
                    )))
                } else {
                    Err(ClientError::NotLoggedIn)
                }
            }
        }
    }

    /// Ends the session at the MDS and forgets it locally.
    /// The local session is forgotten even when the MDS cannot be told; the error then
    /// says the session stays valid there until its ticket expires.
    pub fn logout(&self) -> Result<()> {
        let logged_in = self.session.lock().is_some();
        let told = match logged_in {
            true => self.mds_call(MdsRequest::Logout).map(|_| ()),
            false => Ok(()),
        };
        *self.session.lock() = None;
        if let Some(h) = &self.home {
            h.remove_session()?;
        }
        told.map_err(|e| {
            ClientError::Internal(format!(
                "forgot the local session, but the MDS was not told ({e}); the session stays valid there until it expires"
            ))
        })
    }

    pub(crate) fn bad(&self, address: &str, reason: &str) -> ClientError {
        ClientError::BadAnswer {
            address: address.to_string(),
            reason: reason.to_string(),
        }
    }

    fn plain_mds(&self, payload: &[u8]) -> Result<MdsPlainResponse> {
        let address = &self.cluster.mds;
        let (t, answer) = self.call_at(address, FrameType::Plain, payload)?;
        match t {
            FrameType::Plain => decode_answer(address, &answer),
            FrameType::Refusal => Err(refusal(address, &answer)),
            _ => Err(self.bad(address, "unexpected frame type")),
        }
    }

    // ------------------------------------------------------------------ MDS calls

    /// One authenticated request to the MDS (re-logging in once with a stored key when
    /// the MDS lost or expired the session).
    pub fn mds_call(&self, request: MdsRequest) -> Result<MdsResponse> {
        self.ensure_session()?;
        let clock = self.clock.clone();
        match retry_stale(&clock, || self.mds_call_once(&request)) {
            Err(ClientError::Refused(e))
                if matches!(
                    e.code,
                    ErrorCode::UnknownSession | ErrorCode::SessionExpired
                ) && self
                    .home
                    .as_ref()
                    .is_some_and(|h| h.identity().ok().flatten().is_some()) =>
            {
                self.relogin()?;
                self.mds_call_once(&request)
            }
            other => other,
        }
    }

    /// Checks and decodes the answer to an authenticated request: a MACed response for
    /// this request, or an (unauthenticated) refusal.
    fn open_answer<T: serde::de::DeserializeOwned>(
        &self,
        address: &str,
        key: &maat_crypto::mac::Blake3Mac,
        sid: &[u8; 16],
        nonce: &[u8; 16],
        frame_type: FrameType,
        answer: &[u8],
    ) -> Result<T> {
        match frame_type {
            FrameType::Response => {
                let (_, message) = wire::open_response(key, sid, nonce, answer)
                    .map_err(|e| self.bad(address, &e.to_string()))?;
                decode_answer(address, message)
            }
            FrameType::Refusal => Err(refusal(address, answer)),
            _ => Err(self.bad(address, "unexpected frame type")),
        }
    }

    fn mds_call_once(&self, request: &MdsRequest) -> Result<MdsResponse> {
        self.stats.lock().requests += 1;
        let address = &self.cluster.mds;
        let body = encode(request)?;
        if let Some(user) = self.insecure_user {
            let payload = encode(&InsecureRequest {
                user,
                request: request.clone(),
            })?;
            let (t, answer) = self.call_at(address, FrameType::Insecure, &payload)?;
            return match t {
                FrameType::Plain => decode_answer(address, &answer),
                _ => Err(refusal(address, &answer)),
            };
        }
        let now = self.now();
        let (sid, key) = self.mds_session_key()?;
        let nonce = self.nonce();
        let payload = wire::seal_request(&key, &sid, UnixMillis(now), &nonce, &body);
        let (t, answer) = self.call_at(address, FrameType::Request, &payload)?;
        self.open_answer(address, &key, &sid, &nonce, t, &answer)
    }

    /// `read` applied to the login's session (not logged in: an error). `read` runs under
    /// the session's lock: it copies what it needs and calls nothing of the client.
    pub(crate) fn with_session<T>(&self, read: impl FnOnce(&SessionState) -> T) -> Result<T> {
        self.session
            .lock()
            .as_ref()
            .map(read)
            .ok_or(ClientError::NotLoggedIn)
    }

    /// The MDS session's id and request MAC key.
    fn mds_session_key(&self) -> Result<([u8; 16], maat_crypto::mac::Blake3Mac)> {
        let (sid, secret) = self.with_session(|s| (s.session_id, s.key))?;
        Ok((sid, self.envelope_keys.lock().get(&sid, &secret).mac))
    }

    fn expect_ok(&self, request: MdsRequest) -> Result<()> {
        match self.mds_call(request)? {
            MdsResponse::Ok => Ok(()),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    // ------------------------------------------------------------------ capabilities

    fn opened_from(&self, response: MdsResponse) -> Result<Opened> {
        match response {
            MdsResponse::Opened {
                stat,
                capability,
                cached,
                t10,
            } => {
                // An encrypted file's runs are searched by bisection: they must be sound.
                if let Some(Err(e)) = stat.crypt.as_ref().map(|c| c.check()) {
                    return Err(self.bad("mds", &format!("the file's crypt record: {e}")));
                }
                self.hold_t10(stat.id, t10)?;
                Ok(Opened {
                    stat,
                    capability,
                    mds_cached: cached,
                })
            }
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Drops the cached read open of `path` (its size changed).
    pub(crate) fn forget_opened_path(&self, path: &str) {
        if let Some(s) = self.session.lock().as_mut() {
            s.opened.retain(|o| o.path != path);
        }
    }

    fn forget_opened(&self) {
        if let Some(s) = self.session.lock().as_mut() {
            s.opened.clear();
        }
    }

    /// Opens a file; read opens are answered from the client cache while the cached
    /// capability (or, in a partition with T10 credentials, the credentials held for the
    /// file) has more than half its lifetime left (SPEC M5).
    pub fn open(&self, path: &str, access: Access, create: Option<u16>) -> Result<Opened> {
        self.open_predicting(path, access, create, &[])
    }

    /// [`Client::open`] telling the MDS which files this client expects to open next
    /// (SPEC M6; at most `maat_proto::msg::PREDICTED_PATHS_MAX`). Under prediction
    /// grouping the capability may name them too, and the MDS then answers their opens
    /// from its cache.
    pub fn open_predicting(
        &self,
        path: &str,
        access: Access,
        create: Option<u16>,
        predicted: &[String],
    ) -> Result<Opened> {
        let now = self.now();
        if access == Access::Read && self.insecure_user.is_none() {
            let cached = self.session.lock().as_ref().and_then(|s| {
                s.opened
                    .iter()
                    .find(|o| o.path == path && o.expiry > now && o.expiry - now > o.lifetime / 2)
                    .cloned()
            });
            if let Some(o) = cached {
                // A T10 open (no capability) is good only with its credentials, which
                // live in this process, not in the session file.
                let usable = !o.capability.is_empty()
                    || self.t10.lock().keys().any(|(file, _)| *file == o.stat.id);
                if usable {
                    self.stats.lock().capability_cache_hits += 1;
                    return Ok(Opened {
                        stat: o.stat,
                        capability: o.capability,
                        mds_cached: true,
                    });
                }
            }
        }
        self.stats.lock().capability_cache_misses += 1;
        let request = if predicted.is_empty() {
            MdsRequest::Open {
                path: path.into(),
                access,
                create,
            }
        } else {
            MdsRequest::OpenPredicted {
                path: path.into(),
                access,
                create,
                // Hints beyond the MDS's limit are dropped, not a reason to refuse.
                predicted: predicted
                    .iter()
                    .take(maat_proto::msg::PREDICTED_PATHS_MAX)
                    .cloned()
                    .collect(),
            }
        };
        let response = self.mds_call(request)?;
        let opened = self.opened_from(response)?;
        let expiry = if opened.capability.is_empty() {
            self.t10_expiry(opened.stat.id)
        } else {
            Unverified::<maat_proto::capability::Capability>::decode(&opened.capability)
                .ok()
                .map(|c| c.unverified_body().expiry.0)
        };
        // A file whose lockbox is still to come is about to change: not cached.
        let pending = opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending());
        if let (Access::Read, Some(expiry), false) = (access, expiry, pending) {
            if let Some(s) = self.session.lock().as_mut() {
                s.opened.retain(|o| o.path != path && o.expiry > now);
                if s.opened.len() < 1024 {
                    s.opened.push(home::OpenedEntry {
                        path: path.into(),
                        stat: opened.stat.clone(),
                        capability: opened.capability.clone(),
                        expiry,
                        lifetime: expiry.saturating_sub(now),
                    });
                }
            }
        }
        Ok(opened)
    }

    /// When the first of the T10 credentials held for `file` expires, if any are held.
    fn t10_expiry(&self, file: u64) -> Option<u64> {
        self.t10
            .lock()
            .iter()
            .filter(|((f, _), _)| *f == file)
            .filter_map(|(_, c)| maat_proto::t10::decode_capability(&c.capability).ok())
            .map(|c| c.expiry.0)
            .min()
    }

    /// An OSD refused `file`'s T10 credential as revoked (SPEC T4): its credentials and
    /// cached opens are dropped, so the next open asks the MDS again.
    pub(crate) fn forget_t10(&self, file: u64) {
        self.t10.lock().retain(|(f, _), _| *f != file);
        if let Some(s) = self.session.lock().as_mut() {
            s.opened.retain(|o| o.stat.id != file);
        }
    }

    // ------------------------------------------------------------------ files

    /// Counters of the MDS and every OSD.
    pub fn daemon_stats(&self) -> Result<Vec<DaemonStats>> {
        let mut out = Vec::new();
        match self.mds_call(MdsRequest::Stats)? {
            MdsResponse::Stats(s) => out.push(s),
            _ => return Err(self.bad("mds", "unexpected answer")),
        }
        let map = self.cluster_map()?;
        for osd in map.osds {
            match self.osd_call(
                osd.id,
                OsdRequest {
                    capability: vec![],
                    command: OsdCommand::Stats,
                },
            ) {
                Ok(OsdResponse::Stats(s)) => out.push(s),
                Ok(_) => return Err(self.bad("osd", "unexpected answer")),
                Err(e) => out.push(DaemonStats {
                    daemon: format!("osd {} (unreachable: {e})", osd.id),
                    counters: vec![],
                }),
            }
        }
        out.extend(self.kds_stats()?);
        Ok(out)
    }
}

/// Envelope keys by session id (one key derivation per session, not per request).
#[derive(Default)]
struct EnvelopeKeys(HashMap<[u8; 16], protection::EnvelopeKeys>);

impl EnvelopeKeys {
    /// Most keys kept (one per MDS or OSD session).
    const ENTRIES_MAX: usize = 1024;

    fn get(&mut self, session_id: &[u8; 16], secret: &[u8; 32]) -> protection::EnvelopeKeys {
        if let Some(k) = self.0.get(session_id) {
            return k.clone();
        }
        if self.0.len() >= Self::ENTRIES_MAX {
            self.0.clear();
        }
        let k = protection::EnvelopeKeys::new(secret);
        self.0.insert(*session_id, k.clone());
        k
    }
}

/// A T10 credential (SPEC T2): the capability and its key, opened from the session.
#[derive(Clone)]
pub(crate) struct T10Credential {
    pub(crate) capability: Vec<u8>,
    pub(crate) key: maat_crypto::Secret32,
}

/// Most T10 credentials a client keeps.
const T10_CREDENTIALS_MAX: usize = 4096;

impl Client {
    /// SPEC T2: opens each credential's key with this session's wrap key and keeps the
    /// credential as the newest for its (file, OSD).
    fn hold_t10(&self, file: u64, grants: Vec<maat_proto::msg::T10Grant>) -> Result<()> {
        if grants.is_empty() {
            return Ok(());
        }
        let (_, mac) = self.mds_session_key()?;
        let wrap = maat_proto::t10::capability_key_wrap(&mac);
        let mut opened = Vec::with_capacity(grants.len());
        for g in grants {
            let key = maat_proto::t10::open_capability_key(&wrap, &g.capability, &g.sealed_key)
                .map_err(|e| self.bad("mds", &e.to_string()))?;
            opened.push((
                (file, g.osd),
                T10Credential {
                    capability: g.capability,
                    key,
                },
            ));
        }
        let mut t10 = self.t10.lock();
        // The new grants replace every held one of the file: an OSD the MDS gave none
        // for now (its keys revoked and not yet replaced) must not get an old one.
        t10.retain(|(f, _), _| *f != file);
        if t10.len() + opened.len() > T10_CREDENTIALS_MAX {
            t10.clear();
        }
        t10.extend(opened);
        Ok(())
    }
}

/// Offset from the local clock reading `local_now` to a server clock that reads
/// `server_now` at that moment.
fn offset_to(server_now: u64, local_now: u64) -> i64 {
    let diff = i128::from(server_now) - i128::from(local_now);
    diff.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// A daemon that just restarted refuses requests dated within its first
/// `FUTURE_SKEW_MILLIS` (T7); a retry after that long succeeds with a fresh timestamp.
/// The clock offset measured at login or session setup lags the server by the answer's
/// one-way delay (large on a loaded machine), so a fresh timestamp can still fall inside
/// that first stretch: up to [`STALE_RETRIES`] retries, each after the same wait.
fn retry_stale<T>(clock: &LocalClock, mut call: impl FnMut() -> Result<T>) -> Result<T> {
    let mut retries = 0;
    loop {
        match call() {
            Err(ClientError::Refused(e))
                if retries < STALE_RETRIES
                    && matches!(e.code, ErrorCode::StaleRequest | ErrorCode::NotReady) =>
            {
                retries += 1;
                clock.sleep(wire::FUTURE_SKEW_MILLIS + 50);
            }
            other => return other,
        }
    }
}

/// How many times [`retry_stale`] sends a request again.
const STALE_RETRIES: u32 = 3;

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.save();
    }
}
