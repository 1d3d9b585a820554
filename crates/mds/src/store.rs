//! The MDS's persistent state behind one small trait (SPEC T9: metadata stored durably).
//!
//! Reads are single lookups; every change goes through [`MetaStore::commit`], which applies
//! a whole [`Batch`] atomically and durably or not at all. The MDS logic serializes its
//! read-check-commit sequences, so a store needs no transactions beyond that. The real
//! implementation (redb) lives in `maat-server`; a server database can implement the same
//! trait later.

use maat_proto::msg::{KdfParams, OsdEntry};
use serde::{Deserialize, Serialize};

/// A file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Inode number (never reused; objects carry it as their file id).
    pub id: u64,
    /// Directory or regular file.
    pub is_dir: bool,
    /// Permission bits (0o777 used).
    pub mode: u16,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// Size in bytes (files).
    pub size: u64,
    /// Modification time, ms since the epoch.
    pub mtime: u64,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// The client–MDS long-term key (Argon2id of the passphrase, or random for the admin).
    pub key: [u8; 32],
    /// Salt of the passphrase derivation.
    pub salt: [u8; 16],
    /// Argon2id parameters.
    pub params: KdfParams,
    /// Primary group.
    pub gid: u64,
    /// Supplementary groups.
    pub groups: Vec<u64>,
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
}

/// A client–MDS session created by a login (SPEC M1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The user.
    pub user: u64,
    /// The client–MDS session key.
    pub key: [u8; 32],
    /// When the ticket expires.
    pub expiry: u64,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Insert or replace an inode.
    PutInode(Inode),
    /// Delete an inode.
    DeleteInode(u64),
    /// Insert or replace a directory entry.
    PutEntry {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// Child inode.
        child: u64,
    },
    /// Delete a directory entry.
    DeleteEntry {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
    },
    /// Insert or replace a user (indexed by id and name).
    PutUser(UserRecord),
    /// Delete a user.
    DeleteUser {
        /// Id.
        id: u64,
        /// Name.
        name: String,
    },
    /// Insert or replace a group.
    PutGroup(GroupRecord),
    /// Insert or replace a session.
    PutSession([u8; 16], SessionRecord),
    /// Delete a session.
    DeleteSession([u8; 16]),
    /// Insert or replace an OSD in the cluster map.
    PutOsd(OsdEntry),
    /// Set a metadata value (keys, counters).
    PutMeta(String, Vec<u8>),
}

/// A set of changes applied atomically.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch(pub Vec<Op>);

impl Batch {
    /// Adds a change.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.0.push(op);
        self
    }
}

/// A store failure (I/O or corruption); always the daemon's fault, never the client's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata store: {0}")]
pub struct StoreError(pub String);

/// Durable metadata storage.
pub trait MetaStore: Send + Sync {
    /// An inode.
    fn inode(&self, id: u64) -> Result<Option<Inode>, StoreError>;
    /// A directory entry.
    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>, StoreError>;
    /// All entries of a directory, by name.
    fn entries(&self, parent: u64) -> Result<Vec<(String, u64)>, StoreError>;
    /// A user by name.
    fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>, StoreError>;
    /// A user by id.
    fn user(&self, id: u64) -> Result<Option<UserRecord>, StoreError>;
    /// A group by name.
    fn group_by_name(&self, name: &str) -> Result<Option<GroupRecord>, StoreError>;
    /// A group by id.
    fn group(&self, id: u64) -> Result<Option<GroupRecord>, StoreError>;
    /// A session.
    fn session(&self, id: &[u8; 16]) -> Result<Option<SessionRecord>, StoreError>;
    /// Every session (for removing expired ones).
    fn sessions(&self) -> Result<Vec<([u8; 16], SessionRecord)>, StoreError>;
    /// The OSDs.
    fn osds(&self) -> Result<Vec<OsdEntry>, StoreError>;
    /// A metadata value.
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Applies `batch` atomically and durably (fsync) before returning.
    fn commit(&self, batch: Batch) -> Result<(), StoreError>;
}
