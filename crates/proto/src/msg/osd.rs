//! Messages to and from OSDs: the object commands (SPEC T5), the commands that feed the
//! capability checks (M4, M8, M10), bulk data handling and session offers.

use super::{DaemonStats, WireError};
use crate::{ProtoError, Result};
use serde::{Deserialize, Serialize};

/// Where an object lives in an OSD's object model (SPEC T5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId {
    /// Partition.
    pub partition: u64,
    /// The file the object belongs to (checked against the capability).
    pub file: u64,
    /// Stripe index within the file.
    pub stripe: u32,
}

/// The partition user data lives in.
pub const DATA_PARTITION: u64 = 1;

/// Object attributes (SPEC T5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectAttributes {
    /// Logical length.
    pub size: u64,
    /// Last modification (ms since the epoch).
    pub mtime: u64,
    /// Policy access tag (T2).
    pub policy_tag: u32,
    /// User-defined attributes.
    pub user: Vec<(String, Vec<u8>)>,
}

/// An OSD command (SPEC T5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdCommand {
    /// Create an empty object.
    Create {
        /// Object.
        object: ObjectId,
    },
    /// Remove an object.
    Remove {
        /// Object.
        object: ObjectId,
    },
    /// Read bytes.
    Read {
        /// Object.
        object: ObjectId,
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
    },
    /// Write bytes at an offset; `replace` makes the object exactly `data` (atomic).
    Write {
        /// Object.
        object: ObjectId,
        /// Offset.
        offset: u64,
        /// Data.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// Replace the whole object.
        replace: bool,
    },
    /// Append bytes.
    Append {
        /// Object.
        object: ObjectId,
        /// Data.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Read attributes.
    GetAttributes {
        /// Object.
        object: ObjectId,
    },
    /// Set the policy tag and user attributes.
    SetAttributes {
        /// Object.
        object: ObjectId,
        /// Policy tag.
        policy_tag: u32,
        /// User attributes (replace).
        user: Vec<(String, Vec<u8>)>,
    },
    /// List the objects of a partition (administrator).
    List {
        /// Partition.
        partition: u64,
    },
    /// Create a partition (administrator).
    CreatePartition {
        /// Partition.
        partition: u64,
    },
    /// Remove an empty partition (administrator).
    RemovePartition {
        /// Partition.
        partition: u64,
    },
    /// Erase everything (administrator).
    Format,
    /// Counters of this daemon.
    Stats,
    /// SPEC M4: the members of a Merkle root named by this request's capability (a
    /// `merkle_msg` message). The OSD verifies the capability, rebuilds the root from the
    /// members and keeps them only when it equals one of the capability's roots.
    SupplyTree {
        /// The tree message.
        #[serde(with = "serde_bytes")]
        tree: Vec<u8>,
    },
    /// SPEC M8: an MDS-signed renewal token (`renewal`). The OSD verifies it once, keeps
    /// the new expiry of every capability it names, and from then on accepts those
    /// capabilities until that expiry. Needs an authenticated session, no capability.
    SupplyRenewal {
        /// The signed token.
        #[serde(with = "serde_bytes")]
        token: Vec<u8>,
    },
    /// SPEC M10: the MDS-signed key lifetime token of a job's computation key and a proof
    /// of possession made for this OSD and session (`delegation::make_proof`). The OSD
    /// verifies the token once, keeps the latest expiry per key, and from then on serves
    /// this session under capabilities delegated to that key while the lifetime lasts.
    SupplyProof {
        /// The signed key lifetime token.
        #[serde(with = "serde_bytes")]
        lifetime: Vec<u8>,
        /// The sealed proof token.
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
    /// Issue 41: the BLAKE3 digest of the object's stored bytes as they are on the disk,
    /// checked or not (answer [`OsdResponse::Digest`]; `NoSuchObject` when absent). The
    /// state a repair makes its [`OsdCommand::ReplaceIf`] conditional on. Appended.
    Digest {
        /// Object.
        object: ObjectId,
    },
    /// Issue 41: makes the object exactly `data`, atomically and durably, only if its
    /// stored bytes still have the digest `expect` (`None`: only if it does not exist);
    /// otherwise refused with `ObjectChanged` and nothing written. How a repair puts a
    /// good copy over a missing or damaged one without undoing a write that landed in
    /// between. Needs read and write access (whether it was refused tells whether the
    /// object had that digest). Appended.
    ReplaceIf {
        /// Object.
        object: ObjectId,
        /// The digest the object must still have, or `None`: it must not exist.
        expect: Option<[u8; 32]>,
        /// The object's new bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
}

impl OsdCommand {
    /// The command's name in metrics (`maat_request_duration_seconds{request=…}`).
    pub fn kind(&self) -> &'static str {
        match self {
            OsdCommand::Create { .. } => "create",
            OsdCommand::Remove { .. } => "remove",
            OsdCommand::Read { .. } => "read",
            OsdCommand::Write { .. } => "write",
            OsdCommand::Append { .. } => "append",
            OsdCommand::GetAttributes { .. } => "get_attributes",
            OsdCommand::SetAttributes { .. } => "set_attributes",
            OsdCommand::List { .. } => "list",
            OsdCommand::CreatePartition { .. } => "create_partition",
            OsdCommand::RemovePartition { .. } => "remove_partition",
            OsdCommand::Format => "format",
            OsdCommand::Stats => "stats",
            OsdCommand::SupplyTree { .. } => "supply_tree",
            OsdCommand::SupplyRenewal { .. } => "supply_renewal",
            OsdCommand::SupplyProof { .. } => "supply_proof",
            OsdCommand::Digest { .. } => "digest",
            OsdCommand::ReplaceIf { .. } => "replace_if",
        }
    }

    /// The object a data command acts on, and the access it needs; `None` for
    /// administrative commands.
    pub fn object_access(&self) -> Option<(ObjectId, crate::capability::Mode)> {
        use crate::capability::Mode;
        match self {
            OsdCommand::Read { object, .. }
            | OsdCommand::GetAttributes { object }
            | OsdCommand::Digest { object } => Some((*object, Mode::READ)),
            // Read too: its answer tells whether the object had the digest `expect`,
            // which a write-only capability must not learn.
            OsdCommand::ReplaceIf { object, .. } => Some((*object, Mode::READ_WRITE)),
            OsdCommand::Create { object }
            | OsdCommand::Remove { object }
            | OsdCommand::Write { object, .. }
            | OsdCommand::Append { object, .. }
            | OsdCommand::SetAttributes { object, .. } => Some((*object, Mode::WRITE)),
            _ => None,
        }
    }
}

/// An authenticated OSD request: the capability (empty for administrative and stats
/// commands) and the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdRequest {
    /// MDS-signed capability bytes.
    #[serde(with = "serde_bytes")]
    pub capability: Vec<u8>,
    /// The command.
    pub command: OsdCommand,
}

