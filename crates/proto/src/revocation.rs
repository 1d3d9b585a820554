//! SPEC M9: the revocation notice, signed by the MDS. It tells OSDs to refuse the named
//! capabilities, users and computation keys at once; an OSD keeps it only until `expiry`
//! (the latest expiry of anything it revokes), after which expiry alone does the job.

use crate::codec::{check_strictly_ascending, Reader, Writer};
use crate::limits::REVOCATION_ENTRIES_MAX;
use crate::signed::{Body, Kind};
use crate::{CapabilityId, ProtoError, Result, UnixMillis, UserId};

/// The fields of a revocation notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationNotice {
    /// Unique, increasing id (OSDs apply each once).
    pub notice_id: u64,
    /// Issue time.
    pub start: UnixMillis,
    /// When the OSD may forget the notice.
    pub expiry: UnixMillis,
    /// Revoked capabilities, strictly ascending.
    pub capability_ids: Vec<CapabilityId>,
    /// Revoked users (every capability naming them), strictly ascending.
    pub users: Vec<UserId>,
    /// Revoked computation keys (hashes), strictly ascending.
    pub computation_keys: Vec<[u8; 32]>,
}

impl RevocationNotice {
    /// True when the notice revokes this capability, user or key.
    pub fn revokes(
        &self,
        capability: CapabilityId,
        user: Option<UserId>,
        key_hash: Option<&[u8; 32]>,
    ) -> bool {
        self.capability_ids.binary_search(&capability).is_ok()
            || user.is_some_and(|u| self.users.binary_search(&u).is_ok())
            || key_hash.is_some_and(|k| self.computation_keys.binary_search(k).is_ok())
    }
}

fn write_count(w: &mut Writer, n: usize) {
    w.u32(u32::try_from(n).unwrap_or(u32::MAX));
}

impl Body for RevocationNotice {
    const KIND: Kind = Kind::Revocation;
    fn encode_body(&self, w: &mut Writer) {
        w.u64(self.notice_id).u64(self.start.0).u64(self.expiry.0);
        write_count(w, self.capability_ids.len());
        self.capability_ids.iter().for_each(|c| {
            w.u64(c.0);
        });
        write_count(w, self.users.len());
        self.users.iter().for_each(|u| {
            w.u64(u.0);
        });
        write_count(w, self.computation_keys.len());
        self.computation_keys.iter().for_each(|k| {
            w.bytes(k);
        });
    }
    fn decode_body(r: &mut Reader<'_>) -> Result<Self> {
        let notice_id = r.u64()?;
        let start = UnixMillis(r.u64()?);
        let expiry = UnixMillis(r.u64()?);
        let mut read_ids = |what| -> Result<Vec<u64>> {
            let n = r.count(what, REVOCATION_ENTRIES_MAX, 8)?;
            let ids = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
            check_strictly_ascending(&ids, "revocation notice")?;
            Ok(ids)
        };
        let capability_ids = read_ids("revoked capabilities")?
            .into_iter()
            .map(CapabilityId)
            .collect();
        let users = read_ids("revoked users")?.into_iter().map(UserId).collect();
        let n = r.count("revoked keys", REVOCATION_ENTRIES_MAX, 32)?;
        let computation_keys = (0..n)
            .map(|_| r.array::<32>())
            .collect::<Result<Vec<_>>>()?;
        if !computation_keys
            .windows(2)
            .all(|w| matches!(w, [a, b] if a < b))
        {
            return Err(ProtoError::Malformed {
                what: "revocation notice",
                reason: "keys not strictly ascending",
            });
        }
        Ok(Self {
            notice_id,
            start,
            expiry,
            capability_ids,
            users,
            computation_keys,
        })
    }
}

crate::signed::timed_by_fields!(RevocationNotice);
impl crate::signed::SignedBody for RevocationNotice {}

/// Domain separation of [`revocations_mac`].
const REVOCATIONS_CONTEXT: &[u8] = b"maat/revocations/v1\0";

/// SPEC M9: the MAC under the cluster join key that an MDS puts on its list of notices in
/// force for OSD `osd`, over the OSD's request nonce and every notice (length-prefixed), so
/// that an OSD accepts only a fresh and complete list from its MDS.
pub fn revocations_mac(
    join: &maat_crypto::mac::MacKey,
    osd: u64,
    nonce: &[u8; 16],
    notices: &[Vec<u8>],
) -> [u8; 32] {
    let osd = osd.to_be_bytes();
    let count = (notices.len() as u64).to_be_bytes();
    let lens: Vec<[u8; 8]> = notices
        .iter()
        .map(|n| (n.len() as u64).to_be_bytes())
        .collect();
    let mut parts: Vec<&[u8]> = vec![REVOCATIONS_CONTEXT, &osd, nonce, &count];
    for (len, notice) in lens.iter().zip(notices) {
        parts.push(len);
        parts.push(notice);
    }
    join.tag(&parts)
}

/// Domain separation of [`revocations_request_mac`].
const REVOCATIONS_REQUEST_CONTEXT: &[u8] = b"maat/revocations-request/v1\0";

/// SPEC M9: the MAC under the join key on an OSD's request for the notices in force, so
/// that the MDS answers (and spends a MAC over a possibly large list) for OSDs only.
pub fn revocations_request_mac(
    join: &maat_crypto::mac::MacKey,
    osd: u64,
    nonce: &[u8; 16],
) -> [u8; 32] {
    join.tag(&[REVOCATIONS_REQUEST_CONTEXT, &osd.to_be_bytes(), nonce])
}
