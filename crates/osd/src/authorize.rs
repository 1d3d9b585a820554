//! SPEC M3, M4, M5, M8, M9 at the OSD: the checks a data request passes before the store
//! sees it (capability signature and window, renewal, revocation, user and file sets,
//! mode, protection method) and the commands that feed those checks (`SupplyTree`,
//! `SupplyRenewal`).

use super::*;
use crate::delegation as job_keys;
use maat_proto::delegation::{self, KeyLifetimeToken};
use maat_proto::encrypted::ENCRYPTED_OBJECT_BYTES_MAX;

impl OsdCore {
    /// SPEC M3 + M5: checks the capability for a data command. NOSEC callers skip it.
    pub fn authorize(
        &self,
        caller: &Caller,
        request: &OsdRequest,
        now: UnixMillis,
    ) -> Result<Authorized, WireError> {
        let r = self.authorize_inner(caller, request, now).and_then(|auth| {
            self.missed.check(auth.object, &request.command, now.0)?;
            Ok(auth)
        });
        if let (Ok(auth), Some(observe)) = (&r, self.access_observer.get()) {
            observe(caller.user, auth, now);
        }
        self.counted(r)
    }

    fn authorize_inner(
        &self,
        caller: &Caller,
        request: &OsdRequest,
        now: UnixMillis,
    ) -> Result<Authorized, WireError> {
        let (object, mode) = request
            .command
            .object_access()
            .ok_or_else(|| refuse(ErrorCode::InvalidArgument, "not a data command"))?;
        check_bounds(&request.command)?;
        if caller.secure.is_none() {
            return Ok(Authorized {
                object,
                mode,
                policy_tag: None,
            });
        }
        if let Some(capability) = &caller.t10 {
            return self.authorize_t10(capability, request, object, mode, now);
        }
        // Capabilities name files, and user files live in the data partition only; other
        // partitions are reachable by the administrator's commands alone.
        if object.partition != DATA_PARTITION {
            return Err(refuse(
                ErrorCode::PermissionDenied,
                "capabilities reach the data partition only",
            ));
        }
        if !self.revoked.synced() {
            return Err(refuse(
                ErrorCode::NotReady,
                "catching up on revocations with the MDS",
            ));
        }
        let capability = self.verified_capability(&request.capability, now)?;
        let job_key = match &capability.users {
            Principals::ComputationKey(hash) => Some(*hash),
            _ => None,
        };
        self.revoked
            .check(capability.id, caller.user, job_key.as_ref(), now)?;
        match (&job_key, &caller.secure) {
            // SPEC M10: whoever proved the job key on this session, while it lives.
            (Some(hash), Some(secure)) => {
                let proven = read(&self.sessions)
                    .get(&secure.session_id)
                    .is_some_and(|s| s.proven.contains(hash));
                self.delegations.check(proven, hash, now)?;
            }
            _ => {
                let user_tree = match &capability.users {
                    Principals::UserTree(root) => Some(self.tree(root, "user")?),
                    _ => None,
                };
                capability
                    .check_user(caller.user, user_tree.as_deref())
                    .map_err(|e| refuse(ErrorCode::WrongUser, e.to_string()))?;
            }
        }
        let file_tree = match &capability.files {
            Files::FileTree(root) => Some(self.tree(root, "file")?),
            Files::File(_) | Files::Range { .. } => None,
        };
        capability
            .check_file(FileId(object.file), file_tree.as_deref())
            .map_err(|e| refuse(ErrorCode::WrongFile, e.to_string()))?;
        capability
            .check_mode(mode)
            .map_err(|e| refuse(ErrorCode::PermissionDenied, e.to_string()))?;
        if let Some(secure) = &caller.secure {
            if secure.protection() < capability.protection {
                return Err(refuse(
                    ErrorCode::ProtectionTooWeak,
                    format!(
                        "sealed with {}, the file's partition requires {}",
                        secure.protection(),
                        capability.protection
                    ),
                ));
            }
        }
        Ok(Authorized {
            object,
            mode,
            policy_tag: None,
        })
    }

    /// SPEC M4: the verified members of a root, or `UnknownTree` (the client supplies it).
    fn tree(
        &self,
        root: &[u8; 32],
        what: &str,
    ) -> Result<std::sync::Arc<maat_proto::merkle_msg::MemberSet>, WireError> {
        self.trees.get(root).ok_or_else(|| {
            refuse(
                ErrorCode::UnknownTree,
                format!("{what} set {}: supply its tree", hex_prefix(root)),
            )
        })
    }

