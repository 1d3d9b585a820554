//! SPEC M7 + M8 at the MDS: which capabilities are outstanding, and batched renewal.
//!
//! Every capability the MDS signs for an open is recorded here with the users and files
//! it names, its mode and the latest expiry granted to it. A renewal request names the
//! capabilities a client uses; the answer is one signed token naming every outstanding
//! capability that the access-control state still allows (paper 000 Fig. 5: ℛ = ⟨P + O,
//! T_e⟩), so one signature renews the capabilities of every client.
//!
//! The invariant (M7): a token never names a capability that authorizes a (user, file,
//! mode) which the access-control state does not allow when the token is signed. How it
//! holds: renewal runs under the read side of the access-control gate (as an issue does),
//! re-checks every outstanding capability whose last check was at an older
//! access-control version and forgets the ones that fail for good, and hands out the
//! cached token only while the version it was signed at is still current.
//!
//! The cost stays flat as clients grow: the cached token serves every request whose
//! capabilities it already names while it has at least half a lifetime left; a request
//! naming a capability it does not cover gets a fresh token for all outstanding ones in
//! use (issued or asked for within the last lifetime: the MDS sees no closes, and a
//! capability nobody asks for must be let expire).

use crate::capabilities::want_bits;
use crate::grouping::{AclSnapshot, Perm};
use crate::{lock, MdsError, MetaStore, Result, CLOCK_SKEW_MILLIS};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::Mode;
use maat_proto::limits::RENEWAL_CAPABILITY_IDS_MAX;
use maat_proto::msg::{ErrorCode, MdsResponse};
use maat_proto::renewal::RenewalToken;
use maat_proto::{signed, CapabilityId, UnixMillis};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::limits::OUTSTANDING_CAPABILITIES_MAX;
pub use crate::limits::OUTSTANDING_MEMBERS_MAX;

struct Outstanding {
    users: Arc<[u64]>,
    files: Arc<[u64]>,
    want: u16,
    /// The latest expiry granted: the capability's own, or the last token's naming it.
    expiry: UnixMillis,
    /// The access-control version at which it was last found allowed.
    checked: u64,
    /// When it was issued or last asked to be renewed: a token names, besides what was
    /// asked, only capabilities asked for within a lifetime (in use), so one nobody uses
    /// any more expires.
    wanted: UnixMillis,
}

struct CachedToken {
    encoded: Vec<u8>,
    token: RenewalToken,
    acl_version: u64,
}

impl State {
    /// Recomputes `members` after entries were dropped.
    fn recount(&mut self) {
        self.members = self
            .outstanding
            .values()
            .map(|o| o.users.len() + o.files.len())
            .sum();
    }
}

#[derive(Default)]
struct State {
    outstanding: HashMap<u64, Outstanding>,
    token: Option<CachedToken>,
    next_token_id: u64,
    /// Users plus files named over `outstanding`.
    members: usize,
    /// The access-control version every outstanding capability was last re-checked at
    /// (`None`: never), so that the re-check runs once per version, not per request.
    checked_all: Option<u64>,
}

/// What a capability just signed names.
pub(crate) struct Issued {
    pub id: CapabilityId,
    pub users: Vec<u64>,
    pub files: Vec<u64>,
    pub mode: Mode,
    pub expiry: UnixMillis,
}

/// Outstanding capabilities, the current renewal token and their counters.
#[derive(Default)]
pub(crate) struct Renewals {
    state: Mutex<State>,
    requests: AtomicU64,
    tokens_signed: AtomicU64,
    tokens_reused: AtomicU64,
    renewed: AtomicU64,
    refused: AtomicU64,
    forgotten: AtomicU64,
    /// Time spent answering renewals (a statistic only; decisions never read a clock).
    micros: AtomicU64,
}

