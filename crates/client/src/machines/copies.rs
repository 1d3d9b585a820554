//! Issue 41: one object request over the copies of the object. A change (write, remove,
//! attributes) goes to every copy and stands if every copy took it, or if at least
//! `durable_min` did and the others are recorded as missed (the driver asks for one and
//! leaves the partition's min_size to the MDS, which refuses records that leave fewer
//! current copies); a read goes to
//! the first copy and fails over, copy by copy, while the answers say another copy may
//! do better (missing, damaged, unreachable), never when they say the request itself is
//! refused (a permission, a capability), which every copy would say alike.
//!
//! The driver classifies each copy's answer as a [`CopyAnswer`], and these functions say
//! which copy to ask next and which answer stands for the request.

/// How one copy's answer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyAnswer {
    /// Served.
    Done,
    /// The copy does not hold the object (never written there, or its disk was lost).
    Missing,
    /// The copy could not serve: unreachable, damaged, a bad or undecodable answer.
    Failed,
    /// Refused for a reason every copy shares (permissions, capability, arguments).
    Refused,
    /// The copy missed a change and is not served (issue 41, `CopyStale`): another copy
    /// holds the object as it is, or (when the others lack it) nobody does.
    Stale,
}

/// What every copy's answers to a change come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChangeOutcome {
    /// Which answer stands for the change.
    pub(crate) stands: usize,
    /// The copies (by answer index) that failed while enough others took the change:
    /// the change stands only once the MDS has recorded them as missed; if it cannot,
    /// the first of them stands instead.
    pub(crate) missed: Vec<usize>,
}

/// Which of every copy's answers to a change stands for it, when `durable_min` copies
/// must take it: a refusal when there is one (every
/// copy would say so); else, when at least `durable_min` copies took it, the first copy
/// that did, with the copies that failed to record as missed; else the first failure;
/// else (every copy lacked the object) the first. `None` for no answers.
pub(crate) fn change_outcome(answers: &[CopyAnswer], durable_min: usize) -> Option<ChangeOutcome> {
    if answers.is_empty() {
        return None;
    }
    let stands = |stands| {
        Some(ChangeOutcome {
            stands,
            missed: Vec::new(),
        })
    };
    if let Some(refused) = answers.iter().position(|a| *a == CopyAnswer::Refused) {
        return stands(refused);
    }
    // (A change is never refused as stale; were it, it would count as failed.)
    let failed: Vec<usize> = (0..answers.len())
        .filter(|i| {
            matches!(
                answers.get(*i),
                Some(CopyAnswer::Failed | CopyAnswer::Stale)
            )
        })
        .collect();
    let done = answers.iter().filter(|a| **a == CopyAnswer::Done).count();
    let first_done = answers.iter().position(|a| *a == CopyAnswer::Done);
    match (failed.first(), first_done) {
        (None, Some(d)) => stands(d),
        (None, None) => stands(0),
        (Some(_), Some(d)) if done >= durable_min => Some(ChangeOutcome {
            stands: d,
            missed: failed,
        }),
        (Some(f), _) => stands(*f),
    }
}

/// What a look at every copy of a stripe past a file's end finds (a put or truncation
/// removes such stripes: they exist only where a write failed after storing some).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PastEnd {
    /// A copy holds it: it must go.
    Held,
    /// Every copy answered that it holds none (or that it missed a change already, so it
    /// serves none): nothing to remove.
    Absent,
    /// No copy that answered holds it, but some did not answer, or were not asked (their
    /// OSD reported down): those might. Removed all the same, as a change, so that a copy
    /// that cannot take the removal is recorded as missed and never serves what it holds.
    Unanswered,
}

/// What the answers of the copies asked about a stripe past a file's end come to, with
/// `unasked` copies not asked. A refusal is the caller's (every copy would give it).
pub(crate) fn past_end(answers: &[CopyAnswer], unasked: usize) -> PastEnd {
    if answers.contains(&CopyAnswer::Done) {
        return PastEnd::Held;
    }
    // (A stale copy is refused to every read until a repair: as good as absent.)
    let silent = answers.contains(&CopyAnswer::Failed);
    match silent || unasked > 0 || answers.is_empty() {
        true => PastEnd::Unanswered,
        false => PastEnd::Absent,
    }
}

