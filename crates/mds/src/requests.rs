//! Authenticated requests (SPEC T7, T9): the envelope checks, the client–MDS sessions
//! they rest on, and the dispatch of every `MdsRequest` to the module that decides it.

use super::*;
use crate::attributes::Changes;
use maat_proto::msg::SetTime;

/// How long a shared store keeps a request's nonce after the request's timestamp: twice
/// the replay window, past which the request is refused as stale whatever its nonce.
pub(crate) const NONCES_KEPT_MILLIS: u64 = 2 * maat_proto::wire::REPLAY_WINDOW_MILLIS;

impl<S: MetaStore> Mds<S> {
    /// Handles an authenticated request envelope. `Ok` is the sealed response payload;
    /// `Err` is a refusal that could not be MACed (unknown session, bad MAC, …).
    pub fn handle_request(
        &self,
        payload: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, WireError> {
        self.handle_request_named(payload, now, rng).1
    }

    /// [`Mds::handle_request`], and the request's name ([`MdsRequest::kind`]) once it
    /// was authenticated and decoded, for the shell's latency metrics.
    pub fn handle_request_named(
        &self,
        payload: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> (Option<&'static str>, Result<Vec<u8>, WireError>) {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let authenticated = self.refuse_counted(self.authenticate(payload, now));
        let (request, session_id, nonce, key, principal) = match authenticated {
            Ok(a) => a,
            Err(e) => return (None, Err(e.to_wire())),
        };
        let mut name = None;
        let result = msg::decode::<MdsRequest>(request)
            .map_err(MdsError::from)
            .and_then(|r| {
                name = Some(r.kind());
                self.dispatch(&principal, Some(&session_id), r, now, rng)
            });
        let result = self.durable(result);
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        let body = msg::encode_result(&result);
        (
            name,
            Ok(wire::seal_response(&key, &session_id, &nonce, now, &body)),
        )
    }

    #[allow(clippy::type_complexity)]
    fn authenticate<'a>(
        &self,
        payload: &'a [u8],
        now: UnixMillis,
    ) -> Result<(&'a [u8], [u8; 16], [u8; 16], Blake3Mac, Principal)> {
        let request = UnverifiedRequest::decode(payload)?;
        let (session, key, user) = self.session_with_user(&request.session_id)?;
        if session.expiry <= now.0 {
            return Err(MdsError::refused(ErrorCode::SessionExpired, "log in again"));
        }
        lock(&self.replay)
            .check_time(request.timestamp, now)
            .map_err(freshness_error)?;
        let request = request.verify(&key)?;
        self.fresh(&request.session_id, &request.nonce, request.timestamp, now)?;
        // Issue 42: other instances sharing the store saw their requests, not this one's
        // window: the nonce is recorded in the store too, so a request captured on its way
        // to one instance is refused at every other.
        if self.store.shared()
            && !self.store.record_nonce(
                &request.session_id,
                &request.nonce,
                request.timestamp.0,
                NONCES_KEPT_MILLIS,
            )?
        {
            return Err(freshness_error(Freshness::Replayed));
        }
        let principal = match user {
            Some(user) if user.id == session.user => principal_of(&user),
            _ => self.principal(session.user)?,
        };
        Ok((
            request.message,
            request.session_id,
            request.nonce,
            key,
            principal,
        ))
    }

    /// Deletes expired sessions from the store and the memory cache.
    pub(crate) fn sweep_sessions(&self, now: UnixMillis) -> Result<()> {
        let mut batch = Batch::default();
        for (id, session) in self.store.sessions()? {
            if session.expiry <= now.0 {
                batch.push(Op::DeleteSession(id));
            }
        }
        if !batch.0.is_empty() {
            self.store.commit(batch)?;
        }
        crate::write_lock(&self.sessions).retain(|_, (s, _)| s.expiry > now.0);
        Ok(())
    }

    /// A session and its envelope key, from memory or (after a restart) from the store.
    /// On a store other instances share, the record is read on every request (a logout,
    /// or a passphrase reset that ends a user's sessions, at any instance ends them at
    /// every one); only the key opened from it is kept.
    fn session(&self, id: &[u8; 16]) -> Result<(SessionRecord, Blake3Mac)> {
        let cached = crate::read_lock(&self.sessions).get(id).cloned();
        if let Some(s) = &cached {
            if !self.store.shared() {
                return Ok(s.clone());
            }
        }
        let session = self.store.session(id)?;
        self.session_read(id, session, cached)
    }

    /// [`Mds::session`] and, on a store other instances share, the session's user read
    /// with it in one request to the store ([`MetaStore::session_and_user`]) once this
    /// instance knows which user the session is of: `None` where it was not read (the
    /// caller reads it).
    fn session_with_user(
        &self,
        id: &[u8; 16],
    ) -> Result<(SessionRecord, Blake3Mac, Option<UserRecord>)> {
        if self.store.shared() {
            let cached = crate::read_lock(&self.sessions).get(id).cloned();
            if let Some(uid) = cached.as_ref().map(|(held, _)| held.user) {
                let (session, user) = self.store.session_and_user(id, uid)?;
                let (session, key) = self.session_read(id, session, cached)?;
                return Ok((session, key, user));
            }
        }
        let (session, key) = self.session(id)?;
        Ok((session, key, None))
    }

    /// The session `id` as the store gave it (`None`: ended), and its key: the one
    /// `cached` holds if the sealed key is the same, else opened from the record.
    fn session_read(
        &self,
        id: &[u8; 16],
        session: Option<SessionRecord>,
        cached: Option<(SessionRecord, Blake3Mac)>,
    ) -> Result<(SessionRecord, Blake3Mac)> {
        let Some(session) = session else {
            if cached.is_some() {
                crate::write_lock(&self.sessions).remove(id);
            }
            return Err(MdsError::refused(ErrorCode::UnknownSession, "log in again"));
        };
        if let Some((held, key)) = cached {
            if held.sealed_key == session.sealed_key {
                return Ok((session, key));
            }
        }
        let key = self
            .session_wrap
            .open(0, id, &session.sealed_key)
            .map_err(|_| {
                MdsError::refused(
                    ErrorCode::UnknownSession,
                    "the stored session does not open under this MDS's keys; log in again",
                )
            })?;
        let key: [u8; 32] = key.as_slice().try_into().map_err(|_| {
            MdsError::refused(
                ErrorCode::UnknownSession,
                "corrupt stored session; log in again",
            )
        })?;
        Ok(self.remember_session(*id, session, &Secret32::from_bytes(key)))
    }

    /// The envelope key of a live session (SPEC T2 seals capability keys under it).
    pub(crate) fn session_mac(&self, id: &[u8; 16]) -> Result<Blake3Mac> {
        Ok(self.session(id)?.1)
    }

    /// Seals a new session's key for the store.
    pub(crate) fn seal_session_key(
        &self,
        id: &[u8; 16],
        key: &Secret32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>> {
        Ok(self.session_wrap.seal(0, id, key.expose(), rng)?)
    }

    pub(crate) fn remember_session(
        &self,
        id: [u8; 16],
        session: SessionRecord,
        key: &Secret32,
    ) -> (SessionRecord, Blake3Mac) {
        let key = wire::envelope_key(key.expose()).with_counters(self.counters.clone());
        let entry = (session, key);
        let mut sessions = crate::write_lock(&self.sessions);
        if sessions.len() >= SESSIONS_CACHED_MAX {
            sessions.clear();
        }
        sessions.insert(id, entry.clone());
        entry
    }

    fn principal(&self, uid: u64) -> Result<Principal> {
        let user = self
            .store
            .user(uid)?
            .ok_or_else(|| MdsError::refused(ErrorCode::NoSuchUser, "user was removed"))?;
        Ok(principal_of(&user))
    }

    /// Handles a NOSEC request (benchmarks): the claimed user is believed and no
    /// capability is made. Refused unless configured with `danger_allow_insecure`.
    pub fn handle_insecure(
        &self,
        message: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Vec<u8> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result = if !self.config.danger_allow_insecure {
            Err(MdsError::refused(ErrorCode::InsecureRefused, ""))
        } else {
            msg::decode::<msg::InsecureRequest<MdsRequest>>(message)
                .map_err(MdsError::from)
                .and_then(|r| {
                    let principal = self.principal(r.user)?;
                    self.dispatch(&principal, None, r.request, now, rng)
                })
        };
        let result = self.durable(result);
        let result = self.refuse_counted(result).map_err(|e| e.to_wire());
        msg::encode_result(&result)
    }

    /// `result`, once every change applied so far is durable (SPEC T9). Namespace changes
    /// are committed deferred ([`MetaStore::commit_deferred`]) under the write lock and
    /// made durable here, after it is released, so the requests of many clients share an
    /// fsync (group commit). Every answer waits, refusals and reads too: none may tell of
    /// a change a crash could still undo.
    pub(crate) fn durable<T>(&self, result: Result<T>) -> Result<T> {
        self.store.sync()?;
        result
    }

    pub(crate) fn dispatch(
        &self,
        who: &Principal,
        session: Option<&[u8; 16]>,
        request: MdsRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        match request {
            MdsRequest::ClusterMap => Ok(MdsResponse::ClusterMap(ClusterMap {
                epoch: self.epoch()?,
                osds: self.store.osds()?,
                kds: self.config.kds.clone(),
                kds_keys: self.config.kds_keys,
                encrypt_new_files: self.config.encrypt_new_files && self.config.kds_keys.is_some(),
            })),
            MdsRequest::Stat { path } => {
                let inode = self.resolve(who, &path)?;
                Ok(MdsResponse::Stat(self.stat_of(who, &inode)?))
            }
            MdsRequest::Readdir { path } => self.readdir(who, &path),
            MdsRequest::Mkdir {
                path,
                mode,
                parents,
                partition,
            } => self.mkdir(who, &path, mode, parents, partition.as_deref(), now),
            MdsRequest::Rmdir { path } => {
                self.remove(who, &path, Removing::Directory, session, now, rng)
            }
            MdsRequest::Unlink { path } => {
                self.remove(who, &path, Removing::File, session, now, rng)
            }
            MdsRequest::UnlinkHeld {
                path,
                file,
                capability,
            } => {
                let what = Removing::HeldFile { file, capability };
                self.remove(who, &path, what, session, now, rng)
            }
            MdsRequest::Reserve { dir } => self.reserve(who, &dir, false, session, now, rng),
            MdsRequest::ReserveSealed { dir } => self.reserve(who, &dir, true, session, now, rng),
            MdsRequest::Link {
                path,
                file,
                size,
                mode,
            } => self.link(who, &path, file, size, mode, None, now),
            MdsRequest::OpenOrLink {
                path,
                access,
                file,
                mode,
            } => self.open_or_link(who, &path, access, file, mode, session, now, rng),
            MdsRequest::LinkSealed {
                path,
                file,
                size,
                mode,
                written,
                lockbox,
            } => self.link(
                who,
                &path,
                file,
                size,
                mode,
                Some((&written, &lockbox)),
                now,
            ),
            MdsRequest::Open {
                path,
                access,
                create,
            } => self.open_file(
                who,
                &path,
                access,
                create,
                &[],
                session,
                now,
                rng,
            ),
            MdsRequest::FileSetDefine { name, paths } => self.fileset_define(who, &name, &paths),
            MdsRequest::FileSetRemove { name } => self.fileset_remove(who, &name),
            MdsRequest::FileSetList => self.fileset_list(who),
            MdsRequest::OpenPredicted {
                path,
                access,
                create,
                predicted,
            } => {
                if predicted.len() > maat_proto::msg::PREDICTED_PATHS_MAX {
                    return Err(MdsError::refused(
                        ErrorCode::TooLarge,
                        format!(
                            "at most {} predicted paths per open",
                            maat_proto::msg::PREDICTED_PATHS_MAX
                        ),
                    ));
                }
                self.open_file(
                    who,
                    &path,
                    access,
                    create,
                    &predicted,
                    session,
                    now,
                    rng,
                )
            }
            MdsRequest::SetSize { path, file, size } => {
                self.set_size(who, &path, file, size, &[], 1, now)
            }
            MdsRequest::SetSizeWritten {
                path,
                file,
                size,
                written,
            } => self.set_size(who, &path, file, size, &written, 1, now),
            MdsRequest::SetSizeSealed {
                path,
                file,
                size,
                tree_version,
                written,
            } => self.set_size(who, &path, file, size, &written, tree_version, now),
            MdsRequest::SetLockbox {
                path,
                file,
                lockbox,
            } => self.set_lockbox(who, &path, file, &lockbox, false, session, now, rng),
            MdsRequest::OpenSealed {
                path,
                access,
                create,
            } => self.open_sealed(who, &path, access, create, session, now, rng),
            MdsRequest::OpenExclusive {
                path,
                access,
                mode,
                sealed,
            } => self.open_exclusive(who, &path, access, mode, sealed, session, now, rng),
            MdsRequest::SetSizeLockbox {
                path,
                file,
                size,
                written,
                lockbox,
            } => self.set_size_lockbox(who, &path, file, size, &written, &lockbox, now),
            MdsRequest::KeysGrant {
                path,
                users,
                ranges,
                slices,
            } => self.keys_grant(who, &path, &users, &ranges, slices),
            MdsRequest::KeysRevoke { path, users } => self.keys_revoke(who, &path, &users),
            MdsRequest::KeysList { path } => self.keys_list(who, &path),
            MdsRequest::Rekey {
                path,
                file,
                lockbox,
            } => self.set_lockbox(who, &path, file, &lockbox, true, session, now, rng),
            MdsRequest::Rename { from, to } => {
                self.rename(who, &from, &to, false, session, now, rng)
            }
            MdsRequest::RenameReplace { from, to } => {
                self.rename(who, &from, &to, true, session, now, rng)
            }
            MdsRequest::Chmod { path, mode } => {
                let changes = Changes {
                    mode: Some(mode),
                    ..Changes::default()
                };
                self.change_answering_ok(who, &path, changes, now)
            }
            MdsRequest::Chown { path, owner, group } => {
                let changes = Changes {
                    owner: owner.as_deref(),
                    group: group.as_deref(),
                    ..Changes::default()
                };
                self.change_answering_ok(who, &path, changes, now)
            }
            MdsRequest::UserAdd { .. } => Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "this client sends a password-equivalent key; upgrade it (users are added with OPAQUE records)",
            )),
            MdsRequest::RegisterStart { name, request } => {
                self.register_start(who, &name, &request)
            }
            MdsRequest::UserAddOpaque {
                name,
                groups,
                params,
                sealed_upload,
            } => self.user_add(who, &name, &groups, params, &sealed_upload, now),
            MdsRequest::SetCredential {
                params,
                sealed_upload,
            } => self.set_credential(who, params, &sealed_upload),
            MdsRequest::UserRm { name } => self.user_rm(who, &name),
            MdsRequest::GroupAdd { name } => self.group_add(who, &name),
            MdsRequest::GroupMemberAdd { group, user } => self.group_member_add(who, &group, &user),
            MdsRequest::GroupMemberRm { group, user } => self.group_member_rm(who, &group, &user),
            MdsRequest::Umask { set } => self.umask(who, set),
            MdsRequest::SetMtime { path, mtime } => {
                let changes = Changes {
                    mtime: Some(mtime.map_or(SetTime::Now, SetTime::At)),
                    ..Changes::default()
                };
                self.change_answering_ok(who, &path, changes, now)
            }
            MdsRequest::SetTimes { path, atime, mtime } => {
                let changes = Changes {
                    atime,
                    mtime,
                    ..Changes::default()
                };
                self.change_answering_ok(who, &path, changes, now)
            }
            MdsRequest::StatFull { path } => self.stat_full(who, &path),
            MdsRequest::SetAttr {
                path,
                mode,
                owner,
                group,
                atime,
                mtime,
            } => {
                let changes = Changes {
                    mode,
                    owner: owner.as_deref(),
                    group: group.as_deref(),
                    atime,
                    mtime,
                };
                self.set_attr(who, &path, changes, now)
            }
            MdsRequest::HardLink { from, to } => self.hard_link(who, &from, &to, now),
            MdsRequest::Symlink { path, target } => self.symlink(who, &path, &target, now),
            MdsRequest::Readlink { path } => self.readlink(who, &path),
            MdsRequest::Mknod { path, mode, rdev } => self.mknod(who, &path, mode, rdev, now),
            MdsRequest::Access { path, mask } => self.access(who, &path, mask),
            MdsRequest::ChangePassphrase {
                state,
                ke3,
                params,
                sealed_upload,
            } => self.change_passphrase(who, session, &state, &ke3, params, &sealed_upload, now),
            MdsRequest::UserResetPassphrase {
                name,
                params,
                sealed_upload,
            } => self.user_reset_passphrase(who, &name, params, &sealed_upload),
            MdsRequest::Stats => Ok(MdsResponse::Stats(self.stats())),
            MdsRequest::PartitionCreate { name, protection } => {
                self.partition_create(who, &name, protection, 1)
            }
            MdsRequest::PartitionCreateReplicated {
                name,
                protection,
                replicas,
            } => self.partition_create(who, &name, protection, replicas),
            MdsRequest::Placement => self.placement(now),
            MdsRequest::CopiesMissed { file, copies } => {
                self.copies_missed(who, file, &copies, now)
            }
            MdsRequest::MissedCopiesOf { file } => self.missed_copies_of(who, file),
            MdsRequest::ScrubDone(counts) => self.scrub_done(who, &counts, now),
            MdsRequest::PartitionSetMinSize { name, min_size } => {
                self.partition_set_min_size(who, &name, min_size)
            }
            MdsRequest::PartitionCopies => self.partition_copies(),
            MdsRequest::Once { id, request } => self.once(who, session, &id, *request, now, rng),
            MdsRequest::MissedCopiesKnown { file, copies } => {
                self.missed_copies_known(who, file, &copies, now)
            }
            MdsRequest::CopiesRepaired { file, copies } => {
                self.copies_repaired(who, file, &copies)
            }
            MdsRequest::PartitionSetSecurity { name, protection } => {
                self.partition_set_security(who, &name, protection)
            }
            MdsRequest::PartitionList => self.partition_list(),
            MdsRequest::PartitionSetCredentials { name, credentials } => {
                self.partition_set_credentials(who, &name, credentials)
            }
            MdsRequest::T10KeysShow => self.t10_show(who),
            MdsRequest::T10KeysRotate {
                osd,
                partition,
                revoke,
                master,
            } => self.t10_rotate(who, osd, partition.as_deref(), (revoke, master), now, rng),
            MdsRequest::T10RevokeObject { path } => self.t10_revoke_object(who, &path, now, rng),
            MdsRequest::GetTree { root } => self.get_tree(who, &root),
            MdsRequest::SetGrouping { strategies } => {
                require_admin(who)?;
                let parsed = grouping::Strategies::parse(&strategies)
                    .map_err(|e| MdsError::refused(ErrorCode::InvalidArgument, e))?;
                self.issuer.set_strategies(parsed);
                Ok(MdsResponse::Ok)
            }
            MdsRequest::Renew { ids } => self.renew(&ids, now, rng),
            MdsRequest::Revoke {
                users,
                capabilities,
            } => self.revoke(who, &users, &capabilities, now),
            MdsRequest::JobCreate { computation_key } => {
                self.job_create(who, computation_key, now)
            }
            MdsRequest::OpenG {
                computation_key,
                path,
                access,
                create,
            } => self.openg(who, computation_key, &path, (access, false), create, now, rng),
            MdsRequest::OpenGRanges {
                computation_key,
                path,
            } => self.openg(who, computation_key, &path, (maat_proto::msg::Access::Read, true), None, now, rng),
            MdsRequest::JobRenew { computation_key } => {
                self.job_renew(who, computation_key, now)
            }
            MdsRequest::JobLifetime { key_hash } => self.job_lifetime(&key_hash, now),
            MdsRequest::JobEnd { key_hash } => self.job_end(who, key_hash, now),
            MdsRequest::UserTicket { name } => self.user_ticket(&name),
            MdsRequest::SetSizeByHandle {
                handle,
                size,
                proof,
            } => self.set_size_by_handle(who, session, &handle, size, &proof, now),
            MdsRequest::StatByHandle { handle, proof } => {
                self.stat_by_handle(who, session, &handle, &proof, now)
            }
            MdsRequest::Logout => {
                if let Some(sid) = session {
                    let mut batch = Batch::default();
                    batch.push(Op::DeleteSession(*sid));
                    self.store.commit(batch)?;
                    crate::write_lock(&self.sessions).remove(sid);
                }
                Ok(MdsResponse::Ok)
            }
        }
    }

