//! SPEC M4: the Merkle tree message. An OSD that meets an unknown root in a capability
//! asks the client for the tree; the message lists the members, grouped in the subtrees the
//! MDS composed (for example a UNIX group's cached tree plus individual users). The OSD
//! rebuilds the root and accepts the members only when it equals the capability's root, so
//! the message needs no signature (paper 000 footnote 1).
//!
//! Leaves are `kind || id_be` (9 bytes), so a user tree never verifies as a file tree.
//! One subtree: the root is that subtree's root. Several: the root of the tree over the
//! subtree roots ([`maat_crypto::merkle::MerkleTree::from_nodes`]).

use crate::codec::{check_strictly_ascending, Reader, Writer};
use crate::limits::{MERKLE_MESSAGE_MEMBERS_MAX, MERKLE_MESSAGE_SUBTREES_MAX};
use crate::signed::{read_header, write_header, Kind};
use crate::{ProtoError, Result};
use maat_crypto::hash::Digest;
use maat_crypto::merkle::MerkleTree;
use std::collections::HashSet;

/// What the members of a tree are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SetKind {
    /// User ids.
    Users = 1,
    /// File ids.
    Files = 2,
}

/// The canonical leaf bytes of a member.
pub fn member_leaf(kind: SetKind, id: u64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = kind as u8;
    out[1..].copy_from_slice(&id.to_be_bytes());
    out
}

/// A subtree's Merkle tree (the MDS caches these per group).
pub fn subtree(kind: SetKind, members: &[u64]) -> Result<MerkleTree> {
    let leaves: Vec<[u8; 9]> = members.iter().map(|id| member_leaf(kind, *id)).collect();
    Ok(MerkleTree::from_members(&leaves)?)
}

/// The root committed to by `subtrees`, composed from their (possibly cached) roots.
pub fn compose_roots(roots: &[Digest]) -> Result<Digest> {
    match roots {
        [single] => Ok(*single),
        _ => Ok(MerkleTree::from_nodes(roots.to_vec())?.root()),
    }
}

/// A decoded Merkle tree message, not yet checked against any root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleTreeMessage {
    kind: SetKind,
    subtrees: Vec<Vec<u64>>,
}

impl MerkleTreeMessage {
    /// Builds a message; each subtree's ids must be strictly ascending and non-empty.
    pub fn new(kind: SetKind, subtrees: Vec<Vec<u64>>) -> Result<Self> {
        let msg = Self { kind, subtrees };
        msg.check()?;
        Ok(msg)
    }

    fn check(&self) -> Result<()> {
        if self.subtrees.is_empty() || self.subtrees.len() > MERKLE_MESSAGE_SUBTREES_MAX {
            return Err(ProtoError::TooLarge {
                what: "Merkle subtrees",
                len: self.subtrees.len(),
                limit: MERKLE_MESSAGE_SUBTREES_MAX,
            });
        }
        let total: usize = self.subtrees.iter().map(Vec::len).sum();
        if total > MERKLE_MESSAGE_MEMBERS_MAX {
            return Err(ProtoError::TooLarge {
                what: "Merkle members",
                len: total,
                limit: MERKLE_MESSAGE_MEMBERS_MAX,
            });
        }
        for s in &self.subtrees {
            if s.is_empty() {
                return Err(ProtoError::Malformed {
                    what: "Merkle tree message",
                    reason: "empty subtree",
                });
            }
            check_strictly_ascending(s, "Merkle tree message")?;
        }
        Ok(())
    }

    /// The canonical encoding: `version || 0x05 || set_kind(1) || n_subtrees(u32) ||
    /// (count(u32) || ids(u64)*)*`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        write_header(&mut w, Kind::MerkleTree);
        w.u8(self.kind as u8)
            .u32(u32::try_from(self.subtrees.len()).unwrap_or(u32::MAX));
        for s in &self.subtrees {
            w.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
            for id in s {
                w.u64(*id);
            }
        }
        w.finish()
    }

    /// Decodes, enforcing limits before allocating.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "Merkle tree message");
        read_header(&mut r, Kind::MerkleTree)?;
        let kind = match r.u8()? {
            1 => SetKind::Users,
            2 => SetKind::Files,
            _ => {
                return Err(ProtoError::Malformed {
                    what: "Merkle tree message",
                    reason: "unknown set kind",
                })
            }
        };
        let n = r.count("Merkle subtrees", MERKLE_MESSAGE_SUBTREES_MAX, 4)?;
        let mut subtrees = Vec::with_capacity(n);
        let mut total = 0usize;
        for _ in 0..n {
            let count = r.count("Merkle members", MERKLE_MESSAGE_MEMBERS_MAX - total, 8)?;
            total += count;
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                ids.push(r.u64()?);
            }
            subtrees.push(ids);
        }
        r.finish()?;
        Self::new(kind, subtrees)
    }

    /// Users or files.
    pub fn kind(&self) -> SetKind {
        self.kind
    }

    /// The root these members commit to.
    pub fn root(&self) -> Result<Digest> {
        let roots = self
            .subtrees
            .iter()
            .map(|s| Ok(subtree(self.kind, s)?.root()))
            .collect::<Result<Vec<_>>>()?;
        compose_roots(&roots)
    }

    /// Rebuilds the root and accepts the members only if it equals `expected` (constant
    /// time). The only way to a [`MemberSet`].
    pub fn verify(self, kind: SetKind, expected: &Digest) -> Result<MemberSet> {
        if self.kind != kind {
            return Err(ProtoError::CommitmentMismatch {
                what: "Merkle tree kind",
            });
        }
        let root = self.root()?;
        if !maat_crypto::ct_eq(&root, expected) {
            return Err(ProtoError::CommitmentMismatch {
                what: "Merkle tree",
            });
        }
        let members = self.subtrees.into_iter().flatten().collect();
        Ok(MemberSet {
            kind,
            root,
            members,
        })
    }
}

/// The verified members of one Merkle root (what an OSD caches per root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSet {
    kind: SetKind,
    root: Digest,
    members: HashSet<u64>,
}

impl MemberSet {
    /// The root verified.
    pub fn root(&self) -> &Digest {
        &self.root
    }
    /// Users or files.
    pub fn kind(&self) -> SetKind {
        self.kind
    }
    /// Membership test.
    pub fn contains(&self, id: u64) -> bool {
        self.members.contains(&id)
    }
    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }
    /// The members, ascending.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.members.iter().copied().collect();
        ids.sort_unstable();
        ids
    }
    /// Never true for a verified set.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}
