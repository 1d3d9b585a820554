//! Issue 41: the copies a change missed, recorded at the MDS so that the change stands
//! (their OSDs then refuse to serve them until a repair), and what a change does when
//! they cannot be recorded: the copies it skipped on the MDS's report of their OSD down
//! are asked after all, and a change whose missed copies stay unrecorded is not
//! acknowledged.

use super::*;
use crate::copies::classify;
use crate::lanes::SharedRequest;
use maat_proto::limits::{
    MISSED_COPIES_PER_REQUEST_MAX, OSD_DOWN_AFTER_MILLIS, OSD_HEARD_LAG_MILLIS,
};
use maat_proto::msg::MissedCopy;
use machines::{change_outcome, CopyAnswer};

impl Client {
    /// Records the copies `degraded` changes missed, so that they stand. Where the MDS
    /// will not record the copies that changes skipped on its report (unreachable, or
    /// the records would leave too few current copies), those copies are asked after all
    /// (the OSD may be back: a skip must never cost a change its acknowledgement) and
    /// what is still missed is recorded again. A change whose missed copies cannot be
    /// recorded answers a failed copy's answer: it did not reach every copy and is not
    /// acknowledged, as before copies were recorded. (Changes that missed copies they
    /// were sent to are recorded first, on their own: if they cannot be, the batch
    /// fails whatever the skipped copies would say, and they are not asked.)
    pub(crate) fn settle_degraded(
        &self,
        opened: &Opened,
        out: &mut [Result<OsdResponse>],
        degraded: Vec<Degraded>,
    ) -> Result<()> {
        let all = |d: &[Degraded]| d.iter().flat_map(|d| d.missed.clone()).collect();
        let (mut skips, fails): (Vec<Degraded>, Vec<Degraded>) =
            degraded.into_iter().partition(|d| d.unasked.is_some());
        if !fails.is_empty() && self.record_missed(opened.stat.id, all(&fails)).is_err() {
            self.count_skipped(&skips);
            fail(out, fails);
            fail(out, skips);
            return Ok(());
        }
        if skips.is_empty() {
            return Ok(());
        }
        if self.record_missed(opened.stat.id, all(&skips)).is_ok() {
            self.count_skipped(&skips);
            return Ok(());
        }
        // Each change's request moves into its calls (a request held elsewhere too would
        // be copied for each send). A copy asked this late waits as a read that has
        // another copy does: an OSD that is back answers at once, and one still hung
        // costs the change 2 s, not the whole answer timeout (without the late ask the
        // change failed at once).
        let mut calls: Vec<(u64, Arc<SharedRequest>)> = Vec::new();
        for u in skips.iter_mut().filter_map(|d| d.unasked.as_mut()) {
            if let Some(shared) = u.shared.take() {
                let shared =
                    SharedRequest::with_patience(shared, crate::limits::OSD_READ_FAILOVER_TIMEOUT);
                calls.extend(u.osds.iter().map(|osd| (*osd, Arc::clone(&shared))));
            }
        }
        self.stats.lock().skipped_copies_asked_after_all += calls.len() as u64;
        let Ok(answers) = self.parallel_exact(opened, calls) else {
            fail(out, skips);
            return Ok(());
        };
        let mut answers = answers.into_iter();
        let mut took_late = 0u64;
        for d in &mut skips {
            let Some(u) = d.unasked.take() else {
                continue;
            };
            // (Every copy the change was sent to took it: else the skipped ones were
            // asked with the first answers. So the answer that stands is a sent copy's.)
            let sent = u.sent_osds.len();
            let mut kinds = u.kinds;
            let mut late = Vec::with_capacity(u.osds.len());
            for (i, osd) in u.osds.iter().enumerate() {
                let answer = answers.next().unwrap_or_else(|| {
                    Err(ClientError::Internal(
                        "a skipped copy asked, no answer".into(),
                    ))
                });
                self.note_answer(*osd, &answer);
                // A late copy that refuses a change the others took missed it: recorded,
                // so that it never serves the old bytes.
                let kind = match classify(&answer) {
                    CopyAnswer::Refused => CopyAnswer::Failed,
                    kind => kind,
                };
                took_late += u64::from(kind == CopyAnswer::Done);
                if let Some(k) = kinds.get_mut(sent + i) {
                    *k = kind;
                }
                late.push(Some(answer));
            }
            let Some(outcome) = change_outcome(&kinds, 1) else {
                continue;
            };
            let osd_at = |i: &usize| {
                u.sent_osds
                    .get(*i)
                    .or_else(|| i.checked_sub(sent).and_then(|j| u.osds.get(j)))
            };
            d.missed = outcome
                .missed
                .iter()
                .filter_map(osd_at)
                .map(|osd| MissedCopy {
                    stripe: u.object.stripe,
                    osd: *osd,
                    seq: 0,
                })
                .collect();
            if let Some(answer) = outcome
                .missed
                .first()
                .and_then(|i| i.checked_sub(sent))
                .and_then(|i| late.get_mut(i))
                .and_then(Option::take)
            {
                d.instead = answer;
            }
        }
        {
            // (Counted failed when they were skipped.)
            let mut stats = self.stats.lock();
            stats.copies_failed = stats.copies_failed.saturating_sub(took_late);
        }
        // Changes every copy took now stand whatever becomes of the others' records.
        let (missing, _whole): (Vec<Degraded>, Vec<Degraded>) =
            skips.into_iter().partition(|d| !d.missed.is_empty());
        if !missing.is_empty() && self.record_missed(opened.stat.id, all(&missing)).is_err() {
            fail(out, missing);
        }
        Ok(())
    }

