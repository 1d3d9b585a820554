//! SPEC M6 gathered batches: temporal batching (paper 000) and on-the-fly groups (paper
//! 002). Opens of one file for one mode share a batch, and one capability answers it;
//! under temporal batching, so do the opens of one user that arrive together (paper:
//! "4 opens of one file, or 4 by one user, within 20 ms").
//! This is the one place MDS logic waits: a batch's first request may wait the gather
//! window (temporal batching only) and for the signature in progress for the same file,
//! bounded by [`BATCH_WAIT_MILLIS_MAX`].

use super::{denied, key_byte, want_bits, IssueRequest};
use crate::grouping::{FileSel, Grant, GroupingConfig, Strategies, UserSel};
use crate::{lock, MetaStore, Result, ADMIN_UID};
use maat_crypto::CryptoRngCore;
use maat_proto::UnixMillis;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use crate::limits::BATCH_QUIET_MICROS;
pub use crate::limits::BATCH_QUIET_MIN_MICROS;
pub use crate::limits::BATCH_TRACKED_FILES_MAX;
pub use crate::limits::BATCH_WAIT_MILLIS_MAX;

/// What a batch gathers around: the opens of one file (its members are users), or the
/// opens by one user (its members are files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Subject {
    File(u64),
    User(u64),
}

impl Subject {
    /// The member `r` adds to a batch about this subject.
    fn member(self, r: &IssueRequest) -> u64 {
        match self {
            Subject::File(_) => r.uid,
            Subject::User(_) => r.file,
        }
    }
}

#[derive(Default)]
struct BatchState {
    members: BTreeSet<u64>,
    /// The capability and who it names, once signed (`None` inside: it failed).
    outcome: Option<Option<(Vec<u8>, Vec<u64>)>>,
}

#[derive(Default)]
struct GatherBatch {
    state: Mutex<BatchState>,
    done: Condvar,
}

type BatchKey = (Subject, u8);

#[derive(Default)]
pub(super) struct Batches {
    open: HashMap<BatchKey, Arc<GatherBatch>>,
    signing: HashSet<BatchKey>,
    /// Recent open times per file and per user (temporal batching's detector) and until
    /// when each stays batched.
    recent: HashMap<Subject, (VecDeque<u64>, u64)>,
}

impl Batches {
    /// Records an open of (or by) `subject`; true when it is (now) batched.
    fn observe(&mut self, subject: Subject, now: UnixMillis, cfg: &GroupingConfig) -> bool {
        if self.recent.len() >= BATCH_TRACKED_FILES_MAX && !self.recent.contains_key(&subject) {
            self.recent.retain(|_, (_, hot)| *hot > now.0);
        }
        let (times, hot_until) = self.recent.entry(subject).or_default();
        times.push_back(now.0);
        while times
            .front()
            .is_some_and(|t| now.0.saturating_sub(*t) > cfg.batch_detect_millis)
        {
            times.pop_front();
        }
        while times.len() > cfg.batch_threshold.max(1) as usize {
            times.pop_front();
        }
        if times.len() >= cfg.batch_threshold.max(1) as usize {
            *hot_until = now.0.saturating_add(cfg.batch_hot_millis);
        }
        *hot_until > now.0
    }

    fn is_hot(&self, subject: Subject, now: UnixMillis) -> bool {
        self.recent
            .get(&subject)
            .is_some_and(|(_, hot)| *hot > now.0)
    }
}

/// How long a gathering batch waits for one more member: three times the mean gap between
/// the members that joined so far (a dense crowd closes its batch soon after its last
/// arrival), never under [`BATCH_QUIET_MIN_MICROS`] nor over [`BATCH_QUIET_MICROS`]
/// (which it is until two have joined).
fn quiet_period(elapsed: Duration, joined: usize) -> Duration {
    let most = Duration::from_micros(BATCH_QUIET_MICROS);
    if joined < 2 {
        return most;
    }
    let gap = elapsed / u32::try_from(joined).unwrap_or(u32::MAX);
    (gap * 3).clamp(Duration::from_micros(BATCH_QUIET_MIN_MICROS), most)
}