impl Renewals {
    /// Records a capability just signed (called under the access-control gate, so
    /// `acl_version` is the version it was decided on).
    pub(crate) fn register(&self, issued: Issued, acl_version: u64, now: UnixMillis) {
        let mut state = lock(&self.state);
        let size = issued.users.len() + issued.files.len();
        if state.outstanding.len() >= OUTSTANDING_CAPABILITIES_MAX
            || state.members + size > OUTSTANDING_MEMBERS_MAX
        {
            state.outstanding.retain(|_, o| o.expiry > now);
            state.recount();
            if state.outstanding.len() >= OUTSTANDING_CAPABILITIES_MAX
                || state.members + size > OUTSTANDING_MEMBERS_MAX
            {
                return;
            }
        }
        state.members += size;
        state.outstanding.insert(
            issued.id.0,
            Outstanding {
                users: issued.users.into(),
                files: issued.files.into(),
                want: want_bits(issued.mode),
                expiry: issued.expiry,
                checked: acl_version,
                wanted: now,
            },
        );
    }

    /// Forgets every outstanding capability and the token (a partition's protection
    /// method changed: capabilities of the old method are not renewed).
    pub(crate) fn forget_all(&self) {
        let mut state = lock(&self.state);
        state.outstanding.clear();
        state.members = 0;
        state.token = None;
    }

    /// SPEC M9: never renews again a capability named in `ids` or naming one of `users`.
    pub(crate) fn revoke(&self, ids: &[u64], users: &[u64]) {
        let mut state = lock(&self.state);
        let before = state.outstanding.len();
        state.outstanding.retain(|id, o| {
            ids.binary_search(id).is_err()
                && !o.users.iter().any(|u| users.binary_search(u).is_ok())
        });
        state.recount();
        let gone = before - state.outstanding.len();
        state.token = None;
        self.forgotten.fetch_add(gone as u64, Ordering::Relaxed);
    }

    /// `renewal:*` counters for `maat stats`.
    pub(crate) fn counters(&self) -> Vec<(String, u64)> {
        let outstanding = lock(&self.state).outstanding.len() as u64;
        vec![
            (
                "renewal:requests".into(),
                self.requests.load(Ordering::Relaxed),
            ),
            (
                "renewal:tokens_signed".into(),
                self.tokens_signed.load(Ordering::Relaxed),
            ),
            (
                "renewal:tokens_reused".into(),
                self.tokens_reused.load(Ordering::Relaxed),
            ),
            (
                "renewal:capabilities_renewed".into(),
                self.renewed.load(Ordering::Relaxed),
            ),
            (
                "renewal:capabilities_refused".into(),
                self.refused.load(Ordering::Relaxed),
            ),
            (
                "renewal:capabilities_forgotten".into(),
                self.forgotten.load(Ordering::Relaxed),
            ),
            ("renewal:outstanding".into(), outstanding),
            ("renewal:micros".into(), self.micros.load(Ordering::Relaxed)),
        ]
    }
}

impl<S: MetaStore> crate::Mds<S> {
    /// SPEC M8: a renewal token for `ids` (the capabilities a client uses) and every
    /// other outstanding capability still allowed.
    pub(crate) fn renew(
        &self,
        ids: &[u64],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let started = std::time::Instant::now();
        let out = self.renew_inner(ids, now, rng);
        self.issuer.renewals.micros.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        out
    }

