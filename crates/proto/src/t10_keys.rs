//! SPEC T3: the T10 key hierarchy one OSD shares with the MDS, as both sides keep it, and
//! the steps that change it (no I/O: the daemons send the bytes and store the state).
//!
//! ```text
//! master (auth, gen) ── root (auth, gen) ── partition p (auth, gen) ── working p[0..16]
//! ```
//!
//! * **Bootstrap.** Before its first exchange an OSD's master pair is
//!   `HKDF(salt = "maat/t10/master0/v1", ikm = join key, info = [osd id, "auth" | "gen"])`,
//!   which both sides can compute; the MDS replaces it with SET MASTER KEY (ephemeral
//!   X25519, so later keys are not derivable from the join key) before anything else.
//! * **Generations.** Every key carries the generation it was installed at: the SET KEY's
//!   (or SET MASTER KEY offer's) timestamp, which the MDS makes strictly increasing per
//!   key. A SET KEY or offer whose generation is not above the key's current one is
//!   refused ([`ProtoError::Superseded`]), so a replayed or older command can never bring
//!   back a retired key, also after a restart: the state, generations included, is durable
//!   on both sides ([`KeyState::encode`]).
//! * **Confirmation.** The OSD answers each SET KEY with [`set_key_ack`], a MAC under the
//!   new key, and the MDS installs the key only when the ack verifies, so it never issues
//!   credentials under a key the OSD lacks.
//! * **Master changes survive a lost answer.** An OSD keeps its previous master pair after
//!   SET MASTER KEY until a command MACed under the new one arrives. If the MDS never
//!   received the accept (or crashed before storing the new master), its next command is
//!   MACed under the old pair, and the OSD returns to it.
//! * **Working keys.** [`T10_WORKING_KEYS_PER_PARTITION`] slots per partition. A refresh
//!   fills the next slot and leaves the others, so credentials in flight stay valid; a
//!   revocation by key exchange (SPEC T4) refills every slot.

use crate::codec::{Reader, Writer};
use crate::limits::{NONCE_BYTES, T10_WORKING_KEYS_PER_PARTITION};
use crate::signed::{self, UnverifiedMac, Verified};
use crate::t10::{
    self, KeyPair, NewKey, SetKey, SetKeyTarget, SetMasterKeyAccept, SetMasterKeyOffer,
    SetPolicyTag,
};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::mac::{MacKey, Tag};
use maat_crypto::seal::SealingSecretKey;
use maat_crypto::{kdf, CryptoRngCore, Secret32};
use std::collections::BTreeMap;

const MASTER0_SALT: &[u8] = b"maat/t10/master0/v1";
const ACK_CONTEXT: &[u8] = b"maat/t10/set-key-ack/v1\0";
const TAG_ACK_CONTEXT: &[u8] = b"maat/t10/set-policy-tag-ack/v1\0";
/// Version 2 adds each partition's policy access tags (SPEC T4); version 1 still loads.
const STATE_VERSION: u8 = 2;
/// Version 3 adds the fence (issue 42) after the partitions; written only when the fence
/// is not 0, so a state that never saw a fenced command keeps version 2's bytes.
const STATE_VERSION_FENCED: u8 = 3;
pub use crate::limits::T10_PARTITIONS_MAX;
pub use crate::limits::T10_POLICY_TAGS_MAX;

/// A key and the generation it was installed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed<K> {
    /// The key.
    pub key: K,
    /// The SET KEY timestamp that installed it (0: bootstrap).
    pub generation: u64,
}

/// One partition's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionKeys {
    /// The partition pair.
    pub pair: Keyed<KeyPair>,
    /// Working-key slots.
    pub working: [Option<Keyed<Secret32>>; T10_WORKING_KEYS_PER_PARTITION],
    /// SPEC T4: policy access tags of the objects whose tag is not 0.
    pub tags: BTreeMap<u64, u32>,
}

/// The key hierarchy of one OSD (the OSD's own copy, or the MDS's copy of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    master: Keyed<KeyPair>,
    /// OSD only: the master pair before the last SET MASTER KEY, until the MDS uses the
    /// new one.
    previous_master: Option<Keyed<KeyPair>>,
    root: Option<Keyed<KeyPair>>,
    partitions: BTreeMap<u64, PartitionKeys>,
    /// OSD only (issue 42): the highest fencing token a key command was applied under
    /// (`t10::FencedKeyCommand`); 0 until the first.
    fence: u64,
}

