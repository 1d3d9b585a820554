//! Issue 41, scrub: every copy of every object of a file read from its own OSD and
//! checked. An encrypted file's copy must open under the file's keys (its blocks
//! authenticate); a plaintext copy must be read without error (an OSD checks a whole
//! object against the digest it kept under ALLDATA and answers `ObjectDamaged` when it
//! does not match); and every copy must equal what most copies hold. With `repair`, a
//! missing or bad copy is replaced by a good one ([`crate::repair`]).
//!
//! A *light* scrub reads no copy whose OSD's digest of its stored bytes (`Digest`)
//! agrees with most copies' digests: only the copies of an object that disagree, or are
//! missing, cost a read (of one good copy, checked as a deep scrub checks it). It finds
//! lost, damaged and stale copies as a deep scrub does, except two copies damaged alike.

use super::*;
use crate::repair::Found;
use maat_proto::msg::MissedCopy;

/// What a scrub found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScrubReport {
    /// Files checked.
    pub files: u64,
    /// Objects (stripes) checked.
    pub objects: u64,
    /// Copies read and found good.
    pub copies_good: u64,
    /// Copies their OSD does not hold.
    pub copies_missing: u64,
    /// Copies that failed a check (damaged, not authenticating, differing from the
    /// others) or could not be read (their OSD did not answer).
    pub copies_bad: u64,
    /// Objects with no good copy at all.
    pub objects_lost: u64,
    /// Missing or bad copies replaced by a good copy (a repairing scrub).
    pub copies_repaired: u64,
    /// One line per object with a copy that is not good: path, stripe, OSD, why.
    pub findings: Vec<String>,
    /// Bad copies that exist, to repair once they kept their state for
    /// [`REPAIR_SETTLE`](crate::limits::REPAIR_SETTLE).
    #[serde(skip)]
    pub(crate) deferred: Vec<Deferred>,
    /// Records of copies that missed a change whose copy this scrub repaired, per file:
    /// the MDS forgets them at the end ([`Client::forget_repaired`]).
    #[serde(skip)]
    pub(crate) repaired_missed: Vec<(u64, MissedCopy)>,
}

impl ScrubReport {
    /// Findings left as they were: copies not repaired and files not checked.
    pub fn unrepaired(&self) -> u64 {
        self.findings
            .iter()
            .filter(|f| !f.ends_with("; repaired"))
            .count() as u64
    }

    /// Adds what another part of the same scrub found.
    fn absorb(&mut self, r: ScrubReport) {
        self.files += r.files;
        self.objects += r.objects;
        self.copies_good += r.copies_good;
        self.copies_missing += r.copies_missing;
        self.copies_bad += r.copies_bad;
        self.objects_lost += r.objects_lost;
        self.copies_repaired += r.copies_repaired;
        self.findings.extend(r.findings);
        self.deferred.extend(r.deferred);
        self.repaired_missed.extend(r.repaired_missed);
    }
}

/// A bad copy that exists, found by a scrub, to repair later (see `repair.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deferred {
    path: String,
    stripe: u32,
    osd: u64,
    /// Its digest when found.
    seen: [u8; 32],
    /// The digest of the good copies' bytes, and which OSDs hold them.
    good: [u8; 32],
    sources: Vec<u64>,
    /// When it was found (protocol clock, ms).
    at: u64,
    /// Its line in the findings.
    finding: String,
    /// The file, and the MDS's record of this copy as having missed a change, if any.
    file: u64,
    missed: Option<MissedCopy>,
}

/// How thorough a scrub is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubDepth {
    /// Every copy read and checked.
    Deep,
    /// Copies compared by their OSDs' digests; read only where they disagree.
    Light,
}

/// How one copy of an object read.
pub(crate) enum Copy {
    Good(Vec<u8>),
    Missing,
    Bad(String),
    /// Its OSD did not answer (not repairable now).
    Unreachable(String),
}

