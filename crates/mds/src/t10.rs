//! SPEC T2, T3, T4 at the MDS: the T10 key hierarchy it shares with each OSD, the
//! refresh policy, revocation by key exchange, and T10 credentials for opens in
//! partitions whose credential format is T10.
//!
//! * **State.** Per OSD, a [`KeyState`] (the MDS's copy of what the OSD holds), durable in
//!   `meta` under `t10/osd/ID`, sealed under a key derived from the sealing secret (the
//!   store holds nothing that forges a credential). A step changes the state only after
//!   the OSD acknowledged it (an accept, or an ack MACed under the new key), and the new
//!   state is committed before the next step, so credentials are issued only under keys
//!   the OSD has.
//! * **Steps.** The shell's channel carries one plain message to an OSD and brings back
//!   its answer; the MDS runs the steps (SET MASTER KEY first, so no key below the master
//!   is derivable from the join key; then root, each T10 partition's key, its working
//!   keys), one exchange at a time.
//! * **Policy.** A working key is refreshed every [`working_refresh_millis`] into the next
//!   of the 16 slots, so a slot is reused only after 16 periods (four credential
//!   lifetimes), a partition key every 16 periods, the root every 64 and after every
//!   master exchange (a new root brings new partition keys, which are set under it);
//!   `maat admin keys rotate` runs a refresh now (`--master`: master and root too), or
//!   with `--revoke` refills every slot, which refuses every credential of the partition
//!   at once.
//! * **Revocations that outlive a missed OSD** (SPEC T4). The MDS stores what every OSD
//!   must come to hold (`meta` `t10/revocations`): per partition the time of its last
//!   revocation by key exchange (a working key older than it is refilled), and per file
//!   its policy access tag. The upkeep brings an OSD that was not reached up to them as
//!   soon as it answers, and until then no credential is issued for it under a revoked
//!   key. A file's tag rises by one per revocation; credentials carry the stored tag.
//! * **Credentials.** One per registered OSD with a working key for the file's partition:
//!   one HMAC (its capability key) and one AEAD seal (the key, under the session) each.

use super::*;
use maat_proto::capability::Mode;

mod fence;
mod grants;
use fence::KeyLink;
pub(crate) use grants::GrantWant;
use maat_proto::limits::T10_WORKING_KEYS_PER_PARTITION;
use maat_proto::msg::{
    Credentials, OsdPlainRequest, OsdPlainResponse, T10Grant, T10KeyInfo, WireError,
};
use maat_proto::t10::{self, Permissions, SetKeyTarget, T10Capability};
use maat_proto::t10_keys::{self, KeyState};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Carries one plain message to an OSD and returns its answer (the shell's sockets).
pub type T10Channel = dyn Fn(&OsdEntry, &OsdPlainRequest) -> std::result::Result<OsdPlainResponse, ChannelError>
    + Send
    + Sync;

/// Why a message on the MDS's channel to an OSD got no answer the MDS can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The OSD could not be reached (connect, send or receive failed: as the network
    /// said).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The OSD refused the message.
    #[error("refused: {0}")]
    Refused(WireError),
    /// The answer is not one: it does not decode, or answers something else.
    #[error("bad answer: {0}")]
    BadAnswer(String),
}

const META_PREFIX: &str = "t10/osd/";
const REVOCATIONS_KEY: &str = "t10/revocations";
/// BLAKE3 key-derivation context of the key sealing T10 key states at rest.
pub const T10_WRAP_CONTEXT: &[u8] = b"maat/mds/t10-state-wrap/v1";

/// How often a working key is refreshed into the next slot: a quarter of a credential's
/// lifetime, so that with 16 slots a credential's key outlives it four times over.
pub fn working_refresh_millis(credential_lifetime_millis: u64) -> u64 {
    (credential_lifetime_millis / 4).max(1000)
}

/// Partition pairs are refreshed every this many working-key periods (4 credential
/// lifetimes).
pub const PARTITION_REFRESH_PERIODS: u64 = 16;
/// The root pair is refreshed every this many working-key periods (16 credential
/// lifetimes), and whenever the master is exchanged.
pub const ROOT_REFRESH_PERIODS: u64 = 64;