impl KeyState {
    /// The state before any exchange: the bootstrap master pair of OSD `osd`.
    pub fn bootstrap(join_key: &[u8; 32], osd: u64) -> Result<Self> {
        let id = osd.to_be_bytes();
        Ok(Self {
            master: Keyed {
                key: KeyPair {
                    authentication: kdf::hkdf_sha256(MASTER0_SALT, join_key, &[&id, b"auth"])?,
                    generation: kdf::hkdf_sha256(MASTER0_SALT, join_key, &[&id, b"gen"])?,
                },
                generation: 0,
            },
            previous_master: None,
            root: None,
            partitions: BTreeMap::new(),
            fence: 0,
        })
    }

    /// OSD (issue 42): the highest fencing token a key command was applied under, 0
    /// before the first fenced one.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// OSD (issue 42): admits a key command sent under fencing token `fence` (none: an
    /// MDS from before fencing, or one that leads no lease): refused `Fenced` under a
    /// lower token than one applied before, and unfenced once any was; else the token
    /// is kept (the caller makes the state durable with the command's change).
    pub fn admit_fence(&mut self, fence: Option<u64>) -> Result<()> {
        match fence {
            Some(f) if f >= self.fence => {
                self.fence = f;
                Ok(())
            }
            None if self.fence == 0 => Ok(()),
            _ => Err(ProtoError::Fenced {
                found: fence.unwrap_or(0),
                applied: self.fence,
            }),
        }
    }

    /// Generation of the master pair (0 until the first SET MASTER KEY).
    pub fn master_generation(&self) -> u64 {
        self.master.generation
    }

    /// The root pair, once set.
    pub fn root(&self) -> Option<&Keyed<KeyPair>> {
        self.root.as_ref()
    }

    /// A partition's keys, once set.
    pub fn partition(&self, partition: u64) -> Option<&PartitionKeys> {
        self.partitions.get(&partition)
    }

    /// Every partition with keys.
    pub fn partitions(&self) -> impl Iterator<Item = (u64, &PartitionKeys)> {
        self.partitions.iter().map(|(p, k)| (*p, k))
    }

    /// The working key in `slot` of `partition`.
    pub fn working(&self, partition: u64, slot: u8) -> Option<&Keyed<Secret32>> {
        self.partitions
            .get(&partition)?
            .working
            .get(usize::from(slot))?
            .as_ref()
    }

    /// The newest working key of `partition` and its slot (the one to issue under).
    pub fn newest_working(&self, partition: u64) -> Option<(u8, &Keyed<Secret32>)> {
        self.partitions
            .get(&partition)?
            .working
            .iter()
            .enumerate()
            .filter_map(|(slot, k)| Some((slot as u8, k.as_ref()?)))
            .max_by_key(|(_, k)| k.generation)
    }

    /// A partition's key pair (its authentication key MACs the partition's tag commands).
    fn partition_pair(&self, partition: u64) -> Result<&KeyPair> {
        Ok(&self
            .partitions
            .get(&partition)
            .ok_or(ProtoError::UnknownKey {
                what: "partition key",
            })?
            .pair
            .key)
    }

    /// SPEC T4: the policy access tag of `object` in `partition` (0 until one is set).
    pub fn policy_tag(&self, partition: u64, object: u64) -> u32 {
        self.partitions
            .get(&partition)
            .and_then(|k| k.tags.get(&object))
            .copied()
            .unwrap_or(0)
    }

