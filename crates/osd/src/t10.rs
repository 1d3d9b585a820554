//! SPEC T2, T3 at the OSD: requests under T10 credentials (capability + capability key,
//! no session, no signature) and the key hierarchy the MDS sets with SET MASTER KEY and
//! SET KEY.
//!
//! * A credential's first request costs one HMAC (its capability key, from the working
//!   key the capability names) and one MAC (the envelope); the key is then cached per
//!   credential, so later requests cost the envelope MAC alone.
//! * A key command is applied to a copy of the key state, the copy made durable through
//!   the shell's persister, and only then installed and acknowledged, so an OSD never
//!   acknowledges a key it would forget in a crash.
//! * When a working slot is refilled, its old key is kept in memory only to tell a
//!   revoked credential (`Revoked`) from a forged one (`BadMac`); it authorizes nothing.
//! * SPEC T4 by tag: each object's policy access tag (0 unless SET POLICY TAG raised it) is
//!   kept with the keys (durable) and mirrored in a table read on every request, so a
//!   credential made with an older tag is refused (`Revoked`) from the moment the tag is
//!   acknowledged.

use super::*;
use maat_proto::signed::UnverifiedMac;
use maat_proto::t10::{self, Permissions, SetKeyTarget, T10Access, T10Capability};
use maat_proto::t10_keys::{self, KeyState};
use std::sync::Arc;

pub use crate::limits::T10_CREDENTIALS_CACHED_MAX;
/// The user a T10 request runs as: none (credentials name objects, not users); never an
/// account, and refused for every command but the object commands.
pub const T10_NO_USER: UserId = UserId(u64::MAX);

/// Makes a key state durable before it is used (the shell writes the key file).
pub type KeyPersister = dyn Fn(&[u8]) -> std::io::Result<()> + Send + Sync;

/// A verified credential: its capability and the envelope keys from its capability key.
#[derive(Clone)]
pub(crate) struct CachedCredential {
    capability: T10Capability,
    keys: EnvelopeKeys,
}

#[derive(Default)]
pub(crate) struct T10State {
    keys: Mutex<Option<KeyState>>,
    persist: RwLock<Option<Arc<KeyPersister>>>,
    credentials: RwLock<HashMap<[u8; 16], CachedCredential>>,
    /// The key each refilled working slot held before (partition, slot).
    retired: Mutex<HashMap<(u64, u8), maat_crypto::mac::MacKey>>,
    /// SPEC T4: (partition, object) → policy access tag, for the tags other than 0 (a copy
    /// of the key state's, read without its lock).
    tags: RwLock<HashMap<(u64, u64), u32>>,
}

/// The permission a data command needs under a T10 capability.
fn needed(command: &OsdCommand) -> Option<Permissions> {
    Some(match command {
        OsdCommand::Read { .. } | OsdCommand::Digest { .. } => Permissions::READ,
        OsdCommand::GetAttributes { .. } => Permissions::GET_ATTR,
        OsdCommand::Create { .. } => Permissions::CREATE,
        OsdCommand::Remove { .. } => Permissions::REMOVE,
        OsdCommand::Write { .. } => Permissions::WRITE,
        OsdCommand::ReplaceIf { .. } => Permissions::READ.union(Permissions::WRITE),
        OsdCommand::Append { .. } => Permissions::APPEND,
        OsdCommand::SetAttributes { .. } => Permissions::SET_ATTR,
        _ => return None,
    })
}

impl OsdCore {
    /// Installs the key state read from this OSD's key file (or the bootstrap state of a
    /// new OSD) and the function that makes later states durable.
    pub fn load_t10_keys(&self, state: KeyState, persist: Arc<KeyPersister>) {
        *write(&self.t10.tags) = state.policy_tags().collect();
        *lock(&self.t10.keys) = Some(state);
        *write(&self.t10.persist) = Some(persist);
        write(&self.t10.credentials).clear();
    }

    /// Issue 42: the highest fencing token a key command was applied under here (0: none
    /// came fenced yet).
    pub fn t10_fence(&self) -> u64 {
        lock(&self.t10.keys).as_ref().map_or(0, KeyState::fence)
    }

    /// Generations of this OSD's keys, for `maat admin keys show`: master, root, and per
    /// partition its key and working slots.
    pub fn t10_generations(&self) -> Vec<(String, u64)> {
        let keys = lock(&self.t10.keys);
        let Some(state) = keys.as_ref() else {
            return Vec::new();
        };
        state.generations()
    }

