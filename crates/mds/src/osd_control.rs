//! Issue 41, "no OSD trusting another": OSD registration, and the key each OSD checks
//! in with (`maat_proto::control`). An OSD registered with `RegisterOsdControl` checks in
//! under its own control key, agreed by X25519 between its sealing key and the MDS's;
//! the MDS marks its id in `meta` (`osd_control/<id:016x>` = version 1) and from then on
//! refuses the shared join key on that id's check-ins, so no other OSD (all hold the join
//! key) can check in in its name. An OSD registered the old way keeps the join key.

use crate::{lock, Batch, MdsError, MetaStore, Op, Result};
use maat_crypto::mac::MacKey;
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::Secret32;
use maat_proto::control::registered_control_mac;
use maat_proto::login::{register_mac_parts, registered_mac};
use maat_proto::msg::{ErrorCode, MdsPlainResponse, OsdRegistration};
use maat_proto::UnixMillis;

/// Version of the mark's value.
const MARK_FORMAT: u8 = 1;

fn mark_key(osd: u64) -> String {
    format!("osd_control/{osd:016x}")
}

impl<S: MetaStore> crate::Mds<S> {
    /// The join key, its MACs counted as background work (an OSD's registration and
    /// check-ins are its control channel, not a client's request).
    pub(crate) fn join_background(&self) -> MacKey {
        MacKey::new(Secret32::from_bytes(self.config.join_key))
            .with_counters(self.background.clone())
    }

    /// `RegisterOsd` and `RegisterOsdControl`: registers the OSD and answers with the
    /// MDS's keys (its sealing key only for a control key).
    pub(crate) fn registered(
        &self,
        registration: OsdRegistration,
        control: bool,
        now: UnixMillis,
    ) -> Result<MdsPlainResponse> {
        let nonce = registration.nonce;
        let vk = self.register_osd(registration, control, now)?;
        let join = self.join_background();
        if !control {
            return Ok(MdsPlainResponse::Registered {
                mds_verifying_key: vk,
                mac: registered_mac(&join, &vk, &nonce),
            });
        }
        let sealing = self.sealing.public_key().0;
        Ok(MdsPlainResponse::RegisteredControl {
            mds_verifying_key: vk,
            mds_sealing_key: sealing,
            mac: registered_control_mac(&join, &vk, &sealing, &nonce),
        })
    }

    /// Registers the OSD (its MAC under the join key checked, fresh); with `control`,
    /// marks it as checking in under its control key. Answers the MDS's verifying key.
    fn register_osd(
        &self,
        registration: OsdRegistration,
        control: bool,
        now: UnixMillis,
    ) -> Result<[u8; 32]> {
        let OsdRegistration {
            entry,
            timestamp,
            nonce,
            mac,
        } = registration;
        let (nonce, mac) = (&nonce, &mac);
        let join = self.join_background();
        let parts = register_mac_parts(
            entry.id,
            &entry.address,
            &entry.sealing_key,
            entry.weight,
            timestamp,
            nonce,
        );
        join.verify(&parts.iter().map(|v| v.as_slice()).collect::<Vec<_>>(), mac)
            .map_err(|_| MdsError::refused(ErrorCode::AuthenticationFailed, "OSD join key"))?;
        self.fresh(&[0u8; 16], nonce, UnixMillis(timestamp), now)?;
        if entry.weight == 0 || entry.address.is_empty() {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "weight or address",
            ));
        }
        let _guard = self.writing()?;
        let existing = self.store.osds()?;
        if existing
            .iter()
            .any(|o| o.id == entry.id && o.sealing_key != entry.sealing_key)
        {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!(
                    "OSD {} is registered with another key (a reformatted OSD needs a new id)",
                    entry.id
                ),
            ));
        }
        let mut batch = Batch::default();
        if control && self.store.meta(&mark_key(entry.id))?.is_none() {
            // Never taken back: an old-style registration of the same id (by anyone
            // holding the join key) does not bring the join key back for its check-ins.
            batch.push(Op::PutMeta(mark_key(entry.id), vec![MARK_FORMAT]));
        }
        if !existing.contains(&entry) {
            let epoch = self.epoch()? + 1;
            batch.push(Op::PutOsd(entry));
            batch.push(Op::PutMeta(
                "map_epoch".into(),
                epoch.to_be_bytes().to_vec(),
            ));
        }
        if !batch.0.is_empty() {
            self.store.commit(batch)?;
        }
        Ok(self.verifying_key())
    }

    /// The key OSD `osd`'s check-ins are MACed under: its control key once it
    /// registered for one, else the join key. Background work either way. A control key
    /// is computed once: the mark is never taken back and an id never changes its
    /// sealing key, so a cached key stays right.
    pub(crate) fn check_in_key(&self, osd: u64) -> Result<MacKey> {
        Ok(self
            .control_key_of(osd)?
            .unwrap_or_else(|| self.join_background()))
    }

    /// OSD `osd`'s control key, once it registered for one (issue 41; fenced key
    /// commands go under it too, issue 42); none before.
    pub(crate) fn control_key_of(&self, osd: u64) -> Result<Option<MacKey>> {
        if let Some(mac) = lock(&self.control_keys).get(&osd) {
            return Ok(Some(mac.clone()));
        }
        match self.store.meta(&mark_key(osd))? {
            None => Ok(None),
            Some(_) => {
                let entry = self
                    .store
                    .osds()?
                    .into_iter()
                    .find(|o| o.id == osd)
                    .ok_or_else(|| {
                        MdsError::refused(
                            ErrorCode::AuthenticationFailed,
                            format!("OSD {osd} is not registered"),
                        )
                    })?;
                // Counted as background work, as the check-ins it keys are.
                let shared = SealingSecretKey::from_bytes(*self.sealing.to_bytes())
                    .with_counters(self.background.clone())
                    .agree(&SealingPublicKey(entry.sealing_key))
                    .map_err(|_| {
                        MdsError::refused(
                            ErrorCode::AuthenticationFailed,
                            format!("OSD {osd}'s sealing key agrees no key"),
                        )
                    })?;
                let key = maat_proto::control::control_key(&shared, osd).map_err(|e| {
                    MdsError::refused(ErrorCode::Internal, format!("control key: {e}"))
                })?;
                let mac = MacKey::new(key).with_counters(self.background.clone());
                lock(&self.control_keys).insert(osd, mac.clone());
                Ok(Some(mac))
            }
        }
    }
}
