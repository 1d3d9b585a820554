//! Issue 42 at the MDS: key commands go to an OSD fenced by the leader lease's token
//! (`t10::FencedKeyCommand`, MACed under the OSD's control key), so that an OSD never
//! applies a command from an instance whose lease ran out after one from its successor.

use super::*;
use crate::store::LeaseState;

/// The way key commands go to one OSD: the shell's channel, each command inside a
/// [`t10::FencedKeyCommand`] when `fencing` names the leader lease's token and the OSD's
/// control key (issue 42).
pub(super) struct KeyLink<'a> {
    pub(super) channel: &'a T10Channel,
    pub(super) osd: &'a OsdEntry,
    pub(super) fencing: Option<(u64, MacKey)>,
    /// Told the token of a fenced command the OSD refused as fenced
    /// ([`Mds::fenced_out`]): the token a raise was asked for, if one was.
    pub(super) on_fenced: &'a dyn Fn(u64) -> Option<u64>,
}

impl KeyLink<'_> {
    pub(super) fn send(
        &self,
        request: OsdPlainRequest,
    ) -> std::result::Result<OsdPlainResponse, ChannelError> {
        let Some((fence, key)) = &self.fencing else {
            return (self.channel)(self.osd, &request);
        };
        let command =
            msg::encode(&request).map_err(|e| ChannelError::BadAnswer(format!("encoding: {e}")))?;
        let fenced = maat_proto::signed::mac(
            t10::FencedKeyCommand {
                osd: self.osd.id,
                fence: *fence,
                command,
            },
            key,
        );
        match (self.channel)(
            self.osd,
            &OsdPlainRequest::Fenced(fenced.encoded().to_vec()),
        ) {
            // An OSD from before fencing (with a control key all the same) does not know
            // the message: the command goes bare, as before. Safe: an OSD that ever took a
            // fenced command refuses bare ones.
            Err(ChannelError::Refused(e)) if e.code == ErrorCode::Malformed => {
                (self.channel)(self.osd, &request)
            }
            Err(ChannelError::Refused(mut e)) if e.code == ErrorCode::Fenced => {
                if let Some(raised) = (self.on_fenced)(*fence) {
                    e.detail = format!(
                        "{}; this leader was granted its lease under the token refused, so \
                         the OSD applied commands under a token the store no longer knows \
                         (restored from an older backup, or a new store): a raise of the \
                         lease's token to {raised} is asked for at the next renewal (made \
                         only if this instance still holds the lease then), and the command \
                         goes again under the new token",
                        e.detail
                    );
                }
                Err(ChannelError::Refused(e))
            }
            other => other,
        }
    }
}

/// Most a leader raises its lease's fencing token by after one refusal as fenced: the
/// raise doubles the token up to this step, so an OSD's fence far ahead is passed in a
/// few refusals, while refusals forged on the network (they are not authenticated)
/// cannot run the token out of its 64 bits in any time that matters (one raise per
/// renewal: 2^44 renewals).
const FENCE_RAISE_STEP_MAX: u64 = 1 << 20;

impl<S: MetaStore> Mds<S> {
    /// Issue 42: an OSD refused a key command sent under token `sent` as fenced (it
    /// applied one under a higher token). If this instance was last granted the leader
    /// lease under `sent`, the token is to be raised at its next renewal, by `sent` again,
    /// at most [`FENCE_RAISE_STEP_MAX`] ([`Mds::raise_if_fenced_out`]). Returns the token
    /// asked for. Not raised now: the instance's commits that require its lease name the
    /// token it renewed under until the renewal brings the new one, and a raise in
    /// between would fail them (the keys another OSD took in the same upkeep would go
    /// unrecorded).
    pub(super) fn fenced_out(&self, sent: u64) -> Option<u64> {
        let (_, token) = lock(&self.leader_grant).clone()?;
        if token != sent {
            return None;
        }
        let at_least = sent.saturating_add(sent.clamp(1, FENCE_RAISE_STEP_MAX));
        let mut pending = lock(&self.t10.fence_raise);
        let asked = match *pending {
            Some((under, to)) if under == sent => to.max(at_least),
            _ => at_least,
        };
        *pending = Some((sent, asked));
        Some(asked)
    }

