//! SPEC H3, H5 at the MDS: an encrypted file's lockbox (stored, never opened: the MDS
//! holds no key that opens it) and the write generations of its stripes, recorded with
//! the size so that a reader detects a rolled-back block; a rekey's new tree beside the
//! earlier ones its stripes still use (SPEC H7).

use crate::{Batch, Inode, MdsError, MetaStore, Op, Principal, Result};
use maat_crypto::CryptoRngCore;
use maat_proto::encrypted::FileCrypt;
use maat_proto::horus::Lockbox;
use maat_proto::msg::{Access, ErrorCode, MdsResponse, STRIPE_UNIT_BYTES, WRITTEN_RANGES_MAX};
use maat_proto::UnixMillis;

impl<S: MetaStore> crate::Mds<S> {
    /// Stores a lockbox its owner sends and answers as a read-write open would now:
    /// SPEC H5 (`rekey` false), the first lockbox of an empty file without one, which
    /// changes the file's protection method (an encrypted file travels under CMDRSP
    /// where a plaintext one needed ALLDATA), so the owner's capability from before is
    /// replaced; SPEC H7 (`rekey` true), the lockbox of a new key tree. The MDS checks
    /// what the box names; it cannot open it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_lockbox(
        &self,
        who: &Principal,
        path: &str,
        file: u64,
        lockbox: &[u8],
        rekey: bool,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        {
            let _guard = self.writing()?;
            let mut inode = self.resolve_opened(who, path, file)?;
            if inode.uid != who.uid {
                let doing = if rekey {
                    "gives a file a new key tree"
                } else {
                    "sets a file's lockbox"
                };
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    format!("{path}: only the owner {doing}"),
                ));
            }
            if rekey {
                next_tree(&mut inode, lockbox, path)?;
            } else {
                first_lockbox(&mut inode, lockbox, path)?;
            }
            inode.mtime = now.0;
            inode.ctime = now.0;
            let mut batch = Batch::default();
            batch.push(Op::PutInode(inode));
            self.store.commit(batch)?;
        }
        self.open_file(who, path, Access::ReadWrite, None, &[], session, now, rng)
    }

    /// `OpenSealed`: [`Self::open_file`], where a file it creates is encrypted from the
    /// start, its lockbox to come with its size ([`Self::set_size_lockbox`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_sealed(
        &self,
        who: &Principal,
        path: &str,
        access: Access,
        create: Option<u16>,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if let Some(mode) = create {
            match self.resolve(who, path) {
                Err(MdsError::Refused(e)) if e.code == ErrorCode::NoSuchFile => {
                    self.create_file(who, path, mode, true, false, now)?;
                }
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        self.open_file(who, path, access, None, &[], session, now, rng)
    }

    /// `OpenExclusive`: creates `path` (encrypted, its lockbox to come, when `sealed`) or
    /// refuses because it exists, then opens it as `Open` does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_exclusive(
        &self,
        who: &Principal,
        path: &str,
        access: Access,
        mode: u16,
        sealed: bool,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if sealed && access != Access::ReadWrite {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "a file created encrypted is opened read-write (its lockbox is to come)",
            ));
        }
        self.create_file(who, path, mode, sealed, true, now)?;
        self.open_file(who, path, access, None, &[], session, now, rng)
    }

    /// `SetSizeLockbox`: the first lockbox of `file` (its owner, who may write it, only),
    /// its size and the generations of the stripes written under that lockbox's tree, in
    /// one commit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_size_lockbox(
        &self,
        who: &Principal,
        path: &str,
        file: u64,
        size: u64,
        written: &[(u32, u32, u64)],
        lockbox: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let mut inode = self.resolve_opened(who, path, file)?;
        if inode.uid != who.uid {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{path}: only the owner sets a file's lockbox"),
            ));
        }
        crate::namespace::require_write(who, &inode, path)?;
        first_lockbox(&mut inode, lockbox, path)?;
        if !written.is_empty() {
            record_generations(&mut inode, size, written, 1, path)?;
        }
        self.commit_size(inode, size, now)
    }
}

/// SPEC H5: `lockbox` becomes the lockbox of `inode`, an empty file without one; the box
/// must name this file and the first tree version.
pub(crate) fn first_lockbox(inode: &mut Inode, lockbox: &[u8], path: &str) -> Result<()> {
    if inode.crypt.as_ref().is_some_and(|c| !c.is_pending()) || inode.size != 0 {
        return Err(MdsError::refused(
            ErrorCode::AlreadyExists,
            format!(
                "{path}: has a lockbox or data already (another writer may have recorded \
                 its lockbox first): only an empty file without one takes a first lockbox"
            ),
        ));
    }
    let decoded = Lockbox::decode(lockbox)
        .map_err(|e| MdsError::refused(ErrorCode::Malformed, format!("lockbox: {e}")))?;
    if decoded.file.0 != inode.id || decoded.tree_version != 1 {
        return Err(MdsError::refused(
            ErrorCode::WrongFile,
            format!(
                "{path}: the lockbox names file {} version {}",
                decoded.file.0, decoded.tree_version
            ),
        ));
    }
    inode.crypt = Some(FileCrypt {
        lockbox: lockbox.to_vec(),
        ..FileCrypt::default()
    });
    Ok(())
}

