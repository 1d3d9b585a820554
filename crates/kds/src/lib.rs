//! Maat's key distribution server logic (SPEC H4, H5), without I/O and without durable
//! state: a KDS restarted with nothing but its keys serves again at once.
//!
//! One grant for access and decryption: a client presents its MDS-signed login ticket,
//! and for each file the capability the MDS gave it at open and the file's lockbox. The
//! KDS checks, with nothing but the MDS's public key and its own keys, that
//!
//! 1. the ticket is the MDS's and current (it names the user and the X25519 key the keys
//!    are sealed to, so only the ticket's holder can open the answer);
//! 2. the capability is the MDS's and current, grants reading, and names the ticket's
//!    user (explicitly or in a Merkle set the client supplies, SPEC M4);
//! 3. the lockbox opens with the KDS's key and names a file the capability names (the
//!    file id is the lockbox's sealed additional data, so a box cannot be moved);
//! 4. every node asked for lies inside the tree, and, when the capability carries the
//!    range-keys mode bit (SPEC H6), inside the ranges of the MDS-signed key-range permit
//!    sent with it, which must name that capability, the ticket's user and the file, and
//!    a key tree no older than the lockbox's (SPEC H7: a rekey shuts out earlier permits);
//! 5. no revocation notice in force names the capability or the ticket's user (SPEC M9,
//!    `revocations.rs`);
//!
//! A capability a job's lead opened for the job (SPEC M10) names the job's computation
//! key instead of users: it gets keys only with `KeysForJob`, whose MDS-signed lifetime
//! token names that key and is current and not revoked, and whose proof is the key's
//! signature over the ticket, so that only a holder of the job's private key is served.
//!
//! and answers with a [`RangeGrant`]: the node keys sealed under the key this KDS shares
//! with the ticket's login (`KeysKeyed`: a [`GrantKey`], one X25519 agreement per login),
//! or sealed to the ticket's key and signed by the KDS (`Keys`, for older clients).
//! A keyed lockbox (PROTOCOL.md 0x14) opens under a key derived once per owner key (one
//! X25519 agreement), a sealed one (0x0f) with an agreement per box.
//! Verified tickets, capabilities, trees, opened lockboxes, grant keys and owners'
//! lockbox keys are cached (bounded), so repeated keyed requests cost no public-key
//! operation at all, and a first request for a file only the capability's verification.

pub mod limits;

use maat_crypto::hash::{self, Digest};
use maat_crypto::kht::{Node, RangeKey};
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::sign::{Signature, SigningKey, VerifyingKey, SIGNATURE_BYTES};
use maat_crypto::{kdf, Counters, CryptoRngCore, OpCounters};
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::delegation::{kds_proof_message, KeyLifetimeToken};
use maat_proto::horus::{GrantKey, KdsLockboxKey, Lockbox, OpenedLockbox, RangeGrant};
use maat_proto::key_ranges::KeyRanges;
use maat_proto::limits::RANGE_GRANT_NODES_MAX;
use maat_proto::merkle_msg::{MemberSet, MerkleTreeMessage, SetKind};
use maat_proto::msg::{
    self, DaemonStats, ErrorCode, FileKeysRequest, KdsKeys, KdsRequest, KdsResponse, WireError,
    KDS_FILES_PER_REQUEST_MAX,
};
use maat_proto::revocation::RevokedTable;
use maat_proto::signed::{self, SignedBody, Timed, Unverified};
use maat_proto::ticket::LoginTicket;
use maat_proto::{FileId, UnixMillis};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub use crate::limits::REVOCATIONS_STALE_MILLIS;

