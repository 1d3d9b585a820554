//! Issue 41: reads over the copies of an object. A read asks one copy (each client starts
//! each object's reads at a copy of its own, so that reads spread over the copies) and
//! fails over to the next on a missing object, a damaged one, an unreachable or silent
//! OSD or an answer that does not authenticate, waiting less for a copy that is not its
//! last ([`crate::limits::OSD_READ_FAILOVER_TIMEOUT`]). The decisions are
//! `machines::copies` ([`ReadOverCopies`]); this is their driver.

use super::*;
use crate::copies::{changes, classify, object_of};
use machines::{CopyAnswer, ReadOverCopies, ReadStep};

impl Client {
    /// One object request for `opened` ([`Client::parallel`] for one: a change on every
    /// copy at once, a read on one copy at a time until one serves).
    pub(crate) fn data_call(
        &self,
        opened: &Opened,
        osd: u64,
        request: OsdRequest,
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
        self.read_on(opened, &request, copies, answer)
    }

    /// A read's answer from its first copy (of `copies`, in the order asked), and from
    /// the next while one may do better.
    pub(crate) fn read_on(
        &self,
        opened: &Opened,
        request: &OsdRequest,
        copies: Vec<u64>,
        first: Result<OsdResponse>,
    ) -> Result<OsdResponse> {
        let mut asked = copies.first().copied().unwrap_or_default();
        let mut read = ReadOverCopies::new(copies);
        let mut answers = vec![first];
        loop {
            let kind = match answers.last() {
                Some(answer) => {
                    self.note_answer(asked, answer);
                    classify(answer)
                }
                None => CopyAnswer::Failed,
            };
            match read.answer(kind) {
                ReadStep::Ask(osd) => {
                    self.stats.lock().copy_failovers += 1;
                    asked = osd;
                    let patience = read_patience(read.more_after_this());
                    answers.push(self.data_call_within(opened, osd, request.clone(), patience));
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

    /// The order in which a read of `object` asks its `copies` (placement order): from
    /// the copy this client's spread picks for the object, suspect copies last
    /// ([`machines::Suspects::order`]).
    pub(crate) fn read_order(&self, copies: Vec<u64>, object: Option<ObjectId>) -> Vec<u64> {
        let spread = object.map_or(0, |o| machines::spread(self.spread, o.file, o.stripe));
        let now = self.now();
        self.suspects.lock().order(copies, now, spread)
    }
}

/// How long a read waits for one copy: less while another copy is left to ask.
pub(crate) fn read_patience(more_copies: bool) -> std::time::Duration {
    if more_copies {
        crate::limits::OSD_READ_FAILOVER_TIMEOUT
    } else {
        crate::limits::OSD_ANSWER_TIMEOUT
    }
}