    /// Objects with a policy access tag other than 0, over every partition.
    pub fn policy_tags(&self) -> impl Iterator<Item = ((u64, u64), u32)> + '_ {
        self.partitions
            .iter()
            .flat_map(|(p, k)| k.tags.iter().map(move |(o, t)| ((*p, *o), *t)))
    }

    fn policy_tag_count(&self) -> usize {
        self.partitions.values().map(|k| k.tags.len()).sum()
    }

    /// Sets a tag (callers checked the command's MAC and that the tag rises).
    fn install_policy_tag(&mut self, partition: u64, object: u64, tag: u32) -> Result<()> {
        let count = self.policy_tag_count();
        let keys = self
            .partitions
            .get_mut(&partition)
            .ok_or(ProtoError::UnknownKey {
                what: "partition key",
            })?;
        if !keys.tags.contains_key(&object) && count >= T10_POLICY_TAGS_MAX {
            return Err(ProtoError::TooLarge {
                what: "T10 policy access tags",
                len: count + 1,
                limit: T10_POLICY_TAGS_MAX,
            });
        }
        keys.tags.insert(object, tag);
        Ok(())
    }

    /// The generation of the key `target` names (0 when it has none).
    pub fn generation(&self, target: SetKeyTarget) -> u64 {
        match target {
            SetKeyTarget::Root => self.root.as_ref().map_or(0, |k| k.generation),
            SetKeyTarget::Partition(p) => self.partitions.get(&p).map_or(0, |k| k.pair.generation),
            SetKeyTarget::Working {
                partition,
                key_version,
            } => self
                .working(partition, key_version)
                .map_or(0, |k| k.generation),
        }
    }

    /// The pair whose authentication key MACs a SET KEY for `target`, and whose generation
    /// key derives it.
    pub fn parent(&self, target: SetKeyTarget) -> Result<&KeyPair> {
        let missing = |what| ProtoError::UnknownKey { what };
        Ok(match target {
            SetKeyTarget::Root => &self.master.key,
            SetKeyTarget::Partition(_) => &self.root.as_ref().ok_or(missing("root key"))?.key,
            SetKeyTarget::Working { partition, .. } => {
                &self
                    .partitions
                    .get(&partition)
                    .ok_or(missing("partition key"))?
                    .pair
                    .key
            }
        })
    }

    fn check_newer(&self, target: SetKeyTarget, generation: u64) -> Result<()> {
        if generation <= self.generation(target) {
            return Err(ProtoError::Superseded { what: "SET KEY" });
        }
        Ok(())
    }

    /// Installs the key a verified SET KEY derives (no newer-than check: see
    /// [`osd_set_key`] and [`mds_confirm_set_key`]).
    fn install(&mut self, set_key: &Verified<SetKey>) -> Result<NewKey> {
        let new = t10::apply_set_key(set_key, self.parent(set_key.target)?)?;
        let generation = set_key.timestamp.0;
        match (set_key.target, &new) {
            (SetKeyTarget::Root, NewKey::Pair(pair)) => {
                self.root = Some(Keyed {
                    key: pair.clone(),
                    generation,
                })
            }
            (SetKeyTarget::Partition(p), NewKey::Pair(pair)) => {
                if !self.partitions.contains_key(&p) && self.partitions.len() >= T10_PARTITIONS_MAX
                {
                    return Err(ProtoError::TooLarge {
                        what: "T10 partitions",
                        len: self.partitions.len() + 1,
                        limit: T10_PARTITIONS_MAX,
                    });
                }
                let pair = Keyed {
                    key: pair.clone(),
                    generation,
                };
                // A partition key refresh keeps the working keys: credentials in flight
                // stay valid (revocation refills every slot instead).
                self.partitions
                    .entry(p)
                    .and_modify(|k| k.pair = pair.clone())
                    .or_insert_with(|| PartitionKeys {
                        pair,
                        working: Default::default(),
                        tags: BTreeMap::new(),
                    });
            }
            (
                SetKeyTarget::Working {
                    partition,
                    key_version,
                },
                NewKey::Working(key),
            ) => {
                let slot = self
                    .partitions
                    .get_mut(&partition)
                    .and_then(|k| k.working.get_mut(usize::from(key_version)))
                    .ok_or(ProtoError::UnknownKey {
                        what: "working key version",
                    })?;
                *slot = Some(Keyed {
                    key: key.clone(),
                    generation,
                });
            }
            _ => {
                return Err(ProtoError::Malformed {
                    what: "SET KEY",
                    reason: "key kind does not match target",
                })
            }
        }
        Ok(new)
    }

    /// Every key's generation, never the keys (`maat admin keys show`): master, root, and
    /// per partition its pair and working slots.
    pub fn generations(&self) -> Vec<(String, u64)> {
        let mut out = vec![("master".to_string(), self.master.generation)];
        if let Some(root) = &self.root {
            out.push(("root".into(), root.generation));
        }
        for (p, keys) in &self.partitions {
            out.push((format!("partition {p}"), keys.pair.generation));
            for (slot, k) in keys.working.iter().enumerate() {
                if let Some(k) = k {
                    out.push((format!("partition {p} working {slot}"), k.generation));
                }
            }
        }
        out
    }

    /// The canonical encoding (version first), for the daemons' key files.
    pub fn encode(&self) -> Vec<u8> {
        fn pair(w: &mut Writer, k: &Keyed<KeyPair>) {
            w.u64(k.generation)
                .bytes(k.key.authentication.expose())
                .bytes(k.key.generation.expose());
        }
        let mut w = Writer::new();
        w.u8(if self.fence == 0 {
            STATE_VERSION
        } else {
            STATE_VERSION_FENCED
        });
        pair(&mut w, &self.master);
        for k in [&self.previous_master, &self.root] {
            match k {
                Some(k) => {
                    w.u8(1);
                    pair(&mut w, k);
                }
                None => {
                    w.u8(0);
                }
            }
        }
        w.u32(self.partitions.len() as u32);
        for (p, keys) in &self.partitions {
            w.u64(*p);
            pair(&mut w, &keys.pair);
            let mask = keys
                .working
                .iter()
                .enumerate()
                .filter(|(_, k)| k.is_some())
                .fold(0u16, |m, (i, _)| m | 1 << i);
            w.u16(mask);
            for k in keys.working.iter().flatten() {
                w.u64(k.generation).bytes(k.key.expose());
            }
            w.u32(keys.tags.len() as u32);
            for (object, tag) in &keys.tags {
                w.u64(*object).u32(*tag);
            }
        }
        if self.fence != 0 {
            w.u64(self.fence);
        }
        w.finish()
    }

    /// Decodes [`KeyState::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        const WHAT: &str = "T10 key state";
        fn pair(r: &mut Reader<'_>) -> Result<Keyed<KeyPair>> {
            Ok(Keyed {
                generation: r.u64()?,
                key: KeyPair {
                    authentication: Secret32::from_bytes(r.array()?),
                    generation: Secret32::from_bytes(r.array()?),
                },
            })
        }
        fn optional(r: &mut Reader<'_>) -> Result<Option<Keyed<KeyPair>>> {
            match r.u8()? {
                0 => Ok(None),
                1 => Ok(Some(pair(r)?)),
                _ => Err(ProtoError::Malformed {
                    what: WHAT,
                    reason: "presence byte not 0 or 1",
                }),
            }
        }
        let mut r = Reader::new(bytes, WHAT);
        let version = r.u8()?;
        if !(1..=STATE_VERSION_FENCED).contains(&version) {
            return Err(ProtoError::UnsupportedVersion { found: version });
        }
        let master = pair(&mut r)?;
        let previous_master = optional(&mut r)?;
        let root = optional(&mut r)?;
        let count = r.u32()? as usize;
        if count > T10_PARTITIONS_MAX {
            return Err(ProtoError::TooLarge {
                what: WHAT,
                len: count,
                limit: T10_PARTITIONS_MAX,
            });
        }
        let mut partitions = BTreeMap::new();
        let mut tags_total = 0usize;
        for _ in 0..count {
            let p = r.u64()?;
            let pair = pair(&mut r)?;
            let mask = r.u16()?;
            let mut working: [Option<Keyed<Secret32>>; T10_WORKING_KEYS_PER_PARTITION] =
                Default::default();
            for (i, slot) in working.iter_mut().enumerate() {
                if mask & (1 << i) != 0 {
                    *slot = Some(Keyed {
                        generation: r.u64()?,
                        key: Secret32::from_bytes(r.array()?),
                    });
                }
            }
            let mut tags = BTreeMap::new();
            if version >= 2 {
                let n = r.u32()? as usize;
                tags_total += n;
                if tags_total > T10_POLICY_TAGS_MAX {
                    return Err(ProtoError::TooLarge {
                        what: WHAT,
                        len: tags_total,
                        limit: T10_POLICY_TAGS_MAX,
                    });
                }
                for _ in 0..n {
                    let (object, tag) = (r.u64()?, r.u32()?);
                    if tag == 0 || tags.insert(object, tag).is_some() {
                        return Err(ProtoError::Malformed {
                            what: WHAT,
                            reason: "policy tag 0 or listed twice",
                        });
                    }
                }
            }
            if partitions
                .insert(
                    p,
                    PartitionKeys {
                        pair,
                        working,
                        tags,
                    },
                )
                .is_some()
            {
                return Err(ProtoError::Malformed {
                    what: WHAT,
                    reason: "partition listed twice",
                });
            }
        }
        let fence = if version >= STATE_VERSION_FENCED {
            match r.u64()? {
                0 => {
                    return Err(ProtoError::Malformed {
                        what: WHAT,
                        reason: "fence 0 written as version 3",
                    })
                }
                f => f,
            }
        } else {
            0
        };
        r.finish()?;
        Ok(Self {
            master,
            previous_master,
            root,
            partitions,
            fence,
        })
    }
}

