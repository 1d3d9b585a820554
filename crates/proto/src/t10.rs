//! SPEC T2, T3: T10 OSD security (paper 003).
//!
//! **Credential (T2).** The MDS gives a client a T10 capability plus its *capability key*
//! `CK = HMAC-SHA256(working key, "maat/t10/capkey/v1\0" || capability encoding)`, over the
//! already-authenticated MDS channel. With each request the client sends the capability and
//! the *request integrity check value* `ICV = HMAC-SHA256(CK, "maat/t10/request/v1\0" ||
//! request)`, where `request` is the canonical request encoding (command, object, offsets,
//! timestamp, nonce). The OSD recomputes CK from its own working key and checks the ICV:
//! two HMACs, no signature. Paper 003 gives no byte layout; ours follows OSD-2's capability
//! fields (security method, key version, permission bits, policy access tag, expiry,
//! discriminator).
//!
//! **Key hierarchy (T3).** Master → root → partition → working. Master, root and partition
//! keys are pairs: an *authentication* key that MACs the SET KEY commands for the level
//! below, and a *generation* key from which, with the command's random seed, the new child
//! key is derived (`HKDF-SHA256(salt = seed, ikm = parent generation key, info =
//! ["maat/t10/key/v1", level, partition, key version, "auth" | "gen"])`). The new key never
//! crosses the wire. Each partition has [`T10_WORKING_KEYS_PER_PARTITION`] working-key slots,
//! so a refresh into one slot leaves credentials under the others valid.
//! SET MASTER KEY is an ephemeral X25519 exchange MACed under the current master
//! authentication key; the new master pair comes from HKDF over the shared secret salted
//! with the transcript hash, giving forward secrecy.

use crate::codec::{Reader, Writer};
use crate::limits::{NONCE_BYTES, T10_WORKING_KEYS_PER_PARTITION};
use crate::signed::{encode_unauthenticated, read_header, Body, Kind, Verified};
use crate::{ProtoError, Result, UnixMillis};
use maat_crypto::mac::{MacKey, Tag};
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::{hash, kdf, Secret32};

const CAPKEY_CONTEXT: &[u8] = b"maat/t10/capkey/v1\0";
const REQUEST_CONTEXT: &[u8] = b"maat/t10/request/v1\0";
const KEY_INFO: &[u8] = b"maat/t10/key/v1";
const MASTER_INFO: &[u8] = b"maat/t10/master/v1";
/// Encoded length of a T10 capability.
pub const T10_CAPABILITY_BYTES: usize = 2 + 1 + 1 + 2 + 8 + 8 + 4 + 8 + 12;

/// Security method of a partition (SPEC T1); each includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum SecurityMethod {
    /// No security.
    NoSec = 0,
    /// Capability integrity; assumes a secure channel.
    CapKey = 1,
    /// Adds integrity of every command and response.
    CmdRsp = 2,
    /// Adds integrity of all data moved.
    AllData = 3,
}

impl SecurityMethod {
    fn from_byte(b: u8) -> Result<Self> {
        Ok(match b {
            0 => Self::NoSec,
            1 => Self::CapKey,
            2 => Self::CmdRsp,
            3 => Self::AllData,
            _ => {
                return Err(ProtoError::Malformed {
                    what: "T10 capability",
                    reason: "unknown security method",
                })
            }
        })
    }
}

/// T10 permission bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permissions(u16);

impl Permissions {
    /// READ.
    pub const READ: Permissions = Permissions(1 << 0);
    /// WRITE.
    pub const WRITE: Permissions = Permissions(1 << 1);
    /// APPEND.
    pub const APPEND: Permissions = Permissions(1 << 2);
    /// CREATE.
    pub const CREATE: Permissions = Permissions(1 << 3);
    /// REMOVE.
    pub const REMOVE: Permissions = Permissions(1 << 4);
    /// GET ATTRIBUTES.
    pub const GET_ATTR: Permissions = Permissions(1 << 5);
    /// SET ATTRIBUTES.
    pub const SET_ATTR: Permissions = Permissions(1 << 6);
    /// LIST.
    pub const LIST: Permissions = Permissions(1 << 7);
    const ALL: u16 = 0xff;

