//! The MDS's persistent state behind one small trait (SPEC T9: metadata stored durably).
//!
//! Reads are single lookups; every change goes through [`MetaStore::commit`], which applies
//! a whole [`Batch`] atomically and durably or not at all. The MDS logic serializes its
//! read-check-commit sequences, so a store needs no transactions beyond that. The real
//! implementation (redb) lives in `maat-server`; a server database can implement the same
//! trait later.

use maat_proto::encrypted::FileCrypt;

mod lease;
mod legacy;
pub use lease::{
    check_lease_holder, check_lease_record, lease_in_meta, raise_in_meta, require_lease_in_meta,
    take_lease_requirements, LeaseState, LEASE_PREFIX,
};
use legacy::{
    InodeV1, InodeV2, InodeV3, InodeV4, InodeV5, InodeV6, PartitionV1, PartitionV2, PartitionV3,
    UserRecordV1,
};
use maat_proto::msg::{KdfParams, OsdEntry};
use serde::{Deserialize, Serialize};

/// A file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Inode number (never reused; objects carry it as their file id).
    pub id: u64,
    /// Directory or regular file.
    pub is_dir: bool,
    /// Permission bits, setuid, setgid and sticky (`namespace::MODE_BITS`).
    pub mode: u16,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// Size in bytes (files).
    pub size: u64,
    /// Modification time, ms since the epoch.
    pub mtime: u64,
    /// The partition the file lives in (its protection method, SPEC T1); new files and
    /// directories inherit their parent's.
    pub partition: u64,
    /// An encrypted file's lockbox and write generations (SPEC H3, H5; since version 3),
    /// and its earlier key trees while a rekey is in progress (SPEC H7; since version 5).
    pub crypt: Option<FileCrypt>,
    /// Who may read which ranges of an encrypted file beside its permission bits, as its
    /// owner granted (SPEC H6; since version 4).
    pub key_grants: Vec<KeyGrant>,
    /// What a special entry is (issue 44; since version 6): a symbolic link, a FIFO or a
    /// socket. Such an entry holds no data and is never opened at the MDS.
    pub special: Option<Special>,
    /// Names it has (hard links, issue 44; since version 7, and 1 before). Directories
    /// keep 1 here.
    pub nlink: u32,
    /// Access time, ms since the epoch (since version 7; before: the modification time).
    pub atime: u64,
    /// Change time, ms since the epoch (since version 7; before: the modification time).
    pub ctime: u64,
}

/// A special entry (issue 44).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Special {
    /// A symbolic link and its target (clients follow it; the MDS never does).
    Symlink(String),
    /// A named pipe: the kernel of each machine that opens it serves it.
    Fifo,
    /// A socket's name: the kernel of each machine serves it.
    Socket,
    /// A block device node and its device number (made by the administrator only;
    /// mounts are `nodev`, so none is ever opened through Maat).
    Block(u32),
    /// A character device node and its device number (as `Block`).
    Char(u32),
}

impl Special {
    /// The file-type bits `FileStat::mode` shows for it.
    pub fn type_bits(&self) -> u16 {
        match self {
            Special::Symlink(_) => maat_proto::msg::S_IFLNK,
            Special::Fifo => maat_proto::msg::S_IFIFO,
            Special::Socket => maat_proto::msg::S_IFSOCK,
            Special::Block(_) => maat_proto::msg::S_IFBLK,
            Special::Char(_) => maat_proto::msg::S_IFCHR,
        }
    }
}

/// SPEC H6: a range grant on an encrypted file, made by its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyGrant {
    /// User `user` may read bytes `ranges` (whole leaves; ascending, disjoint).
    Ranges {
        /// The user.
        user: u64,
        /// `[start, end)` byte ranges.
        ranges: Vec<(u64, u64)>,
    },
    /// The deterministic policy: member `i` of `members.len()` may read the `i`-th of
    /// that many equal slices of the file (in whole leaves, sized by the file's size at
    /// each open). A revoked member's slot stays, empty, so no other slice moves.
    Slices {
        /// The members in rank order.
        members: Vec<Option<u64>>,
    },
}

/// The partition every cluster has (id 1, `default`): files from before partitions live
/// in it, and `/` belongs to it.
pub const DEFAULT_PARTITION: u64 = 1;

