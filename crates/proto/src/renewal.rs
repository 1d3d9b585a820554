//! SPEC M8: the renewal token ⟨token id, capability ids, start, new expiry⟩ signed by the
//! MDS (paper 000 Fig. 5: ℛ = ⟨P + O, T_e⟩). One token names the requested capabilities
//! plus every outstanding valid one, so OSDs verify it once for many capabilities.

use crate::codec::{check_strictly_ascending, Reader, Writer};
use crate::limits::RENEWAL_CAPABILITY_IDS_MAX;
use crate::signed::{Body, Kind};
use crate::{CapabilityId, ProtoError, Result, UnixMillis};

/// The fields of a renewal token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalToken {
    /// Unique id.
    pub token_id: u64,
    /// Capabilities renewed, strictly ascending.
    pub capability_ids: Vec<CapabilityId>,
    /// Issue time; the token is valid from here.
    pub start: UnixMillis,
    /// New expiry of every named capability.
    pub expiry: UnixMillis,
}

impl RenewalToken {
    /// Builds a token, sorting and deduplicating the ids and enforcing the limit.
    pub fn new(
        token_id: u64,
        mut ids: Vec<CapabilityId>,
        start: UnixMillis,
        expiry: UnixMillis,
    ) -> Result<Self> {
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > RENEWAL_CAPABILITY_IDS_MAX {
            return Err(ProtoError::TooLarge {
                what: "renewal capability ids",
                len: ids.len(),
                limit: RENEWAL_CAPABILITY_IDS_MAX,
            });
        }
        Ok(Self {
            token_id,
            capability_ids: ids,
            start,
            expiry,
        })
    }

    /// True when the token renews `id`.
    pub fn renews(&self, id: CapabilityId) -> bool {
        self.capability_ids.binary_search(&id).is_ok()
    }
}

impl Body for RenewalToken {
    const KIND: Kind = Kind::Renewal;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.token_id).u64(self.start.0).u64(self.expiry.0);
        w.u32(u32::try_from(self.capability_ids.len()).unwrap_or(u32::MAX));
        for id in &self.capability_ids {
            w.u64(id.0);
        }
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let token_id = r.u64()?;
        let start = UnixMillis(r.u64()?);
        let expiry = UnixMillis(r.u64()?);
        let n = r.count("renewal capability ids", RENEWAL_CAPABILITY_IDS_MAX, 8)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(r.u64()?);
        }
        check_strictly_ascending(&ids, "renewal token")?;
        Ok(Self {
            token_id,
            capability_ids: ids.into_iter().map(CapabilityId).collect(),
            start,
            expiry,
        })
    }
}

crate::signed::timed_by_fields!(RenewalToken);
impl crate::signed::SignedBody for RenewalToken {}
