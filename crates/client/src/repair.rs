//! Issue 41, repair: a missing or bad copy of an object replaced by a good one, found by
//! a scrub ([`Client::scrub`] with `repair`).
//!
//! No OSD trusts another: the repairing client (the administrator) reads the good copy
//! under its own capability and writes it to the other OSD under the same capability,
//! which that OSD checks like any write. What makes a repair safe while writers may be
//! at work is the order and the condition:
//!
//! 1. the state of every copy to repair is read first (the digest of its stored bytes,
//!    or that it is absent: `Digest`);
//! 2. then the good copy is read again, and must still be what the scrub found;
//! 3. each copy is replaced only if it is still in the state of step 1 (`ReplaceIf`,
//!    decided by its OSD under the object's lock), so a write that reached it after
//!    step 1 is never undone: the repair is refused (`ObjectChanged`) and left to the
//!    next scrub;
//! 4. the good copy is checked once more: if it changed since step 2, a write was at
//!    work and the copy just written may lack it, which is reported (scrub again).
//!
//! What remains (no object versions yet): a write that reached the repaired copy before
//! step 1 and reaches the good copy only after step 4 leaves the repaired copy without
//! it until the next scrub finds the two differ.

use super::*;
use crate::scrub::Copy;

impl Client {
    /// Replaces each missing or bad copy in `read` (not those whose OSD did not answer)
    /// with `good`, the bytes of the good copies, under the conditions above. `full`:
    /// the length a whole-object read asks for. One outcome per copy it tried.
    pub(crate) fn repair_copies(
        &self,
        opened: &Opened,
        object: ObjectId,
        full: u64,
        good: &[u8],
        read: &[(u64, Copy)],
    ) -> Vec<(u64, std::result::Result<(), String>)> {
        let sources: Vec<u64> = read
            .iter()
            .filter(|(_, c)| matches!(c, Copy::Good(b) if b == good))
            .map(|(osd, _)| *osd)
            .collect();
        let targets = read
            .iter()
            .filter(|(_, c)| matches!(c, Copy::Missing | Copy::Bad(_)))
            .map(|(osd, _)| *osd);
        let call = |osd: u64, command: OsdCommand| {
            let request = OsdRequest {
                capability: opened.capability.clone(),
                command,
            };
            self.data_call_exact(opened, osd, request)
        };
        // 1. Each copy's state.
        let mut outcomes = Vec::new();
        let mut states = Vec::new();
        for osd in targets {
            match call(osd, OsdCommand::Digest { object }) {
                Ok(OsdResponse::Digest(d)) => states.push((osd, Some(d))),
                Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {
                    states.push((osd, None))
                }
                Ok(_) => outcomes.push((osd, Err("unexpected answer to Digest".into()))),
                Err(e) => outcomes.push((osd, Err(e.to_string()))),
            }
        }
        if states.is_empty() {
            return outcomes;
        }
        // 2. The good copy, again.
        let again = sources.iter().find_map(|&osd| {
            match call(osd, crate::data::read_request(opened, object, full).command) {
                Ok(OsdResponse::Data(bytes)) => Some((osd, bytes)),
                _ => None,
            }
        });
        let source = match again {
            Some((osd, bytes)) if bytes == good => osd,
            Some(_) => {
                let why =
                    "the good copy changed while it was scrubbed (a write at work?): scrub again";
                outcomes.extend(states.iter().map(|(osd, _)| (*osd, Err(why.to_string()))));
                return outcomes;
            }
            None => {
                let why = "no good copy could be read again";
                outcomes.extend(states.iter().map(|(osd, _)| (*osd, Err(why.to_string()))));
                return outcomes;
            }
        };
        // 3. Each copy, if it did not change since step 1.
        let mut written = Vec::new();
        for (osd, expect) in states {
            let command = OsdCommand::ReplaceIf {
                object,
                expect,
                data: good.to_vec(),
            };
            match call(osd, command) {
                Ok(_) => written.push(osd),
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
        // 4. The good copy did not change meanwhile.
        let unchanged = match call(source, OsdCommand::Digest { object }) {
            Ok(OsdResponse::Digest(d)) => d == maat_crypto::hash::blake3(&[good]),
            _ => false,
        };
        let outcome = match unchanged {
            true => Ok(()),
            false => Err(format!(
                "written, but the good copy on osd {source} changed meanwhile (a write at work?): scrub again"
            )),
        };
        outcomes.extend(written.into_iter().map(|osd| (osd, outcome.clone())));
        outcomes
    }
}
