//! Issue 41, repair: a missing or bad copy of an object replaced by a good one, found by
//! a scrub ([`Client::scrub`] with `repair`).
//!
//! No OSD trusts another: the repairing client (the administrator) reads the good copy
//! under its own capability and writes it to the other OSD under the same capability,
//! which that OSD checks like any write. What makes a repair safe while writers may be
//! at work is the order, the conditions and, for a copy that exists, time:
//!
//! 1. the state of every copy to repair is read first (the digest of its stored bytes,
//!    or that it is absent: `Digest`). A missing copy must still be absent. A copy that
//!    exists but is bad must still have the digest the scrub found it with at least
//!    [`REPAIR_SETTLE`](crate::limits::REPAIR_SETTLE) earlier: longer than a client waits
//!    for a write, so a write that reached this copy first and the good copies later is
//!    either on the good copies by now (then they changed: step 2 refuses) or was never
//!    acknowledged;
//! 2. then a good copy is read again, and must still be what the scrub found;
//! 3. each copy is replaced only if it is still in the state of step 1 (`ReplaceIf`,
//!    decided by its OSD under the object's lock), so a write that reached it after
//!    step 1 is never undone: the repair is refused (`ObjectChanged`) and left to the
//!    next scrub;
//! 4. every good copy is checked once more: if one changed since step 2, a write was at
//!    work and the copy just written may lack it (reported: scrub again); if one is gone,
//!    an unlink or truncation was at work, and a copy this repair created is removed
//!    again (it would outlive its file).

use super::*;

/// What a copy to repair was when the scrub found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Absent.
    Missing,
    /// Present with these bytes' digest, but bad.
    Bad([u8; 32]),
}

impl Client {
    /// The digest of the stored bytes of `object`'s copy on `osd` (`None`: it has none).
    pub(crate) fn stored_digest(
        &self,
        opened: &Opened,
        osd: u64,
        object: ObjectId,
    ) -> Result<Option<[u8; 32]>> {
        let request = OsdRequest {
            capability: opened.capability.clone(),
            command: OsdCommand::Digest { object },
        };
        match self.data_call_exact(opened, osd, request) {
            Ok(OsdResponse::Digest(d)) => Ok(Some(d)),
            Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => Ok(None),
            Ok(_) => Err(self.bad("osd", "unexpected answer to Digest")),
            Err(e) => Err(e),
        }
    }

