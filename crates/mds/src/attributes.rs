//! Changing an inode's attributes: mode (chmod), owner and group (chown), access and
//! modification times (utimensat), each alone or several in one commit (`SetAttr`, issue
//! 44: a mount's setattr is one request that answers the attributes it leaves).

use crate::namespace::{allowed, require, MODE_BITS, WRITE};
use crate::{Batch, Inode, MdsError, MetaStore, Op, Principal, Result};
use maat_proto::msg::{ErrorCode, MdsResponse, SetTime};
use maat_proto::UnixMillis;

/// The setuid and setgid bits.
const SETID: u16 = 0o6000;

/// What one request changes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Changes<'a> {
    pub(crate) mode: Option<u16>,
    pub(crate) owner: Option<&'a str>,
    pub(crate) group: Option<&'a str>,
    pub(crate) atime: Option<SetTime>,
    pub(crate) mtime: Option<SetTime>,
}

impl<S: MetaStore> crate::Mds<S> {
    /// `Chmod`, `Chown`, `SetMtime` and `SetTimes`: the changes of [`Self::set_attr`],
    /// answered `Ok`.
    pub(crate) fn change_answering_ok(
        &self,
        who: &Principal,
        path: &str,
        changes: Changes<'_>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        self.change(who, path, changes, now)
            .map(|_| MdsResponse::Ok)
    }

    /// `SetAttr`: every change asked, in one commit or none, answering the attributes
    /// after (`StatFull`).
    pub(crate) fn set_attr(
        &self,
        who: &Principal,
        path: &str,
        changes: Changes<'_>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let inode = self.change(who, path, changes, now)?;
        Ok(MdsResponse::StatFull {
            stat: self.stat_of(who, &inode)?,
            more: self.more_of(&inode),
        })
    }

    /// Checks and applies `changes` to `path` in the order a chown, a chmod and a
    /// utimensat would (the kernel sends the mode that clears setuid with a chown); any
    /// refusal changes nothing. The change time becomes now.
    fn change(
        &self,
        who: &Principal,
        path: &str,
        changes: Changes<'_>,
        now: UnixMillis,
    ) -> Result<Inode> {
        let _guard = self.writing()?;
        let mut inode = self.resolve(who, path)?;
        if let Some(owner) = changes.owner {
            let user = self
                .store
                .user_by_name(owner)?
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, owner.to_string()))?;
            if user.id != inode.uid && !who.is_admin() {
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    "only the administrator may change the owner",
                ));
            }
            inode.uid = user.id;
        }
        if let Some(group) = changes.group {
            let g = self
                .store
                .group_by_name(group)?
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchGroup, group.to_string()))?;
            if !who.is_admin() && (inode.uid != who.uid || !who.gids.contains(&g.id)) {
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    "the owner may only give a file to a group they belong to",
                ));
            }
            inode.gid = g.id;
        }
        if let Some(mode) = changes.mode {
            let mode = mode & MODE_BITS;
            // What a write by anyone does to a file (POSIX: setuid and setgid are cleared
            // when a non-owner writes it; the kernel asks for it as the writer): clearing
            // those bits alone, for a user who may write it.
            let kills_privileges = mode != inode.mode
                && mode | SETID == inode.mode | SETID
                && mode & SETID & !inode.mode == 0
                && !inode.is_dir
                && allowed(who, &inode, WRITE);
            if inode.uid != who.uid && !who.is_admin() && !kills_privileges {
                return Err(MdsError::refused(
                    ErrorCode::PermissionDenied,
                    "only the owner may chmod (a writer may only clear setuid and setgid)",
                ));
            }
            inode.mode = mode;
        }
        if changes.atime.is_some() || changes.mtime.is_some() {
            let owner = inode.uid == who.uid || who.is_admin();
            let explicit = [changes.atime, changes.mtime]
                .iter()
                .any(|t| matches!(t, Some(SetTime::At(_))));
            if !owner {
                if explicit {
                    return Err(MdsError::refused(
                        ErrorCode::PermissionDenied,
                        "only the owner may set a time other than now",
                    ));
                }
                require(who, &inode, WRITE, path)?;
            }
            let at = |t: SetTime| match t {
                SetTime::Now => now.0,
                SetTime::At(ms) => ms,
            };
            if let Some(t) = changes.atime {
                inode.atime = at(t);
            }
            if let Some(t) = changes.mtime {
                inode.mtime = at(t);
            }
        }
        inode.ctime = now.0;
        let mut batch = Batch::default();
        batch.push(Op::PutInode(inode.clone()));
        if changes.mode.is_some() || changes.owner.is_some() || changes.group.is_some() {
            // Who may do what changed: capabilities are re-checked (SPEC M7).
            self.acl_change(|stamp| {
                batch.push(stamp);
                Ok(self.store.commit(batch)?)
            })?;
        } else {
            self.store.commit_deferred(batch)?;
        }
        Ok(inode)
    }
}