impl Client {
    /// Checks every copy of every object of the file at `path` (the administrator, or a
    /// user who may read it; to `repair`, write it), adding to `report`.
    pub(crate) fn scrub_file(
        &self,
        path: &str,
        depth: ScrubDepth,
        repair: bool,
        report: &mut ScrubReport,
    ) -> Result<()> {
        let access = match repair {
            true => Access::ReadWrite,
            false => Access::Read,
        };
        let opened = self.open(path, access, None)?;
        report.files += 1;
        let size = opened.stat.size;
        if size == 0 {
            return Ok(());
        }
        let stripes = stripes_for(size);
        let crypt = match opened.stat.encrypted {
            true => Some(self.stripe_crypt(&opened, 0..stripes)?),
            false => None,
        };
        let full = crypt
            .as_ref()
            .map_or(STRIPE_UNIT_BYTES, |c| c.full_stripe_sealed());
        let missed = self.missed_copies_of(opened.stat.id)?;
        for stripe in 0..stripes {
            report.objects += 1;
            let (_, object) = self.stripe_target(&opened, stripe)?;
            let copies = self.copies_of(&opened.stat.partition, object.file, stripe)?;
            let missed_here: Vec<MissedCopy> = missed
                .iter()
                .filter(|m| m.stripe == stripe)
                .copied()
                .collect();
            let is_missed = |osd: u64| missed_here.iter().any(|m| m.osd == osd);
            let expected = (size - u64::from(stripe) * STRIPE_UNIT_BYTES).min(STRIPE_UNIT_BYTES);
            // One copy read and checked.
            let read_copy = |osd: u64| {
                let request = crate::data::read_request(&opened, object, full);
                match self.data_call_exact(&opened, osd, request) {
                    Ok(OsdResponse::Data(bytes)) => match &crypt {
                        Some(c) => {
                            match c.open(stripe, bytes.clone(), expected, 0..STRIPE_UNIT_BYTES) {
                                Ok(_) => Copy::Good(bytes),
                                Err(e) => Copy::Bad(e.to_string()),
                            }
                        }
                        None if (bytes.len() as u64) < expected => Copy::Bad(format!(
                            "{} bytes where the file's size needs {expected}",
                            bytes.len()
                        )),
                        None => Copy::Good(bytes),
                    },
                    Ok(_) => Copy::Bad("unexpected answer".into()),
                    Err(e) => unanswered(e),
                }
            };
            let read = match depth {
                ScrubDepth::Deep => copies.iter().map(|&osd| (osd, read_copy(osd))).collect(),
                ScrubDepth::Light => {
                    let digests = copies
                        .iter()
                        .map(|&osd| {
                            let digest = match self.stored_digest(&opened, osd, object) {
                                // A copy that missed a change is never one of the votes
                                // for the good bytes (however many missed one).
                                Ok(Some(_)) if is_missed(osd) => {
                                    Err(Copy::Bad(ErrorCode::CopyStale.reason().to_string()))
                                }
                                Ok(Some(d)) => Ok(d),
                                Ok(None) => Err(Copy::Missing),
                                Err(e) => Err(unanswered(e)),
                            };
                            (osd, digest)
                        })
                        .collect();
                    match by_digest(digests, &read_copy) {
                        Some(read) => read,
                        None => {
                            report.copies_good += copies.len() as u64;
                            continue;
                        }
                    }
                }
            };
            // (A deep scrub's read of such a copy is refused `CopyStale`: bad as well.)
            self.settle_object(
                &opened,
                object,
                full,
                path,
                stripe,
                &missed_here,
                read,
                repair,
                report,
            );
        }
        Ok(())
    }

