//! SPEC M9 at a KDS: a revoked capability or user gets no key, at once, not only once
//! its capability expires. The KDS keeps no state, so it learns the notices in force
//! from the MDS: it asks for them (a request signed by the KDS key, answered by a list
//! the MDS signs over the request's nonce) before it hands out any key after a start,
//! and then periodically; the MDS also pushes each new notice (`KdsRequest::Revoke`).
//! The I/O is the daemon shell's; this is the logic of both ends of it.

use super::*;
use maat_crypto::sign::Signature;
use maat_proto::msg::{MdsPlainRequest, MdsPlainResponse};
use maat_proto::revocation::{kds_revocations_message, kds_revocations_request_message};

/// A catch-up request made by [`Kds::revocations_request`], kept to check its answer.
pub struct RevocationsAsk {
    nonce: [u8; 16],
    /// The `MdsPlainRequest::KdsRevocations` payload to send to the MDS (a Plain frame).
    pub payload: Vec<u8>,
}

impl Kds {
    /// SPEC M9: applies one MDS-signed notice (pushed by the MDS).
    pub fn apply_revocation(&self, notice: &[u8], now: UnixMillis) -> Result<(), WireError> {
        self.revoked.apply_signed(notice, &self.mds_key, now)?;
        self.stats
            .revocations_applied
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// SPEC M9: a request to the MDS for every notice in force, signed by this KDS.
    pub fn revocations_request(
        &self,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<RevocationsAsk, WireError> {
        let mut nonce = [0u8; 16];
        rng.fill_bytes(&mut nonce);
        let signature = self
            .background_signing
            .sign(&kds_revocations_request_message(&nonce, now));
        let payload = msg::encode(&MdsPlainRequest::KdsRevocations {
            nonce,
            timestamp: now.0,
            signature: signature.0.to_vec(),
        })?;
        Ok(RevocationsAsk { nonce, payload })
    }

    /// SPEC M9: takes the MDS's answer to `ask` (the raw answer payload): the list must
    /// carry the MDS's signature over `ask`'s nonce and every notice, and every notice
    /// its own. Then keys are handed out, refused for what the list names. Returns how
    /// many notices the MDS has in force.
    pub fn accept_revocations(
        &self,
        ask: &RevocationsAsk,
        answer: &[u8],
        now: UnixMillis,
    ) -> Result<usize, WireError> {
        let answer: Result<MdsPlainResponse, WireError> = msg::decode(answer)?;
        let MdsPlainResponse::KdsRevocations { notices, signature } = answer? else {
            return Err(refuse(
                ErrorCode::Malformed,
                "the MDS answered a revocations request with something else",
            ));
        };
        let signature = <[u8; 64]>::try_from(signature.as_slice())
            .map(Signature)
            .map_err(|_| refuse(ErrorCode::Malformed, "a signature is 64 bytes"))?;
        self.background_mds_key
            .verify(&kds_revocations_message(&ask.nonce, &notices), &signature)
            .map_err(|_| {
                refuse(
                    ErrorCode::BadSignature,
                    "the list of revocations is not the MDS's answer to this request",
                )
            })?;
        self.revoked
            .sync_signed(&notices, &self.background_mds_key, now)?;
        self.stats.revocation_checks.fetch_add(1, Ordering::Relaxed);
        Ok(notices.len())
    }

    /// Hands out keys without learning revocations from an MDS: for a KDS whose config
    /// names no MDS address (from before SPEC M9 reached the KDS; the daemon says so at
    /// start), and for tests of other properties. Capabilities then end at expiry only.
    pub fn serve_without_revocations(&self, now: UnixMillis) -> Result<(), WireError> {
        self.revocations_checked.store(false, Ordering::SeqCst);
        Ok(self.revoked.sync_signed(&[], &self.mds_key, now)?)
    }

    /// Refuses (`NotReady`) while this KDS has not learned the revocations in force since
    /// it started, or not for [`REVOCATIONS_STALE_MILLIS`] (the MDS unreachable, or its
    /// answers dropped on the way).
    pub(crate) fn revocations_current(&self, now: UnixMillis) -> Result<(), WireError> {
        let Some(at) = self.revoked.synced_at() else {
            return Err(refuse(
                ErrorCode::NotReady,
                "this KDS has not yet learned the revocations in force from the MDS",
            ));
        };
        let age = now.0.saturating_sub(at.0);
        if self.revocations_checked.load(Ordering::SeqCst) && age > REVOCATIONS_STALE_MILLIS {
            return Err(refuse(
                ErrorCode::NotReady,
                format!(
                    "this KDS last learned the revocations in force {} s ago (it must within \
                     {} s): is the MDS reachable from it?",
                    age / 1000,
                    REVOCATIONS_STALE_MILLIS / 1000
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use maat_proto::revocation::RevocationNotice;
    use maat_proto::{CapabilityId, UserId};

    const NOW: UnixMillis = UnixMillis(1_800_000_000_000);

    fn refusal(kds: &Kds, request: &KdsRequest) -> Option<ErrorCode> {
        let answer = kds.handle(&msg::encode(request).unwrap(), NOW, &mut maat_crypto::OsRng);
        msg::decode::<Result<KdsResponse, WireError>>(&answer)
            .unwrap()
            .err()
            .map(|e| e.code)
    }

    fn notice(by: &SigningKey) -> Vec<u8> {
        let body = RevocationNotice {
            notice_id: 1,
            start: UnixMillis(NOW.0 - 1_000),
            expiry: UnixMillis(NOW.0 + 60_000),
            capability_ids: vec![CapabilityId(7)],
            users: vec![UserId(1000)],
            computation_keys: vec![],
        };
        signed::sign(body, by).encoded().to_vec()
    }

    /// An MDS signing key and a fresh KDS that trusts it.
    fn mds_and_kds() -> (SigningKey, Kds) {
        let mds = SigningKey::from_seed(&[9; 32]);
        let kds = Kds::new(
            KdsSecrets::from_seed(&[7; 32]).unwrap(),
            &mds.verifying_key().to_bytes(),
        )
        .unwrap();
        (mds, kds)
    }

    #[test]
    fn no_key_before_the_revocations_are_learned_and_only_the_mds_s_notices_count() {
        let (mds, kds) = mds_and_kds();
        let keys = KdsRequest::Keys {
            ticket: vec![1, 2, 3],
            files: vec![FileKeysRequest {
                capability: vec![4],
                lockbox: vec![5],
                trees: vec![],
                nodes: vec![(0, 0)],
                key_ranges: None,
            }],
        };
        assert_eq!(refusal(&kds, &keys), Some(ErrorCode::NotReady));
        kds.serve_without_revocations(NOW).unwrap();
        // Now the request is looked at: its ticket is garbage.
        assert_eq!(refusal(&kds, &keys), Some(ErrorCode::Malformed));

        // A notice signed by anyone but the MDS is refused and changes nothing; the
        // MDS's is applied, once.
        let forged = KdsRequest::Revoke(notice(&SigningKey::from_seed(&[4; 32])));
        assert_eq!(refusal(&kds, &forged), Some(ErrorCode::BadSignature));
        assert_eq!(kds.revoked.entries(), 0);
        let genuine = KdsRequest::Revoke(notice(&mds));
        assert_eq!(refusal(&kds, &genuine), None);
        assert_eq!(refusal(&kds, &genuine), None);
        assert_eq!(kds.revoked.entries(), 2);
        // (This KDS was told to serve without catch-ups: it never goes stale.)
        let later = UnixMillis(NOW.0 + 3_600_000);
        assert!(kds.revocations_current(later).is_ok());
        assert_eq!(
            kds.revoked
                .check(CapabilityId(7), UserId(1), None, NOW)
                .unwrap_err()
                .code,
            ErrorCode::Revoked
        );
        assert_eq!(
            kds.revoked
                .check(CapabilityId(8), UserId(1000), None, NOW)
                .unwrap_err()
                .code,
            ErrorCode::Revoked
        );
        assert!(kds
            .revoked
            .check(CapabilityId(8), UserId(1), None, NOW)
            .is_ok());
    }

    #[test]
    fn a_kds_whose_catch_ups_stop_refuses_keys_until_the_next_one() {
        let (mds, kds) = mds_and_kds();
        let t0 = NOW;
        let answer = |ask: &RevocationsAsk| {
            let MdsPlainRequest::KdsRevocations { nonce, .. } = msg::decode(&ask.payload).unwrap()
            else {
                panic!("not a revocations request")
            };
            let notices: Vec<Vec<u8>> = Vec::new();
            let signature = mds
                .sign(&kds_revocations_message(&nonce, &notices))
                .0
                .to_vec();
            msg::encode_result(&Ok::<_, WireError>(MdsPlainResponse::KdsRevocations {
                notices,
                signature,
            }))
        };
        let code = |at: u64| {
            kds.revocations_current(UnixMillis(t0.0 + at))
                .err()
                .map(|e| e.code)
        };
        assert_eq!(code(0), Some(ErrorCode::NotReady));
        let ask = kds
            .revocations_request(t0, &mut maat_crypto::OsRng)
            .unwrap();
        kds.accept_revocations(&ask, &answer(&ask), t0).unwrap();
        assert_eq!(code(0), None);
        assert_eq!(code(REVOCATIONS_STALE_MILLIS), None);
        assert_eq!(
            code(REVOCATIONS_STALE_MILLIS + 1),
            Some(ErrorCode::NotReady)
        );
        let later = UnixMillis(t0.0 + 60_000);
        let ask = kds
            .revocations_request(later, &mut maat_crypto::OsRng)
            .unwrap();
        kds.accept_revocations(&ask, &answer(&ask), later).unwrap();
        assert_eq!(code(60_000), None);

        // The catch-ups' signatures (two asked, two lists checked) are in the KDS's
        // counters, named as background work, and no request caused them.
        let stats = kds.stats();
        let get = |name: &str| stats.counter(name);
        assert_eq!(get("signatures_made"), Some(2));
        assert_eq!(get("signatures_made_background"), Some(2));
        assert_eq!(get("signatures_verified"), Some(2));
        assert_eq!(get("signatures_verified_background"), Some(2));
        let share =
            |name| msg::DaemonStats::request_share(std::slice::from_ref(&stats), "kds", name);
        assert_eq!(share("signatures_made"), 0);
        assert_eq!(share("signatures_verified"), 0);
    }
}