impl OsdRequest {
    /// Moves the bulk data out (a protected envelope carries it apart from the message,
    /// see `protection`); empty for commands without data.
    pub fn take_bulk(&mut self) -> Vec<u8> {
        match &mut self.command {
            OsdCommand::Write { data, .. }
            | OsdCommand::Append { data, .. }
            | OsdCommand::ReplaceIf { data, .. } => std::mem::take(data),
            _ => Vec::new(),
        }
    }

    /// The request without its bulk data, and the data (borrowed: nothing is copied but
    /// the small fields).
    pub fn split_bulk(&self) -> (OsdRequest, &[u8]) {
        let (command, data) = match &self.command {
            OsdCommand::Write {
                object,
                offset,
                data,
                replace,
            } => (
                OsdCommand::Write {
                    object: *object,
                    offset: *offset,
                    data: Vec::new(),
                    replace: *replace,
                },
                data.as_slice(),
            ),
            OsdCommand::Append { object, data } => (
                OsdCommand::Append {
                    object: *object,
                    data: Vec::new(),
                },
                data.as_slice(),
            ),
            OsdCommand::ReplaceIf {
                object,
                expect,
                data,
            } => (
                OsdCommand::ReplaceIf {
                    object: *object,
                    expect: *expect,
                    data: Vec::new(),
                },
                data.as_slice(),
            ),
            other => (other.clone(), &[][..]),
        };
        (
            OsdRequest {
                capability: self.capability.clone(),
                command,
            },
            data,
        )
    }

    /// [`OsdRequest::put_bulk`], passing on `digest` (of `bulk`) only when the bulk became
    /// the command's data. A command may carry its data in the message instead (then the
    /// bulk is empty and its digest is of other bytes than the data).
    pub fn put_bulk_digested<D>(&mut self, bulk: Vec<u8>, digest: Option<D>) -> Result<Option<D>> {
        let in_message = matches!(
            &self.command,
            OsdCommand::Write { data, .. }
            | OsdCommand::Append { data, .. }
            | OsdCommand::ReplaceIf { data, .. } if !data.is_empty()
        );
        self.put_bulk(bulk)?;
        Ok(if in_message { None } else { digest })
    }

