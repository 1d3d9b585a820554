//! SPEC M10 on the client: secure delegation (`openg` / `openfh`, paper 000 §3.5).
//!
//! A job's lead makes a temporary Ed25519 computation key ([`Client::job_create`]),
//! opens files for the job ([`Client::openg`]: one MDS request and two signatures per
//! file, whatever the number of participants), and hands each participant the private
//! key, the lifetime token and the handles sealed to that participant's login
//! ([`Client::job_export`] / [`Client::job_join`]). A participant turns a handle into an
//! [`Opened`] ([`Client::openfh`], no MDS request) and does I/O as with any open: before
//! the first request on a session to an OSD the client proves possession of the key to
//! that OSD (`SupplyProof`, one signature made here, one verified there), and when the
//! key's lifetime runs low the lead renews it (`JobRenew`) while a participant fetches
//! the lead's newest token (`JobLifetime`).

use super::*;
use maat_proto::capability::{Capability, Principals};
use maat_proto::delegation::{self, computation_key_hash, FileHandle, KeyLifetimeToken};
use maat_proto::job_bundle::{self, JobGrant};
use maat_proto::session::SessionKey;
use maat_proto::signed::Verified;
use maat_proto::UserId;
use std::collections::HashSet;

pub use crate::limits::JOB_REFRESH_AT_PERCENT_LEFT;

/// A job key this client holds, and the OSD sessions that have seen its proof.
pub(crate) struct HeldJob {
    key: SigningKey,
    lifetime: Vec<u8>,
    start: u64,
    expiry: u64,
    lead: u64,
    proven: HashSet<(u64, [u8; 16])>,
}

/// A verified file handle for a job.
#[derive(Debug, Clone)]
pub struct JobHandle {
    /// The signed handle.
    pub bytes: Vec<u8>,
    /// Its fields.
    pub handle: FileHandle,
}

fn token_error(what: &'static str) -> impl FnOnce(maat_proto::ProtoError) -> ClientError {
    move |source| ClientError::Token { what, source }
}

/// The capability's job key hash, when it is delegated (SPEC M10).
pub(crate) fn delegated_to(capability: &[u8]) -> Option<[u8; 32]> {
    match Unverified::<Capability>::decode(capability)
        .ok()?
        .unverified_body()
        .users
    {
        Principals::ComputationKey(hash) => Some(hash),
        _ => None,
    }
}

impl Client {
    fn verify_lifetime(&self, bytes: &[u8], key: &[u8; 32]) -> Result<Verified<KeyLifetimeToken>> {
        // The signature only: a lapsed token is still the job's (a participant fetches a
        // newer one when it needs it), so the window is checked at its own start.
        let token = Unverified::<KeyLifetimeToken>::decode(bytes)
            .and_then(|t| {
                let start = t.unverified_body().start;
                t.verify(&self.mds_key, start)
            })
            .map_err(token_error("key lifetime token"))?;
        if token.body().computation_key != *key {
            return Err(self.bad("mds", "lifetime token for another key"));
        }
        Ok(token)
    }

    /// Holds a job key for I/O under its handles (lead and participants alike).
    pub fn use_job(&self, key: SigningKey, lifetime: &[u8]) -> Result<()> {
        let public = key.verifying_key().to_bytes();
        let token = self.verify_lifetime(lifetime, &public)?;
        let hash = computation_key_hash(&public);
        let body = token.body();
        self.jobs.lock().insert(
            hash,
            HeldJob {
                key,
                lifetime: lifetime.to_vec(),
                start: body.start.0,
                expiry: body.expiry.0,
                lead: body.lead.0,
                proven: HashSet::new(),
            },
        );
        Ok(())
    }

    /// The lifetime token held for a job key (the newest this client has seen).
    pub fn job_lifetime_held(&self, key_hash: &[u8; 32]) -> Option<Vec<u8>> {
        self.jobs.lock().get(key_hash).map(|j| j.lifetime.clone())
    }

