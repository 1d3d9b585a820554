//! Issue 41: object requests over every copy of the object. A partition keeps each of its
//! objects in N copies on distinct OSDs (the top N of the rendezvous, on distinct hosts
//! while there are enough: `maat_proto::placement::copies_among`). A change goes to
//! every copy, in parallel (each OSD checks the client's capability itself: no OSD acts
//! on another's word), and is acknowledged when every copy took it, or when at least
//! `COPIES_DURABLE_MIN` did and the MDS has recorded the others as missed (their OSDs
//! then refuse to serve them, `CopyStale`, until a repair); a read goes to
//! one copy and fails over to the next (`copy_reads.rs`). The decisions are
//! `machines::copies`; this is their driver.

use super::*;
use crate::copy_reads::read_patience;
use crate::lanes::SharedRequest;
use crate::missed_copies::{Degraded, Unasked};
use maat_proto::limits::OSD_DOWN_AFTER_MILLIS;
use maat_proto::msg::MissedCopy;
use machines::{change_outcome, CopyAnswer, Liveness, ReadOverCopies};

impl Client {
    #[doc(hidden)]
    /// The OSDs holding the copies of stripe `stripe` of `file` in partition `partition`
    /// (by name), first copy first.
    pub fn copies_of(&self, partition: &str, file: u64, stripe: u32) -> Result<Vec<u64>> {
        let map = self.cluster_map()?;
        let n = self.partition_copies(partition)?;
        let copies = placement::copies_among(&map.osds, file, stripe, usize::from(n));
        if copies.is_empty() {
            return Err(ClientError::NoOsds);
        }
        Ok(copies)
    }

    #[doc(hidden)]
    /// The OSDs holding the copies of stripe `stripe` of `file`, in the order this
    /// client's reads ask them while none is suspect (from the copy its spread picks).
    pub fn reads_ask(&self, partition: &str, file: u64, stripe: u32) -> Result<Vec<u64>> {
        let copies = self.copies_of(partition, file, stripe)?;
        let spread = machines::spread(self.spread, file, stripe);
        Ok(machines::Suspects::default().order(copies, 0, spread))
    }

    #[doc(hidden)]
    /// Sets where this client's reads start among copies (tests that must know which
    /// copy a read asks first).
    pub fn set_read_spread(&mut self, spread: u64) {
        self.spread = spread;
    }

    /// How many copies partition `partition` keeps of each object: asked of the MDS once,
    /// and again for a partition made since. An MDS from before copies keeps one. A file
    /// reached through a job's handle (SPEC M10) comes with no partition: the most any
    /// partition keeps, so that a read tries every copy there may be.
    pub(crate) fn partition_copies(&self, partition: &str) -> Result<u8> {
        let known = |table: &HashMap<String, u8>| match partition {
            "" => table.values().max().copied(),
            name => table.get(name).copied(),
        };
        if let Some(n) = known(&self.copies.lock()) {
            return Ok(n);
        }
        match self.refresh_placement() {
            Ok(_) => {}
            Err(ClientError::Refused(e)) if e.code == ErrorCode::Malformed => {
                // An MDS that does not know the request keeps one copy of everything.
                return Ok(1);
            }
            Err(e) => return Err(e),
        }
        known(&self.copies.lock())
            .ok_or_else(|| self.bad("mds", "a file's partition is not in the partition list"))
    }

    /// Asks the MDS for every partition's copies and every OSD's liveness (issue 41):
    /// remembers the copies, and takes each OSD the MDS has not heard from lately for
    /// failed, so that reads ask its copies last without waiting for it first.
    pub fn refresh_placement(&self) -> Result<maat_proto::msg::Placement> {
        self.refresh_placement_within(None)
    }

    /// [`Client::refresh_placement`], the MDS waited for at most `patience`. The report
    /// counts as made when it was asked for (what it says may be that old), never later.
    fn refresh_placement_within(
        &self,
        patience: Option<std::time::Duration>,
    ) -> Result<maat_proto::msg::Placement> {
        let asked = self.now();
        let placement = match self.mds_call_within(MdsRequest::Placement, patience)? {
            MdsResponse::Placement(p) => p,
            _ => return Err(self.bad("mds", "unexpected answer")),
        };
        self.copies
            .lock()
            .extend(placement.partitions.iter().cloned());
        self.suspects
            .lock()
            .reported_down(placement.osds.iter().filter(|o| !o.up).map(|o| o.id), asked);
        *self.placement_at.lock() = Some(asked);
        Ok(placement)
    }