    /// Puts bulk data taken by [`OsdRequest::take_bulk`] back; refuses data for a command
    /// that carries none.
    pub fn put_bulk(&mut self, bulk: Vec<u8>) -> Result<()> {
        match &mut self.command {
            OsdCommand::Write { data, .. }
            | OsdCommand::Append { data, .. }
            | OsdCommand::ReplaceIf { data, .. }
                if data.is_empty() =>
            {
                *data = bulk;
                Ok(())
            }
            _ if bulk.is_empty() => Ok(()),
            _ => Err(ProtoError::Malformed {
                what: "OSD request",
                reason: "bulk data for a command without data",
            }),
        }
    }
}

/// Moves the bulk data out of an OSD answer (see [`OsdRequest::take_bulk`]).
pub fn take_response_bulk(result: &mut std::result::Result<OsdResponse, WireError>) -> Vec<u8> {
    match result {
        Ok(OsdResponse::Data(data)) => std::mem::take(data),
        _ => Vec::new(),
    }
}

/// Puts bulk data back into an OSD answer.
pub fn put_response_bulk(
    result: &mut std::result::Result<OsdResponse, WireError>,
    bulk: Vec<u8>,
) -> Result<()> {
    match result {
        Ok(OsdResponse::Data(data)) if data.is_empty() => {
            *data = bulk;
            Ok(())
        }
        _ if bulk.is_empty() => Ok(()),
        _ => Err(ProtoError::Malformed {
            what: "OSD response",
            reason: "bulk data for an answer without data",
        }),
    }
}

/// A NOSEC request (benchmarks): the claimed user and the command, nothing checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsecureRequest<T> {
    /// Claimed user id.
    pub user: u64,
    /// The request.
    pub request: T,
}

/// SPEC T1 NOSEC with the bulk data outside the message, as protected envelopes carry it
/// (`FrameType::InsecureBulk`), so that neither side copies it into or out of postcard:
/// `message length u32 BE ‖ postcard InsecureRequest { user, request without its bulk }
/// ‖ bulk`. Returns the head and the bulk, to be sent together.
pub fn insecure_bulk_request(user: u64, request: &OsdRequest) -> Result<(Vec<u8>, &[u8])> {
    let (head, bulk) = request.split_bulk();
    let head = with_length(&InsecureRequest {
        user,
        request: head,
    })?;
    Ok((head, bulk))
}

/// Reads an [`insecure_bulk_request`] payload.
pub fn open_insecure_bulk_request(payload: &[u8]) -> Result<InsecureRequest<OsdRequest>> {
    let (message, bulk) = split_length(payload, "NOSEC bulk request")?;
    let mut r: InsecureRequest<OsdRequest> = super::decode(message)?;
    r.request.put_bulk(bulk.to_vec())?;
    Ok(r)
}

/// The answer to an [`insecure_bulk_request`] (`FrameType::PlainBulk`): `message length
/// u32 BE ‖ postcard Result<OsdResponse, WireError> without its bulk ‖ bulk`. Returns the
/// parts to send.
pub fn plain_bulk_response(
    mut result: std::result::Result<OsdResponse, WireError>,
) -> Result<Vec<Vec<u8>>> {
    let bulk = take_response_bulk(&mut result);
    Ok(vec![length_prefixed(&super::encode_result(&result))?, bulk])
}

/// Reads a [`plain_bulk_response`] payload; its bulk moves to the front of the payload's
/// buffer (one move in memory, as a protected envelope's does), no new buffer.
pub fn open_plain_bulk_response(
    mut payload: Vec<u8>,
) -> Result<std::result::Result<OsdResponse, WireError>> {
    let (message, _) = split_length(&payload, "NOSEC bulk response")?;
    let mut result: std::result::Result<OsdResponse, WireError> = super::decode(message)?;
    let start = 4 + message.len();
    payload.drain(..start);
    put_response_bulk(&mut result, payload)?;
    Ok(result)
}

fn with_length<T: Serialize>(message: &T) -> Result<Vec<u8>> {
    length_prefixed(&super::encode(message)?)
}

/// `body length u32 BE ‖ body`.
fn length_prefixed(body: &[u8]) -> Result<Vec<u8>> {
    let len = u32::try_from(body.len()).map_err(|_| ProtoError::Malformed {
        what: "message",
        reason: "longer than 4 GiB",
    })?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// `message length u32 BE ‖ message ‖ rest` into the message and the rest.
fn split_length<'a>(payload: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8])> {
    let short = ProtoError::Malformed {
        what,
        reason: "shorter than its message length says",
    };
    let (len, rest) = payload.split_first_chunk::<4>().ok_or(short.clone())?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > rest.len() {
        return Err(short);
    }
    Ok(rest.split_at(len))
}

