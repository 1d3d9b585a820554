//! SPEC H6 at the MDS: range grants on encrypted files. The owner lets users read byte
//! ranges of a file beside its permission bits, explicitly or by the slice policy (user
//! `i` of `n` reads the `i`-th of `n` equal slices). A user whose only access is a grant
//! gets, at open, a read capability marked [`Mode::RANGE_KEYS`] and a key-range permit
//! naming it: OSDs serve the ciphertext under the capability, and a KDS hands out keys
//! only for the permit's ranges, so the rest of the file stays unreadable to that user
//! even with raw access to the objects.

use crate::{Batch, Inode, KeyGrant, MdsError, MetaStore, Op, Principal, Result};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::Mode;
use maat_proto::key_ranges::{KeyRanges, KEY_RANGES_MAX};
use maat_proto::msg::{ErrorCode, FileStat, KeyGrantInfo, MdsResponse};
use maat_proto::{signed, CapabilityId, FileId, UnixMillis, UserId};

pub use crate::limits::KEY_GRANT_USERS_MAX;

fn invalid(path: &str, why: impl std::fmt::Display) -> MdsError {
    MdsError::refused(ErrorCode::InvalidArgument, format!("{path}: {why}"))
}

/// The leaf size of an encrypted file's key tree (grants are in whole leaves).
fn leaf_bytes(inode: &Inode, path: &str) -> Result<u64> {
    let crypt = inode.crypt.as_ref().ok_or_else(|| {
        invalid(
            path,
            "not encrypted: a range grant limits which keys a reader gets, so only encrypted files take one",
        )
    })?;
    Ok(crate::encryption::current_lockbox(crypt, path)?
        .shape
        .leaf_size_bytes())
}

/// `ranges` sorted, with overlapping and touching ranges joined.
fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// Slice `rank` of `members` over `size` bytes in `leaf`-byte leaves (`None`: empty).
fn slice(rank: usize, members: usize, size: u64, leaf: u64) -> Option<(u64, u64)> {
    let leaves = size.div_ceil(leaf);
    let per = leaves.div_ceil(members as u64).max(1);
    let first = per.checked_mul(rank as u64)?;
    (first < leaves).then(|| (first * leaf, (first + per).min(leaves) * leaf))
}

/// The byte ranges `uid` may read of `inode` by grants (empty: none), in whole leaves.
pub(crate) fn granted_ranges(inode: &Inode, uid: u64, path: &str) -> Result<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    for grant in &inode.key_grants {
        match grant {
            KeyGrant::Ranges { user, ranges: r } if *user == uid => ranges.extend_from_slice(r),
            KeyGrant::Slices { members } => {
                let leaf = leaf_bytes(inode, path)?;
                for (rank, m) in members.iter().enumerate() {
                    if *m == Some(uid) {
                        ranges.extend(slice(rank, members.len(), inode.size, leaf));
                    }
                }
            }
            KeyGrant::Ranges { .. } => {}
        }
    }
    let ranges = coalesce(ranges);
    if ranges.len() > KEY_RANGES_MAX {
        return Err(MdsError::refused(
            ErrorCode::TooLarge,
            format!("{path}: more than {KEY_RANGES_MAX} granted ranges"),
        ));
    }
    Ok(ranges)
}

/// Whether `uid` holds any grant on `inode`.
pub(crate) fn has_grant(inode: &Inode, uid: u64) -> bool {
    inode.key_grants.iter().any(|g| match g {
        KeyGrant::Ranges { user, .. } => *user == uid,
        KeyGrant::Slices { members } => members.contains(&Some(uid)),
    })
}