    /// The OSDs registered (for the daemon shell's pushes; empty if the store fails).
    pub fn registered_osds(&self) -> Vec<msg::OsdEntry> {
        self.store.osds().unwrap_or_default()
    }

    /// Counters for `maat stats`.
    pub fn stats(&self) -> DaemonStats {
        let s = &self.stats;
        let mut counters: Vec<(String, u64)> = vec![
            ("requests".into(), s.requests.load(Ordering::Relaxed)),
            (
                "requests_background".into(),
                s.background_requests.load(Ordering::Relaxed),
            ),
            ("refusals".into(), s.refusals.load(Ordering::Relaxed)),
            // Nonce streams in the replay window: about one per client connection.
            ("replay_streams".into(), lock(&self.replay).len() as u64),
            ("logins".into(), s.logins.load(Ordering::Relaxed)),
            (
                "login_cookies_sent".into(),
                s.login_cookies.load(Ordering::Relaxed),
            ),
            (
                "copies_missed_recorded".into(),
                s.copies_missed.load(Ordering::Relaxed),
            ),
            (
                "t10_master_key_exchanges".into(),
                s.t10_key_exchanges.load(Ordering::Relaxed),
            ),
            (
                "t10_keys_set".into(),
                s.t10_keys_set.load(Ordering::Relaxed),
            ),
            (
                "t10_fence_raises".into(),
                s.t10_fence_raises.load(Ordering::Relaxed),
            ),
            (
                "t10_fence_raises_put_off".into(),
                s.t10_fence_raises_put_off.load(Ordering::Relaxed),
            ),
            (
                "t10_credentials_issued".into(),
                s.t10_credentials_issued.load(Ordering::Relaxed),
            ),
            (
                "t10_credentials_reused".into(),
                s.t10_credentials_reused.load(Ordering::Relaxed),
            ),
            (
                "t10_policy_tags_set".into(),
                s.t10_policy_tags_set.load(Ordering::Relaxed),
            ),
            (
                "kds_revocation_lists".into(),
                s.kds_revocation_lists.load(Ordering::Relaxed),
            ),
            (
                "passphrase_changes".into(),
                s.passphrase_changes.load(Ordering::Relaxed),
            ),
            (
                "passphrase_resets".into(),
                s.passphrase_resets.load(Ordering::Relaxed),
            ),
            (
                "once_applied".into(),
                s.once_applied.load(Ordering::Relaxed),
            ),
            (
                "once_answered_again".into(),
                s.once_answered_again.load(Ordering::Relaxed),
            ),
            (
                "acl_catch_ups".into(),
                self.issuer.acl_catch_ups.load(Ordering::Relaxed),
            ),
            (
                "capability_cache_hits".into(),
                self.issuer.cache_hits.load(Ordering::Relaxed),
            ),
            (
                "capability_cache_misses".into(),
                self.issuer.cache_misses.load(Ordering::Relaxed),
            ),
        ];
        let durability = self.store.durability_counts();
        counters.push(("store_batches".into(), durability.batches));
        counters.push(("store_fsyncs".into(), durability.fsyncs));
        counters.push((format!("meta_engine:{}", self.store.engine()), 1));
        if let Some(probe) = self.leadership.get() {
            let token = probe();
            counters.push(("leader".into(), u64::from(token.is_some())));
            counters.push(("leader_token".into(), token.unwrap_or(0)));
        }
        counters.extend(self.scrubs.counters());
        counters.extend(self.degraded_counters());
        counters.extend(self.issuer.stats.counters());
        counters.extend(self.issuer.renewals.counters());
        counters.extend(DaemonStats::operations_with_background(
            &self.counters,
            &self.background,
        ));
        counters.extend(self.stats.refused_by_reason.counters());
        DaemonStats {
            daemon: "mds".into(),
            counters,
        }
    }
}

#[cfg(feature = "test-hooks")]
impl<S: MetaStore> Mds<S> {
    /// Test hook: runs `request` as user `uid`, as if it came over that user's session
    /// (no envelope, no replay window). Not in builds without the `test-hooks` feature.
    pub fn dispatch_as(
        &self,
        uid: u64,
        request: MdsRequest,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> std::result::Result<MdsResponse, WireError> {
        let who = self.principal(uid).map_err(|e| e.to_wire())?;
        let result = self.dispatch(&who, Some(&[0u8; 16]), request, now, rng);
        self.durable(result).map_err(|e| e.to_wire())
    }
}

/// Who `user` is, for the checks of one request.
fn principal_of(user: &UserRecord) -> Principal {
    let mut gids = vec![user.gid];
    gids.extend(user.groups.iter().copied());
    Principal {
        uid: user.id,
        gids,
        umask: user.umask,
        name: user.name.clone(),
    }
}
