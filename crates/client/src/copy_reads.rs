//! Issue 41: reads over the copies of an object. A read asks one copy (each client starts
//! each object's reads at a copy of its own, so that reads spread over the copies) and
//! fails over to the next on a missing object, a damaged one, an unreachable or silent
//! OSD or an answer that does not authenticate, waiting less for a copy that is not its
//! last ([`crate::limits::OSD_READ_FAILOVER_TIMEOUT`]). The decisions are
//! `machines::copies` ([`ReadOverCopies`]); this is their driver.

use super::*;
use crate::copies::{changes, classify, object_of};
use crate::lanes::SharedRequest;
use machines::{past_end, CopyAnswer, PastEnd, ReadOverCopies, ReadStep};

impl Client {
    /// One object request for `opened` ([`Client::parallel`] for one: a change on every
    /// copy at once, a read on one copy at a time until one serves).
    pub(crate) fn data_call(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
    ) -> Result<OsdResponse> {
        self.data_call_over(opened, osd, request, ReadOverCopies::new)
    }

    /// [`Client::data_call`] for a read of the stripe right past a file's size as read
    /// at open ([`ReadOverCopies::past_end`]).
    pub(crate) fn read_past_end(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
    ) -> Result<OsdResponse> {
        self.data_call_over(opened, osd, request, ReadOverCopies::past_end)
    }

    /// [`Client::data_call`], a read over several copies run by the machine `read`
    /// makes of them.
    fn data_call_over(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
        read: fn(Vec<u64>) -> ReadOverCopies,
    ) -> Result<OsdResponse> {
        let copies = self.reach(opened, osd, &request)?;
        if copies.len() > 1 && changes(&request.command) {
            return self
                .parallel(opened, vec![(osd, request)])?
                .pop()
                .unwrap_or_else(|| Err(ClientError::Internal("no answer".into())));
        }
        let copies = self.read_order(copies, object_of(&request.command));
        let first = copies.first().copied().unwrap_or(osd);
        if copies.len() <= 1 {
            let answer = self.data_call_exact(opened, first, request);
            self.note_answer(first, &answer);
            return answer;
        }
        let answer = self.data_call_within(opened, first, request.clone(), read_patience(true));
        self.read_on(opened, &request, read(copies), answer)
    }

    /// A read's answer from its first copy (`first`, from the copy `read` asks first),
    /// and from the next while one may do better.
    pub(crate) fn read_on(
        &self,
        opened: &Opened,
        request: &OsdRequest,
        mut read: ReadOverCopies,
        first: Result<OsdResponse>,
    ) -> Result<OsdResponse> {
        let mut asked = read.first().unwrap_or_default();
        let mut answers = vec![first];
        // (A copy not asked tells nothing of its OSD.)
        let mut unasked = false;
        loop {
            let kind = match answers.last() {
                Some(answer) => {
                    if !unasked {
                        self.note_answer(asked, answer);
                    }
                    classify(answer)
                }
                None => CopyAnswer::Failed,
            };
            match read.answer(kind) {
                ReadStep::Ask(osd) => {
                    asked = osd;
                    let down = || {
                        let now = self.now();
                        self.suspects.lock().liveness(osd, now) == machines::Liveness::Down
                    };
                    unasked = read.absent_already() && down();
                    let answer = match unasked {
                        true => Err(crate::copies::reported_down(osd)),
                        false => {
                            self.stats.lock().copy_failovers += 1;
                            let patience = read_patience(read.brief());
                            self.data_call_within(opened, osd, request.clone(), patience)
                        }
                    };
                    answers.push(answer);
                }
                ReadStep::Stand(n) => {
                    if n >= answers.len() {
                        return Err(ClientError::Internal("a read stood on no answer".into()));
                    }
                    return answers.swap_remove(n);
                }
            }
        }
    }

    /// Issue 41: `first`, what the first copy of stripe `stripe` of `opened` gave, unless
    /// its bytes failed a check only the client can make (an encrypted block's
    /// authentication, SPEC H2, `ClientError::Integrity`): then the stripe (`length` bytes
    /// at most) read from each other copy until `check` accepts one, and `first`'s error
    /// when none does.
    pub(crate) fn or_other_copies<T>(
        &self,
        opened: &Opened,
        stripe: u32,
        length: u64,
        first: Result<T>,
        mut check: impl FnMut(Vec<u8>) -> Result<T>,
    ) -> Result<T> {
        let e = match first {
            Err(e @ ClientError::Integrity { .. }) => e,
            other => return other,
        };
        let Ok((_, object)) = self.stripe_target(opened, stripe) else {
            return Err(e);
        };
        let Ok(copies) = self.copies_of(&opened.stat.partition, object.file, stripe) else {
            return Err(e);
        };
        // In the order the first read took (it asked the first of these).
        let copies = self.read_order(copies, Some(object));
        let last = copies.len().saturating_sub(1);
        for (n, osd) in copies.into_iter().enumerate().skip(1) {
            self.stats.lock().copy_failovers += 1;
            let request = crate::data::read_request(opened, object, length);
            let answer = self.data_call_within(opened, osd, request, read_patience(n < last));
            if let Ok(OsdResponse::Data(bytes)) = answer {
                if let Ok(accepted) = check(bytes) {
                    return Ok(accepted);
                }
            }
        }
        Err(e)
    }

