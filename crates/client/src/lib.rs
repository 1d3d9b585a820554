//! Maat's client library: what the CLI (and later FUSE and the Python SDK) build on.
//!
//! A [`Client`] logs in (SPEC M1: the passphrase is stretched locally with Argon2id and
//! never sent), keeps its ticket, client–MDS key and client–OSD session keys (M2) in a
//! home directory, MACs every request with a timestamp and nonce (T7) using a clock offset
//! learned from the servers, computes object placement from the cluster map (T8), stripes
//! large files, and caches opened capabilities (M5).

pub mod limits;

mod auth;
mod clock;
mod error;
mod machines;
pub use machines::RenewalOutcome;
mod rng;
pub(crate) use clock::LocalClock;
pub use clock::{local_now, ClockFn, SleepFn};
pub use error::ClientError;
mod copies;
mod copy_reads;
mod crypt;
mod crypt_files;
mod missed_copies;
pub use crypt::FILE_KEYS_CACHED_MAX;
pub use crypt_files::PENDING_STRIPES_MAX;
mod data;
mod envelope;
mod lanes;
pub use data::stripes_for;
mod files;
pub use files::{FileHandle, OpenFlags, FILE_IO_BYTES_MAX};
mod home;
mod instances;
mod jobs;
mod kds_keys;
mod key_grants;
mod mds;
mod namespace;
mod opens;
use mds::EnvelopeKeys;
pub(crate) use mds::{decode_answer, decode_answer_raw, offset_to, refusal, retry_stale};
pub(crate) use opens::T10Credential;
mod sessions;
pub use jobs::{JobHandle, JOB_REFRESH_AT_PERCENT_LEFT};
pub use maat_proto::placement;
mod rekey;
mod shared;
pub use rekey::RekeyReport;
pub use shared::IDLE_CONNECTIONS_PER_PEER_MAX;
pub(crate) use shared::{Locked, Pool};
mod renewal;
mod repair;
mod reserved;
mod scrub;
pub use scrub::{ScrubDepth, ScrubReport};
mod transfer;
mod trees;
mod whole;
pub use whole::{Restart, WHOLE_READ_ATTEMPTS_MAX};

pub use auth::{KDF_ITERATIONS_MAX, KDF_LANES_MAX, KDF_MEMORY_KIB_MAX};
use home::SessionState;
pub use home::{write_private_file, ClusterFile, Home};