    /// The copies a request reaches: every copy of its object, first copy first, or
    /// `[osd]` for a request that names no object of the file.
    pub(crate) fn reach(
        &self,
        opened: &Opened,
        osd: u64,
        request: &OsdRequest,
    ) -> Result<Vec<u64>> {
        match object_of(&request.command) {
            Some(object) if object.file == opened.stat.id => {
                self.copies_of(&opened.stat.partition, object.file, object.stripe)
            }
            _ => Ok(vec![osd]),
        }
    }

    /// Runs the object requests `calls` (first copy's OSD, request) for `opened`: every
    /// change on every copy of its object, every read on the first copy and, when that
    /// fails in a way another copy may not, on the next ([`machines::copies`]). Answers in
    /// the order of `calls`, as [`Client::parallel_exact`] gives them.
    pub(crate) fn parallel(
        &self,
        opened: &Opened,
        calls: Vec<(u64, OsdRequest)>,
    ) -> Result<Vec<Result<OsdResponse>>> {
        enum Plan {
            /// A change of `object`: its answers are `exact[range]`; the copies on OSDs
            /// the MDS reports down were not sent it (`shared`, if another copy fails).
            Every(
                std::ops::Range<usize>,
                ObjectId,
                Vec<u64>,
                Arc<SharedRequest>,
            ),
            /// A read (or a change of an object with one copy): its first answer is
            /// `exact[at]`; the request and copies to ask more, when there are more.
            One(usize, Option<(OsdRequest, Vec<u64>)>),
        }
        let mut exact: Vec<(u64, Arc<SharedRequest>)> = Vec::with_capacity(calls.len());
        let mut plans = Vec::with_capacity(calls.len());
        for (osd, request) in calls {
            let copies = self.reach(opened, osd, &request)?;
            let object = object_of(&request.command);
            if let (true, Some(object)) = (copies.len() > 1 && changes(&request.command), object) {
                let start = exact.len();
                let (copies, skipped) = self.skip_down(copies);
                // One request (its data, and its digest once made) for every copy; a
                // copy the others can stand without is given up on once the MDS reports
                // its OSD down.
                let shared = match skipped.is_empty()
                    && copies.len() > maat_proto::limits::COPIES_DURABLE_MIN
                {
                    true => SharedRequest::watched(request),
                    false => SharedRequest::new(request),
                };
                for copy in copies {
                    exact.push((copy, Arc::clone(&shared)));
                }
                plans.push(Plan::Every(start..exact.len(), object, skipped, shared));
            } else {
                let copies = self.read_order(copies, object);
                let first = copies.first().copied().unwrap_or(osd);
                let more = (copies.len() > 1).then(|| (request.clone(), copies));
                let patience = read_patience(more.is_some());
                plans.push(Plan::One(exact.len(), more));
                exact.push((first, SharedRequest::within(request, patience)));
            }
        }
        let exact_osds: Vec<u64> = exact.iter().map(|(osd, _)| *osd).collect();
        let mut answers: Vec<Option<Result<OsdResponse>>> = self
            .parallel_exact(opened, exact)?
            .into_iter()
            .map(Some)
            .collect();
        /// A change's answers so far, and the skipped copies to ask after all.
        struct Gathered {
            object: ObjectId,
            got: Vec<Option<Result<OsdResponse>>>,
            osds: Vec<u64>,
            again: Vec<u64>,
            /// Copies skipped and counted failed without being asked (the last of
            /// `osds`), and the change's request: asked after all if the MDS will not
            /// record them.
            unasked: usize,
            shared: Option<Arc<SharedRequest>>,
        }
        enum Step {
            Change(Gathered),
            /// [`Plan::One`]'s read.
            Read(usize, Option<(OsdRequest, Vec<u64>)>),
        }
        let mut gathered: Vec<Step> = Vec::with_capacity(plans.len());
        let mut again_calls: Vec<(u64, Arc<SharedRequest>)> = Vec::new();
        for plan in plans {
            let (range, object, skipped, shared) = match plan {
                Plan::Every(range, object, skipped, shared) => (range, object, skipped, shared),
                Plan::One(at, more) => {
                    gathered.push(Step::Read(at, more));
                    continue;
                }
            };
            let mut got: Vec<Option<Result<OsdResponse>>> = Vec::with_capacity(range.len());
            let mut osds = Vec::with_capacity(range.len());
            for i in range {
                if let Some(answer) = answers.get_mut(i).and_then(Option::take) {
                    let osd = exact_osds.get(i).copied().unwrap_or_default();
                    self.note_answer(osd, &answer);
                    got.push(Some(answer));
                    osds.push(osd);
                }
            }
            let mut again = Vec::new();
            let mut unasked = 0;
            if !skipped.is_empty() {
                let kinds: Vec<CopyAnswer> = got.iter().flatten().map(classify).collect();
                // A skip must never cost a change its acknowledgement: when a copy it was
                // sent to failed (and none refused it, which every copy would), the
                // skipped copies are asked after all (the MDS's report may be up to 5 s
                // old): every change's at once, below.
                let ask_again = !kinds.contains(&CopyAnswer::Refused)
                    && kinds.iter().any(|k| *k != CopyAnswer::Done);
                if ask_again {
                    again_calls.extend(skipped.iter().map(|osd| (*osd, Arc::clone(&shared))));
                    again = skipped;
                } else {
                    unasked = skipped.len();
                    for osd in skipped {
                        got.push(Some(Err(reported_down(osd))));
                        osds.push(osd);
                    }
                }
            }
            gathered.push(Step::Change(Gathered {
                object,
                got,
                osds,
                again,
                unasked,
                // (Kept only to ask skipped copies after all: a request held beyond its
                // sends would be copied for each later send.)
                shared: (unasked > 0).then_some(shared),
            }));
        }
        let mut again_answers = match again_calls.is_empty() {
            true => Vec::new(),
            false => self.parallel_exact(opened, again_calls)?,
        }
        .into_iter();
        let mut out = Vec::with_capacity(gathered.len());
        // Changes that stand once the copies they missed are recorded.
        let mut degraded: Vec<Degraded> = Vec::new();
        for g in gathered {
            match g {
                Step::Change(Gathered {
                    object,
                    mut got,
                    mut osds,
                    again,
                    unasked,
                    shared,
                }) => {
                    for osd in again {
                        let answer = again_answers.next().unwrap_or_else(|| {
                            Err(ClientError::Internal(
                                "a copy asked again, no answer".into(),
                            ))
                        });
                        self.note_answer(osd, &answer);
                        got.push(Some(answer));
                        osds.push(osd);
                    }
                    let kinds: Vec<CopyAnswer> = got.iter().flatten().map(classify).collect();
                    // One copy that took it is enough to ask the MDS to record the
                    // others: the MDS refuses records that leave fewer current copies
                    // than the partition's min_size (then the change is not
                    // acknowledged).
                    let outcome = change_outcome(&kinds, 1)
                        .ok_or_else(|| ClientError::Internal("a change with no copy".into()))?;
                    self.note_copies_failed(&kinds);
                    let mut take = |i: usize| got.get_mut(i).and_then(Option::take);
                    let stands = take(outcome.stands).ok_or_else(|| {
                        ClientError::Internal("a change stood on no answer".into())
                    })?;
                    if let Some(instead) = outcome.missed.first().and_then(|i| take(*i)) {
                        let missed = outcome
                            .missed
                            .iter()
                            .filter_map(|i| osds.get(*i))
                            .map(|osd| MissedCopy {
                                stripe: object.stripe,
                                osd: *osd,
                                seq: 0,
                            })
                            .collect();
                        let sent = osds.len() - unasked;
                        degraded.push(Degraded {
                            at: out.len(),
                            instead,
                            missed,
                            unasked: (unasked > 0).then(|| Unasked {
                                kinds,
                                osds: osds.split_off(sent),
                                sent_osds: osds,
                                object,
                                shared,
                            }),
                        });
                    } else if unasked > 0 {
                        self.stats.lock().copies_skipped_down += unasked as u64;
                    }
                    out.push(stands);
                }
                Step::Read(at, more) => {
                    let first = answers
                        .get_mut(at)
                        .and_then(Option::take)
                        .ok_or_else(|| ClientError::Internal("a read with no answer".into()))?;
                    out.push(match more {
                        Some((request, copies)) => {
                            self.read_on(opened, &request, ReadOverCopies::new(copies), first)
                        }
                        None => {
                            let osd = exact_osds.get(at).copied().unwrap_or_default();
                            self.note_answer(osd, &first);
                            first
                        }
                    });
                }
            }
        }
        if !degraded.is_empty() {
            self.settle_degraded(opened, &mut out, degraded)?;
        }
        Ok(out)
    }

