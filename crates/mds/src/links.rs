//! Special entries (issue 44): symbolic links, which name a path, and FIFOs and sockets,
//! which each machine's kernel serves. None holds data at the MDS. The MDS stores and
//! lists them and never follows a link; clients (the kernel, for a mount) do. And hard
//! links: more names of one inode, whose permissions, capabilities and lockbox stay the
//! inode's whatever name it is reached by.

use crate::namespace::{allowed, check_new_name, enter, require, EXEC, READ, WRITE};
use crate::store::Special;
use crate::{Batch, MdsError, MetaStore, Principal, Result};
use maat_proto::msg::{
    ErrorCode, MdsResponse, StatMore, LINKS_MAX, SYMLINK_TARGET_BYTES_MAX, S_IFBLK, S_IFCHR,
    S_IFIFO, S_IFMT, S_IFSOCK,
};
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
        // (A link's own permission bits mean nothing: 0777, as Linux shows them.)
        self.make_special(who, path, 0o777, Special::Symlink(target.to_string()), now)
    }

    /// Makes a FIFO, a socket's name or (the administrator only) a device node at `path`
    /// (mknod(2); `mode`: type and permission bits, the creator's umask applied to the
    /// latter; `rdev`: a device's number).
    pub(crate) fn mknod(
        &self,
        who: &Principal,
        path: &str,
        mode: u16,
        rdev: u32,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let special = match mode & S_IFMT {
            S_IFIFO => Special::Fifo,
            S_IFSOCK => Special::Socket,
            S_IFBLK | S_IFCHR if !who.is_admin() => {
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    "device nodes are made by the administrator only",
                ))
            }
            S_IFBLK => Special::Block(rdev),
            S_IFCHR => Special::Char(rdev),
            _ => {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    "mknod makes FIFOs, sockets and device nodes (files: Open with create)",
                ))
            }
        };
        self.make_special(who, path, mode & !S_IFMT, special, now)
    }

    /// A new special entry at `path`, under a new file's rules (the name rules, write
    /// and search permission on the directory).
    fn make_special(
        &self,
        who: &Principal,
        path: &str,
        mode: u16,
        special: Special,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
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
        let link = matches!(special, Special::Symlink(_));
        let mut inode = self.new_inode(who, &parent, false, mode, None, now)?;
        if link {
            inode.mode = 0o777;
        }
        inode.special = Some(special);
        enter(&mut batch, &parent, name, &inode, now);
        self.store.commit_deferred(batch)?;
        Ok(MdsResponse::Stat(self.stat_of(who, &inode)?))
    }

    /// The target of the symbolic link at `path`.
    pub(crate) fn readlink(&self, who: &Principal, path: &str) -> Result<MdsResponse> {
        match self.resolve(who, path)?.special {
            Some(Special::Symlink(target)) => Ok(MdsResponse::Link(target)),
            _ => Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("{path} is not a symbolic link"),
            )),
        }
    }

    /// `path`'s attributes with its link count and its access and change times.
    pub(crate) fn stat_full(&self, who: &Principal, path: &str) -> Result<MdsResponse> {
        let inode = self.resolve(who, path)?;
        Ok(MdsResponse::StatFull {
            stat: self.stat_of(who, &inode)?,
            more: self.more_of(&inode),
        })
    }

    /// What `StatFull` adds to an inode's `FileStat`.
    pub(crate) fn more_of(&self, inode: &crate::Inode) -> StatMore {
        StatMore {
            // A directory: 2 and one per subdirectory.
            nlink: if inode.is_dir {
                inode.nlink.max(2)
            } else {
                inode.nlink
            },
            atime: inode.atime,
            ctime: inode.ctime,
            rdev: match inode.special {
                Some(Special::Block(rdev) | Special::Char(rdev)) => rdev,
                _ => 0,
            },
        }
    }

    /// Makes `to` another name of the inode at `from` (link(2)): never a directory; write
    /// and search permission on `to`'s directory; and, as Linux's `protected_hardlinks`,
    /// only by its owner, the administrator or a user who may read and write it (a user
    /// could otherwise keep anyone's file alive after its owner removed it).
    pub(crate) fn hard_link(
        &self,
        who: &Principal,
        from: &str,
        to: &str,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let _guard = self.writing()?;
        let mut inode = self.resolve(who, from)?;
        if inode.is_dir {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{from} is a directory: directories have one name"),
            ));
        }
        let (parent, name) = self.parent_of(who, to)?;
        if self.store.lookup(parent.id, name)?.is_some() {
            return Err(MdsError::refused(ErrorCode::AlreadyExists, to.to_string()));
        }
        check_new_name(name)?;
        require(who, &parent, WRITE | EXEC, to)?;
        if inode.uid != who.uid && !who.is_admin() && !allowed(who, &inode, READ | WRITE) {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                format!("{from}: only its owner, or a user who may read and write it, links it"),
            ));
        }
        if inode.nlink >= LINKS_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("{from} has {LINKS_MAX} names, the most one inode may have"),
            ));
        }
        inode.nlink += 1;
        inode.ctime = now.0;
        let mut batch = Batch::default();
        enter(&mut batch, &parent, name, &inode, now);
        self.store.commit_deferred(batch)?;
        Ok(MdsResponse::StatFull {
            stat: self.stat_of(who, &inode)?,
            more: self.more_of(&inode),
        })
    }
}