/// The OSD's answer to a SET KEY: a MAC under the key it installed, over the command.
pub fn set_key_ack(new: &NewKey, set_key: &[u8]) -> Tag {
    let key = match new {
        NewKey::Pair(pair) => pair.authentication.clone(),
        NewKey::Working(key) => key.clone(),
    };
    MacKey::new(key).tag(&[ACK_CONTEXT, set_key])
}

// ------------------------------------------------------------------ OSD side

/// Which master pair verified a command: the OSD confirms or rolls back a SET MASTER KEY.
fn verify_under_master<T: signed::MacedBody + Clone>(
    state: &mut KeyState,
    token: UnverifiedMac<T>,
) -> Result<Verified<T>> {
    if let Ok(v) = token.clone().verify(&state.master.key.authentication_mac()) {
        // The MDS uses the new master: the previous one is retired for good.
        state.previous_master = None;
        return Ok(v);
    }
    match state.previous_master.take() {
        Some(previous) => match token.verify(&previous.key.authentication_mac()) {
            Ok(v) => {
                // The MDS never took the new master: return to the one it still uses,
                // keeping the higher generation so older offers stay refused.
                let generation = state.master.generation;
                state.master = Keyed {
                    key: previous.key,
                    generation,
                };
                Ok(v)
            }
            Err(e) => {
                state.previous_master = Some(previous);
                Err(e)
            }
        },
        None => token.verify(&state.master.key.authentication_mac()),
    }
}