    /// Issue 41: of a change's `copies`, those to send it to, and those it skips because
    /// the MDS reports their OSD down (a hung OSD would otherwise hold the change for the
    /// whole answer timeout, every time): recorded as missed at once, as a copy that
    /// failed is, so they never serve the old bytes. A report older than
    /// [`machines::copies::DOWN_REPORT_MILLIS`] is asked again first (at most once per
    /// that time); a copy is never skipped on a report that old, nor so many that the
    /// others fall below [`maat_proto::limits::COPIES_DURABLE_MIN`]; and when a copy the
    /// change was sent to does not take it, the skipped ones are asked after all
    /// ([`Client::parallel`]).
    pub(crate) fn skip_down(&self, copies: Vec<u64>) -> (Vec<u64>, Vec<u64>) {
        let now = self.now();
        let liveness = |now: u64| {
            let suspects = self.suspects.lock();
            copies
                .iter()
                .map(|osd| suspects.liveness(*osd, now))
                .collect::<Vec<_>>()
        };
        let mut live = liveness(now);
        // (Not answered: nothing is skipped on the old report.)
        if live.contains(&Liveness::ReportStale) && self.refresh_placement_if_due(now) {
            live = liveness(self.now());
        }
        // Never so many that the others could not make the change stand.
        let mut may_skip = copies
            .len()
            .saturating_sub(maat_proto::limits::COPIES_DURABLE_MIN);
        let (mut send, mut skip) = (Vec::new(), Vec::new());
        for (osd, mut l) in copies.into_iter().zip(live) {
            if l == Liveness::Unproven && may_skip > 0 {
                self.probe(osd);
                let now = self.now();
                l = self.suspects.lock().liveness(osd, now);
            }
            match l {
                Liveness::Down if may_skip > 0 => {
                    may_skip -= 1;
                    skip.push(osd);
                }
                _ => send.push(osd),
            }
        }
        (send, skip)
    }

