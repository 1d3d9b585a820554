//! SPEC M6 user- and application-defined groups (paper 000 §3.3.3, "User or Application
//! Knowledge"): named sets of files that a user, or an application acting for one,
//! declares are used together. Under the `defined` strategy a capability for one of a
//! set's files also names the set's other files that every user it names may access in
//! the mode asked for (the filter prediction uses, so a set never widens access). A
//! user's sets shape only that user's opens; the administrator's shape everyone's.
//!
//! Durable in `meta` (`fileset/<owner>/<name>` → `version(1) ‖ postcard`); the table and
//! an index from each file to the sets naming it are kept in memory, loaded on first use.

use crate::store::{Batch, Op};
use crate::{lock, MdsError, MetaStore, Principal, Result, ADMIN_UID};
use maat_proto::msg::{ErrorCode, FileSetInfo, MdsResponse};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Prefix of the `meta` records holding file sets.
pub const FILESET_META_PREFIX: &str = "fileset/";
/// Layout version of a file-set record.
const FILESET_RECORD_FORMAT: u8 = 1;
pub use crate::limits::FILESETS_PER_USER_MAX;
pub use crate::limits::FILESET_FILES_MAX;
pub use crate::limits::FILESET_NAME_MAX;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct FileSetRecord {
    owner: u64,
    name: String,
    /// Ascending, distinct.
    files: Vec<u64>,
}

impl FileSetRecord {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut out = vec![FILESET_RECORD_FORMAT];
        out.extend(postcard::to_allocvec(self).map_err(|e| {
            MdsError::refused(ErrorCode::Internal, format!("encoding a file set: {e}"))
        })?);
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        match bytes.split_first() {
            Some((&FILESET_RECORD_FORMAT, body)) => postcard::from_bytes(body).map_err(|e| {
                MdsError::refused(ErrorCode::Internal, format!("file-set record: {e}"))
            }),
            _ => Err(MdsError::refused(
                ErrorCode::Internal,
                "file-set record of an unknown version",
            )),
        }
    }
}

fn meta_key(owner: u64, name: &str) -> String {
    format!("{FILESET_META_PREFIX}{owner}/{name}")
}

#[derive(Default)]
struct Table {
    sets: HashMap<(u64, String), Arc<Vec<u64>>>,
    /// file → the sets naming it.
    by_file: HashMap<u64, Vec<(u64, String)>>,
}

impl Table {
    fn insert(&mut self, owner: u64, name: String, files: Vec<u64>) {
        self.remove(owner, &name);
        for f in &files {
            self.by_file
                .entry(*f)
                .or_default()
                .push((owner, name.clone()));
        }
        self.sets.insert((owner, name), Arc::new(files));
    }

    fn remove(&mut self, owner: u64, name: &str) -> bool {
        let Some(files) = self.sets.remove(&(owner, name.to_string())) else {
            return false;
        };
        for f in files.iter() {
            if let Some(list) = self.by_file.get_mut(f) {
                list.retain(|(o, n)| !(*o == owner && n == name));
                if list.is_empty() {
                    self.by_file.remove(f);
                }
            }
        }
        true
    }
}

/// The file sets this MDS knows.
#[derive(Default)]
pub(crate) struct FileSets {
    table: Mutex<Option<Table>>,
}

fn refused(code: ErrorCode, detail: impl Into<String>) -> MdsError {
    MdsError::refused(code, detail)
}

impl<S: MetaStore> crate::Mds<S> {
    fn with_filesets<T>(&self, f: impl FnOnce(&mut Table) -> Result<T>) -> Result<T> {
        let mut slot = lock(&self.filesets.table);
        if slot.is_none() {
            let mut table = Table::default();
            for (_, bytes) in self.store.metas(FILESET_META_PREFIX)? {
                let r = FileSetRecord::decode(&bytes)?;
                table.insert(r.owner, r.name, r.files);
            }
            *slot = Some(table);
        }
        let table = slot
            .as_mut()
            .ok_or_else(|| refused(ErrorCode::Internal, "file-set table not loaded"))?;
        f(table)
    }