    /// Permissions from bits, refusing unknown bits.
    pub fn from_bits(bits: u16) -> Option<Self> {
        (bits & !Self::ALL == 0).then_some(Self(bits))
    }
    /// The raw bits.
    pub fn bits(self) -> u16 {
        self.0
    }
    /// Union.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// True when every bit of `other` is granted.
    pub fn allows(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The fields of a T10 capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct T10Capability {
    /// Security method the credential is for.
    pub security_method: SecurityMethod,
    /// Working-key slot (0..16) the capability key was made under.
    pub key_version: u8,
    /// Granted permissions.
    pub permissions: Permissions,
    /// Partition.
    pub partition_id: u64,
    /// Object.
    pub object_id: u64,
    /// Must equal the object's current policy access tag (T4).
    pub policy_access_tag: u32,
    /// End of validity.
    pub expiry: UnixMillis,
    /// Random bytes making each capability unique.
    pub discriminator: [u8; 12],
}

impl Body for T10Capability {
    const KIND: Kind = Kind::T10Capability;
    fn encode_body(&self, w: &mut Writer) {
        w.u8(self.security_method as u8)
            .u8(self.key_version)
            .u16(self.permissions.0);
        w.u64(self.partition_id)
            .u64(self.object_id)
            .u32(self.policy_access_tag)
            .u64(self.expiry.0)
            .bytes(&self.discriminator);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let security_method = SecurityMethod::from_byte(r.u8()?)?;
        let key_version = r.u8()?;
        if usize::from(key_version) >= T10_WORKING_KEYS_PER_PARTITION {
            return Err(ProtoError::Malformed {
                what: "T10 capability",
                reason: "key version out of range",
            });
        }
        let permissions = Permissions::from_bits(r.u16()?).ok_or(ProtoError::Malformed {
            what: "T10 capability",
            reason: "unknown permission bits",
        })?;
        Ok(Self {
            security_method,
            key_version,
            permissions,
            partition_id: r.u64()?,
            object_id: r.u64()?,
            policy_access_tag: r.u32()?,
            expiry: UnixMillis(r.u64()?),
            discriminator: r.array()?,
        })
    }
}

/// The key material the MDS hands a client: capability and capability key.
#[derive(Debug, Clone)]
pub struct Credential {
    /// The capability's canonical encoding (sent with every request).
    pub capability: Vec<u8>,
    /// The capability key (kept by the client, never sent to an OSD).
    pub capability_key: Secret32,
}

/// MDS side: makes a credential under a partition's working key.
pub fn issue_credential(capability: &T10Capability, working_key: &MacKey) -> Credential {
    let encoded = encode_unauthenticated(capability);
    let capability_key = Secret32::from_bytes(working_key.tag(&[CAPKEY_CONTEXT, &encoded]));
    Credential {
        capability: encoded,
        capability_key,
    }
}

/// Client side: the request integrity check value.
pub fn request_icv(credential: &Credential, request: &[u8]) -> Tag {
    MacKey::new(credential.capability_key.clone()).tag(&[REQUEST_CONTEXT, request])
}

/// The working keys an OSD holds for one partition.
#[derive(Debug, Clone, Default)]
pub struct WorkingKeys {
    slots: [Option<MacKey>; T10_WORKING_KEYS_PER_PARTITION],
}

impl WorkingKeys {
    /// Installs `key` in slot `key_version`.
    pub fn set(&mut self, key_version: u8, key: MacKey) -> Result<()> {
        let slot = self
            .slots
            .get_mut(usize::from(key_version))
            .ok_or(ProtoError::UnknownKey {
                what: "working key version",
            })?;
        *slot = Some(key);
        Ok(())
    }
    /// The key in slot `key_version`.
    pub fn get(&self, key_version: u8) -> Option<&MacKey> {
        self.slots
            .get(usize::from(key_version))
            .and_then(Option::as_ref)
    }
}

/// What a request needs from its capability.
#[derive(Debug, Clone, Copy)]
pub struct T10Access {
    /// Partition addressed.
    pub partition_id: u64,
    /// Object addressed.
    pub object_id: u64,
    /// The object's current policy access tag.
    pub policy_access_tag: u32,
    /// Permissions the command needs.
    pub needed: Permissions,
}

/// OSD side: decodes the capability, checks expiry, recomputes the capability key from the
/// working key it names, checks the ICV over `request`, then object, tag and permissions.
pub fn verify_request(
    capability: &[u8],
    request: &[u8],
    icv: &[u8],
    keys: &WorkingKeys,
    access: T10Access,
    now: UnixMillis,
) -> Result<Verified<T10Capability>> {
    let mut r = Reader::new(capability, "T10 capability");
    read_header(&mut r, Kind::T10Capability)?;
    let body = T10Capability::decode_body(&mut r)?;
    r.finish()?;
    if now >= body.expiry {
        return Err(ProtoError::Expired {
            token: "T10 capability",
            expiry: body.expiry,
            now,
        });
    }
    let working = keys.get(body.key_version).ok_or(ProtoError::UnknownKey {
        what: "working key version",
    })?;
    let capability_key = MacKey::new(Secret32::from_bytes(
        working.tag(&[CAPKEY_CONTEXT, capability]),
    ))
    .with_counters(working.counters().clone());
    capability_key
        .verify(&[REQUEST_CONTEXT, request], icv)
        .map_err(|_| ProtoError::BadMac {
            token: "T10 request",
        })?;
    if body.partition_id != access.partition_id || body.object_id != access.object_id {
        return Err(ProtoError::WrongRecipient {
            token: "T10 capability",
            reason: "names another object",
        });
    }
    if body.policy_access_tag != access.policy_access_tag {
        return Err(ProtoError::PermissionDenied {
            reason: "policy access tag changed (credential revoked)",
        });
    }
    if !body.permissions.allows(access.needed) {
        return Err(ProtoError::PermissionDenied {
            reason: "permission not in T10 capability",
        });
    }
    Ok(crate::signed::verified_unchecked(body, capability.to_vec()))
}

/// A level of the key hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum KeyLevel {
    /// Root key (child of master).
    Root = 1,
    /// Partition key (child of root).
    Partition = 2,
    /// Working key (child of partition).
    Working = 3,
}

/// An authentication key and a generation key (master, root and partition levels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// MACs commands for the level below.
    pub authentication: Secret32,
    /// Derives the keys of the level below.
    pub generation: Secret32,
}