pub use crate::limits::KDS_CACHE_ENTRIES_MAX;

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KdsError {
    /// A key could not be made from the configured secret.
    #[error("KDS key: {0}")]
    Key(#[from] maat_crypto::CryptoError),
    /// The revocations in force could not be taken.
    #[error("revocations: {0}")]
    Revocations(WireError),
}

/// The KDS's secrets, shared by every instance of a cluster.
pub struct KdsSecrets {
    sealing: SealingSecretKey,
    signing: SigningKey,
}

impl KdsSecrets {
    /// Both key pairs from one 32-byte secret (HKDF-SHA256 with a label per key).
    pub fn from_seed(seed: &[u8; 32]) -> Result<Self, KdsError> {
        let sealing = kdf::hkdf_sha256(b"maat/kds/v1", seed, &[b"sealing"])?;
        let signing = kdf::hkdf_sha256(b"maat/kds/v1", seed, &[b"signing"])?;
        Ok(Self {
            sealing: SealingSecretKey::from_bytes(*sealing.expose()),
            signing: SigningKey::from_seed(signing.expose()),
        })
    }

    /// The public keys clients learn from the cluster map.
    pub fn public_keys(&self) -> KdsKeys {
        KdsKeys {
            sealing_key: self.sealing.public_key().0,
            verifying_key: self.signing.verifying_key().to_bytes(),
        }
    }
}

#[derive(Default)]
struct Caches {
    tickets: HashMap<Digest, LoginTicket>,
    capabilities: HashMap<Digest, Capability>,
    permits: HashMap<Digest, KeyRanges>,
    trees: HashMap<Digest, MemberSet>,
    lockboxes: HashMap<Digest, OpenedLockbox>,
    /// Keys shared with logins for keyed grants, by the ticket's sealing key.
    grant_keys: HashMap<[u8; 32], (GrantKey, UnixMillis)>,
    /// Keys of owners' keyed lockboxes, by the owner's sealing key.
    lockbox_keys: HashMap<[u8; 32], KdsLockboxKey>,
    /// SPEC M10: verified job key lifetime tokens.
    lifetimes: HashMap<Digest, KeyLifetimeToken>,
    /// SPEC M10: job proofs verified (digest of proof, ticket and key) → the lifetime's
    /// expiry.
    job_proofs: HashMap<Digest, UnixMillis>,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    refusals: AtomicU64,
    refused_by_reason: msg::RefusalCounts,
    grants: AtomicU64,
    keys_granted: AtomicU64,
    ticket_cache_hits: AtomicU64,
    capability_cache_hits: AtomicU64,
    permit_cache_hits: AtomicU64,
    lockbox_cache_hits: AtomicU64,
    grant_key_hits: AtomicU64,
    lockbox_key_hits: AtomicU64,
    revocations_applied: AtomicU64,
    revocation_checks: AtomicU64,
    lifetime_cache_hits: AtomicU64,
    job_proofs_verified: AtomicU64,
}

/// How the grants of one request are sealed.
enum GrantSeal {
    /// To the ticket's key, and signed.
    Signed,
    /// Under the key shared with the login.
    Keyed(GrantKey),
}

/// A key distribution server.
pub struct Kds {
    sealing: SealingSecretKey,
    signing: SigningKey,
    mds_key: VerifyingKey,
    /// The same keys, counting into `background`: they sign and check the revocation
    /// catch-up with the MDS (once a second, also counted as `revocation_checks`), which
    /// no key request causes; `maat stats` reports that work inside the signature
    /// counters and on its own as `signatures_made_background` and
    /// `signatures_verified_background`.
    background_signing: SigningKey,
    background_mds_key: VerifyingKey,
    background: Counters,
    counters: Counters,
    caches: Mutex<Caches>,
    stats: Stats,
    /// SPEC M9: the notices in force, learned from the MDS.
    revoked: RevokedTable,
    /// Whether keys wait for current revocations (not for a KDS told to serve without).
    revocations_checked: std::sync::atomic::AtomicBool,
}

fn refuse(code: ErrorCode, detail: impl Into<String>) -> WireError {
    WireError::new(code, detail)
}

fn bounded<V>(map: &mut HashMap<Digest, V>, expired: impl Fn(&V) -> bool) {
    if map.len() >= KDS_CACHE_ENTRIES_MAX {
        map.retain(|_, v| !expired(v));
        if map.len() >= KDS_CACHE_ENTRIES_MAX {
            map.clear();
        }
    }
}

impl Kds {
    /// A KDS with `secrets` that trusts tokens signed by `mds_verifying_key`.
    pub fn new(secrets: KdsSecrets, mds_verifying_key: &[u8; 32]) -> Result<Self, KdsError> {
        let counters = OpCounters::new_handle();
        let background = OpCounters::new_handle();
        Ok(Self {
            sealing: secrets.sealing.with_counters(counters.clone()),
            background_signing: secrets.signing.clone().with_counters(background.clone()),
            background_mds_key: VerifyingKey::from_bytes(mds_verifying_key)?
                .with_counters(background.clone()),
            background,
            signing: secrets.signing.with_counters(counters.clone()),
            mds_key: VerifyingKey::from_bytes(mds_verifying_key)?.with_counters(counters.clone()),
            counters,
            caches: Mutex::new(Caches::default()),
            stats: Stats::default(),
            revoked: RevokedTable::default(),
            revocations_checked: std::sync::atomic::AtomicBool::new(true),
        })
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, Caches> {
        self.caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Handles one request frame's payload; the answer is
    /// `postcard(Result<KdsResponse, WireError>)`.
    pub fn handle(&self, payload: &[u8], now: UnixMillis, rng: &mut impl CryptoRngCore) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result = match msg::decode::<KdsRequest>(payload) {
            Err(e) => Err(refuse(ErrorCode::Malformed, format!("KDS request: {e}"))),
            Ok(KdsRequest::Stats) => Ok(KdsResponse::Stats(self.stats())),
            Ok(KdsRequest::Keys { ticket, files }) => self
                .keys(&ticket, &files, false, now, rng)
                .map(KdsResponse::Grants),
            Ok(KdsRequest::KeysKeyed { ticket, files }) => self
                .keys(&ticket, &files, true, now, rng)
                .map(KdsResponse::Grants),
            Ok(KdsRequest::KeysForJob {
                ticket,
                files,
                lifetime,
                proof,
            }) => self
                .keys_for_job(&ticket, &files, (&lifetime, &proof), now, rng)
                .map(KdsResponse::Grants),
            Ok(KdsRequest::Revoke(notice)) => self
                .apply_revocation(&notice, now)
                .map(|()| KdsResponse::Applied),
        };
        if let Err(e) = &result {
            self.refused(e);
        }
        msg::encode_result(&result)
    }

    fn refused(&self, e: &WireError) {
        self.stats.refusals.fetch_add(1, Ordering::Relaxed);
        self.stats.refused_by_reason.add(e.code);
    }

    /// Range-key grants for `files`, sealed to `ticket`'s key and signed, or (`keyed`)
    /// sealed under the key this KDS shares with that login: one answer per file (a
    /// refusal of one file does not refuse the others); the whole request is refused
    /// when the ticket does not verify.
    pub fn keys(
        &self,
        ticket: &[u8],
        files: &[FileKeysRequest],
        keyed: bool,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<Result<Vec<u8>, WireError>>, WireError> {
        self.keys_under(ticket, files, keyed, None, now, rng)
    }

    /// SPEC M10 with H4: [`Kds::keys`] (keyed) for files a job opened, whose capabilities
    /// name the job's computation key instead of users. `lifetime` must be the MDS's
    /// current lifetime token for that key and `proof` the key's signature over
    /// `delegation::kds_proof_message(ticket)`: only a holder of the job's private key
    /// gets keys, sealed to its own login as any grant.
    pub fn keys_for_job(
        &self,
        ticket: &[u8],
        files: &[FileKeysRequest],
        (lifetime, proof): (&[u8], &[u8]),
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<Result<Vec<u8>, WireError>>, WireError> {
        let lifetime: KeyLifetimeToken = self
            .verified(
                lifetime,
                now,
                |c| &mut c.lifetimes,
                &self.stats.lifetime_cache_hits,
            )
            .map_err(|e| match e.code {
                ErrorCode::SessionExpired => refuse(
                    ErrorCode::CapabilityExpired,
                    "the job key's lifetime ended (only the job's lead renews it)",
                ),
                _ => e,
            })?;
        let proof_len = (proof.len() as u64).to_be_bytes();
        let digest = hash::blake3(&[&lifetime.computation_key, &proof_len, proof, ticket]);
        let known = self
            .caches()
            .job_proofs
            .get(&digest)
            .is_some_and(|expiry| *expiry > now);
        if !known {
            let signature: [u8; SIGNATURE_BYTES] = proof.try_into().map_err(|_| {
                refuse(ErrorCode::Malformed, "a job proof is one Ed25519 signature")
            })?;
            VerifyingKey::from_bytes(&lifetime.computation_key)
                .map_err(|_| refuse(ErrorCode::Malformed, "the lifetime token's key"))?
                .with_counters(self.counters.clone())
                .verify(&kds_proof_message(ticket), &Signature(signature))
                .map_err(|_| {
                    refuse(
                        ErrorCode::BadSignature,
                        "the job proof was not signed with the job's key for this login",
                    )
                })?;
            self.stats
                .job_proofs_verified
                .fetch_add(1, Ordering::Relaxed);
            let mut caches = self.caches();
            bounded(&mut caches.job_proofs, |expiry| *expiry <= now);
            caches.job_proofs.insert(digest, lifetime.expiry);
        }
        self.keys_under(ticket, files, true, Some(lifetime.key_hash()), now, rng)
    }

    /// [`Kds::keys`], where capabilities may name the job key `job` (proven by the
    /// caller).
    fn keys_under(
        &self,
        ticket: &[u8],
        files: &[FileKeysRequest],
        keyed: bool,
        job: Option<Digest>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<Result<Vec<u8>, WireError>>, WireError> {
        if files.is_empty() || files.len() > KDS_FILES_PER_REQUEST_MAX {
            return Err(refuse(
                ErrorCode::TooLarge,
                format!("a key request names 1 to {KDS_FILES_PER_REQUEST_MAX} files"),
            ));
        }
        self.revocations_current(now)?;
        let ticket = self.ticket(ticket, now)?;
        let seal = if keyed {
            GrantSeal::Keyed(self.grant_key(&ticket, now)?)
        } else {
            GrantSeal::Signed
        };
        Ok(files
            .iter()
            .map(|f| {
                let r = self.file_keys(&ticket, f, &seal, job.as_ref(), now, rng);
                if let Err(e) = &r {
                    self.refused(e);
                }
                r
            })
            .collect())
    }

    /// A signed, timed MDS token from its bytes: from `cache` when the same bytes were
    /// verified before (the signature was checked; the window is checked now), else
    /// verified now and cached.
    fn verified<T: SignedBody + Timed + Clone>(
        &self,
        bytes: &[u8],
        now: UnixMillis,
        cache: fn(&mut Caches) -> &mut HashMap<Digest, T>,
        hits: &AtomicU64,
    ) -> Result<T, WireError> {
        let digest = hash::blake3(&[bytes]);
        if let Some(hit) = cache(&mut self.caches()).get(&digest).cloned() {
            signed::check_validity(&hit, now)?;
            hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let body = Unverified::<T>::decode(bytes)?
            .verify(&self.mds_key, now)?
            .body()
            .clone();
        let mut caches = self.caches();
        let map = cache(&mut caches);
        bounded(map, |t| t.expiry() <= now);
        map.insert(digest, body.clone());
        Ok(body)
    }

    fn ticket(&self, bytes: &[u8], now: UnixMillis) -> Result<LoginTicket, WireError> {
        self.verified(
            bytes,
            now,
            |c| &mut c.tickets,
            &self.stats.ticket_cache_hits,
        )
    }

    fn capability(&self, bytes: &[u8], now: UnixMillis) -> Result<Capability, WireError> {
        self.verified(
            bytes,
            now,
            |c| &mut c.capabilities,
            &self.stats.capability_cache_hits,
        )
    }

    fn permit(&self, bytes: &[u8], now: UnixMillis) -> Result<KeyRanges, WireError> {
        self.verified(
            bytes,
            now,
            |c| &mut c.permits,
            &self.stats.permit_cache_hits,
        )
    }

    /// SPEC H6: under a capability with the range-keys bit, the permit sent with it,
    /// checked against the capability, the ticket's user and the lockbox's file.
    fn ranges_of(
        &self,
        capability: &Capability,
        user: maat_proto::UserId,
        file: FileId,
        permit: Option<&[u8]>,
        now: UnixMillis,
    ) -> Result<Option<KeyRanges>, WireError> {
        if !capability.mode.allows(Mode::RANGE_KEYS) {
            return Ok(None);
        }
        let bytes = permit.ok_or_else(|| {
            refuse(
                ErrorCode::PermissionDenied,
                "the capability grants keys only for ranges: send the key-range permit from the same open",
            )
        })?;
        let permit = self.permit(bytes, now)?;
        if permit.capability != capability.id {
            return Err(refuse(
                ErrorCode::PermissionDenied,
                "the key-range permit names another capability",
            ));
        }
        if permit.user != user {
            return Err(refuse(
                ErrorCode::WrongUser,
                "the key-range permit names another user",
            ));
        }
        if permit.file != file {
            return Err(refuse(
                ErrorCode::WrongFile,
                "the key-range permit names another file",
            ));
        }
        Ok(Some(permit))
    }

    /// The verified member set of `root` from the trees the client supplied.
    fn tree(
        &self,
        kind: SetKind,
        root: &Digest,
        supplied: &[Vec<u8>],
    ) -> Result<MemberSet, WireError> {
        if let Some(hit) = self.caches().trees.get(root).cloned() {
            if hit.kind() == kind {
                return Ok(hit);
            }
        }
        for bytes in supplied {
            let Ok(message) = MerkleTreeMessage::decode(bytes) else {
                continue;
            };
            if message.kind() != kind {
                continue;
            }
            if let Ok(set) = message.verify(kind, root) {
                let mut caches = self.caches();
                bounded(&mut caches.trees, |_| true);
                caches.trees.insert(*root, set.clone());
                return Ok(set);
            }
        }
        Err(refuse(
            ErrorCode::UnknownTree,
            "the capability names a Merkle set: send its tree (GetTree at the MDS) with the request",
        ))
    }

    fn lockbox(&self, bytes: &[u8]) -> Result<OpenedLockbox, WireError> {
        let digest = hash::blake3(&[bytes]);
        if let Some(hit) = self.caches().lockboxes.get(&digest).cloned() {
            self.stats
                .lockbox_cache_hits
                .fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let lockbox = Lockbox::decode(bytes)?;
        let opened = match lockbox.owner_key() {
            None => lockbox.open_as_kds(&self.sealing)?,
            Some(owner) => lockbox.open_keyed_as_kds(&self.lockbox_key(owner)?)?,
        };
        let mut caches = self.caches();
        bounded(&mut caches.lockboxes, |_| true);
        caches.lockboxes.insert(digest, opened.clone());
        Ok(opened)
    }

    /// The key of the KDS boxes of keyed lockboxes whose owner key is `owner` (one X25519
    /// agreement per owner, then from the cache).
    fn lockbox_key(&self, owner: &SealingPublicKey) -> Result<KdsLockboxKey, WireError> {
        if let Some(key) = self.caches().lockbox_keys.get(&owner.0) {
            self.stats.lockbox_key_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(key.clone());
        }
        let key = KdsLockboxKey::new(&self.sealing, owner)
            .map_err(|e| {
                refuse(
                    ErrorCode::InvalidArgument,
                    format!("the lockbox's owner key: {e}"),
                )
            })?
            .with_counters(self.counters.clone());
        let mut caches = self.caches();
        bounded(&mut caches.lockbox_keys, |_| true);
        caches.lockbox_keys.insert(owner.0, key.clone());
        Ok(key)
    }

    /// The key this KDS shares with `ticket`'s login (one X25519 agreement per login,
    /// then from the cache until the ticket expires).
    fn grant_key(&self, ticket: &LoginTicket, now: UnixMillis) -> Result<GrantKey, WireError> {
        let client = ticket.client_sealing_key.0;
        if let Some((key, _)) = self.caches().grant_keys.get(&client) {
            self.stats.grant_key_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(key.clone());
        }
        let key = GrantKey::for_kds(&self.sealing, &ticket.client_sealing_key)
            .map_err(|e| refuse(ErrorCode::InvalidArgument, format!("the ticket's key: {e}")))?
            .with_counters(self.counters.clone());
        let mut caches = self.caches();
        bounded(&mut caches.grant_keys, |(_, expiry)| *expiry <= now);
        caches
            .grant_keys
            .insert(client, (key.clone(), ticket.expiry));
        Ok(key)
    }

    fn file_keys(
        &self,
        ticket: &LoginTicket,
        request: &FileKeysRequest,
        seal: &GrantSeal,
        job: Option<&Digest>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, WireError> {
        if request.nodes.is_empty() || request.nodes.len() > RANGE_GRANT_NODES_MAX {
            return Err(refuse(
                ErrorCode::TooLarge,
                format!("a grant holds 1 to {RANGE_GRANT_NODES_MAX} nodes"),
            ));
        }
        let capability = self.capability(&request.capability, now)?;
        // SPEC M9: a revoked capability, user or job key gets no key, whatever its expiry
        // says.
        self.revoked.check(capability.id, ticket.user, job, now)?;
        // Keys decrypt what the holder reads: a write-only capability (a write-only
        // open, or the one the MDS signs for a remover) gets none, so that a user granted
        // some ranges cannot get the rest with a capability of another kind.
        if !capability.mode.allows(Mode::READ) {
            return Err(refuse(
                ErrorCode::PermissionDenied,
                "keys are granted only under a read capability",
            ));
        }
        match &capability.users {
            // SPEC M10: the job's key was proven by the caller (`keys_for_job`).
            Principals::ComputationKey(hash) if job == Some(hash) => {}
            Principals::ComputationKey(_) => {
                return Err(refuse(
                    ErrorCode::WrongUser,
                    match job {
                        None => {
                            "a capability delegated to a job key needs the job's proof (KeysForJob)"
                        }
                        Some(_) => "the capability is delegated to another job's key",
                    },
                ))
            }
            users => {
                let members = match users {
                    Principals::UserTree(root) => {
                        Some(self.tree(SetKind::Users, root, &request.trees)?)
                    }
                    _ => None,
                };
                capability
                    .check_user(ticket.user, members.as_ref())
                    .map_err(|e| refuse(ErrorCode::WrongUser, e.to_string()))?;
            }
        }
        // The lockbox opens first only when the capability could name its file: a box
        // of another file costs no X25519 operation.
        let sealed = Lockbox::decode(&request.lockbox)?;
        let files = match &capability.files {
            Files::FileTree(root) => Some(self.tree(SetKind::Files, root, &request.trees)?),
            // Ids reserved to the capability's one user: a lockbox of one of them is of a
            // file that user linked (nobody else can), as good as a capability for it.
            Files::File(_) | Files::Range { .. } => None,
        };
        capability
            .check_file(sealed.file, files.as_ref())
            .map_err(|e| refuse(ErrorCode::WrongFile, e.to_string()))?;
        let permit = self.ranges_of(
            &capability,
            ticket.user,
            sealed.file,
            request.key_ranges.as_deref(),
            now,
        )?;
        if let Some(newest) = permit.as_ref().and_then(|p| p.tree_version) {
            if sealed.tree_version > newest {
                return Err(refuse(
                    ErrorCode::PermissionDenied,
                    format!(
                        "the key-range permit was issued under key tree {newest}; this lockbox \
                         is of tree {}: open the file again",
                        sealed.tree_version
                    ),
                ));
            }
        }
        let opened = self.lockbox(&request.lockbox)?;
        debug_assert_eq!(opened.file, sealed.file);
        let shape = &opened.shape;
        let keys = request
            .nodes
            .iter()
            .map(|&(level, index)| {
                let node = Node { level, index };
                if let Some(permit) = &permit {
                    if !permit.allows(shape, node) {
                        return Err(refuse(
                            ErrorCode::PermissionDenied,
                            format!(
                                "node {level}/{index} ({}) lies outside the ranges granted",
                                shape.bytes_under(node).map_or_else(
                                    |e| e.to_string(),
                                    |(a, b)| format!("bytes {a}..{b}")
                                )
                            ),
                        ));
                    }
                }
                shape
                    .node_key_from_root(&opened.root_key, node)
                    .map(|key| RangeKey { node, key })
                    .map_err(|e| {
                        refuse(
                            ErrorCode::InvalidArgument,
                            format!("node {level}/{index}: {e}"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Keys under a permit are held no longer than the permit lasts (a job's handle
        // outlives the permits its participants get, one capability lifetime each).
        let expiry = permit
            .as_ref()
            .map_or(capability.expiry, |p| p.expiry.min(capability.expiry));
        let grant = match seal {
            GrantSeal::Signed => RangeGrant::issue(
                &opened,
                expiry,
                &keys,
                &ticket.client_sealing_key,
                &self.signing,
                rng,
            )?,
            GrantSeal::Keyed(key) => RangeGrant::issue_keyed(&opened, expiry, &keys, key, rng)?,
        };
        self.stats.grants.fetch_add(1, Ordering::Relaxed);
        self.stats
            .keys_granted
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        Ok(grant.encode())
    }

    /// The file a lockbox names, read without opening it (for the daemon's log).
    pub fn lockbox_file(bytes: &[u8]) -> Option<FileId> {
        Lockbox::decode(bytes).ok().map(|l| l.file)
    }

    /// Counters for `maat stats` and metrics.
    pub fn stats(&self) -> DaemonStats {
        let s = &self.stats;
        let mut counters = DaemonStats::load(&[
            ("requests", &s.requests),
            ("refusals", &s.refusals),
            ("grants", &s.grants),
            ("keys_granted", &s.keys_granted),
            ("ticket_cache_hits", &s.ticket_cache_hits),
            ("capability_cache_hits", &s.capability_cache_hits),
            ("permit_cache_hits", &s.permit_cache_hits),
            ("lockbox_cache_hits", &s.lockbox_cache_hits),
            ("grant_key_cache_hits", &s.grant_key_hits),
            ("lockbox_key_cache_hits", &s.lockbox_key_hits),
            ("revocations_applied", &s.revocations_applied),
            ("revocation_checks", &s.revocation_checks),
            ("lifetime_cache_hits", &s.lifetime_cache_hits),
            ("job_proofs_verified", &s.job_proofs_verified),
        ]);
        counters.push(("revoked_entries".into(), self.revoked.entries() as u64));
        counters.extend(DaemonStats::operations_with_background(
            &self.counters,
            &self.background,
        ));
        counters.extend(s.refused_by_reason.counters());
        DaemonStats {
            daemon: "kds".into(),
            counters,
        }
    }
}

#[allow(clippy::panic)]
pub mod fuzzing;
mod revocations;
pub use revocations::RevocationsAsk;