/// OSD: checks a SET KEY (MAC under the parent level's authentication key, newer than the
/// key it replaces) and installs its key in `state`; returns the ack to send. The caller
/// makes `state` durable before sending the ack.
pub fn osd_set_key(state: &mut KeyState, bytes: &[u8]) -> Result<(SetKeyTarget, Tag)> {
    let token = UnverifiedMac::<SetKey>::decode(bytes)?;
    let target = token.unverified_body().target;
    let verified = match target {
        SetKeyTarget::Root => verify_under_master(state, token)?,
        _ => token.verify(&state.parent(target)?.authentication_mac())?,
    };
    state.check_newer(target, verified.timestamp.0)?;
    let new = state.install(&verified)?;
    Ok((target, set_key_ack(&new, verified.encoded())))
}

/// The answer to a SET POLICY TAG: a MAC under the partition's authentication key over
/// the command, in a context of its own.
pub fn set_policy_tag_ack(partition: &KeyPair, command: &[u8]) -> Tag {
    partition
        .authentication_mac()
        .tag(&[TAG_ACK_CONTEXT, command])
}

/// OSD: checks a SET POLICY TAG (MAC under the partition's authentication key, a tag not
/// below the object's current one) and installs it in `state`; returns the command and
/// the ack. An equal tag is acknowledged again without change. The caller makes `state`
/// durable before sending the ack.
pub fn osd_set_policy_tag(state: &mut KeyState, bytes: &[u8]) -> Result<(SetPolicyTag, Tag)> {
    let token = UnverifiedMac::<SetPolicyTag>::decode(bytes)?;
    let partition = token.unverified_body().partition;
    let pair = state.partition_pair(partition)?;
    let verified = token.verify(&pair.authentication_mac())?;
    let ack = set_policy_tag_ack(pair, verified.encoded());
    let current = state.policy_tag(partition, verified.object_id);
    if verified.tag < current || verified.tag == 0 {
        return Err(ProtoError::Superseded {
            what: "SET POLICY TAG",
        });
    }
    state.install_policy_tag(partition, verified.object_id, verified.tag)?;
    Ok(((*verified).clone(), ack))
}

