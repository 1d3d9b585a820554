//! SPEC M4 on the client: an OSD that meets a Merkle root it has not verified refuses
//! with `UnknownTree`; the client fetches the tree from the MDS once (and checks it
//! against the root, as the OSD will), supplies it, and sends the request again.

use super::*;
use maat_proto::capability::{Capability, Files, Principals};
use maat_proto::merkle_msg::{MerkleTreeMessage, SetKind};

pub use crate::limits::TREES_CACHED_MAX;

impl Client {
    /// Gives `osd` the tree of every root `capability` names.
    pub(crate) fn supply_trees(&self, osd: u64, capability: &[u8]) -> Result<()> {
        let body = Unverified::<Capability>::decode(capability)
            .map_err(|source| ClientError::Token {
                what: "capability",
                source,
            })?
            .unverified_body()
            .clone();
        let mut roots = Vec::new();
        if let Principals::UserTree(root) = body.users {
            roots.push((SetKind::Users, root));
        }
        if let Files::FileTree(root) = body.files {
            roots.push((SetKind::Files, root));
        }
        if roots.is_empty() {
            return Err(self.bad(
                "osd",
                "asked for a Merkle tree of a capability that names none",
            ));
        }
        for (kind, root) in roots {
            let tree = self.tree(kind, root)?;
            self.osd_call_fresh(
                osd,
                &OsdRequest {
                    capability: capability.to_vec(),
                    command: OsdCommand::SupplyTree { tree },
                },
            )?;
        }
        Ok(())
    }

    /// The tree message for `root`, from this client's cache or the MDS (verified).
    pub(crate) fn tree(&self, kind: SetKind, root: [u8; 32]) -> Result<Vec<u8>> {
        if let Some(t) = self.trees.lock().get(&root) {
            return Ok(t.clone());
        }
        let tree = match self.mds_call(MdsRequest::GetTree { root })? {
            MdsResponse::Tree(t) => t,
            _ => return Err(self.bad("mds", "unexpected answer to GetTree")),
        };
        MerkleTreeMessage::decode(&tree)
            .and_then(|m| m.verify(kind, &root))
            .map_err(|e| self.bad("mds", &format!("Merkle tree: {e}")))?;
        let mut trees = self.trees.lock();
        if trees.len() >= TREES_CACHED_MAX {
            trees.clear();
        }
        trees.insert(root, tree.clone());
        Ok(tree)
    }
}