/// A partition: a name and the protection method its files' data path must use (SPEC T1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// The protection method.
    pub protection: maat_proto::protection::Protection,
    /// The credential format of its opens (SPEC T2; version 2).
    pub credentials: maat_proto::msg::Credentials,
    /// How many copies of each object its files keep, on distinct OSDs (issue 41;
    /// version 3, and 1 for records from before).
    pub replicas: u8,
    /// How many copies a change must reach before it is acknowledged (issue 41; version
    /// 4, and `durable_min(replicas)` for records from before).
    pub min_size: u8,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// What the MDS checks a login against.
    pub credential: UserCredential,
    /// Primary group.
    pub gid: u64,
    /// Supplementary groups.
    pub groups: Vec<u64>,
    /// Permission bits cleared from the mode of everything the user creates (version 2;
    /// [`DEFAULT_UMASK`] for records from before).
    pub umask: u16,
}

/// The umask of a new user, and of every user whose record predates umasks (issue 40):
/// new files 0600 and directories 0700, whatever mode the client asked for, until the
/// user says otherwise (`maat umask`).
pub const DEFAULT_UMASK: u16 = 0o077;

/// What the MDS holds to check a user's login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserCredential {
    /// OPAQUE (RFC 9807) registration record: nothing in it logs in; a stolen copy allows
    /// one offline guess per passphrase, each costing an Argon2id run with `params`.
    Opaque {
        /// The record (`opaque-ke` serialization).
        record: Vec<u8>,
        /// Argon2id parameters of the key stretching.
        params: KdfParams,
    },
    /// A record from before OPAQUE (store format 0): the Argon2id output itself, which is
    /// all a client needs to log in. Accepted for one more login, after which the client
    /// replaces it with an OPAQUE record.
    Legacy {
        /// The client–MDS long-term key.
        key: [u8; 32],
        /// Salt of the passphrase derivation.
        salt: [u8; 16],
        /// Argon2id parameters.
        params: KdfParams,
    },
}

/// A user as stored by store format 0 (before versioned records).
#[derive(Deserialize)]
struct UserRecordV0 {
    id: u64,
    name: String,
    key: [u8; 32],
    salt: [u8; 16],
    params: KdfParams,
    gid: u64,
    groups: Vec<u64>,
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
    /// The client–MDS session key, sealed (AEAD, AAD = the session id) under a key the
    /// MDS derives from its sealing secret, which lives in a key file: a copy of the
    /// database does not let its holder act in anyone's session.
    pub sealed_key: Vec<u8>,
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
    /// Insert or replace a partition.
    PutPartition(PartitionRecord),
    /// Set a metadata value (counters, the store format).
    PutMeta(String, Vec<u8>),
    /// Delete a metadata value.
    DeleteMeta(String),
    /// Issue 42: changes nothing, but the whole batch applies only while `holder` holds
    /// lease `name` ([`MetaStore::lease`]) under fencing token `token`; otherwise the
    /// commit fails [`StoreError::LeaseLost`] and applies nothing. Checked in the same
    /// transaction as the batch's changes, so a successor that takes the lease either
    /// sees the batch applied or makes it fail: a deposed leader never writes over what
    /// its successor wrote.
    RequireLease {
        /// The lease.
        name: String,
        /// Who must hold it.
        holder: String,
        /// Under which fencing token.
        token: u64,
    },
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

// ------------------------------------------------------------------ versioned records

/// The layout of the store as a whole (tables and keys), kept in the `meta` table under
/// [`STORE_FORMAT_KEY`]. A store without it is format 0: unversioned postcard values and
/// the MDS secrets inside `meta`. [`migrate_v0_value`] turns format-0 values into
/// format-1 values; a store written by a newer format is refused, never guessed at.
pub const STORE_FORMAT: u64 = 1;
/// The `meta` key of the store format.
pub const STORE_FORMAT_KEY: &str = "store_format";
/// Keys under which format 0 kept the MDS secrets in `meta` (moved to key files).
pub const LEGACY_SECRET_KEYS: [&str; 3] = ["signing_seed", "sealing_secret", "decoy_key"];

/// A value stored in a table: `version (u8) ‖ postcard(value at that version)`. Each
/// record type knows every version it ever had and decodes all of them.
pub trait Record: Sized {
    /// What this is, for error messages.
    const WHAT: &'static str;
    /// The version [`Record::encode`] writes.
    const VERSION: u8;
    /// Decodes the body of version `version`.
    fn decode_version(version: u8, body: &[u8]) -> Result<Self, StoreError>;
    /// Encodes the body at [`Record::VERSION`].
    fn encode_body(&self) -> Result<Vec<u8>, StoreError>;
    /// Decodes a format-0 value (no version byte).
    fn decode_v0(bytes: &[u8]) -> Result<Self, StoreError>;