    fn renew_inner(
        &self,
        ids: &[u64],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let r = &self.issuer.renewals;
        r.requests.fetch_add(1, Ordering::Relaxed);
        if ids.len() > RENEWAL_CAPABILITY_IDS_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("at most {RENEWAL_CAPABILITY_IDS_MAX} capabilities per renewal"),
            ));
        }
        let lifetime = self.config.capability_lifetime_millis;
        let (_gate, acl) = self.gate_and_acl()?;
        let mut state = lock(&r.state);
        if state.checked_all != Some(acl.version()) {
            self.recheck(&mut state, &acl, now)?;
        }
        assert_eq!(
            state.checked_all,
            Some(acl.version()),
            "renewal: every outstanding capability is checked against the current state"
        );

        let mut requested: Vec<u64> = ids.to_vec();
        requested.sort_unstable();
        requested.dedup();
        let mut renewable = Vec::with_capacity(requested.len());
        for id in &requested {
            if let Some(o) = state.outstanding.get_mut(id).filter(|o| o.expiry > now) {
                o.wanted = now;
                renewable.push(*id);
            }
        }
        r.refused.fetch_add(
            (requested.len() - renewable.len()) as u64,
            Ordering::Relaxed,
        );
        r.renewed
            .fetch_add(renewable.len() as u64, Ordering::Relaxed);

        if let Some(t) = &state.token {
            let covers = renewable.iter().all(|id| t.token.renews(CapabilityId(*id)));
            if covers
                && t.acl_version == acl.version()
                && t.token.expiry.0 >= now.0.saturating_add(lifetime / 2)
            {
                r.tokens_reused.fetch_add(1, Ordering::Relaxed);
                return Ok(MdsResponse::Renewed(t.encoded.clone()));
            }
        }

        // A fresh token: the requested ones first, then every other one in use.
        state.outstanding.retain(|_, o| o.expiry > now);
        state.recount();
        let mut names = renewable.clone();
        let others: Vec<u64> = state
            .outstanding
            .iter()
            .filter(|(id, o)| {
                now.0.saturating_sub(o.wanted.0) < lifetime && renewable.binary_search(id).is_err()
            })
            .map(|(id, _)| *id)
            .take(RENEWAL_CAPABILITY_IDS_MAX - names.len())
            .collect();
        names.extend(others);
        // SPEC M8 never revives revoked access: a token names only capabilities still
        // outstanding, which the recheck above left only where the state still allows them.
        assert!(
            names.iter().all(|id| state.outstanding.contains_key(id)),
            "renewal: a token names only outstanding capabilities"
        );
        let expiry = now.plus_millis(lifetime);
        let token_id = state.next_token_id ^ rng.next_u64();
        state.next_token_id = state.next_token_id.wrapping_add(1);
        let token = RenewalToken::new(
            token_id,
            names.into_iter().map(CapabilityId).collect(),
            UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry,
        )?;
        for id in &token.capability_ids {
            if let Some(o) = state.outstanding.get_mut(&id.0) {
                o.expiry = o.expiry.max(expiry);
            }
        }
        let encoded = signed::sign(token.clone(), &self.signing)
            .encoded()
            .to_vec();
        r.tokens_signed.fetch_add(1, Ordering::Relaxed);
        state.token = Some(CachedToken {
            encoded: encoded.clone(),
            token,
            acl_version: acl.version(),
        });
        Ok(MdsResponse::Renewed(encoded))
    }

    /// Re-checks every capability last checked at an older access-control version; one
    /// that fails is forgotten (never renewed again).
    /// Revocations in force count too: one made at another instance sharing the store
    /// reaches this one's outstanding capabilities here ([`crate::acl_version`]).
    fn recheck(&self, state: &mut State, acl: &AclSnapshot, now: UnixMillis) -> Result<()> {
        let (revoked_ids, revoked_users) = self.revoked_now(now)?;
        let mut perms: HashMap<u64, Option<Perm>> = HashMap::new();
        let mut failed = Vec::new();
        for (id, o) in state.outstanding.iter_mut() {
            if o.checked == acl.version() {
                continue;
            }
            let revoked = revoked_ids.binary_search(id).is_ok()
                || o.users
                    .iter()
                    .any(|u| revoked_users.binary_search(u).is_ok());
            let mut allowed = !revoked;
            for f in o.files.iter() {
                if !allowed {
                    break;
                }
                let perm = match perms.get(f) {
                    Some(p) => *p,
                    None => {
                        let p = self.store.inode(*f)?.map(|i| Perm::from(&i));
                        perms.insert(*f, p);
                        p
                    }
                };
                allowed = perm.is_some_and(|p| o.users.iter().all(|u| acl.permits(*u, p, o.want)));
            }
            if allowed {
                o.checked = acl.version();
            } else {
                failed.push(*id);
            }
        }
        for id in &failed {
            state.outstanding.remove(id);
        }
        state.recount();
        self.issuer
            .renewals
            .forgotten
            .fetch_add(failed.len() as u64, Ordering::Relaxed);
        state.checked_all = Some(acl.version());
        Ok(())
    }
}