/// What a read over copies does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadStep {
    /// Ask this copy (an OSD id).
    Ask(u64),
    /// Stop: the answer of the `n`-th copy asked (from 0) stands.
    Stand(usize),
}

/// A read of one object over its copies, first copy first.
#[derive(Debug, Clone)]
pub(crate) struct ReadOverCopies {
    copies: Vec<u64>,
    /// Answers so far, one per copy asked, in order.
    answers: Vec<CopyAnswer>,
    /// A look at a stripe past the file's size as read at open ([`ReadOverCopies::past_end`]).
    past_end: bool,
}

impl ReadOverCopies {
    /// A read of an object held by `copies` (OSD ids, first copy first).
    pub(crate) fn new(copies: Vec<u64>) -> Self {
        ReadOverCopies {
            copies,
            answers: Vec::new(),
            past_end: false,
        }
    }

    /// A read of the stripe right past a file's size as read at open (whole stripes:
    /// the file may have grown since). There, a copy that says it holds nothing stands
    /// over copies that did not answer: a stripe written since stands on every current
    /// copy (the others recorded as missed, and refused `CopyStale`), so a current copy
    /// without it shows that no write of it stood. (Inside the size the failure stands,
    /// since a lost disk also says "missing".) Before, a copy of that stripe on a hung
    /// OSD failed every read of a file of whole stripes.
    pub(crate) fn past_end(copies: Vec<u64>) -> Self {
        ReadOverCopies {
            past_end: true,
            ..Self::new(copies)
        }
    }

    /// The copy asked first.
    pub(crate) fn first(&self) -> Option<u64> {
        self.copies.first().copied()
    }

    /// Whether another copy is left to ask after the one asked now (the first before
    /// any answer, else the one [`ReadOverCopies::answer`] last named).
    pub(crate) fn more_after_this(&self) -> bool {
        self.copies.len() > self.answers.len() + 1
    }

    /// Whether the answer of the copy asked now cannot change what stands: past the
    /// end, once a copy said it holds nothing, only a copy that serves the stripe can.
    /// Such a copy is not asked at all when its OSD is reported down (it serves nothing
    /// it was not told), else waited for as briefly as one that is not the last.
    pub(crate) fn absent_already(&self) -> bool {
        self.past_end && self.answers.contains(&CopyAnswer::Missing)
    }

    /// Whether a read waits less for the copy asked now: another copy is left after it,
    /// or [`ReadOverCopies::absent_already`].
    pub(crate) fn brief(&self) -> bool {
        self.more_after_this() || self.absent_already()
    }

    /// After the answer of the copy last asked: the next copy to ask, or which answer
    /// stands. A served read or a refusal stands at once; after a missing, failed or
    /// stale copy the next is asked; when none is left, the first failure stands
    /// (another copy might have held the object), else the last "missing" (no current
    /// copy holds it: a stale copy's bytes are never the answer), else the first stale.
    /// Past the end, the last "missing" stands before any failure.
    pub(crate) fn answer(&mut self, answer: CopyAnswer) -> ReadStep {
        self.answers.push(answer);
        let n = self.answers.len() - 1;
        if matches!(answer, CopyAnswer::Done | CopyAnswer::Refused) {
            return ReadStep::Stand(n);
        }
        if let Some(next) = self.copies.get(self.answers.len()) {
            return ReadStep::Ask(*next);
        }
        let first = |kind: CopyAnswer| self.answers.iter().position(|a| *a == kind);
        let last_missing = self.answers.iter().rposition(|a| *a == CopyAnswer::Missing);
        let stands = match self.past_end {
            true => last_missing.or(first(CopyAnswer::Failed)),
            false => first(CopyAnswer::Failed).or(last_missing),
        };
        ReadStep::Stand(stands.or(first(CopyAnswer::Stale)).unwrap_or(n))
    }
}