    /// The stored bytes.
    fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let body = self.encode_body()?;
        let mut out = Vec::with_capacity(1 + body.len());
        out.push(Self::VERSION);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Reads stored bytes of any known version.
    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        match bytes.split_first() {
            Some((&version, body)) if version >= 1 && version <= Self::VERSION => {
                Self::decode_version(version, body)
            }
            Some((&version, _)) => Err(StoreError::Version(format!(
                "{} record of version {version}, newer than this MDS knows ({}): upgrade Maat",
                Self::WHAT,
                Self::VERSION
            ))),
            None => Err(StoreError::corrupt(
                format!("a {} record", Self::WHAT),
                "empty",
            )),
        }
    }
}

fn postcard_body<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(v).map_err(|e| StoreError::Backend(format!("encoding a record: {e}")))
}

fn postcard_value<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::corrupt(format!("a {what} record"), e))
}

/// Records whose version 1 has the same fields as format 0.
macro_rules! record_v1 {
    ($t:ty, $what:literal) => {
        record_v1!($t, $what, |bytes| postcard_value(Self::WHAT, bytes));
    };
    // A record made after versions were: bytes without a version byte are not one.
    ($t:ty, $what:literal, no_v0) => {
        record_v1!($t, $what, |_bytes| Err(StoreError::corrupt(
            Self::WHAT,
            "no version byte"
        )));
    };
    ($t:ty, $what:literal, |$bytes:ident| $v0:expr) => {
        impl Record for $t {
            const WHAT: &'static str = $what;
            const VERSION: u8 = 1;
            fn decode_version(_version: u8, body: &[u8]) -> Result<Self, StoreError> {
                postcard_value(Self::WHAT, body)
            }
            fn encode_body(&self) -> Result<Vec<u8>, StoreError> {
                postcard_body(self)
            }
            fn decode_v0($bytes: &[u8]) -> Result<Self, StoreError> {
                $v0
            }
        }
    };
}

impl Record for Inode {
    const WHAT: &'static str = "inode";
    const VERSION: u8 = 7;
    fn decode_version(version: u8, body: &[u8]) -> Result<Self, StoreError> {
        match version {
            1 => Ok(postcard_value::<InodeV1>(Self::WHAT, body)?.into()),
            2 => Ok(postcard_value::<InodeV2>(Self::WHAT, body)?.into()),
            3 => Ok(postcard_value::<InodeV3>(Self::WHAT, body)?.into()),
            4 => Ok(postcard_value::<InodeV4>(Self::WHAT, body)?.into()),
            5 => Ok(postcard_value::<InodeV5>(Self::WHAT, body)?.into()),
            6 => Ok(postcard_value::<InodeV6>(Self::WHAT, body)?.into()),
            _ => postcard_value(Self::WHAT, body),
        }
    }
    fn encode_body(&self) -> Result<Vec<u8>, StoreError> {
        postcard_body(self)
    }
    fn decode_v0(bytes: &[u8]) -> Result<Self, StoreError> {
        Ok(postcard_value::<InodeV1>(Self::WHAT, bytes)?.into())
    }
}
impl Record for PartitionRecord {
    const WHAT: &'static str = "partition";
    const VERSION: u8 = 4;
    fn decode_version(version: u8, body: &[u8]) -> Result<Self, StoreError> {
        match version {
            1 => Ok(postcard_value::<PartitionV1>(Self::WHAT, body)?.into()),
            2 => Ok(postcard_value::<PartitionV2>(Self::WHAT, body)?.into()),
            3 => Ok(postcard_value::<PartitionV3>(Self::WHAT, body)?.into()),
            _ => postcard_value(Self::WHAT, body),
        }
    }
    fn encode_body(&self) -> Result<Vec<u8>, StoreError> {
        postcard_body(self)
    }
    fn decode_v0(bytes: &[u8]) -> Result<Self, StoreError> {
        Ok(postcard_value::<PartitionV1>(Self::WHAT, bytes)?.into())
    }
}
record_v1!(GroupRecord, "group");

impl Record for SessionRecord {
    const WHAT: &'static str = "session";
    const VERSION: u8 = 1;
    fn decode_version(_version: u8, body: &[u8]) -> Result<Self, StoreError> {
        postcard_value(Self::WHAT, body)
    }
    fn encode_body(&self) -> Result<Vec<u8>, StoreError> {
        postcard_body(self)
    }
    /// Format 0 kept session keys in clear; they are never carried over (the migration
    /// drops format-0 sessions: their users log in again).
    fn decode_v0(_bytes: &[u8]) -> Result<Self, StoreError> {
        Err(StoreError::Version(
            "format-0 sessions are not migrated (their keys were stored in clear)".into(),
        ))
    }
}
record_v1!(OsdEntry, "OSD");
record_v1!(crate::t10::T10Revocations, "T10 revocations");
record_v1!(crate::once::OnceAnswer, "once answer", no_v0);