#[derive(Default)]
pub(crate) struct T10Keys {
    states: RwLock<HashMap<u64, KeyState>>,
    exchange: Mutex<()>,
    /// Issue 42: a raise of the leader lease's token past an OSD's fence, asked under
    /// the token (first) and to at least the second, made at the next renewal
    /// ([`Mds::fenced_out`]).
    fence_raise: Mutex<Option<(u64, u64)>>,
    channel: RwLock<Option<Arc<T10Channel>>>,
    /// The stored revocations, once read.
    revocations: RwLock<Option<T10Revocations>>,
    /// Credentials made, for reuse (SPEC T2 with M5's reuse).
    issued: grants::Issued,
}

/// SPEC T4: the revocations every OSD must come to hold (stored as `t10/revocations`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct T10Revocations {
    /// Partition → time of its last revocation by key exchange.
    key_exchanges: BTreeMap<u64, u64>,
    /// (partition, file) → policy access tag, for tags above 0.
    tags: BTreeMap<(u64, u64), u32>,
}

impl T10Revocations {
    fn tag(&self, partition: u64, file: u64) -> u32 {
        self.tags.get(&(partition, file)).copied().unwrap_or(0)
    }
    /// When `partition`'s credentials were last revoked by key exchange, if ever.
    fn revoked_at(&self, partition: u64) -> Option<u64> {
        self.key_exchanges.get(&partition).copied()
    }
}

/// Whether `state` still holds a working key of `partition` made before the partition's
/// last revocation by key exchange (`revoked_at`).
fn exchange_pending(state: &KeyState, partition: u64, revoked_at: Option<u64>) -> bool {
    let Some(at) = revoked_at else {
        return false;
    };
    state
        .partition(partition)
        .is_some_and(|k| k.working.iter().flatten().any(|slot| slot.generation < at))
}

/// What a maintenance or rotation run does for one OSD.
#[derive(Debug, Clone, Copy, Default)]
struct Plan {
    master: bool,
    /// Refresh partition keys and a working slot now, whatever their age.
    refresh: bool,
    /// Refill every working slot.
    revoke: bool,
}

use crate::{read_lock, write_lock};

fn not_ready(osd: u64, why: impl std::fmt::Display) -> MdsError {
    MdsError::refused(ErrorCode::NotReady, format!("T10 keys of osd {osd}: {why}"))
}

/// The permissions of a T10 capability for an open in `mode`.
fn permissions(mode: Mode) -> Permissions {
    let mut p = Permissions::GET_ATTR;
    if mode.allows(Mode::READ) {
        p = p.union(Permissions::READ);
    }
    if mode.allows(Mode::WRITE) {
        for w in [
            Permissions::WRITE,
            Permissions::APPEND,
            Permissions::CREATE,
            Permissions::REMOVE,
            Permissions::SET_ATTR,
        ] {
            p = p.union(w);
        }
    }
    p
}

impl<S: MetaStore> Mds<S> {
    /// Installs the channel key commands travel on (the shell's sockets).
    pub fn set_t10_channel(&self, channel: Arc<T10Channel>) {
        *write_lock(&self.t10.channel) = Some(channel);
    }

    /// The MDS's copy of OSD `osd`'s keys (memory, else the store), if any. On a store
    /// other instances share, always the store's: the leader may have changed the keys
    /// since (issue 42).
    fn t10_state(&self, osd: u64) -> Result<Option<KeyState>> {
        if !self.store.shared() {
            if let Some(s) = read_lock(&self.t10.states).get(&osd) {
                return Ok(Some(s.clone()));
            }
        }
        let key = format!("{META_PREFIX}{osd}");
        let Some(sealed) = self.store.meta(&key)? else {
            return Ok(None);
        };
        let bytes = self
            .t10_wrap
            .open(0, key.as_bytes(), &sealed)
            .map_err(|_| StoreError::corrupt(key.clone(), "does not open under this MDS's keys"))?;
        let bytes = zeroize::Zeroizing::new(bytes);
        let state = KeyState::decode(&bytes).map_err(|e| StoreError::corrupt(key.clone(), e))?;
        write_lock(&self.t10.states).insert(osd, state.clone());
        Ok(Some(state))
    }

