//! Namespace, partition, user and administration calls to the MDS (SPEC T9, T1, M6,
//! M9): one request each, answered `Ok` or with what was asked for.

use super::*;

impl Client {
    /// The cluster map (fetched once per client).
    pub fn cluster_map(&self) -> Result<ClusterMap> {
        if let Some(m) = &*self.map.lock() {
            return Ok(m.clone());
        }
        match self.mds_call(MdsRequest::ClusterMap)? {
            MdsResponse::ClusterMap(m) => {
                *self.map.lock() = Some(m.clone());
                // The other inputs of placement, fetched with the map so that a client
                // holding the map can place every copy while the MDS is away, and reads
                // skip a down OSD at once (issue 41). A failure here is met again, and
                // reported, where a copy is placed.
                let _prefetched = self.refresh_placement();
                Ok(m)
            }
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Attributes of a path.
    pub fn stat(&self, path: &str) -> Result<FileStat> {
        match self.mds_call(MdsRequest::Stat { path: path.into() })? {
            MdsResponse::Stat(s) => Ok(s),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Attributes of a path with its link count and its access and change times
    /// (issue 44).
    pub fn stat_full(&self, path: &str) -> Result<(FileStat, StatMore)> {
        match self.mds_call(MdsRequest::StatFull { path: path.into() })? {
            MdsResponse::StatFull { stat, more } => Ok((stat, more)),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Makes `to` another name of the inode at `from` (a hard link, issue 44; not of a
    /// directory). Answers the inode's attributes, its link count among them.
    pub fn hard_link(&self, from: &str, to: &str) -> Result<(FileStat, StatMore)> {
        match self.mds_call(MdsRequest::HardLink {
            from: from.into(),
            to: to.into(),
        })? {
            MdsResponse::StatFull { stat, more } => Ok((stat, more)),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Directory entries (or the file itself).
    pub fn readdir(&self, path: &str) -> Result<Vec<(String, FileStat)>> {
        match self.mds_call(MdsRequest::Readdir { path: path.into() })? {
            MdsResponse::Entries(e) => Ok(e),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// mkdir (with `parents`: mkdir -p).
    pub fn mkdir(&self, path: &str, mode: u16, parents: bool) -> Result<()> {
        self.mkdir_in(path, mode, parents, None)
    }

    /// Creates a directory in `partition` (SPEC T1): files made below it inherit the
    /// partition, hence its protection method. `None` inherits the parent's.
    pub fn mkdir_in(
        &self,
        path: &str,
        mode: u16,
        parents: bool,
        partition: Option<&str>,
    ) -> Result<()> {
        self.expect_ok(MdsRequest::Mkdir {
            path: path.into(),
            mode,
            parents,
            partition: partition.map(str::to_string),
        })
    }

    /// Administrator: creates a partition with a protection method, its objects kept in
    /// one copy.
    pub fn partition_create(&self, name: &str, protection: Protection) -> Result<()> {
        self.mds_call(MdsRequest::PartitionCreate {
            name: name.into(),
            protection,
        })
        .map(drop)
    }

    /// Administrator: creates a partition with a protection method whose objects are
    /// kept in `replicas` copies on distinct OSDs (issue 41).
    pub fn partition_create_replicated(
        &self,
        name: &str,
        protection: Protection,
        replicas: u8,
    ) -> Result<()> {
        self.mds_call(MdsRequest::PartitionCreateReplicated {
            name: name.into(),
            protection,
            replicas,
        })
        .map(drop)
    }

    /// Administrator (issue 41): how many copies a change of a file in partition `name`
    /// must reach before it is acknowledged (1 to its copies).
    pub fn partition_set_min_size(&self, name: &str, min_size: u8) -> Result<()> {
        self.mds_call(MdsRequest::PartitionSetMinSize {
            name: name.into(),
            min_size,
        })
        .map(drop)
    }

    /// Every partition's copies per object and min_size (issue 41).
    pub fn partitions_copies(&self) -> Result<Vec<maat_proto::msg::PartitionCopies>> {
        match self.mds_call(MdsRequest::PartitionCopies)? {
            MdsResponse::PartitionCopies(all) => Ok(all),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Administrator: changes a partition's protection method.
    pub fn partition_set_security(&self, name: &str, protection: Protection) -> Result<()> {
        self.mds_call(MdsRequest::PartitionSetSecurity {
            name: name.into(),
            protection,
        })
        .map(drop)
    }

    /// Administrator: the credential format of a partition's opens (SPEC T2).
    pub fn partition_set_credentials(
        &self,
        name: &str,
        credentials: msg::Credentials,
    ) -> Result<()> {
        self.mds_call(MdsRequest::PartitionSetCredentials {
            name: name.into(),
            credentials,
        })
        .map(drop)
    }

    /// Administrator: every OSD's T10 key generations (SPEC T3).
    pub fn t10_keys(&self) -> Result<Vec<msg::T10KeyInfo>> {
        match self.mds_call(MdsRequest::T10KeysShow)? {
            MdsResponse::T10Keys(k) => Ok(k),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Administrator: refreshes T10 keys now, or with `revoke` refills every working slot
    /// (SPEC T3, T4); answers once every OSD concerned acknowledged.
    pub fn t10_rotate(
        &self,
        osd: Option<u64>,
        partition: Option<&str>,
        revoke: bool,
        master: bool,
    ) -> Result<Vec<msg::T10KeyInfo>> {
        match self.mds_call(MdsRequest::T10KeysRotate {
            osd,
            partition: partition.map(str::to_string),
            revoke,
            master,
        })? {
            MdsResponse::T10Keys(k) => Ok(k),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Administrator: revokes every T10 credential of the file at `path` by raising its
    /// policy access tag (SPEC T4): the file, its new tag, and each OSD with why it does
    /// not hold the tag yet, if it does not.
    pub fn t10_revoke_object(&self, path: &str) -> Result<msg::T10ObjectRevocation> {
        match self.mds_call(MdsRequest::T10RevokeObject { path: path.into() })? {
            MdsResponse::T10ObjectRevoked(r) => Ok(r),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// SPEC M6: defines (or replaces) this user's file set `name`: files used together,
    /// which capabilities may then name at once (`defined` grouping). The
    /// administrator's sets apply to everyone's opens.
    pub fn fileset_define(&self, name: &str, paths: &[String]) -> Result<()> {
        self.expect_ok(MdsRequest::FileSetDefine {
            name: name.into(),
            paths: paths.to_vec(),
        })
    }

    /// Removes this user's file set `name`.
    pub fn fileset_remove(&self, name: &str) -> Result<()> {
        self.expect_ok(MdsRequest::FileSetRemove { name: name.into() })
    }

    /// This user's file sets and the administrator's.
    pub fn fileset_list(&self) -> Result<Vec<maat_proto::msg::FileSetInfo>> {
        match self.mds_call(MdsRequest::FileSetList)? {
            MdsResponse::FileSets(list) => Ok(list),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Administrator: the grouping strategies the MDS uses from now on (SPEC M6).
    pub fn set_grouping(&self, strategies: &str) -> Result<()> {
        self.expect_ok(MdsRequest::SetGrouping {
            strategies: strategies.into(),
        })
    }

    /// SPEC M9 (administrator): every OSD refuses these users and capabilities from now
    /// until the capabilities would have expired anyway. Returns the verified notice.
    pub fn revoke(&self, users: &[String], capabilities: &[u64]) -> Result<Revocation> {
        let response = self.mds_call(MdsRequest::Revoke {
            users: users.to_vec(),
            capabilities: capabilities.to_vec(),
        })?;
        self.revocation_from(response)
    }

    /// The verified notice of a `Revoked` answer.
    pub(crate) fn revocation_from(&self, response: MdsResponse) -> Result<Revocation> {
        let (bytes, osds_told, osds) = match response {
            MdsResponse::Revoked {
                notice,
                osds_told,
                osds,
            } => (notice, osds_told, osds),
            _ => return Err(self.bad("mds", "unexpected answer to Revoke")),
        };
        let now = self.now();
        let notice = Unverified::<maat_proto::revocation::RevocationNotice>::decode(&bytes)
            .and_then(|n| n.verify(&self.mds_key, UnixMillis(now)))
            .map(|n| n.body().clone())
            .map_err(|e| self.bad("mds", &format!("revocation notice: {e}")))?;
        Ok(Revocation {
            notice,
            osds_told,
            osds,
        })
    }

    /// The partitions.
    pub fn partitions(&self) -> Result<Vec<msg::PartitionInfo>> {
        match self.mds_call(MdsRequest::PartitionList)? {
            MdsResponse::Partitions(p) => Ok(p),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// rmdir.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.expect_ok(MdsRequest::Rmdir { path: path.into() })
    }

    /// rename.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.forget_opens();
        self.expect_ok(MdsRequest::Rename {
            from: from.into(),
            to: to.into(),
        })
    }

    /// chmod.
    pub fn chmod(&self, path: &str, mode: u16) -> Result<()> {
        self.forget_opens();
        self.expect_ok(MdsRequest::Chmod {
            path: path.into(),
            mode,
        })
    }

    /// This user's umask (issue 40): the permission bits the MDS clears from the mode of
    /// every file and directory the user creates (077 unless changed: private); `set`
    /// replaces it. Answers the umask in force.
    pub fn umask(&self, set: Option<u16>) -> Result<u16> {
        match self.mds_call(MdsRequest::Umask { set })? {
            MdsResponse::Umask(u) => Ok(u),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Sets `path`'s modification time (protocol milliseconds; `None`: the MDS's time
    /// now). A time other than now is the owner's to set (issue 44: utimensat).
    pub fn set_mtime(&self, path: &str, mtime: Option<u64>) -> Result<()> {
        self.forget_opened_path(path);
        self.expect_ok(MdsRequest::SetMtime {
            path: path.into(),
            mtime,
        })
    }

    /// Sets `path`'s access time, modification time or both (utimensat(2), issue 44),
    /// each to a time (the owner's to set) or to now (also a writer's).
    pub fn set_times(
        &self,
        path: &str,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> Result<()> {
        self.forget_opened_path(path);
        self.expect_ok(MdsRequest::SetTimes {
            path: path.into(),
            atime,
            mtime,
        })
    }

    /// Changes any of `path`'s mode, owner, group and times in one commit (each under
    /// the rules of [`Client::chmod`], [`Client::chown`] and [`Client::set_times`]; a
    /// refusal changes nothing) and answers the attributes after (issue 44).
    pub fn set_attr(
        &self,
        path: &str,
        mode: Option<u16>,
        owner: Option<&str>,
        group: Option<&str>,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> Result<(FileStat, StatMore)> {
        self.forget_opened_path(path);
        match self.mds_call(MdsRequest::SetAttr {
            path: path.into(),
            mode,
            owner: owner.map(str::to_string),
            group: group.map(str::to_string),
            atime,
            mtime,
        })? {
            MdsResponse::StatFull { stat, more } => Ok((stat, more)),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Makes a symbolic link at `path` pointing to `target` (issue 44). The MDS never
    /// follows links; a mount's kernel does.
    pub fn symlink(&self, target: &str, path: &str) -> Result<FileStat> {
        match self.mds_call(MdsRequest::Symlink {
            path: path.into(),
            target: target.into(),
        })? {
            MdsResponse::Stat(s) => Ok(s),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Makes a FIFO, a socket's name or (the administrator only) a device node at `path`
    /// (`mode`: type and permission bits; `rdev`: a device's number). Each machine's
    /// kernel serves it; it holds no data in Maat.
    pub fn mknod(&self, path: &str, mode: u16, rdev: u32) -> Result<FileStat> {
        match self.mds_call(MdsRequest::Mknod {
            path: path.into(),
            mode,
            rdev,
        })? {
            MdsResponse::Stat(s) => Ok(s),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Whether this user may access `path` as `mask` asks (access(2): 4 read, 2 write,
    /// 1 execute or search, 0 exists): `Ok`, or the MDS's refusal.
    pub fn access(&self, path: &str, mask: u8) -> Result<()> {
        self.expect_ok(MdsRequest::Access {
            path: path.into(),
            mask,
        })
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        match self.mds_call(MdsRequest::Readlink { path: path.into() })? {
            MdsResponse::Link(target) => Ok(target),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// chown.
    pub fn chown(&self, path: &str, owner: Option<&str>, group: Option<&str>) -> Result<()> {
        self.forget_opens();
        self.expect_ok(MdsRequest::Chown {
            path: path.into(),
            owner: owner.map(Into::into),
            group: group.map(Into::into),
        })
    }

    /// Administrator: removes a user.
    pub fn user_rm(&self, name: &str) -> Result<()> {
        self.expect_ok(MdsRequest::UserRm { name: name.into() })
    }

    /// Administrator: adds a group.
    pub fn group_add(&self, name: &str) -> Result<()> {
        self.expect_ok(MdsRequest::GroupAdd { name: name.into() })
    }

    /// Administrator: adds a user to a group.
    pub fn group_member_add(&self, group: &str, user: &str) -> Result<()> {
        self.expect_ok(MdsRequest::GroupMemberAdd {
            group: group.into(),
            user: user.into(),
        })
    }

    /// Administrator: removes a user from a group (not their primary group). The MDS
    /// stops issuing and renewing what the membership gave at once (SPEC M7).
    pub fn group_member_rm(&self, group: &str, user: &str) -> Result<()> {
        self.expect_ok(MdsRequest::GroupMemberRm {
            group: group.into(),
            user: user.into(),
        })
    }

    /// The MDS's counters.
    pub fn mds_stats(&self) -> Result<DaemonStats> {
        match self.mds_call(MdsRequest::Stats)? {
            MdsResponse::Stats(s) => Ok(s),
            _ => Err(self.bad("mds", "unexpected answer")),
        }
    }

    /// Counters of the MDS and every OSD.
    pub fn daemon_stats(&self) -> Result<Vec<DaemonStats>> {
        let mut out = vec![self.mds_stats()?];
        let map = self.cluster_map()?;
        for osd in map.osds {
            match self.osd_call(
                osd.id,
                OsdRequest {
                    capability: vec![],
                    command: OsdCommand::Stats,
                },
            ) {
                Ok(OsdResponse::Stats(s)) => out.push(s),
                Ok(_) => return Err(self.bad("osd", "unexpected answer")),
                Err(e) => out.push(DaemonStats {
                    daemon: format!("osd {} (unreachable: {e})", osd.id),
                    counters: vec![],
                }),
            }
        }
        out.extend(self.kds_stats()?);
        Ok(out)
    }
}
