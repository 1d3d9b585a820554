//! SPEC T2, T3: T10 OSD security (paper 003).
//!
//! **Credential (T2).** The MDS gives a client a T10 capability plus its *capability key*
//! `CK = HMAC-SHA256(working key, "maat/t10/capkey/v1\0" || capability encoding)`, sealed
//! under a key only that client's MDS session holds ([`capability_key_wrap`]). With each
//! request the client sends the capability and the *request integrity check value*: the
//! T1 protection envelope (`protection`) sealed under keys derived from CK, with the
//! envelope's session id set to [`credential_id`] of the capability, so the method of the
//! capability decides what the ICV covers (CAPKEY: header and capability; CMDRSP: the
//! command; ALLDATA: data too; CONFIDENTIAL: AEAD). The OSD recomputes CK from its own
//! working key ([`capability_key`]) and checks the envelope: one HMAC and one MAC, no
//! signature; it caches CK per credential, so later requests cost one MAC. Paper 003 gives
//! no byte layout; ours follows OSD-2's capability fields (security method, key version,
//! permission bits, policy access tag, expiry, discriminator).
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
use maat_crypto::aead::BlockKey;
use maat_crypto::mac::MacKey;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::{hash, kdf, Secret32};

const CAPKEY_CONTEXT: &[u8] = b"maat/t10/capkey/v1\0";
const CREDENTIAL_ID_CONTEXT: &[u8] = b"maat/t10/credential-id/v1\0";
const WRAP_CONTEXT: &[u8] = b"maat/t10/capkey-wrap/v1\0";
const KEY_INFO: &[u8] = b"maat/t10/key/v1";
const MASTER_INFO: &[u8] = b"maat/t10/master/v1";
/// Encoded length of a T10 capability.
pub const T10_CAPABILITY_BYTES: usize = 2 + 1 + 1 + 2 + 8 + 8 + 4 + 8 + 12;

/// The security method a T10 capability names: Maat's protection methods (SPEC T1), whose
/// byte values are T10's (0 NOSEC, 1 CAPKEY, 2 CMDRSP, 3 ALLDATA) plus 4 for Maat's
/// CONFIDENTIAL.
pub use crate::protection::Protection as SecurityMethod;

