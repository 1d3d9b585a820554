//! SPEC H5: a file's lockbox, its root key `K_R` sealed twice, to the KDS and to the
//! owner, with the file id, tree version and shape as additional data, so the MDS can
//! store it but not open it, and no box can be moved to another file, version or shape.
//!
//! **Sealed lockbox (kind `0x0f`).** Each box sealed to a static X25519 key by an
//! ephemeral one ([`SealingPublicKey::seal`]). Layout: `version || 0x0f || file(u64) ||
//! tree_version(u32) || shape(var) || kds_box(80) || owner_box(80)`; the AAD is
//! everything before `kds_box`.
//!
//! **Keyed lockbox (kind `0x14`).** Each box sealed by the block AEAD (index 0, the same
//! kind of AAD) under a key derived without a per-box public-key operation
//! ([`LockboxKeys`]): the KDS box under HKDF of the static X25519 agreement of the owner's
//! sealing key and the KDS's, the owner box under HKDF of the owner's sealing secret. The
//! owner's public key travels in the lockbox, so a KDS finds (or computes once and
//! caches) the key of each owner. Layout: `version || 0x14 || file(u64) ||
//! tree_version(u32) || shape(var) || owner_key(32) || kds_box(72) || owner_box(72)`; the
//! AAD is everything before `kds_box`. Sealing one costs the owner two AEAD seals (the
//! agreement once per login); opening one costs a KDS an AEAD open (the agreement once per
//! owner), where a sealed lockbox costs four X25519 scalar multiplications to make and one
//! to open. What a box protects is the same: only the KDS and the owner open it.

use crate::codec::{Reader, Writer};
use crate::horus::{read_file_header, write_file_header};
use crate::signed::Kind;
use crate::{FileId, ProtoError, Result};
use maat_crypto::aead::{BlockKey, BLOCK_OVERHEAD_BYTES};
use maat_crypto::kht::KhtShape;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey, SEAL_OVERHEAD_BYTES};
use maat_crypto::{kdf, Counters, CryptoRngCore, Secret32};

const LOCKBOX_CONTEXT: &[u8] = b"maat/h5/lockbox/v1";
const LOCKBOX_KEY_SALT: &[u8] = b"maat/h5/lockbox-key/v1";
/// Length of each sealed root key in a sealed lockbox (kind `0x0f`).
pub const LOCKBOX_BOX_BYTES: usize = 32 + SEAL_OVERHEAD_BYTES;
/// Length of each box in a keyed lockbox (kind `0x14`).
pub const KEYED_LOCKBOX_BOX_BYTES: usize = 32 + BLOCK_OVERHEAD_BYTES;

/// The owner's keys for keyed lockboxes: the KDS box key (HKDF-SHA256, salt
/// `"maat/h5/lockbox-key/v1"`, of the X25519 agreement of the owner's and the KDS's
/// sealing keys; info `"kds"`, the KDS's public key, the owner's) and the owner box key
/// (the same HKDF of the owner's sealing secret; info `"owner"`, the owner's public key).
/// Made once per login and KDS key; sealing a lockbox then needs no public-key operation.
#[derive(Clone, Debug)]
pub struct LockboxKeys {
    owner_key: SealingPublicKey,
    kds: BlockKey,
    owner: BlockKey,
}

impl LockboxKeys {
    /// From the owner's sealing secret and the KDS's public key (one agreement, one
    /// public-key derivation).
    pub fn new(owner: &SealingSecretKey, kds: &SealingPublicKey) -> Result<Self> {
        let owner_key = owner.public_key();
        let kds_box = KdsLockboxKey::derive(&*owner.agree(kds)?, kds, &owner_key)?;
        let owner_box = owner_box_key(owner, &owner_key)?;
        Ok(Self {
            owner_key,
            kds: kds_box.0,
            owner: owner_box,
        })
    }
}

/// A KDS's key for the KDS boxes of one owner's keyed lockboxes (see [`LockboxKeys`]).
#[derive(Clone, Debug)]
pub struct KdsLockboxKey(BlockKey);

impl KdsLockboxKey {
    /// The KDS's side, for lockboxes whose owner key is `owner` (one agreement).
    pub fn new(kds: &SealingSecretKey, owner: &SealingPublicKey) -> Result<Self> {
        Self::derive(&*kds.agree(owner)?, &kds.public_key(), owner)
    }

