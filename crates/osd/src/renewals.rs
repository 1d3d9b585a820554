//! SPEC M8 at the OSD: renewal tokens are verified once (by digest) and the expiry each
//! grants is kept by capability id, so an expired capability that a verified token names
//! is accepted until the token's expiry without verifying anything again.

use maat_crypto::hash::Digest;
use maat_proto::renewal::RenewalToken;
use maat_proto::UnixMillis;
use std::collections::HashMap;
use std::sync::RwLock;

pub use crate::limits::RENEWAL_TOKENS_KEPT_MAX;
pub use crate::limits::RENEWED_CAPABILITIES_MAX;

#[derive(Default)]
struct Inner {
    /// Capability id → the latest expiry a verified token granted it.
    expiries: HashMap<u64, UnixMillis>,
    /// Digests of tokens verified, each with its expiry.
    tokens: HashMap<Digest, UnixMillis>,
}

/// Renewed expiries by capability id, and the tokens already verified.
#[derive(Default)]
pub(crate) struct Renewed {
    inner: RwLock<Inner>,
}

impl Renewed {
    /// The expiry a verified token granted capability `id`, if any.
    pub fn expiry(&self, id: u64) -> Option<UnixMillis> {
        self.read().expiries.get(&id).copied()
    }

    /// Whether the token with this digest was verified already (and is still valid).
    pub fn known(&self, digest: &Digest, now: UnixMillis) -> bool {
        self.read()
            .tokens
            .get(digest)
            .is_some_and(|expiry| *expiry > now)
    }

    /// Keeps what a verified token grants. The token counts as known (not verified
    /// again) only when every id it names was kept: a table full of valid renewals leaves
    /// the rest unrenewed here, and the same token supplied later is checked and tried
    /// again rather than taken as applied.
    pub fn insert(&self, digest: Digest, token: &RenewalToken, now: UnixMillis) {
        let mut inner = maat_proto::sync::write(&self.inner);
        if inner.expiries.len() + token.capability_ids.len() > RENEWED_CAPABILITIES_MAX {
            inner.expiries.retain(|_, expiry| *expiry > now);
        }
        let mut complete = true;
        for id in &token.capability_ids {
            if inner.expiries.len() >= RENEWED_CAPABILITIES_MAX
                && !inner.expiries.contains_key(&id.0)
            {
                complete = false;
                break;
            }
            let e = inner.expiries.entry(id.0).or_insert(token.expiry);
            *e = (*e).max(token.expiry);
        }
        if !complete {
            return;
        }
        if inner.tokens.len() >= RENEWAL_TOKENS_KEPT_MAX {
            inner.tokens.retain(|_, expiry| *expiry > now);
            if inner.tokens.len() >= RENEWAL_TOKENS_KEPT_MAX {
                inner.tokens.clear();
            }
        }
        inner.tokens.insert(digest, token.expiry);
    }

    /// Capability ids with a renewed expiry kept.
    pub fn len(&self) -> usize {
        self.read().expiries.len()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        maat_proto::sync::read(&self.inner)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use maat_proto::CapabilityId;

    fn token(ids: std::ops::Range<u64>, expiry: u64) -> RenewalToken {
        RenewalToken {
            token_id: 1,
            start: UnixMillis(0),
            expiry: UnixMillis(expiry),
            capability_ids: ids.map(CapabilityId).collect(),
        }
    }

    #[test]
    fn a_token_not_wholly_kept_is_not_taken_as_applied() {
        let r = Renewed::default();
        let now = UnixMillis(1);
        let max = RENEWED_CAPABILITIES_MAX as u64;
        r.insert([1; 32], &token(0..max, 100), now);
        assert!(r.known(&[1; 32], now));
        // The table is full of valid renewals: the next token's new ids do not fit.
        r.insert([2; 32], &token(max - 1..max + 1, 200), now);
        assert!(
            !r.known(&[2; 32], now),
            "a token with an id left out was marked known"
        );
        assert_eq!(r.expiry(max), None);
        // Once the old renewals lapse, the same token is kept whole.
        let later = UnixMillis(150);
        r.insert([2; 32], &token(max - 1..max + 1, 200), later);
        assert!(r.known(&[2; 32], later));
        assert_eq!(r.expiry(max), Some(UnixMillis(200)));
    }
}
