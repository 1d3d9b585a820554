//! SPEC M3, M4, M5, M6: issuing capabilities over sets of users and files, caching them,
//! and serving the Merkle trees their roots stand for.
//!
//! The invariant (M6): a capability never names a (user, file, mode) that the MDS's
//! access-control state does not allow when it is issued. How it holds:
//!
//! * every change to access-control state (chmod, chown, user and group membership
//!   changes) commits under the write side of `acl_gate` and bumps `acl_version`;
//! * an issue holds the read side from the moment it reads the state (the users and
//!   groups snapshot, the file's permissions) until the capability is cached, so the
//!   state it decided on is the state at signing;
//! * a cached capability is found by the sets computed *now* (its key is the users'
//!   root or id and the files' root or id), so a set that changed finds nothing; the
//!   per-member entries of gathered batches carry the version they were made at.
//!
//! Gathered batches (temporal and on-the-fly groups) are the one place MDS logic waits:
//! a batch's first request may wait the gather window (temporal batching only) and for
//! the signature in progress for the same file, bounded by [`BATCH_WAIT_MILLIS_MAX`].

use crate::grouping::{
    self, AclSnapshot, FileSel, Grant, GroupingConfig, Perm, Strategies, UserSel,
};
use crate::{lock, MdsError, MetaStore, Principal, Result, ADMIN_UID, CLOCK_SKEW_MILLIS};
use maat_crypto::hash::{self, Digest};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::merkle_msg::{compose_roots, subtree, MerkleTreeMessage, SetKind};
use maat_proto::msg::{ErrorCode, MdsResponse};
use maat_proto::protection::Protection;
use maat_proto::signed;
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

/// Most capabilities the MDS keeps cached (SPEC M5).
pub const CAPABILITY_CACHE_ENTRIES_MAX: usize = 65_536;
/// Most computed grants kept (per requester, file, mode and access-control version).
pub const GRANT_CACHE_ENTRIES_MAX: usize = 65_536;
/// Most Merkle trees the MDS keeps for `GetTree` (oldest dropped first).
pub const TREE_CACHE_ENTRIES_MAX: usize = 16_384;
/// Most members over all kept trees.
pub const TREE_CACHE_MEMBERS_MAX: usize = 4 << 20;
/// Most subtree roots remembered for composition.
pub const SUBTREE_ROOTS_MAX: usize = 16_384;
/// Longest a request waits for a gathered batch before asking alone.
pub const BATCH_WAIT_MILLIS_MAX: u64 = 2_000;
/// A gathering batch closes once it has not grown for this long (or at the gather window).
pub const BATCH_QUIET_MICROS: u64 = 300;
/// Most files whose recent opens are tracked for temporal batching.
pub const BATCH_TRACKED_FILES_MAX: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum UserKey {
    One(u64),
    Root(Digest),
    /// A member of a gathered batch, valid at one access-control version only.
    Member(u64, u64),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileKey {
    One(u64),
    Root(Digest),
}

type CapKey = (UserKey, FileKey, u8);

struct TreeEntry {
    message: Vec<u8>,
    /// Who may fetch it: the users of the capability it was made for (ascending).
    readers: Vec<u64>,
    members: usize,
}

#[derive(Clone)]
struct CachedCapability {
    encoded: Vec<u8>,
    expiry: UnixMillis,
    by: Strategies,
    trees: Vec<(Digest, Arc<TreeEntry>)>,
}

#[derive(Default)]
struct TreeCache {
    trees: HashMap<Digest, Arc<TreeEntry>>,
    order: VecDeque<Digest>,
    members: usize,
}

impl TreeCache {
    /// Keeps a tree for `GetTree`. One root can stand in several capabilities for
    /// different users (the same directory's file set named for two groups of users):
    /// whoever any of them names may fetch it, so the readers are merged.
    fn insert(&mut self, root: Digest, entry: Arc<TreeEntry>) {
        if let Some(held) = self.trees.get_mut(&root) {
            if entry
                .readers
                .iter()
                .all(|r| held.readers.binary_search(r).is_ok())
            {
                return;
            }
            let mut readers = held.readers.clone();
            readers.extend(entry.readers.iter().copied());
            readers.sort_unstable();
            readers.dedup();
            self.members += readers.len().saturating_sub(held.readers.len());
            *held = Arc::new(TreeEntry {
                message: held.message.clone(),
                members: readers.len(),
                readers,
            });
        } else {
            self.members += entry.members;
            self.trees.insert(root, entry);
            self.order.push_back(root);
        }
        while self.trees.len() > TREE_CACHE_ENTRIES_MAX || self.members > TREE_CACHE_MEMBERS_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.trees.remove(&old) {
                self.members = self.members.saturating_sub(e.members);
            }
        }
    }
}