use maat_crypto::mac::MacKey;
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::sign::{SigningKey, VerifyingKey};
use maat_crypto::{kdf, CryptoRngCore, OsRng, Secret32};
use maat_net::{Connection, Network};
use maat_proto::login;
use maat_proto::msg::{
    self, Access, ClusterMap, DaemonStats, ErrorCode, FileStat, InsecureRequest, KdfParams,
    MdsPlainRequest, MdsPlainResponse, MdsRequest, MdsResponse, ObjectId, OsdCommand,
    OsdPlainRequest, OsdPlainResponse, OsdRequest, OsdResponse, SetTime, StatMore, WireError,
    DATA_PARTITION, STRIPE_UNIT_BYTES,
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
use std::sync::Arc;

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
    Key(Secret32),
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
    /// Reads answered by another copy after the first could not serve (issue 41).
    #[serde(default)]
    pub copy_failovers: u64,
    /// Copies a change did not reach (issue 41).
    #[serde(default)]
    pub copies_failed: u64,
    /// Of those, copies recorded at the MDS as missed, the change acknowledged by the
    /// others (issue 41).
    #[serde(default)]
    pub copies_recorded_missed: u64,
    /// Requests sent again to another MDS instance after one did not answer (issue 42).
    #[serde(default)]
    pub mds_failovers: u64,
    /// Digests of bulk data made for ALLDATA envelopes of parallel batches: one per
    /// change, shared by the envelopes of its copies (issue 41).
    #[serde(default)]
    pub data_digests: u64,
    /// Copies a change was not sent to because the MDS reported their OSD down (issue
    /// 41): recorded as missed at once, not after the answer timeout. Counted in
    /// `copies_failed` too.
    #[serde(default)]
    pub copies_skipped_down: u64,
    /// OSDs the MDS reported down that this client had not seen hang, asked something
    /// small before a change was sent to them (issue 41).
    #[serde(default)]
    pub osds_probed: u64,
    /// Copies a change skipped on the MDS's report and then asked after all, because
    /// the MDS would not record them as missed (too few current copies would be left, or
    /// it could not be reached): the OSD may be back (issue 41).
    #[serde(default)]
    pub skipped_copies_asked_after_all: u64,
    /// Copies of a change whose OSD went silent while the change waited for it, given up
    /// on when the MDS, asked meanwhile, reported the OSD down (issue 41): recorded as
    /// missed before the answer timeout. Counted in `copies_failed` too.
    #[serde(default)]
    pub copies_given_up: u64,
    /// Copies of a removed file's objects that could not be removed (their OSD down or
    /// hung): the file's name is gone and its bytes stay there, unnamed (issue 41).
    #[serde(default)]
    pub removals_left: u64,
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
/// its own from a pool. Settings (`danger_insecure_as`, the key level) take `&mut self`:
/// they are made before the client is shared.
pub struct Client {
    cluster: ClusterFile,
    /// The MDS instances and which one this client asks now (issue 42).
    mds: instances::MdsInstances,
    home: Option<Home>,
    /// Where connections go (TCP unless a test wires an in-process network).
    network: Network,
    /// The local clock (the system's unless a simulation sets one).
    clock: LocalClock,
    /// Idle connections to the MDS, OSDs and KDS instances, by address (shared with the
    /// clients made by [`Client::for_another_user`]).
    connections: Arc<Pool>,
    /// The cluster map, once fetched (shared as the connections are).
    map: Arc<Locked<Option<ClusterMap>>>,
    /// Copies per object of each partition, by name, as the MDS said (issue 41; shared
    /// as the map is).
    copies: Arc<Locked<HashMap<String, u8>>>,
    /// OSDs that recently failed to answer, asked last by reads (issue 41; shared as the
    /// connections are).
    suspects: Arc<Locked<machines::Suspects>>,
    /// Where this client's reads of each object start among its copies
    /// (`machines::spread`): drawn once, so that clients spread over the copies while
    /// each reads one object from one copy (issue 41).
    spread: u64,
    /// When the MDS last said which OSDs are up (protocol ms).
    placement_at: Arc<Locked<Option<u64>>>,
    session: Locked<Option<SessionState>>,
    /// Read opens (SPEC M5); the newest go into the session file with it.
    opened: Locked<machines::OpenCache>,
    mds_key: VerifyingKey,
    insecure_user: Option<u64>,
    /// Envelope keys derived from session secrets, kept for the life of the client.
    envelope_keys: Locked<EnvelopeKeys>,
    /// SPEC T2: the newest T10 credential per (file, OSD), from opens in partitions with
    /// T10 credentials.
    t10: Locked<HashMap<(u64, u64), T10Credential>>,
    /// SPEC T7: what T10 requests to each OSD are dated by (`machines::T10Clock`).
    t10_clock: Locked<HashMap<u64, machines::T10Clock>>,
    /// Nonces come from a ChaCha20 generator seeded from the OS, not a syscall each.
    rng: Locked<rand_chacha::ChaCha20Rng>,
    /// Long-lived secrets come from the OS each time (`rng.rs`).
    key_rng: Locked<rng::KeyRng>,
    /// Merkle tree messages fetched from the MDS, by root (SPEC M4).
    trees: Locked<HashMap<[u8; 32], Vec<u8>>>,
    /// Capabilities in use and the renewal tokens that extend them, by id (SPEC M8).
    held: Locked<machines::HeldCapabilities>,
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
    /// Issue 41: at most this many bytes a second of copies written back by repairs
    /// (0: no limit), so that a repair leaves client I/O its share; and the protocol
    /// time before which the next repair write waits.
    repair_rate: std::sync::atomic::AtomicU64,
    repair_next: Locked<u64>,
    /// Counters.
    stats: Locked<ClientStats>,
    /// Held while logging in again, so that threads finding the session gone or near its
    /// end make one login between them (the one lock held across network calls).
    login_turn: Locked<()>,
    /// File ids reserved for puts, per directory, for plain or encrypted files, and per
    /// mode (the NOSEC user, or none for the session's) (`reserved`).
    reserved: Locked<HashMap<reserved::Key, reserved::Reserved>>,
}

// Many threads share one client: it must stay `Send + Sync` (a compile-time check).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Client>();
};