impl Record for UserRecord {
    const WHAT: &'static str = "user";
    const VERSION: u8 = 2;
    fn decode_version(version: u8, body: &[u8]) -> Result<Self, StoreError> {
        match version {
            1 => Ok(postcard_value::<UserRecordV1>(Self::WHAT, body)?.into()),
            _ => postcard_value(Self::WHAT, body),
        }
    }
    fn encode_body(&self) -> Result<Vec<u8>, StoreError> {
        postcard_body(self)
    }
    fn decode_v0(bytes: &[u8]) -> Result<Self, StoreError> {
        let v0: UserRecordV0 = postcard_value(Self::WHAT, bytes)?;
        Ok(UserRecord {
            id: v0.id,
            name: v0.name,
            credential: UserCredential::Legacy {
                key: v0.key,
                salt: v0.salt,
                params: v0.params,
            },
            gid: v0.gid,
            groups: v0.groups,
            umask: DEFAULT_UMASK,
        })
    }
}

/// Rewrites one format-0 value of a record type as its current stored bytes.
pub fn migrate_v0_value<T: Record>(bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    T::decode_v0(bytes)?.encode()
}

/// A store failure; always the daemon's fault, never the client's. Grouped by what the
/// operator does about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The storage engine failed (I/O, the database's own error, as it says it).
    #[error("metadata store: {0}")]
    Backend(String),
    /// A stored value is damaged: it does not decode, or has the wrong length.
    #[error("metadata store: {what} is damaged: {why}")]
    Corrupt {
        /// What was read.
        what: String,
        /// How it is wrong.
        why: String,
    },
    /// The store, or a record in it, was written by a newer Maat (or an older one no
    /// migration knows).
    #[error("metadata store: {0}")]
    Version(String),
    /// An earlier write could not be made durable: every later one fails until the MDS
    /// restarts from what is on disk.
    #[error("metadata store: an earlier commit could not be made durable ({0}); restart the MDS")]
    Failed(String),
    /// A batch required a lease ([`Op::RequireLease`]) its committer no longer holds
    /// under that token; nothing of the batch was applied.
    #[error(
        "metadata store: the lease {name} is no longer held under token {token} \
         (now {holder:?}, token {found}); nothing was written"
    )]
    LeaseLost {
        /// The lease.
        name: String,
        /// The token the batch required.
        token: u64,
        /// Who holds it now (empty: nobody ever took it).
        holder: String,
        /// Its token now.
        found: u64,
    },
}

impl StoreError {
    /// A damaged value: `what` was read, `why` it is wrong.
    pub fn corrupt(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        StoreError::Corrupt {
            what: what.into(),
            why: why.to_string(),
        }
    }
}

/// A counter's stored value (8 bytes, big-endian: [`MetaStore::allocate`]).
pub fn counter_value(counter: &str, v: Vec<u8>) -> Result<u64, StoreError> {
    Ok(u64::from_be_bytes(v.try_into().map_err(|_| {
        StoreError::corrupt(format!("meta {counter}"), "wrong length")
    })?))
}

/// The value of `counter` after `count` more were taken from `current`; an error (the
/// store is damaged) where that would overflow.
pub fn counter_after(counter: &str, current: u64, count: u64) -> Result<u64, StoreError> {
    current
        .checked_add(count)
        .ok_or_else(|| StoreError::corrupt(format!("meta {counter}"), "would overflow"))
}

/// What [`MetaStore::exclusive`] returns: the store's writer lock, held until dropped
/// (nothing to hold for a store one process holds alone).
#[must_use = "the lock is released when this is dropped"]
pub struct Exclusive<'a>(Option<Box<dyn Send + 'a>>);

impl<'a> Exclusive<'a> {
    /// Nothing held: the caller's own serialization is the whole story (a store that
    /// one process holds alone).
    pub fn local() -> Self {
        Self(None)
    }

    /// Holds `guard`, whose drop releases the lock.
    pub fn holding(guard: impl Send + 'a) -> Self {
        Self(Some(Box::new(guard)))
    }