    fn t10_commit(&self, osd: u64, state: &KeyState, rng: &mut impl CryptoRngCore) -> Result<()> {
        // Issue 42: an instance whose lease ran out while the OSD answered does not write
        // over the record its successor may have written since (the OSD already refuses
        // its later commands): the store checks, in the commit itself, that it still
        // leads.
        let key = format!("{META_PREFIX}{osd}");
        let bytes = zeroize::Zeroizing::new(state.encode());
        let sealed = self.t10_wrap.seal(0, key.as_bytes(), &bytes, rng)?;
        let mut batch = Batch::default();
        batch.push(Op::PutMeta(key, sealed));
        self.commit_as_leader(batch, &format!("T10 keys of osd {osd}"))?;
        write_lock(&self.t10.states).insert(osd, state.clone());
        Ok(())
    }

    /// Runs `f` on the stored revocations (read once, then kept in memory; read every
    /// time from a store other instances share).
    fn with_t10_revocations<R>(&self, f: impl FnOnce(&T10Revocations) -> R) -> Result<R> {
        if !self.store.shared() {
            if let Some(r) = read_lock(&self.t10.revocations).as_ref() {
                return Ok(f(r));
            }
        }
        let stored = match self.store.meta(REVOCATIONS_KEY)? {
            Some(bytes) => <T10Revocations as crate::store::Record>::decode(&bytes)?,
            None => T10Revocations::default(),
        };
        let out = f(&stored);
        *write_lock(&self.t10.revocations) = Some(stored);
        Ok(out)
    }

    /// Changes the stored revocations durably (callers hold the exchange lock).
    fn update_t10_revocations(
        &self,
        change: impl FnOnce(&mut T10Revocations) -> Result<()>,
    ) -> Result<()> {
        let mut next = self.with_t10_revocations(T10Revocations::clone)?;
        change(&mut next)?;
        let mut batch = Batch::default();
        batch.push(Op::PutMeta(
            REVOCATIONS_KEY.to_string(),
            crate::store::Record::encode(&next)?,
        ));
        // (Leader-only: a deposed leader never writes its older copy over its
        // successor's key exchanges and tags.)
        self.commit_as_leader(batch, "T10 revocations")?;
        *write_lock(&self.t10.revocations) = Some(next);
        Ok(())
    }

    fn t10_partitions(&self) -> Result<Vec<PartitionRecord>> {
        Ok(self
            .store
            .partitions()?
            .into_iter()
            .filter(|p| p.credentials == Credentials::T10)
            .collect())
    }

    /// SPEC T3: brings every registered OSD's keys up to the policy (the shell calls this
    /// every second). Returns one line per OSD that could not be reached or refused.
    pub fn t10_maintain(&self, now: UnixMillis, rng: &mut impl CryptoRngCore) -> Vec<String> {
        let osds = match self.store.osds() {
            Ok(o) => o,
            Err(e) => return vec![e.to_string()],
        };
        let partitions = match self.t10_partitions() {
            Ok(p) => p,
            Err(e) => return vec![e.to_string()],
        };
        let mut problems = Vec::new();
        for osd in &osds {
            if let Err(e) = self.t10_sync(osd, &partitions, Plan::default(), now, rng) {
                problems.push(format!("osd {}: {e}", osd.id));
            }
        }
        problems
    }

