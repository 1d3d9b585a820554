//! SPEC H3–H5, H8 on the client: encrypted files. The client makes a new file's root key
//! and lockbox (sealed to the KDS and to the owner), asks a KDS for range keys with what
//! the MDS gave it at open (ticket, capability, lockbox), derives leaf keys locally, and
//! seals and opens stripes (`maat_proto::encrypted`). OSDs and the MDS never see a key
//! or a plaintext byte of an encrypted file.

use super::*;
use crate::kds_keys::{clip, nodes_at};
use maat_crypto::kht::{KhtShape, Node, RangeKey};
use maat_proto::capability::Capability;
use maat_proto::encrypted::{self, BlockFailure, FileCrypt, LeafKeys, StripeContext};
use maat_proto::horus::{Lockbox, LockboxKeys};
use maat_proto::key_ranges::KeyRanges;

/// Range keys held for one file.
#[derive(Clone)]
pub(crate) struct HeldKeys {
    pub(crate) tree_version: u32,
    pub(crate) shape: KhtShape,
    pub(crate) keys: Vec<RangeKey>,
    pub(crate) expiry: u64,
}

impl HeldKeys {
    /// Whether every byte of every range lies under a held key.
    fn covers(&self, ranges: &[(u64, u64)]) -> bool {
        let mut spans: Vec<(u64, u64)> = self
            .keys
            .iter()
            .filter_map(|k| self.shape.bytes_under(k.node).ok())
            .collect();
        spans.sort_unstable();
        ranges.iter().all(|&(a, b)| {
            let mut at = a;
            for &(s, e) in &spans {
                if s <= at && at < e {
                    at = e;
                }
            }
            at >= b
        })
    }

    /// Adds `more`'s keys (same file and version), in offset order; valid while both are.
    /// Past [`HELD_KEYS_PER_FILE_MAX`] keys the older ones are dropped (a long read at a
    /// deep level keeps its window's keys, not the whole file's).
    fn absorb(&mut self, more: HeldKeys) {
        if self.keys.len() + more.keys.len() > HELD_KEYS_PER_FILE_MAX {
            *self = more;
            return;
        }
        let have: std::collections::HashSet<(u8, u64)> = self
            .keys
            .iter()
            .map(|k| (k.node.level, k.node.index))
            .collect();
        self.keys.extend(
            more.keys
                .into_iter()
                .filter(|k| !have.contains(&(k.node.level, k.node.index))),
        );
        let shape = &self.shape;
        self.keys
            .sort_by_key(|k| shape.bytes_under(k.node).map_or(u64::MAX, |(a, _)| a));
        self.expiry = self.expiry.min(more.expiry);
    }
}

/// The keys for a read's first window: at hand, or asked for and not received yet
/// ([`Client::stripe_crypt_begin`]).
pub(crate) enum FirstKeys {
    Ready(StripeCrypt),
    Pending(crate::kds_keys::PendingKeys),
}

/// What sealing or opening a stripe needs: the file's keys (of its current tree, and of
/// the earlier trees stripes in the window are still sealed under, SPEC H7) and its
/// generations.
pub(crate) struct StripeCrypt {
    file: u64,
    held: HeldKeys,
    earlier: Vec<HeldKeys>,
    pub(crate) crypt: FileCrypt,
}

impl StripeCrypt {
    /// The leaf size (plaintext bytes per block).
    pub(crate) fn leaf_bytes(&self) -> u64 {
        self.held.shape.leaf_size_bytes()
    }

    fn context(&self, held: &HeldKeys, stripe: u32, generation: u64) -> StripeContext {
        StripeContext {
            file: self.file,
            tree_version: held.tree_version,
            stripe,
            generation,
        }
    }

    /// The keys of the tree stripe `stripe` is sealed under.
    fn keys_of(&self, stripe: u32) -> Result<&HeldKeys> {
        match self.crypt.earlier_version(stripe) {
            None => Ok(&self.held),
            Some(v) => self
                .earlier
                .iter()
                .find(|h| h.tree_version == v)
                .ok_or_else(|| {
                    ClientError::Keys(format!(
                        "stripe {stripe} of file {} is under key tree {v}, whose keys were not asked for",
                        self.file
                    ))
                }),
        }
    }