#[derive(Default)]
struct BatchState {
    members: BTreeSet<u64>,
    /// The capability and who it names, once signed (`None` inside: it failed).
    outcome: Option<Option<(Vec<u8>, Vec<u64>)>>,
}

#[derive(Default)]
struct GatherBatch {
    state: Mutex<BatchState>,
    done: Condvar,
}

type BatchKey = (u64, u8);

#[derive(Default)]
struct Batches {
    open: HashMap<BatchKey, Arc<GatherBatch>>,
    signing: HashSet<BatchKey>,
    /// Recent open times per file (temporal batching's detector) and until when a file
    /// stays batched.
    recent: HashMap<u64, (VecDeque<u64>, u64)>,
}

impl Batches {
    /// Records an open of `file`; true when the file is (now) batched.
    fn observe(&mut self, file: u64, now: UnixMillis, cfg: &GroupingConfig) -> bool {
        if self.recent.len() >= BATCH_TRACKED_FILES_MAX && !self.recent.contains_key(&file) {
            self.recent.retain(|_, (_, hot)| *hot > now.0);
        }
        let (times, hot_until) = self.recent.entry(file).or_default();
        times.push_back(now.0);
        while times
            .front()
            .is_some_and(|t| now.0.saturating_sub(*t) > cfg.batch_detect_millis)
        {
            times.pop_front();
        }
        while times.len() > cfg.batch_threshold.max(1) as usize {
            times.pop_front();
        }
        if times.len() >= cfg.batch_threshold.max(1) as usize {
            *hot_until = now.0.saturating_add(cfg.batch_hot_millis);
        }
        *hot_until > now.0
    }

    fn is_hot(&self, file: u64, now: UnixMillis) -> bool {
        self.recent.get(&file).is_some_and(|(_, hot)| *hot > now.0)
    }
}

/// Per-strategy counters (`maat stats`): capabilities issued, the (user, file) pairs
/// they authorize, and cache hits on them.
#[derive(Default)]
pub(crate) struct GroupingStats {
    issued: [AtomicU64; 6],
    authorizations: [AtomicU64; 6],
    hits: [AtomicU64; 6],
}

const LABELS: [&str; 6] = [
    "single",
    "unix",
    "directory",
    "batch",
    "onthefly",
    "predict",
];

fn labels(by: Strategies) -> Vec<usize> {
    let on = [by.unix, by.directory, by.batch, by.onthefly, by.predict];
    let mut out: Vec<usize> = on
        .iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .map(|(i, _)| i + 1)
        .collect();
    if out.is_empty() {
        out.push(0);
    }
    out
}

impl GroupingStats {
    pub(crate) fn counters(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (i, name) in LABELS.iter().enumerate() {
            let get = |a: &[AtomicU64; 6]| a.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
            out.push((format!("grouping:{name}:capabilities"), get(&self.issued)));
            out.push((
                format!("grouping:{name}:authorizations"),
                get(&self.authorizations),
            ));
            out.push((format!("grouping:{name}:cache_hits"), get(&self.hits)));
        }
        out
    }

