//! Partitions (SPEC T1): named sets of files whose data path uses one protection method,
//! chosen by the administrator. A file belongs to the partition of the directory it was
//! made in (`maat mkdir --partition NAME` starts one); the MDS signs the partition's method
//! into every capability for the file, and OSDs refuse requests sealed more weakly. On the
//! OSDs every user file's objects live in the data partition, keyed by the file id: the
//! method travels in the capability, so an OSD needs no partition table of its own.

use super::*;
use maat_proto::limits::REPLICAS_MAX;
use maat_proto::msg::{Credentials, PartitionInfo};
use maat_proto::protection::Protection;
use store::{PartitionRecord, DEFAULT_PARTITION};

pub use crate::limits::PARTITION_NAME_BYTES_MAX;

fn info(p: &PartitionRecord) -> PartitionInfo {
    PartitionInfo {
        id: p.id,
        name: p.name.clone(),
        protection: p.protection,
        credentials: p.credentials,
    }
}

impl<S: MetaStore> Mds<S> {
    /// The partition with `id`; a file naming a partition that does not exist (which the
    /// MDS never writes) is refused rather than given a default method.
    pub(crate) fn partition(&self, id: u64) -> Result<PartitionRecord> {
        self.store.partition(id)?.ok_or_else(|| {
            MdsError::refused(ErrorCode::Internal, format!("partition {id} is missing"))
        })
    }