    /// Seals a stripe under `generation` with the current tree.
    pub(crate) fn seal(
        &self,
        stripe: u32,
        generation: u64,
        plain: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>> {
        let held = &self.held;
        let mut keys = LeafKeys::new(&held.shape, &held.keys).map_err(local_token)?;
        let context = self.context(held, stripe, generation);
        encrypted::seal_stripe(&mut keys, &context, plain, rng).map_err(|f| integrity(self.file, f))
    }

    /// Opens a stripe sealed under the generation the file records for it; `expected`
    /// plaintext bytes at least, of which `need` (offsets in the stripe) must open.
    pub(crate) fn open(
        &self,
        stripe: u32,
        sealed: Vec<u8>,
        expected: u64,
        need: std::ops::Range<u64>,
    ) -> Result<Vec<u8>> {
        let held = self.keys_of(stripe)?;
        let mut keys = LeafKeys::new(&held.shape, &held.keys).map_err(local_token)?;
        let context = self.context(held, stripe, self.crypt.generation(stripe));
        encrypted::open_stripe_part(&mut keys, &context, sealed, expected, need)
            .map_err(|f| integrity(self.file, f))
    }

    /// The sealed length of a full stripe.
    pub(crate) fn full_stripe_sealed(&self) -> u64 {
        encrypted::sealed_len(STRIPE_UNIT_BYTES, self.leaf_bytes())
    }
}

fn local_token(e: maat_proto::ProtoError) -> ClientError {
    ClientError::Token {
        what: "encrypted file",
        source: e,
    }
}

fn integrity(file: u64, failure: BlockFailure) -> ClientError {
    ClientError::Integrity { file, failure }
}

/// A fresh non-zero write generation.
pub(crate) fn new_generation(rng: &mut impl RngCore) -> u64 {
    loop {
        let g = rng.next_u64();
        if g != 0 {
            return g;
        }
    }
}

impl Client {
    /// Whether new files are encrypted by default in this cluster (SPEC H3).
    pub fn encrypts_new_files(&self) -> Result<bool> {
        Ok(self.cluster_map()?.encrypt_new_files)
    }

    /// Which tree level key requests ask for (SPEC H8): 0 (default) asks for one
    /// aggregated key per 4 TiB region; deeper levels ask for more, smaller keys.
    pub fn set_key_level(&mut self, level: u8) {
        self.key_level = level;
    }

    /// At levels too deep for one request to cover a whole file, how many bytes past a
    /// read or write a key request also asks for (SPEC H8 prefetching; default 0: each
    /// read or write window asks for its own keys).
    pub fn set_key_prefetch(&mut self, bytes: u64) {
        self.key_prefetch = bytes;
    }

    /// Whether a put with this choice (`None`: the cluster's default) creates files
    /// encrypted (SPEC H3); asking for encryption where the cluster has no KDS is an
    /// error.
    pub(crate) fn seals_new_files(&self, encrypt: Option<bool>) -> Result<bool> {
        if self.insecure_user.is_some() && encrypt == Some(true) {
            return Err(ClientError::InvalidArgument(
                "a NOSEC client encrypts nothing: --encrypt needs a logged-in user".into(),
            ));
        }
        if self.insecure_user.is_some() || encrypt == Some(false) {
            return Ok(false);
        }
        let map = self.cluster_map()?;
        match (encrypt, map.kds_keys.is_some()) {
            (Some(true), false) => Err(ClientError::NoKds(NO_KDS.into())),
            (Some(true), true) => Ok(true),
            (_, kds) => Ok(kds && map.encrypt_new_files),
        }
    }

