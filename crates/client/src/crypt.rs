//! SPEC H3–H5, H8 on the client: encrypted files. The client makes a new file's root key
//! and lockbox (sealed to the KDS and to the owner), asks a KDS for range keys with what
//! the MDS gave it at open (ticket, capability, lockbox), derives leaf keys locally, and
//! seals and opens stripes (`maat_proto::encrypted`). OSDs and the MDS never see a key
//! or a plaintext byte of an encrypted file.

use super::*;
use maat_crypto::kht::{KhtShape, Node, RangeKey};
use maat_proto::capability::{Capability, Files, Principals};
use maat_proto::encrypted::{self, BlockFailure, FileCrypt, LeafKeys, StripeContext};
use maat_proto::horus::{Lockbox, RangeGrant};
use maat_proto::key_ranges::KeyRanges;
use maat_proto::merkle_msg::SetKind;
use maat_proto::msg::{FileKeysRequest, KdsRequest, KdsResponse};

/// Range keys held for one file.
#[derive(Clone)]
pub(crate) struct HeldKeys {
    tree_version: u32,
    pub(crate) shape: KhtShape,
    pub(crate) keys: Vec<RangeKey>,
    expiry: u64,
}

/// What sealing or opening a stripe needs: the file's keys and its generations.
pub(crate) struct StripeCrypt {
    file: u64,
    held: HeldKeys,
    pub(crate) crypt: FileCrypt,
}

impl StripeCrypt {
    /// The leaf size (plaintext bytes per block).
    pub(crate) fn leaf_bytes(&self) -> u64 {
        self.held.shape.leaf_size_bytes()
    }

    fn context(&self, stripe: u32, generation: u64) -> StripeContext {
        StripeContext {
            file: self.file,
            tree_version: self.held.tree_version,
            stripe,
            generation,
        }
    }

