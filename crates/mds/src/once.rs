//! Exactly once across MDS instances (issue 42, `MdsRequest::Once`): a change a client
//! retries at another instance, because the one that applied it died before answering,
//! is answered from the answer stored with the change instead of being applied again.
//!
//! The answer is kept in `meta` under `once/USER/ID` (hex), with a digest of the request
//! it answers and the time it was made. It is written in the same store transaction as
//! the change ([`MetaStore::begin_unit`]; on a store one process holds, right after it,
//! see that method), and the check, the change and the write all run under the writer
//! lock, so a second attempt anywhere either finds the answer or finds nothing applied.

use super::*;
use maat_proto::msg::ONCE_ANSWERS_KEPT_MILLIS;
use serde::{Deserialize, Serialize};

/// Every how many `Once` changes an instance deletes the answers older than
/// [`ONCE_ANSWERS_KEPT_MILLIS`] (one scan of the `once/` keys).
pub(crate) const ONCE_CHANGES_PER_SWEEP: u64 = 256;

const PREFIX: &str = "once/";

/// The stored answer to one `Once` change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OnceAnswer {
    /// BLAKE3 of the encoded request it answers.
    pub(crate) request: [u8; 32],
    /// When it was made (the MDS's clock, ms).
    pub(crate) at: u64,
    /// The encoded `MdsResponse`.
    #[serde(with = "serde_bytes")]
    pub(crate) answer: Vec<u8>,
}

/// The `meta` key of user `uid`'s change `id`.
pub(crate) fn once_key(uid: u64, id: &[u8; 16]) -> String {
    format!("{PREFIX}{uid:016x}/{}", hex::encode(id))
}

impl<S: MetaStore> Mds<S> {
    /// `MdsRequest::Once`: `request` applied unless an answer to it under `id` is stored;
    /// then that answer.
    pub(crate) fn once(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        id: &[u8; 16],
        request: MdsRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if !request.once_allowed() {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!(
                    "`{}` cannot be sent as a once-only change (only namespace, attribute, \
                     user, group, partition and key-grant changes can)",
                    request.kind()
                ),
            ));
        }
        let digest = hash::blake3(&[&msg::encode(&request)?]);
        let key = once_key(who.uid, id);
        let _writing = self.writing()?;
        if let Some(stored) = self.store.meta(&key)? {
            let stored = <OnceAnswer as store::Record>::decode(&stored)?;
            if stored.request != digest {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    "this once-only change id was used for another request",
                ));
            }
            self.stats
                .once_answered_again
                .fetch_add(1, Ordering::Relaxed);
            return Ok(msg::decode(&stored.answer)?);
        }
        self.store.begin_unit()?;
        let result = self.dispatch(who, session, request, now, rng);
        let mut last = Batch::default();
        if let Ok(answer) = &result {
            let record = OnceAnswer {
                request: digest,
                at: now.0,
                answer: msg::encode(answer)?,
            };
            last.push(Op::PutMeta(key, store::Record::encode(&record)?));
            let n = self.stats.once_applied.fetch_add(1, Ordering::Relaxed);
            if n % ONCE_CHANGES_PER_SWEEP == 0 {
                self.sweep_once_answers(now, &mut last)?;
            }
        }
        // A failed change keeps what it committed before failing, as outside a unit; its
        // error is not stored (nothing answered, a retry decides again).
        self.store.end_unit(last)?;
        result
    }

    /// Adds to `batch` the deletion of every stored answer older than the time kept.
    fn sweep_once_answers(&self, now: UnixMillis, batch: &mut Batch) -> Result<()> {
        let before = now.0.saturating_sub(ONCE_ANSWERS_KEPT_MILLIS);
        for (key, bytes) in self.store.metas(PREFIX)? {
            // An answer that does not decode is dropped with the old ones.
            let old = <OnceAnswer as store::Record>::decode(&bytes).map_or(true, |a| a.at < before);
            if old {
                batch.push(Op::DeleteMeta(key));
            }
        }
        Ok(())
    }
}
