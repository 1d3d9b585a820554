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
    /// Grouping strategies (SPEC M6): how many users and files one capability names.
    /// `maat stats` shows, per strategy, capabilities issued, the (user, file) pairs they
    /// authorize and cache hits.
    Grouping {
        #[command(subcommand)]
        command: GroupingCommand,
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
    },
    /// Change a partition's method (capabilities already issued keep theirs until expiry).
    SetSecurity {
        /// Name.
        name: String,
        /// The new method.
        #[arg(value_parser = crate::up::parse_protection)]
        security: maat_proto::protection::Protection,
    },
    /// List partitions and their methods.
    List,
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
                eprintln!("added user {name} (home /home/{name})");
            }
            UserCommand::Rm { name } => c.user_rm(&name)?,
        },
        AdminCommand::Group { command } => match command {
            GroupCommand::Add { name } => c.group_add(&name)?,
            GroupCommand::Member {
                command: MemberCommand::Add { group, name },
            } => c.group_member_add(&group, &name)?,
        },
        AdminCommand::Partition { command } => match command {
            PartitionCommand::Create { name, security } => {
                c.partition_create(&name, security)?;
                eprintln!("created partition {name} ({security}); put files in it with `maat mkdir --partition {name} DIR`");
            }
            PartitionCommand::SetSecurity { name, security } => {
                c.partition_set_security(&name, security)?;
                eprintln!("partition {name} is now {security} for capabilities issued from now on");
            }
            PartitionCommand::List => {
                println!("{:>4}  {:<24} security", "id", "name");
                for p in c.partitions()? {
                    println!("{:>4}  {:<24} {}", p.id, p.name, p.protection);
                }
            }
        },
        AdminCommand::Grouping {
            command: GroupingCommand::Set { strategies },
        } => {
            c.set_grouping(&strategies)?;
            eprintln!("grouping is now {strategies} for capabilities issued from now on");
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
