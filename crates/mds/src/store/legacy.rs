//! Inode, partition and user records as earlier versions stored them, each decoded into
//! today's [`Inode`], [`PartitionRecord`] or [`UserRecord`] (a store written by any
//! earlier Maat still loads).

use super::{
    FileCrypt, Inode, KeyGrant, PartitionRecord, Special, UserCredential, UserRecord,
    DEFAULT_PARTITION, DEFAULT_UMASK,
};
use serde::Deserialize;

/// An encrypted file's crypt record as inode versions 3 and 4 stored it: before tree
/// versions (SPEC H7), so every stripe is under the one tree of its lockbox.
#[derive(Deserialize)]
pub(super) struct FileCryptV1 {
    #[serde(with = "serde_bytes")]
    lockbox: Vec<u8>,
    generations: Vec<(u32, u64)>,
}

impl From<FileCryptV1> for FileCrypt {
    fn from(v: FileCryptV1) -> Self {
        FileCrypt {
            lockbox: v.lockbox,
            generations: v.generations,
            earlier: Vec::new(),
            versions: Vec::new(),
        }
    }
}

/// An inode as version 6 stored it: before hard links, access and change times.
#[derive(Deserialize)]
pub(super) struct InodeV6 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
    partition: u64,
    crypt: Option<FileCrypt>,
    key_grants: Vec<KeyGrant>,
    special: Option<Special>,
}

impl From<InodeV6> for Inode {
    fn from(v: InodeV6) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: v.partition,
            crypt: v.crypt,
            key_grants: v.key_grants,
            special: v.special,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// An inode as version 5 stored it: before symbolic links.
#[derive(Deserialize)]
pub(super) struct InodeV5 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
    partition: u64,
    crypt: Option<FileCrypt>,
    key_grants: Vec<KeyGrant>,
}

impl From<InodeV5> for Inode {
    fn from(v: InodeV5) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: v.partition,
            crypt: v.crypt,
            key_grants: v.key_grants,
            special: None,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// An inode as version 4 stored it: before tree versions.
#[derive(Deserialize)]
pub(super) struct InodeV4 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
    partition: u64,
    crypt: Option<FileCryptV1>,
    key_grants: Vec<KeyGrant>,
}

impl From<InodeV4> for Inode {
    fn from(v: InodeV4) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: v.partition,
            crypt: v.crypt.map(Into::into),
            key_grants: v.key_grants,
            special: None,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// An inode as version 3 stored it: before range grants.
#[derive(Deserialize)]
pub(super) struct InodeV3 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
    partition: u64,
    crypt: Option<FileCryptV1>,
}

impl From<InodeV3> for Inode {
    fn from(v: InodeV3) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: v.partition,
            crypt: v.crypt.map(Into::into),
            key_grants: Vec::new(),
            special: None,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// An inode as version 2 stored it: before encryption.
#[derive(Deserialize)]
pub(super) struct InodeV2 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
    partition: u64,
}

impl From<InodeV2> for Inode {
    fn from(v: InodeV2) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: v.partition,
            crypt: None,
            key_grants: Vec::new(),
            special: None,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// An inode as version 1 (and format 0) stored it: before partitions.
#[derive(Deserialize)]
pub(super) struct InodeV1 {
    id: u64,
    is_dir: bool,
    mode: u16,
    uid: u64,
    gid: u64,
    size: u64,
    mtime: u64,
}

impl From<InodeV1> for Inode {
    fn from(v: InodeV1) -> Self {
        Inode {
            id: v.id,
            is_dir: v.is_dir,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            mtime: v.mtime,
            partition: DEFAULT_PARTITION,
            crypt: None,
            key_grants: Vec::new(),
            special: None,
            nlink: 1,
            atime: v.mtime,
            ctime: v.mtime,
        }
    }
}

/// A partition as version 1 (and format 0) stored it: before credential formats (SPEC
/// T2), so its opens get Maat capabilities.
#[derive(Deserialize)]
pub(super) struct PartitionV1 {
    id: u64,
    name: String,
    protection: maat_proto::protection::Protection,
}

impl From<PartitionV1> for PartitionRecord {
    fn from(v: PartitionV1) -> Self {
        PartitionRecord {
            id: v.id,
            name: v.name,
            protection: v.protection,
            credentials: maat_proto::msg::Credentials::Maat,
            replicas: 1,
            min_size: 1,
        }
    }
}

/// A partition as version 2 stored it: before copies (issue 41), so its objects keep
/// the one copy they have.
#[derive(Deserialize)]
pub(super) struct PartitionV2 {
    id: u64,
    name: String,
    protection: maat_proto::protection::Protection,
    credentials: maat_proto::msg::Credentials,
}

impl From<PartitionV2> for PartitionRecord {
    fn from(v: PartitionV2) -> Self {
        PartitionRecord {
            id: v.id,
            name: v.name,
            protection: v.protection,
            credentials: v.credentials,
            replicas: 1,
            min_size: 1,
        }
    }
}

/// A partition as version 3 stored it: before min_size was set per partition (issue
/// 41), so a change must reach the default, `durable_min(replicas)`.
#[derive(Deserialize)]
pub(super) struct PartitionV3 {
    id: u64,
    name: String,
    protection: maat_proto::protection::Protection,
    credentials: maat_proto::msg::Credentials,
    replicas: u8,
}

impl From<PartitionV3> for PartitionRecord {
    fn from(v: PartitionV3) -> Self {
        let min_size = maat_proto::copies::durable_min(usize::from(v.replicas));
        PartitionRecord {
            id: v.id,
            name: v.name,
            protection: v.protection,
            credentials: v.credentials,
            replicas: v.replicas,
            min_size: u8::try_from(min_size).unwrap_or(v.replicas),
        }
    }
}

/// A user as version 1 stored it: before umasks (issue 40), so it gets [`DEFAULT_UMASK`].
#[derive(Deserialize)]
pub(super) struct UserRecordV1 {
    id: u64,
    name: String,
    credential: UserCredential,
    gid: u64,
    groups: Vec<u64>,
}

impl From<UserRecordV1> for UserRecord {
    fn from(v: UserRecordV1) -> Self {
        UserRecord {
            id: v.id,
            name: v.name,
            credential: v.credential,
            gid: v.gid,
            groups: v.groups,
            umask: DEFAULT_UMASK,
        }
    }
}
