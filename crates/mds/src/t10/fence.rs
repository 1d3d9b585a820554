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
        (self.channel)(
            self.osd,
            &OsdPlainRequest::Fenced(fenced.encoded().to_vec()),
        )
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