impl Client {
    /// A client for `cluster`, keeping identity and session in `home` (none: in memory).
    pub fn new(cluster: ClusterFile, home: Option<Home>) -> Result<Self> {
        let mds_key = VerifyingKey::from_bytes(&cluster.mds_verifying_key()?)
            .map_err(|e| ClientError::Config(format!("cluster file: the MDS key: {e}")))?;
        let mut session = match &home {
            Some(h) => h.load_session()?,
            None => None,
        };
        let mut opened = machines::OpenCache::new(limits::OPENED_CACHED_MAX);
        for entry in session
            .as_mut()
            .map(|s| std::mem::take(&mut s.opened))
            .unwrap_or_default()
        {
            opened.insert(entry);
        }
        let stats = session
            .as_ref()
            .map(|s| s.stats.clone())
            .unwrap_or_default();
        let mut rng = rand_chacha::ChaCha20Rng::from_rng(OsRng)
            .map_err(|e| ClientError::Internal(format!("seeding the random generator: {e}")))?;
        Ok(Self {
            network: Network::Tcp,
            clock: LocalClock::default(),
            mds: instances::MdsInstances::new(cluster.mds_addresses(), rng.next_u32()),
            cluster,
            home,
            connections: Arc::default(),
            map: Arc::default(),
            copies: Arc::default(),
            suspects: Arc::default(),
            spread: rng.next_u64(),
            placement_at: Arc::default(),
            session: Locked::new(session),
            opened: Locked::new(opened),
            mds_key,
            insecure_user: None,
            envelope_keys: Locked::default(),
            t10: Locked::default(),
            t10_clock: Locked::default(),
            rng: Locked::new(rng),
            key_rng: Locked::new(rng::KeyRng::Os),
            trees: Locked::default(),
            held: Locked::default(),
            jobs: Locked::default(),
            file_keys: Locked::default(),
            grant_key: Locked::default(),
            lockbox_keys: Locked::default(),
            key_level: 0,
            key_prefetch: 0,
            repair_rate: std::sync::atomic::AtomicU64::new(0),
            repair_next: Locked::default(),
            stats: Locked::new(stats),
            login_turn: Locked::default(),
            reserved: Locked::default(),
        })
    }

    /// This client with its connections on `network` (an in-process network runs a whole
    /// cluster in one process, for tests).
    pub fn with_network(mut self, network: Network) -> Self {
        self.connections = Arc::default();
        self.network = network;
        self
    }

