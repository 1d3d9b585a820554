//! SPEC M9: the revocation notice, signed by the MDS. It tells OSDs to refuse the named
//! capabilities, users and computation keys at once; an OSD keeps it only until `expiry`
//! (the latest expiry of anything it revokes), after which expiry alone does the job.

use crate::codec::{check_strictly_ascending, Reader, Writer};
use crate::limits::REVOCATION_ENTRIES_MAX;
use crate::msg::{ErrorCode, WireError};
use crate::signed::Unverified;
use crate::signed::{Body, Kind};
use crate::{CapabilityId, ProtoError, Result, UnixMillis, UserId};
use maat_crypto::sign::VerifyingKey;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

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

/// `count(8) ‖ (len(8) ‖ notice)·count`, big-endian: a list of notices as one string
/// that no other list shares.
fn list_bytes(notices: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + notices.iter().map(|n| 8 + n.len()).sum::<usize>());
    out.extend_from_slice(&(notices.len() as u64).to_be_bytes());
    for n in notices {
        out.extend_from_slice(&(n.len() as u64).to_be_bytes());
        out.extend_from_slice(n);
    }
    out
}

/// SPEC M9: the MAC under the cluster join key that an MDS puts on its list of notices in
/// force for OSD `osd`, over the OSD's request nonce and every notice (length-prefixed), so
/// that an OSD accepts only a fresh and complete list from its MDS.
pub fn revocations_mac(
    join: &maat_crypto::mac::MacKey,
    osd: u64,
    nonce: &[u8; 16],
    notices: &[Vec<u8>],
) -> [u8; 32] {
    join.tag(&[
        REVOCATIONS_CONTEXT,
        &osd.to_be_bytes(),
        nonce,
        &list_bytes(notices),
    ])
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

/// Domain separation of [`kds_revocations_request_message`].
const KDS_REVOCATIONS_REQUEST_CONTEXT: &[u8] = b"maat/kds-revocations-request/v1\0";
/// Domain separation of [`kds_revocations_message`].
const KDS_REVOCATIONS_CONTEXT: &[u8] = b"maat/kds-revocations/v1\0";

/// SPEC M9 at a KDS: what a KDS signs, with the signing key whose public half the MDS
/// config names, to ask the MDS for the notices in force (`nonce` fresh, `timestamp`
/// its clock, so that a captured request is answered only within the clock-skew window).
pub fn kds_revocations_request_message(nonce: &[u8; 16], timestamp: UnixMillis) -> Vec<u8> {
    [
        KDS_REVOCATIONS_REQUEST_CONTEXT,
        nonce.as_slice(),
        &timestamp.0.to_be_bytes(),
    ]
    .concat()
}

/// SPEC M9 at a KDS: what the MDS signs over its answer to a KDS, the request's nonce
/// and every notice in force, so that a KDS accepts only a fresh and complete list.
pub fn kds_revocations_message(nonce: &[u8; 16], notices: &[Vec<u8>]) -> Vec<u8> {
    [
        KDS_REVOCATIONS_CONTEXT,
        nonce.as_slice(),
        &list_bytes(notices),
    ]
    .concat()
}

/// SPEC M9 where requests are checked (OSDs and KDS instances): the notices in force. A
/// request whose capability a notice names, whose user a notice names, or whose
/// capability is delegated to a job key a notice names (M10), is refused with `Revoked`.
/// A notice is forgotten at its expiry (when everything it concerns has expired anyway),
/// so the table shrinks by itself; its size is bounded by what the MDS keeps in force.
///
/// A holder serves only after it has learned every notice in force from the MDS once
/// since it started ([`RevokedTable::synced`]): one that was down when a notice was
/// pushed catches up before it serves again.
#[derive(Default)]
pub struct RevokedTable {
    notices: RwLock<Vec<RevocationNotice>>,
    /// Milliseconds of the last catch-up; 0: none since start.
    synced_at: AtomicU64,
}

impl RevokedTable {
    /// Verifies one MDS-signed notice (pushed by the MDS) and applies it, once: a notice
    /// id already held changes nothing.
    pub fn apply_signed(&self, notice: &[u8], mds: &VerifyingKey, now: UnixMillis) -> Result<()> {
        let verified = Unverified::<RevocationNotice>::decode(notice)?.verify(mds, now)?;
        self.merge(vec![verified.body().clone()], now);
        Ok(())
    }

    /// Drops what expired, then adds the notices of `fresh` not held yet.
    fn merge(&self, fresh: Vec<RevocationNotice>, now: UnixMillis) {
        let mut table = self.notices.write().unwrap_or_else(|p| p.into_inner());
        table.retain(|n| n.expiry > now);
        let mut ids: std::collections::HashSet<u64> = table.iter().map(|n| n.notice_id).collect();
        for notice in fresh {
            if notice.expiry > now && ids.insert(notice.notice_id) {
                table.push(notice);
            }
        }
    }

    /// Verifies the complete list of notices in force the MDS sent (the list's own MAC or
    /// signature checked by the caller), applies them, and records the catch-up at `now`.
    /// Only notices not held yet are verified (the list's authenticator already covers
    /// them; the ones held were verified when they came), so a catch-up with nothing new
    /// costs no signature verification. A notice that lapsed by this clock (a little
    /// ahead of the MDS's) is skipped: it has nothing left to refuse, and must not hold up
    /// the others.
    pub fn sync_signed(
        &self,
        notices: &[Vec<u8>],
        mds: &VerifyingKey,
        now: UnixMillis,
    ) -> Result<()> {
        let held: std::collections::HashSet<u64> = self
            .notices
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|n| n.notice_id)
            .collect();
        let mut fresh = Vec::new();
        for n in notices {
            let notice = Unverified::<RevocationNotice>::decode(n)?;
            if held.contains(&notice.unverified_body().notice_id) {
                continue;
            }
            match notice.verify(mds, now) {
                Ok(v) => fresh.push(v.body().clone()),
                Err(ProtoError::Expired { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.merge(fresh, now);
        self.synced_at.store(now.0.max(1), Ordering::SeqCst);
        Ok(())
    }

    /// When the holder last caught up with the MDS (`None`: not since it started).
    pub fn synced_at(&self) -> Option<UnixMillis> {
        match self.synced_at.load(Ordering::SeqCst) {
            0 => None,
            t => Some(UnixMillis(t)),
        }
    }

    /// Whether the holder has caught up with the MDS since it started.
    pub fn synced(&self) -> bool {
        self.synced_at().is_some()
    }

    /// Refuses a request by `user` under capability `id` (delegated to the job key with
    /// hash `key`, if any) that a notice in force names.
    pub fn check(
        &self,
        id: CapabilityId,
        user: UserId,
        key: Option<&[u8; 32]>,
        now: UnixMillis,
    ) -> std::result::Result<(), WireError> {
        let notices = self.notices.read().unwrap_or_else(|p| p.into_inner());
        for n in notices.iter().filter(|n| n.expiry > now) {
            if n.capability_ids.binary_search(&id).is_ok() {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("capability {} was revoked (notice {})", id.0, n.notice_id),
                ));
            }
            if key.is_some_and(|k| n.computation_keys.binary_search(k).is_ok()) {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("the job key was revoked (notice {})", n.notice_id),
                ));
            }
            if n.users.binary_search(&user).is_ok() {
                return Err(WireError::new(
                    ErrorCode::Revoked,
                    format!("user {} was revoked (notice {})", user.0, n.notice_id),
                ));
            }
        }
        Ok(())
    }

    /// Revoked entries (capabilities, users and job keys) held.
    pub fn entries(&self) -> usize {
        self.notices
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|n| n.capability_ids.len() + n.users.len() + n.computation_keys.len())
            .sum()
    }
}
