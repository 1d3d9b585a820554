//! SPEC M8 on the client: capabilities in use are renewed in one batch once the first of
//! them is past [`RENEW_AT_PERCENT`](crate::limits::RENEW_AT_PERCENT) of its lifetime; the MDS answers with one signed
//! token (naming every outstanding capability it still allows), which the client checks
//! and hands to each OSD it talks to (`SupplyRenewal`) before that OSD would refuse the
//! capability as expired. An OSD that refuses anyway (restarted, or a clock ahead) gets
//! the token and the request again.
//!
//! A capability the MDS leaves out of the token was not renewed: its access was revoked
//! (chmod, chown, group or user change) or the MDS forgot it (restarted). It stays usable
//! until its own expiry, after which requests fail with `CapabilityExpired` and the file
//! must be opened again, which asks the MDS afresh.
//!
//! This file is the driver: what to do and when is decided by
//! [`HeldCapabilities`](crate::machines::HeldCapabilities), without I/O; here the
//! requests it asks for are sent and their outcomes reported back to it.

use super::*;
use crate::machines::AfterExpired;
use maat_proto::capability::Capability;
use maat_proto::limits::RENEWAL_CAPABILITY_IDS_MAX;
use maat_proto::renewal::RenewalToken;
use maat_proto::CapabilityId;
use std::sync::Arc;

use crate::machines::RenewalOutcome;

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
        if self.held.lock().before_request(id, now).renew {
            // A renewal that fails leaves the capability valid until its own expiry; the
            // request goes ahead and the next one tries again.
            let _ = self.renew_capabilities();
        }
        let token = self.held.lock().token_to_supply(id, osd, now);
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
        let mut renewed = false;
        loop {
            let next = self.held.lock().after_expired(id, now, renewed);
            match next {
                AfterExpired::Renew => {
                    self.renew_capabilities()?;
                    renewed = true;
                }
                AfterExpired::Supply(token) => {
                    self.supply_renewal(osd, capability, id, &token)?;
                    return Ok(true);
                }
                AfterExpired::GiveUp => return Ok(false),
            }
        }
    }

    #[doc(hidden)]
    /// SPEC M8: renews every capability this client used within its lifetime and has not
    /// seen refused, in one request; the MDS's token is verified before it is kept.
    pub fn renew_capabilities(&self) -> Result<RenewalOutcome> {
        let now = self.now();
        let ids = self.held.lock().to_renew(now, RENEWAL_CAPABILITY_IDS_MAX);
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
        Ok(self.held.lock().renewed(
            &ids,
            |id| token.renews(CapabilityId(id)),
            token.expiry.0,
            Arc::new(bytes),
        ))
    }

    /// Starts tracking `capability` (or notes its use); its id, unless it does not decode.
    fn hold(&self, capability: &[u8], now: u64) -> Option<u64> {
        let body = Unverified::<Capability>::decode(capability).ok()?;
        let body = body.unverified_body();
        let id = body.id.0;
        self.held
            .lock()
            .note_use(id, body.start.0, body.expiry.0, now);
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
        self.held.lock().supplied(id, osd);
        Ok(())
    }
}