    /// SPEC M4: keeps the members of one of the roots of the request's capability, after
    /// checking the capability (signature, validity, that the caller is authenticated) and
    /// rebuilding the root from the members.
    pub(crate) fn supply_tree(
        &self,
        caller: &Caller,
        request: &OsdRequest,
        tree: &[u8],
        now: UnixMillis,
    ) -> Result<OsdResponse, WireError> {
        if caller.secure.is_none() {
            return Err(refuse(
                ErrorCode::InvalidArgument,
                "trees come with capabilities; NOSEC has none",
            ));
        }
        let capability = self.verified_capability(&request.capability, now)?;
        let message = MerkleTreeMessage::decode(tree)?;
        let (kind, root) = match (&capability.users, &capability.files) {
            (Principals::UserTree(root), _) if message.kind() == SetKind::Users => {
                (SetKind::Users, *root)
            }
            (_, Files::FileTree(root)) if message.kind() == SetKind::Files => {
                (SetKind::Files, *root)
            }
            _ => {
                return Err(refuse(
                    ErrorCode::InvalidArgument,
                    "the capability names no root of this tree's kind",
                ))
            }
        };
        let set = message.verify(kind, &root)?;
        self.trees.insert(set);
        self.stats.trees_supplied.fetch_add(1, Ordering::Relaxed);
        Ok(OsdResponse::Ok)
    }

    /// SPEC M8: keeps the expiries an MDS-signed renewal token grants, verifying each
    /// token once.
    pub(crate) fn supply_renewal(
        &self,
        caller: &Caller,
        token: &[u8],
        now: UnixMillis,
    ) -> Result<OsdResponse, WireError> {
        if caller.secure.is_none() {
            return Err(refuse(
                ErrorCode::InvalidArgument,
                "renewal tokens come with capabilities; NOSEC has none",
            ));
        }
        let digest = hash::blake3(&[token]);
        if self.renewed.known(&digest, now) {
            self.stats
                .renewal_tokens_known
                .fetch_add(1, Ordering::Relaxed);
            return Ok(OsdResponse::Ok);
        }
        let verified = Unverified::<RenewalToken>::decode(token)?.verify(&self.mds_key()?, now)?;
        self.renewed.insert(digest, verified.body(), now);
        self.stats
            .renewal_tokens_verified
            .fetch_add(1, Ordering::Relaxed);
        Ok(OsdResponse::Ok)
    }

    /// SPEC M10: keeps a job key's lifetime token (verified once) and records that this
    /// session proved possession of the key (the proof is sealed under the session's
    /// key, made for this OSD and session, and signed with the computation key).
    pub(crate) fn supply_proof(
        &self,
        caller: &Caller,
        lifetime: &[u8],
        proof: &[u8],
        now: UnixMillis,
    ) -> Result<OsdResponse, WireError> {
        let secure = caller.secure.as_ref().ok_or_else(|| {
            refuse(
                ErrorCode::InvalidArgument,
                "proofs come with sessions; NOSEC has none",
            )
        })?;
        let mds_key = self.mds_key()?;
        let digest = hash::blake3(&[lifetime]);
        let unverified = Unverified::<KeyLifetimeToken>::decode(lifetime)?;
        let key_hash = unverified.unverified_body().key_hash();
        if !self.delegations.known(&key_hash, &digest) {
            let verified = unverified.verify(&mds_key, now)?;
            self.delegations.keep(verified, digest, now);
            self.stats
                .lifetime_tokens_verified
                .fetch_add(1, Ordering::Relaxed);
        }
        let token = self.delegations.lifetime(&key_hash).ok_or_else(|| {
            refuse(
                ErrorCode::ProofRequired,
                "lifetime token table was full; try again",
            )
        })?;
        let proof_key = read(&self.sessions)
            .get(&secure.session_id)
            .map(|s| s.proof.clone())
            .ok_or_else(|| refuse(ErrorCode::UnknownSession, "negotiate a session key first"))?;
        delegation::open_proof_with_key(
            proof,
            &proof_key,
            self.id,
            &secure.session_id,
            &token,
            &mds_key,
            now,
        )
        .map_err(|e| match e {
            maat_proto::ProtoError::CommitmentMismatch { .. } => refuse(
                ErrorCode::BadSignature,
                "the proof was made with another key than the job's",
            ),
            other => other.into(),
        })?;
        let mut sessions = write(&self.sessions);
        let session = sessions
            .get_mut(&secure.session_id)
            .ok_or_else(|| refuse(ErrorCode::UnknownSession, "negotiate a session key first"))?;
        job_keys::prove(&mut session.proven, key_hash);
        drop(sessions);
        self.stats.proofs_verified.fetch_add(1, Ordering::Relaxed);
        Ok(OsdResponse::Ok)
    }