impl<S: MetaStore> crate::Mds<S> {
    /// The file at `path` if `who` manages its grants (its owner or the administrator)
    /// and it is encrypted, and its leaf size.
    fn grantable(&self, who: &Principal, path: &str) -> Result<(Inode, u64)> {
        let inode = self.resolve(who, path)?;
        if inode.is_dir {
            return Err(MdsError::refused(ErrorCode::IsADirectory, path.to_string()));
        }
        if inode.uid != who.uid && !who.is_admin() {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{path}: only its owner manages its range grants"),
            ));
        }
        let leaf = leaf_bytes(&inode, path)?;
        Ok((inode, leaf))
    }

    fn uids(&self, users: &[String]) -> Result<Vec<u64>> {
        if users.is_empty() || users.len() > KEY_GRANT_USERS_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("a grant names 1 to {KEY_GRANT_USERS_MAX} users"),
            ));
        }
        users
            .iter()
            .map(|name| {
                self.store
                    .user_by_name(name)?
                    .map(|u| u.id)
                    .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, name.clone()))
            })
            .collect()
    }

    /// `KeysGrant`: adds `ranges` to each user's grant, or makes `users` the slice policy.
    pub(crate) fn keys_grant(
        &self,
        who: &Principal,
        path: &str,
        users: &[String],
        ranges: &[(u64, u64)],
        slices: bool,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let (mut inode, leaf) = self.grantable(who, path)?;
        let uids = self.uids(users)?;
        if slices != ranges.is_empty() {
            return Err(invalid(path, "grant either byte ranges or slices"));
        }
        if ranges.len() > KEY_RANGES_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("at most {KEY_RANGES_MAX} ranges per grant"),
            ));
        }
        let mut distinct = uids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != uids.len() {
            return Err(invalid(path, "a user is named twice"));
        }
        for &(start, end) in ranges {
            if start >= end || end > maat_proto::limits::FILE_BYTES_MAX {
                return Err(invalid(
                    path,
                    format!("range {start}..{end} is empty or past the largest file"),
                ));
            }
            if start % leaf != 0 || end % leaf != 0 {
                return Err(invalid(
                    path,
                    format!(
                        "range {start}..{end} does not fall on {leaf}-byte blocks: keys are granted per block, so a grant names whole blocks"
                    ),
                ));
            }
        }
        if slices {
            inode
                .key_grants
                .retain(|g| !matches!(g, KeyGrant::Slices { .. }));
            inode.key_grants.push(KeyGrant::Slices {
                members: uids.into_iter().map(Some).collect(),
            });
        } else {
            for uid in uids {
                let mut mine: Vec<(u64, u64)> = ranges.to_vec();
                inode.key_grants.retain(|g| match g {
                    KeyGrant::Ranges { user, ranges } if *user == uid => {
                        mine.extend_from_slice(ranges);
                        false
                    }
                    _ => true,
                });
                let mine = coalesce(mine);
                if mine.len() > KEY_RANGES_MAX {
                    return Err(MdsError::refused(
                        ErrorCode::TooLarge,
                        format!("{path}: at most {KEY_RANGES_MAX} separate ranges per user"),
                    ));
                }
                inode.key_grants.push(KeyGrant::Ranges {
                    user: uid,
                    ranges: mine,
                });
            }
        }
        let mut batch = Batch::default();
        batch.push(Op::PutInode(inode));
        self.store.commit(batch)?;
        Ok(MdsResponse::Ok)
    }

    /// `KeysRevoke`: withdraws every grant of `users` (a slice member's slot stays, empty,
    /// so the other members' slices do not move).
    pub(crate) fn keys_revoke(
        &self,
        who: &Principal,
        path: &str,
        users: &[String],
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let (mut inode, _) = self.grantable(who, path)?;
        let uids = self.uids(users)?;
        inode.key_grants.retain(|g| match g {
            KeyGrant::Ranges { user, .. } => !uids.contains(user),
            KeyGrant::Slices { .. } => true,
        });
        for g in &mut inode.key_grants {
            if let KeyGrant::Slices { members } = g {
                for m in members.iter_mut() {
                    if m.is_some_and(|u| uids.contains(&u)) {
                        *m = None;
                    }
                }
            }
        }
        inode.key_grants.retain(
            |g| !matches!(g, KeyGrant::Slices { members } if members.iter().all(Option::is_none)),
        );
        let mut batch = Batch::default();
        batch.push(Op::PutInode(inode));
        self.acl_change(|stamp| {
            batch.push(stamp);
            Ok(self.store.commit(batch)?)
        })?;
        Ok(MdsResponse::Ok)
    }

    /// `KeysList`: the file's grants, one entry per user.
    pub(crate) fn keys_list(&self, who: &Principal, path: &str) -> Result<MdsResponse> {
        let (inode, _) = self.grantable(who, path)?;
        let name = |uid: u64| -> Result<String> {
            Ok(self
                .store
                .user(uid)?
                .map_or_else(|| uid.to_string(), |u| u.name))
        };
        let mut out = Vec::new();
        for g in &inode.key_grants {
            match g {
                KeyGrant::Ranges { user, ranges } => out.push(KeyGrantInfo {
                    user: name(*user)?,
                    ranges: ranges.clone(),
                    slice: None,
                }),
                KeyGrant::Slices { members } => {
                    let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
                    for (rank, m) in members.iter().enumerate() {
                        if let Some(uid) = m {
                            out.push(KeyGrantInfo {
                                user: name(*uid)?,
                                ranges: Vec::new(),
                                slice: Some((u32::try_from(rank).unwrap_or(u32::MAX), n)),
                            });
                        }
                    }
                }
            }
        }
        Ok(MdsResponse::KeyGrants(out))
    }

    /// The signed key-range permit (PROTOCOL.md 0x11) letting user `uid` have the keys of
    /// `ranges` of `inode` under the capability `(id, start, expiry)`.
    pub(crate) fn range_permit(
        &self,
        inode: &Inode,
        path: &str,
        uid: u64,
        ranges: Vec<(u64, u64)>,
        (capability, start, expiry): (CapabilityId, UnixMillis, UnixMillis),
    ) -> Result<Vec<u8>> {
        let permit = KeyRanges {
            capability,
            user: UserId(uid),
            file: FileId(inode.id),
            ranges,
            start,
            expiry,
            // A KDS then opens no lockbox of a later tree under it (SPEC H7).
            tree_version: inode
                .crypt
                .as_ref()
                .map(|c| crate::encryption::current_tree_version(c, path))
                .transpose()?,
        };
        Ok(signed::sign(permit, &self.signing).encoded().to_vec())
    }

    /// An open for reading by a user whose only access to `inode` is a range grant: a
    /// read capability marked [`Mode::RANGE_KEYS`] for this user and file alone, and the
    /// key-range permit naming it, both signed now.
    pub(crate) fn range_open(
        &self,
        who: &Principal,
        inode: &Inode,
        path: &str,
        secure: bool,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if self.user_revoked(who.uid, now)? {
            return Err(MdsError::refused(
                ErrorCode::Revoked,
                "this user's capabilities are revoked for now (maat admin revoke)",
            ));
        }
        let ranges = granted_ranges(inode, who.uid, path)?;
        if ranges.is_empty() {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{path}: your slice of it is empty (the file is smaller than its slices)"),
            ));
        }
        if !secure {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{path}: a range grant needs a session (its keys come from a KDS)"),
            ));
        }
        let mut stat: FileStat = self.stat_of(who, inode)?;
        stat.crypt = inode.crypt.clone();
        let (capability, body) = self.single_capability(
            who.uid,
            inode.id,
            Mode::READ.with(Mode::RANGE_KEYS),
            stat.protection,
            now,
            rng,
        )?;
        stat.key_ranges = Some(self.range_permit(
            inode,
            path,
            who.uid,
            ranges,
            (body.id, body.start, body.expiry),
        )?);
        Ok(MdsResponse::Opened {
            stat,
            capability,
            cached: false,
            t10: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_split_whole_leaves_and_cover_the_file_once() {
        let leaf = 65_536;
        for size in [1, leaf, 3 * leaf + 5, 100 * leaf, 101 * leaf - 1] {
            for n in 1..6usize {
                let parts: Vec<_> = (0..n).filter_map(|i| slice(i, n, size, leaf)).collect();
                let mut at = 0;
                for (s, e) in &parts {
                    assert_eq!(*s, at, "size {size}, {n} members: slices touch");
                    assert!(s % leaf == 0 && e % leaf == 0 && s < e);
                    at = *e;
                }
                assert!(
                    at >= size && at < size + leaf,
                    "size {size}, {n}: all covered"
                );
            }
        }
        assert_eq!(slice(0, 3, 0, leaf), None);
    }

    #[test]
    fn ranges_coalesce() {
        assert_eq!(
            coalesce(vec![(10, 20), (0, 5), (5, 8), (15, 30), (40, 50)]),
            vec![(0, 8), (10, 30), (40, 50)]
        );
    }
}
