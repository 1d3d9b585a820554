//! The session commands: login, passwd, logout, mount.

use crate::{client, read_passphrase};
use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use maat_client::Credential;
use std::path::PathBuf;

/// The session commands (flattened into `maat`'s own).
#[derive(Subcommand)]
pub(crate) enum SessionCommand {
    /// Log in as NAME (the passphrase never leaves this machine).
    Login {
        /// User name.
        name: String,
        /// Read the passphrase from standard input instead of the terminal.
        #[arg(long)]
        passphrase_stdin: bool,
    },
    /// Change your passphrase: asks for the current one (proved to the MDS, never sent),
    /// then the new one twice. Your other sessions end; earlier owner boxes of your
    /// encrypted files stay readable through the KDS.
    Passwd {
        /// Read the current passphrase, then the new one, each on a line of standard
        /// input.
        #[arg(long)]
        passphrase_stdin: bool,
    },
    /// End the session.
    Logout,
    /// Mount the Maat directory PATH at MOUNTPOINT (FUSE) as the user in MAAT_HOME.
    ///
    /// Serves in the foreground until Ctrl-C, SIGTERM or `fusermount3 -u MOUNTPOINT`;
    /// open files' buffered writes and sizes are sent before it unmounts. Every access is
    /// decided by the MDS, not by the kernel's view of the permission bits; files show the
    /// mounting user as owner unless `--idmap` maps owners to local ids. Consistency is
    /// close-to-open, as on NFS. Mounted `nosuid` and `nodev` unless `--suid`. Needs
    /// /dev/fuse and fusermount3 (Debian: `apt install fuse3`).
    ///
    /// With `--many-users` every local user may use the mount (`allow_other`: an ordinary
    /// user needs `user_allow_other` in /etc/fuse.conf), each as their own Maat login: the
    /// session in their home under `--homes` (made by `MAAT_HOME=... maat login NAME`), a
    /// directory they own that no other account may write. A user without one is refused
    /// (EACCES); root is no exception unless root mounted.
    Mount {
        /// Honour setuid and setgid bits of programs run from the mount (off: any Maat
        /// user who may write a directory could plant one for this machine's users).
        #[arg(long)]
        suid: bool,
        /// Serve every local user, each through their own session (see `--homes`).
        #[arg(long)]
        many_users: bool,
        /// Where each local user's MAAT_HOME is, with `{uid}` for the user's number.
        #[arg(long, value_name = "PATTERN", default_value = maat_fuse::users::DEFAULT_HOMES, requires = "many_users")]
        homes: String,
        /// Show owners and groups as local ids and take local ids in chown: a file of
        /// `user UID NAME` and `group GID NAME` lines. Unmapped names show as 65534.
        #[arg(long, value_name = "FILE")]
        idmap: Option<PathBuf>,
        /// Directory in Maat (`/` for everything the user can see).
        path: String,
        /// Empty local directory to mount on.
        mountpoint: PathBuf,
    },
}

/// Runs a session command against the cluster of `cluster`.
pub(crate) fn run(cluster: &Option<PathBuf>, command: SessionCommand) -> Result<()> {
    match command {
        SessionCommand::Login {
            name,
            passphrase_stdin,
        } => {
            let c = client(cluster)?;
            let pass = read_passphrase(passphrase_stdin, &format!("passphrase for {name}: "))?;
            c.login(&name, Credential::Passphrase(&pass))?;
            eprintln!("logged in as {name}");
            Ok(())
        }
        SessionCommand::Passwd { passphrase_stdin } => {
            let c = client(cluster)?;
            let name = c
                .user_name()
                .ok_or_else(|| anyhow!("not logged in: run `maat login NAME` first"))?;
            let current = read_passphrase(
                passphrase_stdin,
                &format!("current passphrase for {name}: "),
            )?;
            let new = read_passphrase(passphrase_stdin, "new passphrase: ")?;
            if !passphrase_stdin {
                let again = read_passphrase(false, "new passphrase again: ")?;
                if again != new {
                    bail!("the two new passphrases differ; nothing changed");
                }
            }
            c.change_passphrase(
                Credential::Passphrase(&current),
                &new,
                maat_crypto::kdf::PassphraseParams::DEFAULT,
            )?;
            eprintln!("passphrase of {name} changed; your other sessions have ended");
            Ok(())
        }
        SessionCommand::Mount {
            suid,
            many_users,
            homes,
            idmap,
            path,
            mountpoint,
        } => {
            let c = client(cluster)?;
            let idmap = idmap
                .map(|file| {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("reading the identity map {}", file.display()))?;
                    anyhow::Ok(maat_fuse::IdMap::parse(&text, &file.display().to_string())?)
                })
                .transpose()?;
            let many_users = many_users
                .then(|| {
                    let file = crate::cluster_file(cluster)?;
                    let level = crate::KEY_LEVEL.get().copied();
                    anyhow::Ok(maat_fuse::ManyUsers {
                        homes,
                        connect: Box::new(move |home: &std::path::Path| {
                            let mut c = maat_client::Client::new(
                                file.clone(),
                                Some(maat_client::Home::new(home)),
                            )?;
                            if let Some(level) = level {
                                c.set_key_level(level);
                            }
                            Ok(c)
                        }),
                    })
                })
                .transpose()?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, stop.clone())?;
            }
            // Said once the mount is made, not before its checks (issue 40, item 9).
            let mounted = || {
                eprintln!(
                    "maat: {path} mounted at {} (Ctrl-C or `fusermount3 -u {}` to unmount)",
                    mountpoint.display(),
                    mountpoint.display()
                )
            };
            let settings = maat_fuse::MountSettings {
                suid,
                many_users,
                idmap,
            };
            maat_fuse::mount(c, &path, &mountpoint, settings, mounted, || {
                stop.load(std::sync::atomic::Ordering::Relaxed)
            })?;
            eprintln!("maat: unmounted {}", mountpoint.display());
            Ok(())
        }
        SessionCommand::Logout => {
            let c = client(cluster)?;
            c.logout()?;
            eprintln!("logged out");
            Ok(())
        }
    }
}