impl KeyPair {
    /// The authentication key as a MAC key.
    pub fn authentication_mac(&self) -> MacKey {
        MacKey::new(self.authentication.clone())
    }

    fn derive(
        &self,
        level: KeyLevel,
        partition: u64,
        key_version: u8,
        seed: &[u8; 32],
        which: &[u8],
    ) -> Result<Secret32> {
        Ok(kdf::hkdf_sha256(
            seed,
            self.generation.expose(),
            &[
                KEY_INFO,
                &[level as u8],
                &partition.to_be_bytes(),
                &[key_version],
                which,
            ],
        )?)
    }

    /// The child pair (root from master, partition from root).
    pub fn derive_pair(&self, level: KeyLevel, partition: u64, seed: &[u8; 32]) -> Result<KeyPair> {
        Ok(KeyPair {
            authentication: self.derive(level, partition, 0, seed, b"auth")?,
            generation: self.derive(level, partition, 0, seed, b"gen")?,
        })
    }

    /// A working key (from a partition pair).
    pub fn derive_working(
        &self,
        partition: u64,
        key_version: u8,
        seed: &[u8; 32],
    ) -> Result<Secret32> {
        self.derive(KeyLevel::Working, partition, key_version, seed, b"work")
    }
}

/// Which key a SET KEY refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKeyTarget {
    /// The root key (MACed under the master authentication key).
    Root,
    /// A partition key (MACed under the root authentication key).
    Partition(u64),
    /// A working-key slot (MACed under the partition authentication key).
    Working {
        /// Partition.
        partition: u64,
        /// Slot.
        key_version: u8,
    },
}

/// The fields of SET KEY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetKey {
    /// The key refreshed.
    pub target: SetKeyTarget,
    /// Random seed the new key is derived from.
    pub seed: [u8; 32],
    /// Sender's time (replay window, T7).
    pub timestamp: UnixMillis,
    /// Request nonce.
    pub nonce: [u8; NONCE_BYTES],
}

impl Body for SetKey {
    const KIND: Kind = Kind::SetKey;
    fn encode_body(&self, w: &mut Writer) {
        let (tag, partition, version) = match self.target {
            SetKeyTarget::Root => (KeyLevel::Root, 0, 0),
            SetKeyTarget::Partition(p) => (KeyLevel::Partition, p, 0),
            SetKeyTarget::Working {
                partition,
                key_version,
            } => (KeyLevel::Working, partition, key_version),
        };
        w.u8(tag as u8)
            .u64(partition)
            .u8(version)
            .bytes(&self.seed)
            .u64(self.timestamp.0)
            .bytes(&self.nonce);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let (tag, partition, version) = (r.u8()?, r.u64()?, r.u8()?);
        let malformed = |reason| ProtoError::Malformed {
            what: "SET KEY",
            reason,
        };
        let target = match tag {
            1 if partition == 0 && version == 0 => SetKeyTarget::Root,
            2 if version == 0 => SetKeyTarget::Partition(partition),
            3 if usize::from(version) < T10_WORKING_KEYS_PER_PARTITION => SetKeyTarget::Working {
                partition,
                key_version: version,
            },
            1..=3 => return Err(malformed("non-canonical target fields")),
            _ => return Err(malformed("unknown target")),
        };
        Ok(Self {
            target,
            seed: r.array()?,
            timestamp: UnixMillis(r.u64()?),
            nonce: r.array()?,
        })
    }
}

