//! SPEC M9 at the MDS: immediate revocation for emergencies (a compromised client).
//!
//! `Revoke` (administrator) makes one signed notice naming capability ids and users. It is
//! durable before the answer (the `meta` record [`REVOCATIONS_META_KEY`], versioned), the
//! daemon shell pushes it to every OSD before it answers, and OSDs ask for every notice in
//! force (`MdsPlainRequest::Revocations`, MACed under the join key over their nonce) before
//! they serve after a start and then periodically, so an OSD that was down learns it too.
//!
//! A notice lasts until every capability it concerns would have expired anyway (now +
//! the capability lifetime, the latest expiry of a capability issued or renewed until
//! now): capabilities it names are no longer
//! renewed, and while it lasts the MDS issues no capability to a revoked user. After that
//! expiry does the job, and the notice is forgotten everywhere.

use crate::{lock, MdsError, MetaStore, Principal, Result, CLOCK_SKEW_MILLIS};
use crate::{require_admin, Batch, Op};
use maat_crypto::sign::VerifyingKey;
use maat_proto::limits::REVOCATION_ENTRIES_MAX;
use maat_proto::msg::OsdEntry;
use maat_proto::msg::{ErrorCode, MdsPlainResponse, MdsResponse};
use maat_proto::revocation::{
    kds_revocations_message, kds_revocations_request_message, revocations_mac,
    revocations_request_mac, RevocationNotice,
};
use maat_proto::signed::{self, Unverified};
use maat_proto::{CapabilityId, UnixMillis, UserId};
use std::sync::{Arc, Mutex};

/// The `meta` record holding the notices in force.
pub const REVOCATIONS_META_KEY: &str = "revocations";
/// Layout version of that record: `version(1) ‖ next_id(8) ‖ n(4) ‖ (len(4) ‖ notice)·n`.
const REVOCATIONS_FORMAT: u8 = 1;
pub use crate::limits::REVOKED_ENTRIES_IN_FORCE_MAX;

#[derive(Clone)]
struct Notice {
    body: RevocationNotice,
    encoded: Vec<u8>,
}

#[derive(Default)]
struct Loaded {
    notices: Vec<Notice>,
    next_id: u64,
}

/// Pushes one signed notice to the OSDs given; returns how many applied it. Set by the
/// daemon shell (the I/O lives there); without one, OSDs learn at their next check.
pub type RevocationPusher = dyn Fn(&[u8], &[OsdEntry]) -> u32 + Send + Sync;

/// The notices in force, read from the store on first use, and the shell's pusher.
#[derive(Default)]
pub(crate) struct Revocations {
    state: Mutex<Option<Loaded>>,
    pusher: Mutex<Option<Arc<RevocationPusher>>>,
}

fn encode(loaded: &Loaded) -> Vec<u8> {
    let mut out = vec![REVOCATIONS_FORMAT];
    out.extend_from_slice(&loaded.next_id.to_be_bytes());
    out.extend_from_slice(&(loaded.notices.len() as u32).to_be_bytes());
    for n in &loaded.notices {
        out.extend_from_slice(&(n.encoded.len() as u32).to_be_bytes());
        out.extend_from_slice(&n.encoded);
    }
    out
}

fn corrupt(reason: &str) -> MdsError {
    MdsError::refused(
        ErrorCode::Internal,
        format!("stored revocations unreadable: {reason}"),
    )
}