/// OSD: answers a SET MASTER KEY offer (MAC under the current master, newer than it) with
/// an accept from a fresh ephemeral key, and installs the new master pair, keeping the old
/// one until the MDS uses the new one. The caller makes `state` durable before answering.
pub fn osd_set_master_key(
    state: &mut KeyState,
    bytes: &[u8],
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> Result<Verified<SetMasterKeyAccept>> {
    let token = UnverifiedMac::<SetMasterKeyOffer>::decode(bytes)?;
    let offer = verify_under_master(state, token)?;
    if offer.timestamp.0 <= state.master.generation {
        return Err(ProtoError::Superseded {
            what: "SET MASTER KEY offer",
        });
    }
    let ephemeral = SealingSecretKey::generate(rng);
    let accept = signed::mac(
        SetMasterKeyAccept {
            osd_public: ephemeral.public_key(),
            offer_nonce: offer.nonce,
            timestamp: now,
        },
        &state.master.key.authentication_mac(),
    );
    let new = t10::new_master_key(&offer, &accept, &ephemeral)?;
    let old = std::mem::replace(
        &mut state.master,
        Keyed {
            key: new,
            generation: offer.timestamp.0,
        },
    );
    state.previous_master = Some(old);
    Ok(accept)
}

// ------------------------------------------------------------------ MDS side

/// A generation for a new key: `now`, or one past the current one if the clock is behind.
fn next_generation(current: u64, now: UnixMillis) -> UnixMillis {
    UnixMillis(now.0.max(current.saturating_add(1)))
}

/// MDS: a SET MASTER KEY offer for this OSD and the ephemeral secret to finish it with.
pub fn mds_master_offer(
    state: &KeyState,
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> (Verified<SetMasterKeyOffer>, SealingSecretKey) {
    let ephemeral = SealingSecretKey::generate(rng);
    let mut nonce = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut nonce);
    let offer = signed::mac(
        SetMasterKeyOffer {
            mds_public: ephemeral.public_key(),
            timestamp: next_generation(state.master.generation, now),
            nonce,
        },
        &state.master.key.authentication_mac(),
    );
    (offer, ephemeral)
}

/// MDS: checks the OSD's accept (MAC under the current master, answering this offer) and
/// installs the new master pair.
pub fn mds_master_accept(
    state: &mut KeyState,
    offer: &Verified<SetMasterKeyOffer>,
    ephemeral: &SealingSecretKey,
    accept: &[u8],
) -> Result<()> {
    let accept = UnverifiedMac::<SetMasterKeyAccept>::decode(accept)?
        .verify(&state.master.key.authentication_mac())?;
    let new = t10::new_master_key(offer, &accept, ephemeral)?;
    state.master = Keyed {
        key: new,
        generation: offer.timestamp.0,
    };
    Ok(())
}

/// MDS: a SET KEY for `target` with a fresh seed, MACed under its parent's authentication
/// key, at a generation above the key's current one.
pub fn mds_set_key(
    state: &KeyState,
    target: SetKeyTarget,
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> Result<Verified<SetKey>> {
    let parent = state.parent(target)?;
    let mut seed = [0u8; 32];
    rng.fill_bytes(&mut seed);
    let mut nonce = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut nonce);
    Ok(signed::mac(
        SetKey {
            target,
            seed,
            timestamp: next_generation(state.generation(target), now),
            nonce,
        },
        &parent.authentication_mac(),
    ))
}

/// MDS: installs the key of a SET KEY the OSD acknowledged (the ack must verify under the
/// new key, proving the OSD derived it).
pub fn mds_confirm_set_key(
    state: &mut KeyState,
    set_key: &Verified<SetKey>,
    ack: &[u8],
) -> Result<()> {
    let mut next = state.clone();
    let new = next.install(set_key)?;
    let expected = set_key_ack(&new, set_key.encoded());
    if !maat_crypto::ct_eq(&expected, ack) {
        return Err(ProtoError::BadMac {
            token: "SET KEY acknowledgement",
        });
    }
    *state = next;
    Ok(())
}

/// MDS: a SET POLICY TAG giving `object` of `partition` tag `tag`, MACed under the
/// partition's authentication key.
pub fn mds_set_policy_tag(
    state: &KeyState,
    partition: u64,
    object: u64,
    tag: u32,
    now: UnixMillis,
    rng: &mut impl CryptoRngCore,
) -> Result<Verified<SetPolicyTag>> {
    let pair = state.partition_pair(partition)?;
    let mut nonce = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut nonce);
    Ok(signed::mac(
        SetPolicyTag {
            partition,
            object_id: object,
            tag,
            timestamp: now,
            nonce,
        },
        &pair.authentication_mac(),
    ))
}