    /// Whether a lock of the store's own is held (not [`Exclusive::local`]).
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }
}

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
    /// Every user (grouping builds its access-control snapshot from them, SPEC M6).
    fn users(&self) -> Result<Vec<UserRecord>, StoreError>;
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
    /// One partition (every stat and open reads its file's).
    fn partition(&self, id: u64) -> Result<Option<PartitionRecord>, StoreError>;
    /// Every partition.
    fn partitions(&self) -> Result<Vec<PartitionRecord>, StoreError>;
    /// A metadata value.
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every metadata value whose key starts with `prefix`, in key order.
    fn metas(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
    /// Applies `batch` atomically and durably (fsync) before returning; every batch
    /// applied before it is durable then too.
    fn commit(&self, batch: Batch) -> Result<(), StoreError>;
    /// Takes `count` consecutive values of the counter kept in `meta` under `counter`
    /// (8 bytes, big-endian; `first` where it is not stored yet) and returns the first:
    /// values taken are never handed out again, by this process or any other sharing
    /// the store, whether or not the caller uses them. The change is durable by the time
    /// anything made with the values is (it may be deferred like
    /// [`MetaStore::commit_deferred`]'s).
    ///
    /// This default reads the counter and writes it back: atomic only for a caller that
    /// serializes its calls and holds the store alone (the redb store's file lock makes it
    /// one process's). A store shared by several processes overrides it.
    fn allocate(&self, counter: &str, count: u64, first: u64) -> Result<u64, StoreError> {
        let current = match self.meta(counter)? {
            Some(v) => counter_value(counter, v)?,
            None => first,
        };
        let next = counter_after(counter, current, count)?;
        self.commit_deferred(Batch(vec![Op::PutMeta(
            counter.into(),
            next.to_be_bytes().to_vec(),
        )]))?;
        Ok(current)
    }
    /// Takes the store's writer lock, for one read-decide-commit sequence: while it is
    /// held, no other process sharing the store runs such a sequence, and every batch
    /// committed by the holder commits only if the lock is still held (a holder whose
    /// lock was lost, say with its connection, gets an error instead of a lost update).
    /// The MDS takes it inside its own write lock, so one thread per process waits here.
    ///
    /// This default holds nothing: right for a store one process holds alone, whose
    /// caller serializes the sequences itself. A store shared by several processes
    /// overrides it.
    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        Ok(Exclusive::local())
    }
    /// Applies `batch` atomically and lets reads see it at once, but makes it durable only
    /// at the next [`MetaStore::sync`] or [`MetaStore::commit`] (group commit: one fsync
    /// covers every batch applied meanwhile, so a request holds the MDS's write lock for no
    /// fsync). Whoever calls this must call `sync` before anything outside the process
    /// learns of the change; the MDS does so before it sends any answer. A store may commit
    /// durably at once instead (one without the distinction; the redb store for batches
    /// with changes other than inodes, entries and `meta`, or with group commit off).
    fn commit_deferred(&self, batch: Batch) -> Result<(), StoreError> {
        self.commit(batch)
    }
    /// The inode entry `name` of directory `parent` names: a lookup, then an inode read
    /// (a store that can answers both at once: on PostgreSQL one query, not two).
    fn lookup_inode(&self, parent: u64, name: &str) -> Result<Option<Inode>, StoreError> {
        match self.lookup(parent, name)? {
            Some(child) => self.inode(child),
            None => Ok(None),
        }
    }
    /// Issue 42: session `id` and user `uid` (the session's user, as a copy of the
    /// session read before said), read together: on PostgreSQL one round trip, not two,
    /// for every request of a session an instance has seen. The caller checks that the
    /// session read still names `uid`.
    fn session_and_user(
        &self,
        id: &[u8; 16],
        uid: u64,
    ) -> Result<(Option<SessionRecord>, Option<UserRecord>), StoreError> {
        Ok((self.session(id)?, self.user(uid)?))
    }
    /// Issue 42: the inodes of the root and then of each of `names` in turn from it, as
    /// far as they are found: the list ends early where a name is missing or its parent
    /// is not a directory (empty if there is no root). A lookup per name by default; a
    /// store that can walks the whole path in one query (on PostgreSQL, one round trip
    /// for any depth, read in one snapshot).
    fn walk(&self, names: &[&str]) -> Result<Vec<Inode>, StoreError> {
        let mut found = Vec::with_capacity(names.len() + 1);
        let Some(mut current) = self.inode(crate::ROOT_INODE)? else {
            return Ok(found);
        };
        for name in names {
            let next = if current.is_dir {
                self.lookup_inode(current.id, name)?
            } else {
                None
            };
            found.push(current);
            match next {
                Some(inode) => current = inode,
                None => return Ok(found),
            }
        }
        found.push(current);
        Ok(found)
    }
    /// Every entry of directory `parent`, in name order, with the inode it names (an
    /// entry whose inode is missing left out): [`MetaStore::entries`] and an inode read
    /// each, or one query where the store can join them.
    fn entries_inodes(&self, parent: u64) -> Result<Vec<(String, Inode)>, StoreError> {
        let mut out = Vec::new();
        for (name, child) in self.entries(parent)? {
            if let Some(inode) = self.inode(child)? {
                out.push((name, inode));
            }
        }
        Ok(out)
    }
    /// Issue 42, exactly once: from here until [`MetaStore::end_unit`], the calling
    /// thread's commits and the ops `end_unit` adds are one transaction: nothing outside
    /// sees them before it ends, a crash or a lost connection drops them whole, and the
    /// thread's own reads see its commits. Called only by a thread that holds
    /// [`MetaStore::exclusive`], and always followed by `end_unit`.
    ///
    /// This default is for a store one process holds: the commits apply one by one, and
    /// `end_unit` commits its ops after them, so a crash between the two leaves a change
    /// without what `end_unit` adds (for the MDS: a change applied whose answer was not
    /// kept; only a client retrying at the same MDS after its restart can see that).
    fn begin_unit(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Ends the unit [`MetaStore::begin_unit`] began: applies `last` and commits the
    /// whole, durable after the next [`MetaStore::sync`] (as [`MetaStore::commit_deferred`]).
    /// An error means nothing of the unit was applied (where units are one
    /// transaction, [`MetaStore::atomic_units`]).
    fn end_unit(&self, last: Batch) -> Result<(), StoreError> {
        match last.0.is_empty() {
            true => Ok(()),
            false => self.commit_deferred(last),
        }
    }
    /// Whether [`MetaStore::begin_unit`] makes one transaction.
    fn atomic_units(&self) -> bool {
        false
    }
    /// Returns once every batch applied before the call is durable; calls that arrive while
    /// another makes batches durable share its fsync or the next. Once making batches
    /// durable has failed, it fails for good (the daemon must restart from what is on
    /// disk), so that no answer ever claims a change the disk may not hold.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Takes or renews the lease `name` (a singleton duty, such as T10 key upkeep) for
    /// `holder`, to last `ttl_millis` by the store's clock: granted if nobody holds it,
    /// its holder's time ran out, or `holder` holds it already. The answer says who holds
    /// it now and its fencing token, which grows each time the lease passes to another
    /// holder. A holder may act until `ttl_millis` after it *sent* the request that was
    /// granted, by its own monotonic clock: the store granted it no earlier, so it never
    /// hands the lease on while the holder may still act (clocks need not agree, only
    /// run at about the same rate).
    ///
    /// This default keeps the lease in `meta` and times it by `now` (the caller's clock,
    /// ms): right for a store one process holds alone and whose calls it serializes. A
    /// store shared by several processes overrides it, with a clock of its own.
    fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl_millis: u64,
        now: u64,
    ) -> Result<LeaseState, StoreError> {
        lease::lease_in_meta(self, name, holder, ttl_millis, now)
    }
    /// Issue 42: raises the fencing token of lease `name` to at least `at_least`, if
    /// `holder` holds it now (its time not run out): the token it holds now, or `None`
    /// if it does not hold it. For a leader whose key commands an OSD refuses as
    /// fenced because it applied commands under a higher token than the store hands out
    /// (the store restored from an older backup, or moved to a new one): the token is
    /// raised past the OSD's fence, and only by the holder, so it can never undo a
    /// successor's fencing. Never lowered. The expiry is left as it is.
    ///
    /// This default keeps the lease in `meta` ([`MetaStore::lease`]'s default). A
    /// store that overrides `lease` overrides this too.
    fn raise_lease(
        &self,
        name: &str,
        holder: &str,
        at_least: u64,
        now: u64,
    ) -> Result<Option<u64>, StoreError> {
        lease::raise_in_meta(self, name, holder, at_least, now)
    }
    /// Batches applied and fsyncs made so far (`maat stats`: batches per fsync is the
    /// group commit's yield).
    fn durability_counts(&self) -> DurabilityCounts {
        DurabilityCounts::default()
    }
    /// Records nonce `nonce` of session `session`, sent at `at` (ms: the request's own
    /// timestamp, inside the replay window), so that no process sharing the store takes
    /// that request again: `false` if it was recorded already (a replay, perhaps made at
    /// another instance). Nonces sent more than `keep_millis` before `at` may be
    /// forgotten (requests that old are refused as stale anyway).
    ///
    /// This default records nothing: for a store one process holds alone, whose replay
    /// window in memory is the whole story. A shared store overrides it.
    fn record_nonce(
        &self,
        _session: &[u8; 16],
        _nonce: &[u8; 16],
        _at: u64,
        _keep_millis: u64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }
    /// Whether other processes may change the store while this one runs (several MDS
    /// instances over one database, issue 42): the MDS then keeps no cache of a record
    /// that another instance may change unless a version it checks moves with the change
    /// (sessions are read on every request; access-control state follows `acl_version`).
    /// This default: a store one process holds alone.
    fn shared(&self) -> bool {
        false
    }
    /// Which engine keeps the records (`maat health`; the MDS's stats report it as the
    /// counter `meta_engine:NAME` = 1).
    fn engine(&self) -> &'static str {
        "memory"
    }
}

