//! access(2) at the MDS (issue 44): the decision an open, a write or a lookup would get,
//! asked without making one.

use crate::namespace::{allowed, EXEC};
use crate::{MdsError, MetaStore, Principal, Result};
use maat_proto::msg::{ErrorCode, MdsResponse};

impl<S: MetaStore> crate::Mds<S> {
    /// Whether `who` may access `path` as `mask` says (4 read, 2 write, 1 execute or
    /// search; 0: it exists and its directories may be searched).
    pub(crate) fn access(&self, who: &Principal, path: &str, mask: u8) -> Result<MdsResponse> {
        if mask > 7 {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "an access mask is at most 7 (read 4, write 2, execute 1)",
            ));
        }
        let inode = self.resolve(who, path)?;
        let want = u16::from(mask);
        // A reader of a file's granted ranges may read (SPEC H6), as its open would.
        let granted_read = want == 4 && crate::key_grants::has_grant(&inode, who.uid);
        // Execution needs an execute bit somewhere, for the administrator too (POSIX).
        let runnable = want & EXEC == 0 || inode.is_dir || inode.mode & 0o111 != 0;
        if runnable && (allowed(who, &inode, want) || granted_read) {
            Ok(MdsResponse::Ok)
        } else {
            Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                path.to_string(),
            ))
        }
    }
}