    /// Starts a job led by this user: a fresh computation key and its lifetime token.
    pub fn job_create(&self) -> Result<(SigningKey, Vec<u8>)> {
        let key = SigningKey::generate(&mut self.nonce_rng());
        let public = key.verifying_key().to_bytes();
        let lifetime = match self.mds_call(MdsRequest::JobCreate {
            computation_key: public,
        })? {
            MdsResponse::JobLifetime(t) => t,
            _ => return Err(self.bad("mds", "unexpected answer")),
        };
        self.verify_lifetime(&lifetime, &public)?;
        self.use_job(key.clone(), &lifetime)?;
        Ok((key, lifetime))
    }

    /// `openg`: opens `path` for the job of `key` (lead only); the handle's capability
    /// is bound to the key.
    pub fn openg(
        &self,
        key: &SigningKey,
        path: &str,
        access: Access,
        create: Option<u16>,
    ) -> Result<(JobHandle, FileStat)> {
        let public = key.verifying_key().to_bytes();
        self.openg_with(
            key,
            MdsRequest::OpenG {
                computation_key: public,
                path: path.into(),
                access,
                create,
            },
        )
    }

    /// `openg` of an encrypted file for reading by ranges (SPEC H6 per job): each
    /// participant gets keys only for the ranges the file's owner granted that
    /// participant (`maat keys grant`, the slice policy).
    pub fn openg_ranges(&self, key: &SigningKey, path: &str) -> Result<(JobHandle, FileStat)> {
        let public = key.verifying_key().to_bytes();
        self.openg_with(
            key,
            MdsRequest::OpenGRanges {
                computation_key: public,
                path: path.into(),
            },
        )
    }

    fn openg_with(&self, key: &SigningKey, request: MdsRequest) -> Result<(JobHandle, FileStat)> {
        let public = key.verifying_key().to_bytes();
        let (bytes, stat) = match self.mds_call(request)? {
            MdsResponse::FileHandle { handle, stat } => (handle, stat),
            _ => return Err(self.bad("mds", "unexpected answer")),
        };
        let handle = self.verify_handle(&bytes)?;
        if handle.handle.computation_key != public || handle.handle.file.0 != stat.id {
            return Err(self.bad("mds", "file handle for another key or file"));
        }
        Ok((handle, stat))
    }

    /// Checks a file handle's signatures and binding (SPEC M10).
    pub fn verify_handle(&self, bytes: &[u8]) -> Result<JobHandle> {
        let now = UnixMillis(self.now());
        let verified = Unverified::<FileHandle>::decode(bytes)
            .and_then(|h| delegation::verify_file_handle(h, &self.mds_key, now))
            .map_err(token_error("file handle"))?;
        Ok(JobHandle {
            bytes: bytes.to_vec(),
            handle: verified.handle.body().clone(),
        })
    }