/// The key a verified SET KEY produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewKey {
    /// A new root or partition pair.
    Pair(KeyPair),
    /// A new working key.
    Working(Secret32),
}

/// Derives the key a (MAC-verified) SET KEY installs, from the parent pair whose
/// authentication key verified it.
pub fn apply_set_key(set_key: &Verified<SetKey>, parent: &KeyPair) -> Result<NewKey> {
    Ok(match set_key.target {
        SetKeyTarget::Root => NewKey::Pair(parent.derive_pair(KeyLevel::Root, 0, &set_key.seed)?),
        SetKeyTarget::Partition(p) => {
            NewKey::Pair(parent.derive_pair(KeyLevel::Partition, p, &set_key.seed)?)
        }
        SetKeyTarget::Working {
            partition,
            key_version,
        } => NewKey::Working(parent.derive_working(partition, key_version, &set_key.seed)?),
    })
}

/// SET MASTER KEY step 1 (MDS → OSD): the MDS's ephemeral X25519 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetMasterKeyOffer {
    /// MDS ephemeral public key.
    pub mds_public: SealingPublicKey,
    /// Sender's time.
    pub timestamp: UnixMillis,
    /// Nonce the answer must echo.
    pub nonce: [u8; NONCE_BYTES],
}

impl Body for SetMasterKeyOffer {
    const KIND: Kind = Kind::SetMasterKeyOffer;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.mds_public.0)
            .u64(self.timestamp.0)
            .bytes(&self.nonce);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            mds_public: SealingPublicKey(r.array()?),
            timestamp: UnixMillis(r.u64()?),
            nonce: r.array()?,
        })
    }
}

/// SET MASTER KEY step 2 (OSD → MDS): the OSD's ephemeral X25519 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetMasterKeyAccept {
    /// OSD ephemeral public key.
    pub osd_public: SealingPublicKey,
    /// Echo of the offer's nonce.
    pub offer_nonce: [u8; NONCE_BYTES],
    /// Sender's time.
    pub timestamp: UnixMillis,
}

impl Body for SetMasterKeyAccept {
    const KIND: Kind = Kind::SetMasterKeyAccept;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.osd_public.0)
            .bytes(&self.offer_nonce)
            .u64(self.timestamp.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            osd_public: SealingPublicKey(r.array()?),
            offer_nonce: r.array()?,
            timestamp: UnixMillis(r.u64()?),
        })
    }
}

/// Both sides: the new master pair from a MAC-verified offer and accept, using this side's
/// ephemeral secret. Refuses an accept that answers another offer.
pub fn new_master_key(
    offer: &Verified<SetMasterKeyOffer>,
    accept: &Verified<SetMasterKeyAccept>,
    my_ephemeral: &SealingSecretKey,
) -> Result<KeyPair> {
    if accept.offer_nonce != offer.nonce {
        return Err(ProtoError::WrongRecipient {
            token: "SET MASTER KEY accept",
            reason: "answers another offer",
        });
    }
    let mine = my_ephemeral.public_key();
    let peer = if mine == offer.mds_public {
        accept.osd_public
    } else if mine == accept.osd_public {
        offer.mds_public
    } else {
        return Err(ProtoError::WrongRecipient {
            token: "SET MASTER KEY",
            reason: "ephemeral key not part of exchange",
        });
    };
    let shared = my_ephemeral.agree(&peer)?;
    let transcript = hash::blake3(&[offer.encoded(), accept.encoded()]);
    Ok(KeyPair {
        authentication: kdf::hkdf_sha256(&transcript, shared.as_ref(), &[MASTER_INFO, b"auth"])?,
        generation: kdf::hkdf_sha256(&transcript, shared.as_ref(), &[MASTER_INFO, b"gen"])?,
    })
}
impl crate::signed::MacedBody for SetKey {}
impl crate::signed::MacedBody for SetMasterKeyOffer {}
impl crate::signed::MacedBody for SetMasterKeyAccept {}
