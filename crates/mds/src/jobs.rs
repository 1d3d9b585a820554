//! SPEC M10 at the MDS: secure delegation (paper 000 §3.5, `openg` / `openfh`).
//!
//! A job's lead makes a temporary Ed25519 *computation key* and registers its public half
//! (`JobCreate`); the MDS answers with a key lifetime token (one capability lifetime
//! long). `OpenG` opens a file for the job: the same permission checks as an open by the
//! lead, then a capability whose U is the hash of the computation key, inside a signed
//! file handle (two signatures per `openg`, none per participant). Participants hold the
//! private key (sealed to them by the lead, `job_bundle`) and prove it to each OSD once
//! per session; an OSD serves them while the newest lifetime token lasts.
//!
//! Only the lead renews the lifetime (`JobRenew`), and only while the lead may still
//! access every file the job opened in the mode it opened it (M7: chmod, chown, group
//! changes and user removal end a job within one lifetime, with no message to any OSD).
//! `JobEnd` (the lead or the administrator) revokes the key at once through an M9
//! notice. Anyone may fetch the newest lifetime token (`JobLifetime`): it is public, and
//! participants need the lead's renewals.
//!
//! Jobs are durable (a versioned `meta` record `job/<key hash hex>` each, written before
//! the answer) and kept until every handle issued for them has expired: a key is never
//! registered twice, so nobody (a participant, or a stranger who saw the public key) can
//! become a job's lead after an MDS restart and revive its handles. A handle's capability
//! lasts [`JOB_HANDLE_LIFETIME_MILLIS`]; the key lifetime is what bounds access. Revoking
//! a lead (M9) revokes the keys of the jobs it leads in the same notice.

use crate::{lock, Batch, MdsError, MetaStore, Op, Principal, Result, CLOCK_SKEW_MILLIS};
use maat_crypto::sign::{Signature, VerifyingKey, SIGNATURE_BYTES};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::delegation::{
    computation_key_hash, set_size_message, stat_message, verify_file_handle, FileHandle,
    KeyLifetimeToken, HANDLE_FLAG_ENCRYPTED, HANDLE_FLAG_RANGES,
};
use maat_proto::msg::{Access, ErrorCode, MdsResponse};
use maat_proto::protection::Protection;
use maat_proto::signed::{self, Unverified};
use maat_proto::{CapabilityId, FileId, UnixMillis, UserId};
use std::collections::HashMap;
use std::sync::Mutex;

pub use crate::limits::JOBS_MAX;
pub use crate::limits::JOBS_PER_LEAD_MAX;
pub use crate::limits::JOB_HANDLE_LIFETIME_MILLIS;
/// Prefix of the `meta` records holding jobs.
pub const JOB_META_PREFIX: &str = "job/";
/// Layout version of a job record: `version(1) ‖ postcard(JobRecord)`.
const JOB_RECORD_FORMAT: u8 = 1;
pub use crate::limits::JOB_FILES_MAX;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Job {
    lead: u64,
    /// Files opened for the job and the mode bits each was opened in.
    files: Vec<(u64, u8)>,
    /// The newest lifetime token and its expiry.
    lifetime: Vec<u8>,
    expiry: u64,
    ended: bool,
    /// When the last handle issued for the job expires: the record is kept until then.
    retain_until: u64,
}

impl Job {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut out = vec![JOB_RECORD_FORMAT];
        out.extend(
            postcard::to_allocvec(self).map_err(|e| {
                MdsError::refused(ErrorCode::Internal, format!("encoding a job: {e}"))
            })?,
        );
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        match bytes.split_first() {
            Some((&JOB_RECORD_FORMAT, body)) => postcard::from_bytes(body)
                .map_err(|e| MdsError::refused(ErrorCode::Internal, format!("job record: {e}"))),
            _ => Err(MdsError::refused(
                ErrorCode::Internal,
                "job record of an unknown version",
            )),
        }
    }

    fn live(&self, now: UnixMillis) -> bool {
        self.retain_until > now.0
    }
}

fn meta_key(hash: &[u8; 32]) -> String {
    format!("{JOB_META_PREFIX}{}", hex::encode(hash))
}

/// The jobs this MDS knows: the durable records, loaded on first use.
#[derive(Default)]
pub(crate) struct Jobs {
    jobs: Mutex<Option<HashMap<[u8; 32], Job>>>,
}