    /// `openfh`: an open file from a job's handle. The client must hold the job's key
    /// ([`Client::use_job`]). A plain file costs no MDS request, and its size is not
    /// known here: reads go on until a stripe is short. An encrypted file (its handle
    /// says so) costs one: the MDS gives its attributes and crypt record to a holder of
    /// the job's key (`StatByHandle`), and reads ask the KDS for keys with the job's
    /// proof (`KeysForJob`).
    pub fn openfh(&self, handle: &JobHandle) -> Result<Opened> {
        let hash = computation_key_hash(&handle.handle.computation_key);
        if !self.jobs.lock().contains_key(&hash) {
            return Err(ClientError::NotInJob(
                "this handle belongs to a job whose key this client does not hold \
                 (maat job join)"
                    .into(),
            ));
        }
        if handle.handle.flags & delegation::HANDLE_FLAG_ENCRYPTED != 0 {
            let proof = self.handle_proof(handle, |session| {
                delegation::stat_message(session, handle.handle.handle_id)
            })?;
            let stat = match self.mds_call(MdsRequest::StatByHandle {
                handle: handle.bytes.clone(),
                proof,
            })? {
                MdsResponse::Stat(stat) => stat,
                _ => return Err(self.bad("mds", "unexpected answer")),
            };
            if stat.id != handle.handle.file.0 || !stat.encrypted {
                return Err(self.bad("mds", "the handle's attributes name another file"));
            }
            return Ok(Opened {
                stat,
                capability: handle.handle.capability.clone(),
                mds_cached: false,
            });
        }
        let capability = Unverified::<Capability>::decode(&handle.handle.capability)
            .map_err(token_error("capability"))?;
        let protection = capability.unverified_body().protection;
        Ok(Opened {
            stat: FileStat {
                id: handle.handle.file.0,
                is_dir: false,
                mode: 0,
                owner: String::new(),
                group: String::new(),
                size: 0,
                mtime: 0,
                partition: String::new(),
                protection,
                // (The handle of an encrypted file says so: above.)
                encrypted: false,
                crypt: None,
                key_ranges: None,
            },
            capability: handle.handle.capability.clone(),
            mds_cached: false,
        })
    }

    /// Lead: a new lifetime for the job's key (refused to anyone else, and once the lead
    /// lost access to one of the job's files).
    pub fn job_renew(&self, key: &SigningKey) -> Result<Vec<u8>> {
        self.job_renew_inner(key).map(|(lifetime, _)| lifetime)
    }

    /// [`Client::job_renew`], and whether the token is newer than the one held.
    fn job_renew_inner(&self, key: &SigningKey) -> Result<(Vec<u8>, bool)> {
        let public = key.verifying_key().to_bytes();
        let lifetime = match self.mds_call(MdsRequest::JobRenew {
            computation_key: public,
        })? {
            MdsResponse::JobLifetime(t) => t,
            _ => return Err(self.bad("mds", "unexpected answer")),
        };
        let newer = self.take_lifetime(&public, &lifetime)?;
        Ok((lifetime, newer))
    }