    /// Whether stripe `stripe` of `opened`, past the file's end, exists: every copy asked
    /// at once ([`Client::ask_every_copy`]; not one after another, as a read asks: a read
    /// lets a copy that did not answer stand over the others' "missing", since it might
    /// hold the object, and it would wait for that copy's whole timeout). `None`: a
    /// write-only open may not look.
    pub(crate) fn look_past_end(&self, opened: &Opened, stripe: u32) -> Result<Option<PastEnd>> {
        let (osd, object) = self.stripe_target(opened, stripe)?;
        let probe = OsdRequest {
            capability: opened.capability.clone(),
            command: OsdCommand::GetAttributes { object },
        };
        let (answers, skipped) = self.ask_every_copy(opened, osd, probe)?;
        let mut kinds = Vec::with_capacity(answers.len());
        let mut failure = None;
        for answer in answers {
            match answer {
                Err(ClientError::Refused(e)) if e.code == ErrorCode::PermissionDenied => {
                    return Ok(None)
                }
                answer => match classify(&answer) {
                    CopyAnswer::Refused => return answer.map(|_| None),
                    kind => {
                        kinds.push(kind);
                        if let (CopyAnswer::Failed, Err(e)) = (kind, answer) {
                            failure.get_or_insert(e);
                        }
                    }
                },
            }
        }
        // No copy answered: a removal would reach none either.
        if let Some(e) = failure.filter(|_| kinds.iter().all(|k| *k == CopyAnswer::Failed)) {
            return Err(e);
        }
        Ok(Some(past_end(&kinds, skipped)))
    }

    /// `request` (first copy's OSD `osd`) sent to every copy of its object at once and
    /// nothing recorded: the answers of the copies asked, and how many were not asked
    /// because the MDS reports their OSD down. A copy that hangs is given up on as a
    /// change's copy is, while at least [`maat_proto::limits::COPIES_DURABLE_MIN`]
    /// others are asked.
    pub(crate) fn ask_every_copy(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
    ) -> Result<(Vec<Result<OsdResponse>>, usize)> {
        let (send, skipped) = self.skip_down(self.reach(opened, osd, &request)?);
        let shared = match skipped.is_empty() && send.len() > maat_proto::limits::COPIES_DURABLE_MIN
        {
            true => SharedRequest::watched(request),
            false => SharedRequest::new(request),
        };
        let calls = send.iter().map(|osd| (*osd, Arc::clone(&shared))).collect();
        drop(shared);
        let answers = self.parallel_exact(opened, calls)?;
        for (osd, answer) in send.iter().zip(&answers) {
            self.note_answer(*osd, answer);
        }
        Ok((answers, skipped.len()))
    }

    /// Whether the size of `opened` (the file at `path`) is still the file's: as the MDS
    /// said it at the open, when the open was made fresh; else (an open kept by this
    /// client, or whose capability the MDS kept) asked again, the kept open forgotten.
    /// A read that no copy of the stripe past that size could answer for (every copy
    /// down, hung or missing a change) ends there: the stripe is looked at only in case
    /// the file grew since the size was read.
    pub(crate) fn size_stands(&self, path: &str, opened: &Opened) -> Result<bool> {
        if !opened.mds_cached {
            return Ok(true);
        }
        self.forget_opened_path(path);
        let now = self.open(path, Access::Read, None)?;
        Ok(now.stat.id == opened.stat.id && now.stat.size == opened.stat.size)
    }

    /// The order in which a read of `object` asks its `copies` (placement order): from
    /// the copy this client's spread picks for the object, suspect copies last
    /// ([`machines::Suspects::order`]).
    pub(crate) fn read_order(&self, copies: Vec<u64>, object: Option<ObjectId>) -> Vec<u64> {
        let spread = object.map_or(0, |o| machines::spread(self.spread, o.file, o.stripe));
        let now = self.now();
        self.suspects.lock().order(copies, now, spread)
    }
}

/// Whether `opened` comes with the file's size from the MDS (a job's handle comes with
/// none, and no partition: its stripes are read until one is short or missing, each as
/// inside the file).
pub(crate) fn size_known(opened: &Opened) -> bool {
    !opened.stat.partition.is_empty()
}

/// How long a read waits for one copy: less while another copy is left to ask.
pub(crate) fn read_patience(more_copies: bool) -> std::time::Duration {
    if more_copies {
        crate::limits::OSD_READ_FAILOVER_TIMEOUT
    } else {
        crate::limits::OSD_ANSWER_TIMEOUT
    }
}