    /// Asks `osd` something small (the attributes of an object no file has), waiting
    /// [`crate::limits::OSD_READ_FAILOVER_TIMEOUT`]: an OSD the MDS reports down and
    /// that stays silent that long is taken as hung ([`machines::Suspects::timed_out`]);
    /// any answer, a refusal too, shows it serving, and a connection that fails at once
    /// costs a change nothing to try: either way it is not probed again until a newer
    /// report names it.
    fn probe(&self, osd: u64) {
        let Ok(at) = self.osd_entry(osd).map(|e| e.address) else {
            return;
        };
        self.stats.lock().osds_probed += 1;
        let answer = self.osd_call_once_within(
            osd,
            &probe_request(),
            crate::limits::OSD_READ_FAILOVER_TIMEOUT,
        );
        let now = self.now();
        let mut suspects = self.suspects.lock();
        match answer {
            Ok(_) | Err(ClientError::Refused(_)) => suspects.probed(osd, now, true),
            // Silent itself (not the MDS, asked for a session on the way).
            Err(ClientError::Net { source, address }) if silent(&source) && address == at => {
                suspects.timed_out(osd, now);
            }
            Err(ClientError::Net { address, .. }) if address == at => {
                suspects.probed(osd, now, false);
            }
            // Not an answer about the OSD: nothing learnt, the change is sent.
            Err(_) => {}
        }
    }

    /// Asks the MDS which OSDs are down ([`Client::refresh_placement`]) unless it was
    /// asked less than the time it takes to notice ago ([`OSD_DOWN_AFTER_MILLIS`], the
    /// life of its report); whether it asked. A failed ask counts: it is not repeated
    /// sooner.
    fn refresh_placement_if_due(&self, now: u64) -> bool {
        self.refresh_placement_if_older(now, OSD_DOWN_AFTER_MILLIS, None)
    }

    /// [`Client::refresh_placement_if_due`], asking again once the last ask is `millis`
    /// old, the MDS waited for at most `patience`.
    fn refresh_placement_if_older(
        &self,
        now: u64,
        millis: u64,
        patience: Option<std::time::Duration>,
    ) -> bool {
        {
            let mut at = self.placement_at.lock();
            if at.is_some_and(|t| now.saturating_sub(t) < millis) {
                return false;
            }
            *at = Some(now);
        }
        let _asked = self.refresh_placement_within(patience);
        true
    }

