//! setattr: owner, group, mode and times in one MDS request (`SetAttr`, which answers
//! the attributes after), a size change through the open file, and the errnos chmod(2),
//! chown(2) and utimensat(2) give.

use super::*;

/// What one setattr changes besides the size.
#[derive(Debug, Clone, Default)]
pub(crate) struct AttrChange {
    owner: Option<String>,
    group: Option<String>,
    mode: Option<u16>,
    atime: Option<SetTime>,
    mtime: Option<SetTime>,
}

impl AttrChange {
    pub(crate) fn is_empty(&self) -> bool {
        self.owner.is_none()
            && self.group.is_none()
            && self.mode.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }

    /// The owner, group and mode alone.
    pub(crate) fn without_times(&self) -> AttrChange {
        AttrChange {
            atime: None,
            mtime: None,
            ..self.clone()
        }
    }

    /// The times alone.
    pub(crate) fn times(&self) -> AttrChange {
        AttrChange {
            atime: self.atime,
            mtime: self.mtime,
            ..AttrChange::default()
        }
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::SpecificTime(t) => SetTime::At(
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        ),
        TimeOrNow::Now => SetTime::Now,
    }
}

impl State {
    /// What the kernel asks, in Maat's terms: local ids become Maat names through the
    /// identity map (an id with no name cannot be stored: `EINVAL`, as in a user
    /// namespace); without a map only the mounting user's own ids are accepted, and
    /// change nothing (`EPERM` for others).
    pub(crate) fn attr_change(
        &self,
        uid: Option<u32>,
        gid: Option<u32>,
        mode: Option<u32>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> Result<AttrChange, Errno> {
        let (owner, group) = match &self.idmap {
            None => {
                if uid.is_some_and(|u| u != self.uid) || gid.is_some_and(|g| g != self.gid) {
                    return Err(Errno::EPERM);
                }
                (None, None)
            }
            Some(map) => (
                uid.map(|u| map.user_name(u).ok_or(Errno::EINVAL))
                    .transpose()?
                    .map(str::to_string),
                gid.map(|g| map.group_name(g).ok_or(Errno::EINVAL))
                    .transpose()?
                    .map(str::to_string),
            ),
        };
        Ok(AttrChange {
            owner,
            group,
            mode: mode.map(|m| (m & 0o7777) as u16),
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        })
    }

    /// Makes `change` to `ino` at `path` in one request and answers its attributes
    /// after (asked of the MDS when there was nothing to change).
    pub(crate) fn apply(
        &mut self,
        ino: u64,
        path: &str,
        change: AttrChange,
    ) -> Result<FileAttr, Errno> {
        if change.is_empty() {
            return self.current_attr(ino);
        }
        if change.mtime.is_some() {
            // Buffered writes first, so that their size record does not move it again.
            self.flush_ino(ino)?;
        }
        let answer = self.client.set_attr(
            path,
            change.mode,
            change.owner.as_deref(),
            change.group.as_deref(),
            change.atime,
            change.mtime,
        );
        match answer {
            Ok((stat, more)) => Ok(self.attr(ino, &stat, Some(&more))),
            Err(ClientError::Refused(e)) if e.code == ErrorCode::PermissionDenied => {
                if change.owner.is_some() || change.group.is_some() || change.mode.is_some() {
                    // chmod(2), chown(2): EPERM when the refusal was about the change,
                    // EACCES when the user cannot even reach `path`.
                    self.client.stat(path).map_err(|e| errno(&e))?;
                    Err(Errno::EPERM)
                } else if [change.atime, change.mtime]
                    .iter()
                    .any(|t| matches!(t, Some(SetTime::At(_))))
                {
                    // utimensat(2): a time given explicitly is the owner's to set.
                    Err(Errno::EPERM)
                } else {
                    // "now" needs write permission.
                    Err(Errno::EACCES)
                }
            }
            Err(e) => Err(errno(&e)),
        }
    }
}