/// How long an OSD that failed to answer is asked last by reads that have another copy
/// to ask (protocol milliseconds).
pub(crate) const SUSPECT_MILLIS: u64 = 30_000;

/// Most OSDs remembered as suspect (the oldest goes first).
const SUSPECTS_MAX: usize = 1024;

/// How long the MDS's word that an OSD is down holds for a change: within it, a change
/// does not wait for that OSD's copy (it is recorded as missed at once); past it, the
/// client asks the MDS again before it skips the copy (protocol milliseconds; the time
/// the MDS takes to count a silent OSD down, `OSD_DOWN_AFTER_MILLIS`).
pub(crate) const DOWN_REPORT_MILLIS: u64 = maat_proto::limits::OSD_DOWN_AFTER_MILLIS;

/// What a client knows of an OSD before it sends a change to its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Not reported down: send.
    Serving,
    /// Reported down by the MDS within [`DOWN_REPORT_MILLIS`]: the copy is recorded as
    /// missed without waiting for the OSD.
    Down,
    /// Reported down, but longer ago: ask the MDS again first.
    ReportStale,
    /// Reported down by the MDS within [`DOWN_REPORT_MILLIS`], but this client has not
    /// seen it hang: ask it something small first, waiting less than for a change (a
    /// client's first change after an OSD hung would otherwise wait its whole answer
    /// timeout to see that for itself).
    Unproven,
}

/// OSDs that recently failed to answer (unreachable, hung, refusing as damaged), and
/// until when reads ask them last: a client that met a hung OSD once does not wait for it
/// again on every read while another copy serves. Also the OSDs the MDS last reported
/// down, and when: a change skips their copies while the report is fresh (a hung OSD
/// would otherwise hold every change to its objects for the client's whole answer
/// timeout, each time).
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    /// OSD id → until when it is suspect.
    until: std::collections::BTreeMap<u64, u64>,
    /// The OSDs the MDS reported down at its last report, and when that was.
    down: std::collections::BTreeSet<u64>,
    down_reported: Option<u64>,
    /// OSD id → when a request to it last went unanswered until this client's timeout
    /// (hung, not merely refusing: a refused connection costs nothing to try).
    hung: std::collections::BTreeMap<u64, u64>,
    /// OSD id → when a probe ([`Liveness::Unproven`]) last found it answering or
    /// refusing connections (not hung): changes are sent to it, whatever a report older
    /// than that says.
    probed: std::collections::BTreeMap<u64, u64>,
}

impl Suspects {
    /// `osd` failed to answer at `now`.
    pub(crate) fn failed(&mut self, osd: u64, now: u64) {
        if self.until.len() >= SUSPECTS_MAX && !self.until.contains_key(&osd) {
            if let Some((&oldest, _)) = self.until.iter().min_by_key(|(_, until)| **until) {
                self.until.remove(&oldest);
            }
        }
        self.until.insert(osd, now.saturating_add(SUSPECT_MILLIS));
    }

    /// A request to `osd` went unanswered until the client's timeout at `now`: suspect,
    /// and hung as far as this client has seen.
    pub(crate) fn timed_out(&mut self, osd: u64, now: u64) {
        self.failed(osd, now);
        if self.hung.len() >= SUSPECTS_MAX && !self.hung.contains_key(&osd) {
            if let Some((&oldest, _)) = self.hung.iter().min_by_key(|(_, at)| **at) {
                self.hung.remove(&oldest);
            }
        }
        self.hung.insert(osd, now);
    }

    /// `osd` answered: no longer suspect (nor down or hung, until shown again).
    pub(crate) fn served(&mut self, osd: u64) {
        self.until.remove(&osd);
        self.down.remove(&osd);
        self.hung.remove(&osd);
    }