impl<S: MetaStore> crate::Mds<S> {
    /// Temporal and on-the-fly groups: opens of one file for one mode share a batch (or,
    /// when the user is batched and the file is not, opens by one user); its first
    /// request signs one capability for everyone in it once the gather window (batched
    /// files and users only) has passed and no capability for the same subject is being
    /// signed.
    pub(super) fn gathered(
        &self,
        cfg: &GroupingConfig,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let byte = key_byte(r.wanted, r.protection);
        let (batch, leader, hot, subject) = {
            let mut table = lock(&self.issuer.batches);
            let (file_hot, user_hot) = if cfg.strategies.batch {
                (
                    table.observe(Subject::File(r.file), r.now, cfg),
                    table.observe(Subject::User(r.uid), r.now, cfg),
                )
            } else {
                (false, false)
            };
            // A crowd on one file first; a user's burst over many files otherwise.
            let (subject, hot) = if !file_hot && user_hot {
                (Subject::User(r.uid), true)
            } else {
                (Subject::File(r.file), file_hot)
            };
            let me = subject.member(r);
            match table.open.get(&(subject, byte)) {
                Some(b) => {
                    lock(&b.state).members.insert(me);
                    (b.clone(), false, hot, subject)
                }
                None => {
                    let b = Arc::new(GatherBatch::default());
                    lock(&b.state).members.insert(me);
                    table.open.insert((subject, byte), b.clone());
                    (b, true, hot, subject)
                }
            }
        };
        let key: BatchKey = (subject, byte);
        let me = subject.member(r);
        if !leader {
            return self.await_batch(&batch, me, r, rng);
        }
        let turn_started = std::time::Instant::now();
        let hot = {
            // On-the-fly: while another capability for this file is being signed, this
            // batch stays open and gathers.
            let mut table = lock(&self.issuer.batches);
            let mut waited = 0u64;
            while table.signing.contains(&key) && waited < BATCH_WAIT_MILLIS_MAX {
                let (t, _) = self
                    .issuer
                    .turn
                    .wait_timeout(table, Duration::from_millis(10))
                    .unwrap_or_else(|_| maat_proto::sync::poisoned());
                table = t;
                waited += 10;
            }
            // Opens that arrived meanwhile may have made the subject hot.
            hot || (cfg.strategies.batch && table.is_hot(subject, r.now))
        };
        let stats = &self.issuer.stats;
        let micros = |since: std::time::Instant| {
            u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
        };
        stats
            .batch_turn_micros
            .fetch_add(micros(turn_started), Ordering::Relaxed);
        let gather_started = std::time::Instant::now();
        if hot {
            // Temporal batching: gather while the batch still grows (a crowd arriving),
            // at most the gather window.
            let limit = Duration::from_millis(cfg.batch_gather_millis.min(BATCH_WAIT_MILLIS_MAX));
            let started = std::time::Instant::now();
            let first = lock(&batch.state).members.len();
            let mut size = first;
            while started.elapsed() < limit {
                std::thread::sleep(quiet_period(started.elapsed(), size - first));
                let now_size = lock(&batch.state).members.len();
                if now_size == size {
                    break;
                }
                size = now_size;
            }
        }
        {
            let mut table = lock(&self.issuer.batches);
            if table.open.get(&key).is_some_and(|b| Arc::ptr_eq(b, &batch)) {
                table.open.remove(&key);
            }
            table.signing.insert(key);
        }
        stats
            .batch_gather_micros
            .fetch_add(micros(gather_started), Ordering::Relaxed);
        let sign_started = std::time::Instant::now();
        let outcome = self.sign_batch(&batch, subject, hot, cfg.strategies, r, rng);
        stats
            .batch_sign_micros
            .fetch_add(micros(sign_started), Ordering::Relaxed);
        stats.batches_signed.fetch_add(1, Ordering::Relaxed);
        lock(&self.issuer.batches).signing.remove(&key);
        self.issuer.turn.notify_all();
        {
            let mut state = lock(&batch.state);
            state.outcome = Some(outcome.as_ref().ok().cloned());
        }
        batch.done.notify_all();
        let (encoded, members) = outcome?;
        if members.binary_search(&me).is_ok() {
            Ok((encoded, false))
        } else {
            Err(denied())
        }
    }

