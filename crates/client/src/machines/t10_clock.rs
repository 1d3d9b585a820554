//! SPEC T7 for T10 requests: which clock a request to an OSD is dated by, a state
//! machine without I/O, moved by authenticated answers and stale refusals.

use crate::limits::PROBE_BACKDATE_MILLIS;

/// What T10 requests to one OSD are dated by (SPEC T7). A T10 client holds no session
/// with the OSD, whose confirmation would have shown its clock. It has three guesses:
/// the offset the OSD's last authenticated answer showed (CMDRSP and up: its time is
/// under the MAC), the MDS's offset (the daemons' clocks agree within the capability
/// backdate, which capabilities need anyway), and the MDS's time less
/// [`PROBE_BACKDATE_MILLIS`] (an OSD behind the MDS by more than the future tolerance
/// takes it; a request dated back is no more use to anyone replaying it). A stale
/// refusal moves to the next guess, in turn; none is ever forgotten, so a forged
/// refusal costs a round trip or two and nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct T10Clock {
    /// The offset learnt from the OSD's last authenticated answer.
    learned: Option<i64>,
    guess: Guess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Guess {
    Learned,
    Probe,
    #[default]
    Mds,
}

impl T10Clock {
    /// After an authenticated answer showing the OSD's clock at `offset`.
    pub(crate) fn learned(offset: i64) -> Self {
        Self {
            learned: Some(offset),
            guess: Guess::Learned,
        }
    }

    /// The offset to date a request by, given the MDS's.
    pub(crate) fn offset(self, mds: i64) -> i64 {
        match (self.guess, self.learned) {
            (Guess::Learned, Some(offset)) => offset,
            (Guess::Probe, _) => mds.saturating_sub(PROBE_BACKDATE_MILLIS),
            _ => mds,
        }
    }

    /// The next guess after a stale refusal of a request dated by this one.
    pub(crate) fn after_stale(self) -> Self {
        let guess = match (self.guess, self.learned) {
            (Guess::Learned, _) => Guess::Probe,
            (Guess::Probe, _) => Guess::Mds,
            (Guess::Mds, Some(_)) => Guess::Learned,
            (Guess::Mds, None) => Guess::Probe,
        };
        Self { guess, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stale refusal, forged or not, moves to the next guess and forgets none: from a
    /// learnt offset, two refusals at most lead back to it (an OSD 20 s behind the MDS
    /// takes neither the MDS's time nor the probe, so a client that dropped what it
    /// learnt would never reach it again).
    #[test]
    fn stale_refusals_cycle_the_guesses_and_keep_what_was_learnt() {
        let mds = 1_000;
        let learnt = T10Clock::learned(-20_000);
        assert_eq!(learnt.offset(mds), -20_000);
        let probe = learnt.after_stale();
        assert_eq!(probe.offset(mds), mds - PROBE_BACKDATE_MILLIS);
        let by_mds = probe.after_stale();
        assert_eq!(by_mds.offset(mds), mds);
        assert_eq!(by_mds.after_stale(), learnt);
        // Nothing learnt yet: the MDS's time and the probe in turn.
        let first = T10Clock::default();
        assert_eq!(first.offset(mds), mds);
        assert_eq!(first.after_stale().offset(mds), mds - PROBE_BACKDATE_MILLIS);
        assert_eq!(first.after_stale().after_stale(), first);
    }
}
