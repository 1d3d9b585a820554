//! SPEC H4, H8 on the client: which key tree nodes to ask for (a whole file at shallow
//! levels, the ranges of a key-range permit, or a read's window and what to prefetch at
//! deep ones), the key requests to the KDS instances (spread by file, failing over), the
//! checks on their grants, and the range keys held per file.

use super::*;
use crate::crypt::{lockbox_of, HeldKeys};
use maat_crypto::kht::KhtShape;
use maat_proto::capability::{Capability, Files, Principals};
use maat_proto::horus::{GrantKey, Lockbox, RangeGrant};
use maat_proto::merkle_msg::SetKind;
use maat_proto::msg::{FileKeysRequest, KdsRequest, KdsResponse};

fn key_tree(source: maat_crypto::CryptoError) -> ClientError {
    ClientError::Crypto {
        what: "key tree",
        source,
    }
}

impl Client {
    /// The nodes a key request asks for (SPEC H8) when bytes `first..end` are needed: the
    /// nodes of level `key_level` that cover a whole file when there are few enough
    /// (every byte up to `FILE_BYTES_MAX`, so a writer extending the file needs no new
    /// request), or cover every range of a key-range permit (SPEC H6); otherwise, at
    /// deeper levels, the nodes covering `first..end` and the next `key_prefetch` bytes
    /// (of what the permit allows), at most one request's worth.
    pub(crate) fn wanted_nodes(
        &self,
        shape: &KhtShape,
        permit: Option<&[(u64, u64)]>,
        first: u64,
        end: u64,
    ) -> Result<Vec<(u8, u64)>> {
        let everything = match permit {
            None => nodes_at(shape, self.key_level).ok(),
            Some(ranges) => range_nodes(shape, ranges, self.key_level).ok(),
        };
        if let Some(all) = everything {
            return Ok(all);
        }
        let mut nodes = range_nodes(shape, &clip(permit, first, end), self.key_level)?;
        let until = end
            .saturating_add(self.key_prefetch)
            .min(maat_proto::limits::FILE_BYTES_MAX);
        if until > end {
            let room = maat_proto::limits::RANGE_GRANT_NODES_MAX - nodes.len();
            let ahead = clip(permit, end, until);
            let mut more = range_nodes_upto(shape, &ahead, self.key_level, room)?;
            nodes.append(&mut more);
        }
        Ok(nodes)
    }
}

/// One file of a key request: its open, its lockbox as the MDS handed it out, and the
/// key tree nodes wanted.
type KeyAsk<'a> = (&'a Opened, &'a [u8], Vec<(u8, u64)>);

/// A key request in flight (SPEC H4): sent to a KDS, its answer not read yet.
pub(crate) struct PendingKeys {
    /// The connection it was sent on (`None`: not sent).
    sent: Option<Connection>,
    request: KdsRequest,
    nodes: Vec<(u8, u64)>,
}

/// The nodes of `level` (at most the leaf level) covering every byte a file may hold.
pub(crate) fn nodes_at(shape: &KhtShape, level: u8) -> Result<Vec<(u8, u64)>> {
    let level = level.min(shape.leaf_level());
    let first = shape.node_at(level, 0).map_err(key_tree)?;
    let last = shape
        .node_at(level, maat_proto::limits::FILE_BYTES_MAX - 1)
        .map_err(key_tree)?;
    let n = last.index - first.index + 1;
    if n > maat_proto::limits::RANGE_GRANT_NODES_MAX as u64 {
        return Err(ClientError::Keys(format!(
            "key level {level} needs {n} keys per file (at most {}): choose a level nearer the root",
            maat_proto::limits::RANGE_GRANT_NODES_MAX
        )));
    }
    Ok((first.index..=last.index).map(|i| (level, i)).collect())
}

/// The parts of `first..end` inside `ranges` (all of it without ranges).
pub(crate) fn clip(ranges: Option<&[(u64, u64)]>, first: u64, end: u64) -> Vec<(u64, u64)> {
    match ranges {
        None if first < end => vec![(first, end)],
        None => Vec::new(),
        Some(ranges) => ranges
            .iter()
            .map(|&(a, b)| (a.max(first), b.min(end)))
            .filter(|(a, b)| a < b)
            .collect(),
    }
}