fn security_method(b: u8) -> Result<SecurityMethod> {
    SecurityMethod::ALL
        .into_iter()
        .find(|m| m.byte() == b)
        .ok_or(ProtoError::Malformed {
            what: "T10 capability",
            reason: "unknown security method",
        })
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
        w.u8(self.security_method.byte())
            .u8(self.key_version)
            .u16(self.permissions.0);
        w.u64(self.partition_id)
            .u64(self.object_id)
            .u32(self.policy_access_tag)
            .u64(self.expiry.0)
            .bytes(&self.discriminator);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let security_method = security_method(r.u8()?)?;
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

/// The id a credential's requests carry in the envelope's session-id field: the first 16
/// bytes of BLAKE3 over the capability's encoding. The OSD checks it, so a request's MAC,
/// and its place in the replay window, are bound to the capability it came with.
pub fn credential_id(capability: &[u8]) -> [u8; 16] {
    let digest = hash::blake3(&[CREDENTIAL_ID_CONTEXT, capability]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// The payload of a `T10Request` frame: `u16 BE length ‖ capability ‖ envelope`; the
/// parts go out vectored, the envelope's parts unchanged after the prefix.
pub fn request_prefix(capability: &[u8]) -> Result<Vec<u8>> {
    let len = u16::try_from(capability.len()).map_err(|_| ProtoError::TooLarge {
        what: "T10 capability",
        len: capability.len(),
        limit: usize::from(u16::MAX),
    })?;
    let mut prefix = Vec::with_capacity(2 + capability.len());
    prefix.extend_from_slice(&len.to_be_bytes());
    prefix.extend_from_slice(capability);
    Ok(prefix)
}

/// Splits a `T10Request` payload into the capability and the envelope.
pub fn split_request(payload: &[u8]) -> Result<(&[u8], &[u8])> {
    let truncated = ProtoError::Truncated {
        what: "T10 request",
    };
    let (len, rest) = payload.split_first_chunk::<2>().ok_or(truncated.clone())?;
    let len = usize::from(u16::from_be_bytes(*len));
    if len != T10_CAPABILITY_BYTES {
        return Err(ProtoError::Malformed {
            what: "T10 request",
            reason: "capability length",
        });
    }
    if rest.len() < len {
        return Err(truncated);
    }
    Ok(rest.split_at(len))
}

/// The key the MDS seals a capability key under for one client–MDS session: a keyed
/// BLAKE3 PRF of the session's envelope key (both ends hold it; nobody else does).
pub fn capability_key_wrap(session: &maat_crypto::mac::Blake3Mac) -> BlockKey {
    BlockKey::new(Secret32::from_bytes(session.tag(&[WRAP_CONTEXT])))
}

/// MDS side: the capability key sealed for the client (AEAD, the capability as associated
/// data), so that it never crosses the network in clear.
pub fn seal_capability_key(
    wrap: &BlockKey,
    credential: &Credential,
    rng: &mut impl maat_crypto::CryptoRngCore,
) -> Result<Vec<u8>> {
    Ok(wrap.seal(
        0,
        &credential.capability,
        credential.capability_key.expose(),
        rng,
    )?)
}

/// Client side: opens a sealed capability key.
pub fn open_capability_key(wrap: &BlockKey, capability: &[u8], sealed: &[u8]) -> Result<Secret32> {
    let key = wrap
        .open(0, capability, sealed)
        .map_err(|_| ProtoError::DecryptionFailed {
            token: "T10 capability key",
        })?;
    let key: [u8; 32] = key
        .as_slice()
        .try_into()
        .map_err(|_| ProtoError::Malformed {
            what: "T10 capability key",
            reason: "not 32 bytes",
        })?;
    Ok(Secret32::from_bytes(key))
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

/// What a request needs from its capability. (The partition needs no check here: the
/// capability key comes from that partition's working key, so a capability naming
/// another partition fails the request's MAC.)
#[derive(Debug, Clone, Copy)]
pub struct T10Access {
    /// Object addressed.
    pub object_id: u64,
    /// The object's current policy access tag, where the OSD tracks one (SPEC T4).
    pub policy_access_tag: Option<u32>,
    /// Permissions the command needs.
    pub needed: Permissions,
}

/// Decodes a T10 capability (its fields are not authenticated until a request MACed under
/// its capability key verifies).
pub fn decode_capability(capability: &[u8]) -> Result<T10Capability> {
    let mut r = Reader::new(capability, "T10 capability");
    read_header(&mut r, Kind::T10Capability)?;
    let body = T10Capability::decode_body(&mut r)?;
    r.finish()?;
    Ok(body)
}

/// OSD side: recomputes a capability's key from the working key it names (one HMAC).
/// The request MACed under it is checked by the caller; a wrong or forged capability
/// yields a key the client cannot have, so its request fails that check.
pub fn capability_key(capability: &[u8], working: &MacKey) -> Secret32 {
    Secret32::from_bytes(working.tag(&[CAPKEY_CONTEXT, capability]))
}

impl T10Capability {
    /// OSD side, on every request: validity, then object, policy access tag and
    /// permissions.
    pub fn check_access(&self, access: T10Access, now: UnixMillis) -> Result<()> {
        if now >= self.expiry {
            return Err(ProtoError::Expired {
                token: "T10 capability",
                expiry: self.expiry,
                now,
            });
        }
        if self.object_id != access.object_id {
            return Err(ProtoError::WrongRecipient {
                token: "T10 capability",
                reason: "names another object",
            });
        }
        if access
            .policy_access_tag
            .is_some_and(|tag| tag != self.policy_access_tag)
        {
            return Err(ProtoError::Revoked {
                reason: "the object's policy access tag changed since the credential was made \
                         (SPEC T4); open again",
            });
        }
        if !self.permissions.allows(access.needed) {
            return Err(ProtoError::PermissionDenied {
                reason: "permission not in T10 capability",
            });
        }
        Ok(())
    }
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

/// SPEC T4: SET POLICY TAG (MDS → OSD): object `object_id` of `partition` now has policy
/// access tag `tag`, so every credential made with an older tag is refused. MACed under
/// the partition's authentication key (the security manager's SET ATTRIBUTES of the tag).
/// Tags only rise: an OSD refuses a lower tag and acknowledges an equal one again
/// unchanged (the MDS's retry after a lost answer), so a replay changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPolicyTag {
    /// Partition.
    pub partition: u64,
    /// The object (Maat: the file; a credential names a file and covers all its objects).
    pub object_id: u64,
    /// The new policy access tag.
    pub tag: u32,
    /// Sender's time.
    pub timestamp: UnixMillis,
    /// Request nonce.
    pub nonce: [u8; NONCE_BYTES],
}

impl Body for SetPolicyTag {
    const KIND: Kind = Kind::SetPolicyTag;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.partition)
            .u64(self.object_id)
            .u32(self.tag)
            .u64(self.timestamp.0)
            .bytes(&self.nonce);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            partition: r.u64()?,
            object_id: r.u64()?,
            tag: r.u32()?,
            timestamp: UnixMillis(r.u64()?),
            nonce: r.array()?,
        })
    }
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
impl crate::signed::MacedBody for SetPolicyTag {}
impl crate::signed::MacedBody for FencedKeyCommand {}

/// Issue 42: a key command (an encoded `OsdPlainRequest::SetKey`, `SetMasterKey` or
/// `SetPolicyTag`, itself MACed under its level's key) with the fencing token of the
/// leader lease the sending MDS instance held, MACed under the OSD's control key
/// (`control::control_key`). An OSD keeps the highest token it applied a command under
/// and refuses commands under a lower one, so a leader that lost its lease cannot
/// undo its successor's keys with a command still in flight.
///
/// The command inside is small (a SET KEY is under 100 bytes): at most
/// [`crate::limits::FENCED_COMMAND_BYTES_MAX`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedKeyCommand {
    /// The OSD the command is for (its control key MACs it; named too, so that the
    /// token says whom it addresses).
    pub osd: u64,
    /// The leader lease's fencing token (grows at each change of holder).
    pub fence: u64,
    /// The encoded `OsdPlainRequest`.
    pub command: Vec<u8>,
}

impl Body for FencedKeyCommand {
    const KIND: Kind = Kind::FencedKeyCommand;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.osd).u64(self.fence).var_bytes(&self.command);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            osd: r.u64()?,
            fence: r.u64()?,
            command: r
                .var_bytes(
                    "fenced key command",
                    crate::limits::FENCED_COMMAND_BYTES_MAX,
                )?
                .to_vec(),
        })
    }
}
