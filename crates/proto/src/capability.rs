//! SPEC M3: the extended capability ⟨U, I, capability id, mode, start, expiry⟩ signed by
//! the MDS (paper 000 Fig. 3c). U and I name users and files explicitly when there is one
//! of each, otherwise by a Merkle root; U may instead be the hash of a computation public
//! key (M10 delegation). Every capability encodes to exactly [`CAPABILITY_BYTES`].

use crate::codec::{Reader, Writer};
use crate::merkle_msg::{MemberSet, SetKind};
use crate::protection::Protection;
use crate::signed::{Body, Kind};
use crate::{CapabilityId, FileId, ProtoError, Result, UnixMillis, UserId};
use maat_crypto::hash::Digest;

/// Encoded length of a capability, signature included (fixed).
pub const CAPABILITY_BYTES: usize = 2 + 33 + 33 + 8 + 1 + 8 + 8 + 64;

/// Who a capability authorizes (U).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principals {
    /// Exactly one user.
    User(UserId),
    /// The users of the Merkle tree with this root.
    UserTree(Digest),
    /// Whoever proves possession of the computation key with this hash (M10).
    ComputationKey(Digest),
}

/// Which files a capability covers (I).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Files {
    /// Exactly one file.
    File(FileId),
    /// The files of the Merkle tree with this root.
    FileTree(Digest),
    /// The file ids `first .. first + count`, reserved for the user it names before any
    /// of them is a file (`MdsRequest::Reserve`): its puts store their data under them
    /// first and link a path to each after (`MdsRequest::Link`).
    Range {
        /// The first id.
        first: FileId,
        /// How many ids (at least one).
        count: u32,
    },
}

/// Access mode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mode(u8);

impl Mode {
    /// Read data and attributes.
    pub const READ: Mode = Mode(0x01);
    /// Write, append, truncate.
    pub const WRITE: Mode = Mode(0x02);
    /// Read and write.
    pub const READ_WRITE: Mode = Mode(0x03);
    /// SPEC H6: a KDS gives keys under this capability only for the byte ranges of a
    /// key-range permit ([`crate::key_ranges::KeyRanges`]) that names it. OSDs ignore it.
    pub const RANGE_KEYS: Mode = Mode(0x04);
    const ACCESS: u8 = 0x03;
    const ALL: u8 = 0x07;

    /// Mode from raw bits, refusing unknown bits and modes that grant no access.
    pub fn from_bits(bits: u8) -> Option<Mode> {
        (bits & !Self::ALL == 0 && bits & Self::ACCESS != 0).then_some(Mode(bits))
    }
    /// This mode with `other`'s bits too.
    pub fn with(self, other: Mode) -> Mode {
        Mode(self.0 | other.0)
    }
    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
    /// True when every bit of `other` is granted.
    pub fn allows(self, other: Mode) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The fields of an extended capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// U.
    pub users: Principals,
    /// I.
    pub files: Files,
    /// Unique id (renewal and revocation name it).
    pub id: CapabilityId,
    /// Granted mode.
    pub mode: Mode,
    /// The protection method requests under this capability must use at least (SPEC T1),
    /// chosen by the MDS per partition. Encoded in the high nibble of the mode byte:
    /// 0 = ALLDATA (so capabilities from before methods existed keep their meaning),
    /// 1 = CAPKEY, 2 = CMDRSP, 3 = CONFIDENTIAL.
    pub protection: Protection,
    /// Start of validity.
    pub start: UnixMillis,
    /// End of validity (a renewal token may extend it).
    pub expiry: UnixMillis,
}

fn write_id_or_digest(w: &mut Writer, tag: u8, id: Option<u64>, digest: Option<&Digest>) {
    w.u8(tag);
    match (id, digest) {
        (Some(id), _) => {
            w.u64(id).bytes(&[0u8; 24]);
        }
        (None, Some(d)) => {
            w.bytes(d);
        }
        (None, None) => {
            w.bytes(&[0u8; 32]);
        }
    }
}

fn read_id(field: &[u8; 32]) -> Result<u64> {
    let (id, pad) = field.split_at(8);
    if pad.iter().any(|b| *b != 0) {
        return Err(ProtoError::Malformed {
            what: "capability",
            reason: "non-zero padding after id",
        });
    }
    let id: [u8; 8] = id
        .try_into()
        .map_err(|_| ProtoError::Truncated { what: "capability" })?;
    Ok(u64::from_be_bytes(id))
}

/// A range's 32-byte field: first id and count (8 bytes each, big-endian), 16 zero
/// bytes. A count of zero, or a range past the last id, is refused.
fn read_range(field: &[u8; 32]) -> Result<Files> {
    let malformed = |reason| ProtoError::Malformed {
        what: "capability",
        reason,
    };
    let (first, rest) = field.split_at(8);
    let (count, pad) = rest.split_at(8);
    if pad.iter().any(|b| *b != 0) {
        return Err(malformed("non-zero padding after file range"));
    }
    let first = u64::from_be_bytes(first.try_into().map_err(|_| malformed("file range"))?);
    let count = u64::from_be_bytes(count.try_into().map_err(|_| malformed("file range"))?);
    let count = u32::try_from(count)
        .ok()
        .filter(|c| *c > 0 && first.checked_add(u64::from(*c)).is_some())
        .ok_or_else(|| malformed("empty or overflowing file range"))?;
    Ok(Files::Range {
        first: FileId(first),
        count,
    })
}

