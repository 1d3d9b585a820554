//! `maat admin …`: users, groups, partitions, grouping strategies and revocation (run as
//! the administrator, MAAT_HOME=DIR/admin).

use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Groups.
    Group {
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Partitions and their protection methods (SPEC T1). A file belongs to the partition
    /// of the directory it is made in; start one with `maat mkdir --partition NAME DIR`.
    Partition {
        #[command(subcommand)]
        command: PartitionCommand,
    },
    /// T10 keys (SPEC T3, T4): the master, root, partition and working keys the MDS shares
    /// with each OSD. The MDS sets them itself (SET MASTER KEY by an ephemeral X25519
    /// exchange, then SET KEY down the hierarchy) and refreshes working keys every quarter
    /// of a credential lifetime; these commands show and force that.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Grouping strategies (SPEC M6): how many users and files one capability names.
    /// `maat stats` shows, per strategy, capabilities issued, the (user, file) pairs they
    /// authorize and cache hits.
    Grouping {
        #[command(subcommand)]
        command: GroupingCommand,
    },
    /// Reads every copy of every object of the files under PATH (`/` by default), each
    /// from its own OSD, and reports copies missing, damaged (an encrypted copy that does
    /// not authenticate, a plaintext one its OSD finds changed since written, or one
    /// differing from what most copies hold) or unreadable (issue 41). With `--repair`,
    /// each missing or damaged copy is replaced by a good one, only if it did not change
    /// since it was read (a write at work is never undone: such a copy is left for the
    /// next scrub). An OSD that does not answer is not repaired. Exits 1 when it finds
    /// anything it did not repair.
    Scrub {
        /// A file or directory.
        #[arg(default_value = "/")]
        path: String,
        /// Replace missing and damaged copies with a good copy.
        #[arg(long)]
        repair: bool,
        /// Compare copies by their OSDs' digests and read only those that disagree
        /// (finds lost, damaged and stale copies much faster; misses two copies damaged
        /// alike, and does not check that agreeing encrypted copies authenticate).
        #[arg(long)]
        light: bool,
        /// With --repair: write repaired copies back at most this fast, in MiB/s, so that
        /// clients keep their share of the OSDs while a lost OSD's copies are put back
        /// (0: as fast as the cluster goes).
        #[arg(long, value_name = "MIB_PER_S", default_value_t = 0)]
        rate: u64,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// OSDs (issue 41).
    Osd {
        #[command(subcommand)]
        command: OsdCommand,
    },
    /// Emergency revocation (SPEC M9), e.g. of a compromised client: every OSD refuses
    /// the named users' and capabilities' requests at once (an OSD that is down learns it
    /// before it serves again), and the MDS renews none of them and gives the users no
    /// new capability, until everything revoked would have expired anyway (one capability
    /// lifetime). For longer, also remove the user or change the permissions.
    Revoke {
        /// A user to revoke (repeatable).
        #[arg(long = "user", value_name = "NAME")]
        users: Vec<String>,
        /// A capability id to revoke, decimal or 0x-hex (repeatable).
        #[arg(long = "capability", value_name = "ID", value_parser = parse_capability_id)]
        capabilities: Vec<u64>,
    },
}

fn parse_capability_id(text: &str) -> Result<u64, String> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|e| format!("not a capability id ({e})"))
}

#[derive(Subcommand)]
pub enum GroupingCommand {
    /// Use these strategies from now on (until the MDS restarts; its config file's
    /// `grouping` key sets them at start): `none`, `all`, or a comma-separated list of
    /// `unix`, `directory`, `batch`, `onthefly`, `predict`, `defined`.
    Set {
        /// The strategies.
        strategies: String,
    },
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Every OSD's key generations (when each key was set, in ms since the epoch; never
    /// the keys).
    Show,
    /// Refresh now: a new partition key and a new working key in the next slot
    /// (credentials in flight stay valid). With --revoke every working slot is refilled,
    /// so every T10 credential of the partition is refused at once (revocation by key
    /// exchange); clients simply open again.
    Rotate {
        /// Only this OSD.
        #[arg(long)]
        osd: Option<u64>,
        /// Only this partition (name).
        #[arg(long)]
        partition: Option<String>,
        /// Refill every working slot: revoke every credential of the partition.
        #[arg(long)]
        revoke: bool,
        /// Exchange the master key first (SET MASTER KEY).
        #[arg(long)]
        master: bool,
    },
    /// Revoke every T10 credential of one file, on every OSD, at once (by policy access
    /// tag): the file's tag rises, credentials made before are refused, later opens work.
    /// An OSD not reached now is told as soon as it answers the MDS again.
    RevokeObject {
        /// The file (in a partition with T10 credentials).
        path: String,
    },
}