    pub(crate) fn partition_by_name(&self, name: &str) -> Result<PartitionRecord> {
        self.store
            .partitions()?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                MdsError::refused(
                    ErrorCode::InvalidArgument,
                    format!("no partition named {name:?} (see `maat admin partition list`)"),
                )
            })
    }

    fn allowed(&self, protection: Protection) -> Result<()> {
        if protection == Protection::NoSec && !self.config.danger_allow_insecure {
            return Err(MdsError::refused(
                ErrorCode::InsecureRefused,
                "NOSEC partitions need a cluster started with the danger flag",
            ));
        }
        Ok(())
    }

    pub(crate) fn partition_create(
        &self,
        who: &Principal,
        name: &str,
        protection: Protection,
        replicas: u8,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        self.allowed(protection)?;
        check_replicas(replicas)?;
        if name.is_empty()
            || name.len() > PARTITION_NAME_BYTES_MAX
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!("partition names are 1 to {PARTITION_NAME_BYTES_MAX} letters, digits, '-' or '_'"),
            ));
        }
        let _guard = self.writing()?;
        if self.store.partitions()?.iter().any(|p| p.name == name) {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                format!("partition {name}"),
            ));
        }
        let mut batch = Batch::default();
        let id = self.next_id("next_partition")?;
        let record = PartitionRecord {
            id,
            name: name.into(),
            protection,
            credentials: Credentials::Maat,
            replicas,
            min_size: default_min_size(replicas),
        };
        batch.push(Op::PutPartition(record.clone()));
        self.store.commit(batch)?;
        Ok(MdsResponse::Partitions(vec![info(&record)]))
    }

    pub(crate) fn partition_set_security(
        &self,
        who: &Principal,
        name: &str,
        protection: Protection,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        self.allowed(protection)?;
        let _guard = self.writing()?;
        let mut record = self.partition_by_name(name)?;
        record.protection = protection;
        let mut batch = Batch::default();
        batch.push(Op::PutPartition(record.clone()));
        self.store.commit(batch)?;
        // Cached capabilities carry the old method: issue fresh ones from now on.
        self.forget_capabilities();
        Ok(MdsResponse::Partitions(vec![info(&record)]))
    }

    /// SPEC T2: the credential format of a partition's opens from now on. Opens already
    /// answered keep what they got until it expires.
    pub(crate) fn partition_set_credentials(
        &self,
        who: &Principal,
        name: &str,
        credentials: Credentials,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = self.writing()?;
        let mut record = self.partition_by_name(name)?;
        record.credentials = credentials;
        let mut batch = Batch::default();
        batch.push(Op::PutPartition(record.clone()));
        self.store.commit(batch)?;
        self.forget_capabilities();
        Ok(MdsResponse::Partitions(vec![info(&record)]))
    }

    pub(crate) fn partition_list(&self) -> Result<MdsResponse> {
        let mut all: Vec<PartitionInfo> = self.store.partitions()?.iter().map(info).collect();
        all.sort_by_key(|p| p.id);
        Ok(MdsResponse::Partitions(all))
    }

    /// Issue 41: every partition's copies per object and every OSD's liveness, for
    /// clients to place copies and read a down OSD's last.
    pub(crate) fn placement(&self, now: UnixMillis) -> Result<MdsResponse> {
        let mut all = self.store.partitions()?;
        all.sort_by_key(|p| p.id);
        let mut osds = self.store.osds()?;
        osds.sort_by_key(|o| o.id);
        self.stored_liveness()?;
        Ok(MdsResponse::Placement(maat_proto::msg::Placement {
            partitions: all.into_iter().map(|p| (p.name, p.replicas)).collect(),
            osds: self.liveness.states(&osds, now.0),
        }))
    }

    /// The default partition for a new cluster (kept in `replicas` copies), or an
    /// existing one from before partitions (one copy, as its objects are).
    pub(crate) fn default_partition_op(
        store: &S,
        protection: Protection,
        replicas: u8,
    ) -> Result<Option<Op>> {
        if store.partition(DEFAULT_PARTITION)?.is_some() {
            return Ok(None);
        }
        Ok(Some(Op::PutPartition(PartitionRecord {
            id: DEFAULT_PARTITION,
            name: "default".into(),
            protection,
            credentials: Credentials::Maat,
            replicas,
            min_size: default_min_size(replicas),
        })))
    }

    /// `MdsRequest::PartitionSetMinSize` (issue 41): how many copies a change of the
    /// partition's objects must reach from now on. Changes acknowledged before keep
    /// the records they made.
    pub(crate) fn partition_set_min_size(
        &self,
        who: &Principal,
        name: &str,
        min_size: u8,
    ) -> Result<MdsResponse> {
        require_admin(who)?;
        let _guard = self.writing()?;
        let mut record = self.partition_by_name(name)?;
        if min_size == 0 || min_size > record.replicas {
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                format!(
                    "partition {name} keeps {} copies: a change must reach 1 to {} of them, not {min_size}",
                    record.replicas, record.replicas
                ),
            ));
        }
        record.min_size = min_size;
        let mut batch = Batch::default();
        batch.push(Op::PutPartition(record.clone()));
        self.store.commit(batch)?;
        Ok(MdsResponse::PartitionCopies(vec![copies_of(&record)]))
    }

    /// `MdsRequest::PartitionCopies`: every partition's copies and min_size.
    pub(crate) fn partition_copies(&self) -> Result<MdsResponse> {
        let mut all = self.store.partitions()?;
        all.sort_by_key(|p| p.id);
        Ok(MdsResponse::PartitionCopies(
            all.iter().map(copies_of).collect(),
        ))
    }
}

fn copies_of(p: &PartitionRecord) -> maat_proto::msg::PartitionCopies {
    maat_proto::msg::PartitionCopies {
        name: p.name.clone(),
        replicas: p.replicas,
        min_size: p.min_size,
    }
}

/// A new partition's min_size: `COPIES_DURABLE_MIN` copies, or all it keeps if fewer.
fn default_min_size(replicas: u8) -> u8 {
    let min = maat_proto::copies::durable_min(usize::from(replicas));
    u8::try_from(min).unwrap_or(replicas)
}

/// A partition keeps 1 to [`REPLICAS_MAX`] copies of each object.
fn check_replicas(replicas: u8) -> Result<()> {
    if (1..=REPLICAS_MAX).contains(&replicas) {
        return Ok(());
    }
    Err(MdsError::refused(
        ErrorCode::InvalidArgument,
        format!("a partition keeps 1 to {REPLICAS_MAX} copies of each object, not {replicas}"),
    ))
}