    /// Opens `path` for reading and writing, creating it (permission bits `mode`)
    /// encrypted with its lockbox to come (`OpenSealed`, SPEC H5) if it does not exist;
    /// an MDS from before `OpenSealed` gets a plain `Open` (the caller's `SetLockbox`
    /// then makes the file encrypted).
    pub(crate) fn open_sealed(&self, path: &str, mode: u16) -> Result<Opened> {
        self.stats.lock().capability_cache_misses += 1;
        let response = self.mds_call(MdsRequest::OpenSealed {
            path: path.into(),
            access: Access::ReadWrite,
            create: Some(mode),
        });
        match response {
            Err(e) if e.code() == Some(ErrorCode::Malformed) => {
                self.open(path, Access::ReadWrite, Some(mode))
            }
            other => self.opened_from(other?),
        }
    }

    /// Records the size and write generations of `opened`, a file created encrypted,
    /// with its first `lockbox` (`SetSizeLockbox`). If that fails, the keys made with
    /// the lockbox are dropped: the root key is nobody's unless its lockbox was recorded
    /// (another writer's may have been), so they must not seal a later write.
    pub(crate) fn set_size_lockbox(
        &self,
        path: &str,
        opened: &Opened,
        size: u64,
        written: Vec<(u32, u32, u64)>,
        lockbox: Vec<u8>,
    ) -> Result<()> {
        let recorded = self.expect_ok(MdsRequest::SetSizeLockbox {
            path: path.into(),
            file: opened.stat.id,
            size,
            written,
            lockbox,
        });
        if recorded.is_err() {
            self.file_keys.lock().remove(&(opened.stat.id, 1));
        }
        recorded
    }

    /// SPEC H5: for an opened file of this user created encrypted whose lockbox is still
    /// to come, a fresh root key and its lockbox (sealed to the KDS and to the owner),
    /// which `opened` then shows and the writer sends with the size
    /// (`SetSizeLockbox`); `None` for any other file.
    pub(crate) fn seal_pending(&self, opened: &mut Opened) -> Result<Option<Vec<u8>>> {
        let pending = opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending());
        if !pending || self.user_name().as_deref() != Some(opened.stat.owner.as_str()) {
            return Ok(None);
        }
        let (lockbox, root, shape) = self.first_tree(opened.stat.id)?;
        if let Some(crypt) = &mut opened.stat.crypt {
            crypt.lockbox = lockbox.clone();
        }
        self.hold_root_keys(opened, 1, shape, &root)?;
        Ok(Some(lockbox))
    }

    /// SPEC H5: makes `opened` (an empty file without a lockbox, owned by this user) an
    /// encrypted file: a fresh root key, sealed to the KDS and to the owner, stored at
    /// the MDS. Updates `opened` to match.
    pub fn make_encrypted(&self, path: &str, opened: &mut Opened) -> Result<()> {
        let (lockbox, root, shape) = self.first_tree(opened.stat.id)?;
        // The answer is a new read-write open: the file's protection method changed with
        // the lockbox (CMDRSP instead of ALLDATA), and so does the capability.
        let response = self.mds_call(MdsRequest::SetLockbox {
            path: path.into(),
            file: opened.stat.id,
            lockbox,
        })?;
        let reopened = self.opened_from(response)?;
        if reopened.stat.id != opened.stat.id || reopened.stat.crypt.is_none() {
            return Err(self.bad("mds", "the lockbox answer names another file"));
        }
        self.forget_opened_path(path);
        self.hold_root_keys(&reopened, 1, shape, &root)?;
        *opened = reopened;
        Ok(())
    }

    /// The lockbox, root key and shape of a new encrypted file's first key tree.
    fn first_tree(&self, file: u64) -> Result<(Vec<u8>, Secret32, KhtShape)> {
        let kds = self.kds_keys("files cannot be encrypted")?;
        let shape = encrypted::file_shape();
        let (lockbox, root) = self.new_tree(file, 1, &shape, &kds)?;
        Ok((lockbox, root, shape))
    }

