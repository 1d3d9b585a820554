//! Issue 41 at the MDS: the copies that missed a change. A client whose change reached
//! at least `COPIES_DURABLE_MIN` copies of an object but not all records the others here
//! before it acknowledges the change; each OSD asks, under the join key, which of its
//! copies are recorded (at its start, before it serves, and at every check-in) and refuses
//! to serve them. The scrubber repairs them from good copies and then forgets the records
//! it repaired, each only while its number is the one it read (a copy missed again since
//! keeps its newer record).
//!
//! Stored in the `meta` table, one record per copy, under
//! `copies_missed/<file:016x>/<stripe:08x>/<osd:016x>`: `version (1) ‖ seq (8, BE)`; the
//! next number under [`SEQ_KEY`]: `version (1) ‖ next (8, BE)`.

use crate::namespace::{allowed, WRITE};
use crate::store::PartitionRecord;
use crate::{lock, require_admin, Batch, MdsError, MetaStore, Op, Principal, Result};
use maat_proto::copies::{effective_min, missed_mac, missed_request_mac};
use maat_proto::limits::{MISSED_COPIES_MAX, MISSED_COPIES_PER_REQUEST_MAX};
use maat_proto::msg::{ErrorCode, MdsPlainResponse, MdsResponse, MissedCopy, OsdEntry};
use maat_proto::placement::copies_among;
use maat_proto::UnixMillis;
use std::collections::HashMap;
use std::sync::Mutex;

/// Up to which record number each OSD has said it applied the list.
#[derive(Default)]
pub(crate) struct MissedState {
    /// OSD id → every record numbered below this is known to it.
    known: Mutex<HashMap<u64, u64>>,
}

/// Prefix of every record.
const PREFIX: &str = "copies_missed/";
/// The `meta` key of the next record number.
const SEQ_KEY: &str = "copies_missed_seq";
/// Issue 42: `meta` keys (then the OSD id in hex) of what each OSD knows, on a shared
/// store.
const KNOWS_PREFIX: &str = "osd_knows/";
/// Layout version of a record and of the number.
const FORMAT: u8 = 1;

fn key(file: u64, stripe: u32, osd: u64) -> String {
    format!("{PREFIX}{file:016x}/{stripe:08x}/{osd:016x}")
}

fn file_prefix(file: u64) -> String {
    format!("{PREFIX}{file:016x}/")
}

fn encode_u64(v: u64) -> Vec<u8> {
    let mut out = vec![FORMAT];
    out.extend_from_slice(&v.to_be_bytes());
    out
}

fn decode_u64(what: &str, bytes: &[u8]) -> Result<u64> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => rest
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt(what, "not 8 bytes")),
        Some((v, _)) => Err(corrupt(what, format!("unknown version {v}"))),
        None => Err(corrupt(what, "empty")),
    }
}

fn corrupt(what: &str, why: impl std::fmt::Display) -> MdsError {
    MdsError::Store(crate::StoreError::corrupt(what.to_string(), why))
}

/// (file, stripe, osd) of a record's key.
fn parse_key(k: &str) -> Result<(u64, u32, u64)> {
    let bad = || corrupt(k, "not a missed copy's key");
    let mut parts = k.strip_prefix(PREFIX).ok_or_else(bad)?.split('/');
    let file = parts.next().ok_or_else(bad)?;
    let stripe = parts.next().ok_or_else(bad)?;
    let osd = parts.next().ok_or_else(bad)?;
    Ok((
        u64::from_str_radix(file, 16).map_err(|_| bad())?,
        u32::from_str_radix(stripe, 16).map_err(|_| bad())?,
        u64::from_str_radix(osd, 16).map_err(|_| bad())?,
    ))
}

/// One stored record.
struct Record {
    file: u64,
    copy: MissedCopy,
}

fn records(rows: Vec<(String, Vec<u8>)>) -> Result<Vec<Record>> {
    rows.into_iter()
        .map(|(k, v)| {
            let (file, stripe, osd) = parse_key(&k)?;
            let seq = decode_u64(&k, &v)?;
            Ok(Record {
                file,
                copy: MissedCopy { stripe, osd, seq },
            })
        })
        .collect()
}