    fn count(table: &[AtomicU64; 6], by: Strategies, n: u64) {
        for i in labels(by) {
            if let Some(c) = table.get(i) {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// What `Mds` keeps for issuing capabilities.
pub(crate) struct Issuer {
    /// Read side: an issue in progress; write side: an access-control change.
    acl_gate: RwLock<()>,
    acl_version: AtomicU64,
    snapshot: Mutex<Option<Arc<AclSnapshot>>>,
    grouping: RwLock<GroupingConfig>,
    capabilities: Mutex<HashMap<CapKey, CachedCapability>>,
    grants: Mutex<HashMap<(u64, u64, u8, u64), Grant>>,
    trees: Mutex<TreeCache>,
    subtree_roots: Mutex<HashMap<(u8, Digest), Digest>>,
    batches: Mutex<Batches>,
    turn: Condvar,
    pub(crate) stats: GroupingStats,
    /// Successor history for prediction grouping (SPEC M6).
    predictor: Mutex<crate::predict::Predictor>,
    /// Outstanding capabilities and the current renewal token (SPEC M8).
    pub(crate) renewals: crate::renewal::Renewals,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
}

impl Issuer {
    pub(crate) fn new(grouping: GroupingConfig) -> Self {
        Issuer {
            acl_gate: RwLock::new(()),
            acl_version: AtomicU64::new(0),
            snapshot: Mutex::new(None),
            grouping: RwLock::new(grouping),
            capabilities: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashMap::new()),
            trees: Mutex::new(TreeCache::default()),
            subtree_roots: Mutex::new(HashMap::new()),
            batches: Mutex::new(Batches::default()),
            turn: Condvar::new(),
            stats: GroupingStats::default(),
            predictor: Mutex::new(crate::predict::Predictor::default()),
            renewals: crate::renewal::Renewals::default(),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn grouping(&self) -> GroupingConfig {
        *self.grouping.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_strategies(&self, strategies: Strategies) {
        self.grouping
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .strategies = strategies;
    }
}

/// What an open asks a capability for.
pub(crate) struct IssueRequest {
    pub uid: u64,
    pub file: u64,
    /// The directory the file was opened in (directory grouping).
    pub parent: Option<u64>,
    pub wanted: Mode,
    /// A wider mode whose cached capability may serve (the user holds it now).
    pub also: Option<Mode>,
    pub protection: Protection,
    pub now: UnixMillis,
}

pub(crate) fn want_bits(mode: Mode) -> u16 {
    let mut bits = 0;
    if mode.allows(Mode::READ) {
        bits |= grouping::READ;
    }
    if mode.allows(Mode::WRITE) {
        bits |= grouping::WRITE;
    }
    bits
}

fn key_byte(mode: Mode, protection: Protection) -> u8 {
    mode.bits() | (protection.byte() << 4)
}

fn denied() -> MdsError {
    MdsError::refused(
        ErrorCode::PermissionDenied,
        "access changed while the capability was being issued",
    )
}

impl<S: MetaStore> crate::Mds<S> {
    /// Runs an access-control change: `change` commits it while no capability is being
    /// issued, then every later issue decides on the new state.
    pub(crate) fn acl_change<T>(&self, change: impl FnOnce() -> Result<T>) -> Result<T> {
        let _gate = self
            .issuer
            .acl_gate
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let out = change();
        self.issuer.acl_version.fetch_add(1, Ordering::SeqCst);
        out
    }

    /// Whether opens need the file's directory (directory grouping is on).
    pub(crate) fn issuer_groups_directories(&self) -> bool {
        self.issuer.grouping().strategies.directory
    }

    fn acl_snapshot(&self) -> Result<Arc<AclSnapshot>> {
        let version = self.issuer.acl_version.load(Ordering::SeqCst);
        let mut slot = lock(&self.issuer.snapshot);
        if let Some(s) = slot.as_ref().filter(|s| s.version() == version) {
            return Ok(s.clone());
        }
        let users = self.store.users()?;
        let snapshot = Arc::new(AclSnapshot::new(
            version,
            users.into_iter().map(|u| (u.id, u.gid, u.groups)),
        ));
        *slot = Some(snapshot.clone());
        Ok(snapshot)
    }

    /// The read side of the access-control gate: held from reading the state to caching
    /// what was signed on it.
    fn issue_gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.issuer
            .acl_gate
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The read side of the access-control gate and the state it guards.
    pub(crate) fn gate_and_acl(
        &self,
    ) -> Result<(std::sync::RwLockReadGuard<'_, ()>, Arc<AclSnapshot>)> {
        let gate = self.issue_gate();
        let acl = self.acl_snapshot()?;
        Ok((gate, acl))
    }

    /// Takes the gate and the state an issue for `r` decides on, refusing when the state
    /// no longer lets the requester have the mode asked for.
    fn decide(
        &self,
        r: &IssueRequest,
    ) -> Result<(std::sync::RwLockReadGuard<'_, ()>, Arc<AclSnapshot>, Perm)> {
        let (gate, acl) = self.gate_and_acl()?;
        // SPEC M9: checked under the gate, so a revocation (which takes the write side)
        // is either wholly before this issue or wholly after it.
        if self.user_revoked(r.uid, r.now)? {
            return Err(MdsError::refused(
                ErrorCode::Revoked,
                "this user's capabilities are revoked for now (maat admin revoke)",
            ));
        }
        let perm = self.current_perm(r.file)?;
        if !acl.permits(r.uid, perm, want_bits(r.wanted)) {
            return Err(denied());
        }
        Ok((gate, acl, perm))
    }

    pub(crate) fn current_perm(&self, file: u64) -> Result<Perm> {
        self.store
            .inode(file)?
            .map(|i| Perm::from(&i))
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchFile, "file was removed"))
    }

    /// SPEC M3 + M5 + M6: a capability for an open, from the cache when one for the same
    /// sets still has half its lifetime, otherwise signed (alone, or gathered with other
    /// opens of the file). Returns the encoding and whether it came from the cache.
    pub(crate) fn capability_for(
        &self,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let cfg = self.issuer.grouping();
        if cfg.strategies.predict {
            lock(&self.issuer.predictor).observe(r.uid, r.file, cfg.predict_k as usize);
        }
        {
            let (_gate, acl, perm) = self.decide(r)?;
            // The wanted mode's grant (decide() checked it is allowed), then a wider mode
            // whose cached capability may serve when the user holds that mode too.
            let grant = self.grant(&acl, cfg.strategies, r, perm, r.wanted)?;
            if let Some(hit) = self.cached(&grant, r.uid, r.wanted, r.protection, &acl, r.now) {
                return Ok((hit, true));
            }
            if let Some(wider) = r.also.filter(|m| acl.permits(r.uid, perm, want_bits(*m))) {
                let wide = self.grant(&acl, cfg.strategies, r, perm, wider)?;
                if let Some(hit) = self.cached(&wide, r.uid, wider, r.protection, &acl, r.now) {
                    return Ok((hit, true));
                }
            }
            self.issuer.cache_misses.fetch_add(1, Ordering::Relaxed);
            let gather = cfg.strategies.gathers()
                && r.uid != ADMIN_UID
                && matches!(grant.users, UserSel::One(_));
            if !gather {
                let encoded = self.sign_and_cache(&grant, r, &acl, false, rng)?;
                return Ok((encoded, false));
            }
        }
        self.gathered(&cfg, r, rng)
    }

    /// The sets a capability for `r` in `mode` names (cached per requester, file, mode
    /// and access-control version).
    fn grant(
        &self,
        acl: &AclSnapshot,
        strategies: Strategies,
        r: &IssueRequest,
        perm: Perm,
        mode: Mode,
    ) -> Result<Grant> {
        let key = (r.uid, r.file, key_byte(mode, r.protection), acl.version());
        // Predictions change with every open: a grant that uses them is not cached.
        if !strategies.predict {
            if let Some(g) = lock(&self.issuer.grants).get(&key) {
                return Ok(g.clone());
            }
        }
        let want = want_bits(mode);
        let (users, unix) = grouping::users_for(acl, strategies, r.uid, perm, want);
        let mut files = FileSel::One(r.file);
        let mut directory = false;
        if let (true, Some(parent)) = (strategies.directory, r.parent) {
            let mut candidates = Vec::new();
            for (_, id) in self
                .store
                .entries(parent)?
                .into_iter()
                .take(2 * grouping::DIRECTORY_GROUP_FILES_MAX)
            {
                if let Some(inode) = self.store.inode(id)?.filter(|i| !i.is_dir) {
                    candidates.push((id, Perm::from(&inode)));
                }
            }
            let set = acl.directory_files((r.file, perm), &candidates, &users.members(), want);
            if let Some(sel) = FileSel::from_files(set) {
                directory = matches!(sel, FileSel::Set(_));
                files = sel;
            }
        }
        let mut predicted = false;
        if strategies.predict {
            let j = self.issuer.grouping().predict_j as usize;
            let chain = lock(&self.issuer.predictor).chain(r.file, j);
            let mut candidates = Vec::with_capacity(chain.len());
            for id in chain {
                if let Some(inode) = self.store.inode(id)?.filter(|i| !i.is_dir) {
                    candidates.push((id, Perm::from(&inode)));
                }
            }
            // Only files every named user may access in this mode (the M6 invariant).
            let set = acl.directory_files((r.file, perm), &candidates, &users.members(), want);
            if set.len() > 1 {
                let mut all = files.members();
                all.extend(set);
                all.sort_unstable();
                all.dedup();
                if let Some(sel) = FileSel::from_files(all) {
                    files = sel;
                    predicted = true;
                }
            }
        }
        let grant = Grant {
            users,
            files,
            by: Strategies {
                unix,
                directory,
                predict: predicted,
                ..Strategies::default()
            },
        };
        if strategies.predict {
            return Ok(grant);
        }
        let mut grants = lock(&self.issuer.grants);
        if grants.len() >= GRANT_CACHE_ENTRIES_MAX {
            grants.clear();
        }
        grants.insert(key, grant.clone());
        Ok(grant)
    }

    fn user_key(&self, users: &UserSel) -> Result<UserKey> {
        Ok(match users {
            UserSel::One(u) => UserKey::One(*u),
            UserSel::Set(subtrees) => UserKey::Root(self.set_root(SetKind::Users, subtrees)?),
        })
    }

    fn file_key(&self, files: &FileSel) -> Result<FileKey> {
        Ok(match files {
            FileSel::One(f) => FileKey::One(*f),
            FileSel::Set(ids) => {
                FileKey::Root(self.set_root(SetKind::Files, std::slice::from_ref(ids))?)
            }
        })
    }

    /// The root of a set given as subtrees, composed from remembered subtree roots (a
    /// group's tree is built once and reused inside larger sets).
    fn set_root(&self, kind: SetKind, subtrees: &[Vec<u64>]) -> Result<Digest> {
        let mut roots = Vec::with_capacity(subtrees.len());
        for s in subtrees {
            let ids: Vec<u8> = s.iter().flat_map(|id| id.to_be_bytes()).collect();
            let key = (kind as u8, hash::blake3(&[&ids]));
            let known = lock(&self.issuer.subtree_roots).get(&key).copied();
            let root = match known {
                Some(r) => r,
                None => {
                    let r = subtree(kind, s)?.root();
                    let mut cache = lock(&self.issuer.subtree_roots);
                    if cache.len() >= SUBTREE_ROOTS_MAX {
                        cache.clear();
                    }
                    cache.insert(key, r);
                    r
                }
            };
            roots.push(root);
        }
        Ok(compose_roots(&roots)?)
    }

    fn cached(
        &self,
        grant: &Grant,
        uid: u64,
        mode: Mode,
        protection: Protection,
        acl: &AclSnapshot,
        now: UnixMillis,
    ) -> Option<Vec<u8>> {
        let byte = key_byte(mode, protection);
        let files = self.file_key(&grant.files).ok()?;
        let mut keys = vec![(self.user_key(&grant.users).ok()?, files.clone(), byte)];
        if matches!(grant.users, UserSel::One(_)) {
            keys.push((UserKey::Member(uid, acl.version()), files, byte));
        }
        let lifetime = self.config.capability_lifetime_millis;
        let found = {
            let cache = lock(&self.issuer.capabilities);
            keys.iter()
                .filter_map(|k| cache.get(k))
                .find(|c| c.expiry.0.saturating_sub(now.0) >= lifetime / 2)
                .cloned()
        }?;
        // The trees its roots stand for stay fetchable while it is handed out.
        let mut trees = lock(&self.issuer.trees);
        for (root, entry) in &found.trees {
            trees.insert(*root, entry.clone());
        }
        self.issuer.cache_hits.fetch_add(1, Ordering::Relaxed);
        GroupingStats::count(&self.issuer.stats.hits, found.by, 1);
        Some(found.encoded)
    }

    /// Signs a capability for `grant`, keeps its trees for `GetTree` and caches it (also
    /// under each member when `index_members`). The caller holds the access-control gate.
    fn sign_and_cache(
        &self,
        grant: &Grant,
        r: &IssueRequest,
        acl: &AclSnapshot,
        index_members: bool,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>> {
        let readers = {
            let mut m = grant.users.members();
            m.sort_unstable();
            m
        };
        let mut trees = Vec::new();
        let users = match &grant.users {
            UserSel::One(u) => Principals::User(UserId(*u)),
            UserSel::Set(subtrees) => {
                let message = MerkleTreeMessage::new(SetKind::Users, subtrees.clone())?;
                let root = self.set_root(SetKind::Users, subtrees)?;
                trees.push((root, message.encode()));
                Principals::UserTree(root)
            }
        };
        let files = match &grant.files {
            FileSel::One(f) => Files::File(FileId(*f)),
            FileSel::Set(ids) => {
                let message = MerkleTreeMessage::new(SetKind::Files, vec![ids.clone()])?;
                let root = self.set_root(SetKind::Files, std::slice::from_ref(ids))?;
                trees.push((root, message.encode()));
                Files::FileTree(root)
            }
        };
        let capability = Capability {
            users,
            files,
            id: CapabilityId(rng.next_u64()),
            mode: r.wanted,
            protection: r.protection,
            start: UnixMillis(r.now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: r.now.plus_millis(self.config.capability_lifetime_millis),
        };
        let (id, expiry) = (capability.id, capability.expiry);
        let encoded = signed::sign(capability, &self.signing).encoded().to_vec();
        self.issuer.renewals.register(
            crate::renewal::Issued {
                id,
                users: readers.clone(),
                files: grant.files.members(),
                mode: r.wanted,
                expiry,
            },
            acl.version(),
            r.now,
        );
        let trees: Vec<(Digest, Arc<TreeEntry>)> = trees
            .into_iter()
            .map(|(root, message)| {
                (
                    root,
                    Arc::new(TreeEntry {
                        message,
                        readers: readers.clone(),
                        members: readers.len(),
                    }),
                )
            })
            .collect();
        {
            let mut cache = lock(&self.issuer.trees);
            for (root, entry) in &trees {
                cache.insert(*root, entry.clone());
            }
        }
        let entry = CachedCapability {
            encoded: encoded.clone(),
            expiry,
            by: grant.by,
            trees,
        };
        let byte = key_byte(r.wanted, r.protection);
        let files = self.file_key(&grant.files)?;
        let mut cache = lock(&self.issuer.capabilities);
        if cache.len() + readers.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
            cache.retain(|_, c| c.expiry > r.now);
            if cache.len() + readers.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
                cache.clear();
            }
        }
        if index_members {
            for u in &readers {
                cache.insert(
                    (UserKey::Member(*u, acl.version()), files.clone(), byte),
                    entry.clone(),
                );
            }
        }
        cache.insert((self.user_key(&grant.users)?, files, byte), entry);
        GroupingStats::count(&self.issuer.stats.issued, grant.by, 1);
        GroupingStats::count(
            &self.issuer.stats.authorizations,
            grant.by,
            grant.authorizations(),
        );
        Ok(encoded)
    }

    /// Temporal and on-the-fly groups: opens of one file for one mode share a batch; its
    /// first request signs one capability for everyone in it once the gather window (hot
    /// files only) has passed and no capability for the same file is being signed.
    fn gathered(
        &self,
        cfg: &GroupingConfig,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let key: BatchKey = (r.file, key_byte(r.wanted, r.protection));
        let (batch, leader, hot) = {
            let mut table = lock(&self.issuer.batches);
            let hot = cfg.strategies.batch && table.observe(r.file, r.now, cfg);
            match table.open.get(&key) {
                Some(b) => {
                    lock(&b.state).members.insert(r.uid);
                    (b.clone(), false, hot)
                }
                None => {
                    let b = Arc::new(GatherBatch::default());
                    lock(&b.state).members.insert(r.uid);
                    table.open.insert(key, b.clone());
                    (b, true, hot)
                }
            }
        };
        if !leader {
            return self.await_batch(&batch, r, rng);
        }
        let hot = {
            // On-the-fly: while another capability for this file is being signed, this
            // batch stays open and gathers.
            let mut table = lock(&self.issuer.batches);
            let mut waited = 0u64;
            while table.signing.contains(&key) && waited < BATCH_WAIT_MILLIS_MAX {
                let (t, _) = self
                    .issuer
                    .turn
                    .wait_timeout(table, Duration::from_millis(10))
                    .unwrap_or_else(|p| p.into_inner());
                table = t;
                waited += 10;
            }
            // Opens that arrived meanwhile may have made the file hot.
            hot || (cfg.strategies.batch && table.is_hot(r.file, r.now))
        };
        if hot {
            // Temporal batching: gather while the batch still grows (a crowd arriving),
            // at most the gather window.
            let limit = Duration::from_millis(cfg.batch_gather_millis.min(BATCH_WAIT_MILLIS_MAX));
            let started = std::time::Instant::now();
            let mut size = lock(&batch.state).members.len();
            while started.elapsed() < limit {
                std::thread::sleep(Duration::from_micros(BATCH_QUIET_MICROS));
                let now_size = lock(&batch.state).members.len();
                if now_size == size {
                    break;
                }
                size = now_size;
            }
        }
        {
            let mut table = lock(&self.issuer.batches);
            if table.open.get(&key).is_some_and(|b| Arc::ptr_eq(b, &batch)) {
                table.open.remove(&key);
            }
            table.signing.insert(key);
        }
        let outcome = self.sign_batch(&batch, hot, cfg.strategies, r, rng);
        lock(&self.issuer.batches).signing.remove(&key);
        self.issuer.turn.notify_all();
        {
            let mut state = lock(&batch.state);
            state.outcome = Some(outcome.as_ref().ok().cloned());
        }
        batch.done.notify_all();
        let (encoded, members) = outcome?;
        if members.binary_search(&r.uid).is_ok() {
            Ok((encoded, false))
        } else {
            Err(denied())
        }
    }

    fn sign_batch(
        &self,
        batch: &GatherBatch,
        hot: bool,
        cfg_strategies: Strategies,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, Vec<u64>)> {
        let (_gate, acl) = self.gate_and_acl()?;
        let perm = self.current_perm(r.file)?;
        let want = want_bits(r.wanted);
        let members: Vec<u64> = lock(&batch.state)
            .members
            .iter()
            .copied()
            .filter(|u| {
                *u != ADMIN_UID
                    && acl.permits(*u, perm, want)
                    && !self.user_revoked(*u, r.now).unwrap_or(true)
            })
            .collect();
        let several = members.len() > 1;
        let grant = if members == [r.uid] {
            // Nobody joined: the requester's own grant, decided again on the state held
            // now (with the other strategies' sets, e.g. the directory's files).
            self.grant(&acl, cfg_strategies, r, perm, r.wanted)?
        } else {
            Grant {
                users: UserSel::from_subtrees(vec![members.clone()]).ok_or_else(denied)?,
                files: FileSel::One(r.file),
                by: Strategies {
                    batch: several && hot,
                    onthefly: several && !hot,
                    ..Strategies::default()
                },
            }
        };
        let encoded = self.sign_and_cache(&grant, r, &acl, true, rng)?;
        Ok((encoded, members))
    }

    fn await_batch(
        &self,
        batch: &GatherBatch,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let outcome = {
            let mut state = lock(&batch.state);
            let mut waited = 0u64;
            while state.outcome.is_none() && waited < BATCH_WAIT_MILLIS_MAX {
                let (s, _) = batch
                    .done
                    .wait_timeout(state, Duration::from_millis(10))
                    .unwrap_or_else(|p| p.into_inner());
                state = s;
                waited += 10;
            }
            state.outcome.clone().flatten()
        };
        match outcome {
            Some((encoded, members)) if members.binary_search(&r.uid).is_ok() => {
                Ok((encoded, false))
            }
            // The batch failed, timed out or left this user out (access changed): ask
            // alone, deciding afresh.
            _ => self.single(r, rng),
        }
    }

    fn single(&self, r: &IssueRequest, rng: &mut impl CryptoRngCore) -> Result<(Vec<u8>, bool)> {
        let (_gate, acl, _) = self.decide(r)?;
        let grant = Grant {
            users: UserSel::One(r.uid),
            files: FileSel::One(r.file),
            by: Strategies::default(),
        };
        Ok((self.sign_and_cache(&grant, r, &acl, false, rng)?, false))
    }

    /// A write capability for `uid` on a file just removed (its objects are left to
    /// delete); not cached, since nobody opens a removed file again.
    pub(crate) fn removal_capability(
        &self,
        uid: u64,
        file: u64,
        protection: Protection,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>> {
        let capability = Capability {
            users: Principals::User(UserId(uid)),
            files: Files::File(FileId(file)),
            id: CapabilityId(rng.next_u64()),
            mode: Mode::WRITE,
            protection,
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: now.plus_millis(self.config.capability_lifetime_millis),
        };
        GroupingStats::count(&self.issuer.stats.issued, Strategies::default(), 1);
        GroupingStats::count(&self.issuer.stats.authorizations, Strategies::default(), 1);
        Ok(signed::sign(capability, &self.signing).encoded().to_vec())
    }

    /// Drops every cached capability (a revocation: none is handed out again).
    pub(crate) fn forget_capabilities_cached(&self) {
        lock(&self.issuer.capabilities).clear();
    }

    /// Drops every cached and outstanding capability (a partition's method changed:
    /// issue afresh, and renew none of the old method).
    pub(crate) fn forget_capabilities(&self) {
        self.forget_capabilities_cached();
        self.issuer.renewals.forget_all();
    }

    /// SPEC M4: the members of a root in a capability this MDS issued, for a user named
    /// in that capability (or the administrator).
    pub(crate) fn get_tree(&self, who: &Principal, root: &Digest) -> Result<MdsResponse> {
        let entry = lock(&self.issuer.trees)
            .trees
            .get(root)
            .cloned()
            .ok_or_else(|| {
                MdsError::refused(
                    ErrorCode::UnknownTree,
                    "this MDS no longer holds that tree: open the file again",
                )
            })?;
        if who.uid != ADMIN_UID && entry.readers.binary_search(&who.uid).is_err() {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                "only users named in the capability may fetch its trees",
            ));
        }
        Ok(MdsResponse::Tree(entry.message.clone()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(readers: &[u64]) -> Arc<TreeEntry> {
        Arc::new(TreeEntry {
            message: vec![1, 2, 3],
            readers: readers.to_vec(),
            members: readers.len(),
        })
    }

    /// Found by `maat bench grouping`: a directory's file set named for one group of
    /// users and then for another kept only the first group as readers, and the second
    /// was refused the tree its own capability named.
    #[test]
    fn a_root_named_for_two_user_sets_is_fetchable_by_both() {
        let mut cache = TreeCache::default();
        let root = [7u8; 32];
        cache.insert(root, entry(&[2, 5]));
        cache.insert(root, entry(&[3, 5]));
        let held = cache.trees.get(&root).unwrap();
        assert_eq!(held.readers, vec![2, 3, 5]);
        assert_eq!(held.message, vec![1, 2, 3]);
        assert_eq!(cache.members, 3);
        // Nothing new: nothing changes.
        cache.insert(root, entry(&[2]));
        assert_eq!(cache.trees.get(&root).unwrap().readers, vec![2, 3, 5]);
        assert_eq!(cache.trees.len(), 1);
    }
}