/// The nodes covering byte `ranges` (ascending, disjoint), split down to `level` where
/// the minimal cover holds larger nodes (SPEC H8 for range grants); more than one
/// request may carry is an error.
fn range_nodes(shape: &KhtShape, ranges: &[(u64, u64)], level: u8) -> Result<Vec<(u8, u64)>> {
    let out = range_nodes_upto(
        shape,
        ranges,
        level,
        maat_proto::limits::RANGE_GRANT_NODES_MAX + 1,
    )?;
    if out.len() > maat_proto::limits::RANGE_GRANT_NODES_MAX {
        return Err(ClientError::Keys(format!(
            "key level {level} needs more than {} keys for one read or write: choose a level nearer the root",
            maat_proto::limits::RANGE_GRANT_NODES_MAX
        )));
    }
    Ok(out)
}

/// [`range_nodes`], the first `limit` nodes only.
fn range_nodes_upto(
    shape: &KhtShape,
    ranges: &[(u64, u64)],
    level: u8,
    limit: usize,
) -> Result<Vec<(u8, u64)>> {
    let level = level.min(shape.leaf_level());
    let tree = key_tree;
    let mut out = Vec::new();
    for &(start, end) in ranges {
        let end = end.min(maat_proto::limits::FILE_BYTES_MAX);
        if start >= end {
            continue;
        }
        for node in shape.cover(start, end).map_err(tree)? {
            if out.len() >= limit {
                return Ok(out);
            }
            if node.level >= level {
                out.push((node.level, node.index));
                continue;
            }
            let (a, b) = shape.bytes_under(node).map_err(tree)?;
            let first = shape.node_at(level, a).map_err(tree)?.index;
            let last = shape.node_at(level, b - 1).map_err(tree)?.index;
            // Never more than the room left (a permit over a whole file at the leaf
            // level would otherwise list millions of nodes before the cut).
            let room = (limit - out.len()) as u64;
            let last = last.min(first.saturating_add(room - 1));
            out.extend((first..=last).map(|i| (level, i)));
        }
    }
    Ok(out)
}

impl Client {
    pub(crate) fn fetch_keys(
        &self,
        opened: &Opened,
        lockbox_bytes: &[u8],
        lockbox: &Lockbox,
        nodes: Vec<(u8, u64)>,
    ) -> Result<HeldKeys> {
        let held = self.key_request(&[(opened, lockbox_bytes, nodes)])?;
        self.one_grant(opened, lockbox, held)
    }

    /// Sends a key request for one file to a KDS without waiting for the answer, so that
    /// a read of the file's stripes can be in flight meanwhile;
    /// [`Client::finish_key_request`] reads it. (Sent nowhere when no KDS takes it now:
    /// the finish then asks as [`Client::fetch_keys`] does.)
    pub(crate) fn send_key_request(
        &self,
        opened: &Opened,
        lockbox_bytes: &[u8],
        nodes: Vec<(u8, u64)>,
    ) -> Result<PendingKeys> {
        let request = self.keyed_request(&[(opened, lockbox_bytes, nodes.clone())])?;
        let payload = crate::encode(&request)?;
        let kds = self.cluster_map()?.kds;
        let mut sent = None;
        if let Some(entry) = kds.get(opened.stat.id as usize % kds.len().max(1)) {
            // The connection travels with the request: one dropped unanswered (the read
            // failed first) is closed, never reused with its answer unread.
            let address = entry.address.clone();
            let mut conn = self.connections.take(&self.network, &address);
            if conn.send(FrameType::Plain, &payload).is_ok() {
                sent = Some(conn);
            }
        }
        Ok(PendingKeys {
            sent,
            request,
            nodes,
        })
    }

    /// The keys of a request [`Client::send_key_request`] sent, checked as
    /// [`Client::fetch_keys`] checks them. Whatever went wrong with the pipelined request
    /// (a KDS not ready, gone, or older than keyed grants), the request is made again the
    /// usual way (key requests change nothing, so asking twice is safe).
    pub(crate) fn finish_key_request(
        &self,
        opened: &Opened,
        lockbox_bytes: &[u8],
        lockbox: &Lockbox,
        pending: PendingKeys,
    ) -> Result<HeldKeys> {
        let mut answered = None;
        // Asked again from the next instance unless this one answered (or may answer
        // signed grants, `Malformed`).
        let mut skip = 1;
        if let Some(mut conn) = pending.sent {
            let address = conn.address().to_string();
            match conn.receive() {
                Ok((FrameType::Plain, answer)) => {
                    self.connections.give_back(conn);
                    match decode_answer::<KdsResponse>(&address, &answer) {
                        Ok(KdsResponse::Grants(grants)) => answered = Some(grants),
                        Ok(_) => return Err(self.bad(&address, "unexpected KDS answer")),
                        Err(e) if e.code() == Some(ErrorCode::NotReady) => {}
                        Err(e) if e.code() == Some(ErrorCode::Malformed) => skip = 0,
                        // A refusal is the KDS's answer: asking again changes nothing.
                        Err(e) => return Err(e),
                    }
                }
                Ok((_, answer)) => {
                    self.connections.give_back(conn);
                    return Err(refusal(&address, &answer));
                }
                Err(_) => {}
            }
        }
        let files = [(opened, lockbox_bytes, pending.nodes)];
        let held = self.key_grants(&files, pending.request, answered, skip)?;
        self.one_grant(opened, lockbox, held)
    }