impl<S: MetaStore> crate::Mds<S> {
    /// `MdsRequest::CopiesMissed`: records `copies` of `file` as having missed a change
    /// (durable before the answer); answers which records an OSD does not know yet
    /// (none: `Ok`). The caller must be allowed to
    /// write the file: a record makes reads of those copies fail over to others, which
    /// a writer of the file can do anyway.
    pub(crate) fn copies_missed(
        &self,
        who: &Principal,
        file: u64,
        copies: &[MissedCopy],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let partition = self.may_record(who, file, copies.len())?;
        let osds = self.store.osds()?;
        let partition = self.partition(partition)?;
        let write = self.writing()?;
        self.enough_current(file, copies, &osds, &partition)?;
        let mut held = self.store.metas(PREFIX)?.len();
        if held.saturating_add(copies.len()) > MISSED_COPIES_MAX {
            held = self.forget_removed_files()?;
        }
        if held.saturating_add(copies.len()) > MISSED_COPIES_MAX {
            return Err(MdsError::refused(
                ErrorCode::Busy,
                format!(
                    "{held} copies are recorded as missed already (at most \
                     {MISSED_COPIES_MAX}); a repairing scrub (maat admin scrub --repair) \
                     clears them"
                ),
            ));
        }
        let mut next = self.next_seq()?;
        let mut batch = Batch::default();
        let mut recorded = Vec::with_capacity(copies.len());
        for c in copies {
            batch.push(Op::PutMeta(key(file, c.stripe, c.osd), encode_u64(next)));
            recorded.push(MissedCopy { seq: next, ..*c });
            next = next.saturating_add(1);
        }
        batch.push(Op::PutMeta(SEQ_KEY.into(), encode_u64(next)));
        self.store.commit(batch)?;
        drop(write);
        self.stats
            .copies_missed
            .fetch_add(copies.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.still_unknown(file, recorded, now)
    }

    /// `MdsRequest::MissedCopiesKnown`: which of `copies` (records of `file`) their
    /// OSDs do not know yet (none: `Ok`).
    pub(crate) fn missed_copies_known(
        &self,
        who: &Principal,
        file: u64,
        copies: &[MissedCopy],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let _partition = self.may_record(who, file, copies.len())?;
        self.still_unknown(file, copies.to_vec(), now)
    }

    /// Refuses records that would leave an object with fewer current copies than a
    /// change needs (the partition's min_size): a change that reached a copy already recorded as
    /// missed did not make it current (it lacks the earlier change), so without this,
    /// rotating failures could leave every copy of an object missing some change. Also
    /// refuses copies that the placement does not put on the OSD named. Called under the
    /// write lock.
    fn enough_current(
        &self,
        file: u64,
        copies: &[MissedCopy],
        osds: &[OsdEntry],
        partition: &PartitionRecord,
    ) -> Result<()> {
        let replicas = usize::from(partition.replicas);
        let mut stripes: Vec<u32> = copies.iter().map(|c| c.stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        for stripe in stripes {
            let placed = copies_among(osds, file, stripe, replicas);
            let mut stale: Vec<u64> = copies
                .iter()
                .filter(|c| c.stripe == stripe)
                .map(|c| c.osd)
                .collect();
            if let Some(osd) = stale.iter().find(|osd| !placed.contains(osd)) {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    format!("OSD {osd} holds no copy of stripe {stripe} of file {file}"),
                ));
            }
            for osd in &placed {
                if self.store.meta(&key(file, stripe, *osd))?.is_some() {
                    stale.push(*osd);
                }
            }
            stale.sort_unstable();
            stale.dedup();
            let current = placed.len().saturating_sub(stale.len());
            let needed = effective_min(partition.min_size, placed.len());
            if current < needed {
                return Err(MdsError::refused(
                    ErrorCode::Busy,
                    format!(
                        "stripe {stripe} of file {file} would keep {current} current copies \
                         of {}: a change in partition {} needs {needed} (its min_size; a \
                         repairing scrub puts the others back)",
                        placed.len(),
                        partition.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether `who` may record `n` copies of `file` as missed (a writer of the file, or
    /// the user an id not linked yet is reserved to); the file's partition.
    fn may_record(&self, who: &Principal, file: u64, n: usize) -> Result<u64> {
        if n == 0 || n > MISSED_COPIES_PER_REQUEST_MAX {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("a record names 1 to {MISSED_COPIES_PER_REQUEST_MAX} copies"),
            ));
        }
        let Some(inode) = self.store.inode(file)? else {
            // A put's data is stored under a reserved id before its file is linked.
            return lock(&self.reservations)
                .reserved_to(who.uid, file)
                .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchFile, format!("file {file}")));
        };
        if inode.is_dir || !(who.is_admin() || allowed(who, &inode, WRITE)) {
            return Err(MdsError::refused(
                ErrorCode::PermissionDenied,
                "only a writer of the file records its copies as missed",
            ));
        }
        Ok(inode.partition)
    }

    /// The number the next record gets.
    fn next_seq(&self) -> Result<u64> {
        match self.store.meta(SEQ_KEY)? {
            Some(bytes) => decode_u64(SEQ_KEY, &bytes),
            None => Ok(1),
        }
    }

    /// OSD `osd` knows every record numbered below `next`. On a shared store, also
    /// written there for the other instances (issue 42: an OSD tells the one it checks
    /// in at).
    fn knows(&self, osd: u64, next: u64) -> Result<()> {
        // What other instances wrote first, so that a lower number is never written
        // over a higher one.
        self.stored_knows()?;
        let moved = {
            let mut known = lock(&self.missed.known);
            let at = known.entry(osd).or_insert(0);
            let moved = next > *at;
            *at = (*at).max(next);
            moved
        };
        if moved && self.store.shared() {
            let key = format!("{KNOWS_PREFIX}{osd:x}");
            self.store
                .commit(Batch(vec![Op::PutMeta(key, encode_u64(next))]))?;
        }
        Ok(())
    }

    /// Issue 42: takes in what other instances were told OSDs know.
    fn stored_knows(&self) -> Result<()> {
        if !self.store.shared() {
            return Ok(());
        }
        for (key, value) in self.store.metas(KNOWS_PREFIX)? {
            let osd = key
                .strip_prefix(KNOWS_PREFIX)
                .and_then(|id| u64::from_str_radix(id, 16).ok());
            if let (Some(osd), Ok(next)) = (osd, decode_u64(KNOWS_PREFIX, &value)) {
                let mut known = lock(&self.missed.known);
                let at = known.entry(osd).or_insert(0);
                *at = (*at).max(next);
            }
        }
        Ok(())
    }

    /// Of `records` of `file`, those whose OSD may not know them: not told, not asked
    /// for the list since, and not silent long enough for its lease to have ended (it
    /// then checks in before it serves).
    /// A record repaired and forgotten since is known.
    fn still_unknown(
        &self,
        file: u64,
        records: Vec<MissedCopy>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let mut pending = Vec::new();
        // An OSD silent long enough serves nothing until it checks in (its lease, issue
        // 41); on a shared store, the time another instance heard it may reach this one
        // late.
        let lag = if self.store.shared() {
            maat_proto::limits::OSD_HEARD_LAG_MILLIS
        } else {
            0
        };
        self.stored_liveness()?;
        self.stored_knows()?;
        for r in records {
            let known = lock(&self.missed.known).get(&r.osd).copied().unwrap_or(0);
            if known > r.seq || self.liveness.silent(r.osd, now.0, lag) {
                continue;
            }
            if self.store.meta(&key(file, r.stripe, r.osd))?.is_none() {
                continue;
            }
            pending.push(r);
        }
        Ok(match pending.is_empty() {
            true => MdsResponse::Ok,
            false => MdsResponse::MissedCopies(pending),
        })
    }

    /// Forgets the records of files that no longer exist (their objects are no longer
    /// read); returns how many records remain. Called under the write lock.
    fn forget_removed_files(&self) -> Result<usize> {
        let rows = self.store.metas(PREFIX)?;
        let mut batch = Batch::default();
        let mut kept = 0;
        for (k, _) in rows {
            let (file, _, _) = parse_key(&k)?;
            match self.store.inode(file)? {
                Some(_) => kept += 1,
                None => {
                    batch.push(Op::DeleteMeta(k));
                }
            }
        }
        if !batch.0.is_empty() {
            self.store.commit(batch)?;
        }
        Ok(kept)
    }

    /// Issue 41, "health at a glance": the copies recorded as missed now
    /// (`copies_missed`), the objects they belong to (`objects_degraded`), and per
    /// registered OSD (`copies_missed_on:ID`, 0 included), for `maat stats`,
    /// `/metrics` and `maat health`. Records of removed files and of stripes past a
    /// file's end hold no data anyone reads and are not counted. Empty if the store
    /// fails (no figure rather than a wrong one).
    pub(crate) fn degraded_counters(&self) -> Vec<(String, u64)> {
        self.degraded_counts().unwrap_or_default()
    }

    fn degraded_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut per_osd: std::collections::BTreeMap<u64, u64> =
            self.store.osds()?.iter().map(|o| (o.id, 0)).collect();
        let mut objects = std::collections::BTreeSet::new();
        let mut copies = 0u64;
        // Records come in file order: one inode read per file.
        let mut file_stripes: Option<(u64, u64)> = None;
        for r in records(self.store.metas(PREFIX)?)? {
            let stripes = match file_stripes {
                Some((file, stripes)) if file == r.file => stripes,
                _ => {
                    let stripes = self
                        .store
                        .inode(r.file)?
                        .map_or(0, |i| i.size.div_ceil(maat_proto::msg::STRIPE_UNIT_BYTES));
                    file_stripes = Some((r.file, stripes));
                    stripes
                }
            };
            if u64::from(r.copy.stripe) >= stripes {
                continue;
            }
            copies += 1;
            objects.insert((r.file, r.copy.stripe));
            *per_osd.entry(r.copy.osd).or_default() += 1;
        }
        let mut out = vec![
            ("copies_missed".to_string(), copies),
            ("objects_degraded".to_string(), objects.len() as u64),
        ];
        out.extend(
            per_osd
                .into_iter()
                .map(|(osd, n)| (format!("copies_missed_on:{osd}"), n)),
        );
        Ok(out)
    }

    /// `MdsRequest::MissedCopiesOf`: the records of `file` (administrator only).
    pub(crate) fn missed_copies_of(&self, who: &Principal, file: u64) -> Result<MdsResponse> {
        require_admin(who)?;
        let mut copies: Vec<MissedCopy> = records(self.store.metas(&file_prefix(file))?)?
            .into_iter()
            .filter(|r| r.file == file)
            .map(|r| r.copy)
            .collect();
        copies.sort_unstable();
        Ok(MdsResponse::MissedCopies(copies))
    }

    /// `MdsRequest::CopiesRepaired`: forgets each record of `file` still numbered as
    /// given (administrator only).
    pub(crate) fn copies_repaired(
        &self,
        who: &Principal,
        file: u64,
        copies: &[MissedCopy],
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        if copies.len() > MISSED_COPIES_PER_REQUEST_MAX {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("at most {MISSED_COPIES_PER_REQUEST_MAX} copies at once"),
            ));
        }
        let write = self.writing()?;
        let mut batch = Batch::default();
        for c in copies {
            let k = key(file, c.stripe, c.osd);
            if let Some(bytes) = self.store.meta(&k)? {
                if decode_u64(&k, &bytes)? == c.seq {
                    batch.push(Op::DeleteMeta(k));
                }
            }
        }
        if batch.0.is_empty() {
            return Ok(MdsResponse::Ok);
        }
        self.store.commit(batch)?;
        drop(write);
        // Their OSDs serve the repaired copies again from their next check-in.
        Ok(MdsResponse::Ok)
    }