/// Answers to [`OsdCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdResponse {
    /// Done.
    Ok,
    /// Bytes read.
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Attributes.
    Attributes(ObjectAttributes),
    /// Objects.
    Objects(Vec<ObjectId>),
    /// Counters.
    Stats(DaemonStats),
    /// Issue 41: the digest of an object's stored bytes ([`OsdCommand::Digest`]).
    /// Appended.
    Digest([u8; 32]),
}

/// Unauthenticated messages to an OSD (frame type Plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdPlainRequest {
    /// SPEC M2: a signed session offer.
    Offer(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC M9: a revocation notice pushed by the MDS (signed: who carries it does not
    /// matter; applying one twice changes nothing).
    Revoke(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC T3: a SET MASTER KEY offer from the MDS (MACed under the current master
    /// authentication key). Answer `MasterKeyAccepted`.
    SetMasterKey(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC T3: a SET KEY from the MDS (MACed under the parent level's authentication
    /// key). Answer `KeySet`, once the key is durable.
    SetKey(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC T4: a SET POLICY TAG from the MDS (MACed under the partition's authentication
    /// key). Answer `PolicyTagSet`, once the tag is durable.
    SetPolicyTag(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Issue 42: one of the three key commands above inside a `t10::FencedKeyCommand`
    /// (the leader lease's fencing token, MACed under the OSD's control key). Answered
    /// as the command inside, or refused `Fenced`. Appended.
    Fenced(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// Answer to [`OsdPlainRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdPlainResponse {
    /// The MACed confirmation.
    Confirm(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The notice is applied.
    Applied,
    /// SPEC T3: the OSD's SET MASTER KEY accept (MACed under the master it was offered
    /// under); its new master pair is durable.
    MasterKeyAccepted(#[serde(with = "serde_bytes")] Vec<u8>),
    /// SPEC T3: the key is installed and durable; `ack` is a MAC under the new key
    /// (`t10_keys::set_key_ack`).
    KeySet {
        /// MAC under the new key over the SET KEY.
        ack: [u8; 32],
    },
    /// SPEC T4: the tag is durable; `ack` is `t10_keys::set_policy_tag_ack`.
    PolicyTagSet {
        /// MAC under the partition's authentication key over the command.
        ack: [u8; 32],
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;

    fn write(data: &[u8]) -> OsdRequest {
        OsdRequest {
            capability: vec![7; 3],
            command: OsdCommand::Write {
                object: ObjectId {
                    partition: DATA_PARTITION,
                    file: 9,
                    stripe: 2,
                },
                offset: 5,
                data: data.to_vec(),
                replace: true,
            },
        }
    }

    #[test]
    fn nosec_bulk_frames_carry_the_data_after_the_message() {
        let request = write(b"bulk bytes");
        let (head, bulk) = insecure_bulk_request(3, &request).unwrap();
        assert_eq!(bulk, b"bulk bytes");
        let payload = [head.as_slice(), bulk].concat();
        let opened = open_insecure_bulk_request(&payload).unwrap();
        assert_eq!((opened.user, opened.request), (3, request));
        // The data is not inside the message.
        assert!(!head.windows(4).any(|w| w == b"bulk"));

        let parts = plain_bulk_response(Ok(OsdResponse::Data(b"read back".to_vec()))).unwrap();
        assert_eq!(parts[1], b"read back");
        let answer = open_plain_bulk_response(parts.concat()).unwrap();
        assert_eq!(answer, Ok(OsdResponse::Data(b"read back".to_vec())));
        let refusal = WireError::new(super::super::ErrorCode::NoSuchObject, "gone");
        let parts = plain_bulk_response(Err(refusal.clone())).unwrap();
        assert_eq!(
            open_plain_bulk_response(parts.concat()).unwrap(),
            Err(refusal)
        );
    }

    #[test]
    fn malformed_nosec_bulk_frames_are_refused() {
        let request = write(b"data");
        let (head, bulk) = insecure_bulk_request(3, &request).unwrap();
        // Shorter than its length says, or than the length itself.
        assert!(open_insecure_bulk_request(&head[..head.len() - 1]).is_err());
        assert!(open_insecure_bulk_request(&head[..3]).is_err());
        // Bulk data for a command that carries none.
        let read = OsdRequest {
            capability: vec![],
            command: OsdCommand::Stats,
        };
        let (head, _) = insecure_bulk_request(3, &read).unwrap();
        assert!(open_insecure_bulk_request(&[head.as_slice(), bulk].concat()).is_err());
        // An answer with bulk data that is not `Data`.
        let mut parts = plain_bulk_response(Ok(OsdResponse::Ok)).unwrap();
        parts[1] = b"extra".to_vec();
        assert!(open_plain_bulk_response(parts.concat()).is_err());
        assert!(open_plain_bulk_response(vec![0, 0, 0, 9, 1]).is_err());
    }
}