    /// Seals a stripe under `generation`.
    pub(crate) fn seal(
        &self,
        stripe: u32,
        generation: u64,
        plain: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>> {
        let mut keys = LeafKeys::new(&self.held.shape, &self.held.keys).map_err(local_token)?;
        encrypted::seal_stripe(&mut keys, &self.context(stripe, generation), plain, rng)
            .map_err(|f| integrity(self.file, f))
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
        let mut keys = LeafKeys::new(&self.held.shape, &self.held.keys).map_err(local_token)?;
        let context = self.context(stripe, self.crypt.generation(stripe));
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
    pub fn encrypts_new_files(&mut self) -> Result<bool> {
        Ok(self.cluster_map()?.encrypt_new_files)
    }

    /// Which tree level key requests ask for (SPEC H8): 0 (default) asks for one
    /// aggregated key per 4 TiB region; deeper levels ask for more, smaller keys.
    pub fn set_key_level(&mut self, level: u8) {
        self.key_level = level;
    }

    /// SPEC H5: makes `opened` (an empty file without a lockbox, owned by this user) an
    /// encrypted file: a fresh root key, sealed to the KDS and to the owner, stored at
    /// the MDS. Updates `opened` to match.
    pub fn make_encrypted(&mut self, path: &str, opened: &mut Opened) -> Result<()> {
        let kds = self.cluster_map()?.kds_keys.ok_or_else(|| {
            ClientError::Local("this cluster has no KDS: files cannot be encrypted".into())
        })?;
        let owner = self.owner_secret()?;
        let mut root = [0u8; 32];
        OsRng.fill_bytes(&mut root);
        let root = Secret32::from_bytes(root);
        let shape = encrypted::file_shape();
        let lockbox = Lockbox::seal(
            maat_proto::FileId(opened.stat.id),
            1,
            shape.clone(),
            &root,
            &maat_crypto::seal::SealingPublicKey(kds.sealing_key),
            &owner.public_key(),
            &mut OsRng,
        )
        .map_err(local_token)?
        .encode();
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
        // The creator knows the root key: it derives the keys it would ask a KDS for
        // (held as long as the capability lasts, as a grant would be), so writing a new
        // file costs no key request.
        let keys = self
            .wanted_nodes(&shape, None)?
            .into_iter()
            .map(|(level, index)| {
                let node = Node { level, index };
                shape
                    .node_key_from_root(&root, node)
                    .map(|key| RangeKey { node, key })
                    .map_err(|e| ClientError::Local(format!("key tree: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let expiry = Unverified::<Capability>::decode(&reopened.capability)
            .map(|c| c.unverified_body().expiry.0)
            .unwrap_or(0);
        self.hold_keys(
            reopened.stat.id,
            HeldKeys {
                tree_version: 1,
                shape,
                keys,
                expiry,
            },
        );
        *opened = reopened;
        Ok(())
    }

    /// The owner key lockboxes are sealed to: derived from the OPAQUE export key of the
    /// user's passphrase, so the same on every machine and never known to the MDS.
    fn owner_secret(&self) -> Result<maat_crypto::seal::SealingSecretKey> {
        let s = self.session.as_ref().ok_or(ClientError::NotLoggedIn)?;
        let seed = s.owner_secret.ok_or_else(|| {
            ClientError::Local(
                "this session predates encryption: log in again (`maat login`)".into(),
            )
        })?;
        Ok(maat_crypto::seal::SealingSecretKey::from_bytes(seed))
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

    /// What sealing and opening stripes of `opened` (an encrypted file) needs, asking a
    /// KDS for keys the first time and when the held ones expired.
    pub(crate) fn stripe_crypt(&mut self, opened: &Opened) -> Result<StripeCrypt> {
        let (crypt, lockbox) = lockbox_of(opened)?;
        let file = opened.stat.id;
        let now = local_now();
        let held = match self.file_keys.get(&file) {
            Some(h) if h.tree_version == lockbox.tree_version && h.expiry > now + 1000 => h.clone(),
            _ => {
                let held = self.fetch_keys(opened, &crypt.lockbox, &lockbox)?;
                self.hold_keys(file, held.clone());
                held
            }
        };
        Ok(StripeCrypt {
            file,
            held,
            crypt: crypt.clone(),
        })
    }

    /// The nodes a key request asks for: with a key-range permit (SPEC H6), those that
    /// cover its ranges, none above level `key_level`; otherwise the nodes of level
    /// `key_level` that cover a whole file (every byte up to `FILE_BYTES_MAX`, so a
    /// writer extending the file needs no new request).
    fn wanted_nodes(&self, shape: &KhtShape, permit: Option<&[u8]>) -> Result<Vec<(u8, u64)>> {
        match permit {
            None => nodes_at(shape, self.key_level),
            Some(bytes) => {
                let permit = Unverified::<KeyRanges>::decode(bytes).map_err(local_token)?;
                range_nodes(shape, &permit.unverified_body().ranges, self.key_level)
            }
        }
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
fn lockbox_of(opened: &Opened) -> Result<(&FileCrypt, Lockbox)> {
    let crypt = opened
        .stat
        .crypt
        .as_ref()
        .ok_or_else(|| ClientError::Local("file is not encrypted".into()))?;
    let lockbox = Lockbox::decode(&crypt.lockbox).map_err(local_token)?;
    Ok((crypt, lockbox))
}

/// One file of a key request: its open, its lockbox as the MDS handed it out, and the
/// key tree nodes wanted.
type KeyAsk<'a> = (&'a Opened, &'a [u8], Vec<(u8, u64)>);

/// The nodes of `level` (at most the leaf level) covering every byte a file may hold.
fn nodes_at(shape: &KhtShape, level: u8) -> Result<Vec<(u8, u64)>> {
    let level = level.min(shape.leaf_level());
    let first = shape
        .node_at(level, 0)
        .map_err(|e| ClientError::Local(e.to_string()))?;
    let last = shape
        .node_at(level, maat_proto::limits::FILE_BYTES_MAX - 1)
        .map_err(|e| ClientError::Local(e.to_string()))?;
    let n = last.index - first.index + 1;
    if n > maat_proto::limits::RANGE_GRANT_NODES_MAX as u64 {
        return Err(ClientError::Local(format!(
            "key level {level} needs {n} keys per file (at most {}): choose a level nearer the root",
            maat_proto::limits::RANGE_GRANT_NODES_MAX
        )));
    }
    Ok((first.index..=last.index).map(|i| (level, i)).collect())
}

/// The nodes covering byte `ranges` (ascending, disjoint), split down to `level` where
/// the minimal cover holds larger nodes (SPEC H8 for range grants).
fn range_nodes(shape: &KhtShape, ranges: &[(u64, u64)], level: u8) -> Result<Vec<(u8, u64)>> {
    let level = level.min(shape.leaf_level());
    let tree = |e: maat_crypto::CryptoError| ClientError::Local(format!("key tree: {e}"));
    let mut out = Vec::new();
    for &(start, end) in ranges {
        let end = end.min(maat_proto::limits::FILE_BYTES_MAX);
        if start >= end {
            continue;
        }
        for node in shape.cover(start, end).map_err(tree)? {
            if node.level >= level {
                out.push((node.level, node.index));
                continue;
            }
            let (a, b) = shape.bytes_under(node).map_err(tree)?;
            let first = shape.node_at(level, a).map_err(tree)?.index;
            let last = shape.node_at(level, b - 1).map_err(tree)?.index;
            out.extend((first..=last).map(|i| (level, i)));
            if out.len() > maat_proto::limits::RANGE_GRANT_NODES_MAX {
                break;
            }
        }
    }
    if out.len() > maat_proto::limits::RANGE_GRANT_NODES_MAX {
        return Err(ClientError::Local(format!(
            "key level {level} needs more than {} keys for the granted ranges: choose a level nearer the root",
            maat_proto::limits::RANGE_GRANT_NODES_MAX
        )));
    }
    Ok(out)
}

impl Client {
    fn fetch_keys(
        &mut self,
        opened: &Opened,
        lockbox_bytes: &[u8],
        lockbox: &Lockbox,
    ) -> Result<HeldKeys> {
        let nodes = self.wanted_nodes(&lockbox.shape, opened.stat.key_ranges.as_deref())?;
        let mut held = self.key_request(&[(opened, lockbox_bytes, nodes)])?;
        let held = match held.pop() {
            Some(Ok(h)) if held.is_empty() => h,
            Some(Err(e)) => return Err(e),
            _ => return Err(self.bad("kds", "one grant expected")),
        };
        if lockbox.file.0 != opened.stat.id
            || held.tree_version != lockbox.tree_version
            || held.shape != lockbox.shape
        {
            return Err(self.bad("kds", "the grant is for another file, version or shape"));
        }
        Ok(held)
    }

    /// One key request to a KDS for several files, each with the nodes wanted; one
    /// answer per file (the keys, checked: sealed to this login and signed by the KDS,
    /// for that file, or the KDS's refusal).
    fn key_request(&mut self, files: &[KeyAsk<'_>]) -> Result<Vec<Result<HeldKeys>>> {
        let map = self.cluster_map()?;
        let kds_keys = map.kds_keys.ok_or_else(|| {
            ClientError::Local("this cluster has no KDS: encrypted files cannot be read".into())
        })?;
        let session = self.session.as_ref().ok_or(ClientError::NotLoggedIn)?;
        let ticket = session.ticket.clone();
        let sealing = maat_crypto::seal::SealingSecretKey::from_bytes(session.sealing_secret);
        let mut wanted = Vec::with_capacity(files.len());
        for (opened, lockbox, nodes) in files {
            wanted.push(FileKeysRequest {
                capability: opened.capability.clone(),
                lockbox: lockbox.to_vec(),
                trees: self.capability_trees(&opened.capability)?,
                nodes: nodes.clone(),
                key_ranges: opened.stat.key_ranges.clone(),
            });
        }
        let first = files.first().map_or(0, |(o, _, _)| o.stat.id);
        let payload = msg::encode(&KdsRequest::Keys {
            ticket,
            files: wanted,
        })
        .map_err(|e| ClientError::Local(e.to_string()))?;
        let grants = self.kds_call(first, &payload)?;
        if grants.len() != files.len() {
            return Err(self.bad("kds", "one grant per file expected"));
        }
        let kds_key = VerifyingKey::from_bytes(&kds_keys.verifying_key)
            .map_err(|e| ClientError::Local(format!("KDS key in the cluster map: {e}")))?;
        let now = UnixMillis(local_now());
        let token = |e| ClientError::Token {
            what: "range-key grant",
            source: e,
        };
        Ok(grants
            .into_iter()
            .zip(files)
            .map(|(grant, (opened, _, _))| {
                let grant =
                    RangeGrant::decode(&grant.map_err(ClientError::Refused)?).map_err(token)?;
                let open = grant.open(&sealing, &kds_key, now).map_err(token)?;
                if open.file.0 != opened.stat.id {
                    return Err(ClientError::BadAnswer {
                        address: "kds".into(),
                        reason: "a grant for another file".into(),
                    });
                }
                Ok(HeldKeys {
                    tree_version: open.tree_version,
                    shape: open.shape,
                    keys: open.keys,
                    expiry: grant.expiry.0,
                })
            })
            .collect())
    }

    /// Asks a KDS, in one request, for the keys of several opened encrypted files at tree
    /// level `level` (each file's nodes of that level up to the largest file size, as
    /// reads do); keeps nothing. Returns how many keys were granted, each grant checked.
    /// `maat bench kds` measures the KDS with it.
    pub fn request_keys_batch(&mut self, files: &[Opened], level: u8) -> Result<usize> {
        let mut parts = Vec::with_capacity(files.len());
        for opened in files {
            let (crypt, lockbox) = lockbox_of(opened)?;
            parts.push((
                opened,
                crypt.lockbox.as_slice(),
                nodes_at(&lockbox.shape, level)?,
            ));
        }
        let mut keys = 0;
        for held in self.key_request(&parts)? {
            keys += held?.keys.len();
        }
        Ok(keys)
    }

    /// The Merkle tree messages a capability's sets need (SPEC M4), from the MDS.
    fn capability_trees(&mut self, capability: &[u8]) -> Result<Vec<Vec<u8>>> {
        let Ok(body) =
            Unverified::<Capability>::decode(capability).map(|c| c.unverified_body().clone())
        else {
            return Ok(Vec::new());
        };
        let mut trees = Vec::new();
        if let Principals::UserTree(root) = body.users {
            trees.push(self.tree(SetKind::Users, root)?);
        }
        if let Files::FileTree(root) = body.files {
            trees.push(self.tree(SetKind::Files, root)?);
        }
        Ok(trees)
    }

    /// Sends a key request to a KDS: the instances in turn from one picked by file (so
    /// load spreads over them), the next when one cannot be reached. Returns the grants.
    fn kds_call(
        &mut self,
        file: u64,
        payload: &[u8],
    ) -> Result<Vec<std::result::Result<Vec<u8>, WireError>>> {
        let kds = self.cluster_map()?.kds;
        let n = kds.len();
        if n == 0 {
            return Err(ClientError::Local("the cluster map lists no KDS".into()));
        }
        let mut last = None;
        for i in 0..n {
            let Some(entry) = kds.get((file as usize + i) % n) else {
                continue;
            };
            let address = entry.address.clone();
            let conn = self
                .kds_connections
                .entry(address.clone())
                .or_insert_with(|| Connection::new(address.clone()));
            match conn.call(FrameType::Plain, payload) {
                Ok((FrameType::Plain, answer)) => {
                    return match decode_answer::<KdsResponse>(&address, &answer)? {
                        KdsResponse::Grants(grants) => Ok(grants),
                        _ => Err(self.bad(&address, "unexpected KDS answer")),
                    };
                }
                Ok((_, answer)) => return Err(refusal(&address, &answer)),
                Err(source) => {
                    self.kds_connections.remove(&address);
                    last = Some(ClientError::Net { address, source });
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Local("no KDS reachable".into())))
    }

    /// Counters of every KDS in the cluster map (`daemon` names it by address; one that
    /// cannot be reached says so).
    pub(crate) fn kds_stats(&mut self) -> Result<Vec<DaemonStats>> {
        let payload =
            msg::encode(&KdsRequest::Stats).map_err(|e| ClientError::Local(e.to_string()))?;
        let mut out = Vec::new();
        for entry in self.cluster_map()?.kds {
            let address = entry.address.clone();
            let conn = self
                .kds_connections
                .entry(address.clone())
                .or_insert_with(|| Connection::new(address.clone()));
            let stats = match conn.call(FrameType::Plain, &payload) {
                Ok((FrameType::Plain, answer)) => {
                    match decode_answer::<KdsResponse>(&address, &answer) {
                        Ok(KdsResponse::Stats(mut s)) => {
                            s.daemon = format!("kds {address}");
                            s
                        }
                        Ok(_) => return Err(self.bad(&address, "unexpected KDS answer")),
                        Err(e) => DaemonStats {
                            daemon: format!("kds {address} (refused: {e})"),
                            counters: vec![],
                        },
                    }
                }
                Ok(_) => return Err(self.bad(&address, "unexpected KDS frame")),
                Err(e) => {
                    self.kds_connections.remove(&address);
                    DaemonStats {
                        daemon: format!("kds {address} (unreachable: {e})"),
                        counters: vec![],
                    }
                }
            };
            out.push(stats);
        }
        Ok(out)
    }

    /// Asks a KDS for `opened`'s range keys now (held ones are not used) and returns how
    /// many it granted; the keys are kept for the file's next reads and writes.
    pub fn request_file_keys(&mut self, opened: &Opened) -> Result<usize> {
        let (crypt, lockbox) = lockbox_of(opened)?;
        let held = self.fetch_keys(opened, &crypt.lockbox, &lockbox)?;
        let n = held.keys.len();
        self.hold_keys(opened.stat.id, held);
        Ok(n)
    }

    /// Keeps `held` as `file`'s keys (at most [`FILE_KEYS_CACHED_MAX`] files' at once).
    fn hold_keys(&mut self, file: u64, held: HeldKeys) {
        if self.file_keys.len() >= FILE_KEYS_CACHED_MAX {
            self.file_keys.clear();
        }
        self.file_keys.insert(file, held);
    }

    /// Forgets every held range key (tests and benchmarks measure fetching them).
    pub fn forget_file_keys(&mut self) {
        self.file_keys.clear();
    }
}

/// Most files whose range keys a client holds at once.
pub const FILE_KEYS_CACHED_MAX: usize = 4096;