    /// Counts the copies `degraded` changes skipped and recorded as missed.
    fn count_skipped(&self, degraded: &[Degraded]) {
        let skipped: usize = degraded
            .iter()
            .filter_map(|d| d.unasked.as_ref())
            .map(|u| u.osds.len())
            .sum();
        self.stats.lock().copies_skipped_down += skipped as u64;
    }

    /// Records at the MDS that `copies` of `file` missed a change that enough other
    /// copies took (issue 41): their OSDs then refuse to serve them until a repair.
    pub(crate) fn record_missed(&self, file: u64, mut copies: Vec<MissedCopy>) -> Result<()> {
        copies.sort_unstable();
        copies.dedup();
        for chunk in copies.chunks(MISSED_COPIES_PER_REQUEST_MAX) {
            let mut answer = self.mds_call(MdsRequest::CopiesMissed {
                file,
                copies: chunk.to_vec(),
            })?;
            // Records an OSD does not know yet: it learns them at its next check-in
            // (every second), or counts as silent within `OSD_DOWN_AFTER_MILLIS` (plus
            // `OSD_HEARD_LAG_MILLIS` with several MDS instances), by when its lease has
            // ended and it checks in before it serves again.
            let mut waited = 0;
            loop {
                match answer {
                    MdsResponse::Ok => break,
                    MdsResponse::MissedCopies(pending)
                        if waited
                            <= OSD_DOWN_AFTER_MILLIS
                                + OSD_HEARD_LAG_MILLIS
                                + RECORD_RETRY_MILLIS =>
                    {
                        self.network.sleep(RECORD_RETRY_MILLIS);
                        waited += RECORD_RETRY_MILLIS;
                        answer = self.mds_call(MdsRequest::MissedCopiesKnown {
                            file,
                            copies: pending,
                        })?;
                    }
                    MdsResponse::MissedCopies(_) => {
                        return Err(ClientError::Internal(
                            "an OSD did not learn in time that its copy missed a change".into(),
                        ))
                    }
                    _ => return Err(self.bad("mds", "unexpected answer")),
                }
            }
            self.stats.lock().copies_recorded_missed += chunk.len() as u64;
        }
        Ok(())
    }
}

/// A change that reached fewer than every copy: it stands once the copies it missed are
/// recorded ([`Client::settle_degraded`]).
pub(crate) struct Degraded {
    /// Where its answer is among the answers of [`Client::parallel`].
    pub(crate) at: usize,
    /// What it answers if the copies it missed cannot be recorded: a missed copy's.
    pub(crate) instead: Result<OsdResponse>,
    /// The copies it missed.
    pub(crate) missed: Vec<MissedCopy>,
    /// The copies it skipped on the MDS's report without asking them, if any.
    pub(crate) unasked: Option<Unasked>,
}

/// Each of `degraded` answers what it answers when the copies it missed are not recorded.
fn fail(out: &mut [Result<OsdResponse>], degraded: Vec<Degraded>) {
    for d in degraded {
        if let Some(slot) = out.get_mut(d.at) {
            *slot = d.instead;
        }
    }
}

/// The copies a change skipped without asking them, and what to ask them after all.
pub(crate) struct Unasked {
    /// Every copy's answer as counted (the skipped ones last, as failed).
    pub(crate) kinds: Vec<CopyAnswer>,
    /// The copies the change was sent to, and the skipped ones.
    pub(crate) sent_osds: Vec<u64>,
    pub(crate) osds: Vec<u64>,
    pub(crate) object: ObjectId,
    /// The change's request, until it is asked of them.
    pub(crate) shared: Option<Arc<SharedRequest>>,
}

/// How long a client waits before it asks again whether OSDs know the copies they
/// missed.
const RECORD_RETRY_MILLIS: u64 = 500;