    /// Limits the copies repairs write back to `bytes_per_second` (0: no limit, the
    /// default), for the scrubs this client runs from now on (issue 41: a repair must
    /// leave client I/O its share of the OSDs and the network).
    pub fn set_repair_rate(&self, bytes_per_second: u64) {
        self.repair_rate
            .store(bytes_per_second, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits, under a repair rate, until a repair write of `bytes` fits in it: each write
    /// takes its share of a second after the one before (a token bucket that holds no
    /// burst), whichever scrub lane it comes from.
    fn pace_repair(&self, bytes: usize) {
        let rate = self.repair_rate.load(std::sync::atomic::Ordering::Relaxed);
        if rate == 0 {
            return;
        }
        let now = self.now();
        let wait = {
            let mut next = self.repair_next.lock();
            let start = (*next).max(now);
            let takes = (bytes as u64).saturating_mul(1000) / rate;
            *next = start.saturating_add(takes);
            start - now
        };
        if wait > 0 {
            self.network.sleep(wait);
        }
    }

    /// Replaces each copy of `targets` with the bytes the `sources` hold, whose digest
    /// is `good`, under the conditions above. `full`: the length a whole-object read asks
    /// for. One outcome per target.
    pub(crate) fn repair_copies(
        &self,
        opened: &Opened,
        object: ObjectId,
        full: u64,
        good: &[u8; 32],
        sources: &[u64],
        targets: &[(u64, Found)],
    ) -> Vec<(u64, std::result::Result<(), String>)> {
        let call = |osd: u64, command: OsdCommand| {
            let request = OsdRequest {
                capability: opened.capability.clone(),
                command,
            };
            self.data_call_exact(opened, osd, request)
        };
        let digest_of = |osd: u64| {
            self.stored_digest(opened, osd, object)
                .map_err(|e| e.to_string())
        };
        // 1. Each copy's state, as the scrub found it.
        let mut outcomes = Vec::new();
        let mut states = Vec::new();
        for &(osd, found) in targets {
            match (digest_of(osd), found) {
                (Ok(None), Found::Missing) => states.push((osd, None, found)),
                (Ok(Some(d)), Found::Bad(seen)) if d == seen => states.push((osd, Some(d), found)),
                (Ok(_), _) => outcomes.push((
                    osd,
                    Err(
                        "the copy changed since the scrub found it (a write at work?): scrub again"
                            .to_string(),
                    ),
                )),
                (Err(e), _) => outcomes.push((osd, Err(e))),
            }
        }
        if states.is_empty() {
            return outcomes;
        }
        let refuse_all = |outcomes: &mut Vec<_>, states: &[(u64, _, Found)], why: &str| {
            outcomes.extend(
                states
                    .iter()
                    .map(|(osd, _, _)| (*osd, Err(why.to_string()))),
            );
        };
        // 2. A good copy, again: the bytes to write.
        let mut changed = false;
        let again = sources.iter().find_map(|&osd| {
            match call(osd, crate::data::read_request(opened, object, full).command) {
                Ok(OsdResponse::Data(bytes)) if maat_crypto::hash::blake3(&[&bytes]) == *good => {
                    Some(bytes)
                }
                Ok(OsdResponse::Data(_)) => {
                    changed = true;
                    None
                }
                _ => None,
            }
        });
        let Some(good_bytes) = again else {
            let why = match changed {
                true => {
                    "the good copy changed since the scrub read it (a write at work?): scrub again"
                }
                false => "no good copy could be read again",
            };
            refuse_all(&mut outcomes, &states, why);
            return outcomes;
        };
        // 3. Each copy, if it did not change since step 1.
        let mut written = Vec::new();
        for (osd, expect, found) in states {
            let command = OsdCommand::ReplaceIf {
                object,
                expect,
                data: good_bytes.clone(),
            };
            self.pace_repair(good_bytes.len());
            match call(osd, command) {
                Ok(_) => written.push((osd, found)),
                Err(ClientError::Refused(e)) if e.code == ErrorCode::ObjectChanged => outcomes
                    .push((
                    osd,
                    Err(
                        "the copy changed while it was repaired (a write at work?): scrub again"
                            .into(),
                    ),
                )),
                Err(e) => outcomes.push((osd, Err(e.to_string()))),
            }
        }
        // 4. Every good copy as it was.
        let now: Vec<std::result::Result<Option<[u8; 32]>, String>> =
            sources.iter().map(|&osd| digest_of(osd)).collect();
        if now.iter().any(|d| matches!(d, Ok(None))) {
            for (osd, found) in written {
                let why = match found {
                    Found::Missing => match call(osd, OsdCommand::Remove { object }) {
                        Ok(_) => "the object was removed meanwhile (an unlink or truncation at work): the copy written was removed again".to_string(),
                        Err(e) => format!("the object was removed meanwhile, and the copy written could not be removed again: {e}"),
                    },
                    Found::Bad(_) => "the object was removed meanwhile (an unlink or truncation at work): scrub again".to_string(),
                };
                outcomes.push((osd, Err(why)));
            }
            return outcomes;
        }
        let outcome = match now.iter().all(|d| matches!(d, Ok(Some(d)) if d == good)) {
            true => Ok(()),
            false => Err(
                "written, but a good copy changed or did not answer meanwhile (a write at work?): scrub again"
                    .to_string(),
            ),
        };
        outcomes.extend(written.into_iter().map(|(osd, _)| (osd, outcome.clone())));
        outcomes
    }
}