fn refused(code: ErrorCode, detail: impl Into<String>) -> MdsError {
    MdsError::refused(code, detail)
}

fn unknown_job() -> MdsError {
    refused(
        ErrorCode::InvalidArgument,
        "no such job (or its last handle expired): its lead creates a new one",
    )
}

fn mode_name(mode: Mode) -> &'static str {
    match mode.bits() {
        1 => "read",
        2 => "write",
        _ => "read and write",
    }
}

impl<S: MetaStore> crate::Mds<S> {
    /// Runs `f` on the job table (loaded from the store on first use; records whose
    /// handles have all expired are deleted then).
    fn with_jobs<T>(
        &self,
        now: UnixMillis,
        f: impl FnOnce(&mut HashMap<[u8; 32], Job>) -> Result<T>,
    ) -> Result<T> {
        let mut slot = lock(&self.jobs.jobs);
        if slot.is_none() {
            let mut jobs = HashMap::new();
            let mut batch = Batch::default();
            for (key, bytes) in self.store.metas(JOB_META_PREFIX)? {
                let hash = key
                    .strip_prefix(JOB_META_PREFIX)
                    .and_then(|h| hex::decode(h).ok())
                    .and_then(|h| <[u8; 32]>::try_from(h).ok());
                // A record this build cannot read is not dropped: its key would become
                // free to register again.
                let hash = hash.ok_or_else(|| {
                    refused(ErrorCode::Internal, format!("job record {key}: bad key"))
                })?;
                let job = Job::decode(&bytes)?;
                if job.live(now) {
                    jobs.insert(hash, job);
                } else {
                    batch.push(Op::DeleteMeta(key));
                }
            }
            self.store.commit(batch)?;
            *slot = Some(jobs);
        }
        let jobs = slot
            .as_mut()
            .ok_or_else(|| refused(ErrorCode::Internal, "job table not loaded"))?;
        f(jobs)
    }

    /// Writes one job durably (under the job table's lock, so writes are in order).
    fn persist(&self, hash: &[u8; 32], job: &Job) -> Result<()> {
        let mut batch = Batch::default();
        batch.push(Op::PutMeta(meta_key(hash), job.encode()?));
        self.store.commit(batch)?;
        Ok(())
    }

    fn sign_lifetime(&self, key: [u8; 32], lead: u64, now: UnixMillis) -> (Vec<u8>, u64) {
        let expiry = now.plus_millis(self.config.capability_lifetime_millis);
        let token = KeyLifetimeToken {
            computation_key: key,
            lead: UserId(lead),
            start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
            expiry,
        };
        (
            signed::sign(token, &self.signing).encoded().to_vec(),
            expiry.0,
        )
    }

    fn not_revoked(&self, who: &Principal, now: UnixMillis) -> Result<()> {
        if self.user_revoked(who.uid, now)? {
            return Err(refused(
                ErrorCode::Revoked,
                "this user's capabilities are revoked for now (maat admin revoke)",
            ));
        }
        Ok(())
    }

    /// Ends, durably, the live jobs `uids` lead and returns their keys (ended before or
    /// now): a revoked lead's participants are cut off with it, and its jobs never come
    /// back when the revocation lapses (SPEC M9 + M10).
    pub(crate) fn end_jobs_led_by(&self, uids: &[u64], now: UnixMillis) -> Result<Vec<[u8; 32]>> {
        if uids.is_empty() {
            return Ok(Vec::new());
        }
        self.with_jobs(now, |jobs| {
            let mut keys = Vec::new();
            for (hash, job) in jobs.iter_mut() {
                if !job.live(now) || !uids.contains(&job.lead) {
                    continue;
                }
                if !job.ended {
                    let mut ended = job.clone();
                    ended.ended = true;
                    self.persist(hash, &ended)?;
                    *job = ended;
                }
                keys.push(*hash);
            }
            Ok(keys)
        })
    }

