//! SPEC M10: secure delegation (paper 000 Fig. 6).
//!
//! * File handle ℱ = ⟨handle id, file, path, mode, flags, 𝒞, computation public key,
//!   start, expiry⟩ signed by the MDS; its capability's U is the hash of the computation key.
//! * Key lifetime token ℒ = ⟨computation public key, lead user, start, expiry⟩ signed by
//!   the MDS; only the lead renews it, and a revocation notice can kill it at once.
//! * Proof token 𝒫 = ⟨key hash, OSD id, session id⟩ signed with the computation private
//!   key and encrypted under the client–OSD key. Binding the OSD and session (the paper
//!   signs only the key hash) keeps a proof seen by one OSD from serving at another.

use crate::capability::{Capability, Files, Mode, Principals, CAPABILITY_BYTES};
use crate::codec::{Reader, Writer};
use crate::limits::{PATH_BYTES_MAX, SESSION_ID_BYTES};
use crate::session::SessionKey;
use crate::signed::{self, Body, Kind, Unverified, Verified};
use crate::{FileId, OsdId, ProtoError, Result, UnixMillis, UserId};
use maat_crypto::aead::BlockKey;
use maat_crypto::hash::{self, Digest};
use maat_crypto::sign::{SigningKey, VerifyingKey};
use maat_crypto::{kdf, CryptoRngCore};

const PROOF_CONTEXT: &[u8] = b"maat/m10/proof/v1";

/// The hash a capability's U carries for a computation key.
pub fn computation_key_hash(public_key: &[u8; 32]) -> Digest {
    hash::blake3(&[b"maat/computation-key/v1", public_key])
}

/// The fields of a delegation file handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHandle {
    /// Unique id.
    pub handle_id: u64,
    /// The file opened.
    pub file: FileId,
    /// The path opened (informational; the capability names the file).
    pub path: Vec<u8>,
    /// Mode opened.
    pub mode: Mode,
    /// Open flags.
    pub flags: u32,
    /// The encoded capability, bound to the computation key hash.
    pub capability: Vec<u8>,
    /// The computation public key (Ed25519).
    pub computation_key: [u8; 32],
    /// Start of validity.
    pub start: UnixMillis,
    /// End of validity.
    pub expiry: UnixMillis,
}

impl Body for FileHandle {
    const KIND: Kind = Kind::FileHandle;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.handle_id)
            .u64(self.file.0)
            .var_bytes(&self.path)
            .u8(self.mode.bits())
            .u32(self.flags);
        w.bytes(&self.capability)
            .bytes(&self.computation_key)
            .u64(self.start.0)
            .u64(self.expiry.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let handle_id = r.u64()?;
        let file = FileId(r.u64()?);
        let path = r.var_bytes("path", PATH_BYTES_MAX)?.to_vec();
        let mode = Mode::from_bits(r.u8()?)
            .filter(|m| !m.allows(Mode::RANGE_KEYS))
            .ok_or(ProtoError::Malformed {
                what: "file handle",
                reason: "unknown mode bits",
            })?;
        let flags = r.u32()?;
        let capability = r.take(CAPABILITY_BYTES)?.to_vec();
        Unverified::<Capability>::decode(&capability)?;
        Ok(Self {
            handle_id,
            file,
            path,
            mode,
            flags,
            capability,
            computation_key: r.array()?,
            start: UnixMillis(r.u64()?),
            expiry: UnixMillis(r.u64()?),
        })
    }
}

/// A verified file handle with its verified, key-bound capability.
#[derive(Debug, Clone)]
pub struct VerifiedFileHandle {
    /// The handle.
    pub handle: Verified<FileHandle>,
    /// Its capability.
    pub capability: Verified<Capability>,
}

/// Verifies a handle, its embedded capability, and that the capability is bound to the
/// handle's computation key and file.
pub fn verify_file_handle(
    handle: Unverified<FileHandle>,
    mds_key: &VerifyingKey,
    now: UnixMillis,
) -> Result<VerifiedFileHandle> {
    let handle = handle.verify(mds_key, now)?;
    let capability = Unverified::<Capability>::decode(&handle.capability)?.verify(mds_key, now)?;
    if capability.users != Principals::ComputationKey(computation_key_hash(&handle.computation_key))
    {
        return Err(ProtoError::CommitmentMismatch {
            what: "file handle capability key hash",
        });
    }
    if capability.files != Files::File(handle.file) || !capability.mode.allows(handle.mode) {
        return Err(ProtoError::CommitmentMismatch {
            what: "file handle capability file or mode",
        });
    }
    Ok(VerifiedFileHandle { handle, capability })
}

/// The fields of a key lifetime token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLifetimeToken {
    /// The computation public key (Ed25519).
    pub computation_key: [u8; 32],
    /// The lead client's user: the only one who may renew.
    pub lead: UserId,
    /// Start of validity.
    pub start: UnixMillis,
    /// End of validity.
    pub expiry: UnixMillis,
}

impl KeyLifetimeToken {
    /// The hash capabilities carry for this key.
    pub fn key_hash(&self) -> Digest {
        computation_key_hash(&self.computation_key)
    }
}

impl Body for KeyLifetimeToken {
    const KIND: Kind = Kind::KeyLifetime;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.computation_key)
            .u64(self.lead.0)
            .u64(self.start.0)
            .u64(self.expiry.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            computation_key: r.array()?,
            lead: UserId(r.u64()?),
            start: UnixMillis(r.u64()?),
            expiry: UnixMillis(r.u64()?),
        })
    }
}

/// The fields of a proof-of-possession token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofToken {
    /// Hash of the computation public key.
    pub key_hash: Digest,
    /// The OSD the proof is for.
    pub osd: OsdId,
    /// The client–OSD session it travels in.
    pub session_id: [u8; SESSION_ID_BYTES],
}