/// SPEC H7: `lockbox` becomes the current key tree of the encrypted file `inode` (the MDS
/// cannot make a lockbox: the owner seals the new root key to the KDS and to itself).
/// The box must name this file, the current tree version + 1 and the same shape (the
/// stripe layout depends on it). Stripes stay sealed under the earlier tree until a
/// writer (`maat keys rekey` first) rewrites them.
fn next_tree(inode: &mut Inode, lockbox: &[u8], path: &str) -> Result<()> {
    let stripes = inode.size.div_ceil(STRIPE_UNIT_BYTES) as u32;
    let id = inode.id;
    let crypt = inode.crypt.as_mut().ok_or_else(|| {
        MdsError::refused(
            ErrorCode::InvalidArgument,
            format!("{path}: the file is not encrypted, so it has no keys to renew"),
        )
    })?;
    let malformed = |e| MdsError::refused(ErrorCode::Malformed, format!("lockbox: {e}"));
    let current = current_lockbox(crypt, path)?;
    let new = Lockbox::decode(lockbox).map_err(malformed)?;
    let next = current.tree_version.checked_add(1).ok_or_else(|| {
        MdsError::refused(
            ErrorCode::TooLarge,
            format!("{path}: no tree version after {}", current.tree_version),
        )
    })?;
    if new.file.0 != id || new.tree_version != next || new.shape != current.shape {
        return Err(MdsError::refused(
            ErrorCode::WrongFile,
            format!(
                "{path}: the new lockbox names file {} version {} (expected file {id} \
                 version {next}, with the current tree's shape)",
                new.file.0, new.tree_version
            ),
        ));
    }
    crypt
        .begin_rekey(lockbox.to_vec(), current.tree_version, stripes)
        .map_err(|e| MdsError::refused(ErrorCode::TooLarge, format!("{path}: {e}")))
}

/// SPEC H7: the version of an encrypted file's current key tree (from its lockbox).
pub(crate) fn current_tree_version(crypt: &FileCrypt, path: &str) -> Result<u32> {
    Ok(current_lockbox(crypt, path)?.tree_version)
}

/// The lockbox of an encrypted file's current tree, decoded; refused while it is still
/// to come (SPEC H5: the file is being written).
pub(crate) fn current_lockbox(crypt: &FileCrypt, path: &str) -> Result<Lockbox> {
    if crypt.is_pending() {
        return Err(MdsError::refused(
            ErrorCode::InvalidArgument,
            format!("{path}: encrypted, its lockbox still to come (its writer has not finished)"),
        ));
    }
    Lockbox::decode(&crypt.lockbox)
        .map_err(|e| MdsError::refused(ErrorCode::Internal, format!("{path}: lockbox: {e}")))
}

/// SPEC H3: records the generations an encrypted file's writer used for the stripes it
/// rewrote (ranges inside the new size, generations non-zero, at most
/// [`WRITTEN_RANGES_MAX`] ranges), and (SPEC H7) the key tree it sealed them under: the
/// current one, or an earlier one a rekey still keeps (the rekey will rewrite them); a
/// tree the MDS no longer keeps is refused.
pub(crate) fn record_generations(
    inode: &mut Inode,
    size: u64,
    written: &[(u32, u32, u64)],
    tree_version: u32,
    path: &str,
) -> Result<()> {
    let invalid =
        |why: &str| MdsError::refused(ErrorCode::InvalidArgument, format!("{path}: {why}"));
    let crypt = inode
        .crypt
        .as_mut()
        .ok_or_else(|| invalid("write generations for a file that is not encrypted"))?;
    if written.len() > WRITTEN_RANGES_MAX {
        return Err(MdsError::refused(
            ErrorCode::TooLarge,
            format!("{path}: more than {WRITTEN_RANGES_MAX} written ranges in one size update"),
        ));
    }
    let current = current_tree_version(crypt, path)?;
    let under = if tree_version == current {
        None
    } else if crypt.earlier_lockbox(tree_version).is_some() {
        Some(tree_version)
    } else {
        return Err(MdsError::refused(
            ErrorCode::WrongFile,
            format!(
                "{path}: written under key tree {tree_version}, which a rekey replaced \
                 (the file is at tree {current}): open it again and write again"
            ),
        ));
    };
    let stripes = size.div_ceil(STRIPE_UNIT_BYTES);
    for &(first, end, generation) in written {
        if first >= end || u64::from(end) > stripes || generation == 0 {
            return Err(invalid(
                "written range outside the file or without a generation",
            ));
        }
        crypt
            .record_sealed(first, end, generation, under)
            .map_err(|e| MdsError::refused(ErrorCode::TooLarge, format!("{path}: {e}")))?;
    }
    Ok(())
}