    /// Issue 42: a key command inside a `FencedKeyCommand` (MACed under the control key
    /// agreed with the MDS, for this OSD): applied as [`OsdCore::t10_key_command`] under
    /// its fencing token.
    pub(crate) fn fenced_key_command(
        &self,
        bytes: &[u8],
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<OsdPlainResponse, WireError> {
        let key = read(&self.control).clone().ok_or_else(|| {
            refuse(
                ErrorCode::NotReady,
                "no control key agreed with the MDS yet (registration pending)",
            )
        })?;
        let fenced = UnverifiedMac::<t10::FencedKeyCommand>::decode(bytes)?.verify(&key)?;
        if fenced.osd != self.id.0 {
            return Err(refuse(
                ErrorCode::WrongRecipient,
                format!("a fenced key command for OSD {}", fenced.osd),
            ));
        }
        let command: OsdPlainRequest = msg::decode(&fenced.command)?;
        match command {
            OsdPlainRequest::SetMasterKey(_)
            | OsdPlainRequest::SetKey(_)
            | OsdPlainRequest::SetPolicyTag(_) => {
                self.t10_key_command(&command, Some(fenced.fence), now, rng)
            }
            _ => Err(refuse(
                ErrorCode::InvalidArgument,
                "only key commands travel fenced",
            )),
        }
    }

    /// SPEC T3: applies a SET MASTER KEY offer or a SET KEY pushed by the MDS, sent under
    /// fencing token `fence` (issue 42; none: sent bare), refused `Fenced` under a token
    /// below one applied before ([`KeyState::admit_fence`]); the token is stored with the
    /// key state the command makes.
    pub(crate) fn t10_key_command(
        &self,
        request: &OsdPlainRequest,
        fence: Option<u64>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<OsdPlainResponse, WireError> {
        let persist = read(&self.t10.persist)
            .clone()
            .ok_or_else(|| refuse(ErrorCode::NotReady, "T10 keys not loaded yet"))?;
        let mut keys = lock(&self.t10.keys);
        let current = keys
            .as_ref()
            .ok_or_else(|| refuse(ErrorCode::NotReady, "T10 keys not loaded yet"))?;
        let mut next = current.clone();
        next.admit_fence(fence)?;
        let mut tagged = None;
        let (answer, refilled) = match request {
            OsdPlainRequest::SetMasterKey(offer) => {
                let accept = t10_keys::osd_set_master_key(&mut next, offer, now, rng)?;
                (
                    OsdPlainResponse::MasterKeyAccepted(accept.encoded().to_vec()),
                    None,
                )
            }
            OsdPlainRequest::SetKey(set_key) => {
                let (target, ack) = t10_keys::osd_set_key(&mut next, set_key)?;
                let refilled = match target {
                    SetKeyTarget::Working {
                        partition,
                        key_version,
                    } => current
                        .working(partition, key_version)
                        .map(|old| ((partition, key_version), old.key.clone())),
                    _ => None,
                };
                (OsdPlainResponse::KeySet { ack }, refilled)
            }
            OsdPlainRequest::SetPolicyTag(command) => {
                let (command, ack) = t10_keys::osd_set_policy_tag(&mut next, command)?;
                tagged = Some(((command.partition, command.object_id), command.tag));
                (OsdPlainResponse::PolicyTagSet { ack }, None)
            }
            _ => return Err(refuse(ErrorCode::InvalidArgument, "not a key command")),
        };
        persist(&next.encode()).map_err(|e| {
            refuse(
                ErrorCode::Internal,
                format!("storing the T10 keys failed: {e}"),
            )
        })?;
        *keys = Some(next);
        if let Some((object, tag)) = tagged {
            write(&self.t10.tags).insert(object, tag);
        }
        drop(keys);
        if let Some((slot, old)) = refilled {
            let mut retired = lock(&self.t10.retired);
            if retired.len() >= T10_CREDENTIALS_CACHED_MAX {
                retired.clear();
            }
            retired.insert(
                slot,
                maat_crypto::mac::MacKey::new(old).with_counters(self.counters.clone()),
            );
            // Credentials under the refilled slot must be checked again (and fail).
            write(&self.t10.credentials)
                .retain(|_, c| (c.capability.partition_id, c.capability.key_version) != slot);
        }
        Ok(answer)
    }

    /// SPEC T2: checks a `T10Request` frame (capability, then the envelope under its
    /// capability key: id, timestamp window, MAC, nonce) and decodes the request.
    pub fn open_t10_request(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let r = self.open_t10_request_inner(payload, now);
        self.counted(r)
    }

    fn open_t10_request_inner(
        &self,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<(Caller, OsdRequest), WireError> {
        let (capability, envelope) = t10::split_request(payload)?;
        let envelope = protection::UnverifiedRequest::decode(envelope)?;
        let header = envelope.header;
        let id = t10::credential_id(capability);
        if header.session_id != id {
            return Err(refuse(
                ErrorCode::Malformed,
                "envelope id is not its capability's credential id",
            ));
        }
        lock(&self.replay)
            .check_time(header.timestamp, now)
            .map_err(freshness)?;
        let cached = read(&self.t10.credentials).get(&id).cloned();
        let credential = match cached {
            Some(c) => c,
            None => self.credential(capability)?,
        };
        if header.method < credential.capability.security_method {
            return Err(refuse(
                ErrorCode::ProtectionTooWeak,
                format!(
                    "sealed with {}, the credential requires {}",
                    header.method, credential.capability.security_method
                ),
            ));
        }
        let opened = match envelope.clone().open_digested(&credential.keys, capability) {
            Ok(opened) => opened,
            Err(e) => return Err(self.classify_t10_failure(capability, envelope, e)),
        };
        {
            let mut cache = write(&self.t10.credentials);
            if cache.len() >= T10_CREDENTIALS_CACHED_MAX {
                cache.clear();
            }
            cache.insert(id, credential.clone());
        }
        lock(&self.replay)
            .check_and_record(&id, &header.nonce, header.timestamp, now)
            .map_err(freshness)?;
        let mut decoded: OsdRequest = msg::decode(&opened.message)?;
        let request_digest = decoded.put_bulk_digested(opened.data, opened.digest)?;
        Ok((
            Caller {
                user: T10_NO_USER,
                secure: Some(SecureContext {
                    session_id: id,
                    nonce: header.nonce,
                    keys: credential.keys,
                    method: Some(header.sealing()),
                    request_digest,
                }),
                t10: Some(credential.capability),
            },
            decoded,
        ))
    }

    /// The capability key of a credential not in the cache: one HMAC under the working key
    /// its capability names.
    fn credential(&self, capability: &[u8]) -> Result<CachedCredential, WireError> {
        let body = t10::decode_capability(capability)?;
        let keys = lock(&self.t10.keys);
        let state = keys
            .as_ref()
            .ok_or_else(|| refuse(ErrorCode::NotReady, "T10 keys not loaded yet"))?;
        let working = state
            .working(body.partition_id, body.key_version)
            .ok_or_else(|| {
                refuse(
                    ErrorCode::Revoked,
                    format!(
                        "no working key {} for partition {} here (never set, or exchanged)",
                        body.key_version, body.partition_id
                    ),
                )
            })?;
        let working =
            maat_crypto::mac::MacKey::new(working.key.clone()).with_counters(self.counters.clone());
        Ok(CachedCredential {
            capability: body,
            keys: self.credential_keys(capability, &working),
        })
    }

    /// The envelope keys of a capability's key under `working` (one HMAC).
    fn credential_keys(
        &self,
        capability: &[u8],
        working: &maat_crypto::mac::MacKey,
    ) -> EnvelopeKeys {
        let ck = t10::capability_key(capability, working);
        EnvelopeKeys::new(ck.expose()).with_counters(self.counters.clone())
    }

    /// A T10 request whose MAC failed: `Revoked` when it verifies under the key its slot
    /// held before the last refill (a credential revoked by key exchange, SPEC T4),
    /// otherwise the failure itself.
    fn classify_t10_failure(
        &self,
        capability: &[u8],
        envelope: protection::UnverifiedRequest<'_>,
        error: maat_proto::ProtoError,
    ) -> WireError {
        let Ok(body) = t10::decode_capability(capability) else {
            return error.into();
        };
        let retired = lock(&self.t10.retired)
            .get(&(body.partition_id, body.key_version))
            .cloned();
        if let Some(old) = retired {
            if envelope
                .open(&self.credential_keys(capability, &old), capability)
                .is_ok()
            {
                return refuse(
                    ErrorCode::Revoked,
                    "the credential's working key was exchanged (revoked); open again",
                );
            }
        }
        error.into()
    }

    /// SPEC T2: the checks of a data command under a T10 capability: the command's
    /// permission, the object, validity; the method was checked with the envelope.
    pub(crate) fn authorize_t10(
        &self,
        capability: &T10Capability,
        request: &OsdRequest,
        object: ObjectId,
        mode: Mode,
        now: UnixMillis,
    ) -> Result<Authorized, WireError> {
        let needed = needed(&request.command).ok_or_else(|| {
            refuse(
                ErrorCode::PermissionDenied,
                "T10 credentials authorize object commands only",
            )
        })?;
        if object.partition != DATA_PARTITION {
            return Err(refuse(
                ErrorCode::PermissionDenied,
                "credentials reach the data partition only",
            ));
        }
        let tag = read(&self.t10.tags)
            .get(&(capability.partition_id, object.file))
            .copied()
            .unwrap_or(0);
        capability
            .check_access(
                T10Access {
                    object_id: object.file,
                    policy_access_tag: Some(tag),
                    needed,
                },
                now,
            )
            .map_err(|e| match e {
                maat_proto::ProtoError::WrongRecipient { .. } => {
                    refuse(ErrorCode::WrongFile, e.to_string())
                }
                e => e.into(),
            })?;
        // The tag is the security manager's (SET POLICY TAG from the MDS): a holder of
        // SET ATTRIBUTES may write the user attributes, not move the tag.
        if let OsdCommand::SetAttributes { policy_tag, .. } = &request.command {
            if *policy_tag != tag {
                return Err(refuse(
                    ErrorCode::PermissionDenied,
                    format!(
                        "the policy access tag ({tag}) is set by the MDS only \
                         (`maat admin keys revoke-object`); send it unchanged"
                    ),
                ));
            }
        }
        Ok(Authorized {
            object,
            mode,
            policy_tag: Some(tag),
        })
    }
}