/// MDS: records the tag of a SET POLICY TAG the OSD acknowledged.
pub fn mds_confirm_policy_tag(
    state: &mut KeyState,
    command: &Verified<SetPolicyTag>,
    ack: &[u8],
) -> Result<()> {
    let pair = state.partition_pair(command.partition)?;
    let expected = set_policy_tag_ack(pair, command.encoded());
    if !maat_crypto::ct_eq(&expected, ack) {
        return Err(ProtoError::BadMac {
            token: "SET POLICY TAG acknowledgement",
        });
    }
    if command.tag > state.policy_tag(command.partition, command.object_id) {
        state.install_policy_tag(command.partition, command.object_id, command.tag)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use rand_core::OsRng;

    fn pair_of_states() -> (KeyState, KeyState) {
        let s = KeyState::bootstrap(&[7; 32], 3).unwrap();
        (s.clone(), s)
    }

    /// Runs one SET KEY from the MDS state to the OSD state.
    fn set(mds: &mut KeyState, osd: &mut KeyState, target: SetKeyTarget, now: u64) -> Vec<u8> {
        let cmd = mds_set_key(mds, target, UnixMillis(now), &mut OsRng).unwrap();
        let (_, ack) = osd_set_key(osd, cmd.encoded()).unwrap();
        mds_confirm_set_key(mds, &cmd, &ack).unwrap();
        cmd.encoded().to_vec()
    }

    fn master(mds: &mut KeyState, osd: &mut KeyState, now: u64) {
        let (offer, eph) = mds_master_offer(mds, UnixMillis(now), &mut OsRng);
        let accept = osd_set_master_key(osd, offer.encoded(), UnixMillis(now), &mut OsRng).unwrap();
        mds_master_accept(mds, &offer, &eph, accept.encoded()).unwrap();
    }

    #[test]
    fn both_sides_agree_and_old_commands_never_return() {
        let (mut mds, mut osd) = pair_of_states();
        master(&mut mds, &mut osd, 100);
        set(&mut mds, &mut osd, SetKeyTarget::Root, 101);
        set(&mut mds, &mut osd, SetKeyTarget::Partition(9), 102);
        let w = SetKeyTarget::Working {
            partition: 9,
            key_version: 0,
        };
        let first = set(&mut mds, &mut osd, w, 103);
        let old_key = osd.working(9, 0).unwrap().clone();
        set(&mut mds, &mut osd, w, 103); // same clock: the generation still rises
        assert_eq!(osd.working(9, 0), mds.working(9, 0));
        assert_ne!(osd.working(9, 0).unwrap(), &old_key);
        assert_eq!(osd.working(9, 0).unwrap().generation, 104);
        // The older SET KEY, replayed, cannot bring the retired key back...
        assert!(matches!(
            osd_set_key(&mut osd, &first),
            Err(ProtoError::Superseded { .. })
        ));
        // ...nor after the state went through its encoding (a restart).
        let mut restarted = KeyState::decode(&osd.encode()).unwrap();
        assert_eq!(restarted, osd);
        assert!(osd_set_key(&mut restarted, &first).is_err());
        assert_ne!(restarted.working(9, 0).unwrap(), &old_key);
    }

    #[test]
    fn a_master_change_the_mds_never_stored_is_rolled_back() {
        let (mut mds, mut osd) = pair_of_states();
        master(&mut mds, &mut osd, 100);
        // The OSD answers an offer, but the MDS never gets (or keeps) the accept.
        let (offer, _) = mds_master_offer(&mds, UnixMillis(200), &mut OsRng);
        osd_set_master_key(&mut osd, offer.encoded(), UnixMillis(200), &mut OsRng).unwrap();
        assert_ne!(osd.master, mds.master);
        // The MDS's next command is under the master it kept: the OSD goes back to it.
        set(&mut mds, &mut osd, SetKeyTarget::Root, 300);
        assert_eq!(osd.master.key, mds.master.key);
        // The replayed offer stays refused (generation kept).
        assert!(matches!(
            osd_set_master_key(&mut osd, offer.encoded(), UnixMillis(301), &mut OsRng),
            Err(ProtoError::Superseded { .. })
        ));
        // A confirmed master retires the previous one for good.
        master(&mut mds, &mut osd, 400);
        set(&mut mds, &mut osd, SetKeyTarget::Root, 401);
        assert!(osd.previous_master.is_none());
    }

    #[test]
    fn forged_commands_and_acks_are_refused() {
        let (mut mds, mut osd) = pair_of_states();
        master(&mut mds, &mut osd, 100);
        let root = mds_set_key(&mds, SetKeyTarget::Root, UnixMillis(101), &mut OsRng).unwrap();
        osd_set_key(&mut osd, root.encoded()).unwrap();
        // A SET KEY MACed under the bootstrap master (the join key) once the MDS used the
        // new one.
        let stale = KeyState::bootstrap(&[7; 32], 3).unwrap();
        let cmd = mds_set_key(&stale, SetKeyTarget::Root, UnixMillis(500), &mut OsRng).unwrap();
        assert!(matches!(
            osd_set_key(&mut osd, cmd.encoded()),
            Err(ProtoError::BadMac { .. })
        ));
        // An ack that is not under the new key.
        let cmd = mds_set_key(&mds, SetKeyTarget::Root, UnixMillis(501), &mut OsRng).unwrap();
        assert!(matches!(
            mds_confirm_set_key(&mut mds, &cmd, &[0; 32]),
            Err(ProtoError::BadMac { .. })
        ));
        assert!(mds.root().is_none());
        // A partition SET KEY MACed under the wrong level (master instead of root).
        let mut wrong = mds_set_key(&mds, SetKeyTarget::Root, UnixMillis(502), &mut OsRng)
            .unwrap()
            .encoded()
            .to_vec();
        wrong[2] = 2; // target byte: partition, under the master's MAC
        assert!(osd_set_key(&mut osd, &wrong).is_err());
        // A working key for a partition without a key.
        let w = SetKeyTarget::Working {
            partition: 1,
            key_version: 0,
        };
        assert!(matches!(
            mds_set_key(&mds, w, UnixMillis(502), &mut OsRng),
            Err(ProtoError::UnknownKey { .. })
        ));
    }

    #[test]
    fn policy_tags_only_rise_survive_restarts_and_need_the_partition_key() {
        let (mut mds, mut osd) = pair_of_states();
        master(&mut mds, &mut osd, 100);
        set(&mut mds, &mut osd, SetKeyTarget::Root, 101);
        set(&mut mds, &mut osd, SetKeyTarget::Partition(9), 102);
        set(&mut mds, &mut osd, SetKeyTarget::Partition(10), 103);
        // A version-1 key file (before tags) still loads, with no tags.
        let v2 = osd.encode();
        let mut v1 = vec![1u8];
        let mut rest = v2[1..].to_vec();
        // Each partition's record ends with its tag count (0); drop both (p9, then p10).
        let p10_end = rest.len();
        rest.drain(p10_end - 4..);
        let p9_end = rest.len() - (8 + 8 + 64 + 2);
        rest.drain(p9_end - 4..p9_end);
        v1.extend_from_slice(&rest);
        assert_eq!(KeyState::decode(&v1).unwrap(), osd);

        let run = |mds: &mut KeyState, osd: &mut KeyState, tag: u32| {
            let cmd = mds_set_policy_tag(mds, 9, 42, tag, UnixMillis(200), &mut OsRng).unwrap();
            let (_, ack) = osd_set_policy_tag(osd, cmd.encoded())?;
            mds_confirm_policy_tag(mds, &cmd, &ack).unwrap();
            Ok::<_, ProtoError>(cmd.encoded().to_vec())
        };
        let first = run(&mut mds, &mut osd, 1).unwrap();
        assert_eq!((osd.policy_tag(9, 42), mds.policy_tag(9, 42)), (1, 1));
        assert_eq!(osd.policy_tag(9, 43), 0);
        assert_eq!(osd.policy_tag(10, 42), 0);
        // Equal again (a retry after a lost ack): acknowledged, nothing changes.
        run(&mut mds, &mut osd, 1).unwrap();
        run(&mut mds, &mut osd, 2).unwrap();
        // The older command replayed, before and after a restart, is refused.
        assert!(matches!(
            osd_set_policy_tag(&mut osd, &first),
            Err(ProtoError::Superseded { .. })
        ));
        let mut restarted = KeyState::decode(&osd.encode()).unwrap();
        assert_eq!(restarted, osd);
        assert!(osd_set_policy_tag(&mut restarted, &first).is_err());
        assert_eq!(restarted.policy_tag(9, 42), 2);
        assert_eq!(restarted.policy_tags().collect::<Vec<_>>(), [((9, 42), 2)]);
        // MACed under another partition's key: refused.
        let mut other = mds_set_policy_tag(&mds, 10, 42, 5, UnixMillis(300), &mut OsRng)
            .unwrap()
            .encoded()
            .to_vec();
        other[9] = 9; // partition field (after version, kind, 7 high bytes): now 9
        assert!(matches!(
            osd_set_policy_tag(&mut osd, &other),
            Err(ProtoError::BadMac { .. })
        ));
        // An ack not under the partition key.
        let cmd = mds_set_policy_tag(&mds, 9, 42, 7, UnixMillis(300), &mut OsRng).unwrap();
        assert!(mds_confirm_policy_tag(&mut mds, &cmd, &[0; 32]).is_err());
        assert_eq!(mds.policy_tag(9, 42), 2);
    }

    #[test]
    fn the_fence_only_rises_survives_restarts_and_keeps_unfenced_states_at_version_2() {
        let (mut mds, mut osd) = pair_of_states();
        master(&mut mds, &mut osd, 100);
        set(&mut mds, &mut osd, SetKeyTarget::Root, 101);
        let v2 = osd.encode();
        assert_eq!(v2[0], 2);
        // Before any fenced command: a bare one (an MDS before fencing) is admitted.
        assert_eq!(osd.admit_fence(None), Ok(()));
        assert_eq!(osd.encode(), v2);
        // The first leader's token, then the same again (its next command): admitted.
        osd.admit_fence(Some(4)).unwrap();
        osd.admit_fence(Some(4)).unwrap();
        assert_eq!(osd.fence(), 4);
        // A successor's higher token, then the deposed leader's: refused, fence kept.
        osd.admit_fence(Some(5)).unwrap();
        assert_eq!(
            osd.admit_fence(Some(4)),
            Err(ProtoError::Fenced {
                found: 4,
                applied: 5
            })
        );
        // A bare command after fenced ones: refused.
        assert!(matches!(
            osd.admit_fence(None),
            Err(ProtoError::Fenced { found: 0, .. })
        ));
        // Stored as version 3 (version 2 and the fence after it); loads back the same.
        let v3 = osd.encode();
        assert_eq!(v3[0], 3);
        assert_eq!(&v3[1..v3.len() - 8], &v2[1..]);
        assert_eq!(&v3[v3.len() - 8..], &5u64.to_be_bytes());
        let mut again = KeyState::decode(&v3).unwrap();
        assert_eq!(again, osd);
        assert!(again.admit_fence(Some(4)).is_err());
        // Version 2's bytes still load, with no fence; version 3 with a fence of 0 does not.
        assert_eq!(KeyState::decode(&v2).unwrap().fence(), 0);
        let mut zero = v3.clone();
        let at = zero.len() - 8;
        zero[at..].copy_from_slice(&0u64.to_be_bytes());
        assert!(KeyState::decode(&zero).is_err());
    }
}
