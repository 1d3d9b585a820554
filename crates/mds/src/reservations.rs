//! File ids reserved for puts: a user's client asks for a block of ids once
//! (`MdsRequest::Reserve`, one signed capability over them all, `Files::Range`), stores
//! each new file's data under one of them, then links a path to it with its size
//! (`MdsRequest::Link`). A put of a new file is then one MDS round trip and one commit
//! after its data is durable, and no signature, where an open that creates, the writes
//! and a size cost two round trips, two commits and a signature. A file appears only
//! once its data is stored.
//!
//! The capability names ids no file has yet, reserved to its one user: nobody else can
//! be given them (the id counter moved past them, durably, before the answer), so it
//! authorizes access to no file of anyone else. Reservations live in memory: one the MDS
//! forgot (a restart, the bounds below) makes its links refused, and those puts go the
//! usual way; its ids are never handed out again.
//!
//! Opens that create take reserved ids too (`OpenOrLink`, issue 45: the open when the
//! path exists, else the link of an empty file), so that a process creating many files
//! is given one capability per block; the removal of such a file gets the block's
//! capability back. None is reserved while capability grouping is off.

use crate::encryption::{first_lockbox, record_generations};
use crate::namespace::{fresh_inode, require, EXEC, WRITE};
use crate::store::PartitionRecord;
use crate::{lock, Batch, MdsError, MetaStore, Principal, Result, CLOCK_SKEW_MILLIS};
use maat_crypto::CryptoRngCore;
use maat_proto::capability::{Capability, Files, Mode, Principals};
use maat_proto::ids::{CapabilityId, FileId, UserId};
use maat_proto::msg::{Credentials, ErrorCode, MdsResponse};
use maat_proto::protection::Protection;
use maat_proto::signed;
use maat_proto::UnixMillis;
use std::collections::HashMap;

pub use crate::limits::{RESERVATIONS_MAX, RESERVATIONS_PER_USER_MAX, RESERVED_IDS_PER_REQUEST};

/// What `LinkSealed` adds to a link: the stripe ranges written with their generations,
/// and the first lockbox.
pub(crate) type SealedLink<'a> = (&'a [(u32, u32, u64)], &'a [u8]);

/// One block of ids reserved to a user.
struct Reservation {
    first: u64,
    count: u32,
    /// The partition whose directories may link them (the capability carries its
    /// method).
    partition: u64,
    /// For encrypted files (`ReserveSealed`): linked by `LinkSealed` only; else by
    /// `Link` only.
    sealed: bool,
    /// The method its capability carries: a link is refused once the partition's
    /// files would get another.
    protection: Protection,
    expiry: UnixMillis,
    /// How many of its ids are linked.
    used: u32,
    /// Ids of the block linked already, one bit each.
    linked: Vec<u64>,
    /// The capability signed over the block and its id, once signed (none under NOSEC):
    /// handed back for the removal of a file linked from it (issue 45), as a file's
    /// cached write capability is.
    capability: Option<(Vec<u8>, u64)>,
}

impl Reservation {
    fn holds(&self, id: u64) -> Option<usize> {
        let offset = id.checked_sub(self.first)?;
        (offset < u64::from(self.count)).then_some(offset as usize)
    }

    /// Where the bit of the id at `offset` in the block lives in `linked`: word, mask.
    fn bit(offset: usize) -> (usize, u64) {
        (offset / 64, 1u64 << (offset % 64))
    }

    /// Whether `id` is of this block and linked.
    fn is_linked(&self, id: u64) -> bool {
        self.holds(id).is_some_and(|offset| {
            let (word, mask) = Self::bit(offset);
            self.linked.get(word).is_some_and(|w| w & mask != 0)
        })
    }
}

#[derive(Default)]
pub(crate) struct Reservations {
    by_user: HashMap<u64, Vec<Reservation>>,
    total: usize,
}

