//! SPEC M8 on the client: capabilities in use are renewed in one batch once the first of
//! them is past [`RENEW_AT_PERCENT`] of its lifetime; the MDS answers with one signed
//! token (naming every outstanding capability it still allows), which the client checks
//! and hands to each OSD it talks to (`SupplyRenewal`) before that OSD would refuse the
//! capability as expired. An OSD that refuses anyway (restarted, or a clock ahead) gets
//! the token and the request again.
//!
//! A capability the MDS leaves out of the token was not renewed: its access was revoked
//! (chmod, chown, group or user change) or the MDS forgot it (restarted). It stays usable
//! until its own expiry, after which requests fail with `CapabilityExpired` and the file
//! must be opened again, which asks the MDS afresh.

use super::*;
use maat_proto::capability::Capability;
use maat_proto::limits::RENEWAL_CAPABILITY_IDS_MAX;
use maat_proto::login::TOKEN_BACKDATE_MILLIS;
use maat_proto::renewal::RenewalToken;
use maat_proto::CapabilityId;
use std::collections::HashSet;
use std::sync::Arc;

pub use crate::limits::HELD_CAPABILITIES_MAX;
pub use crate::limits::RENEW_AT_PERCENT;

/// A capability this client has used.
#[derive(Debug, Clone)]
pub(crate) struct HeldCapability {
    /// Its own validity window.
    start: u64,
    own_expiry: u64,
    /// The latest expiry: its own, or the last token's that names it.
    expiry: u64,
    /// The last token naming it.
    token: Option<Arc<Vec<u8>>>,
    /// OSDs given that token.
    supplied: HashSet<u64>,
    /// The MDS left it out of a token: revoked or forgotten.
    not_renewed: bool,
    last_used: u64,
}

impl HeldCapability {
    /// The lifetime the MDS gave it: tokens start `TOKEN_BACKDATE_MILLIS` before they
    /// were signed (for clocks behind the MDS's), so that much of the window is not life.
    fn lifetime(&self) -> u64 {
        let window = self.own_expiry.saturating_sub(self.start);
        match window.saturating_sub(TOKEN_BACKDATE_MILLIS) {
            0 => window,
            life => life,
        }
    }

    fn renew_due(&self, now: u64) -> bool {
        let left = self.lifetime() * (100 - RENEW_AT_PERCENT) / 100;
        !self.not_renewed && self.expiry > now && now.saturating_add(left) >= self.expiry
    }
}

/// What one renewal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenewalOutcome {
    /// Capabilities asked for.
    pub requested: usize,
    /// Of those, the ones the token names.
    pub renewed: usize,
    /// The new expiry (protocol time, ms).
    pub expiry: u64,
}

impl Client {
    /// Tracks `capability` and, before a request to `osd`: renews every capability in
    /// use when this one is due, and gives `osd` the token that extends it.
    pub(crate) fn prepare_capability(&self, osd: u64, capability: &[u8]) -> Result<()> {
        if capability.is_empty() || self.insecure_user.is_some() {
            return Ok(());
        }
        if let Some(hash) = crate::jobs::delegated_to(capability) {
            // SPEC M10: a job's capability lives as long as its key; no renewal here.
            return self.prepare_delegated(osd, &hash);
        }
        let now = self.now();
        let Some(id) = self.hold(capability, now) else {
            return Ok(());
        };
        if self.held.lock().get(&id).is_some_and(|h| h.renew_due(now)) {
            // A renewal that fails leaves the capability valid until its own expiry; the
            // request goes ahead and the next one tries again.
            let _ = self.renew_capabilities();
        }
        let token = match self.held.lock().get(&id) {
            Some(h) if h.expiry > now && !h.supplied.contains(&osd) => h.token.clone(),
            _ => None,
        };
        if let Some(token) = token {
            // A failed supply leaves the capability valid until its own expiry; if the
            // OSD then refuses it, `recover_expired` supplies again.
            let _ = self.supply_renewal(osd, capability, id, &token);
        }
        Ok(())
    }

