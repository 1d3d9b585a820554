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
//! Gathered batches (temporal and on-the-fly groups) live in `batches`, the trees kept
//! for `GetTree` in `trees`.

use crate::grouping::{
    self, AclSnapshot, FileSel, Grant, GroupingConfig, Perm, Strategies, UserSel,
};
use crate::{lock, MdsError, MetaStore, Op, Result, ADMIN_UID, CLOCK_SKEW_MILLIS};
use maat_crypto::hash::{self, Digest};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::merkle_msg::{compose_roots, subtree, MerkleTreeMessage, SetKind};
use maat_proto::msg::ErrorCode;
use maat_proto::protection::Protection;
use maat_proto::signed;
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

mod batches;
mod trees;

use batches::Batches;
use trees::{TreeCache, TreeEntry};

pub use crate::limits::CAPABILITY_CACHE_ENTRIES_MAX;
pub use crate::limits::COVERS_PER_FILE_MAX;
pub use crate::limits::COVER_INDEX_ENTRIES_MAX;
pub use crate::limits::COVER_INDEX_MEMBERS_MAX;

pub use crate::limits::GRANT_CACHE_ENTRIES_MAX;
pub use crate::limits::SUBTREE_ROOTS_MAX;

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

/// Where a capability over a file set is indexed: under each of its files, and under
/// its one user or as one naming a set of users.
type CoverKey = (u64, u8, Option<u64>);

/// A cached capability indexed under one file it names (SPEC M5: a later open of an
/// already-authorized (user, file) pair is served without signing). Valid only at the
/// access-control version it was issued at: any change since makes it unfindable here.
struct Cover {
    version: u64,
    /// The users it names, ascending.
    readers: Arc<Vec<u64>>,
    entry: Arc<CachedCapability>,
}

/// The (user, file) index and the members its capabilities hold.
#[derive(Default)]
struct Covers {
    map: HashMap<CoverKey, Vec<Cover>>,
    members: usize,
}

#[derive(Clone)]
struct CachedCapability {
    encoded: Vec<u8>,
    expiry: UnixMillis,
    by: Strategies,
    trees: Vec<(Digest, Arc<TreeEntry>)>,
}

/// Per-strategy counters (`maat stats`): capabilities issued, the (user, file) pairs
/// they authorize, and cache hits on them.
#[derive(Default)]
pub(crate) struct GroupingStats {
    issued: [AtomicU64; 7],
    authorizations: [AtomicU64; 7],
    hits: [AtomicU64; 7],
    /// Where a gathered batch's leader spends its time (issue 45, E3): waiting for the
    /// signature in progress for the same subject, gathering, and signing (µs, summed).
    pub(crate) batch_turn_micros: AtomicU64,
    pub(crate) batch_gather_micros: AtomicU64,
    pub(crate) batch_sign_micros: AtomicU64,
    pub(crate) batches_signed: AtomicU64,
}

/// Counter label `i`: `single` (no strategy widened it), then [`Strategies::NAMES`].
fn label(i: usize) -> &'static str {
    match i.checked_sub(1) {
        None => "single",
        Some(k) => Strategies::NAMES.get(k).copied().unwrap_or("unknown"),
    }
}

