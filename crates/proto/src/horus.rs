//! SPEC H4, H5: Horus lockboxes and range-key grants (paper 004 §3.2–3.4).
//!
//! **Lockbox (H5)**: [`crate::lockbox`], re-exported here.
//!
//! **Range-key grant (H4).** The KDS's answer: node keys sealed to the client's X25519 key
//! and signed by the KDS (sealing alone is anonymous: anyone who knows the client's public
//! key could make a box that opens, and feed the client keys of their choosing).
//! Layout: `version || 0x10 || file(u64) || tree_version(u32) || shape(var) || expiry(u64)
//! || n(u32) || (level(u8) || index(u64))*n || sealed(var: 32·n + 48) || kds_signature(64)`;
//! the AAD is everything before `sealed`; the signature covers `"maat/sig/v1\0"` and
//! everything before it. Nodes are in ascending offset order and do not overlap.
//!
//! **Keyed range-key grant (H4, kind `0x13`).** The same fields, the keys sealed by the
//! block AEAD (index 0, the same AAD) under a [`GrantKey`]: HKDF of the static X25519
//! agreement of the KDS sealing key and the ticket's sealing key. Only the KDS and the
//! ticket's holder can compute it, so the AEAD tag authenticates the KDS and no
//! signature is needed; each end computes the key once per login and keeps it, so a grant
//! costs no public-key operation at either end (a signed grant costs an ephemeral
//! X25519 seal and a signature at the KDS, an open and a verification at the client).
//! Layout: as above with `0x13`, `sealed(var: 32·n + 40)` and no signature.

use crate::codec::{Reader, Writer};
use crate::limits::RANGE_GRANT_NODES_MAX;
use crate::signed::{read_header, write_header, Kind, SIGNATURE_CONTEXT};
use crate::{FileId, ProtoError, Result, UnixMillis};
use maat_crypto::aead::{BlockKey, BLOCK_OVERHEAD_BYTES};
use maat_crypto::kht::{KhtShape, Node, RangeKey, KHT_SHAPE_BYTES_MAX};
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey, SEAL_OVERHEAD_BYTES};
use maat_crypto::sign::{Signature, SigningKey, VerifyingKey, SIGNATURE_BYTES};
use maat_crypto::{kdf, Counters, CryptoRngCore, Secret32};

pub use crate::lockbox::{
    KdsLockboxKey, Lockbox, LockboxKeys, OpenedLockbox, KEYED_LOCKBOX_BOX_BYTES, LOCKBOX_BOX_BYTES,
};

const GRANT_CONTEXT: &[u8] = b"maat/h4/grant/v1";
const GRANT_KEY_SALT: &[u8] = b"maat/h4/grant-key/v1";

pub(crate) fn write_file_header(
    w: &mut Writer,
    kind: Kind,
    file: FileId,
    tree_version: u32,
    shape: &KhtShape,
) {
    write_header(w, kind);
    w.u64(file.0).u32(tree_version).var_bytes(&shape.encode());
}

pub(crate) fn read_file_header(r: &mut Reader<'_>, kind: Kind) -> Result<(FileId, u32, KhtShape)> {
    read_header(r, kind)?;
    let file = FileId(r.u64()?);
    let tree_version = r.u32()?;
    let shape =
        KhtShape::decode(r.var_bytes("key tree shape", KHT_SHAPE_BYTES_MAX)?).map_err(|_| {
            ProtoError::Malformed {
                what: kind.name(),
                reason: "invalid key tree shape",
            }
        })?;
    Ok((file, tree_version, shape))
}

/// A range-key grant as received. Only [`RangeGrant::open`] yields the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeGrant {
    /// The file.
    pub file: FileId,
    /// Key tree version.
    pub tree_version: u32,
    /// The tree's shape.
    pub shape: KhtShape,
    /// Until when the client may use the keys for new I/O.
    pub expiry: UnixMillis,
    /// The nodes granted, in cover order.
    pub nodes: Vec<Node>,
    sealed: Vec<u8>,
    /// The KDS's signature; `None` in a keyed grant (kind `0x13`).
    signature: Option<Signature>,
}

/// SPEC H4: the key a KDS and one login share for keyed range-key grants: HKDF-SHA256
/// (salt `"maat/h4/grant-key/v1"`) of the X25519 agreement of the KDS sealing key and
/// the login ticket's sealing key, with both public keys (KDS first) as info.
#[derive(Clone, Debug)]
pub struct GrantKey(BlockKey);

impl GrantKey {
    /// The KDS's side, for the ticket whose sealing key is `client`.
    pub fn for_kds(kds: &SealingSecretKey, client: &SealingPublicKey) -> Result<Self> {
        Self::derive(&*kds.agree(client)?, &kds.public_key(), client)
    }