    /// A fresh root key for version `version` of `file`'s key tree and its lockbox,
    /// for the KDS and for this user (the owner), encoded: a keyed lockbox (PROTOCOL.md
    /// 0x14), with no public-key operation once this login's lockbox keys are made.
    pub(crate) fn new_tree(
        &self,
        file: u64,
        version: u32,
        shape: &KhtShape,
        kds: &maat_proto::msg::KdsKeys,
    ) -> Result<(Vec<u8>, Secret32)> {
        let keys = self.lockbox_keys(&kds.sealing_key)?;
        let mut root = [0u8; 32];
        self.key_rng().fill_bytes(&mut root);
        let root = Secret32::from_bytes(root);
        let lockbox = Lockbox::seal_keyed(
            maat_proto::FileId(file),
            version,
            shape.clone(),
            &root,
            &keys,
            &mut self.key_rng(),
        )
        .map_err(local_token)?
        .encode();
        Ok((lockbox, root))
    }

    /// The owner's keys for keyed lockboxes under KDS key `kds` (one X25519 agreement
    /// per login and KDS key, then kept).
    fn lockbox_keys(&self, kds: &[u8; 32]) -> Result<LockboxKeys> {
        let owner = self.owner_secret()?;
        // (Named by a hash of the owner's secret: its public key would cost an X25519
        // operation to compute.)
        let mine = maat_crypto::hash::blake3(&[b"maat/lockbox-keys-owner", &owner.to_bytes()[..]]);
        if let Some((k, m, keys)) = &*self.lockbox_keys.lock() {
            if k == kds && *m == mine {
                return Ok(keys.clone());
            }
        }
        let keys =
            LockboxKeys::new(&owner, &maat_crypto::seal::SealingPublicKey(*kds)).map_err(|e| {
                ClientError::Token {
                    what: "KDS key in the cluster map",
                    source: e,
                }
            })?;
        *self.lockbox_keys.lock() = Some((*kds, mine, keys.clone()));
        Ok(keys)
    }