    fn derive(shared: &[u8; 32], kds: &SealingPublicKey, owner: &SealingPublicKey) -> Result<Self> {
        let key = kdf::hkdf_sha256(LOCKBOX_KEY_SALT, shared, &[b"kds", &kds.0, &owner.0])?;
        Ok(Self(BlockKey::new(key)))
    }

    /// Counts this key's AEAD bytes into `counters`.
    pub fn with_counters(self, counters: Counters) -> Self {
        Self(self.0.with_counters(counters))
    }
}

fn owner_box_key(owner: &SealingSecretKey, owner_key: &SealingPublicKey) -> Result<BlockKey> {
    let key = kdf::hkdf_sha256(
        LOCKBOX_KEY_SALT,
        &*owner.to_bytes(),
        &[b"owner", &owner_key.0],
    )?;
    Ok(BlockKey::new(key))
}

/// A file's lockbox. Decoding gives this sealed form; only [`Lockbox::open_as_kds`],
/// [`Lockbox::open_keyed_as_kds`] and [`Lockbox::open_as_owner`] yield the root key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lockbox {
    /// The file.
    pub file: FileId,
    /// Key tree version (H7: a revocation starts a new tree).
    pub tree_version: u32,
    /// The tree's shape.
    pub shape: KhtShape,
    /// The owner's sealing key in a keyed lockbox (kind `0x14`); `None`: sealed (`0x0f`).
    owner_key: Option<SealingPublicKey>,
    kds_box: Vec<u8>,
    owner_box: Vec<u8>,
}

/// What opening a lockbox gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedLockbox {
    /// The file.
    pub file: FileId,
    /// Key tree version.
    pub tree_version: u32,
    /// The tree's shape.
    pub shape: KhtShape,
    /// `K_R`.
    pub root_key: Secret32,
}

impl Lockbox {
    fn kind(&self) -> Kind {
        match self.owner_key {
            Some(_) => Kind::LockboxKeyed,
            None => Kind::Lockbox,
        }
    }

    fn header(
        kind: Kind,
        file: FileId,
        tree_version: u32,
        shape: &KhtShape,
        owner_key: Option<&SealingPublicKey>,
    ) -> Writer {
        let mut w = Writer::new();
        write_file_header(&mut w, kind, file, tree_version, shape);
        if let Some(key) = owner_key {
            w.bytes(&key.0);
        }
        w
    }

    fn aad(&self) -> Vec<u8> {
        let (file, version, shape) = (self.file, self.tree_version, &self.shape);
        Self::header(self.kind(), file, version, shape, self.owner_key.as_ref()).finish()
    }

    /// Owner side: seals `root_key` to the KDS and to the owner (a sealed lockbox,
    /// `0x0f`: two ephemeral X25519 seals).
    pub fn seal(
        file: FileId,
        tree_version: u32,
        shape: KhtShape,
        root_key: &Secret32,
        kds: &SealingPublicKey,
        owner: &SealingPublicKey,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let aad = Self::header(Kind::Lockbox, file, tree_version, &shape, None).finish();
        let kds_box = kds.seal(LOCKBOX_CONTEXT, &aad, root_key.expose(), rng)?;
        let owner_box = owner.seal(LOCKBOX_CONTEXT, &aad, root_key.expose(), rng)?;
        Ok(Self {
            file,
            tree_version,
            shape,
            owner_key: None,
            kds_box,
            owner_box,
        })
    }

    /// Owner side: a keyed lockbox (`0x14`) of `root_key` under `keys` (two AEAD seals).
    pub fn seal_keyed(
        file: FileId,
        tree_version: u32,
        shape: KhtShape,
        root_key: &Secret32,
        keys: &LockboxKeys,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        let owner_key = Some(keys.owner_key);
        let aad = Self::header(
            Kind::LockboxKeyed,
            file,
            tree_version,
            &shape,
            owner_key.as_ref(),
        )
        .finish();
        let kds_box = keys.kds.seal(0, &aad, root_key.expose(), rng)?;
        let owner_box = keys.owner.seal(0, &aad, root_key.expose(), rng)?;
        Ok(Self {
            file,
            tree_version,
            shape,
            owner_key,
            kds_box,
            owner_box,
        })
    }