    /// A probe of `osd` at `now` did not hang (it answered, `served`, or its connection
    /// failed at once): changes are sent to it until the MDS reports it down again
    /// after that ([`Liveness::Unproven`]).
    pub(crate) fn probed(&mut self, osd: u64, now: u64, served: bool) {
        if served {
            self.served(osd);
        } else {
            self.failed(osd, now);
        }
        if self.probed.len() >= SUSPECTS_MAX && !self.probed.contains_key(&osd) {
            if let Some((&oldest, _)) = self.probed.iter().min_by_key(|(_, at)| **at) {
                self.probed.remove(&oldest);
            }
        }
        self.probed.insert(osd, now);
    }

    /// The MDS reported at `now` which OSDs are down (every other OSD is not): each is
    /// suspect from now on, and changes skip their copies while the report is fresh.
    pub(crate) fn reported_down(&mut self, down: impl IntoIterator<Item = u64>, now: u64) {
        self.down = down.into_iter().collect();
        let down: Vec<u64> = self.down.iter().copied().collect();
        for osd in down {
            self.failed(osd, now);
        }
        self.down_reported = Some(now);
    }

    /// Whether the MDS's last report was made at `since` or later and shows `osd` down.
    pub(crate) fn reported_down_since(&self, osd: u64, since: u64) -> bool {
        self.down_reported.is_some_and(|at| at >= since) && self.down.contains(&osd)
    }

    /// Whether a change sent at `now` skips `osd`'s copy ([`Liveness`]): only an OSD
    /// this client saw hang within [`SUSPECT_MILLIS`] and the MDS reports down. (An OSD
    /// that refuses connections costs a change nothing to try; and one that the MDS
    /// alone reports down may be back, or only late to check in with this instance:
    /// [`Liveness::Unproven`] until this client has seen it hang.)
    pub(crate) fn liveness(&self, osd: u64, now: u64) -> Liveness {
        let hung = self
            .hung
            .get(&osd)
            .is_some_and(|at| now.saturating_sub(*at) < SUSPECT_MILLIS);
        match self.down_reported {
            Some(at) if self.down.contains(&osd) => {
                let fresh = now.saturating_sub(at) < DOWN_REPORT_MILLIS;
                let probed_since = self.probed.get(&osd).is_some_and(|t| *t >= at);
                match (hung, fresh) {
                    (true, true) => Liveness::Down,
                    (true, false) => Liveness::ReportStale,
                    (false, true) if !probed_since => Liveness::Unproven,
                    (false, _) => Liveness::Serving,
                }
            }
            _ => Liveness::Serving,
        }
    }

    /// `copies` (in placement order) in the order a read asks them at `now`: those not
    /// suspect first, each group starting at the copy `spread` picks and going on in
    /// placement order after it. `spread` is [`spread`] of the client and the object, so
    /// that one client asks one copy of an object first (its reads of the object stay in
    /// order, and that copy's cache serves them) while clients and objects spread over
    /// every copy.
    pub(crate) fn order(&self, mut copies: Vec<u64>, now: u64, spread: u64) -> Vec<u64> {
        if let Some(n) = u64::try_from(copies.len()).ok().filter(|n| *n > 0) {
            copies.rotate_left(usize::try_from(spread % n).unwrap_or(0));
        }
        let suspect = |osd: &u64| self.until.get(osd).is_some_and(|until| *until > now);
        let (mut fine, doubtful): (Vec<u64>, Vec<u64>) =
            copies.into_iter().partition(|o| !suspect(o));
        fine.extend(doubtful);
        fine
    }
}