impl Reservations {
    /// The partition of the block reserved to user `uid` that holds `id`, if any.
    pub(crate) fn reserved_to(&self, uid: u64, id: u64) -> Option<u64> {
        self.by_user
            .get(&uid)?
            .iter()
            .find(|r| r.holds(id).is_some())
            .map(|r| r.partition)
    }

    fn find_mut(&mut self, uid: u64, first: u64) -> Option<&mut Reservation> {
        self.by_user
            .get_mut(&uid)?
            .iter_mut()
            .find(|r| r.first == first)
    }

    fn sweep(&mut self, now: UnixMillis) {
        self.by_user.retain(|_, list| {
            list.retain(|r| r.expiry > now);
            !list.is_empty()
        });
        self.total = self.by_user.values().map(Vec::len).sum();
    }

    fn add(&mut self, uid: u64, r: Reservation, now: UnixMillis) -> Result<()> {
        if self.total >= RESERVATIONS_MAX {
            self.sweep(now);
            if self.total >= RESERVATIONS_MAX {
                return Err(MdsError::refused(
                    ErrorCode::Busy,
                    "too many file ids reserved: put files the usual way",
                ));
            }
        }
        let list = self.by_user.entry(uid).or_default();
        // Spent blocks go (expired, or every id linked); one still in use is never
        // forgotten for a new one, which would refuse the links of puts in flight.
        let held = list.len();
        list.retain(|r| r.expiry > now && r.used < r.count);
        self.total -= held - list.len();
        if list.len() >= RESERVATIONS_PER_USER_MAX {
            return Err(MdsError::refused(
                ErrorCode::Busy,
                "this user holds as many reserved blocks as allowed: put files the usual way",
            ));
        }
        list.push(r);
        self.total += 1;
        Ok(())
    }
}

fn not_reserved(why: &str) -> MdsError {
    MdsError::refused(
        ErrorCode::PermissionDenied,
        format!("file id not reserved to this user: {why}; put the file the usual way"),
    )
}

/// Why a Maat capability signed earlier for a user's files of a partition would not
/// serve now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unserved {
    /// The partition takes T10 credentials now.
    T10,
    /// The user's capabilities are revoked (SPEC M9).
    Revoked,
}

impl<S: MetaStore> crate::Mds<S> {
    /// Whether a Maat capability the MDS signed earlier for `uid` on files of
    /// `partition` would serve now (reserved ids and the removal under a kept
    /// capability, `UnlinkHeld`, rely on one).
    pub(crate) fn earlier_capability_unserved(
        &self,
        uid: u64,
        partition: &PartitionRecord,
        now: UnixMillis,
    ) -> Result<Option<Unserved>> {
        if partition.credentials == Credentials::T10 {
            return Ok(Some(Unserved::T10));
        }
        Ok(self.user_revoked(uid, now)?.then_some(Unserved::Revoked))
    }