    /// The owner's sealing key of a keyed lockbox (`None` for a sealed one): which
    /// [`KdsLockboxKey`] opens its KDS box.
    pub fn owner_key(&self) -> Option<&SealingPublicKey> {
        self.owner_key.as_ref()
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Self::header(
            self.kind(),
            self.file,
            self.tree_version,
            &self.shape,
            self.owner_key.as_ref(),
        );
        w.bytes(&self.kds_box).bytes(&self.owner_box);
        w.finish()
    }

    /// Decodes either kind (nothing is verified until a box is opened).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "lockbox");
        let keyed = bytes.get(1) == Some(&(Kind::LockboxKeyed as u8));
        let kind = if keyed {
            Kind::LockboxKeyed
        } else {
            Kind::Lockbox
        };
        let (file, tree_version, shape) = read_file_header(&mut r, kind)?;
        let lockbox = if keyed {
            let owner_key = Some(SealingPublicKey(r.array()?));
            let kds_box: [u8; KEYED_LOCKBOX_BOX_BYTES] = r.array()?;
            let owner_box: [u8; KEYED_LOCKBOX_BOX_BYTES] = r.array()?;
            Self {
                file,
                tree_version,
                shape,
                owner_key,
                kds_box: kds_box.to_vec(),
                owner_box: owner_box.to_vec(),
            }
        } else {
            let kds_box: [u8; LOCKBOX_BOX_BYTES] = r.array()?;
            let owner_box: [u8; LOCKBOX_BOX_BYTES] = r.array()?;
            Self {
                file,
                tree_version,
                shape,
                owner_key: None,
                kds_box: kds_box.to_vec(),
                owner_box: owner_box.to_vec(),
            }
        };
        r.finish()?;
        Ok(lockbox)
    }

    fn opened(&self, plain: &[u8]) -> Result<OpenedLockbox> {
        let root: [u8; 32] = plain
            .try_into()
            .map_err(|_| ProtoError::DecryptionFailed { token: "lockbox" })?;
        Ok(OpenedLockbox {
            file: self.file,
            tree_version: self.tree_version,
            shape: self.shape.clone(),
            root_key: Secret32::from_bytes(root),
        })
    }

    fn open_sealed(&self, sealed: &[u8], secret: &SealingSecretKey) -> Result<OpenedLockbox> {
        if self.owner_key.is_some() {
            return Err(ProtoError::DecryptionFailed { token: "lockbox" });
        }
        let plain = secret
            .open(LOCKBOX_CONTEXT, &self.aad(), sealed)
            .map_err(|_| ProtoError::DecryptionFailed { token: "lockbox" })?;
        self.opened(&plain)
    }

    fn open_keyed(&self, sealed: &[u8], key: &BlockKey) -> Result<OpenedLockbox> {
        if self.owner_key.is_none() {
            return Err(ProtoError::DecryptionFailed { token: "lockbox" });
        }
        let plain = zeroize::Zeroizing::new(
            key.open(0, &self.aad(), sealed)
                .map_err(|_| ProtoError::DecryptionFailed { token: "lockbox" })?,
        );
        self.opened(&plain)
    }

    /// KDS side, a sealed lockbox (`0x0f`); a keyed one is refused.
    pub fn open_as_kds(&self, kds_secret: &SealingSecretKey) -> Result<OpenedLockbox> {
        self.open_sealed(&self.kds_box, kds_secret)
    }

    /// KDS side, a keyed lockbox (`0x14`) under the key of its owner
    /// ([`Lockbox::owner_key`]); a sealed one is refused.
    pub fn open_keyed_as_kds(&self, key: &KdsLockboxKey) -> Result<OpenedLockbox> {
        self.open_keyed(&self.kds_box, &key.0)
    }

    /// Owner side, either kind.
    pub fn open_as_owner(&self, owner_secret: &SealingSecretKey) -> Result<OpenedLockbox> {
        match &self.owner_key {
            None => self.open_sealed(&self.owner_box, owner_secret),
            Some(owner_key) => {
                self.open_keyed(&self.owner_box, &owner_box_key(owner_secret, owner_key)?)
            }
        }
    }
}
