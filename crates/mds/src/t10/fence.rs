//! Issue 42 at the MDS: key commands go to an OSD fenced by the leader lease's token
//! (`t10::FencedKeyCommand`, MACed under the OSD's control key), so that an OSD never
//! applies a command from an instance whose lease ran out after one from its successor.

use super::*;

/// The way key commands go to one OSD: the shell's channel, each command inside a
/// [`t10::FencedKeyCommand`] when `fencing` names the leader lease's token and the OSD's
/// control key (issue 42).
pub(super) struct KeyLink<'a> {
    pub(super) channel: &'a T10Channel,
    pub(super) osd: &'a OsdEntry,
    pub(super) fencing: Option<(u64, MacKey)>,
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
            other => other,
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
        let link = KeyLink {
            channel: newer.as_ref(),
            osd: &entry,
            fencing: Some((3, key)),
        };
        assert!(matches!(
            link.send(command.clone()),
            Err(ChannelError::Refused(e)) if e.code == ErrorCode::Fenced
        ));
        assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), [true]);
        // No fencing (no leadership probe, or an OSD without a control key): bare.
        let seen = Seen::default();
        let any = osd(ErrorCode::Fenced, seen.clone());
        let link = KeyLink {
            channel: any.as_ref(),
            osd: &entry,
            fencing: None,
        };
        assert!(link.send(command).is_ok());
        assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), [false]);
    }
}