    /// After `osd` refused `capability` as expired: true when the client now holds a
    /// token that extends it (renewing first if it has none) and gave it to `osd`, so
    /// the request is worth sending again.
    pub(crate) fn recover_expired(&self, osd: u64, capability: &[u8]) -> Result<bool> {
        let now = self.now();
        let Some(id) = self.hold(capability, now) else {
            return Ok(false);
        };
        let needs_token = self
            .held
            .lock()
            .get(&id)
            .is_some_and(|h| !h.not_renewed && (h.token.is_none() || h.expiry <= now));
        if needs_token {
            self.renew_capabilities()?;
        }
        let token = match self.held.lock().get(&id) {
            Some(h) if h.expiry > now => h.token.clone(),
            _ => None,
        };
        match token {
            Some(token) => {
                self.supply_renewal(osd, capability, id, &token)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    #[doc(hidden)]
    /// SPEC M8: renews every capability this client used within its lifetime and has not
    /// seen refused, in one request; the MDS's token is verified before it is kept.
    pub fn renew_capabilities(&self) -> Result<RenewalOutcome> {
        let now = self.now();
        let mut ids: Vec<u64> = self
            .held
            .lock()
            .iter()
            .filter(|(_, h)| {
                !h.not_renewed && h.expiry > now && now.saturating_sub(h.last_used) < h.lifetime()
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.truncate(RENEWAL_CAPABILITY_IDS_MAX);
        let bytes = match self.mds_call(MdsRequest::Renew { ids: ids.clone() })? {
            MdsResponse::Renewed(t) => t,
            _ => return Err(self.bad("mds", "unexpected answer to Renew")),
        };
        let token = Unverified::<RenewalToken>::decode(&bytes)
            .and_then(|t| t.verify(&self.mds_key, UnixMillis(now)))
            .map_err(|e| self.bad("mds", &format!("renewal token: {e}")))?
            .body()
            .clone();
        self.stats.lock().renewals += 1;
        let shared = Arc::new(bytes);
        let mut outcome = RenewalOutcome {
            requested: ids.len(),
            renewed: 0,
            expiry: token.expiry.0,
        };
        let mut held = self.held.lock();
        for id in &ids {
            let Some(h) = held.get_mut(id) else {
                continue;
            };
            if token.renews(CapabilityId(*id)) {
                outcome.renewed += 1;
                if token.expiry.0 > h.expiry {
                    h.expiry = token.expiry.0;
                    h.token = Some(shared.clone());
                    h.supplied.clear();
                }
            } else {
                h.not_renewed = true;
            }
        }
        Ok(outcome)
    }

    /// Starts tracking `capability` (or notes its use); its id, unless it does not decode.
    fn hold(&self, capability: &[u8], now: u64) -> Option<u64> {
        let body = Unverified::<Capability>::decode(capability).ok()?;
        let body = body.unverified_body();
        let id = body.id.0;
        let mut held = self.held.lock();
        if !held.contains_key(&id) && held.len() >= HELD_CAPABILITIES_MAX {
            held.retain(|_, h| h.expiry > now);
            if held.len() >= HELD_CAPABILITIES_MAX {
                let oldest = held.iter().min_by_key(|(_, h)| h.last_used);
                if let Some(oldest) = oldest.map(|(id, _)| *id) {
                    held.remove(&oldest);
                }
            }
        }
        let h = held.entry(id).or_insert_with(|| HeldCapability {
            start: body.start.0,
            own_expiry: body.expiry.0,
            expiry: body.expiry.0,
            token: None,
            supplied: HashSet::new(),
            not_renewed: false,
            last_used: now,
        });
        h.last_used = now;
        Some(id)
    }

    fn supply_renewal(
        &self,
        osd: u64,
        capability: &[u8],
        id: u64,
        token: &Arc<Vec<u8>>,
    ) -> Result<()> {
        self.osd_call_fresh(
            osd,
            &OsdRequest {
                capability: capability.to_vec(),
                command: OsdCommand::SupplyRenewal {
                    token: token.to_vec(),
                },
            },
        )?;
        if let Some(h) = self.held.lock().get_mut(&id) {
            h.supplied.insert(osd);
        }
        Ok(())
    }
}
