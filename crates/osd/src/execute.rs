//! Running a request whose envelope and capability were checked: the command against the
//! store, and the sealing of its answer (SPEC T1, T5).

use crate::{refuse, store_refusal, Authorized, Caller, ObjectStore, OsdCore, ReadAside, ReadOut};
use maat_crypto::CryptoRngCore;
use maat_proto::msg::{self, ErrorCode, OsdCommand, OsdRequest, OsdResponse, WireError};
use maat_proto::protection::{self, DataDigest, Protection};
use maat_proto::wire;
use maat_proto::UnixMillis;
use std::sync::atomic::Ordering;

impl OsdCore {
    /// [`OsdCore::execute`], except that a read whose answer may carry its data without
    /// a MAC over it (NOSEC, CAPKEY, CMDRSP: SPEC T1) is answered `Data` with no bytes and
    /// the range of the object's file to send in their place, straight from the file. So
    /// is an ALLDATA read (sealed over a digest) of bytes whose digest the store kept from
    /// their write: the answer is sealed from that digest, without a pass over the data.
    /// The caller uses this only for frames whose answer carries bulk data apart from the
    /// message (`SecRequest`, `T10Request`, `InsecureBulk`).
    pub fn execute_zero_copy(
        &self,
        store: &impl ObjectStore,
        caller: &Caller,
        request: &OsdRequest,
        now: UnixMillis,
    ) -> (Result<OsdResponse, WireError>, ReadAside) {
        let OsdCommand::Read { offset, length, .. } = &request.command else {
            return (
                self.execute(store, caller, request, now),
                ReadAside::default(),
            );
        };
        // Whether the answer puts no MAC over its data, and whether its MAC covers the
        // data's digest.
        let (unmaced, digested) = match caller.secure.as_ref().map(|c| c.method) {
            None => (true, false),
            Some(Some(s)) => (
                matches!(s.method, Protection::CapKey | Protection::CmdRsp),
                s.data_digest,
            ),
            // The version-1 envelope MACs everything.
            Some(None) => (false, false),
        };
        if !unmaced && !digested {
            return (
                self.execute(store, caller, request, now),
                ReadAside::default(),
            );
        }
        let auth = match self.authorize(caller, request, now) {
            Ok(auth) => auth,
            Err(e) => return (Err(e), ReadAside::default()),
        };
        let min = crate::limits::ZERO_COPY_READ_BYTES_MIN;
        let read = match store.read_file(&auth, *offset, *length, min) {
            Ok(Some(read)) => read,
            Ok(None) => {
                let r = self.read_authorized(store, &auth, *offset, *length);
                return (r, ReadAside::default());
            }
            Err(e) => return (self.counted(Err(store_refusal(e))), ReadAside::default()),
        };
        let digest = if digested { read.digest } else { None };
        if digested && digest.is_none() && matches!(read.out, ReadOut::File(_)) {
            // No kept digest: sealing must read the bytes.
            let r = self.read_authorized(store, &auth, *offset, *length);
            return (r, ReadAside::default());
        }
        let len = match &read.out {
            ReadOut::Bytes(d) => d.len() as u64,
            ReadOut::File(range) => range.len,
        };
        self.stats.bytes_read.fetch_add(len, Ordering::Relaxed);
        if digest.is_some() {
            self.stats
                .bytes_read_digest_kept
                .fetch_add(len, Ordering::Relaxed);
        }
        match read.out {
            ReadOut::Bytes(d) => (Ok(OsdResponse::Data(d)), ReadAside { file: None, digest }),
            ReadOut::File(range) => {
                self.stats
                    .bytes_read_from_file
                    .fetch_add(range.len, Ordering::Relaxed);
                let aside = ReadAside {
                    file: Some(range),
                    digest,
                };
                (Ok(OsdResponse::Data(Vec::new())), aside)
            }
        }
    }