    /// Issue 42: after this instance's lease request answered `state`: if a raise was
    /// asked ([`Mds::fenced_out`]) under the token it holds the leader lease by now, the
    /// token is raised in the store ([`MetaStore::raise_lease`]: the holder only, while
    /// its lease runs, never lower), between key commands, and the grant answered is
    /// under the raised token. If this instance still holds the lease under the token it
    /// was refused under, no successor made the higher token the OSD applied: the store
    /// lost tokens it handed out (restored from an older backup, or a new store whose
    /// leases start again at 1). A raise asked under another token is dropped.
    pub(crate) fn raise_if_fenced_out(
        &self,
        name: &str,
        holder: &str,
        state: LeaseState,
        now: UnixMillis,
    ) -> Result<LeaseState> {
        if name != LEADER_LEASE {
            return Ok(state);
        }
        let Some((under, to)) = lock(&self.t10.fence_raise).take() else {
            return Ok(state);
        };
        if !state.granted || state.token != under {
            return Ok(state);
        }
        // No key command in flight while the token moves. An upkeep that holds the
        // exchange may wait up to an answer timeout on a hung OSD: the renewal does not
        // wait for it (its lease would lapse, and another instance lead for nothing),
        // and the raise is asked again at the next renewal, unless a newer one was.
        let Some(_one) = maat_proto::sync::try_lock(&self.t10.exchange) else {
            let mut pending = lock(&self.t10.fence_raise);
            if pending.is_none() {
                *pending = Some((under, to));
            }
            self.stats
                .t10_fence_raises_put_off
                .fetch_add(1, Ordering::Relaxed);
            return Ok(state);
        };
        let raised = {
            let _one = lock(&self.leases);
            self.store.raise_lease(name, holder, to, now.0)?
        };
        match raised {
            Some(token) if token > state.token => {
                self.stats.t10_fence_raises.fetch_add(1, Ordering::Relaxed);
                Ok(LeaseState { token, ..state })
            }
            // (Taken by another meanwhile, or run out: the next request says so.)
            _ => Ok(state),
        }
    }
}

impl<S: MetaStore> Mds<S> {
    /// Issue 42: the fencing token key commands to OSD `osd` go under, and the key that
    /// MACs them (its control key): the leader lease's token at the instance that holds
    /// it, none where no daemon set a leadership probe (one MDS in a test) or for an OSD
    /// that registered before control keys (it would not know a fenced command). An
    /// instance that does not lead sends none: refused here.
    pub(super) fn key_fencing(&self, osd: u64) -> Result<Option<(u64, MacKey)>> {
        let Some(probe) = self.leadership.get() else {
            return Ok(None);
        };
        let Some(token) = probe() else {
            return Err(not_ready(
                osd,
                "this MDS instance does not hold the leader lease; the leader sends key \
                 commands (at its next upkeep, within a second)",
            ));
        };
        Ok(self.control_key_of(osd)?.map(|key| (token, key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    type Seen = Arc<StdMutex<Vec<bool>>>;

    fn entry() -> OsdEntry {
        OsdEntry {
            id: 7,
            address: "10.0.0.7:7000".into(),
            sealing_key: [0; 32],
            weight: 1,
        }
    }

    /// What an OSD answers to each message it is sent: `fenced` for a fenced one, a
    /// key set for a bare one; the messages seen are kept.
    fn osd(fenced: ErrorCode, seen: Seen) -> Box<T10Channel> {
        Box::new(move |_, request| {
            let is_fenced = matches!(request, OsdPlainRequest::Fenced(_));
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(is_fenced);
            if is_fenced {
                Err(ChannelError::Refused(WireError::new(fenced, "as told")))
            } else {
                Ok(OsdPlainResponse::KeySet { ack: [0; 32] })
            }
        })
    }

    #[test]
    fn a_fenced_command_goes_bare_only_to_an_osd_that_does_not_know_fencing() {
        let key = MacKey::new(maat_crypto::Secret32::from_bytes([5; 32]));
        let entry = entry();
        let command = OsdPlainRequest::SetKey(vec![1, 2, 3]);
        // An OSD from before fencing refuses the message as malformed: sent again bare.
        let seen = Seen::default();
        let old = osd(ErrorCode::Malformed, seen.clone());
        let link = KeyLink {
            channel: old.as_ref(),
            osd: &entry,
            fencing: Some((3, key.clone())),
            on_fenced: &|_| None,
        };
        assert!(matches!(
            link.send(command.clone()),
            Ok(OsdPlainResponse::KeySet { .. })
        ));
        assert_eq!(
            *seen.lock().unwrap_or_else(|p| p.into_inner()),
            [true, false]
        );
        // An OSD that refuses it as fenced (a newer leader's was applied): never bare.
        let seen = Seen::default();
        let newer = osd(ErrorCode::Fenced, seen.clone());
        let told = StdMutex::new(Vec::new());
        let on_fenced = |sent| {
            told.lock().unwrap_or_else(|p| p.into_inner()).push(sent);
            Some(6)
        };
        let link = KeyLink {
            channel: newer.as_ref(),
            osd: &entry,
            fencing: Some((3, key)),
            on_fenced: &on_fenced,
        };
        // (The leader is told, and says in the refusal that it asked for a raise.)
        assert!(matches!(
            link.send(command.clone()),
            Err(ChannelError::Refused(e)) if e.code == ErrorCode::Fenced
                && e.detail.contains("raise of the lease's token to 6 is asked")
        ));
        assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), [true]);
        assert_eq!(*told.lock().unwrap_or_else(|p| p.into_inner()), [3]);
        // No fencing (no leadership probe, or an OSD without a control key): bare.
        let seen = Seen::default();
        let any = osd(ErrorCode::Fenced, seen.clone());
        let link = KeyLink {
            channel: any.as_ref(),
            osd: &entry,
            fencing: None,
            on_fenced: &|_| None,
        };
        assert!(link.send(command).is_ok());
        assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), [false]);
    }
}