impl Body for ProofToken {
    const KIND: Kind = Kind::Proof;
    fn encode_body(&self, w: &mut Writer) {
        w.bytes(&self.key_hash)
            .u64(self.osd.0)
            .bytes(&self.session_id);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            key_hash: r.array()?,
            osd: OsdId(r.u64()?),
            session_id: r.array()?,
        })
    }
}

fn proof_key(session: &SessionKey) -> Result<BlockKey> {
    proof_key_from_secret(session.key.expose())
}

/// The key proofs are sealed under, from a client–OSD session secret `K_CD` (an OSD
/// derives it once when it accepts the session).
pub fn proof_key_from_secret(secret: &[u8; 32]) -> Result<BlockKey> {
    Ok(BlockKey::new(kdf::hkdf_sha256(
        PROOF_CONTEXT,
        secret,
        &[b"key"],
    )?))
}

/// Participant side: signs a proof with the computation key and encrypts it under the
/// client–OSD key. Made once per (key, session) and attached to each I/O.
pub fn make_proof(
    computation_key: &SigningKey,
    session: &SessionKey,
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>> {
    let body = ProofToken {
        key_hash: computation_key_hash(&computation_key.verifying_key().to_bytes()),
        osd: session.osd,
        session_id: session.session_id,
    };
    let token = signed::sign(body, computation_key);
    Ok(proof_key(session)?.seal(0, PROOF_CONTEXT, token.encoded(), rng)?)
}

/// OSD side: checks that the cached lifetime token is still valid at `now`, decrypts the
/// proof, checks it is for this OSD and session, and that the computation key the lifetime
/// token names signed it.
pub fn open_proof(
    sealed: &[u8],
    session: &SessionKey,
    lifetime: &Verified<KeyLifetimeToken>,
    counters_from: &VerifyingKey,
    now: UnixMillis,
) -> Result<Verified<ProofToken>> {
    open_proof_with_key(
        sealed,
        &proof_key(session)?,
        session.osd,
        &session.session_id,
        lifetime,
        counters_from,
        now,
    )
}

/// [`open_proof`] with the session's proof key already derived
/// ([`proof_key_from_secret`]), as an OSD keeps it per session.
pub fn open_proof_with_key(
    sealed: &[u8],
    key: &BlockKey,
    osd: OsdId,
    session_id: &[u8; SESSION_ID_BYTES],
    lifetime: &Verified<KeyLifetimeToken>,
    counters_from: &VerifyingKey,
    now: UnixMillis,
) -> Result<Verified<ProofToken>> {
    signed::check_validity(lifetime.body(), now)?;
    let plain = key
        .open(0, PROOF_CONTEXT, sealed)
        .map_err(|_| ProtoError::DecryptionFailed {
            token: "proof token",
        })?;
    let proof = Unverified::<ProofToken>::decode(&plain)?;
    let body = proof.unverified_body();
    if body.osd != osd || body.session_id != *session_id {
        return Err(ProtoError::WrongRecipient {
            token: "proof token",
            reason: "made for another OSD or session",
        });
    }
    if body.key_hash != lifetime.key_hash() {
        return Err(ProtoError::CommitmentMismatch {
            what: "proof token key hash",
        });
    }
    let key = VerifyingKey::from_bytes(&lifetime.computation_key)
        .map_err(|_| ProtoError::Malformed {
            what: "key lifetime token",
            reason: "invalid computation key",
        })?
        .with_counters(counters_from.counters().clone());
    proof.verify_untimed(&key)
}

/// [`FileHandle::flags`] bit: the file is encrypted (SPEC H3). A participant asks the MDS
/// for its crypt record (`MdsRequest::StatByHandle`) and the KDS for its keys
/// (`KdsRequest::KeysForJob`).
pub const HANDLE_FLAG_ENCRYPTED: u32 = 1;
/// [`FileHandle::flags`] bit: the job opened the file for ranges (SPEC H6): its
/// capability carries `Mode::RANGE_KEYS`, and each participant gets keys only for the
/// ranges the file's owner granted that participant (its permit from `StatByHandle`).
pub const HANDLE_FLAG_RANGES: u32 = 2;

/// The message a participant signs with the computation key to read the attributes of a
/// job's file, with its crypt record (`MdsRequest::StatByHandle`): bound to its MDS
/// session, so it cannot be replayed in another.
pub fn stat_message(mds_session: &[u8; SESSION_ID_BYTES], handle_id: u64) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(b"maat/m10/stat/v1\0")
        .bytes(mds_session)
        .u64(handle_id);
    w.finish()
}

/// The message a participant signs with the computation key to ask a KDS for the keys
/// of a job's encrypted files (`KdsRequest::KeysForJob`): bound to the participant's
/// login ticket, so it serves nobody else (grants are sealed to that login anyway).
pub fn kds_proof_message(ticket: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(b"maat/m10/kds/v1\0")
        .bytes(&hash::blake3(&[ticket]));
    w.finish()
}

/// The message a participant signs with the computation key to record the size of a file
/// written through a job's handle (`MdsRequest::SetSizeByHandle`): bound to its MDS
/// session, so it cannot be replayed in another.
pub fn set_size_message(
    mds_session: &[u8; SESSION_ID_BYTES],
    handle_id: u64,
    size: u64,
) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(b"maat/m10/set-size/v1\0")
        .bytes(mds_session)
        .u64(handle_id)
        .u64(size);
    w.finish()
}

crate::signed::timed_by_fields!(FileHandle, KeyLifetimeToken);
impl crate::signed::SignedBody for FileHandle {}
impl crate::signed::SignedBody for KeyLifetimeToken {}
impl crate::signed::SignedBody for ProofToken {}
impl crate::signed::Untimed for ProofToken {}