    /// Issue 41: asked by a lane whose change's copy on `osd` has been silent a while
    /// since the change was sent at `since` (`SharedRequest::watched`): why to stop
    /// waiting for it, or `None` to wait on. It is given up on once a report of the MDS
    /// made since `since` shows the OSD down (asked again here at most once per
    /// [`crate::limits::CHANGE_WATCH_EVERY`], whichever lane asks): then it counts as
    /// hung, and the copy is recorded as missed as one that timed out. A report from
    /// before the change was sent never ends the wait: the change went to this copy
    /// although the MDS said so (a probe found it answering), and only the MDS's word
    /// since, with this silence, shows it gone.
    pub(crate) fn give_up_on_copy(&self, osd: u64, since: u64) -> Option<String> {
        let down = |c: &Client| c.suspects.lock().reported_down_since(osd, since);
        if !down(self) {
            let every = crate::limits::CHANGE_WATCH_EVERY;
            let millis = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
            // (Asked with the slice's patience: a hung MDS holds the wait a second more
            // at most, per instance.)
            self.refresh_placement_if_older(self.now(), millis, Some(every));
            if !down(self) {
                return None;
            }
        }
        let now = self.now();
        self.suspects.lock().timed_out(osd, now);
        self.stats.lock().copies_given_up += 1;
        Some(format!(
            "the MDS reports osd {osd} down ({} ms after the change was sent)",
            now.saturating_sub(since)
        ))
    }

    /// What `osd`'s answer says of it: unreachable or silent, it is asked last for a
    /// while ([`machines::Suspects`]); answering, it is not.
    pub(crate) fn note_answer(&self, osd: u64, answer: &Result<OsdResponse>) {
        match answer {
            Err(ClientError::Net { source, .. }) => {
                let now = self.now();
                match silent(source) {
                    true => self.suspects.lock().timed_out(osd, now),
                    false => self.suspects.lock().failed(osd, now),
                }
                // Which other OSDs are down, as the MDS knows: the next reads skip them
                // without waiting. (A failure to ask is met again where it matters,
                // placing a copy.)
                self.refresh_placement_if_due(now);
            }
            Ok(_) => self.suspects.lock().served(osd),
            Err(_) => {}
        }
    }

    /// Counts the copies a change did not reach (recorded as missed when enough others
    /// took it, else the change is refused and written again by whoever retries it).
    fn note_copies_failed(&self, kinds: &[CopyAnswer]) {
        let failed = kinds.iter().filter(|k| **k == CopyAnswer::Failed).count();
        if failed > 0 && failed < kinds.len() {
            self.stats.lock().copies_failed += failed as u64;
        }
    }
}

/// The answer a change counts for a copy it skipped on OSD `osd`, reported down by the
/// MDS ([`Client::skip_down`]): a failure to reach it.
pub(crate) fn reported_down(osd: u64) -> ClientError {
    ClientError::Net {
        address: format!("osd {osd}"),
        source: maat_net::NetError::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MDS reports this OSD down and it did not answer this client in time: \
             the change skipped its copy",
        )),
    }
}

/// Whether a request failed because its peer stayed silent until the caller's timeout
/// (hung, not merely refusing connections).
fn silent(source: &maat_net::NetError) -> bool {
    matches!(source, maat_net::NetError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut)
}

/// A request that shows whether an OSD serves, and changes nothing: the attributes of an
/// object no file has (the OSD refuses it; any answer is one).
pub(crate) fn probe_request() -> OsdRequest {
    OsdRequest {
        capability: Vec::new(),
        command: OsdCommand::GetAttributes {
            object: ObjectId {
                partition: maat_proto::msg::DATA_PARTITION,
                file: u64::MAX,
                stripe: u32::MAX,
            },
        },
    }
}

/// The object a data request names, if any.
pub(crate) fn object_of(command: &OsdCommand) -> Option<ObjectId> {
    command.object_access().map(|(object, _)| object)
}

/// Whether a request changes its object (so goes to every copy).
pub(crate) fn changes(command: &OsdCommand) -> bool {
    command
        .object_access()
        .is_some_and(|(_, mode)| mode.allows(maat_proto::capability::Mode::WRITE))
}

/// How one copy's answer counts ([`CopyAnswer`]).
pub(crate) fn classify(answer: &Result<OsdResponse>) -> CopyAnswer {
    match answer {
        Ok(_) => CopyAnswer::Done,
        Err(ClientError::Refused(e)) => match e.code {
            ErrorCode::NoSuchObject => CopyAnswer::Missing,
            ErrorCode::CopyStale => CopyAnswer::Stale,
            ErrorCode::ObjectDamaged
            | ErrorCode::Internal
            | ErrorCode::Busy
            | ErrorCode::CutOff => CopyAnswer::Failed,
            _ => CopyAnswer::Refused,
        },
        Err(
            ClientError::Net { .. } | ClientError::BadAnswer { .. } | ClientError::Crypto { .. },
        ) => CopyAnswer::Failed,
        Err(_) => CopyAnswer::Refused,
    }
}