    #[doc(hidden)]
    /// The MDS's records of `file`'s copies that missed a change (issue 41); none when
    /// the MDS keeps none or does not answer this (not the administrator, an older MDS).
    pub fn missed_copies_of(&self, file: u64) -> Result<Vec<MissedCopy>> {
        match self.mds_call(MdsRequest::MissedCopiesOf { file }) {
            Ok(MdsResponse::MissedCopies(copies)) => Ok(copies),
            Ok(_) => Err(self.bad("mds", "unexpected answer")),
            Err(ClientError::Refused(e))
                if matches!(e.code, ErrorCode::PermissionDenied | ErrorCode::Malformed) =>
            {
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Tells the MDS which records of copies that missed a change a scrub repaired
    /// (each forgotten only while it is the record the scrub read).
    fn forget_repaired(&self, report: &mut ScrubReport) {
        let mut all = std::mem::take(&mut report.repaired_missed);
        all.sort_unstable();
        all.dedup();
        for (file, copies) in group_by_file(all) {
            for chunk in copies.chunks(maat_proto::limits::MISSED_COPIES_PER_REQUEST_MAX) {
                let request = MdsRequest::CopiesRepaired {
                    file,
                    copies: chunk.to_vec(),
                };
                if let Err(e) = self.mds_call(request) {
                    report.findings.push(format!(
                        "file {file}: {} copies repaired, but the MDS still records them as \
                         missed ({e}): the next scrub repairs them again",
                        chunk.len()
                    ));
                }
            }
        }
    }

    /// Counts and reports one object's copies as read (the object is stripe `stripe` of
    /// the file at `path`, whose copies `missed` are recorded as having missed a change);
    /// with `repair`, first replaces the missing and bad ones with what most copies hold,
    /// and notes the records of those repaired for the MDS to forget.
    #[allow(clippy::too_many_arguments)]
    fn settle_object(
        &self,
        opened: &Opened,
        object: ObjectId,
        full: u64,
        path: &str,
        stripe: u32,
        missed: &[MissedCopy],
        mut read: Vec<(u64, Copy)>,
        repair: bool,
        report: &mut ScrubReport,
    ) {
        let record_of = |osd: u64| missed.iter().find(|m| m.osd == osd).copied();
        // Copies that read well must also agree (a copy that missed a write still
        // authenticates): the bytes most copies hold are good; with no majority,
        // none is known to be.
        let majority = agreed(&mut read);
        let goods = read
            .iter()
            .filter(|(_, c)| matches!(c, Copy::Good(_)))
            .count();
        if majority.is_none() && goods > 1 {
            report.findings.push(format!(
                "{path} stripe {stripe}: its {goods} good copies differ and most hold no \
                 one version: none repaired (rewrite the file)"
            ));
        }
        // Missing copies are repaired now; copies that exist but are bad once they kept
        // their state long enough (`repair.rs`).
        let mut repaired = Vec::new();
        let mut deferred = Vec::new();
        if let (true, Some(majority)) = (repair, &majority) {
            let good = maat_crypto::hash::blake3(&[majority]);
            let sources: Vec<u64> = read
                .iter()
                .filter(|(_, c)| matches!(c, Copy::Good(b) if b == majority))
                .map(|(osd, _)| *osd)
                .collect();
            let missing: Vec<(u64, Found)> = read
                .iter()
                .filter(|(_, c)| matches!(c, Copy::Missing))
                .map(|(osd, _)| (*osd, Found::Missing))
                .collect();
            if !missing.is_empty() {
                repaired = self.repair_copies(opened, object, full, &good, &sources, &missing);
            }
            for (osd, _) in read.iter().filter(|(_, c)| matches!(c, Copy::Bad(_))) {
                match self.stored_digest(opened, *osd, object) {
                    Ok(Some(seen)) => deferred.push((*osd, seen)),
                    Ok(None) => repaired.push((*osd, Err("removed since it was read".into()))),
                    Err(e) => repaired.push((*osd, Err(e.to_string()))),
                }
            }
            let at = self.now();
            for (osd, seen) in deferred.drain(..) {
                report.deferred.push(Deferred {
                    path: path.to_string(),
                    stripe,
                    osd,
                    seen,
                    good,
                    sources: sources.clone(),
                    at,
                    finding: String::new(),
                    file: opened.stat.id,
                    missed: record_of(osd),
                });
            }
        }
        for (osd, _) in repaired.iter().filter(|(_, r)| r.is_ok()) {
            if let Some(m) = record_of(*osd) {
                report.repaired_missed.push((opened.stat.id, m));
            }
        }
        let mut any_good = false;
        for (osd, copy) in read {
            let why = match copy {
                Copy::Good(_) => {
                    report.copies_good += 1;
                    any_good = true;
                    continue;
                }
                Copy::Missing => {
                    report.copies_missing += 1;
                    "missing".to_string()
                }
                Copy::Bad(why) | Copy::Unreachable(why) => {
                    report.copies_bad += 1;
                    why
                }
            };
            let outcome = match repaired.iter().find(|(o, _)| *o == osd) {
                Some((_, Ok(()))) => {
                    report.copies_repaired += 1;
                    "; repaired".to_string()
                }
                Some((_, Err(e))) => format!("; not repaired: {e}"),
                None => String::new(),
            };
            let finding = format!("{path} stripe {stripe}: osd {osd}: {why}{outcome}");
            if let Some(d) = report.deferred.iter_mut().find(|d| {
                d.finding.is_empty() && d.osd == osd && d.stripe == stripe && d.path == path
            }) {
                d.finding = finding.clone();
            }
            report.findings.push(finding);
        }
        if !any_good {
            report.objects_lost += 1;
        }
    }

    /// [`Client::scrub_file`] on every file under `root` (a file, or a directory walked
    /// depth first), [`SCRUB_FILES_AT_ONCE`](crate::limits::SCRUB_FILES_AT_ONCE) files at
    /// a time; `progress` hears each file's path as it starts. A file that cannot be
    /// opened is a finding, not an end. Findings come sorted.
    pub fn scrub(
        &self,
        root: &str,
        depth: ScrubDepth,
        repair: bool,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ScrubReport> {
        let began = self.now();
        let mut files = Vec::new();
        let mut stack = vec![root.to_string()];
        // An entry removed since its directory was read is skipped, not an error.
        let gone = |e: &ClientError| e.code() == Some(ErrorCode::NoSuchFile);
        while let Some(path) = stack.pop() {
            let stat = match self.stat(&path) {
                Err(e) if gone(&e) && path != root => continue,
                other => other?,
            };
            if stat.is_dir {
                let entries = match self.readdir(&path) {
                    Err(e) if gone(&e) && path != root => continue,
                    other => other?,
                };
                for (name, entry) in entries {
                    let child = match path.as_str() {
                        "/" => format!("/{name}"),
                        dir => format!("{dir}/{name}"),
                    };
                    if entry.is_dir || entry.mode & msg::S_IFMT == 0 {
                        stack.push(child);
                    }
                }
                continue;
            }
            if stat.mode & msg::S_IFMT != 0 {
                continue; // links, FIFOs, sockets, devices: no objects
            }
            files.push(path);
        }
        files.reverse(); // taken from the end: the walk's order
        let queue = crate::shared::Locked::new((files, progress));
        let mut lanes: Vec<ScrubReport> = (0..crate::limits::SCRUB_FILES_AT_ONCE)
            .map(|_| ScrubReport::default())
            .collect();
        self.network
            .run_lanes(&mut lanes, &|report: &mut ScrubReport| loop {
                let path = {
                    let mut q = queue.lock();
                    let Some(path) = q.0.pop() else { break };
                    (q.1)(&path);
                    path
                };
                match self.scrub_file(&path, depth, repair, report) {
                    Err(e) if gone(&e) => {} // removed since the walk
                    Err(e) => report.findings.push(format!("{path}: not checked: {e}")),
                    Ok(()) => {}
                }
            });
        let mut total = ScrubReport::default();
        for r in lanes {
            total.absorb(r);
        }
        self.repair_deferred(&mut total);
        self.forget_repaired(&mut total);
        total.findings.sort();
        self.report_scrub(&total, depth, began);
        Ok(total)
    }

    /// Tells the MDS what this scrub did, for its counters (`maat stats`, `/metrics`).
    /// Only an administrator's scrub counts there; any other's report is refused, and a
    /// failed report changes nothing the scrub did, so neither is an error.
    fn report_scrub(&self, report: &ScrubReport, depth: ScrubDepth, began: u64) {
        let counts = msg::ScrubCounts {
            deep: matches!(depth, ScrubDepth::Deep),
            files: report.files,
            objects: report.objects,
            copies_good: report.copies_good,
            copies_missing: report.copies_missing,
            copies_bad: report.copies_bad,
            copies_repaired: report.copies_repaired,
            objects_lost: report.objects_lost,
            unrepaired: report.unrepaired(),
            millis: self.now().saturating_sub(began),
        };
        let _not_counted = self.mds_call(MdsRequest::ScrubDone(counts));
    }

    /// The repairs of bad copies that exist, once each kept its state for
    /// [`REPAIR_SETTLE`](crate::limits::REPAIR_SETTLE) since the scrub found it: waits
    /// until then, and writes each outcome into its finding.
    fn repair_deferred(&self, report: &mut ScrubReport) {
        let deferred = std::mem::take(&mut report.deferred);
        let Some(last) = deferred.iter().map(|d| d.at).max() else {
            return;
        };
        let settle = crate::limits::REPAIR_SETTLE.as_millis() as u64;
        let wait = (last + settle).saturating_sub(self.now());
        self.network.sleep(wait);
        for d in deferred {
            let outcome = self.repair_one(&d);
            let suffix = match &outcome {
                Ok(()) => {
                    report.copies_repaired += 1;
                    if let Some(m) = d.missed {
                        report.repaired_missed.push((d.file, m));
                    }
                    "; repaired".to_string()
                }
                Err(e) => format!("; not repaired: {e}"),
            };
            if let Some(f) = report.findings.iter_mut().find(|f| **f == d.finding) {
                f.push_str(&suffix);
            }
        }
    }

    /// One deferred repair: the file opened again, and the copy replaced by a good one if
    /// it still is as found ([`Client::repair_copies`]).
    fn repair_one(&self, d: &Deferred) -> std::result::Result<(), String> {
        let opened = self
            .open(&d.path, Access::ReadWrite, None)
            .map_err(|e| e.to_string())?;
        let (_, object) = self
            .stripe_target(&opened, d.stripe)
            .map_err(|e| e.to_string())?;
        let full = match opened.stat.encrypted {
            true => self
                .stripe_crypt(&opened, d.stripe..d.stripe + 1)
                .map_err(|e| e.to_string())?
                .full_stripe_sealed(),
            false => STRIPE_UNIT_BYTES,
        };
        let targets = [(d.osd, Found::Bad(d.seen))];
        self.repair_copies(&opened, object, full, &d.good, &d.sources, &targets)
            .into_iter()
            .next()
            .map_or(Ok(()), |(_, outcome)| outcome)
    }
}

/// `(file, copy)` pairs, sorted, as each file's copies.
fn group_by_file(all: Vec<(u64, MissedCopy)>) -> Vec<(u64, Vec<MissedCopy>)> {
    let mut out: Vec<(u64, Vec<MissedCopy>)> = Vec::new();
    for (file, copy) in all {
        match out.last_mut() {
            Some((f, copies)) if *f == file => copies.push(copy),
            _ => out.push((file, vec![copy])),
        }
    }
    out
}

/// A copy whose OSD refused or did not answer.
fn unanswered(e: ClientError) -> Copy {
    match e {
        ClientError::Refused(e) if e.code == ErrorCode::NoSuchObject => Copy::Missing,
        e @ ClientError::Net { .. } => Copy::Unreachable(e.to_string()),
        e => Copy::Bad(e.to_string()),
    }
}

/// A light scrub's copies: `None` when every copy's digest is the same (all good, none
/// read); else each copy as a deep scrub would see it, reading (with `read_copy`) only
/// copies holding the digest most copies hold, until one checks good, whose bytes then
/// stand for every copy with that digest. Copies with other digests are bad.
fn by_digest(
    digests: Vec<(u64, std::result::Result<[u8; 32], Copy>)>,
    read_copy: &dyn Fn(u64) -> Copy,
) -> Option<Vec<(u64, Copy)>> {
    let held: Vec<[u8; 32]> = digests
        .iter()
        .filter_map(|(_, d)| d.as_ref().ok().copied())
        .collect();
    let (count, top) = held
        .iter()
        .map(|d| (held.iter().filter(|o| *o == d).count(), *d))
        .max_by_key(|(n, _)| *n)
        .unwrap_or((0, [0; 32]));
    if count == digests.len() {
        return None;
    }
    let osds: Vec<u64> = digests.iter().map(|(osd, _)| *osd).collect();
    let mut good: Option<Vec<u8>> = None;
    let mut out = Vec::with_capacity(digests.len());
    for (osd, digest) in digests {
        let copy = match digest {
            Err(copy) => copy,
            Ok(d) if d == top && count * 2 > held.len() => match &good {
                Some(bytes) => Copy::Good(bytes.clone()),
                None => match read_copy(osd) {
                    Copy::Good(bytes) if maat_crypto::hash::blake3(&[&bytes]) == d => {
                        good = Some(bytes.clone());
                        Copy::Good(bytes)
                    }
                    Copy::Good(_) => Copy::Bad("changed between its digest and its read".into()),
                    other => other,
                },
            },
            // No majority: each such copy read and checked, compared after.
            Ok(_) if count * 2 <= held.len() => read_copy(osd),
            Ok(_) => Copy::Bad("differs from the other copies".into()),
        };
        out.push((osd, copy));
    }
    if good.is_none() && count * 2 > held.len() {
        // No copy with the most held digest reads good: every copy read, as deep.
        return Some(osds.into_iter().map(|osd| (osd, read_copy(osd))).collect());
    }
    Some(out)
}

/// Marks the good copies that differ from what most good copies hold as bad, and gives
/// those bytes; `None` when there is no good copy, or the good copies disagree with no
/// strict majority (then none is known to be the right one; they are left as read).
fn agreed(read: &mut [(u64, Copy)]) -> Option<Vec<u8>> {
    let goods: Vec<&Vec<u8>> = read
        .iter()
        .filter_map(|(_, c)| match c {
            Copy::Good(b) => Some(b),
            _ => None,
        })
        .collect();
    let (count, bytes) = goods
        .iter()
        .map(|b| (goods.iter().filter(|o| o == &b).count(), *b))
        .max_by_key(|(n, _)| *n)?;
    if count * 2 <= goods.len() {
        return None;
    }
    let bytes = bytes.clone();
    for (_, c) in read.iter_mut() {
        if matches!(c, Copy::Good(b) if *b != bytes) {
            *c = Copy::Bad("differs from the other copies".into());
        }
    }
    Some(bytes)
}
