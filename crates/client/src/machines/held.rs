//! SPEC M8: the capabilities a client holds and when to renew them, as a state machine
//! without I/O. The driver (`renewal.rs`) notes each capability it uses
//! ([`HeldCapabilities::note_use`]), asks what to do before a request to an OSD
//! ([`HeldCapabilities::before_request`]) or after an OSD refused a capability as expired
//! ([`HeldCapabilities::after_expired`]), carries out what it is told (a `Renew` request
//! to the MDS, a `SupplyRenewal` to the OSD) and reports the outcome back
//! ([`HeldCapabilities::renewed`], [`HeldCapabilities::supplied`]).
//!
//! Renewal is batched: once the first capability in use is past [`RENEW_AT_PERCENT`] of
//! its lifetime, every capability used within its lifetime and not refused is asked for
//! in one request; the MDS's one signed token names those it still allows. A capability
//! the token leaves out was revoked (or forgotten by a restarted MDS): it is never asked
//! for again and lapses at its own expiry.

use crate::limits::{HELD_CAPABILITIES_MAX, RENEW_AT_PERCENT};
use maat_proto::login::TOKEN_BACKDATE_MILLIS;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// One capability this client has used.
#[derive(Debug, Clone)]
struct Held {
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

impl Held {
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

    /// Worth asking the MDS for: used within its lifetime, not refused, not expired.
    fn worth_renewing(&self, now: u64) -> bool {
        !self.not_renewed
            && self.expiry > now
            && now.saturating_sub(self.last_used) < self.lifetime()
    }
}

/// What the driver does before a request under a capability, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BeforeRequest {
    /// Renew first (one batched request: [`HeldCapabilities::to_renew`]); a failure
    /// leaves the capability valid until its own expiry, and the request goes ahead.
    pub(crate) renew: bool,
}

/// What the driver does after an OSD refused a capability as expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterExpired {
    /// Renew, then ask again ([`HeldCapabilities::token_to_resupply`]).
    Renew,
    /// Give the OSD this token, then send the request again.
    Supply(Arc<Vec<u8>>),
    /// Nothing extends it: the file must be opened again.
    GiveUp,
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

/// The capabilities in use and the renewal tokens that extend them, by capability id.
#[derive(Debug)]
pub(crate) struct HeldCapabilities {
    held: HashMap<u64, Held>,
    max: usize,
}

impl Default for HeldCapabilities {
    fn default() -> Self {
        Self::new(HELD_CAPABILITIES_MAX)
    }
}

