//! Symbolic links (issue 44): entries that name a path and hold no data. The MDS stores
//! and lists them and never follows one; clients (the kernel, for a mount) do.

use crate::namespace::{check_new_name, require, touch_dir, EXEC, WRITE};
use crate::{lock, Batch, MdsError, MetaStore, Op, Principal, Result};
use maat_proto::msg::{ErrorCode, MdsResponse, SYMLINK_TARGET_BYTES_MAX};
use maat_proto::UnixMillis;

impl<S: MetaStore> crate::Mds<S> {
    /// Makes a symbolic link at `path` pointing to `target`, as `who` (write and search
    /// permission on the directory, as for a file).
    pub(crate) fn symlink(
        &self,
        who: &Principal,
        path: &str,
        target: &str,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        if target.is_empty() || target.len() > SYMLINK_TARGET_BYTES_MAX || target.contains('\0') {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("a link's target is 1 to {SYMLINK_TARGET_BYTES_MAX} bytes without NUL"),
            ));
        }
        let _guard = lock(&self.write);
        let (parent, name) = self.parent_of(who, path)?;
        if self.store.lookup(parent.id, name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                path.to_string(),
            ));
        }
        check_new_name(name)?;
        require(who, &parent, WRITE | EXEC, path)?;
        let mut batch = Batch::default();
        // (The mode is kept for the record; a link's own bits mean nothing.)
        let mut inode = self.new_inode(who, &parent, false, 0o777, None, now, &mut batch)?;
        inode.symlink = Some(target.to_string());
        batch.push(Op::PutEntry {
            parent: parent.id,
            name: name.to_string(),
            child: inode.id,
        });
        batch.push(Op::PutInode(inode.clone()));
        touch_dir(&mut batch, &parent, now);
        self.store.commit_deferred(batch)?;
        Ok(MdsResponse::Stat(self.stat_of(&inode)?))
    }

    /// The target of the symbolic link at `path`.
    pub(crate) fn readlink(&self, who: &Principal, path: &str) -> Result<MdsResponse> {
        match self.resolve(who, path)?.symlink {
            Some(target) => Ok(MdsResponse::Link(target)),
            None => Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("{path} is not a symbolic link"),
            )),
        }
    }
}