    /// `OpenOrLink` (issue 45): the open of `path` when it exists, else the link of
    /// the reserved id `file` as the new, empty file `path` (`mode`), in one round trip.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_or_link(
        &self,
        who: &Principal,
        path: &str,
        access: maat_proto::msg::Access,
        file: u64,
        mode: u16,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        match self.resolve(who, path) {
            Ok(_) => {}
            Err(MdsError::Refused(e)) if e.code == ErrorCode::NoSuchFile => {
                match self.link(who, path, file, 0, mode, None, now) {
                    // Made meanwhile by someone else: opened as it is now.
                    Err(MdsError::Refused(e))
                        if e.code == ErrorCode::AlreadyExists
                            && self.resolve(who, path).is_ok() => {}
                    linked => return linked,
                }
            }
            Err(e) => return Err(e),
        }
        self.open_file(who, path, access, None, &[], session, now, rng)
    }

    /// Issue 45: the capability of `uid`'s reservation that linked `file` in method
    /// `protection`, while it has more than half its lifetime left and is not revoked:
    /// what the removal of a file created under a reserved id goes under (the files'
    /// write capability, no signature), as a file's cached one is.
    pub(crate) fn reserved_capability(
        &self,
        uid: u64,
        file: u64,
        protection: Protection,
        now: UnixMillis,
    ) -> Result<Option<Vec<u8>>> {
        let half = self.config.capability_lifetime_millis / 2;
        let held = {
            let table = lock(&self.reservations);
            table.by_user.get(&uid).and_then(|list| {
                list.iter()
                    .find(|r| {
                        r.is_linked(file)
                            && r.protection == protection
                            && r.expiry.0.saturating_sub(now.0) > half
                    })
                    .and_then(|r| r.capability.clone())
            })
        };
        match held {
            Some((encoded, id))
                if !self.capability_revoked(id, now)? && !self.user_revoked(uid, now)? =>
            {
                Ok(Some(encoded))
            }
            _ => Ok(None),
        }
    }

    /// The method files of `partition` get now (encrypted ones when `sealed`), which a
    /// reservation's capability carries and a link must find unchanged; refused in a
    /// partition with T10 credentials and for a revoked user.
    fn reserved_method(
        &self,
        uid: u64,
        partition: u64,
        sealed: bool,
        now: UnixMillis,
    ) -> Result<Protection> {
        let partition = self.partition(partition)?;
        match self.earlier_capability_unserved(uid, &partition, now)? {
            Some(Unserved::T10) => Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "a partition with T10 credentials takes no reserved file ids: put files the \
                 usual way",
            )),
            Some(Unserved::Revoked) => Err(MdsError::refused(
                ErrorCode::Revoked,
                "this user's capabilities are revoked for now (maat admin revoke)",
            )),
            None => Ok(crate::namespace::method_of(partition.protection, sealed)),
        }
    }

    /// `Reserve` (`ReserveSealed` when `sealed`): a block of ids for `who`'s puts in
    /// `dir`'s partition and, for a session, one read-write capability over them in the
    /// method files of that partition get (of encrypted ones when `sealed`).
    pub(crate) fn reserve(
        &self,
        who: &Principal,
        dir: &str,
        sealed: bool,
        session: Option<&[u8; 16]>,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<MdsResponse> {
        if self.issuer.grouping().strategies == crate::grouping::Strategies::default() {
            // A block of ids under one capability groups files not made yet: with
            // grouping off (the papers' baseline) every file gets its own capability.
            return Err(MdsError::refused(
                ErrorCode::InvalidArgument,
                "no file ids are reserved while capability grouping is off \
                 (maat admin grouping): files are created the usual way",
            ));
        }
        let guard = self.writing()?;
        let inode = self.resolve(who, dir)?;
        if !inode.is_dir {
            return Err(MdsError::refused(ErrorCode::NotADirectory, dir.to_string()));
        }
        require(who, &inode, WRITE | EXEC, dir)?;
        let protection = self.reserved_method(who.uid, inode.partition, sealed, now)?;
        let count = RESERVED_IDS_PER_REQUEST;
        // The counter moves past the block (made durable before the answer, by the
        // store's allocation) before anyone can link an id of it.
        let first = self.next_ids("next_inode", u64::from(count))?;
        let expiry = now.plus_millis(self.config.capability_lifetime_millis);
        lock(&self.reservations).add(
            who.uid,
            Reservation {
                first,
                count,
                partition: inode.partition,
                sealed,
                protection,
                expiry,
                used: 0,
                linked: vec![0; (count as usize).div_ceil(64)],
                capability: None,
            },
            now,
        )?;
        // Signed after the namespace lock: other requests need not wait for it.
        drop(guard);
        let capability = match session {
            Some(_) => {
                let id = rng.next_u64();
                let encoded = signed::sign(
                    Capability {
                        users: Principals::User(UserId(who.uid)),
                        files: Files::Range {
                            first: FileId(first),
                            count,
                        },
                        id: CapabilityId(id),
                        mode: Mode::READ_WRITE,
                        protection,
                        start: UnixMillis(now.0.saturating_sub(CLOCK_SKEW_MILLIS)),
                        expiry,
                    },
                    &self.signing,
                )
                .encoded()
                .to_vec();
                let mut table = lock(&self.reservations);
                if let Some(r) = table.find_mut(who.uid, first) {
                    r.capability = Some((encoded.clone(), id));
                }
                encoded
            }
            None => Vec::new(),
        };
        Ok(MdsResponse::Reserved {
            first,
            count,
            protection,
            capability,
            expiry,
        })
    }

    /// `Link`: the file `path` with reserved id `file` and `size`, once; `LinkSealed`
    /// (`sealed`: the stripes written and the first lockbox) makes it encrypted, checked
    /// as `SetSizeLockbox` checks them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn link(
        &self,
        who: &Principal,
        path: &str,
        file: u64,
        size: u64,
        mode: u16,
        sealed: Option<SealedLink<'_>>,
        now: UnixMillis,
    ) -> Result<MdsResponse> {
        if size > crate::FILE_BYTES_MAX {
            return Err(MdsError::refused(
                ErrorCode::TooLarge,
                format!("files hold at most {} bytes", crate::FILE_BYTES_MAX),
            ));
        }
        let _guard = self.writing()?;
        let (parent, name) = self.parent_of(who, path)?;
        crate::namespace::check_new_name(name)?;
        require(who, &parent, WRITE | EXEC, path)?;
        if self.store.lookup(parent.id, name)?.is_some() {
            return Err(MdsError::refused(
                ErrorCode::AlreadyExists,
                path.to_string(),
            ));
        }
        let mut inode = fresh_inode(file, who, &parent, false, mode, None, now);
        if let Some((written, lockbox)) = sealed {
            first_lockbox(&mut inode, lockbox, path)?;
            if !written.is_empty() {
                record_generations(&mut inode, size, written, 1, path)?;
            }
        }
        inode.size = size;
        // Checked again now: the partition may have changed method or credentials since
        // the reservation, and the user may have been revoked.
        let method = self.reserved_method(who.uid, parent.partition, sealed.is_some(), now)?;
        // Made before the commit: a failure after it would read as a refusal to a
        // client that then removes the linked data.
        let stat = self.stat_of(who, &inode)?;
        {
            let mut table = lock(&self.reservations);
            let list = table
                .by_user
                .get_mut(&who.uid)
                .ok_or_else(|| not_reserved("this user holds no reservation"))?;
            let r = list
                .iter_mut()
                .find(|r| r.holds(file).is_some())
                .ok_or_else(|| not_reserved("in none of this user's reservations"))?;
            if r.expiry <= now {
                return Err(not_reserved("its reservation expired"));
            }
            if r.sealed != sealed.is_some() {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    "ids reserved for encrypted files link with their lockbox, others without",
                ));
            }
            if r.partition != parent.partition {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    "the file id was reserved for another partition: put the file the usual way",
                ));
            }
            if r.protection != method {
                return Err(MdsError::refused(
                    ErrorCode::InvalidArgument,
                    format!(
                        "the file id was reserved under {}, the partition's files now get {method}: \
                         put the file the usual way",
                        r.protection
                    ),
                ));
            }
            let offset = r.holds(file).unwrap_or_default();
            let (word, bit) = Reservation::bit(offset);
            let slot = r
                .linked
                .get_mut(word)
                .ok_or_else(|| not_reserved("out of its reservation"))?;
            if *slot & bit != 0 {
                return Err(MdsError::refused(
                    ErrorCode::AlreadyExists,
                    "this reserved file id is linked already",
                ));
            }
            *slot |= bit;
            r.used += 1;
        }
        let mut batch = Batch::default();
        crate::namespace::enter(&mut batch, &parent, name, &inode, now);
        self.store.commit_deferred(batch)?;
        Ok(MdsResponse::Stat(stat))
    }
}