    /// Runs the steps `plan` and the policy call for on one OSD.
    fn t10_sync(
        &self,
        osd: &OsdEntry,
        partitions: &[PartitionRecord],
        plan: Plan,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<()> {
        let Some(channel) = read_lock(&self.t10.channel).clone() else {
            return Err(not_ready(osd.id, "no channel to OSDs"));
        };
        let on_fenced = |sent| self.fenced_out(sent);
        let link = KeyLink {
            channel: channel.as_ref(),
            osd,
            fencing: self.key_fencing(osd.id)?,
            on_fenced: &on_fenced,
        };
        let _one = lock(&self.t10.exchange);
        let mut state = match self.t10_state(osd.id)? {
            Some(s) => s,
            None => KeyState::bootstrap(&self.config.join_key, osd.id)?,
        };
        let period = working_refresh_millis(self.config.capability_lifetime_millis);
        let older = |generation: u64, age: u64| now.0.saturating_sub(generation) >= age;
        let new_master = plan.master || state.master_generation() == 0;
        if new_master {
            self.t10_master(osd, &mut state, &link, now, rng)?;
        }
        // The root pair follows a new master at once (it is set under the master's
        // authentication key), and is refreshed by policy every `ROOT_REFRESH_PERIODS`.
        // (A root older than the master, left by a sync that failed after the exchange, is
        // made again at the next one.)
        let root_age = state.root().map(|k| k.generation);
        let master_generation = state.master_generation();
        let new_root = new_master
            || root_age
                .is_none_or(|g| g < master_generation || older(g, ROOT_REFRESH_PERIODS * period));
        if new_root {
            self.t10_set(osd, &mut state, SetKeyTarget::Root, &link, now, rng)?;
        }
        let mut tag_failure = None;
        for p in partitions {
            // Partition pairs are set under the root's authentication key: a new root
            // brings new partition pairs (their working slots stay until refilled).
            let key_age = state.partition(p.id).map(|k| k.pair.generation);
            let root_generation = state.root().map_or(0, |k| k.generation);
            if plan.refresh
                || new_root
                || key_age.is_none_or(|g| {
                    g < root_generation || older(g, PARTITION_REFRESH_PERIODS * period)
                })
            {
                self.t10_set(
                    osd,
                    &mut state,
                    SetKeyTarget::Partition(p.id),
                    &link,
                    now,
                    rng,
                )?;
            }
            // SPEC T4 by tag: the partition's tags this OSD does not hold yet, before
            // any working key is refilled, so that no credential made under a new key
            // (with the current tag) can reach the OSD ahead of its tag.
            let tags: Vec<((u64, u64), u32)> = self.with_t10_revocations(|r| {
                r.tags
                    .iter()
                    .filter(|((q, file), tag)| *q == p.id && state.policy_tag(*q, *file) < **tag)
                    .map(|(k, t)| (*k, *t))
                    .collect()
            })?;
            // A tag that cannot be set does not hold back the keys (no credential is
            // issued for this OSD under a tag it lacks: `grants.rs`); it is reported.
            for ((partition, file), tag) in tags {
                if let Err(e) =
                    self.t10_tag(osd, &mut state, (partition, file, tag), &link, now, rng)
                {
                    tag_failure.get_or_insert(e);
                }
            }
            let revoked_at = self.with_t10_revocations(|r| r.revoked_at(p.id))?;
            let slots: Vec<u8> = if plan.revoke || exchange_pending(&state, p.id, revoked_at) {
                (0..T10_WORKING_KEYS_PER_PARTITION as u8).collect()
            } else {
                match state.newest_working(p.id) {
                    None => vec![0],
                    Some((slot, k)) if plan.refresh || older(k.generation, period) => {
                        vec![(slot + 1) % T10_WORKING_KEYS_PER_PARTITION as u8]
                    }
                    Some(_) => Vec::new(),
                }
            };
            for key_version in slots {
                let target = SetKeyTarget::Working {
                    partition: p.id,
                    key_version,
                };
                self.t10_set(osd, &mut state, target, &link, now, rng)?;
            }
        }
        match tag_failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn t10_tag(
        &self,
        osd: &OsdEntry,
        state: &mut KeyState,
        (partition, file, tag): (u64, u64, u32),
        channel: &KeyLink<'_>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<()> {
        let command = t10_keys::mds_set_policy_tag(state, partition, file, tag, now, rng)?;
        let answer = channel
            .send(OsdPlainRequest::SetPolicyTag(command.encoded().to_vec()))
            .map_err(|e| not_ready(osd.id, e))?;
        let OsdPlainResponse::PolicyTagSet { ack } = answer else {
            return Err(not_ready(osd.id, "unexpected answer to SET POLICY TAG"));
        };
        t10_keys::mds_confirm_policy_tag(state, &command, &ack)?;
        self.stats
            .t10_policy_tags_set
            .fetch_add(1, Ordering::Relaxed);
        self.t10_commit(osd.id, state, rng)
    }

    fn t10_master(
        &self,
        osd: &OsdEntry,
        state: &mut KeyState,
        channel: &KeyLink<'_>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<()> {
        let (offer, ephemeral) = t10_keys::mds_master_offer(state, now, rng);
        let answer = channel
            .send(OsdPlainRequest::SetMasterKey(offer.encoded().to_vec()))
            .map_err(|e| not_ready(osd.id, e))?;
        let OsdPlainResponse::MasterKeyAccepted(accept) = answer else {
            return Err(not_ready(osd.id, "unexpected answer to SET MASTER KEY"));
        };
        t10_keys::mds_master_accept(state, &offer, &ephemeral, &accept)?;
        self.stats.t10_key_exchanges.fetch_add(1, Ordering::Relaxed);
        self.t10_commit(osd.id, state, rng)
    }

    fn t10_set(
        &self,
        osd: &OsdEntry,
        state: &mut KeyState,
        target: SetKeyTarget,
        channel: &KeyLink<'_>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<()> {
        let command = t10_keys::mds_set_key(state, target, now, rng)?;
        let answer = channel
            .send(OsdPlainRequest::SetKey(command.encoded().to_vec()))
            .map_err(|e| not_ready(osd.id, e))?;
        let OsdPlainResponse::KeySet { ack } = answer else {
            return Err(not_ready(osd.id, "unexpected answer to SET KEY"));
        };
        t10_keys::mds_confirm_set_key(state, &command, &ack)?;
        self.stats.t10_keys_set.fetch_add(1, Ordering::Relaxed);
        self.t10_commit(osd.id, state, rng)
    }

    /// `maat admin keys show`: every registered OSD's key generations.
    pub(crate) fn t10_show(&self, who: &Principal) -> Result<MdsResponse> {
        require_admin(who)?;
        Ok(MdsResponse::T10Keys(self.t10_key_info()?))
    }

    /// Every registered OSD's key generations, as the MDS's copy has them.
    fn t10_key_info(&self) -> Result<Vec<T10KeyInfo>> {
        let mut out = Vec::new();
        for osd in self.store.osds()? {
            let generations = match self.t10_state(osd.id)? {
                Some(state) => state.generations(),
                None => Vec::new(),
            };
            out.push(T10KeyInfo {
                osd: osd.id,
                generations,
                problem: None,
            });
        }
        Ok(out)
    }

    /// Issue 42: a T10 key change ([`MdsRequest::leader_only`]) at an instance that does
    /// not lead is refused before anything changes; the client asks the next instance.
    fn refuse_unless_leader(&self) -> Result<()> {
        match self.leads() {
            true => Ok(()),
            false => Err(MdsError::refused(
                ErrorCode::WrongRecipient,
                "T10 key changes are the leader's and this MDS instance does not hold the \
                 leader lease: send it to the instance that leads (maat health at each says \
                 whether it leads)",
            )),
        }
    }

    /// `maat admin keys rotate`: a refresh (or, with `revoke`, a revocation by key
    /// exchange) now, answered once every OSD concerned acknowledged it.
    pub(crate) fn t10_rotate(
        &self,
        who: &Principal,
        osd: Option<u64>,
        partition: Option<&str>,
        plan: (bool, bool),
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        // (Its key exchanges would race the leader's upkeep, under a lock of this process
        // only.)
        self.refuse_unless_leader()?;
        let (revoke, master) = plan;
        let mut partitions = self.t10_partitions()?;
        if let Some(name) = partition {
            let p = self.partition_by_name(name)?;
            if p.credentials != Credentials::T10 {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    format!(
                        "partition {name} uses {} credentials; T10 keys serve only partitions \
                         with T10 credentials (maat admin partition set-credentials)",
                        p.credentials.name()
                    ),
                ));
            }
            partitions.retain(|q| q.id == p.id);
        }
        let osds: Vec<OsdEntry> = self
            .store
            .osds()?
            .into_iter()
            .filter(|o| osd.is_none_or(|id| id == o.id))
            .collect();
        if let (Some(id), true) = (osd, osds.is_empty()) {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("no OSD {id} is registered"),
            ));
        }
        let plan = Plan {
            master,
            refresh: true,
            revoke,
        };
        if revoke {
            // Stored first: an OSD not reached now is refilled when it next answers.
            let _one = lock(&self.t10.exchange);
            self.update_t10_revocations(|r| {
                for p in &partitions {
                    r.key_exchanges.insert(p.id, now.0);
                }
                Ok(())
            })?;
        }
        let mut problems = HashMap::new();
        for o in &osds {
            if let Err(e) = self.t10_sync(o, &partitions, plan, now, rng) {
                let what = if revoke {
                    "not revoked there yet (done when it next answers)"
                } else {
                    "not rotated"
                };
                problems.insert(o.id, format!("{what}: {e}"));
            }
        }
        let mut info = self.t10_key_info()?;
        info.retain(|i| osd.is_none_or(|id| id == i.osd));
        for i in &mut info {
            i.problem = problems.remove(&i.osd);
        }
        Ok(MdsResponse::T10Keys(info))
    }

    /// `maat admin keys revoke-object PATH` (SPEC T4 by policy access tag): raises the
    /// file's tag, stored before any OSD is told, then tells every OSD; answers with the
    /// OSDs not reached (the upkeep tells them when they answer).
    pub(crate) fn t10_revoke_object(
        &self,
        who: &Principal,
        path: &str,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        // (Elsewhere the tag would rise in the store while no OSD is told until the
        // leader's upkeep next runs.)
        self.refuse_unless_leader()?;
        let inode = self.resolve(who, path)?;
        if inode.is_dir {
            return Err(MdsError::refused(ErrorCode::IsADirectory, path.to_string()));
        }
        let partition = self.partition(inode.partition)?;
        if partition.credentials != Credentials::T10 {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!(
                    "{path} is in partition {}, whose opens get {} credentials; policy access \
                     tags revoke T10 credentials only (maat admin revoke revokes signed \
                     capabilities)",
                    partition.name,
                    partition.credentials.name()
                ),
            ));
        }
        let key = (partition.id, inode.id);
        let tag = {
            let _one = lock(&self.t10.exchange);
            let mut tag = 0;
            self.update_t10_revocations(|r| {
                if !r.tags.contains_key(&key) && r.tags.len() >= t10_keys::T10_POLICY_TAGS_MAX {
                    return Err(MdsError::refused(
                        ErrorCode::InvalidArgument,
                        format!(
                            "{} files already have their T10 credentials revoked by tag; \
                             revoke the partition's instead (maat admin keys rotate --revoke)",
                            t10_keys::T10_POLICY_TAGS_MAX
                        ),
                    ));
                }
                tag = r.tag(key.0, key.1).checked_add(1).ok_or_else(|| {
                    MdsError::refused(ErrorCode::InvalidArgument, "policy access tag at its limit")
                })?;
                r.tags.insert(key, tag);
                Ok(())
            })?;
            tag
        };
        let partitions = [partition];
        let mut osds = Vec::new();
        for o in self.store.osds()? {
            let problem = self
                .t10_sync(&o, &partitions, Plan::default(), now, rng)
                .err()
                .map(|e| format!("not told yet (done when it next answers): {e}"));
            osds.push((o.id, problem));
        }
        Ok(MdsResponse::T10ObjectRevoked(msg::T10ObjectRevocation {
            file: inode.id,
            tag,
            osds,
        }))
    }
}