    /// `MdsPlainRequest::MissedCopies`: the objects whose copy on `osd` is recorded as
    /// missed, for an OSD holding the join key. Its MACs count as background work.
    pub(crate) fn missed_for_osd(
        &self,
        osd: u64,
        nonce: &[u8; 16],
        applied: u64,
        request_mac: &[u8; 32],
        now: UnixMillis,
    ) -> Result<MdsPlainResponse> {
        let join = self.check_in_key(osd)?;
        if !maat_crypto::ct_eq(&missed_request_mac(&join, osd, nonce, applied), request_mac) {
            return Err(MdsError::refused(
                ErrorCode::AuthenticationFailed,
                format!("missed copies are listed for OSD {osd} under its check-in key"),
            ));
        }
        // This request is a check-in too, and the one the OSD's lease runs from (it was
        // sent after the OSD's `Revocations`): heard now, so that the MDS never counts
        // the OSD silent before the lease ends.
        self.liveness.heard(osd, now.0);
        if self.store.shared() {
            if let Some(batch) = self.liveness.write_through(osd, now.0) {
                self.store.commit(batch.clone())?;
                self.liveness.committed(&batch);
            }
        }
        // What the OSD applied from its last answer (a replayed request claims only an
        // older number: the highest stands).
        self.knows(osd, applied)?;
        // Every record below `next` is committed before the list is read.
        let next = self.next_seq()?;
        let mut objects: Vec<(u64, u32)> = records(self.store.metas(PREFIX)?)?
            .into_iter()
            .filter(|r| r.copy.osd == osd)
            .map(|r| (r.file, r.copy.stripe))
            .collect();
        objects.sort_unstable();
        objects.dedup();
        let mac = missed_mac(&join, osd, nonce, next, &objects);
        Ok(MdsPlainResponse::MissedCopies { objects, next, mac })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_and_numbers_read_back() {
        let k = key(0x1234, 7, 3);
        assert_eq!(parse_key(&k).unwrap(), (0x1234, 7, 3));
        assert!(k.starts_with(&file_prefix(0x1234)));
        assert!(!key(0x12345, 7, 3).starts_with(&file_prefix(0x1234)));
        assert_eq!(decode_u64("x", &encode_u64(42)).unwrap(), 42);
        assert!(decode_u64("x", &[2, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(decode_u64("x", &[1, 0]).is_err());
        assert!(parse_key("copies_missed/zz/1/2").is_err());
    }
}