fn labels(by: Strategies) -> Vec<usize> {
    let on = [
        by.unix,
        by.directory,
        by.batch,
        by.onthefly,
        by.predict,
        by.defined,
    ];
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
        for i in 0..=Strategies::NAMES.len() {
            let name = label(i);
            let get = |a: &[AtomicU64; 7]| a.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
            out.push((format!("grouping:{name}:capabilities"), get(&self.issued)));
            out.push((
                format!("grouping:{name}:authorizations"),
                get(&self.authorizations),
            ));
            out.push((format!("grouping:{name}:cache_hits"), get(&self.hits)));
        }
        for (name, c) in [
            ("batch_turn_micros", &self.batch_turn_micros),
            ("batch_gather_micros", &self.batch_gather_micros),
            ("batch_sign_micros", &self.batch_sign_micros),
            ("batches_signed", &self.batches_signed),
        ] {
            out.push((name.to_string(), c.load(Ordering::Relaxed)));
        }
        out
    }

    fn count(table: &[AtomicU64; 7], by: Strategies, n: u64) {
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
    pub(crate) acl_version: AtomicU64,
    /// The shared version in the store when this instance last caught up with it or
    /// moved it ([`crate::acl_version`]).
    pub(crate) acl_seen: AtomicU64,
    /// Times this instance caught up with another's access-control changes.
    pub(crate) acl_catch_ups: AtomicU64,
    snapshot: Mutex<Option<Arc<AclSnapshot>>>,
    grouping: RwLock<GroupingConfig>,
    capabilities: Mutex<HashMap<CapKey, CachedCapability>>,
    covers: Mutex<Covers>,
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
    /// `acl_seen`: the store's shared access-control version at the start.
    pub(crate) fn new(grouping: GroupingConfig, acl_seen: u64) -> Self {
        Issuer {
            acl_gate: RwLock::new(()),
            acl_version: AtomicU64::new(0),
            acl_seen: AtomicU64::new(acl_seen),
            acl_catch_ups: AtomicU64::new(0),
            snapshot: Mutex::new(None),
            grouping: RwLock::new(grouping),
            capabilities: Mutex::new(HashMap::new()),
            covers: Mutex::new(Covers::default()),
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
        *crate::read_lock(&self.grouping)
    }

    pub(crate) fn set_strategies(&self, strategies: Strategies) {
        crate::write_lock(&self.grouping).strategies = strategies;
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
    /// The file's partition: only files of the same partition (so of the same protection
    /// method) may join its capability.
    pub partition: u64,
    /// Files the client predicted it opens next (`OpenPredicted`), resolved.
    pub hinted: Vec<u64>,
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
    /// issued, then every later issue decides on the new state, at every instance
    /// sharing the store: `change` is handed the batch entry that moves the shared
    /// version on ([`crate::acl_version`]) and commits it in its own batch. The caller
    /// holds [`crate::Mds::writing`], so no other instance moves the version meanwhile;
    /// another's earlier changes are caught up with first, so `change` decides on them.
    pub(crate) fn acl_change<T>(&self, change: impl FnOnce(Op) -> Result<T>) -> Result<T> {
        let _gate = crate::write_lock(&self.issuer.acl_gate);
        let stored = self.stored_acl_version()?;
        self.catch_up_acl(stored);
        let next = crate::store::counter_after(crate::acl_version::ACL_VERSION_KEY, stored, 1)?;
        let out = change(crate::acl_version::record(next));
        if out.is_ok() {
            self.issuer.acl_seen.store(next, Ordering::SeqCst);
        }
        self.issuer.acl_version.fetch_add(1, Ordering::SeqCst);
        out
    }

    /// Whether client predictions are used (prediction grouping is on).
    pub(crate) fn issuer_takes_hints(&self) -> bool {
        self.issuer.grouping().strategies.predict
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
        crate::read_lock(&self.issuer.acl_gate)
    }

    /// The read side of the access-control gate and the state it guards.
    /// First, under the write side, the access-control changes another instance
    /// committed since this one last looked ([`crate::acl_version`]); on a store no
    /// other process changes, there are none to look for.
    pub(crate) fn gate_and_acl(
        &self,
    ) -> Result<(std::sync::RwLockReadGuard<'_, ()>, Arc<AclSnapshot>)> {
        loop {
            let gate = self.issue_gate();
            if !self.store.shared() || self.acl_current(self.stored_acl_version()?) {
                let acl = self.acl_snapshot()?;
                return Ok((gate, acl));
            }
            drop(gate);
            let _changing = crate::write_lock(&self.issuer.acl_gate);
            self.catch_up_acl(self.stored_acl_version()?);
        }
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
            let wider = r.also.filter(|m| acl.permits(r.uid, perm, want_bits(*m)));
            if let Some(wider) = wider {
                let wide = self.grant(&acl, cfg.strategies, r, perm, wider)?;
                if let Some(hit) = self.cached(&wide, r.uid, wider, r.protection, &acl, r.now) {
                    return Ok((hit, true));
                }
            }
            // Any cached capability that names this user and file, issued on this very
            // access-control state (a predicted or directory set made for another open).
            for mode in std::iter::once(r.wanted).chain(wider) {
                if let Some(hit) = self.covered(r, mode, &acl) {
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
        // Predictions change with every open, file sets when their owners redefine
        // them: a grant that may use either is not cached.
        let volatile = strategies.predict || strategies.defined;
        if !volatile {
            if let Some(g) = lock(&self.issuer.grants).get(&key) {
                return Ok(g.clone());
            }
        }
        let want = want_bits(mode);
        let (users, unix) = grouping::users_for(acl, strategies, r.uid, perm, want);
        let mut files = FileSel::One(r.file);
        let mut directory = false;
        if let (true, Some(parent)) = (strategies.directory, r.parent) {
            let entries = self.store.entries(parent)?;
            let candidates = self.joinable(
                r,
                entries
                    .into_iter()
                    .map(|(_, id)| id)
                    .take(2 * grouping::DIRECTORY_GROUP_FILES_MAX),
            )?;
            let set = acl.directory_files((r.file, perm), &candidates, &users.members(), want);
            if let Some(sel) = FileSel::from_files(set) {
                directory = matches!(sel, FileSel::Set(_));
                files = sel;
            }
        }
        let mut predicted = false;
        if strategies.predict {
            let j = self.issuer.grouping().predict_j as usize;
            let mut chain = lock(&self.issuer.predictor).chain(r.file, j);
            // The client's own predictions join the MDS's.
            for &f in &r.hinted {
                if !chain.contains(&f) {
                    chain.push(f);
                }
            }
            predicted = self.widen(acl, r, perm, &users, want, chain, &mut files)?;
        }
        let mut defined = false;
        if strategies.defined {
            let set = self.defined_with(r.uid, r.file)?;
            defined = self.widen(acl, r, perm, &users, want, set, &mut files)?;
        }
        let grant = Grant {
            users,
            files,
            by: Strategies {
                unix,
                directory,
                predict: predicted,
                defined,
                ..Strategies::default()
            },
        };
        if volatile {
            return Ok(grant);
        }
        let mut grants = lock(&self.issuer.grants);
        if grants.len() >= GRANT_CACHE_ENTRIES_MAX {
            grants.clear();
        }
        grants.insert(key, grant.clone());
        Ok(grant)
    }

    /// The files of `ids` that may share a capability for `r`'s file, with their
    /// permissions: existing files (not directories) of the same partition. The
    /// capability carries that partition's protection method, so a file of a stronger
    /// partition must never be reachable under it. Every grouping that adds files goes
    /// through here.
    fn joinable(
        &self,
        r: &IssueRequest,
        ids: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<(u64, Perm)>> {
        let mut out = Vec::new();
        for id in ids {
            if let Some(inode) = self
                .store
                .inode(id)?
                .filter(|i| !i.is_dir && i.partition == r.partition)
            {
                out.push((id, Perm::from(&inode)));
            }
        }
        Ok(out)
    }

    /// Adds to `files` those of `candidates` that may join (see [`Self::joinable`]) and
    /// that every user in `users` may access for `want` (the M6 invariant: candidates
    /// from predictions and file sets are only proposals); true when any was added.
    #[allow(clippy::too_many_arguments)]
    fn widen(
        &self,
        acl: &AclSnapshot,
        r: &IssueRequest,
        perm: Perm,
        users: &UserSel,
        want: u16,
        candidates: Vec<u64>,
        files: &mut FileSel,
    ) -> Result<bool> {
        let checked = self.joinable(r, candidates)?;
        let set = acl.directory_files((r.file, perm), &checked, &users.members(), want);
        if set.len() <= 1 {
            return Ok(false);
        }
        let mut all = files.members();
        let before = all.len();
        all.extend(set);
        all.sort_unstable();
        all.dedup();
        let grew = all.len() > before;
        if let Some(sel) = FileSel::from_files(all) {
            *files = sel;
        }
        Ok(grew)
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
        self.cached_under(keys, now)
    }

    /// The capability cached under the first of `keys` that still has half its lifetime,
    /// counted as handed out.
    fn cached_under(
        &self,
        keys: impl IntoIterator<Item = CapKey>,
        now: UnixMillis,
    ) -> Option<Vec<u8>> {
        let lifetime = self.config.capability_lifetime_millis;
        let found = {
            let cache = lock(&self.issuer.capabilities);
            keys.into_iter()
                .filter_map(|k| cache.get(&k))
                .find(|c| c.expiry.0.saturating_sub(now.0) >= lifetime / 2)
                .cloned()
        }?;
        self.hand_out(&found);
        Some(found.encoded)
    }

    /// SPEC M5 by (user, file): a cached capability for `mode` that names `r`'s user and
    /// file, made at the current access-control version, with half its lifetime left.
    fn covered(&self, r: &IssueRequest, mode: Mode, acl: &AclSnapshot) -> Option<Vec<u8>> {
        let byte = key_byte(mode, r.protection);
        let lifetime = self.config.capability_lifetime_millis;
        let covers = lock(&self.issuer.covers);
        let found = [Some(r.uid), None]
            .into_iter()
            .filter_map(|who| covers.map.get(&(r.file, byte, who)))
            .flatten()
            .find(|c| {
                c.version == acl.version()
                    && c.entry.expiry.0.saturating_sub(r.now.0) >= lifetime / 2
                    && c.readers.binary_search(&r.uid).is_ok()
            })
            .map(|c| c.entry.clone())?;
        drop(covers);
        self.hand_out(&found);
        Some(found.encoded.clone())
    }

    /// Counts a cache hit on `found` and keeps its trees fetchable while it is handed out.
    fn hand_out(&self, found: &CachedCapability) {
        let mut trees = lock(&self.issuer.trees);
        for (root, entry) in &found.trees {
            trees.insert(*root, entry.clone());
        }
        drop(trees);
        self.issuer.cache_hits.fetch_add(1, Ordering::Relaxed);
        GroupingStats::count(&self.issuer.stats.hits, found.by, 1);
    }

    /// Indexes `entry` under every file it names (see [`Cover`]), and under its user
    /// when it names one: one user's capabilities do not crowd out another's.
    fn index_cover(
        &self,
        files: &[u64],
        byte: u8,
        readers: &[u64],
        version: u64,
        entry: &CachedCapability,
        now: UnixMillis,
    ) {
        let who = match readers {
            [one] => Some(*one),
            _ => None,
        };
        let readers = Arc::new(readers.to_vec());
        let entry = Arc::new(entry.clone());
        let mut covers = lock(&self.issuer.covers);
        let members = readers.len() + files.len();
        if covers.map.len() + files.len() > COVER_INDEX_ENTRIES_MAX
            || covers.members + members > COVER_INDEX_MEMBERS_MAX
        {
            // Counted per capability indexed, not recounted: emptying is the only way
            // back down, so the bound holds.
            covers.map.clear();
            covers.members = 0;
        }
        covers.members += members;
        for &file in files {
            let list = covers.map.entry((file, byte, who)).or_default();
            list.retain(|c| c.version == version && c.entry.expiry > now);
            if list.len() >= COVERS_PER_FILE_MAX {
                list.remove(0);
            }
            list.push(Cover {
                version,
                readers: readers.clone(),
                entry: entry.clone(),
            });
        }
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
        assert!(!readers.is_empty(), "a capability names at least one user");
        // The central invariant (SPEC M3, M6), checked again on what is about to be
        // signed, whatever strategy shaped it: every user may do `mode` to every file at
        // this access-control state. It costs users × files checks: every grant of up to
        // GRANT_CHECKED_PAIRS_MAX pairs (nearly all: one user's open of one file is one)
        // in every build, larger ones in debug builds (every test run) (issue 39).
        let pairs = readers.len().saturating_mul(grant.files.members().len());
        if pairs <= crate::limits::GRANT_CHECKED_PAIRS_MAX || cfg!(debug_assertions) {
            self.assert_grant_allowed(grant, acl, r.wanted)?;
        }
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
        assert!(
            capability.start < capability.expiry,
            "a capability's window is not empty"
        );
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
        if let FileSel::Set(files) = &grant.files {
            // A capability for one file is found by its exact key; one for a set also
            // serves opens of its other files.
            self.index_cover(files, byte, &readers, acl.version(), &entry, r.now);
        }
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

    /// Panics when `grant` names a (user, file) the access-control state `acl` does not
    /// allow `mode` (a bug in a grouping strategy: better a failed open than a signed
    /// capability for access the MDS refuses).
    fn assert_grant_allowed(&self, grant: &Grant, acl: &AclSnapshot, mode: Mode) -> Result<()> {
        let users = grant.users.members();
        for file in grant.files.members() {
            let perm = self.current_perm(file)?;
            for &user in &users {
                assert!(
                    acl.permits(user, perm, want_bits(mode)),
                    "capability invariant: user {user} may not {mode:?} file {file}, yet a grant names them"
                );
            }
        }
        Ok(())
    }

    /// A write capability for `uid` on a file just removed (its objects are left to
    /// delete), and whether it came from the cache: the one cached for this user alone
    /// on this file alone (from a write open of it, so its OSDs verified it already)
    /// while half its lifetime is left, else one signed now and not
    /// cached, since nobody opens a removed file again. Handing this user back a
    /// capability it was itself issued authorizes nothing it does not hold already.
    pub(crate) fn removal_capability(
        &self,
        uid: u64,
        file: u64,
        protection: Protection,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let writes = [Mode::WRITE, Mode::READ_WRITE]
            .into_iter()
            .flat_map(|m| [m, m.with(Mode::RANGE_KEYS)])
            .map(|m| {
                (
                    UserKey::One(uid),
                    FileKey::One(file),
                    key_byte(m, protection),
                )
            });
        if let Some(encoded) = self.cached_under(writes, now) {
            return Ok((encoded, true));
        }
        // A file this user made under a reserved id: the block's capability.
        if let Some(encoded) = self.reserved_capability(uid, file, protection, now)? {
            return Ok((encoded, true));
        }
        let signed = self.single_capability(uid, file, Mode::WRITE, protection, now, rng)?;
        Ok((signed.0, false))
    }

    /// A capability for one user and one file in `mode`, signed now (never cached or
    /// grouped), and its fields.
    pub(crate) fn single_capability(
        &self,
        uid: u64,
        file: u64,
        mode: Mode,
        protection: Protection,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, Capability)> {
        let capability = Capability {
            users: Principals::User(UserId(uid)),
            files: Files::File(FileId(file)),
            id: CapabilityId(rng.next_u64()),
            mode,
            protection,
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry: now.plus_millis(self.config.capability_lifetime_millis),
        };
        GroupingStats::count(&self.issuer.stats.issued, Strategies::default(), 1);
        GroupingStats::count(&self.issuer.stats.authorizations, Strategies::default(), 1);
        let signed = signed::sign(capability.clone(), &self.signing)
            .encoded()
            .to_vec();
        Ok((signed, capability))
    }

    /// Drops every cached capability (a revocation: none is handed out again).
    pub(crate) fn forget_capabilities_cached(&self) {
        lock(&self.issuer.capabilities).clear();
        *lock(&self.issuer.covers) = Covers::default();
    }

    /// Drops every cached and outstanding capability (a partition's method changed:
    /// issue afresh, and renew none of the old method).
    pub(crate) fn forget_capabilities(&self) {
        self.forget_capabilities_cached();
        self.issuer.renewals.forget_all();
    }
}
