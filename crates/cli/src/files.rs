//! The file commands: put, get, cat, ls, mkdir, rm, rmdir, mv, stat, umask, chmod, chown.

use crate::{client, keys, show};
use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use maat_client::{Client, ClientError};
use maat_proto::msg::{ErrorCode, FileStat, SetTime};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

/// The file commands (flattened into `maat`'s own).
#[derive(Subcommand)]
pub(crate) enum FileCommand {
    /// Store a local file (LOCAL `-` reads standard input).
    ///
    /// A new file is encrypted end to end when the cluster says so (the default of
    /// `maat up`): its blocks are sealed here with keys from the KDS, and OSDs and the MDS
    /// never see them in clear. An existing file stays as it is.
    Put {
        /// Local file.
        local: PathBuf,
        /// Path in Maat.
        path: String,
        /// Store a new file unencrypted (whatever the cluster's default).
        #[arg(long, conflicts_with = "encrypt")]
        no_encrypt: bool,
        /// Encrypt a new file (whatever the cluster's default). Refused, before anything
        /// is written, for an existing unencrypted file that holds data or is another
        /// user's: encryption is chosen when a file is created.
        #[arg(long)]
        encrypt: bool,
    },
    /// Fetch a file (LOCAL `-` writes standard output).
    Get {
        /// Path in Maat.
        path: String,
        /// Local file.
        local: PathBuf,
    },
    /// Print a file.
    Cat {
        /// Path in Maat.
        path: String,
        /// Only bytes START..END (END exclusive; KiB, MiB, GiB suffixes), e.g. the range
        /// of an encrypted file its owner granted you (`maat keys`).
        #[arg(long, value_parser = keys::parse_range)]
        range: Option<(u64, u64)>,
    },
    /// List a directory.
    Ls {
        /// Long format (times in UTC, `YYYY-MM-DD HH:MM`).
        #[arg(short = 'l')]
        long: bool,
        /// Times as milliseconds since the epoch (for scripts).
        #[arg(long)]
        epoch: bool,
        /// Path in Maat.
        #[arg(default_value = "/")]
        path: String,
    },
    /// Make a directory (mode 0755).
    Mkdir {
        /// Create parents, succeed if it exists.
        #[arg(short = 'p')]
        parents: bool,
        /// Put the new directories in this partition: files made below them inherit it,
        /// hence its protection method (`maat admin partition list`). Default: the parent's.
        #[arg(long)]
        partition: Option<String>,
        /// Path.
        path: String,
    },
    /// Remove a file.
    Rm {
        /// Path.
        path: String,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Path.
        path: String,
    },
    /// Make PATH another name of the file TARGET (a hard link: one file, one set of
    /// permissions, under both names; not of a directory), or with `-s` a symbolic link
    /// PATH pointing to TARGET. The MDS never follows symbolic links; a mount's kernel
    /// does.
    Ln {
        /// Make a symbolic link instead of a hard link.
        #[arg(short = 's', long = "symbolic")]
        symbolic: bool,
        /// The existing file (hard link), or what the link points to, kept as given
        /// (symbolic link: relative to the link's directory, or absolute).
        target: String,
        /// Where the link is made.
        path: String,
    },
    /// Print a symbolic link's target.
    Readlink {
        /// The link.
        path: String,
    },
    /// Rename or move.
    Mv {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Set a file's access and modification times to now (or to `--time`), making an
    /// empty file where nothing is (as `touch`). A time other than now is the owner's to
    /// set; now, also a writer's.
    Touch {
        /// The time to set instead of now, in milliseconds since the epoch.
        #[arg(long, value_name = "MS")]
        time: Option<u64>,
        /// Set only the access time.
        #[arg(short = 'a', conflicts_with = "modification_only")]
        access_only: bool,
        /// Set only the modification time.
        #[arg(short = 'm')]
        modification_only: bool,
        /// Path.
        path: String,
    },
    /// Show attributes.
    Stat {
        /// Times as milliseconds since the epoch only (for scripts).
        #[arg(long)]
        epoch: bool,
        /// Path.
        path: String,
    },
    /// Show or set your umask (octal, 077 by default).
    ///
    /// The umask is the permission bits the MDS clears from the mode of every
    /// file and directory you create, from any client (077 by default: new files 0600 and
    /// directories 0700, readable by you alone; 022 makes them readable by everyone, as on
    /// most Unix systems). `chmod` is not affected.
    Umask {
        /// New umask in octal (omit to show it).
        mask: Option<String>,
    },
    /// Change permission bits (octal, e.g. 640).
    ///
    /// In a directory with the sticky bit (1000, as `chmod 1777 /tmp`), only a file's
    /// owner, the directory's owner or the administrator may remove or rename the file.
    /// Setuid and setgid (4000, 2000) are kept and shown, never acted on.
    Chmod {
        /// Mode in octal (up to 7777).
        mode: String,
        /// Path.
        path: String,
    },
    /// Change owner and/or group: USER, USER:GROUP or :GROUP.
    Chown {
        /// Owner spec.
        owner: String,
        /// Path.
        path: String,
    },
}

/// Runs a file command against the cluster of `cluster`.
pub(crate) fn run(cluster: &Option<PathBuf>, command: FileCommand) -> Result<()> {
    match command {
        FileCommand::Put {
            local,
            path,
            no_encrypt,
            encrypt,
        } => {
            let c = client(cluster)?;
            let encrypt = match (no_encrypt, encrypt) {
                (true, _) => Some(false),
                (_, true) => Some(true),
                _ => None,
            };
            let special = local != Path::new("-")
                && std::fs::metadata(&local)
                    .with_context(|| format!("{}", local.display()))
                    .map(|m| {
                        if m.is_dir() {
                            Err(anyhow!("{} is a directory", local.display()))
                        } else {
                            Ok(!m.is_file())
                        }
                    })??;
            if local == Path::new("-") || special {
                // Standard input, pipes and devices have no size up front: read them whole.
                let mut data = Vec::new();
                if special {
                    std::fs::File::open(&local)?.read_to_end(&mut data)?;
                } else {
                    std::io::stdin().read_to_end(&mut data)?;
                }
                c.put_with(
                    &mut data.as_slice(),
                    data.len() as u64,
                    &path,
                    encrypt,
                    &mut |_| {},
                )?;
            } else {
                let mut f =
                    std::fs::File::open(&local).with_context(|| format!("{}", local.display()))?;
                let meta = f.metadata()?;
                if !meta.is_file() {
                    bail!("{} is not a regular file", local.display());
                }
                let size = meta.len();
                let bar = progress_bar(size);
                c.put_with(&mut f, size, &path, encrypt, &mut |n| {
                    if let Some(b) = &bar {
                        b.set_position(n)
                    }
                })?;
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
            }
            Ok(())
        }
        FileCommand::Get { path, local } => {
            let c = client(cluster)?;
            if local == Path::new("-") {
                let stdout = std::io::stdout();
                let mut lock = stdout.lock();
                c.get(&path, &mut lock, &mut |_| {})?;
                lock.flush()?;
                return Ok(());
            }
            let size = c.stat(&path)?.size;
            let local = if local.is_dir() {
                let name = path
                    .rsplit('/')
                    .next()
                    .filter(|n| !n.is_empty())
                    .unwrap_or("file");
                local.join(name)
            } else {
                local
            };
            let bar = progress_bar(size);
            // Write beside the target and rename, so a failed get leaves no partial file.
            let mut temp_name = local.file_name().unwrap_or_default().to_os_string();
            temp_name.push(".maat-partial");
            let temp = local.with_file_name(temp_name);
            // (No buffering: whole stripes are written at a time.)
            let mut f =
                std::fs::File::create(&temp).with_context(|| format!("{}", temp.display()))?;
            let result = c.get_whole(&path, &mut f, &mut |n| {
                if let Some(b) = &bar {
                    b.set_position(n)
                }
            });
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            match result.map_err(anyhow::Error::from).and_then(|_| {
                f.flush()?;
                Ok(())
            }) {
                Ok(()) => {
                    drop(f);
                    std::fs::rename(&temp, &local).map_err(|e| {
                        let _ = std::fs::remove_file(&temp);
                        anyhow!("{}: {e}", local.display())
                    })
                }
                Err(e) => {
                    drop(f);
                    let _ = std::fs::remove_file(&temp);
                    Err(e)
                }
            }
        }
        FileCommand::Cat { path, range } => {
            let mut c = client(cluster)?;
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            let result = match range {
                Some((start, end)) => cat_range(&mut c, &path, start, end, &mut lock),
                None => c.get(&path, &mut lock, &mut |_| {}).map(drop),
            };
            match result {
                // `maat cat … | head` closing the pipe early is not a failure.
                Err(maat_client::ClientError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    Ok(())
                }
                Err(e) => Err(e.into()),
                Ok(_) => {
                    let _ = lock.flush();
                    Ok(())
                }
            }
        }
        FileCommand::Ls { long, epoch, path } => {
            let c = client(cluster)?;
            let mut out = std::io::stdout().lock();
            for (name, s) in c.readdir(&path)? {
                if long {
                    writeln!(
                        out,
                        "{} {:<8} {:<8} {:>12} {} {}",
                        mode_string(&s),
                        show::name(&s.owner),
                        show::name(&s.group),
                        s.size,
                        if epoch {
                            s.mtime.to_string()
                        } else {
                            utc(s.mtime).get(..16).unwrap_or_default().to_string()
                        },
                        show::name(&name)
                    )?;
                } else {
                    let shown = show::name(&name);
                    writeln!(out, "{shown}{}", if s.is_dir { "/" } else { "" })?;
                }
            }
            Ok(())
        }
        FileCommand::Mkdir {
            parents,
            partition,
            path,
        } => Ok(client(cluster)?.mkdir_in(&path, 0o755, parents, partition.as_deref())?),
        FileCommand::Rm { path } => {
            let c = client(cluster)?;
            let before = c.client_stats().removals_left;
            c.unlink(&path)?;
            let left = c.client_stats().removals_left.saturating_sub(before);
            if left > 0 {
                let copies = if left == 1 { "copy" } else { "copies" };
                eprintln!(
                    "maat: {path} removed; {left} {copies} of its objects could not be \
                     removed (their OSDs down, hung or refusing) and stay there, unnamed: \
                     no open can reach them, but their space is not reclaimed (a known gap)"
                );
            }
            Ok(())
        }
        FileCommand::Rmdir { path } => Ok(client(cluster)?.rmdir(&path)?),
        FileCommand::Mv { from, to } => Ok(client(cluster)?.rename(&from, &to)?),
        FileCommand::Ln {
            symbolic,
            target,
            path,
        } => {
            if symbolic {
                client(cluster)?.symlink(&target, &path)?;
            } else {
                client(cluster)?.hard_link(&target, &path)?;
            }
            Ok(())
        }
        FileCommand::Readlink { path } => {
            say!("{}", show::name(&client(cluster)?.readlink(&path)?));
            Ok(())
        }
        FileCommand::Touch {
            time,
            access_only,
            modification_only,
            path,
        } => {
            let c = client(cluster)?;
            let at = time.map_or(SetTime::Now, SetTime::At);
            if let Err(ClientError::Refused(e)) = c.stat(&path) {
                if e.code != ErrorCode::NoSuchFile {
                    return Err(ClientError::Refused(e).into());
                }
                let flags = maat_client::OpenFlags {
                    write: true,
                    create: Some(0o666),
                    exclusive: false,
                    truncate: false,
                };
                let mut made = c.open_file(&path, flags)?;
                c.flush_file(&mut made)?;
            }
            let atime = (!modification_only).then_some(at);
            let mtime = (!access_only).then_some(at);
            Ok(c.set_times(&path, atime, mtime)?)
        }
        FileCommand::Stat { epoch, path } => {
            let mut c = client(cluster)?;
            let (s, more) = c.stat_full(&path)?;
            let time = |ms: u64| {
                if epoch {
                    ms.to_string()
                } else {
                    format!("{} UTC ({ms} ms since the epoch)", utc(ms))
                }
            };
            let tree = if s.encrypted {
                keys::tree_summary(&mut c, &path).map_or(String::new(), |t| format!("; {t}"))
            } else {
                String::new()
            };
            say!(
                "path: {}\nid: {}\ntype: {}\nmode: {:04o} ({})\nowner: {}\ngroup: {}\nsize: {}\nlinks: {}{}\nmodified: {}\nchanged: {}\naccessed: {}\npartition: {}\nsecurity: {}{}\nencrypted: {}{}",
                show::name(&path),
                s.id,
                file_type(&s).1,
                s.mode,
                mode_string(&s),
                show::name(&s.owner),
                show::name(&s.group),
                s.size,
                more.nlink,
                if s.is_device().is_some() {
                    let (major, minor) = (more.rdev >> 8 & 0xfff, (more.rdev & 0xff) | (more.rdev >> 12 & 0xf_ff00));
                    format!("\ndevice: {major}, {minor}")
                } else {
                    String::new()
                },
                time(s.mtime),
                time(more.ctime),
                time(more.atime),
                s.partition,
                s.protection,
                if s.encrypted {
                    " (blocks sealed end to end: each carries its own authentication)"
                } else {
                    ""
                },
                if s.encrypted { "yes (Horus key tree, keys from the KDS)" } else { "no" },
                tree
            );
            Ok(())
        }
        FileCommand::Chmod { mode, path } => {
            let m = u16::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    anyhow!("invalid mode {mode:?}: give octal bits like 640, or 1777 for a sticky directory")
                })?;
            Ok(client(cluster)?.chmod(&path, m)?)
        }
        FileCommand::Umask { mask } => {
            let set = match mask {
                None => None,
                Some(m) => Some(
                    u16::from_str_radix(m.trim_start_matches("0o"), 8)
                        .ok()
                        .filter(|m| *m <= 0o777)
                        .ok_or_else(|| {
                            anyhow!("invalid umask {m:?}: give octal bits like 077 or 022")
                        })?,
                ),
            };
            let now = client(cluster)?.umask(set)?;
            say!("{now:03o}");
            Ok(())
        }
        FileCommand::Chown { owner, path } => {
            let (user, group) = match owner.split_once(':') {
                Some((u, g)) => (u, Some(g)),
                None => (owner.as_str(), None),
            };
            let user = (!user.is_empty()).then_some(user);
            let group = group.filter(|g| !g.is_empty());
            if user.is_none() && group.is_none() {
                bail!("chown needs USER, USER:GROUP or :GROUP");
            }
            Ok(client(cluster)?.chown(&path, user, group)?)
        }
    }
}