    /// The maker of a tree knows its root key: it derives the level-0 keys (held as
    /// long as `opened`'s capability lasts, as a grant would be), so writing costs no key
    /// request whatever level it would ask a KDS for.
    pub(crate) fn hold_root_keys(
        &self,
        opened: &Opened,
        version: u32,
        shape: KhtShape,
        root: &Secret32,
    ) -> Result<()> {
        let keys = nodes_at(&shape, 0)?
            .into_iter()
            .map(|(level, index)| {
                let node = Node { level, index };
                shape
                    .node_key_from_root(root, node)
                    .map(|key| RangeKey { node, key })
                    .map_err(|source| ClientError::Crypto {
                        what: "key tree",
                        source,
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let expiry = Unverified::<Capability>::decode(&opened.capability)
            .map(|c| c.unverified_body().expiry.0)
            .unwrap_or(0);
        self.hold_keys(
            opened.stat.id,
            HeldKeys {
                tree_version: version,
                shape,
                keys,
                expiry,
            },
        );
        Ok(())
    }

    /// The owner key lockboxes are sealed to: derived from the OPAQUE export key of the
    /// user's passphrase, so the same on every machine and never known to the MDS.
    fn owner_secret(&self) -> Result<maat_crypto::seal::SealingSecretKey> {
        let seed = self
            .with_session(|s| s.owner_secret.clone())?
            .ok_or_else(|| {
                ClientError::Config(
                    "this session predates encryption: log in again (`maat login`)".into(),
                )
            })?;
        Ok(maat_crypto::seal::SealingSecretKey::from_bytes(
            *seed.expose(),
        ))
    }

    /// The owner's own way to a file's root key, without a KDS (SPEC H5).
    pub fn open_lockbox_as_owner(&self, lockbox: &[u8]) -> Result<Secret32> {
        let owner = self.owner_secret()?;
        Lockbox::decode(lockbox)
            .and_then(|l| l.open_as_owner(&owner))
            .map(|o| o.root_key)
            .map_err(|e| ClientError::Token {
                what: "lockbox",
                source: e,
            })
    }

    /// What sealing and opening stripes `stripes` of `opened` (an encrypted file) needs:
    /// keys of its current tree, and of each earlier tree some of those stripes are still
    /// sealed under (SPEC H7), asking a KDS when the held ones do not cover those stripes
    /// (of what this user may read) or expired; keys fetched are added to those held.
    pub(crate) fn stripe_crypt(
        &self,
        opened: &Opened,
        stripes: std::ops::Range<u32>,
    ) -> Result<StripeCrypt> {
        let (crypt, lockbox) = lockbox_of(opened)?;
        let file = opened.stat.id;
        let first = u64::from(stripes.start) * STRIPE_UNIT_BYTES;
        let end = u64::from(stripes.end.max(stripes.start + 1)) * STRIPE_UNIT_BYTES;
        let permit = Self::granted_ranges(opened)?;
        let permit = permit.as_deref();
        let held = self.tree_keys(opened, &crypt.lockbox, &lockbox, permit, first, end)?;
        let mut earlier: Vec<HeldKeys> = Vec::new();
        for (run, version) in crypt.stripes_on_earlier(stripes.end.max(stripes.start + 1)) {
            if run.end <= stripes.start || earlier.iter().any(|h| h.tree_version == version) {
                continue;
            }
            let bytes = crypt
                .earlier_lockbox(version)
                .ok_or_else(|| self.bad("mds", "a stripe names a key tree without its lockbox"))?;
            let old = Lockbox::decode(bytes).map_err(local_token)?;
            if old.file.0 != file || old.tree_version != version {
                return Err(self.bad("mds", "an earlier lockbox names another file or version"));
            }
            earlier.push(self.tree_keys(opened, bytes, &old, permit, first, end)?);
        }
        Ok(StripeCrypt {
            file,
            held,
            earlier,
            crypt: crypt.clone(),
        })
    }

    /// [`Client::stripe_crypt`] for the first read window of `opened`, with the key
    /// request (when one is needed) sent but not awaited, so that the window's stripes
    /// can be read meanwhile (one round trip instead of two before the first bytes);
    /// [`Client::stripe_crypt_end`] finishes it. Only for stripes all under the current
    /// key tree (a rekey in progress asks the usual way).
    pub(crate) fn stripe_crypt_begin(
        &self,
        opened: &Opened,
        stripes: std::ops::Range<u32>,
    ) -> Result<FirstKeys> {
        let (crypt, lockbox) = lockbox_of(opened)?;
        let end_stripe = stripes.end.max(stripes.start + 1);
        let first = u64::from(stripes.start) * STRIPE_UNIT_BYTES;
        let end = u64::from(end_stripe) * STRIPE_UNIT_BYTES;
        let permit = Self::granted_ranges(opened)?;
        let (valid, needed) = self.held_tree_keys(opened, &lockbox, permit.as_deref(), first, end);
        let current_only = crypt
            .stripes_on_earlier(end_stripe)
            .iter()
            .all(|(run, _)| run.end <= stripes.start);
        if !current_only || needed.is_empty() || valid.as_ref().is_some_and(|h| h.covers(&needed)) {
            return self.stripe_crypt(opened, stripes).map(FirstKeys::Ready);
        }
        let nodes = self.wanted_nodes(&lockbox.shape, permit.as_deref(), first, end)?;
        let lockbox_bytes = crypt.lockbox.clone();
        let pending = self.send_key_request(opened, &lockbox_bytes, nodes)?;
        Ok(FirstKeys::Pending(pending))
    }

    /// The [`StripeCrypt`] [`Client::stripe_crypt_begin`] began: the answer of its key
    /// request read and checked, the keys added to those held.
    pub(crate) fn stripe_crypt_end(
        &self,
        opened: &Opened,
        begun: FirstKeys,
    ) -> Result<StripeCrypt> {
        let pending = match begun {
            FirstKeys::Ready(crypt) => return Ok(crypt),
            FirstKeys::Pending(pending) => pending,
        };
        let (crypt, lockbox) = lockbox_of(opened)?;
        let fetched = self.finish_key_request(opened, &crypt.lockbox, &lockbox, pending)?;
        let valid = self.held_now(opened.stat.id, lockbox.tree_version);
        let held = self.hold_fetched(opened.stat.id, valid, fetched);
        Ok(StripeCrypt {
            file: opened.stat.id,
            held,
            earlier: Vec::new(),
            crypt: crypt.clone(),
        })
    }

    /// The held keys of the tree `lockbox` opens of `opened` that have more than a second
    /// left, and the byte ranges of `first..end` this user needs keys for (inside its
    /// `permit` ranges; all without one).
    fn held_tree_keys(
        &self,
        opened: &Opened,
        lockbox: &Lockbox,
        permit: Option<&[(u64, u64)]>,
        first: u64,
        end: u64,
    ) -> (Option<HeldKeys>, Vec<(u64, u64)>) {
        let needed = clip(permit, first, end);
        (self.held_now(opened.stat.id, lockbox.tree_version), needed)
    }

    /// The keys held of tree `version` of `file` that have more than a second left.
    fn held_now(&self, file: u64, version: u32) -> Option<HeldKeys> {
        let now = self.clock.now();
        self.file_keys
            .lock()
            .get(&(file, version))
            .filter(|h| h.expiry > now + 1000)
            .cloned()
    }

    /// Keys just `fetched` for `file`, added to those of the same tree still held
    /// (`valid`), kept, and returned.
    fn hold_fetched(&self, file: u64, valid: Option<HeldKeys>, fetched: HeldKeys) -> HeldKeys {
        let held = match valid {
            Some(mut h) => {
                h.absorb(fetched);
                h
            }
            None => fetched,
        };
        self.hold_keys(file, held.clone());
        held
    }

    /// The keys of one tree of `opened` (the one `lockbox` opens) for bytes `first..end`,
    /// of which this user may read the parts inside its `permit` ranges (all without
    /// one): held ones if they cover those, else fetched.
    fn tree_keys(
        &self,
        opened: &Opened,
        lockbox_bytes: &[u8],
        lockbox: &Lockbox,
        permit: Option<&[(u64, u64)]>,
        first: u64,
        end: u64,
    ) -> Result<HeldKeys> {
        let (valid, needed) = self.held_tree_keys(opened, lockbox, permit, first, end);
        let now = self.clock.now();
        Ok(match valid {
            Some(h) if h.covers(&needed) => h,
            valid if needed.is_empty() => valid.unwrap_or_else(|| HeldKeys {
                // Nothing here may be read: opening any block names it as not granted.
                tree_version: lockbox.tree_version,
                shape: lockbox.shape.clone(),
                keys: Vec::new(),
                expiry: now,
            }),
            valid => {
                let nodes = self.wanted_nodes(&lockbox.shape, permit, first, end)?;
                let fetched = self.fetch_keys(opened, lockbox_bytes, lockbox, nodes)?;
                self.hold_fetched(opened.stat.id, valid, fetched)
            }
        })
    }

    /// The byte ranges `opened` may be read in by this user: `None` when the whole file
    /// may, else the ranges its owner granted (SPEC H6).
    pub fn granted_ranges(opened: &Opened) -> Result<Option<Vec<(u64, u64)>>> {
        opened
            .stat
            .key_ranges
            .as_deref()
            .map(|b| {
                Unverified::<KeyRanges>::decode(b)
                    .map(|p| p.unverified_body().ranges.clone())
                    .map_err(local_token)
            })
            .transpose()
    }
}

/// An encrypted file's crypt record (from its open) and its lockbox, decoded.
pub(crate) fn lockbox_of(opened: &Opened) -> Result<(&FileCrypt, Lockbox)> {
    let crypt = opened
        .stat
        .crypt
        .as_ref()
        .ok_or_else(|| ClientError::InvalidArgument("file is not encrypted".into()))?;
    if crypt.is_pending() {
        return Err(ClientError::Keys(format!(
            "file {} is encrypted and its lockbox is still to come: its owner's put has \
             not finished (the owner's next put or write of it finishes it)",
            opened.stat.id
        )));
    }
    let lockbox = Lockbox::decode(&crypt.lockbox).map_err(local_token)?;
    Ok((crypt, lockbox))
}

/// Why a file cannot be made encrypted here.
const NO_KDS: &str = "this cluster has no KDS: files cannot be encrypted";

pub use crate::limits::HELD_KEYS_PER_FILE_MAX;

pub use crate::limits::FILE_KEYS_CACHED_MAX;