/// NOSEC never has a capability; the others in the mode byte's high nibble.
fn protection_nibble(p: Protection) -> u8 {
    match p {
        Protection::AllData | Protection::NoSec => 0,
        Protection::CapKey => 1,
        Protection::CmdRsp => 2,
        Protection::Confidential => 3,
    }
}

fn protection_from_nibble(n: u8) -> Option<Protection> {
    Some(match n {
        0 => Protection::AllData,
        1 => Protection::CapKey,
        2 => Protection::CmdRsp,
        3 => Protection::Confidential,
        _ => return None,
    })
}

impl Body for Capability {
    const KIND: Kind = Kind::Capability;
    fn encode_body(&self, w: &mut Writer) {
        match &self.users {
            Principals::User(u) => write_id_or_digest(w, 1, Some(u.0), None),
            Principals::UserTree(d) => write_id_or_digest(w, 2, None, Some(d)),
            Principals::ComputationKey(d) => write_id_or_digest(w, 3, None, Some(d)),
        }
        match &self.files {
            Files::File(f) => write_id_or_digest(w, 1, Some(f.0), None),
            Files::FileTree(d) => write_id_or_digest(w, 2, None, Some(d)),
            Files::Range { first, count } => {
                w.u8(3)
                    .u64(first.0)
                    .u64(u64::from(*count))
                    .bytes(&[0u8; 16]);
            }
        }
        w.u64(self.id.0)
            .u8(self.mode.0 | (protection_nibble(self.protection) << 4))
            .u64(self.start.0)
            .u64(self.expiry.0);
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let users_tag = r.u8()?;
        let users_field: [u8; 32] = r.array()?;
        let users = match users_tag {
            1 => Principals::User(UserId(read_id(&users_field)?)),
            2 => Principals::UserTree(users_field),
            3 => Principals::ComputationKey(users_field),
            _ => {
                return Err(ProtoError::Malformed {
                    what: "capability",
                    reason: "unknown user-set tag",
                })
            }
        };
        let files_tag = r.u8()?;
        let files_field: [u8; 32] = r.array()?;
        let files = match files_tag {
            1 => Files::File(FileId(read_id(&files_field)?)),
            2 => Files::FileTree(files_field),
            3 => read_range(&files_field)?,
            _ => {
                return Err(ProtoError::Malformed {
                    what: "capability",
                    reason: "unknown file-set tag",
                })
            }
        };
        let id = CapabilityId(r.u64()?);
        let mode_byte = r.u8()?;
        let mode = Mode::from_bits(mode_byte & 0x0f).ok_or(ProtoError::Malformed {
            what: "capability",
            reason: "unknown or empty mode bits",
        })?;
        let protection = protection_from_nibble(mode_byte >> 4).ok_or(ProtoError::Malformed {
            what: "capability",
            reason: "unknown protection method",
        })?;
        Ok(Self {
            users,
            files,
            id,
            mode,
            protection,
            start: UnixMillis(r.u64()?),
            expiry: UnixMillis(r.u64()?),
        })
    }
}

impl Capability {
    /// SPEC M3: the *authenticated* requester must be in U. `tree` is the verified member
    /// set for U's root when U is a tree (the OSD fetches it per M4 when it lacks it).
    pub fn check_user(&self, user: UserId, tree: Option<&MemberSet>) -> Result<()> {
        match &self.users {
            Principals::User(u) if *u == user => Ok(()),
            Principals::User(_) => Err(ProtoError::PermissionDenied {
                reason: "user not named in capability",
            }),
            Principals::UserTree(root) => check_tree(
                root,
                SetKind::Users,
                user.0,
                tree,
                "user not in capability's user set",
            ),
            Principals::ComputationKey(_) => Err(ProtoError::PermissionDenied {
                reason: "delegated capability needs a proof of possession",
            }),
        }
    }

    /// SPEC M3: the object's file must be in I.
    pub fn check_file(&self, file: FileId, tree: Option<&MemberSet>) -> Result<()> {
        match &self.files {
            Files::File(f) if *f == file => Ok(()),
            Files::File(_) => Err(ProtoError::PermissionDenied {
                reason: "object belongs to a file not named in capability",
            }),
            Files::FileTree(root) => check_tree(
                root,
                SetKind::Files,
                file.0,
                tree,
                "file not in capability's file set",
            ),
            Files::Range { first, count } => {
                if file.0 >= first.0 && file.0 - first.0 < u64::from(*count) {
                    Ok(())
                } else {
                    Err(ProtoError::PermissionDenied {
                        reason: "object belongs to a file outside capability's id range",
                    })
                }
            }
        }
    }

    /// The mode asked for must be granted.
    pub fn check_mode(&self, wanted: Mode) -> Result<()> {
        if self.mode.allows(wanted) {
            Ok(())
        } else {
            Err(ProtoError::PermissionDenied {
                reason: "mode not granted by capability",
            })
        }
    }
}

fn check_tree(
    root: &Digest,
    kind: SetKind,
    id: u64,
    tree: Option<&MemberSet>,
    reason: &'static str,
) -> Result<()> {
    let tree = tree.ok_or(ProtoError::UnknownKey {
        what: "Merkle tree for capability root",
    })?;
    if tree.kind() != kind || !maat_crypto::ct_eq(tree.root(), root) {
        return Err(ProtoError::CommitmentMismatch {
            what: "Merkle tree",
        });
    }
    if tree.contains(id) {
        Ok(())
    } else {
        Err(ProtoError::PermissionDenied { reason })
    }
}

crate::signed::timed_by_fields!(Capability);
impl crate::signed::SignedBody for Capability {}