fn decode(bytes: &[u8]) -> Result<Loaded> {
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let part = bytes
            .get(*at..*at + n)
            .ok_or_else(|| corrupt("truncated"))?;
        *at += n;
        Ok(part)
    };
    let mut at = 0;
    let version = take(&mut at, 1)?;
    if version != [REVOCATIONS_FORMAT] {
        return Err(corrupt("unknown format version"));
    }
    let next_id = u64::from_be_bytes(take(&mut at, 8)?.try_into().map_err(|_| corrupt("id"))?);
    let count = u32::from_be_bytes(take(&mut at, 4)?.try_into().map_err(|_| corrupt("count"))?);
    let mut notices = Vec::new();
    for _ in 0..count {
        let len = u32::from_be_bytes(take(&mut at, 4)?.try_into().map_err(|_| corrupt("len"))?);
        let encoded = take(&mut at, len as usize)?.to_vec();
        let body = Unverified::<RevocationNotice>::decode(&encoded)
            .map_err(|e| corrupt(&e.to_string()))?
            .unverified_body()
            .clone();
        notices.push(Notice { body, encoded });
    }
    Ok(Loaded { notices, next_id })
}

impl<S: MetaStore> crate::Mds<S> {
    /// Runs `f` on the notices in force (loaded on first use, expired ones dropped).
    fn with_revocations<T>(
        &self,
        now: UnixMillis,
        f: impl FnOnce(&mut Loaded) -> Result<T>,
    ) -> Result<T> {
        let mut slot = lock(&self.revocations.state);
        if slot.is_none() {
            *slot = Some(match self.store.meta(REVOCATIONS_META_KEY)? {
                Some(bytes) => decode(&bytes)?,
                None => Loaded::default(),
            });
        }
        let loaded = slot.as_mut().ok_or_else(|| corrupt("not loaded"))?;
        loaded.notices.retain(|n| n.body.expiry > now);
        f(loaded)
    }

    /// Drops the notices loaded from the store: the next use reads them again (another
    /// instance sharing the store revoked, [`crate::acl_version`]).
    pub(crate) fn forget_revocations_loaded(&self) {
        *lock(&self.revocations.state) = None;
    }

    /// The capability ids and users that the notices in force name, sorted.
    pub(crate) fn revoked_now(&self, now: UnixMillis) -> Result<(Vec<u64>, Vec<u64>)> {
        self.with_revocations(now, |l| {
            let mut ids: Vec<u64> = (l.notices.iter())
                .flat_map(|n| n.body.capability_ids.iter().map(|c| c.0))
                .collect();
            let mut users: Vec<u64> = (l.notices.iter())
                .flat_map(|n| n.body.users.iter().map(|u| u.0))
                .collect();
            ids.sort_unstable();
            users.sort_unstable();
            Ok((ids, users))
        })
    }

    /// Whether a revocation in force names `uid` (the MDS then issues it no capability).
    pub(crate) fn user_revoked(&self, uid: u64, now: UnixMillis) -> Result<bool> {
        self.with_revocations(now, |l| {
            Ok(l.notices
                .iter()
                .any(|n| n.body.users.binary_search(&UserId(uid)).is_ok()))
        })
    }

    /// Whether a revocation in force names capability `id`.
    pub(crate) fn capability_revoked(&self, id: u64, now: UnixMillis) -> Result<bool> {
        self.with_revocations(now, |l| {
            Ok(l.notices.iter().any(|n| {
                n.body
                    .capability_ids
                    .binary_search(&CapabilityId(id))
                    .is_ok()
            }))
        })
    }