    fn sign_batch(
        &self,
        batch: &GatherBatch,
        subject: Subject,
        hot: bool,
        cfg_strategies: Strategies,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, Vec<u64>)> {
        let (_gate, acl) = self.gate_and_acl()?;
        let want = want_bits(r.wanted);
        if let Subject::User(uid) = subject {
            // One user's files: those that may join (same partition, still there) and
            // that it may still access in this mode, checked on the state held now.
            // Members left out ask alone.
            if self.user_revoked(uid, r.now)? {
                return Err(denied());
            }
            let asked: Vec<u64> = lock(&batch.state).members.iter().copied().collect();
            let files: Vec<u64> = self
                .joinable(r, asked)?
                .into_iter()
                .filter(|(_, perm)| acl.permits(uid, *perm, want))
                .map(|(f, _)| f)
                .collect();
            let grant = if files == [r.file] {
                let perm = self.current_perm(r.file)?;
                self.grant(&acl, cfg_strategies, r, perm, r.wanted)?
            } else {
                Grant {
                    users: UserSel::One(uid),
                    files: FileSel::from_files(files.clone()).ok_or_else(denied)?,
                    by: Strategies {
                        batch: files.len() > 1,
                        ..Strategies::default()
                    },
                }
            };
            let encoded = self.sign_and_cache(&grant, r, &acl, true, rng)?;
            return Ok((encoded, files));
        }
        let perm = self.current_perm(r.file)?;
        let members: Vec<u64> = lock(&batch.state)
            .members
            .iter()
            .copied()
            .filter(|u| {
                *u != ADMIN_UID
                    && acl.permits(*u, perm, want)
                    && !self.user_revoked(*u, r.now).unwrap_or(true)
            })
            .collect();
        let several = members.len() > 1;
        let grant = if members == [r.uid] {
            // Nobody joined: the requester's own grant, decided again on the state held
            // now (with the other strategies' sets, e.g. the directory's files).
            self.grant(&acl, cfg_strategies, r, perm, r.wanted)?
        } else {
            Grant {
                users: UserSel::from_subtrees(vec![members.clone()]).ok_or_else(denied)?,
                files: FileSel::One(r.file),
                by: Strategies {
                    batch: several && hot,
                    onthefly: several && !hot,
                    ..Strategies::default()
                },
            }
        };
        let encoded = self.sign_and_cache(&grant, r, &acl, true, rng)?;
        Ok((encoded, members))
    }

    fn await_batch(
        &self,
        batch: &GatherBatch,
        me: u64,
        r: &IssueRequest,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<u8>, bool)> {
        let outcome = {
            let mut state = lock(&batch.state);
            let mut waited = 0u64;
            while state.outcome.is_none() && waited < BATCH_WAIT_MILLIS_MAX {
                let (s, _) = batch
                    .done
                    .wait_timeout(state, Duration::from_millis(10))
                    .unwrap_or_else(|_| maat_proto::sync::poisoned());
                state = s;
                waited += 10;
            }
            state.outcome.clone().flatten()
        };
        match outcome {
            Some((encoded, members)) if members.binary_search(&me).is_ok() => Ok((encoded, false)),
            // The batch failed, timed out or left this user out (access changed): ask
            // alone, deciding afresh.
            _ => self.single(r, rng),
        }
    }

    fn single(&self, r: &IssueRequest, rng: &mut impl CryptoRngCore) -> Result<(Vec<u8>, bool)> {
        let (_gate, acl, _) = self.decide(r)?;
        let grant = Grant {
            users: UserSel::One(r.uid),
            files: FileSel::One(r.file),
            by: Strategies::default(),
        };
        Ok((self.sign_and_cache(&grant, r, &acl, false, rng)?, false))
    }
}

#[cfg(test)]
mod tests {
    use super::{quiet_period, BATCH_QUIET_MICROS, BATCH_QUIET_MIN_MICROS};
    use std::time::Duration;

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    #[test]
    fn a_dense_crowd_closes_its_batch_sooner_than_a_trickle() {
        // Until two have joined there is no gap to go by.
        assert_eq!(quiet_period(us(5_000), 1), us(BATCH_QUIET_MICROS));
        // Four joined in 200 µs: 50 µs apart, so wait three gaps.
        assert_eq!(quiet_period(us(200), 4), us(150));
        // Ten in 100 µs: never under the floor.
        assert_eq!(quiet_period(us(100), 10), us(BATCH_QUIET_MIN_MICROS));
        // Two in a millisecond: never over the ceiling.
        assert_eq!(quiet_period(us(1_000), 2), us(BATCH_QUIET_MICROS));
    }
}