#[derive(Subcommand)]
pub enum OsdCommand {
    /// Every OSD: id, address, host (its failure domain: copies of an object go to
    /// different hosts while there are enough), weight, up or DOWN as the MDS knows it
    /// (an OSD checks in every second; one silent for 5 s is down), and its copies that
    /// missed a change while it was away (never served; a repairing scrub puts them
    /// back).
    Ls {
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum PartitionCommand {
    /// Create a partition.
    Create {
        /// Name (letters, digits, '-', '_').
        name: String,
        /// NOSEC (danger flag only), CAPKEY (capability checked, commands unprotected),
        /// CMDRSP (commands and responses MACed, data not), ALLDATA (everything MACed) or
        /// CONFIDENTIAL (everything MACed and encrypted on the wire).
        #[arg(long, value_parser = crate::up::parse_protection)]
        security: maat_proto::protection::Protection,
        /// Copies of each object, each on a different OSD and on different hosts while
        /// there are enough (issue 41). A write is acknowledged once every copy is on
        /// disk; a read fails over to another copy. Fewer are kept while the cluster has
        /// fewer OSDs. Fixed at creation (changing it needs recovery, not built yet).
        #[arg(long, default_value_t = maat_proto::limits::REPLICAS_DEFAULT,
              value_parser = clap::value_parser!(u8).range(1..=i64::from(maat_proto::limits::REPLICAS_MAX)))]
        replicas: u8,
        /// Copies a change must reach before it is acknowledged while some are down
        /// (the others are recorded as missed and never served until a repairing scrub
        /// puts them back). Default: 2, or every copy of a partition keeping fewer.
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=i64::from(maat_proto::limits::REPLICAS_MAX)))]
        min_size: Option<u8>,
    },
    /// How many copies a change must reach before it is acknowledged while some of a
    /// partition's copies are down (1 to its copies; `ceph osd pool set POOL min_size`).
    /// 1 acknowledges writes kept on a single disk until a scrub repairs the others;
    /// its copies' count acknowledges nothing while any copy is down.
    SetMinSize {
        /// Name.
        name: String,
        /// Copies a change must reach.
        #[arg(value_parser = clap::value_parser!(u8).range(1..=i64::from(maat_proto::limits::REPLICAS_MAX)))]
        min_size: u8,
    },
    /// Change a partition's method (capabilities already issued keep theirs until expiry).
    SetSecurity {
        /// Name.
        name: String,
        /// The new method.
        #[arg(value_parser = crate::up::parse_protection)]
        security: maat_proto::protection::Protection,
    },
    /// The credential format of the partition's opens: `maat` (MDS-signed capabilities
    /// over a session with each OSD) or `t10` (a capability and capability key per OSD,
    /// MACs only, no signature; SPEC T2). Opens already answered keep theirs until expiry.
    SetCredentials {
        /// Name.
        name: String,
        /// `maat` or `t10`.
        #[arg(value_parser = parse_credentials)]
        credentials: maat_proto::msg::Credentials,
    },
    /// List partitions: methods, credential formats, copies and min_size.
    List,
}

fn parse_credentials(text: &str) -> Result<maat_proto::msg::Credentials, String> {
    maat_proto::msg::Credentials::parse(text)
        .ok_or_else(|| format!("{text:?} is not a credential format: use maat or t10"))
}

#[derive(Subcommand)]
pub enum UserCommand {
    /// Add a user (asks for the new user's passphrase) with a home /home/NAME.
    Add {
        /// Name.
        name: String,
        /// Supplementary groups, comma separated (must exist).
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
        /// Read the passphrase from standard input.
        #[arg(long)]
        passphrase_stdin: bool,
    },
    /// Remove a user.
    Rm {
        /// Name.
        name: String,
    },
    /// Give a user a new passphrase without the current one (a forgotten passphrase).
    /// The MDS logs it and ends the user's sessions; users change their own with
    /// `maat passwd`.
    Reset {
        /// Name.
        name: String,
        /// Read the new passphrase from standard input.
        #[arg(long)]
        passphrase_stdin: bool,
    },
}

#[derive(Subcommand)]
pub enum GroupCommand {
    /// Add a group.
    Add {
        /// Name.
        name: String,
    },
    /// Group membership.
    Member {
        #[command(subcommand)]
        command: MemberCommand,
    },
}

