//! SPEC H6 on the client: the owner of an encrypted file grants users byte ranges of it
//! (or slices by the i-of-n policy), withdraws and lists grants. A grantee opens the file
//! as usual; its open carries a key-range permit, and key requests ask only for the
//! nodes covering the granted ranges.

use super::*;
use maat_crypto::kht::{KhtShape, RangeKey};
use maat_proto::msg::KeyGrantInfo;

impl Client {
    /// Lets `users` read bytes `ranges` of the encrypted file `path` (whole blocks of its
    /// key tree: 64 KiB for files made now); adds to what they had.
    pub fn keys_grant(&self, path: &str, users: &[String], ranges: &[(u64, u64)]) -> Result<()> {
        self.expect_ok(MdsRequest::KeysGrant {
            path: path.into(),
            users: users.to_vec(),
            ranges: ranges.to_vec(),
            slices: false,
        })
    }

    /// The slice policy: user `i` of `users` reads the `i`-th of `users.len()` equal
    /// slices of `path` (replacing any slice policy it had).
    pub fn keys_grant_slices(&self, path: &str, users: &[String]) -> Result<()> {
        self.expect_ok(MdsRequest::KeysGrant {
            path: path.into(),
            users: users.to_vec(),
            ranges: Vec::new(),
            slices: true,
        })
    }

    /// Withdraws every range grant of `users` on `path`. What they opened before stays
    /// readable until its capability expires (SPEC M7); `maat keys rekey` is not built yet.
    pub fn keys_revoke(&self, path: &str, users: &[String]) -> Result<()> {
        self.expect_ok(MdsRequest::KeysRevoke {
            path: path.into(),
            users: users.to_vec(),
        })
    }

    /// The range grants on `path` (its owner only).
    pub fn keys_list(&self, path: &str) -> Result<Vec<KeyGrantInfo>> {
        match self.mds_call(MdsRequest::KeysList { path: path.into() })? {
            MdsResponse::KeyGrants(list) => Ok(list),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    #[doc(hidden)]
    /// The key tree shape and range keys this client holds for version `tree_version` of
    /// `file`'s key tree (what a user takes away from a KDS grant: tests show they open
    /// nothing outside it, nor anything a rekey rewrote).
    pub fn range_keys_held(
        &self,
        file: u64,
        tree_version: u32,
    ) -> Option<(KhtShape, Vec<RangeKey>)> {
        self.file_keys
            .lock()
            .get(&(file, tree_version))
            .map(|h| (h.shape.clone(), h.keys.clone()))
    }
}