    /// `FileSetDefine`: defines (or replaces) `who`'s set `name` as the files at
    /// `paths`, each resolved as `who` (so only files `who` can reach are named).
    pub(crate) fn fileset_define(
        &self,
        who: &Principal,
        name: &str,
        paths: &[String],
    ) -> Result<MdsResponse> {
        if name.is_empty()
            || name.len() > FILESET_NAME_MAX
            || name.contains('/')
            || name.chars().any(char::is_control)
        {
            return Err(refused(
                ErrorCode::InvalidArgument,
                format!(
                    "a file-set name is 1 to {FILESET_NAME_MAX} bytes, without '/' or control \
                     characters"
                ),
            ));
        }
        if paths.len() > FILESET_FILES_MAX {
            return Err(refused(
                ErrorCode::TooLarge,
                format!("at most {FILESET_FILES_MAX} files per set"),
            ));
        }
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let inode = self.resolve(who, p)?;
            if inode.is_dir {
                return Err(refused(ErrorCode::IsADirectory, p.clone()));
            }
            files.push(inode.id);
        }
        files.sort_unstable();
        files.dedup();
        let record = FileSetRecord {
            owner: who.uid,
            name: name.to_string(),
            files,
        };
        self.with_filesets(|table| {
            let owned = table.sets.keys().filter(|(o, _)| *o == who.uid).count();
            if !table.sets.contains_key(&(who.uid, name.to_string()))
                && owned >= FILESETS_PER_USER_MAX
            {
                return Err(refused(
                    ErrorCode::TooLarge,
                    format!("at most {FILESETS_PER_USER_MAX} file sets per user"),
                ));
            }
            let mut batch = Batch::default();
            batch.push(Op::PutMeta(meta_key(who.uid, name), record.encode()?));
            self.store.commit(batch)?;
            table.insert(record.owner, record.name, record.files);
            Ok(MdsResponse::Ok)
        })
    }

    /// `FileSetRemove`: removes `who`'s set `name`.
    pub(crate) fn fileset_remove(&self, who: &Principal, name: &str) -> Result<MdsResponse> {
        self.with_filesets(|table| {
            if !table.sets.contains_key(&(who.uid, name.to_string())) {
                return Err(refused(
                    ErrorCode::InvalidArgument,
                    format!("you have no file set {name:?}"),
                ));
            }
            let mut batch = Batch::default();
            batch.push(Op::DeleteMeta(meta_key(who.uid, name)));
            self.store.commit(batch)?;
            table.remove(who.uid, name);
            Ok(MdsResponse::Ok)
        })
    }

    /// `FileSetList`: `who`'s sets and the administrator's (which apply to everyone).
    pub(crate) fn fileset_list(&self, who: &Principal) -> Result<MdsResponse> {
        self.with_filesets(|table| {
            let mut out: Vec<FileSetInfo> = table
                .sets
                .iter()
                .filter(|((o, _), _)| *o == who.uid || *o == ADMIN_UID)
                .map(|((o, name), files)| FileSetInfo {
                    name: name.clone(),
                    everyone: *o == ADMIN_UID,
                    files: files.len() as u32,
                })
                .collect();
            out.sort_by(|a, b| (b.everyone, &a.name).cmp(&(a.everyone, &b.name)));
            Ok(MdsResponse::FileSets(out))
        })
    }

    /// The other files of the sets naming `file` that shape `uid`'s opens (its own and
    /// the administrator's), ascending. Candidates only: the issuer filters them.
    pub(crate) fn defined_with(&self, uid: u64, file: u64) -> Result<Vec<u64>> {
        self.with_filesets(|table| {
            let mut out = Vec::new();
            for (owner, name) in table.by_file.get(&file).into_iter().flatten() {
                if *owner != uid && *owner != ADMIN_UID {
                    continue;
                }
                if let Some(files) = table.sets.get(&(*owner, name.clone())) {
                    out.extend(files.iter().copied().filter(|f| *f != file));
                }
            }
            out.sort_unstable();
            out.dedup();
            out.truncate(FILESET_FILES_MAX);
            Ok(out)
        })
    }
}