/// Writes bytes `start..end` of `path` (fewer at the end of the file).
fn cat_range(
    c: &mut Client,
    path: &str,
    start: u64,
    end: u64,
    out: &mut impl Write,
) -> Result<(), maat_client::ClientError> {
    let handle = c.open_file(path, maat_client::OpenFlags::READ)?;
    write_range(c, &handle, start, end, out)
}

/// Writes bytes `start..end` of the file `handle` reads (fewer at the end of the file).
pub(crate) fn write_range(
    c: &Client,
    handle: &maat_client::FileHandle,
    start: u64,
    end: u64,
    out: &mut dyn Write,
) -> Result<(), maat_client::ClientError> {
    let mut at = start;
    while at < end.min(handle.size()) {
        let n = (end - at).min(maat_client::FILE_IO_BYTES_MAX as u64) as usize;
        let data = c.read_file_at(handle, at, n)?;
        if data.is_empty() {
            break;
        }
        out.write_all(&data)
            .map_err(|source| maat_client::ClientError::Io {
                what: "writing output".into(),
                source,
            })?;
        at += data.len() as u64;
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in UTC for milliseconds since the epoch (the proleptic
/// Gregorian calendar, days to civil date after H. Hinnant's `civil_from_days`).
fn utc(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    let in_day = ms % 86_400_000;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

/// `ls -l`'s type letter and `stat`'s name of the type of `s`.
fn file_type(s: &FileStat) -> (char, &'static str) {
    if s.is_dir {
        ('d', "directory")
    } else if s.is_symlink() {
        ('l', "symbolic link")
    } else if s.is_fifo() {
        ('p', "FIFO")
    } else if s.is_socket() {
        ('s', "socket")
    } else if s.is_device() == Some(true) {
        ('b', "block device")
    } else if s.is_device() == Some(false) {
        ('c', "character device")
    } else {
        ('-', "file")
    }
}

/// `ls -l`'s mode column: type, then owner, group and other, with setuid, setgid and
/// sticky shown in the execute places (`s`/`S`, `s`/`S`, `t`/`T`).
fn mode_string(s: &FileStat) -> String {
    let mut out = String::with_capacity(10);
    out.push(file_type(s).0);
    for (shift, special, set, unset) in [
        (6u16, 0o4000u16, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (s.mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, s.mode & special != 0) {
            (true, true) => set,
            (false, true) => unset,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}

fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    if total < 4 * 1024 * 1024 || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bytes}/{total_bytes} [{bar:30}] {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_times_match_known_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.789.
        assert_eq!(utc(951_827_696_789), "2000-02-29 12:34:56.789");
        assert_eq!(utc(1_795_305_600_000), "2026-11-22 00:00:00.000");
        assert_eq!(utc(4_107_542_399_999), "2100-02-28 23:59:59.999");
    }
}