/// Which copy of stripe `stripe` of file `file` a client whose reads spread by
/// `client` asks first: a mix of the three (SplitMix64's finaliser; nothing secret rests
/// on it, it only has to scatter), taken modulo the copies by [`Suspects::order`].
pub(crate) fn spread(client: u64, file: u64, stripe: u32) -> u64 {
    let mut z =
        client ^ file.rotate_left(32) ^ u64::from(stripe).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::CopyAnswer::{Done, Failed, Missing, Refused, Stale};
    use super::*;

    #[test]
    fn a_change_skips_an_osd_only_while_the_mds_report_of_it_down_is_fresh() {
        let mut s = Suspects::default();
        assert_eq!(s.liveness(2, 0), Liveness::Serving);
        s.reported_down([2], 1_000);
        // Reported down, but never seen hung by this client: probed first, and tried
        // once the report is old.
        assert_eq!(s.liveness(2, 1_000), Liveness::Unproven);
        assert_eq!(s.liveness(2, 1_000 + DOWN_REPORT_MILLIS), Liveness::Serving);
        s.timed_out(2, 900);
        assert_eq!(s.liveness(2, 1_000), Liveness::Down);
        // Seen hung long ago: tried again.
        assert_eq!(s.liveness(2, 900 + SUSPECT_MILLIS), Liveness::Serving);
        assert_eq!(s.liveness(3, 1_000), Liveness::Serving);
        assert_eq!(
            s.liveness(2, 1_000 + DOWN_REPORT_MILLIS - 1),
            Liveness::Down
        );
        assert_eq!(
            s.liveness(2, 1_000 + DOWN_REPORT_MILLIS),
            Liveness::ReportStale
        );
        // Reported down, it is also asked last by reads.
        assert_eq!(s.order(vec![2, 3], 1_000, 0), vec![3, 2]);
        // A later report without it, or an answer from it, ends it.
        s.reported_down([], 2_000);
        assert_eq!(s.liveness(2, 2_000), Liveness::Serving);
        s.reported_down([2], 3_000);
        assert_eq!(s.liveness(2, 3_000), Liveness::Down);
        s.served(2);
        assert_eq!(s.liveness(2, 3_000), Liveness::Serving);
        // A probe that did not hang (here: its connection refused) holds until a later
        // report names it again.
        s.reported_down([2], 4_000);
        s.probed(2, 4_100, false);
        assert_eq!(s.liveness(2, 4_200), Liveness::Serving);
        s.reported_down([2], 5_000);
        assert_eq!(s.liveness(2, 5_000), Liveness::Unproven);
    }

    #[test]
    fn a_change_stands_when_enough_copies_took_it_and_the_others_are_recorded() {
        let stands = |answers: &[CopyAnswer], min| change_outcome(answers, min).map(|o| o.stands);
        let missed = |answers: &[CopyAnswer], min| {
            change_outcome(answers, min)
                .map(|o| o.missed)
                .unwrap_or_default()
        };
        assert_eq!(stands(&[Done, Done, Done], 2), Some(0));
        assert!(missed(&[Done, Done, Done], 2).is_empty());
        // One copy down of three, two needed: done, the down copy to record.
        assert_eq!(stands(&[Failed, Done, Done], 2), Some(1));
        assert_eq!(missed(&[Failed, Done, Done], 2), vec![0]);
        // Two down: fewer than two took it; the failure stands.
        assert_eq!(stands(&[Done, Failed, Failed], 2), Some(1));
        assert!(missed(&[Done, Failed, Failed], 2).is_empty());
        // Every copy needed (as with two copies of two): the failure stands.
        assert_eq!(stands(&[Done, Failed, Done], 3), Some(1));
        // A refusal stands, whatever took it.
        assert_eq!(stands(&[Done, Done, Refused], 2), Some(2));
        assert_eq!(stands(&[Failed, Done, Refused], 2), Some(2));
        // A removal that found the object on some copies only: done.
        assert_eq!(stands(&[Missing, Done, Missing], 2), Some(1));
        // Nowhere: the object is missing.
        assert_eq!(stands(&[Missing, Missing], 2), Some(0));
        assert_eq!(stands(&[Missing, Failed], 2), Some(1));
        assert_eq!(change_outcome(&[], 2), None);
    }

    #[test]
    fn a_stripe_past_the_end_is_taken_as_absent_only_when_every_copy_says_so() {
        assert_eq!(past_end(&[Missing, Missing, Missing], 0), PastEnd::Absent);
        assert_eq!(past_end(&[Missing, Stale, Missing], 0), PastEnd::Absent);
        assert_eq!(past_end(&[Missing, Done, Failed], 0), PastEnd::Held);
        // A hung copy might hold what the others lack.
        assert_eq!(
            past_end(&[Missing, Missing, Failed], 0),
            PastEnd::Unanswered
        );
        assert_eq!(past_end(&[Missing, Missing], 1), PastEnd::Unanswered);
        assert_eq!(past_end(&[], 0), PastEnd::Unanswered);
    }

    #[test]
    fn past_the_end_a_copy_that_holds_nothing_stands_over_one_that_did_not_answer() {
        let mut r = ReadOverCopies::past_end(vec![4, 2, 7]);
        assert!(r.brief() && !r.absent_already());
        assert_eq!(r.answer(Failed), ReadStep::Ask(2));
        assert!(!r.absent_already());
        assert_eq!(r.answer(Missing), ReadStep::Ask(7));
        assert!(r.absent_already() && r.brief());
        assert_eq!(r.answer(Failed), ReadStep::Stand(1));
        // A copy that serves it still stands first.
        let mut r = ReadOverCopies::past_end(vec![4, 2, 7]);
        assert_eq!(r.answer(Missing), ReadStep::Ask(2));
        assert_eq!(r.answer(Failed), ReadStep::Ask(7));
        assert_eq!(r.answer(Done), ReadStep::Stand(2));
        // No copy said "missing": the failure stands, and the last copy is waited for.
        let mut r = ReadOverCopies::past_end(vec![4, 2]);
        assert_eq!(r.answer(Failed), ReadStep::Ask(2));
        assert!(!r.brief());
        assert_eq!(r.answer(Stale), ReadStep::Stand(0));
        // Inside the size, the failure stands over "missing" (a lost disk says so too).
        let mut r = ReadOverCopies::new(vec![4, 2]);
        assert_eq!(r.answer(Missing), ReadStep::Ask(2));
        assert!(!r.brief());
        assert_eq!(r.answer(Failed), ReadStep::Stand(1));
    }

    #[test]
    fn a_read_fails_over_past_missing_and_failed_copies_but_not_past_a_refusal() {
        let mut r = ReadOverCopies::new(vec![4, 2, 7]);
        assert_eq!(r.answer(Failed), ReadStep::Ask(2));
        assert_eq!(r.answer(Missing), ReadStep::Ask(7));
        assert_eq!(r.answer(Done), ReadStep::Stand(2));

        let mut r = ReadOverCopies::new(vec![4, 2, 7]);
        assert_eq!(r.answer(Done), ReadStep::Stand(0));

        // A refusal is the same on every copy: it stands.
        let mut r = ReadOverCopies::new(vec![4, 2, 7]);
        assert_eq!(r.answer(Refused), ReadStep::Stand(0));

        // Missing everywhere: really missing (the last answer stands).
        let mut r = ReadOverCopies::new(vec![4, 2]);
        assert_eq!(r.answer(Missing), ReadStep::Ask(2));
        assert_eq!(r.answer(Missing), ReadStep::Stand(1));

        // Missing on one, unreachable on the other: the failure stands, as the
        // unreachable copy may hold it.
        let mut r = ReadOverCopies::new(vec![4, 2]);
        assert_eq!(r.answer(Missing), ReadStep::Ask(2));
        assert_eq!(r.answer(Failed), ReadStep::Stand(1));

        // A stale copy is never the answer: past it, the next copy serves; when the
        // others lack the object, it is missing (found by the simulator: a file cut to
        // nothing read "copy stale" from the one copy that missed the cut).
        let mut r = ReadOverCopies::new(vec![4, 2, 7]);
        assert_eq!(r.answer(Stale), ReadStep::Ask(2));
        assert_eq!(r.answer(Done), ReadStep::Stand(1));
        let mut r = ReadOverCopies::new(vec![4, 2, 7]);
        assert_eq!(r.answer(Missing), ReadStep::Ask(2));
        assert_eq!(r.answer(Stale), ReadStep::Ask(7));
        assert_eq!(r.answer(Missing), ReadStep::Stand(2));
        let mut r = ReadOverCopies::new(vec![4, 2]);
        assert_eq!(r.answer(Stale), ReadStep::Ask(2));
        assert_eq!(r.answer(Failed), ReadStep::Stand(1));
        let mut r = ReadOverCopies::new(vec![4, 2]);
        assert_eq!(r.answer(Stale), ReadStep::Ask(2));
        assert_eq!(r.answer(Stale), ReadStep::Stand(0));
        // A change no copy took as stale counts it failed.
        assert_eq!(
            change_outcome(&[Stale, Done, Done], 2).map(|o| o.missed),
            Some(vec![0])
        );

        // One copy: as before replication.
        let mut r = ReadOverCopies::new(vec![9]);
        assert_eq!(r.answer(Failed), ReadStep::Stand(0));
        // No copy at all (no OSD): the answer given stands.
        let mut r = ReadOverCopies::new(Vec::new());
        assert_eq!(r.answer(Failed), ReadStep::Stand(0));
    }

    #[test]
    fn reads_start_at_the_copy_the_spread_picks_and_spread_over_every_copy() {
        let mut s = Suspects::default();
        // The spread picks the first copy to ask; placement order follows it.
        assert_eq!(s.order(vec![4, 2, 7], 0, 1), vec![2, 7, 4]);
        assert_eq!(s.order(vec![4, 2, 7], 0, 5), vec![7, 4, 2]);
        // A suspect copy is still asked last, wherever the spread started.
        s.failed(2, 0);
        assert_eq!(s.order(vec![4, 2, 7], 1, 1), vec![7, 4, 2]);
        assert_eq!(s.order(vec![4, 2, 7], 1, 0), vec![4, 7, 2]);
        // One client asks one copy of an object first, every time.
        assert_eq!(spread(11, 42, 3), spread(11, 42, 3));
        // Over objects, and over clients for one object, every copy comes first about
        // as often as the others.
        let firsts = |spreads: &mut dyn Iterator<Item = u64>| {
            let mut n = [0u32; 3];
            for x in spreads {
                if let Some(c) = n.get_mut((x % 3) as usize) {
                    *c += 1;
                }
            }
            n
        };
        for n in [
            firsts(&mut (0..3_000u64).map(|f| spread(11, f, 0))),
            firsts(&mut (0..3_000u32).map(|stripe| spread(11, 42, stripe))),
            firsts(&mut (0..3_000u64).map(|client| spread(client, 42, 0))),
        ] {
            assert!(n.iter().all(|c| (900..=1_100).contains(c)), "{n:?}");
        }
    }

    #[test]
    fn a_copy_that_failed_is_asked_last_until_its_time_is_up_or_it_serves() {
        let mut s = Suspects::default();
        assert_eq!(s.order(vec![4, 2, 7], 0, 0), vec![4, 2, 7]);
        s.failed(4, 1_000);
        assert_eq!(s.order(vec![4, 2, 7], 1_000, 0), vec![2, 7, 4]);
        assert_eq!(s.order(vec![2, 4, 7], 30_999, 0), vec![2, 7, 4]);
        // Its time is up: placement order again.
        assert_eq!(s.order(vec![4, 2, 7], 31_000, 0), vec![4, 2, 7]);
        s.failed(4, 40_000);
        s.failed(7, 40_000);
        assert_eq!(s.order(vec![4, 2, 7], 40_001, 0), vec![2, 4, 7]);
        s.served(4);
        assert_eq!(s.order(vec![4, 2, 7], 40_001, 0), vec![4, 2, 7]);
        // Every copy suspect: all asked, in placement order from the spread's.
        s.failed(4, 40_000);
        s.failed(2, 40_000);
        assert_eq!(s.order(vec![4, 2, 7], 40_001, 0), vec![4, 2, 7]);
        assert_eq!(s.order(vec![4, 2, 7], 40_001, 2), vec![7, 4, 2]);
        // Bounded.
        for osd in 0..(SUSPECTS_MAX as u64 + 10) {
            s.failed(1000 + osd, 50_000 + osd);
        }
        assert!(s.until.len() <= SUSPECTS_MAX);
    }
}