    /// SPEC M9: signs and stores a notice revoking `users` and `capabilities`, and the
    /// keys of the jobs those users lead (M10: their participants are cut off too).
    pub(crate) fn revoke(
        &self,
        who: &Principal,
        users: &[String],
        capabilities: &[u64],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        if users.is_empty() && capabilities.is_empty() {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "name at least one user or capability to revoke",
            ));
        }
        if users.len() > REVOCATION_ENTRIES_MAX || capabilities.len() > REVOCATION_ENTRIES_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("at most {REVOCATION_ENTRIES_MAX} users and capabilities per notice"),
            ));
        }
        let mut uids = Vec::with_capacity(users.len());
        for name in users {
            let user = self.store.user_by_name(name)?.ok_or_else(|| {
                MdsError::refused(ErrorCode::NoSuchUser, format!("no user {name}"))
            })?;
            uids.push(user.id);
        }
        uids.sort_unstable();
        uids.dedup();
        let mut ids = capabilities.to_vec();
        ids.sort_unstable();
        ids.dedup();
        self.revoke_entries(uids, ids, Vec::new(), now)
    }

    /// Signs, stores and pushes a notice revoking users, capabilities and job keys (the
    /// id lists sorted and free of duplicates); the callers check who may. The jobs the
    /// revoked users lead are ended for good and their keys named too (SPEC M10), in the
    /// same step; keys a notice in force names already are left out, and a notice that
    /// would name nothing new is refused (`InvalidArgument`).
    pub(crate) fn revoke_entries(
        &self,
        uids: Vec<u64>,
        ids: Vec<u64>,
        keys: Vec<[u8; 32]>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let lifetime = self.config.capability_lifetime_millis;
        // Under the write lock and the access-control gate: no capability is issued or
        // renewed between signing the notice and forgetting what it revokes, so nothing
        // revoked is named by a token that outlives the notice.
        let _guard = self.writing()?;
        let encoded = self.acl_change(|stamp| {
            let encoded = self.with_revocations(now, |loaded| {
                let named: std::collections::HashSet<[u8; 32]> = loaded
                    .notices
                    .iter()
                    .flat_map(|n| n.body.computation_keys.iter().copied())
                    .collect();
                let mut keys = keys;
                keys.extend(self.end_jobs_led_by(&uids, now)?);
                keys.retain(|k| !named.contains(k));
                keys.sort_unstable();
                keys.dedup();
                if uids.is_empty() && ids.is_empty() && keys.is_empty() {
                    return Err(MdsError::refused(
                        ErrorCode::InvalidArgument,
                        "already revoked by a notice in force",
                    ));
                }
                if keys.len() > REVOCATION_ENTRIES_MAX {
                    return Err(MdsError::refused(
                        ErrorCode::TooLarge,
                        format!(
                            "these users lead {} jobs; at most {REVOCATION_ENTRIES_MAX} per \
                             notice: revoke fewer users at once",
                            keys.len()
                        ),
                    ));
                }
                let in_force: usize = loaded
                    .notices
                    .iter()
                    .map(|n| {
                        n.body.users.len()
                            + n.body.capability_ids.len()
                            + n.body.computation_keys.len()
                    })
                    .sum();
                if in_force + uids.len() + ids.len() + keys.len() > REVOKED_ENTRIES_IN_FORCE_MAX {
                    return Err(MdsError::refused(
                        ErrorCode::Busy,
                        format!(
                            "{in_force} revocations in force (at most {REVOKED_ENTRIES_IN_FORCE_MAX}); \
                             they expire within one capability lifetime"
                        ),
                    ));
                }
                let body = RevocationNotice {
                    notice_id: loaded.next_id.max(1),
                    start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
                    // Every capability issued or renewed until now expires by then.
                    expiry: now.plus_millis(lifetime),
                    capability_ids: ids.iter().copied().map(CapabilityId).collect(),
                    users: uids.iter().copied().map(UserId).collect(),
                    computation_keys: keys,
                };
                let encoded = signed::sign(body.clone(), &self.signing)
                    .encoded()
                    .to_vec();
                let mut next = Loaded {
                    notices: loaded.notices.clone(),
                    next_id: body.notice_id + 1,
                };
                next.notices.push(Notice {
                    body,
                    encoded: encoded.clone(),
                });
                let mut batch = Batch::default();
                batch.push(Op::PutMeta(REVOCATIONS_META_KEY.into(), self::encode(&next)));
                batch.push(stamp);
                // Durable before anyone is told.
                self.store.commit(batch)?;
                *loaded = next;
                Ok(encoded)
            })?;
            // Nothing revoked is renewed or handed out from a cache again.
            self.issuer.renewals.revoke(&ids, &uids);
            self.forget_capabilities_cached();
            Ok(encoded)
        })?;
        // Told before the administrator hears it is done (outside the locks: network).
        let osds = self.registered_osds();
        let pusher = lock(&self.revocations.pusher).clone();
        let told = pusher.map_or(0, |push| push(&encoded, &osds));
        Ok(MdsResponse::Revoked {
            notice: encoded,
            osds_told: told,
            osds: osds.len() as u32,
        })
    }

    /// The daemon shell's way to push notices to OSDs (SPEC M9).
    pub fn set_revocation_pusher(&self, pusher: Arc<RevocationPusher>) {
        *lock(&self.revocations.pusher) = Some(pusher);
    }

    /// SPEC M9: every notice in force, MACed for OSD `osd` over its nonce; the request
    /// must carry the join key's MAC.
    pub(crate) fn revocations_for(
        &self,
        osd: u64,
        nonce: &[u8; 16],
        request_mac: &[u8; 32],
        now: UnixMillis,
    ) -> Result<MdsPlainResponse> {
        // An OSD's once-a-second catch-up is work no request causes: its MACs count as
        // background (`macs_computed_background`), as the KDS lists' signatures do.
        let join = self.check_in_key(osd)?;
        if !maat_crypto::ct_eq(&revocations_request_mac(&join, osd, nonce), request_mac) {
            return Err(MdsError::refused(
                ErrorCode::AuthenticationFailed,
                format!("revocations are listed for OSD {osd} under its check-in key"),
            ));
        }
        let notices = self.notices_in_force(now)?;
        let mac = revocations_mac(&join, osd, nonce, &notices);
        Ok(MdsPlainResponse::Revocations { notices, mac })
    }

    /// Every signed notice in force, as the catch-ups of OSDs and KDS instances send them.
    fn notices_in_force(&self, now: UnixMillis) -> Result<Vec<Vec<u8>>> {
        self.with_revocations(now, |l| {
            Ok(l.notices.iter().map(|n| n.encoded.clone()).collect())
        })
    }

    /// SPEC M9 at a KDS: every notice in force, signed over the KDS's nonce; the request
    /// must carry the signature of the KDS key in this MDS's config and a time within the
    /// clock-skew window (a captured request is not answered for long).
    pub(crate) fn revocations_for_kds(
        &self,
        nonce: &[u8; 16],
        timestamp: UnixMillis,
        signature: &[u8],
        now: UnixMillis,
    ) -> Result<MdsPlainResponse> {
        let keys = self.config.kds_keys.ok_or_else(|| {
            MdsError::refused(
                ErrorCode::PermissionDenied,
                "this MDS knows no KDS (no kds_public_keys_file in its config)",
            )
        })?;
        if timestamp.0.abs_diff(now.0) > CLOCK_SKEW_MILLIS {
            return Err(MdsError::refused(
                ErrorCode::StaleRequest,
                format!(
                    "the KDS's clock is {} ms from the MDS's (at most {CLOCK_SKEW_MILLIS})",
                    timestamp.0.abs_diff(now.0)
                ),
            ));
        }
        let signature = <[u8; 64]>::try_from(signature)
            .map(maat_crypto::sign::Signature)
            .map_err(|_| MdsError::refused(ErrorCode::Malformed, "a signature is 64 bytes"))?;
        // (Background work, as the list's signature below: `signatures_verified_background`.)
        VerifyingKey::from_bytes(&keys.verifying_key)
            .map_err(|e| MdsError::refused(ErrorCode::Internal, format!("KDS key: {e}")))?
            .with_counters(self.background.clone())
            .verify(
                &kds_revocations_request_message(nonce, timestamp),
                &signature,
            )
            .map_err(|_| {
                MdsError::refused(
                    ErrorCode::AuthenticationFailed,
                    "revocations are listed for KDS instances holding the KDS key",
                )
            })?;
        let notices = self.notices_in_force(now)?;
        let signature = self
            .background_signing
            .sign(&kds_revocations_message(nonce, &notices))
            .0
            .to_vec();
        self.stats
            .kds_revocation_lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(MdsPlainResponse::KdsRevocations { notices, signature })
    }
}