impl HeldCapabilities {
    /// Tracks at most `max` capabilities (at least one): when full, expired ones go
    /// first, then the least recently used.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            held: HashMap::new(),
            max: max.max(1),
        }
    }

    /// Notes a use at `now` of capability `id`, valid from `start` to `expiry` on its own.
    pub(crate) fn note_use(&mut self, id: u64, start: u64, expiry: u64, now: u64) {
        if !self.held.contains_key(&id) && self.held.len() >= self.max {
            self.held.retain(|_, h| h.expiry > now);
            if self.held.len() >= self.max {
                let oldest = self.held.iter().min_by_key(|(_, h)| h.last_used);
                if let Some(oldest) = oldest.map(|(id, _)| *id) {
                    self.held.remove(&oldest);
                }
            }
        }
        let h = self.held.entry(id).or_insert_with(|| Held {
            start,
            own_expiry: expiry,
            expiry,
            token: None,
            supplied: HashSet::new(),
            not_renewed: false,
            last_used: now,
        });
        h.last_used = now;
    }

    /// Before a request under `id`: whether to renew first.
    pub(crate) fn before_request(&self, id: u64, now: u64) -> BeforeRequest {
        BeforeRequest {
            renew: self.held.get(&id).is_some_and(|h| h.renew_due(now)),
        }
    }

    /// The token `osd` has not yet been given that extends `id` at `now`, if any.
    pub(crate) fn token_to_supply(&self, id: u64, osd: u64, now: u64) -> Option<Arc<Vec<u8>>> {
        match self.held.get(&id) {
            Some(h) if h.expiry > now && !h.supplied.contains(&osd) => h.token.clone(),
            _ => None,
        }
    }

    /// After an OSD refused `id` as expired at `now` (`renewed`: a renewal was tried
    /// since the refusal).
    pub(crate) fn after_expired(&self, id: u64, now: u64, renewed: bool) -> AfterExpired {
        let Some(h) = self.held.get(&id) else {
            return AfterExpired::GiveUp;
        };
        if !renewed && !h.not_renewed && (h.token.is_none() || h.expiry <= now) {
            return AfterExpired::Renew;
        }
        match &h.token {
            Some(token) if h.expiry > now => AfterExpired::Supply(token.clone()),
            _ => AfterExpired::GiveUp,
        }
    }

    /// The capabilities to ask the MDS to renew at `now`, at most `max`, lowest ids first.
    pub(crate) fn to_renew(&self, now: u64, max: usize) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| h.worth_renewing(now))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.truncate(max);
        ids
    }

    /// The MDS's verified token `bytes`, asked for `ids`, names those `renews` accepts
    /// until `expiry`: they are extended (each OSD to be given the token again); the
    /// others are marked not renewed, never asked for again.
    pub(crate) fn renewed(
        &mut self,
        ids: &[u64],
        renews: impl Fn(u64) -> bool,
        expiry: u64,
        bytes: Arc<Vec<u8>>,
    ) -> RenewalOutcome {
        let mut outcome = RenewalOutcome {
            requested: ids.len(),
            renewed: 0,
            expiry,
        };
        for id in ids {
            let Some(h) = self.held.get_mut(id) else {
                continue;
            };
            if renews(*id) {
                outcome.renewed += 1;
                if expiry > h.expiry {
                    h.expiry = expiry;
                    h.token = Some(bytes.clone());
                    h.supplied.clear();
                }
            } else {
                h.not_renewed = true;
            }
        }
        outcome
    }

    /// `osd` was given the current token of `id`.
    pub(crate) fn supplied(&mut self, id: u64, osd: u64) {
        if let Some(h) = self.held.get_mut(&id) {
            h.supplied.insert(osd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A capability of `life` ms of lifetime (plus the backdate), issued at `start`.
    fn hold(h: &mut HeldCapabilities, id: u64, start: u64, life: u64, now: u64) {
        h.note_use(
            id,
            start,
            start + TOKEN_BACKDATE_MILLIS + life,
            now.max(start),
        );
    }

    const LIFE: u64 = 100_000;
    const T0: u64 = 1_000_000;

    fn expiry() -> u64 {
        T0 + TOKEN_BACKDATE_MILLIS + LIFE
    }

    #[test]
    fn renewal_is_due_past_its_share_of_the_lifetime_and_batches_every_capability_in_use() {
        let mut h = HeldCapabilities::default();
        hold(&mut h, 7, T0, LIFE, T0);
        hold(&mut h, 3, T0, LIFE, T0);
        let due_at = expiry() - LIFE * (100 - RENEW_AT_PERCENT) / 100;
        assert!(!h.before_request(7, due_at - 1).renew);
        assert!(h.before_request(7, due_at).renew);
        // Both in use when the first is due: one batch names both.
        hold(&mut h, 7, T0, LIFE, due_at);
        hold(&mut h, 3, T0, LIFE, due_at);
        assert_eq!(h.to_renew(due_at, 100), vec![3, 7]);
        assert_eq!(h.to_renew(due_at, 1), vec![3], "at most max, lowest first");
        // Unknown capabilities are never renewed.
        assert!(!h.before_request(99, due_at).renew);
    }

    #[test]
    fn a_token_extends_what_it_names_and_each_osd_is_given_it_once() {
        let mut h = HeldCapabilities::default();
        hold(&mut h, 1, T0, LIFE, T0);
        hold(&mut h, 2, T0, LIFE, T0);
        let now = expiry() - 1_000;
        let token = Arc::new(vec![9u8; 4]);
        let later = expiry() + LIFE;
        let outcome = h.renewed(&[1, 2], |id| id == 1, later, token.clone());
        assert_eq!(
            outcome,
            RenewalOutcome {
                requested: 2,
                renewed: 1,
                expiry: later
            }
        );
        assert_eq!(h.token_to_supply(1, 10, now), Some(token.clone()));
        h.supplied(1, 10);
        assert_eq!(h.token_to_supply(1, 10, now), None, "given once per OSD");
        assert_eq!(h.token_to_supply(1, 11, now), Some(token.clone()));
        // Past the old expiry, the capability lives on under the token.
        assert_eq!(h.token_to_supply(1, 11, expiry() + 10), Some(token.clone()));
        assert!(
            !h.before_request(1, now).renew,
            "renewed: not due again yet"
        );
        // Left out of the token: revoked. Never asked for again; lapses at its expiry.
        assert_eq!(h.token_to_supply(2, 10, now), None);
        assert!(!h.before_request(2, now).renew);
        hold(&mut h, 1, T0, LIFE, now);
        hold(&mut h, 2, T0, LIFE, now);
        assert_eq!(h.to_renew(now, 100), vec![1]);
        assert_eq!(h.after_expired(2, expiry(), false), AfterExpired::GiveUp);
    }

    #[test]
    fn an_expired_refusal_renews_once_then_supplies_or_gives_up() {
        let mut h = HeldCapabilities::default();
        hold(&mut h, 5, T0, LIFE, T0);
        // An OSD ahead of us refuses before our expiry: no token yet, renew.
        let now = expiry() - 10;
        assert_eq!(h.after_expired(5, now, false), AfterExpired::Renew);
        // The renewal failed: give up rather than loop.
        assert_eq!(h.after_expired(5, now, true), AfterExpired::GiveUp);
        let token = Arc::new(vec![1u8]);
        h.renewed(&[5], |_| true, expiry() + LIFE, token.clone());
        // A token in force: supply it (to an OSD restarted since, say).
        assert_eq!(h.after_expired(5, now, false), AfterExpired::Supply(token));
        // Long after every expiry: nothing extends it.
        assert_eq!(
            h.after_expired(5, expiry() + LIFE + 1, true),
            AfterExpired::GiveUp
        );
        assert_eq!(h.after_expired(404, now, false), AfterExpired::GiveUp);
    }

    #[test]
    fn idle_capabilities_are_not_renewed_and_the_table_is_bounded() {
        let mut h = HeldCapabilities::new(2);
        hold(&mut h, 1, T0, LIFE, T0);
        // Capability 2 issued long after, with a long life: 1 idle for a lifetime.
        hold(&mut h, 2, T0 + LIFE, 10 * LIFE, T0 + LIFE);
        let mut ids = h.to_renew(T0 + LIFE + 1, 100);
        ids.sort_unstable();
        assert_eq!(ids, vec![2], "1 unused for a whole lifetime");
        // A third evicts the expired one first.
        hold(&mut h, 3, T0 + LIFE, 10 * LIFE, expiry() + 1);
        assert_eq!(h.held.len(), 2);
        assert!(!h.held.contains_key(&1));
        // None expired: the least recently used goes.
        hold(&mut h, 2, T0 + LIFE, 10 * LIFE, expiry() + 5);
        hold(&mut h, 4, T0 + LIFE, 10 * LIFE, expiry() + 6);
        assert!(h.held.contains_key(&2) && h.held.contains_key(&4));
        assert!(!h.held.contains_key(&3));
    }
}