    /// `JobCreate`: registers a computation key with the requester as lead.
    pub(crate) fn job_create(
        &self,
        who: &Principal,
        key: [u8; 32],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        // Under the read side of the access-control gate: a revocation of this user
        // (which takes the write side) is wholly before (refused here) or after (and
        // then ends this job).
        let (_gate, _) = self.gate_and_acl()?;
        self.not_revoked(who, now)?;
        VerifyingKey::from_bytes(&key).map_err(|_| {
            refused(
                ErrorCode::InvalidArgument,
                "the computation key is not an Ed25519 public key",
            )
        })?;
        let hash = computation_key_hash(&key);
        self.with_jobs(now, |jobs| {
            // Never twice, ended or not, until every handle of the job has expired.
            if jobs.contains_key(&hash) || self.store.meta(&meta_key(&hash))?.is_some() {
                return Err(refused(
                    ErrorCode::AlreadyExists,
                    "a job with this computation key exists",
                ));
            }
            if jobs.len() >= JOBS_MAX {
                let gone: Vec<[u8; 32]> = jobs
                    .iter()
                    .filter(|(_, j)| !j.live(now))
                    .map(|(h, _)| *h)
                    .collect();
                let mut batch = Batch::default();
                for h in &gone {
                    batch.push(Op::DeleteMeta(meta_key(h)));
                }
                self.store.commit(batch)?;
                jobs.retain(|h, _| !gone.contains(h));
            }
            let mine = jobs
                .values()
                .filter(|j| j.lead == who.uid && j.live(now))
                .count();
            if jobs.len() >= JOBS_MAX || mine >= JOBS_PER_LEAD_MAX {
                return Err(refused(
                    ErrorCode::Busy,
                    format!(
                        "too many jobs (at most {JOBS_PER_LEAD_MAX} per lead until their \
                         handles expire, {JOBS_MAX} in all)"
                    ),
                ));
            }
            let (lifetime, expiry) = self.sign_lifetime(key, who.uid, now);
            let job = Job {
                lead: who.uid,
                files: Vec::new(),
                lifetime: lifetime.clone(),
                expiry,
                ended: false,
                retain_until: expiry,
            };
            self.persist(&hash, &job)?;
            jobs.insert(hash, job);
            Ok(MdsResponse::JobLifetime(lifetime))
        })
    }

    /// Refuses unless the job exists, `who` leads it and it has not ended.
    fn lead_check(
        &self,
        who: &Principal,
        hash: &[u8; 32],
        what: &str,
        now: UnixMillis,
    ) -> Result<()> {
        self.with_jobs(now, |jobs| {
            let job = jobs.get(hash).ok_or_else(unknown_job)?;
            if job.lead != who.uid {
                return Err(refused(
                    ErrorCode::PermissionDenied,
                    format!("only the job's lead may {what}"),
                ));
            }
            if job.ended {
                return Err(refused(ErrorCode::Revoked, "the job was ended"));
            }
            Ok(())
        })
    }