    /// Checks a capability's window, extended by a verified renewal token that names it.
    fn check_window(&self, capability: &Capability, now: UnixMillis) -> Result<(), WireError> {
        match maat_proto::signed::check_validity(capability, now) {
            Err(maat_proto::ProtoError::Expired { .. })
                if self
                    .renewed
                    .expiry(capability.id.0)
                    .is_some_and(|e| now < e) =>
            {
                Ok(())
            }
            other => Ok(other?),
        }
    }

    fn verified_capability(&self, bytes: &[u8], now: UnixMillis) -> Result<Capability, WireError> {
        let digest = hash::blake3(&[bytes]);
        if let Some(hit) = read(&self.capabilities).get(&digest) {
            // Cached: the signature was checked; the validity window is re-checked now.
            self.check_window(&hit.capability, now)?;
            self.stats
                .capability_cache_hits
                .fetch_add(1, Ordering::Relaxed);
            return Ok(hit.capability.clone());
        }
        self.stats
            .capability_cache_misses
            .fetch_add(1, Ordering::Relaxed);
        let unverified = Unverified::<Capability>::decode(bytes)?;
        let renewed = self.renewed.expiry(unverified.unverified_body().id.0);
        let verified = unverified.verify_with_expiry(&self.mds_key()?, renewed, now)?;
        let capability = verified.body().clone();
        let mut cache = write(&self.capabilities);
        if cache.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
            cache.retain(|_, c| c.capability.expiry > now);
            if cache.len() >= CAPABILITY_CACHE_ENTRIES_MAX {
                cache.clear();
            }
        }
        cache.insert(
            digest,
            CachedCapability {
                capability: capability.clone(),
            },
        );
        Ok(capability)
    }

    /// Administrative commands need the administrator (as authenticated, never claimed).
    pub fn authorize_admin(&self, caller: &Caller) -> Result<AdminAuthorized, WireError> {
        let protected = caller
            .secure
            .as_ref()
            .is_some_and(|s| s.protection() >= Protection::CmdRsp);
        if protected && caller.user == UserId(ADMIN_USER_ID) {
            Ok(AdminAuthorized(()))
        } else {
            self.counted(Err(refuse(
                ErrorCode::PermissionDenied,
                "administrator only",
            )))
        }
    }
}

/// Bounds every data command so no request makes the OSD allocate or write more than one
/// stripe object (a sparse object of 2^40 bytes followed by a 4 GiB read would otherwise
/// be one user away). An object holds one stripe unit of plaintext, or of an encrypted
/// file's sealed blocks ([`ENCRYPTED_OBJECT_BYTES_MAX`], SPEC H3).
fn check_bounds(command: &OsdCommand) -> Result<(), WireError> {
    let too_large = |what: &str| {
        refuse(
            ErrorCode::TooLarge,
            format!("{what} beyond one stripe object ({ENCRYPTED_OBJECT_BYTES_MAX} bytes)"),
        )
    };
    match command {
        OsdCommand::Read { offset, length, .. }
            if offset.saturating_add(u64::from(*length)) > ENCRYPTED_OBJECT_BYTES_MAX =>
        {
            Err(too_large("read"))
        }
        OsdCommand::Write { offset, data, .. }
            if offset.saturating_add(data.len() as u64) > ENCRYPTED_OBJECT_BYTES_MAX =>
        {
            Err(too_large("write"))
        }
        OsdCommand::ReplaceIf { data, .. } if data.len() as u64 > ENCRYPTED_OBJECT_BYTES_MAX => {
            Err(too_large("replace"))
        }
        OsdCommand::Append { data, .. } if data.len() as u64 > ENCRYPTED_OBJECT_BYTES_MAX => {
            Err(too_large("append"))
        }
        _ => Ok(()),
    }
}

fn hex_prefix(root: &[u8; 32]) -> String {
    root.iter().take(6).map(|b| format!("{b:02x}")).collect()
}
