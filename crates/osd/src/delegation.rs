//! SPEC M10 at the OSD: capabilities delegated to a job's computation key. Such a
//! capability names no user; a request under it is served only on a session that has
//! proven possession of the key (`SupplyProof`: an MDS-signed key lifetime token and a
//! proof token signed with the computation key, sealed under this session's key and
//! bound to this OSD and session), and only while the newest lifetime token the OSD has
//! verified for the key lasts. The lead alone can have the MDS extend the lifetime; a
//! revocation notice naming the key ends it at once.
//!
//! Bounded: [`LIFETIMES_MAX`] keys (expired ones dropped first); the keys a session proved
//! live in its session record (at most [`KEYS_PER_SESSION_MAX`]) and go with it.

use maat_proto::delegation::KeyLifetimeToken;
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::signed::Verified;
use maat_proto::UnixMillis;
use std::collections::HashMap;
use std::sync::RwLock;

pub use crate::limits::KEYS_PER_SESSION_MAX;
pub use crate::limits::LIFETIMES_MAX;

struct Lifetime {
    token: Verified<KeyLifetimeToken>,
    /// Digest of the token's encoding (a token seen again is not verified again).
    digest: [u8; 32],
}

/// Verified key lifetimes.
#[derive(Default)]
pub(crate) struct Delegations {
    lifetimes: RwLock<HashMap<[u8; 32], Lifetime>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    maat_proto::sync::read(l)
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    maat_proto::sync::write(l)
}

/// Records in a session's list that it proved `key_hash` (the oldest dropped past
/// [`KEYS_PER_SESSION_MAX`]).
pub(crate) fn prove(keys: &mut Vec<[u8; 32]>, key_hash: [u8; 32]) {
    if !keys.contains(&key_hash) {
        if keys.len() >= KEYS_PER_SESSION_MAX {
            keys.remove(0);
        }
        keys.push(key_hash);
    }
}

impl Delegations {
    /// Whether a token with this digest is the one held for `key_hash` (no need to
    /// verify it again).
    pub fn known(&self, key_hash: &[u8; 32], digest: &[u8; 32]) -> bool {
        read(&self.lifetimes)
            .get(key_hash)
            .is_some_and(|l| l.digest == *digest)
    }

    /// The lifetime token held for `key_hash`.
    pub fn lifetime(&self, key_hash: &[u8; 32]) -> Option<Verified<KeyLifetimeToken>> {
        read(&self.lifetimes).get(key_hash).map(|l| l.token.clone())
    }

    /// Keeps a verified token when it lasts longer than the one held for its key.
    pub fn keep(&self, token: Verified<KeyLifetimeToken>, digest: [u8; 32], now: UnixMillis) {
        let key_hash = token.body().key_hash();
        let mut lifetimes = write(&self.lifetimes);
        if lifetimes
            .get(&key_hash)
            .is_some_and(|l| l.token.body().expiry >= token.body().expiry)
        {
            return;
        }
        if lifetimes.len() >= LIFETIMES_MAX && !lifetimes.contains_key(&key_hash) {
            lifetimes.retain(|_, l| l.token.body().expiry > now);
            if lifetimes.len() >= LIFETIMES_MAX {
                lifetimes.clear();
            }
        }
        lifetimes.insert(key_hash, Lifetime { token, digest });
    }

    /// A request under a capability delegated to `key_hash` on a session that proved
    /// the keys `proven`: refused with `ProofRequired` until the session proved the key,
    /// and with `CapabilityExpired` once the key's newest lifetime token has run out.
    pub fn check(
        &self,
        proven: bool,
        key_hash: &[u8; 32],
        now: UnixMillis,
    ) -> Result<(), WireError> {
        let expiry = read(&self.lifetimes)
            .get(key_hash)
            .map(|l| l.token.body().expiry)
            .ok_or_else(|| {
                WireError::new(
                    ErrorCode::ProofRequired,
                    "no lifetime token for this job key: supply one with a proof",
                )
            })?;
        if !proven {
            return Err(WireError::new(
                ErrorCode::ProofRequired,
                "this session has not proven possession of the job key",
            ));
        }
        if expiry <= now {
            return Err(WireError::new(
                ErrorCode::CapabilityExpired,
                format!(
                    "the job key's lifetime ended {} ms ago (only the job's lead can renew it)",
                    now.0.saturating_sub(expiry.0)
                ),
            ));
        }
        Ok(())
    }

    /// Job keys with a lifetime held.
    pub fn keys(&self) -> usize {
        read(&self.lifetimes).len()
    }
}