    /// The client's side, with its ticket's sealing secret and the KDS's public key.
    pub fn for_client(client: &SealingSecretKey, kds: &SealingPublicKey) -> Result<Self> {
        Self::derive(&*client.agree(kds)?, kds, &client.public_key())
    }

    fn derive(
        shared: &[u8; 32],
        kds: &SealingPublicKey,
        client: &SealingPublicKey,
    ) -> Result<Self> {
        let key = kdf::hkdf_sha256(GRANT_KEY_SALT, shared, &[&kds.0, &client.0])?;
        Ok(Self(BlockKey::new(key)))
    }

    /// Counts this key's AEAD bytes into `counters`.
    pub fn with_counters(self, counters: Counters) -> Self {
        Self(self.0.with_counters(counters))
    }
}

/// The keys of an opened grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedGrant {
    /// The file.
    pub file: FileId,
    /// Key tree version.
    pub tree_version: u32,
    /// The tree's shape.
    pub shape: KhtShape,
    /// One key per granted node.
    pub keys: Vec<RangeKey>,
}

impl RangeGrant {
    fn kind(&self) -> Kind {
        if self.signature.is_some() {
            Kind::RangeGrant
        } else {
            Kind::RangeGrantKeyed
        }
    }

    fn aad(&self) -> Vec<u8> {
        let mut w = Writer::new();
        write_file_header(
            &mut w,
            self.kind(),
            self.file,
            self.tree_version,
            &self.shape,
        );
        w.u64(self.expiry.0)
            .u32(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        for n in &self.nodes {
            w.u8(n.level).u64(n.index);
        }
        w.finish()
    }

    fn signed_part(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(&self.aad()).var_bytes(&self.sealed);
        w.finish()
    }

    /// The grant's fields for `keys` (in ascending, non-overlapping node order, as
    /// [`KhtShape::cover`] returns them), not yet sealed, and the keys as one string.
    fn unsealed(
        opened: &OpenedLockbox,
        expiry: UnixMillis,
        keys: &[RangeKey],
        signature: Option<Signature>,
    ) -> Result<(Self, zeroize::Zeroizing<Vec<u8>>)> {
        if keys.is_empty() || keys.len() > RANGE_GRANT_NODES_MAX {
            return Err(ProtoError::TooLarge {
                what: "range grant nodes",
                len: keys.len(),
                limit: RANGE_GRANT_NODES_MAX,
            });
        }
        let grant = Self {
            file: opened.file,
            tree_version: opened.tree_version,
            shape: opened.shape.clone(),
            expiry,
            nodes: keys.iter().map(|k| k.node).collect(),
            sealed: Vec::new(),
            signature,
        };
        check_nodes(&grant.shape, &grant.nodes)?;
        let mut plain = zeroize::Zeroizing::new(Vec::with_capacity(32 * keys.len()));
        for k in keys {
            plain.extend_from_slice(k.key.expose());
        }
        Ok((grant, plain))
    }

    /// KDS side: seals `keys` (in ascending, non-overlapping node order, as
    /// [`KhtShape::cover`] returns them) to the client and signs the grant.
    pub fn issue(
        opened: &OpenedLockbox,
        expiry: UnixMillis,
        keys: &[RangeKey],
        client: &SealingPublicKey,
        kds_key: &SigningKey,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let placeholder = Some(Signature([0u8; SIGNATURE_BYTES]));
        let (mut grant, plain) = Self::unsealed(opened, expiry, keys, placeholder)?;
        grant.sealed = client.seal(GRANT_CONTEXT, &grant.aad(), &plain, rng)?;
        grant.signature = Some(kds_key.sign(&[SIGNATURE_CONTEXT, &grant.signed_part()].concat()));
        Ok(grant)
    }

    /// KDS side: a keyed grant of `keys`, sealed under the key shared with the login.
    pub fn issue_keyed(
        opened: &OpenedLockbox,
        expiry: UnixMillis,
        keys: &[RangeKey],
        key: &GrantKey,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let (mut grant, plain) = Self::unsealed(opened, expiry, keys, None)?;
        grant.sealed = key.0.seal(0, &grant.aad(), &plain, rng)?;
        Ok(grant)
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.signed_part();
        if let Some(signature) = &self.signature {
            out.extend_from_slice(&signature.0);
        }
        out
    }

    /// Decodes, enforcing limits and that every node lies inside the shape.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "range-key grant");
        let keyed = bytes.get(1) == Some(&(Kind::RangeGrantKeyed as u8));
        let (kind, overhead) = if keyed {
            (Kind::RangeGrantKeyed, BLOCK_OVERHEAD_BYTES)
        } else {
            (Kind::RangeGrant, SEAL_OVERHEAD_BYTES)
        };
        let (file, tree_version, shape) = read_file_header(&mut r, kind)?;
        let expiry = UnixMillis(r.u64()?);
        let n = r.count("range grant nodes", RANGE_GRANT_NODES_MAX, 9)?;
        if n == 0 {
            return Err(ProtoError::Malformed {
                what: "range-key grant",
                reason: "no nodes",
            });
        }
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(Node {
                level: r.u8()?,
                index: r.u64()?,
            });
        }
        check_nodes(&shape, &nodes)?;
        let sealed = r.var_bytes("sealed range keys", 32 * RANGE_GRANT_NODES_MAX + overhead)?;
        if sealed.len() != 32 * n + overhead {
            return Err(ProtoError::Malformed {
                what: "range-key grant",
                reason: "sealed keys length",
            });
        }
        let sealed = sealed.to_vec();
        let signature = if keyed {
            None
        } else {
            Some(Signature(r.array()?))
        };
        r.finish()?;
        Ok(Self {
            file,
            tree_version,
            shape,
            expiry,
            nodes,
            sealed,
            signature,
        })
    }

    /// Client side: checks expiry, the KDS signature, then opens the keys.
    pub fn open(
        &self,
        client_secret: &SealingSecretKey,
        kds_key: &VerifyingKey,
        now: UnixMillis,
    ) -> Result<OpenedGrant> {
        self.check_expiry(now)?;
        let signature = self.signature.as_ref().ok_or(ProtoError::Malformed {
            what: "range-key grant",
            reason: "a keyed grant opens with the key shared with the KDS",
        })?;
        kds_key
            .verify(
                &[SIGNATURE_CONTEXT, &self.signed_part()].concat(),
                signature,
            )
            .map_err(|_| ProtoError::BadSignature {
                token: "range-key grant",
            })?;
        let plain = client_secret
            .open(GRANT_CONTEXT, &self.aad(), &self.sealed)
            .map_err(|_| self.undecryptable())?;
        self.opened(&plain)
    }

    /// Client side, keyed grant: checks expiry, then opens and authenticates the keys
    /// under the key shared with the KDS (a grant anyone else made does not open).
    pub fn open_keyed(&self, key: &GrantKey, now: UnixMillis) -> Result<OpenedGrant> {
        self.check_expiry(now)?;
        if self.signature.is_some() {
            return Err(ProtoError::Malformed {
                what: "range-key grant",
                reason: "a signed grant opens with the login's sealing key",
            });
        }
        let plain = zeroize::Zeroizing::new(
            key.0
                .open(0, &self.aad(), &self.sealed)
                .map_err(|_| self.undecryptable())?,
        );
        self.opened(&plain)
    }

    fn check_expiry(&self, now: UnixMillis) -> Result<()> {
        if now >= self.expiry {
            return Err(ProtoError::Expired {
                token: "range-key grant",
                expiry: self.expiry,
                now,
            });
        }
        Ok(())
    }

    fn undecryptable(&self) -> ProtoError {
        ProtoError::DecryptionFailed {
            token: "range-key grant",
        }
    }

    fn opened(&self, plain: &[u8]) -> Result<OpenedGrant> {
        let keys = self
            .nodes
            .iter()
            .zip(plain.chunks_exact(32))
            .map(|(node, key)| {
                let key: [u8; 32] = key.try_into().map_err(|_| self.undecryptable())?;
                Ok(RangeKey {
                    node: *node,
                    key: Secret32::from_bytes(key),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(OpenedGrant {
            file: self.file,
            tree_version: self.tree_version,
            shape: self.shape.clone(),
            keys,
        })
    }
}

/// Nodes must lie inside the shape and be in ascending offset order without overlap.
fn check_nodes(shape: &KhtShape, nodes: &[Node]) -> Result<()> {
    let malformed = |reason| ProtoError::Malformed {
        what: "range-key grant",
        reason,
    };
    let mut next_leaf = 0u64;
    for (i, node) in nodes.iter().enumerate() {
        if node.level > shape.leaf_level() {
            return Err(malformed("node below the leaves"));
        }
        let (first, end) = shape
            .leaves_under(*node)
            .map_err(|_| malformed("node beyond 2^64 bytes"))?;
        if i > 0 && first < next_leaf {
            return Err(malformed("nodes out of order or overlapping"));
        }
        next_leaf = end;
    }
    Ok(())
}