    /// A client of the same cluster for another user, with a session, caches and
    /// counters of its own (`home`: where that user's identity and session live; none: in
    /// memory, log in with [`Client::login`]), sharing this client's connections and
    /// cluster map: a gateway serving many users holds one per user and as few
    /// connections as threads. Connections carry no user state (every request is sealed
    /// under its own user's session), so sharing them lets no user act as another.
    pub fn for_another_user(&self, home: Option<Home>) -> Result<Client> {
        let mut other = Client::new(self.cluster.clone(), home)?;
        other.network = self.network.clone();
        other.clock = self.clock.clone();
        other.connections = Arc::clone(&self.connections);
        other.map = Arc::clone(&self.map);
        other.copies = Arc::clone(&self.copies);
        other.suspects = Arc::clone(&self.suspects);
        other.placement_at = Arc::clone(&self.placement_at);
        other.key_level = self.key_level;
        other.key_prefetch = self.key_prefetch;
        // Drawn from this client's generators: a simulation stays repeatable.
        *other.rng.get_mut() = self.nonce_rng();
        *other.key_rng.get_mut() = self.key_rng();
        other.spread = other.rng.get_mut().next_u64();
        Ok(other)
    }

    /// This client on a simulation's `clock` (waits go through `sleep`, which moves it),
    /// its random generator seeded with `seed`, so that a whole-cluster test repeats
    /// exactly. Never for real data: the seed gives away every key this client makes.
    #[cfg(feature = "sim")]
    pub fn simulated(mut self, clock: ClockFn, sleep: SleepFn, seed: u64) -> Self {
        self.clock = LocalClock::simulated(clock, sleep);
        *self.rng.get_mut() = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        // The MDS instance to start at, from the seed too (not drawn from the generator,
        // whose stream stays what it was before there were instances).
        self.mds = instances::MdsInstances::new(
            self.cluster.mds_addresses(),
            (seed ^ (seed >> 32)) as u32,
        );
        // So is where its reads start among copies.
        self.spread = seed ^ 0x7370_7265_6164; // "spread"
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
        self.call_at_within(address, frame_type, payload, maat_net::IO_TIMEOUT)
    }

    /// [`Client::call_at`], waiting at most `patience` for the answer.
    pub(crate) fn call_at_within(
        &self,
        address: &str,
        frame_type: FrameType,
        payload: &[u8],
        patience: std::time::Duration,
    ) -> Result<(FrameType, Vec<u8>)> {
        self.call_at_watched(address, frame_type, payload, patience, None)
    }

    /// [`Client::call_at_within`], asking `watch` whether to go on while the peer is
    /// silent ([`maat_net::Connection::call_parts_watched`]).
    pub(crate) fn call_at_watched(
        &self,
        address: &str,
        frame_type: FrameType,
        payload: &[u8],
        patience: std::time::Duration,
        watch: Option<&maat_net::Watch<'_>>,
    ) -> Result<(FrameType, Vec<u8>)> {
        self.connections
            .call(&self.network, address, frame_type, payload, patience, watch)
            .map_err(|source| ClientError::Net {
                address: address.to_string(),
                source,
            })
    }

    /// A fresh random name for a connection's nonce stream (SPEC T7).
    pub(crate) fn stream_name(&self) -> [u8; maat_proto::replay::STREAM_BYTES] {
        stream_name(&mut *self.rng.lock())
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

    #[doc(hidden)]
    /// Switches to NOSEC mode acting as `user` (benchmarks; daemons must allow it).
    pub fn danger_insecure_as(&mut self, user: u64) {
        self.insecure_user = Some(user);
        // Opens kept so far were made as someone else. (Reservations are kept per mode.)
        self.opened.get_mut().clear();
    }

    #[doc(hidden)]
    /// Leaves NOSEC mode.
    pub fn secure(&mut self) {
        self.insecure_user = None;
        self.opened.get_mut().clear();
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
        let session = SessionState {
            opened: self.opened.lock().newest(limits::OPENED_SAVED_MAX),
            ..session
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
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.save();
    }
}

/// A random name for a connection's nonce stream (SPEC T7, `maat_proto::replay`): two
/// connections of one session must never share one.
pub(crate) fn stream_name(rng: &mut impl RngCore) -> [u8; maat_proto::replay::STREAM_BYTES] {
    let mut name = [0u8; maat_proto::replay::STREAM_BYTES];
    rng.fill_bytes(&mut name);
    name
}