    /// Runs a request end to end against `store`: authorization, then the command.
    pub fn execute(
        &self,
        store: &impl ObjectStore,
        caller: &Caller,
        request: &OsdRequest,
        now: UnixMillis,
    ) -> Result<OsdResponse, WireError> {
        let io = store_refusal;
        let command = &request.command;
        if caller.t10.is_some() && command.object_access().is_none() {
            return self.counted(Err(refuse(
                ErrorCode::PermissionDenied,
                "T10 credentials authorize object commands only",
            )));
        }
        match command {
            OsdCommand::Stats => return Ok(OsdResponse::Stats(self.stats())),
            OsdCommand::SupplyTree { tree } => {
                let r = self.supply_tree(caller, request, tree, now);
                return self.counted(r);
            }
            OsdCommand::SupplyRenewal { token } => {
                let r = self.supply_renewal(caller, token, now);
                return self.counted(r);
            }
            OsdCommand::SupplyProof { lifetime, proof } => {
                let r = self.supply_proof(caller, lifetime, proof, now);
                return self.counted(r);
            }
            OsdCommand::List { partition } => {
                let a = self.authorize_admin(caller)?;
                return store
                    .list(&a, *partition)
                    .map(OsdResponse::Objects)
                    .map_err(io);
            }
            OsdCommand::CreatePartition { partition } => {
                let a = self.authorize_admin(caller)?;
                return store
                    .create_partition(&a, *partition)
                    .map(|()| OsdResponse::Ok)
                    .map_err(io);
            }
            OsdCommand::RemovePartition { partition } => {
                let a = self.authorize_admin(caller)?;
                return store
                    .remove_partition(&a, *partition)
                    .map(|()| OsdResponse::Ok)
                    .map_err(io);
            }
            OsdCommand::Format => {
                let a = self.authorize_admin(caller)?;
                return store.format(&a).map(|()| OsdResponse::Ok).map_err(io);
            }
            _ => {}
        }
        let auth = self.authorize(caller, request, now)?;
        let result = match command {
            OsdCommand::Create { .. } => store.create(&auth).map(|()| OsdResponse::Ok),
            OsdCommand::Remove { .. } => store.remove(&auth).map(|()| OsdResponse::Ok),
            OsdCommand::Read { offset, length, .. } => {
                return self.read_authorized(store, &auth, *offset, *length)
            }
            OsdCommand::Write {
                offset,
                data,
                replace,
                ..
            } => {
                // The digest the envelope check computed, when the bulk data it is of
                // became this command's data (`put_bulk_digested`).
                let digest = caller
                    .secure
                    .as_ref()
                    .and_then(|c| c.request_digest.as_ref());
                store.write(&auth, *offset, data, *replace, digest)
            }
            .map(|()| {
                self.stats
                    .bytes_written
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                OsdResponse::Ok
            }),
            OsdCommand::ReplaceIf { expect, data, .. } => {
                let digest = caller
                    .secure
                    .as_ref()
                    .and_then(|c| c.request_digest.as_ref());
                store
                    .replace_if(&auth, expect.as_ref(), data, digest)
                    .map(|()| {
                        self.stats
                            .bytes_written
                            .fetch_add(data.len() as u64, Ordering::Relaxed);
                        OsdResponse::Ok
                    })
            }
            OsdCommand::Digest { .. } => store.digest(&auth).map(OsdResponse::Digest),
            OsdCommand::Append { data, .. } => store.append(&auth, data).map(|()| {
                self.stats
                    .bytes_written
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                OsdResponse::Ok
            }),
            OsdCommand::GetAttributes { .. } => store.attributes(&auth).map(|mut a| {
                // Under a T10 credential, the tag in force (SPEC T4).
                if let Some(tag) = auth.policy_tag {
                    a.policy_tag = tag;
                }
                OsdResponse::Attributes(a)
            }),
            OsdCommand::SetAttributes {
                policy_tag, user, ..
            } => store
                .set_attributes(&auth, *policy_tag, user)
                .map(|()| OsdResponse::Ok),
            _ => return Err(refuse(ErrorCode::InvalidArgument, "unknown command")),
        };
        self.counted(result.map_err(io))
    }

    fn read_authorized(
        &self,
        store: &impl ObjectStore,
        auth: &Authorized,
        offset: u64,
        length: u32,
    ) -> Result<OsdResponse, WireError> {
        let result = store.read(auth, offset, length).map(|d| {
            self.stats
                .bytes_read
                .fetch_add(d.len() as u64, Ordering::Relaxed);
            OsdResponse::Data(d)
        });
        self.counted(result.map_err(store_refusal))
    }

    /// Seals the answer for `caller`: a protected response sealed as the request was, an
    /// authenticated version-1 response, or (NOSEC) a plain encoded result. The payload
    /// comes in parts so that bulk data is sent as read, never copied into an envelope.
    /// `digest` is the kept digest of the answer's data ([`ReadAside::digest`]), which
    /// may then be sent apart.
    pub fn seal_response(
        &self,
        caller: &Caller,
        mut result: Result<OsdResponse, WireError>,
        digest: Option<&DataDigest>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> (wire::FrameType, Vec<Vec<u8>>) {
        let Some(c) = &caller.secure else {
            return (wire::FrameType::Plain, vec![msg::encode_result(&result)]);
        };
        let Some(method) = c.method else {
            let body = msg::encode_result(&result);
            return (
                wire::FrameType::Response,
                vec![wire::seal_response(
                    &c.keys.mac,
                    &c.session_id,
                    &c.nonce,
                    now,
                    &body,
                )],
            );
        };
        let data = msg::take_response_bulk(&mut result);
        let body = msg::encode_result(&result);
        match protection::seal_response_parts(
            &c.keys,
            method,
            &c.session_id,
            &c.nonce,
            now,
            &body,
            data,
            digest,
            rng,
        ) {
            Ok(parts) => (wire::FrameType::SecResponse, parts.to_vec()),
            Err(e) => (
                wire::FrameType::Refusal,
                vec![msg::encode_result::<OsdResponse>(&Err(WireError::from(e)))],
            ),
        }
    }
}