    /// Anyone: the newest lifetime token of a job key (a participant learns the lead's
    /// renewals).
    pub fn job_lifetime(&self, key_hash: &[u8; 32]) -> Result<Vec<u8>> {
        match self.mds_call(MdsRequest::JobLifetime {
            key_hash: *key_hash,
        })? {
            MdsResponse::JobLifetime(t) => Ok(t),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Keeps a newer lifetime token for a held key; OSDs get it with the next proof.
    fn take_lifetime(&self, public: &[u8; 32], lifetime: &[u8]) -> Result<bool> {
        let token = self.verify_lifetime(lifetime, public)?;
        let hash = computation_key_hash(public);
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&hash) else {
            return Ok(false);
        };
        if token.body().expiry.0 <= job.expiry {
            return Ok(false);
        }
        job.lifetime = lifetime.to_vec();
        job.start = token.body().start.0;
        job.expiry = token.body().expiry.0;
        job.proven.clear();
        Ok(true)
    }

    /// Lead or administrator: every OSD refuses the job's key from now on.
    pub fn job_end(&self, key_hash: &[u8; 32]) -> Result<Revocation> {
        let response = self.mds_call(MdsRequest::JobEnd {
            key_hash: *key_hash,
        })?;
        self.revocation_from(response)
    }

    /// Lead: the bundle for participant `to` (sealed to the key of their newest login,
    /// signed with this login's key).
    pub fn job_export(
        &self,
        name: &str,
        key: &SigningKey,
        lifetime: &[u8],
        handles: &[JobHandle],
        to: &str,
    ) -> Result<Vec<u8>> {
        let ticket = match self.mds_call(MdsRequest::UserTicket { name: to.into() })? {
            MdsResponse::Ticket(t) => t,
            _ => return Err(self.bad("mds", "unexpected answer")),
        };
        let now = UnixMillis(self.now());
        let participant = Unverified::<LoginTicket>::decode(&ticket)
            .and_then(|t| t.verify(&self.mds_key, now))
            .map_err(token_error("participant's login ticket"))?;
        let (signing_seed, own_ticket) =
            self.with_session(|s| (s.signing_seed.clone(), s.ticket.clone()))?;
        let grant = JobGrant {
            name: name.into(),
            computation_seed: key.to_seed(),
            lifetime: lifetime.to_vec(),
            handles: handles.iter().map(|h| h.bytes.clone()).collect(),
        };
        let signing = SigningKey::from_seed(signing_seed.expose());
        job_bundle::seal_bundle(
            &grant,
            &own_ticket,
            &signing,
            participant.body(),
            &mut self.nonce_rng(),
        )
        .map_err(token_error("job bundle"))
    }

    /// Participant: opens a bundle sealed to this login; returns the grant and the lead.
    pub fn job_join(&self, bundle: &[u8]) -> Result<(JobGrant, UserId)> {
        self.ensure_session()?;
        let (sealing_secret, uid) = self.with_session(|s| (s.sealing_secret.clone(), s.uid))?;
        let sealing = SealingSecretKey::from_bytes(*sealing_secret.expose());
        let opened = job_bundle::open_bundle(
            bundle,
            &self.mds_key,
            UserId(uid),
            &sealing,
            UnixMillis(self.now()),
        )
        .map_err(token_error("job bundle"))?;
        let key = SigningKey::from_seed(&opened.grant.computation_seed);
        self.use_job(key, &opened.grant.lifetime)?;
        for h in &opened.grant.handles {
            self.verify_handle(h)?;
        }
        Ok((opened.grant, opened.lead.body().user))
    }

    /// The job key `hash`'s lifetime token and its proof to a KDS for `ticket`
    /// (`KeysForJob`), refreshing a lifetime that ran low first.
    pub(crate) fn job_kds_proof(
        &self,
        hash: &[u8; 32],
        ticket: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        self.refresh_lifetime_if_low(hash)?;
        let jobs = self.jobs.lock();
        let job = jobs.get(hash).ok_or_else(|| {
            ClientError::NotInJob("this client does not hold the job's key".into())
        })?;
        let proof = job
            .key
            .sign(&delegation::kds_proof_message(ticket))
            .0
            .to_vec();
        Ok((job.lifetime.clone(), proof))
    }

    /// Records the size of a file written through a job's write handle.
    pub fn set_size_by_handle(&self, handle: &JobHandle, size: u64) -> Result<()> {
        let proof = self.handle_proof(handle, |session| {
            delegation::set_size_message(session, handle.handle.handle_id, size)
        })?;
        self.expect_ok(MdsRequest::SetSizeByHandle {
            handle: handle.bytes.clone(),
            size,
            proof,
        })
    }

    /// The job key's signature over `message(this MDS session)`: what a request to the
    /// MDS by `handle` proves the key with (`SetSizeByHandle`, `StatByHandle`).
    fn handle_proof(
        &self,
        handle: &JobHandle,
        message: impl FnOnce(&[u8; 16]) -> Vec<u8>,
    ) -> Result<Vec<u8>> {
        self.ensure_session()?;
        let session_id = self.with_session(|s| s.session_id)?;
        let hash = computation_key_hash(&handle.handle.computation_key);
        let key = self.jobs.lock().get(&hash).map(|j| j.key.clone());
        let key = key.ok_or_else(|| {
            ClientError::NotInJob(
                "this handle belongs to a job whose key this client does not hold \
                 (maat job join)"
                    .into(),
            )
        })?;
        Ok(key.sign(&message(&session_id)).0.to_vec())
    }

    /// Before a request under a capability delegated to `hash`: refreshes the key's
    /// lifetime when it runs low, and proves the key to `osd` on this session once.
    pub(crate) fn prepare_delegated(&self, osd: u64, hash: &[u8; 32]) -> Result<()> {
        self.refresh_lifetime_if_low(hash)?;
        let (sid, _, _) = self.osd_session_with_offset(osd)?;
        if self
            .jobs
            .lock()
            .get(hash)
            .is_some_and(|j| !j.proven.contains(&(osd, sid)))
        {
            self.supply_proof(osd, hash)?;
        }
        Ok(())
    }

    /// Refreshes the job key's lifetime when it runs low (a refresh that fails leaves the
    /// key valid until its expiry).
    fn refresh_lifetime_if_low(&self, hash: &[u8; 32]) -> Result<()> {
        let now = self.now();
        let Some((start, expiry)) = self.jobs.lock().get(hash).map(|j| (j.start, j.expiry)) else {
            return Err(ClientError::NotInJob(
                "a capability delegated to a job key this client does not hold".into(),
            ));
        };
        let life = expiry.saturating_sub(start);
        if now.saturating_add(life * JOB_REFRESH_AT_PERCENT_LEFT / 100) >= expiry {
            let _ = self.refresh_lifetime(hash);
        }
        Ok(())
    }

    /// The lead renews; a participant fetches the newest token. True when it is newer.
    fn refresh_lifetime(&self, hash: &[u8; 32]) -> Result<bool> {
        let (key, lead) = match self.jobs.lock().get(hash) {
            Some(j) => (j.key.clone(), j.lead),
            None => return Ok(false),
        };
        let public = key.verifying_key().to_bytes();
        if Some(lead) == self.uid() {
            return self.job_renew_inner(&key).map(|(_, newer)| newer);
        }
        let lifetime = self.job_lifetime(hash)?;
        self.take_lifetime(&public, &lifetime)
    }

    /// Proves possession of the job key to `osd` on the current session.
    fn supply_proof(&self, osd: u64, hash: &[u8; 32]) -> Result<()> {
        let (sid, secret, _) = self.osd_session_with_offset(osd)?;
        let uid = self.uid().ok_or(ClientError::NotLoggedIn)?;
        let (key, lifetime) = match self.jobs.lock().get(hash) {
            Some(j) => (j.key.clone(), j.lifetime.clone()),
            None => return Err(ClientError::NotInJob("job key not held".into())),
        };
        let session = SessionKey {
            session_id: sid,
            user: UserId(uid),
            osd: OsdId(osd),
            expiry: UnixMillis(u64::MAX),
            key: secret,
        };
        let proof = delegation::make_proof(&key, &session, &mut self.nonce_rng())
            .map_err(token_error("proof token"))?;
        self.osd_call_once(
            osd,
            &OsdRequest {
                capability: Vec::new(),
                command: OsdCommand::SupplyProof { lifetime, proof },
            },
        )?;
        if let Some(j) = self.jobs.lock().get_mut(hash) {
            j.proven.insert((osd, sid));
        }
        Ok(())
    }

    /// After `osd` refused a delegated request as unproven (`ProofRequired`) or with the
    /// key's lifetime over (`CapabilityExpired`): refreshes the lifetime if needed and
    /// proves again. True when the request is worth sending again.
    pub(crate) fn recover_delegated(
        &self,
        osd: u64,
        hash: &[u8; 32],
        code: ErrorCode,
    ) -> Result<bool> {
        if code == ErrorCode::CapabilityExpired && !self.refresh_lifetime(hash)? {
            return Ok(false);
        }
        if let Some(j) = self.jobs.lock().get_mut(hash) {
            j.proven.retain(|(o, _)| *o != osd);
        }
        self.supply_proof(osd, hash)?;
        Ok(true)
    }
}

impl Client {
    /// Sends a request to an OSD without preparing its capability (no proof, no
    /// renewal): attack tests present delegated capabilities they hold no key for.
    #[cfg(feature = "test-hooks")]
    pub fn osd_call_unprepared(&self, osd: u64, request: &OsdRequest) -> Result<OsdResponse> {
        self.osd_call_fresh(osd, request)
    }
}