#[derive(Subcommand)]
pub enum MemberCommand {
    /// Add NAME to group G.
    Add {
        /// Group.
        group: String,
        /// User.
        name: String,
    },
    /// Remove NAME from group G (not their primary group). The MDS issues and renews
    /// nothing the membership gave from now on; capabilities already issued end with
    /// their lifetime (`maat admin revoke --user NAME` ends them at once).
    Rm {
        /// Group.
        group: String,
        /// User.
        name: String,
    },
}

pub fn run(cluster: &Option<PathBuf>, command: AdminCommand) -> Result<()> {
    let mut c = crate::client(cluster)?;
    match command {
        AdminCommand::User { command } => match command {
            UserCommand::Add {
                name,
                groups,
                passphrase_stdin,
            } => {
                let pass = crate::read_passphrase(
                    passphrase_stdin,
                    &format!("passphrase for new user {name}: "),
                )?;
                c.user_add(
                    &name,
                    &groups,
                    &pass,
                    maat_crypto::kdf::PassphraseParams::DEFAULT,
                )?;
                // Say what the MDS did, not what it usually does (issue 40, item 9).
                let home = format!("/home/{name}");
                match c.stat(&home) {
                    Ok(s) if s.owner == name => {
                        eprintln!("added user {name} (home {home}, mode {:04o})", s.mode)
                    }
                    Ok(s) => eprintln!(
                        "added user {name}; {home} exists and belongs to {}: left as it is \
                         (maat chown {name} {home} to give it to them)",
                        crate::show::name(&s.owner)
                    ),
                    Err(_) => eprintln!(
                        "added user {name}, without a home: /home is not a directory \
                         (maat mkdir /home, then mkdir {home} and chown {name} {home})"
                    ),
                }
            }
            UserCommand::Rm { name } => c.user_rm(&name)?,
            UserCommand::Reset {
                name,
                passphrase_stdin,
            } => {
                let pass = crate::read_passphrase(
                    passphrase_stdin,
                    &format!("new passphrase for {name}: "),
                )?;
                c.reset_passphrase(&name, &pass, maat_crypto::kdf::PassphraseParams::DEFAULT)?;
                eprintln!("passphrase of {name} reset; their sessions have ended");
            }
        },
        AdminCommand::Group { command } => match command {
            GroupCommand::Add { name } => c.group_add(&name)?,
            GroupCommand::Member {
                command: MemberCommand::Add { group, name },
            } => c.group_member_add(&group, &name)?,
            GroupCommand::Member {
                command: MemberCommand::Rm { group, name },
            } => {
                c.group_member_rm(&group, &name)?;
                eprintln!("removed {name} from {group}; capabilities issued before end with their lifetime (`maat admin revoke --user {name}` ends them now)");
            }
        },
        AdminCommand::Partition { command } => match command {
            PartitionCommand::Create {
                name,
                security,
                replicas,
                min_size,
            } => {
                if min_size.is_some_and(|m| m > replicas) {
                    anyhow::bail!(
                        "--min-size {} is more than the {replicas} copies the partition keeps",
                        min_size.unwrap_or_default()
                    );
                }
                c.partition_create_replicated(&name, security, replicas)?;
                if let Some(min_size) = min_size {
                    c.partition_set_min_size(&name, min_size)?;
                }
                let osds = c.cluster_map()?.osds.len();
                eprintln!("created partition {name} ({security}, {replicas} copies of each object); put files in it with `maat mkdir --partition {name} DIR`");
                if osds < usize::from(replicas) {
                    eprintln!("note: the cluster has {osds} OSDs, so its objects get {osds} copies until more join");
                }
            }
            PartitionCommand::SetSecurity { name, security } => {
                c.partition_set_security(&name, security)?;
                eprintln!("partition {name} is now {security} for capabilities issued from now on");
            }
            PartitionCommand::SetCredentials { name, credentials } => {
                c.partition_set_credentials(&name, credentials)?;
                eprintln!(
                    "partition {name} gets {} credentials for opens from now on",
                    credentials.name()
                );
            }
            PartitionCommand::SetMinSize { name, min_size } => {
                c.partition_set_min_size(&name, min_size)?;
                eprintln!("partition {name}: a change is acknowledged once {min_size} of its copies took it (the others recorded as missed until a repairing scrub)");
            }
            PartitionCommand::List => {
                let copies = c.partitions_copies()?;
                let osds = c.cluster_map()?.osds.len();
                say!(
                    "{:>4}  {:<24} {:<13} {:<12} {:<24} min_size",
                    "id",
                    "name",
                    "security",
                    "credentials",
                    "copies"
                );
                for p in c.partitions()? {
                    let found = copies.iter().find(|k| k.name == p.name);
                    let wanted = found.map_or(1, |k| k.replicas);
                    let kept = usize::from(wanted).min(osds);
                    let shown = if kept < usize::from(wanted) {
                        format!("{kept} of {wanted} (too few OSDs)")
                    } else {
                        wanted.to_string()
                    };
                    say!(
                        "{:>4}  {:<24} {:<13} {:<12} {:<24} {}",
                        p.id,
                        p.name,
                        p.protection.to_string(),
                        p.credentials.name(),
                        shown,
                        found.map_or("?".to_string(), |k| k.min_size.to_string())
                    );
                }
            }
        },
        AdminCommand::Keys { command } => {
            let keys = match command {
                KeysCommand::Show => c.t10_keys()?,
                KeysCommand::Rotate {
                    osd,
                    partition,
                    revoke,
                    master,
                } => c.t10_rotate(osd, partition.as_deref(), revoke, master)?,
                KeysCommand::RevokeObject { path } => return revoke_object(&mut c, &path),
            };
            let missed = keys.iter().filter(|k| k.problem.is_some()).count();
            for osd in keys {
                say!("osd {}", osd.osd);
                if let Some(problem) = &osd.problem {
                    say!("  warning: {problem}");
                }
                if osd.generations.is_empty() {
                    say!("  (no keys yet: set within a second of the OSD registering)");
                }
                for (key, generation) in osd.generations {
                    say!("  {key:<28} generation {generation}");
                }
            }
            if missed > 0 {
                anyhow::bail!("{missed} OSD(s) not brought up to date (see the warnings above)");
            }
        }
        AdminCommand::Grouping {
            command: GroupingCommand::Set { strategies },
        } => {
            c.set_grouping(&strategies)?;
            eprintln!("grouping is now {strategies} for capabilities issued from now on");
        }
        AdminCommand::Osd {
            command: OsdCommand::Ls { json },
        } => return crate::health::osd_ls(cluster, json),
        AdminCommand::Scrub {
            path,
            repair,
            light,
            rate,
            json,
        } => {
            let depth = match light {
                true => maat_client::ScrubDepth::Light,
                false => maat_client::ScrubDepth::Deep,
            };
            c.set_repair_rate(rate.saturating_mul(1 << 20));
            return crate::health::scrub(&c, &path, depth, repair, json);
        }
        AdminCommand::Revoke {
            users,
            capabilities,
        } => {
            if users.is_empty() && capabilities.is_empty() {
                anyhow::bail!("name at least one --user or --capability to revoke");
            }
            let r = c.revoke(&users, &capabilities)?;
            let notice = &r.notice;
            let secs = notice.expiry.0.saturating_sub(maat_client::local_now()) / 1000;
            eprintln!(
                "revoked {} user(s) and {} capability(ies) (notice {}): {} of {} OSDs refuse them now; \
                 the revocation lapses in about {secs} s, when they would have expired anyway",
                notice.users.len(),
                notice.capability_ids.len(),
                notice.notice_id,
                r.osds_told,
                r.osds
            );
            if r.osds_told < r.osds {
                eprintln!(
                    "warning: {} OSD(s) could not be told now; each learns it within a second \
                     of reaching the MDS, and serves nothing after a restart until it has",
                    r.osds - r.osds_told
                );
            }
        }
    }
    Ok(())
}

/// `maat admin keys revoke-object PATH`: one file's T10 credentials revoked by tag.
fn revoke_object(c: &mut maat_client::Client, path: &str) -> Result<()> {
    let maat_proto::msg::T10ObjectRevocation { file, tag, osds } = c.t10_revoke_object(path)?;
    let missed: Vec<_> = osds.iter().filter(|(_, p)| p.is_some()).collect();
    eprintln!(
        "{path} (file {file}): policy access tag now {tag}; {} of {} OSDs refuse its \
         older T10 credentials now",
        osds.len() - missed.len(),
        osds.len()
    );
    for (osd, problem) in &missed {
        eprintln!("warning: osd {osd}: {}", problem.as_deref().unwrap_or(""));
    }
    if !missed.is_empty() {
        anyhow::bail!("{} OSD(s) not told yet", missed.len());
    }
    Ok(())
}