/// What [`MetaStore::durability_counts`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurabilityCounts {
    /// Batches applied ([`MetaStore::commit`] and [`MetaStore::commit_deferred`]).
    pub batches: u64,
    /// Durable commits (fsyncs) made.
    pub fsyncs: u64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn partitions_of_versions_1_to_3_load_and_v4_round_trips() {
        use maat_proto::msg::Credentials;
        use maat_proto::protection::Protection;
        // Version 1: id, name, protection.
        let v1 = (3u64, "lab".to_string(), Protection::CmdRsp);
        let mut bytes = vec![1u8];
        bytes.extend(postcard::to_stdvec(&v1).unwrap());
        let expected = PartitionRecord {
            id: 3,
            name: "lab".into(),
            protection: Protection::CmdRsp,
            credentials: Credentials::Maat,
            replicas: 1,
            min_size: 1,
        };
        assert_eq!(PartitionRecord::decode(&bytes).unwrap(), expected);
        // Version 2: and the credential format; its objects have one copy.
        let v2 = (
            3u64,
            "lab".to_string(),
            Protection::CmdRsp,
            Credentials::T10,
        );
        let mut bytes = vec![2u8];
        bytes.extend(postcard::to_stdvec(&v2).unwrap());
        let t10 = PartitionRecord {
            credentials: Credentials::T10,
            ..expected
        };
        assert_eq!(PartitionRecord::decode(&bytes).unwrap(), t10);
        // Version 3: and copies; a change must reach the default, two of three (or
        // the one of one).
        for (replicas, min_size) in [(3u8, 2u8), (1, 1)] {
            let v3 = (
                3u64,
                "lab".to_string(),
                Protection::CmdRsp,
                Credentials::T10,
                replicas,
            );
            let mut bytes = vec![3u8];
            bytes.extend(postcard::to_stdvec(&v3).unwrap());
            let copies = PartitionRecord {
                replicas,
                min_size,
                ..t10.clone()
            };
            assert_eq!(PartitionRecord::decode(&bytes).unwrap(), copies);
        }
        let three = PartitionRecord {
            replicas: 3,
            min_size: 3,
            ..t10
        };
        let encoded = three.encode().unwrap();
        assert_eq!(encoded.first(), Some(&4u8));
        assert_eq!(PartitionRecord::decode(&encoded).unwrap(), three);
    }

    #[test]
    fn users_of_version_1_load_with_the_default_umask_and_v2_round_trips() {
        let credential = UserCredential::Opaque {
            record: vec![9; 4],
            params: KdfParams {
                memory_kib: 8,
                iterations: 1,
                lanes: 1,
            },
        };
        // Version 1: id, name, credential, gid, groups.
        let v1 = (
            7u64,
            "alice".to_string(),
            credential.clone(),
            8u64,
            vec![9u64],
        );
        let mut bytes = vec![1u8];
        bytes.extend(postcard::to_stdvec(&v1).unwrap());
        let user = UserRecord::decode(&bytes).unwrap();
        let expected = UserRecord {
            id: 7,
            name: "alice".into(),
            credential,
            gid: 8,
            groups: vec![9],
            umask: DEFAULT_UMASK,
        };
        assert_eq!(user, expected);
        let shared = UserRecord {
            umask: 0o022,
            ..expected
        };
        let encoded = shared.encode().unwrap();
        assert_eq!(encoded.first(), Some(&2u8));
        assert_eq!(UserRecord::decode(&encoded).unwrap(), shared);
    }

    #[test]
    fn inodes_of_every_earlier_version_load_and_v7_round_trips() {
        // Versions 3 and 4 stored the crypt record as its lockbox and generations.
        let crypt_v1 = (
            serde_bytes::ByteBuf::from(vec![1, 2, 3]),
            vec![(0u32, 7u64)],
        );
        let crypt = FileCrypt {
            lockbox: vec![1, 2, 3],
            generations: vec![(0, 7)],
            ..FileCrypt::default()
        };
        // Version 3 stored the fields of today's inode up to `crypt` (postcard encodes a
        // struct as its fields in order, so a tuple of them is the same bytes).
        let v3 = (
            5u64,
            false,
            0o640u16,
            1001u64,
            100u64,
            42u64,
            9u64,
            2u64,
            Some(crypt_v1.clone()),
        );
        let mut bytes = vec![3u8];
        bytes.extend(postcard::to_stdvec(&v3).unwrap());
        let inode = Inode::decode(&bytes).unwrap();
        assert_eq!((inode.id, inode.size, inode.partition), (5, 42, 2));
        assert_eq!(inode.crypt, Some(crypt.clone()));
        assert!(inode.key_grants.is_empty());

        // Version 4 added the range grants.
        let grant = (0u32, 1002u64, vec![(0u64, 65536u64)]);
        let v4 = (
            5u64,
            false,
            0o640u16,
            1001u64,
            100u64,
            42u64,
            9u64,
            2u64,
            Some(crypt_v1),
            vec![grant],
        );
        let mut bytes = vec![4u8];
        bytes.extend(postcard::to_stdvec(&v4).unwrap());
        let inode = Inode::decode(&bytes).unwrap();
        assert_eq!(inode.crypt, Some(crypt));
        assert_eq!(
            inode.key_grants,
            vec![KeyGrant::Ranges {
                user: 1002,
                ranges: vec![(0, 65536)]
            }]
        );

        let v2 = (6u64, true, 0o755u16, 1u64, 1u64, 0u64, 9u64, 3u64);
        let mut bytes = vec![2u8];
        bytes.extend(postcard::to_stdvec(&v2).unwrap());
        let inode = Inode::decode(&bytes).unwrap();
        assert_eq!(
            (inode.id, inode.partition, inode.crypt.is_none()),
            (6, 3, true)
        );
        assert_eq!((inode.nlink, inode.atime, inode.ctime), (1, 9, 9));

        let mut now = inode.clone();
        now.mtime = 10;
        now.key_grants = vec![
            KeyGrant::Ranges {
                user: 1002,
                ranges: vec![(0, 65536)],
            },
            KeyGrant::Slices {
                members: vec![Some(1002), None],
            },
        ];
        let mut crypt = FileCrypt {
            lockbox: vec![9],
            ..FileCrypt::default()
        };
        crypt.record(0, 3, 5).unwrap();
        crypt.begin_rekey(vec![10], 1, 3).unwrap();
        now.crypt = Some(crypt);
        now.nlink = 1;
        now.atime = now.mtime;
        now.ctime = now.mtime;
        // Version 6 is today's inode up to the special entry: no link count, access or
        // change time (they load as one name, both times the modification time).
        let v6_of = |i: &Inode| {
            let fields = (
                i.id,
                i.is_dir,
                i.mode,
                i.uid,
                i.gid,
                i.size,
                i.mtime,
                i.partition,
                i.crypt.clone(),
                i.key_grants.clone(),
                i.special.clone(),
            );
            let mut bytes = vec![6u8];
            bytes.extend(postcard::to_stdvec(&fields).unwrap());
            bytes
        };
        // Version 5 is version 6 without the symbolic link's target.
        let mut v5 = v6_of(&now);
        v5[0] = 5;
        v5.pop(); // the `None` of `special`: one byte
        assert_eq!(Inode::decode(&v5).unwrap(), now);
        let mut link = now.clone();
        link.special = Some(Special::Symlink("../target".into()));
        assert_eq!(Inode::decode(&v6_of(&link)).unwrap(), link);
        let mut fifo = now.clone();
        fifo.special = Some(Special::Fifo);
        assert_eq!(Inode::decode(&fifo.encode().unwrap()).unwrap(), fifo);
        let mut linked = link.clone();
        (linked.nlink, linked.atime, linked.ctime) = (3, 11, 12);
        let stored = linked.encode().unwrap();
        assert_eq!(stored[0], 7);
        assert_eq!(Inode::decode(&stored).unwrap(), linked);
        // A version this MDS does not know is refused, not guessed at.
        let mut newer = stored;
        newer[0] = 8;
        assert!(Inode::decode(&newer).is_err());
    }
}