    /// `OpenG`: opens `path` as the lead would, and returns a file handle whose capability
    /// is bound to the computation key; `ranged` (`OpenGRanges`): for reading by the
    /// ranges the file's owner granted each participant (SPEC H6).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn openg(
        &self,
        who: &Principal,
        key: [u8; 32],
        path: &str,
        (access, ranged): (Access, bool),
        create: Option<u16>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        let hash = computation_key_hash(&key);
        self.lead_check(who, &hash, "open files for it", now)?;
        // The lead's own open: path search, permission bits, creation. No capability.
        let stat = match self.open_file(who, path, access, create, &[], None, now, rng)? {
            MdsResponse::Opened { stat, .. } => stat,
            _ => return Err(refused(ErrorCode::Internal, "open answered oddly")),
        };
        if stat.protection == Protection::NoSec {
            return Err(refused(
                ErrorCode::InvalidArgument,
                "jobs delegate capabilities; a NOSEC partition has none",
            ));
        }
        if ranged && !stat.encrypted {
            return Err(refused(
                ErrorCode::InvalidArgument,
                format!("{path} is not encrypted: ranges of it cannot be kept apart by keys"),
            ));
        }
        if stat.encrypted && access != Access::Read {
            // A participant's write would seal blocks and record their generations with
            // the size, which `SetSizeByHandle` does not carry; refused rather than
            // leaving blocks no reader can check.
            return Err(refused(
                ErrorCode::InvalidArgument,
                format!("{path} is encrypted: a job opens encrypted files for reading only (write it through a job as a file stored with `maat put --no-encrypt`)"),
            ));
        }
        // Under the read side of the access-control gate from the check until the file is
        // recorded in the job: a later change is seen by the lead's next renewal.
        let (_gate, acl) = self.gate_and_acl()?;
        self.not_revoked(who, now)?;
        let perm = self.current_perm(stat.id)?;
        let mode = match access {
            Access::Read => Mode::READ,
            Access::ReadWrite
                if acl.permits(
                    who.uid,
                    perm,
                    crate::grouping::READ | crate::grouping::WRITE,
                ) =>
            {
                Mode::READ_WRITE
            }
            Access::ReadWrite => Mode::WRITE,
        };
        // SPEC H6: keys only by each participant's permit (the capability's mode; the
        // handle and the job's record keep the access itself).
        let capability_mode = if ranged {
            mode.with(Mode::RANGE_KEYS)
        } else {
            mode
        };
        if !acl.permits(who.uid, perm, crate::capabilities::want_bits(mode)) {
            return Err(refused(
                ErrorCode::PermissionDenied,
                "access changed while the file was being opened",
            ));
        }
        let start = UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS));
        let expiry = now.plus_millis(JOB_HANDLE_LIFETIME_MILLIS);
        self.with_jobs(now, |jobs| {
            let job = jobs.get_mut(&hash).ok_or_else(unknown_job)?;
            if job.ended {
                return Err(refused(ErrorCode::Revoked, "the job was ended"));
            }
            let full = job.files.len() >= JOB_FILES_MAX;
            match job.files.iter_mut().find(|(f, _)| *f == stat.id) {
                Some((_, m)) => *m |= mode.bits(),
                None if full => {
                    return Err(refused(
                        ErrorCode::Busy,
                        format!("a job opens at most {JOB_FILES_MAX} files"),
                    ))
                }
                None => job.files.push((stat.id, mode.bits())),
            }
            job.retain_until = job.retain_until.max(expiry.0);
            let job = job.clone();
            self.persist(&hash, &job)
        })?;
        let capability = Capability {
            users: Principals::ComputationKey(hash),
            files: Files::File(FileId(stat.id)),
            id: CapabilityId(rng.next_u64()),
            mode: capability_mode,
            protection: stat.protection,
            start,
            expiry,
        };
        let capability = signed::sign(capability, &self.signing).encoded().to_vec();
        let handle = FileHandle {
            handle_id: rng.next_u64(),
            file: FileId(stat.id),
            path: path.as_bytes().to_vec(),
            mode,
            // An encrypted file's reader asks the MDS for its crypt record
            // (`StatByHandle`) and the KDS for its keys (`KeysForJob`).
            flags: match (stat.encrypted, ranged) {
                (false, _) => 0,
                (true, false) => HANDLE_FLAG_ENCRYPTED,
                (true, true) => HANDLE_FLAG_ENCRYPTED | HANDLE_FLAG_RANGES,
            },
            capability,
            computation_key: key,
            start,
            expiry,
        };
        let handle = signed::sign(handle, &self.signing).encoded().to_vec();
        Ok(MdsResponse::FileHandle { handle, stat })
    }

    /// `JobRenew`: a new lifetime token, for the lead only, while the lead may still
    /// access every file of the job as opened. The current token is handed out again
    /// while it has half its lifetime left (one signature per half lifetime at most).
    pub(crate) fn job_renew(
        &self,
        who: &Principal,
        key: [u8; 32],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let hash = computation_key_hash(&key);
        self.lead_check(who, &hash, "renew its key", now)?;
        let (_gate, acl) = self.gate_and_acl()?;
        self.not_revoked(who, now)?;
        let half = self.config.capability_lifetime_millis / 2;
        // The current token while it has half its lifetime left; otherwise the files to
        // re-check before signing a new one.
        let (current, files) = self.with_jobs(now, |jobs| {
            let job = jobs.get(&hash).ok_or_else(unknown_job)?;
            Ok(if job.expiry > now.0.saturating_add(half) {
                (Some(job.lifetime.clone()), Vec::new())
            } else {
                (None, job.files.clone())
            })
        })?;
        if let Some(current) = current {
            return Ok(MdsResponse::JobLifetime(current));
        }
        for (file, bits) in files {
            let mode = Mode::from_bits(bits).unwrap_or(Mode::READ_WRITE);
            let allowed = match self.current_perm(file) {
                Ok(perm) => acl.permits(who.uid, perm, crate::capabilities::want_bits(mode)),
                Err(_) => false,
            };
            if !allowed {
                return Err(refused(
                    ErrorCode::PermissionDenied,
                    format!(
                        "the lead may no longer {} file {file} (removed, or its permissions \
                         changed): the job's key is not renewed and ends at its expiry",
                        mode_name(mode)
                    ),
                ));
            }
        }
        let (lifetime, expiry) = self.sign_lifetime(key, who.uid, now);
        self.with_jobs(now, |jobs| {
            let job = jobs.get_mut(&hash).ok_or_else(unknown_job)?;
            if job.ended {
                return Err(refused(ErrorCode::Revoked, "the job was ended"));
            }
            job.lifetime = lifetime.clone();
            job.expiry = expiry;
            job.retain_until = job.retain_until.max(expiry);
            let job = job.clone();
            self.persist(&hash, &job)
        })?;
        Ok(MdsResponse::JobLifetime(lifetime))
    }

    /// `JobLifetime`: the newest lifetime token of a job key.
    pub(crate) fn job_lifetime(&self, hash: &[u8; 32], now: UnixMillis) -> Result<MdsResponse> {
        self.with_jobs(now, |jobs| {
            let job = jobs.get(hash).ok_or_else(unknown_job)?;
            if job.ended {
                return Err(refused(ErrorCode::Revoked, "the job was ended"));
            }
            Ok(MdsResponse::JobLifetime(job.lifetime.clone()))
        })
    }

    /// `JobEnd`: the lead or the administrator revokes the job key at once (once).
    pub(crate) fn job_end(
        &self,
        who: &Principal,
        hash: [u8; 32],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        self.with_jobs(now, |jobs| match jobs.get_mut(&hash) {
            Some(job) if job.lead == who.uid || who.is_admin() => {
                if !job.ended {
                    // Durable before the notice: the key is never renewed again. A
                    // notice that then fails is sent by the next JobEnd.
                    let mut ended = job.clone();
                    ended.ended = true;
                    self.persist(&hash, &ended)?;
                    *job = ended;
                }
                Ok(())
            }
            Some(_) => Err(refused(
                ErrorCode::PermissionDenied,
                "only the job's lead or the administrator may end it",
            )),
            // The administrator may revoke a key the MDS no longer knows.
            None if who.is_admin() => Ok(()),
            None => Err(unknown_job()),
        })?;
        self.revoke_entries(Vec::new(), Vec::new(), vec![hash], now)
            .map_err(|e| match e {
                MdsError::Refused(w) if w.code == ErrorCode::InvalidArgument => refused(
                    ErrorCode::InvalidArgument,
                    "the job was ended already (its key is revoked by a notice in force)",
                ),
                other => other,
            })
    }

    /// `SetSizeByHandle`: a participant records the size of a file it wrote through a
    /// job's write handle, proving possession of the computation key.
    pub(crate) fn set_size_by_handle(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        handle: &[u8],
        size: u64,
        proof: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let (handle, _) = self.proven_handle(who, session, handle, proof, now, |session, h| {
            set_size_message(session, h.handle_id, size)
        })?;
        if !handle.mode.allows(Mode::WRITE) {
            return Err(refused(
                ErrorCode::PermissionDenied,
                "the job opened this file for reading only",
            ));
        }
        let _guard = self.writing()?;
        let inode = self.job_file(&handle)?;
        self.commit_size(inode, size, now)
    }

    /// `StatByHandle` (SPEC M10 with H3): the attributes of a job's file, with the crypt
    /// record its reads need, for a participant who proves the job's key.
    pub(crate) fn stat_by_handle(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        handle: &[u8],
        proof: &[u8],
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        let (handle, capability) =
            self.proven_handle(who, session, handle, proof, now, |session, h| {
                stat_message(session, h.handle_id)
            })?;
        let inode = self.job_file(&handle)?;
        let mut stat = self.stat_of(who, &inode)?;
        stat.crypt = inode.crypt.clone();
        if capability.mode.allows(Mode::RANGE_KEYS) {
            // SPEC H6 per job: the ranges the owner granted this participant, in a permit
            // naming the job's capability and the participant (checked by the KDS against
            // the ticket the keys are sealed to).
            let path = String::from_utf8_lossy(&handle.path).into_owned();
            let ranges = crate::key_grants::granted_ranges(&inode, who.uid, &path)?;
            if ranges.is_empty() {
                return Err(refused(
                    ErrorCode::PermissionDenied,
                    format!(
                        "{path}: the job reads it by ranges and none is granted to you \
                         (its owner grants them: maat keys grant)"
                    ),
                ));
            }
            // One capability lifetime, as a user's range open gets, not the handle's
            // twelve hours: a grant the owner takes back ends with it (the participant
            // asks again, and gets what is granted then).
            let expiry = UnixMillis(
                capability
                    .expiry
                    .0
                    .min(now.0 + self.config.capability_lifetime_millis),
            );
            stat.key_ranges = Some(self.range_permit(
                &inode,
                &path,
                who.uid,
                ranges,
                (capability.id, capability.start, expiry),
            )?);
        }
        Ok(MdsResponse::Stat(stat))
    }

    /// The file a job's handle names, while it exists.
    fn job_file(&self, handle: &FileHandle) -> Result<crate::Inode> {
        self.store
            .inode(handle.file.0)?
            .ok_or_else(|| refused(ErrorCode::NoSuchFile, "the job's file was removed"))
    }

    /// A file handle of a live job, checked, and its capability, whose job key signed
    /// `message(session, handle)` (`proof`) on this MDS session: what a participant's
    /// requests by handle rest on. The requester must not be revoked, nor the handle's
    /// capability.
    fn proven_handle(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        handle: &[u8],
        proof: &[u8],
        now: UnixMillis,
        message: impl FnOnce(&[u8; 16], &FileHandle) -> Vec<u8>,
    ) -> Result<(FileHandle, Capability)> {
        let session = session
            .ok_or_else(|| refused(ErrorCode::InvalidArgument, "needs an authenticated session"))?;
        self.not_revoked(who, now)?;
        let mds_key = self.signing.verifying_key();
        let verified =
            verify_file_handle(Unverified::<FileHandle>::decode(handle)?, &mds_key, now)?;
        let handle = verified.handle.body().clone();
        let capability = verified.capability.body().clone();
        let hash = computation_key_hash(&handle.computation_key);
        if self.capability_revoked(capability.id.0, now)? {
            return Err(refused(
                ErrorCode::Revoked,
                "the handle's capability was revoked",
            ));
        }
        self.with_jobs(now, |jobs| {
            let job = jobs.get(&hash).ok_or_else(unknown_job)?;
            if job.ended {
                return Err(refused(ErrorCode::Revoked, "the job was ended"));
            }
            if job.expiry <= now.0 {
                return Err(refused(
                    ErrorCode::CapabilityExpired,
                    "the job key's lifetime ended (only its lead renews it)",
                ));
            }
            Ok(())
        })?;
        let signature: [u8; SIGNATURE_BYTES] = proof
            .try_into()
            .map_err(|_| refused(ErrorCode::Malformed, "a proof is one Ed25519 signature"))?;
        VerifyingKey::from_bytes(&handle.computation_key)
            .map_err(|_| refused(ErrorCode::Malformed, "computation key"))?
            .with_counters(self.counters.clone())
            .verify(&message(session, &handle), &Signature(signature))
            .map_err(|_| {
                refused(
                    ErrorCode::BadSignature,
                    "the request was not signed with the job's key",
                )
            })?;
        Ok((handle, capability))
    }

    /// Remembers a user's newest login ticket (`UserTicket` hands it to job leads).
    pub(crate) fn remember_ticket(&self, uid: u64, ticket: &[u8]) {
        let mut tickets = lock(&self.tickets);
        if tickets.len() >= crate::SESSIONS_CACHED_MAX && !tickets.contains_key(&uid) {
            tickets.clear();
        }
        tickets.insert(uid, ticket.to_vec());
    }

    /// `UserTicket`: the newest login ticket of a user.
    pub(crate) fn user_ticket(&self, name: &str) -> Result<MdsResponse> {
        let user = self
            .store
            .user_by_name(name)?
            .ok_or_else(|| refused(ErrorCode::NoSuchUser, format!("no user {name}")))?;
        lock(&self.tickets)
            .get(&user.id)
            .cloned()
            .map(MdsResponse::Ticket)
            .ok_or_else(|| {
                refused(
                    ErrorCode::NotReady,
                    format!("{name} has not logged in since the MDS started"),
                )
            })
    }
}