    /// The one grant of a one-file key request, checked against the lockbox asked with.
    fn one_grant(
        &self,
        opened: &Opened,
        lockbox: &Lockbox,
        mut held: Vec<Result<HeldKeys>>,
    ) -> Result<HeldKeys> {
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

    /// The key this login shares with the KDS for keyed grants (one X25519 agreement per
    /// login and KDS key, then kept).
    fn grant_key(
        &self,
        sealing: &maat_crypto::seal::SealingSecretKey,
        kds: &[u8; 32],
    ) -> Result<GrantKey> {
        // (Named by a hash of the login's secret: its public key would cost an X25519
        // operation to compute.)
        let mine = maat_crypto::hash::blake3(&[b"maat/grant-key-login", &sealing.to_bytes()[..]]);
        if let Some((k, m, key)) = &*self.grant_key.lock() {
            if k == kds && *m == mine {
                return Ok(key.clone());
            }
        }
        let key = GrantKey::for_client(sealing, &maat_crypto::seal::SealingPublicKey(*kds))
            .map_err(|e| ClientError::Token {
                what: "KDS key in the cluster map",
                source: e,
            })?;
        *self.grant_key.lock() = Some((*kds, mine, key.clone()));
        Ok(key)
    }

    /// One key request to a KDS for several files, each with the nodes wanted; one
    /// answer per file (the keys, checked: sealed to this login and signed by the KDS,
    /// for that file, or the KDS's refusal).
    fn key_request(&self, files: &[KeyAsk<'_>]) -> Result<Vec<Result<HeldKeys>>> {
        let request = self.keyed_request(files)?;
        self.key_grants(files, request, None, 0)
    }

    /// The keyed key request for `files`: `KeysForJob` with the job's proof when their
    /// capabilities are delegated to a job's key this client holds (SPEC M10; all of one
    /// job), else `KeysKeyed`.
    fn keyed_request(&self, files: &[KeyAsk<'_>]) -> Result<KdsRequest> {
        let ticket = self.with_session(|s| s.ticket.clone())?;
        let mut wanted = Vec::with_capacity(files.len());
        let mut job = None;
        for (i, (opened, lockbox, nodes)) in files.iter().enumerate() {
            let delegated = jobs::delegated_to(&opened.capability);
            if i > 0 && delegated != job {
                return Err(ClientError::InvalidArgument(
                    "one key request asks for the files of one job, or of none".into(),
                ));
            }
            job = delegated;
            wanted.push(FileKeysRequest {
                capability: opened.capability.clone(),
                lockbox: lockbox.to_vec(),
                trees: self.capability_trees(&opened.capability)?,
                nodes: nodes.clone(),
                key_ranges: opened.stat.key_ranges.clone(),
            });
        }
        match job {
            Some(hash) => {
                let (lifetime, proof) = self.job_kds_proof(&hash, &ticket)?;
                Ok(KdsRequest::KeysForJob {
                    ticket,
                    files: wanted,
                    lifetime,
                    proof,
                })
            }
            None => Ok(KdsRequest::KeysKeyed {
                ticket,
                files: wanted,
            }),
        }
    }

    /// The checked grants for `request` (made by [`Client::keyed_request`] for `files`):
    /// those already `answered` (a pipelined request), else from a KDS asked now, the
    /// instances in turn from the `skip`-th after the one picked by file (an instance a
    /// pipelined request found down or not ready is tried last).
    fn key_grants(
        &self,
        files: &[KeyAsk<'_>],
        mut request: KdsRequest,
        answered: Option<Vec<std::result::Result<Vec<u8>, WireError>>>,
        skip: u64,
    ) -> Result<Vec<Result<HeldKeys>>> {
        let kds_keys = self.kds_keys("encrypted files cannot be read")?;
        let sealing = maat_crypto::seal::SealingSecretKey::from_bytes(
            *self.with_session(|s| s.sealing_secret.clone())?.expose(),
        );
        let first = files
            .first()
            .map_or(0, |(o, _, _)| o.stat.id)
            .wrapping_add(skip);
        let grant_key = self.grant_key(&sealing, &kds_keys.sealing_key)?;
        let payload = crate::encode(&request)?;
        // `Some(KDS key)` when the grants are signed ones.
        let called = match answered {
            Some(grants) => Ok(grants),
            None => self.kds_call(first, &payload),
        };
        let (grants, signed_by) = match called {
            // A KDS from before keyed grants does not know the request: ask it for
            // signed ones.
            Err(e) if e.code() == Some(ErrorCode::Malformed) => {
                if let KdsRequest::KeysKeyed { ticket, files } = &mut request {
                    request = KdsRequest::Keys {
                        ticket: std::mem::take(ticket),
                        files: std::mem::take(files),
                    };
                }
                let payload = crate::encode(&request)?;
                let kds_key =
                    VerifyingKey::from_bytes(&kds_keys.verifying_key).map_err(|source| {
                        ClientError::Crypto {
                            what: "the KDS key in the cluster map",
                            source,
                        }
                    })?;
                (self.kds_call(first, &payload)?, Some(kds_key))
            }
            other => (other?, None),
        };
        if grants.len() != files.len() {
            return Err(self.bad("kds", "one grant per file expected"));
        }
        let now = UnixMillis(self.clock.now());
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
                let open = match &signed_by {
                    None => grant.open_keyed(&grant_key, now),
                    Some(kds_key) => grant.open(&sealing, kds_key, now),
                }
                .map_err(token)?;
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

    #[doc(hidden)]
    /// Asks a KDS, in one request, for the keys of several opened encrypted files at tree
    /// level `level` (each file's nodes of that level up to the largest file size, as
    /// reads do); keeps nothing. Returns how many keys were granted, each grant checked.
    /// `maat bench kds` measures the KDS with it.
    pub fn request_keys_batch(&self, files: &[Opened], level: u8) -> Result<usize> {
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

    /// The cluster's KDS keys, or `NoKds` saying what cannot be done without them.
    pub(crate) fn kds_keys(&self, consequence: &str) -> Result<maat_proto::msg::KdsKeys> {
        self.cluster_map()?
            .kds_keys
            .ok_or_else(|| ClientError::NoKds(format!("this cluster has no KDS: {consequence}")))
    }

    #[doc(hidden)]
    /// Asks a KDS for the keys of `nodes` of `opened`'s file as if the file's key tree
    /// had `shape`, under a lockbox for that shape made here; returns the keys granted,
    /// each grant checked. The KDS derives them from a root this client made, so it
    /// gives away nothing the client did not know: `maat bench kds` measures key tree
    /// shapes no file has with it (SPEC E9, paper 004 Fig. 6 and Table 1). At most
    /// `RANGE_GRANT_NODES_MAX` nodes per call.
    pub fn request_keys_with_shape(
        &self,
        opened: &Opened,
        shape: &KhtShape,
        nodes: Vec<(u8, u64)>,
    ) -> Result<Vec<maat_crypto::kht::RangeKey>> {
        let kds = self.kds_keys("there are no keys to ask for")?;
        let (_, current) = lockbox_of(opened)?;
        let (lockbox, _root) = self.new_tree(opened.stat.id, current.tree_version, shape, &kds)?;
        let mut granted = self.key_request(&[(opened, &lockbox, nodes)])?;
        match granted.pop() {
            Some(held) => Ok(held?.keys),
            None => Err(self.bad("kds", "no grant for the file asked")),
        }
    }

    /// The Merkle tree messages a capability's sets need (SPEC M4), from the MDS.
    fn capability_trees(&self, capability: &[u8]) -> Result<Vec<Vec<u8>>> {
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
    /// load spreads over them), the next when one cannot be reached or is not ready.
    /// When none could answer and one said it is not ready (just started, or its last
    /// catch-up with the MDS is stale, SPEC M9), the round is tried again after a wait,
    /// as a just-started daemon's refusal is. Returns the grants.
    fn kds_call(
        &self,
        file: u64,
        payload: &[u8],
    ) -> Result<Vec<std::result::Result<Vec<u8>, WireError>>> {
        let clock = self.clock.clone();
        retry_stale(&clock, || self.kds_call_once(file, payload))
    }

    /// One round of [`Client::kds_call`]: a not-ready refusal is what it answers when no
    /// instance answered and one said so (the round is worth repeating).
    fn kds_call_once(
        &self,
        file: u64,
        payload: &[u8],
    ) -> Result<Vec<std::result::Result<Vec<u8>, WireError>>> {
        let kds = self.cluster_map()?.kds;
        let n = kds.len();
        if n == 0 {
            return Err(ClientError::NoKds("the cluster map lists no KDS".into()));
        }
        let mut last = None;
        let mut not_ready = None;
        for i in 0..n {
            let Some(entry) = kds.get((file as usize + i) % n) else {
                continue;
            };
            let address = entry.address.clone();
            match self.call_at(&address, FrameType::Plain, payload) {
                Ok((FrameType::Plain, answer)) => {
                    match decode_answer::<KdsResponse>(&address, &answer) {
                        Ok(KdsResponse::Grants(grants)) => return Ok(grants),
                        Ok(_) => return Err(self.bad(&address, "unexpected KDS answer")),
                        // Just started, or its revocations are stale (SPEC M9): another
                        // instance may be current.
                        Err(e) if e.code() == Some(ErrorCode::NotReady) => not_ready = Some(e),
                        Err(e) => return Err(e),
                    }
                }
                Ok((_, answer)) => return Err(refusal(&address, &answer)),
                Err(e) => last = Some(e),
            }
        }
        Err(not_ready
            .or(last)
            .unwrap_or_else(|| ClientError::NoKds("no KDS reachable".into())))
    }

    /// Counters of every KDS in the cluster map (`daemon` is `kds N`, N its place in the
    /// map from 1; one that cannot be reached says so, with its address).
    pub(crate) fn kds_stats(&self) -> Result<Vec<DaemonStats>> {
        let payload = crate::encode(&KdsRequest::Stats)?;
        let mut out = Vec::new();
        for (i, entry) in self.cluster_map()?.kds.into_iter().enumerate() {
            let name = format!("kds {}", i + 1);
            let address = entry.address.clone();
            let stats = match self.call_at(&address, FrameType::Plain, &payload) {
                Ok((FrameType::Plain, answer)) => {
                    match decode_answer::<KdsResponse>(&address, &answer) {
                        Ok(KdsResponse::Stats(mut s)) => {
                            s.daemon = name;
                            s
                        }
                        Ok(_) => return Err(self.bad(&address, "unexpected KDS answer")),
                        Err(e) => DaemonStats {
                            daemon: format!("{name} at {address} (refused: {e})"),
                            counters: vec![],
                        },
                    }
                }
                Ok(_) => return Err(self.bad(&address, "unexpected KDS frame")),
                Err(e) => DaemonStats {
                    daemon: format!("{name} at {address} (unreachable: {e})"),
                    counters: vec![],
                },
            };
            out.push(stats);
        }
        Ok(out)
    }

    #[doc(hidden)]
    /// Asks a KDS for `opened`'s range keys now (held ones are not used) and returns how
    /// many it granted; the keys are kept for the file's next reads and writes.
    pub fn request_file_keys(&self, opened: &Opened) -> Result<usize> {
        let (crypt, lockbox) = lockbox_of(opened)?;
        let permit = Self::granted_ranges(opened)?;
        let size = opened.stat.size.max(1);
        let nodes = self.wanted_nodes(&lockbox.shape, permit.as_deref(), 0, size)?;
        let held = self.fetch_keys(opened, &crypt.lockbox, &lockbox, nodes)?;
        let n = held.keys.len();
        self.hold_keys(opened.stat.id, held);
        Ok(n)
    }

    /// Keeps `held` as `file`'s keys of its tree version (at most
    /// [`FILE_KEYS_CACHED_MAX`] trees' at once).
    pub(crate) fn hold_keys(&self, file: u64, held: HeldKeys) {
        let mut file_keys = self.file_keys.lock();
        if file_keys.len() >= FILE_KEYS_CACHED_MAX {
            file_keys.clear();
        }
        file_keys.insert((file, held.tree_version), held);
    }

    #[doc(hidden)]
    /// Forgets every held range key (tests and benchmarks measure fetching them).
    pub fn forget_file_keys(&self) {
        self.file_keys.lock().clear();
    }
}
