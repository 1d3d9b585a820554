//! `maat`: run a local cluster or single daemons, use files, administer users, benchmark.

/// `println!` for the output of a command, returning the error instead of panicking when
/// standard output is gone (`maat stats | head`): [`main`] ends quietly on a closed pipe,
/// as Unix tools do.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?;
    }};
}

mod admin;
mod bench;
mod job;
mod keys;
mod model;
mod show;
mod stats;
mod up;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use maat_client::{Client, ClusterFile, Credential, Home};
use maat_proto::msg::FileStat;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "maat",
    version,
    about = "Maat: a secure distributed object store",
    long_about = "Maat: a secure distributed object store.\n\n\
        Start a local cluster with `maat up`, then point client commands at it with\n\
        MAAT_CLUSTER=DIR/client.toml (the cluster file) and MAAT_HOME (where one user's\n\
        identity and session live; DIR/admin is the administrator's).",
    after_help = "Quick start:\n  maat up                      # terminal 1: MDS + 4 OSDs under ./maat-data\n  export MAAT_CLUSTER=maat-data/client.toml MAAT_HOME=maat-data/admin\n  maat put README.md /readme && maat cat /readme"
)]
struct Cli {
    /// Cluster file (client.toml written by `maat up`).
    #[arg(long, global = true, env = "MAAT_CLUSTER")]
    cluster: Option<PathBuf>,
    /// Which level of an encrypted file's key tree to ask the KDS for (SPEC H8): 0, the
    /// default, asks for one key that derives every block key here; deeper levels ask
    /// for more keys nearer the blocks (more KDS work and bytes, less derivation here).
    #[arg(long, global = true, env = "MAAT_KEY_LEVEL", value_name = "LEVEL")]
    key_level: Option<u8>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a whole local cluster (MDS + N OSDs) in the foreground.
    Up(up::UpArgs),
    /// Run the metadata server from a TOML config. Logs go to stderr, one line each,
    /// filtered by MAAT_LOG (`info`, the default; `warn`; `debug`; or per module, as
    /// `info,maat_server::serve=warn`).
    Mds {
        /// Config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run an object storage daemon from a TOML config (logs as for `maat mds`).
    Osd {
        /// Config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a key distribution server from a TOML config (SPEC H4). It keeps no state:
    /// instances sharing its key file are interchangeable, and one restarted serves at
    /// once. Logs as for `maat mds`.
    Kds {
        /// Config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Administration (run with MAAT_HOME=DIR/admin).
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
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
    /// mounting user as owner. Consistency is close-to-open, as on NFS. Needs /dev/fuse and
    /// fusermount3 (Debian: `apt install fuse3`).
    Mount {
        /// Directory in Maat (`/` for everything the user can see).
        path: String,
        /// Empty local directory to mount on.
        mountpoint: PathBuf,
    },
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
    /// Rename or move.
    Mv {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Show attributes.
    Stat {
        /// Times as milliseconds since the epoch only (for scripts).
        #[arg(long)]
        epoch: bool,
        /// Path.
        path: String,
    },
    /// Change permission bits (octal, e.g. 640).
    /// Show or set your umask: the permission bits the MDS clears from the mode of every
    /// file and directory you create, from any client (077 by default: new files 0600 and
    /// directories 0700, readable by you alone; 022 makes them readable by everyone, as on
    /// most Unix systems). `chmod` is not affected.
    Umask {
        /// New umask in octal (omit to show it).
        mask: Option<String>,
    },
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
    /// Requests, signatures, MACs and cache hit ratios per daemon and for this client.
    Stats {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Jobs: share files with participants through a temporary key (SPEC M10, openg /
    /// openfh) instead of each participant opening them.
    #[command(after_help = "A job, start to end:\n  \
        maat job create sim                          # the lead\n  \
        maat job open sim /lab/in && maat job open sim /lab/out --create\n  \
        maat job export sim --to bob                 # bob must be logged in\n  \
        maat job join sim.to-bob.maatjob             # bob\n  \
        maat job get sim /lab/in in.dat              # bob, no permission of his own needed\n  \
        maat job put sim out.dat /lab/out            # bob\n  \
        maat job renew sim                           # the lead, within each key lifetime\n  \
        maat job end sim                             # the lead: every OSD refuses the key now")]
    Job {
        #[command(subcommand)]
        command: job::JobCommand,
    },
    /// File sets: files you use together, so that one capability can name them all
    /// (SPEC M6 user- and application-defined groups; the MDS uses them when its
    /// grouping includes `defined`). Yours shape your opens; the administrator's shape
    /// everyone's. A set grants nothing: each file is still checked for each user.
    #[command(after_help = "Example:\n  \
        maat fileset define sim /lab/in/mesh /lab/in/params /lab/out/run1\n  \
        maat fileset ls\n  \
        maat fileset rm sim")]
    Fileset {
        #[command(subcommand)]
        command: FilesetCommand,
    },
    /// Range grants on encrypted files (SPEC H6): let users read byte ranges of a file
    /// you own (and decrypt nothing else), withdraw and list grants, and re-encrypt a
    /// file under a new key tree (SPEC H7) so that withdrawn keys open nothing.
    #[command(after_help = "Example:\n  \
        maat keys grant /lab/run.dat --to bob --range 0..1MiB\n  \
        maat keys grant /lab/run.dat --to ana,bob,eve --slices   # rank i reads slice i of 3\n  \
        maat keys list /lab/run.dat\n  \
        maat cat /lab/run.dat --range 0..1MiB                   # bob\n  \
        maat keys revoke /lab/run.dat --from bob\n  \
        maat keys rekey /lab/run.dat                            # old keys now open nothing")]
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Benchmarks against a local cluster started for the run.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// The petascale cost model of paper 001 §4.6 (SPEC M12): MDS time to authorize OPENS
    /// opens with extended, whole-file and per-object (T10-style MAC) capabilities, and OSD
    /// time to check them, with the paper's crypto costs and with this machine's (measured
    /// now: Ed25519 sign and verify, HMAC-SHA256). Defaults are the paper's: a million
    /// opens of 1 GiB files in 1 MiB objects, 10 files per extended capability. A second
    /// table gives the same per second for CLIENTS opening OPEN_RATE files a second among
    /// FILES: MDS cores, checks per OSD, and renewal one by one against batched (M8).
    Model {
        /// open() calls.
        #[arg(long, default_value_t = 1_000_000)]
        opens: u64,
        /// File size, MiB.
        #[arg(long, default_value_t = 1024)]
        file_size_mib: u64,
        /// Object (stripe) size, KiB.
        #[arg(long, default_value_t = 1024)]
        object_size_kib: u64,
        /// Files one extended capability authorizes (grouping factor).
        #[arg(long, default_value_t = 10)]
        group_files: u64,
        /// OSDs.
        #[arg(long, default_value_t = 1000)]
        osds: u64,
        /// Clients, for the per-second table.
        #[arg(long, default_value_t = 10_000)]
        clients: u64,
        /// Distinct files opened within one capability lifetime, for the per-second table.
        #[arg(long, default_value_t = 100_000)]
        files: u64,
        /// open() calls per client per second, for the per-second table.
        #[arg(long, default_value_t = 1.0)]
        open_rate: f64,
        /// Capability lifetime, seconds (the MDS's default is 300).
        #[arg(long, default_value_t = 300.0)]
        lifetime: f64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Nothing;

/// Daemons hold a socket per client and a benchmark client one per OSD per thread: lift
/// the soft limit on open files to the hard one (often 1,024 and 1,048,576) at start.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}

/// Whether `e` is standard output closed under the command.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn main() -> ExitCode {
    // Everything maat writes (keys, databases, objects, sessions, configs) is for this
    // account only; files that are meant to be shared are handed over explicitly.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    raise_open_file_limit();
    let cli = Cli::parse();
    if let Some(level) = cli.key_level {
        let _ = KEY_LEVEL.set(level);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of the output went away (`maat stats | head`): not a failure.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // One line naming the reason.
            let mut text = format!("{e}");
            for cause in e.chain().skip(1) {
                // Errors that already print their cause are not repeated.
                let cause = cause.to_string();
                if !text.contains(&cause) {
                    text.push_str(&format!(": {cause}"));
                }
            }
            eprintln!("maat: {}", show::text(&text.replace('\n', " ")));
            ExitCode::FAILURE
        }
    }
}

fn home_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("MAAT_HOME") {
        return PathBuf::from(h);
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".config/maat"),
        None => PathBuf::from(".maat"),
    }
}

/// `--key-level`, for every client this process makes.
static KEY_LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();

fn client(cluster: &Option<PathBuf>) -> Result<Client> {
    let path = cluster.clone().ok_or_else(|| {
        anyhow!("no cluster file: pass --cluster FILE or set MAAT_CLUSTER (maat up writes DIR/client.toml)")
    })?;
    let file = ClusterFile::load(&path)?;
    let mut c = Client::new(file, Some(Home::new(home_dir())))?;
    if let Some(level) = KEY_LEVEL.get() {
        c.set_key_level(*level);
    }
    Ok(c)
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
fn write_range(
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

fn read_passphrase(from_stdin: bool, prompt: &str) -> Result<Vec<u8>> {
    let text = if from_stdin {
        let mut s = String::new();
        std::io::stdin()
            .read_line(&mut s)
            .context("reading passphrase from standard input")?;
        s.trim_end_matches(['\n', '\r']).to_string()
    } else {
        rpassword::prompt_password(prompt)
            .context("no terminal to ask for the passphrase (use --passphrase-stdin)")?
    };
    if text.is_empty() {
        bail!("empty passphrase");
    }
    Ok(text.into_bytes())
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

/// `ls -l`'s mode column: type, then owner, group and other, with setuid, setgid and
/// sticky shown in the execute places (`s`/`S`, `s`/`S`, `t`/`T`).
fn mode_string(s: &FileStat) -> String {
    let mut out = String::with_capacity(10);
    out.push(if s.is_dir { 'd' } else { '-' });
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

#[derive(Subcommand)]
enum FilesetCommand {
    /// Define (or replace) your file set NAME as the files at PATHS (at most 256).
    Define {
        /// Set name (1 to 64 bytes, no '/').
        name: String,
        /// Files in Maat.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove your file set NAME.
    Rm {
        /// Set name.
        name: String,
    },
    /// List your file sets and the administrator's.
    Ls,
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Up(args) => up::run(args),
        Command::Mds { config } => up::run_mds_daemon(&config),
        Command::Osd { config } => up::run_osd_daemon(&config),
        Command::Kds { config } => up::run_kds_daemon(&config),
        Command::Bench { command } => bench::run(command),
        Command::Job { command } => job::run(&cli.cluster, command),
        Command::Keys { command } => keys::run(&cli.cluster, command),
        Command::Fileset { command } => {
            let c = client(&cli.cluster)?;
            match command {
                FilesetCommand::Define { name, paths } => {
                    c.fileset_define(&name, &paths)?;
                    say!("file set {name}: {} files", paths.len());
                }
                FilesetCommand::Rm { name } => c.fileset_remove(&name)?,
                FilesetCommand::Ls => {
                    let sets = c.fileset_list()?;
                    if sets.is_empty() {
                        say!("no file sets (maat fileset define NAME PATH...)");
                    }
                    for s in sets {
                        let whose = if s.everyone { "everyone" } else { "yours" };
                        say!(
                            "{:<24} {:>5} files  ({whose})",
                            show::name(&s.name),
                            s.files
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Model {
            opens,
            file_size_mib,
            object_size_kib,
            group_files,
            osds,
            clients,
            files,
            open_rate,
            lifetime,
            json,
        } => model::run(
            model::Workload {
                opens: opens as f64,
                file_size: (file_size_mib as f64) * 1024.0 * 1024.0,
                object_size: (object_size_kib as f64) * 1024.0,
                group_files: group_files as f64,
                osds: osds as f64,
            },
            model::Load {
                clients: clients as f64,
                files: files as f64,
                open_rate,
                lifetime_s: lifetime,
            },
            json,
        ),
        Command::Login {
            name,
            passphrase_stdin,
        } => {
            let c = client(&cli.cluster)?;
            let pass = read_passphrase(passphrase_stdin, &format!("passphrase for {name}: "))?;
            c.login(&name, Credential::Passphrase(&pass))?;
            eprintln!("logged in as {name}");
            Ok(())
        }
        Command::Passwd { passphrase_stdin } => {
            let c = client(&cli.cluster)?;
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
        Command::Mount { path, mountpoint } => {
            let c = client(&cli.cluster)?;
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
            maat_fuse::mount(c, &path, &mountpoint, mounted, || {
                stop.load(std::sync::atomic::Ordering::Relaxed)
            })?;
            eprintln!("maat: unmounted {}", mountpoint.display());
            Ok(())
        }
        Command::Logout => {
            let c = client(&cli.cluster)?;
            c.logout()?;
            eprintln!("logged out");
            Ok(())
        }
        Command::Admin { command } => admin::run(&cli.cluster, command),
        Command::Put {
            local,
            path,
            no_encrypt,
            encrypt,
        } => {
            let c = client(&cli.cluster)?;
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
        Command::Get { path, local } => {
            let c = client(&cli.cluster)?;
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
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(&temp).with_context(|| format!("{}", temp.display()))?,
            );
            let result = c.get(&path, &mut f, &mut |n| {
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
        Command::Cat { path, range } => {
            let mut c = client(&cli.cluster)?;
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
        Command::Ls { long, epoch, path } => {
            let c = client(&cli.cluster)?;
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
        Command::Mkdir {
            parents,
            partition,
            path,
        } => Ok(client(&cli.cluster)?.mkdir_in(&path, 0o755, parents, partition.as_deref())?),
        Command::Rm { path } => Ok(client(&cli.cluster)?.unlink(&path)?),
        Command::Rmdir { path } => Ok(client(&cli.cluster)?.rmdir(&path)?),
        Command::Mv { from, to } => Ok(client(&cli.cluster)?.rename(&from, &to)?),
        Command::Stat { epoch, path } => {
            let mut c = client(&cli.cluster)?;
            let s = c.stat(&path)?;
            let tree = if s.encrypted {
                keys::tree_summary(&mut c, &path).map_or(String::new(), |t| format!("; {t}"))
            } else {
                String::new()
            };
            say!(
                "path: {}\nid: {}\ntype: {}\nmode: {:04o} ({})\nowner: {}\ngroup: {}\nsize: {}\nmodified: {}\npartition: {}\nsecurity: {}{}\nencrypted: {}{}",
                show::name(&path),
                s.id,
                if s.is_dir { "directory" } else { "file" },
                s.mode,
                mode_string(&s),
                show::name(&s.owner),
                show::name(&s.group),
                s.size,
                if epoch {
                    s.mtime.to_string()
                } else {
                    format!("{} UTC ({} ms since the epoch)", utc(s.mtime), s.mtime)
                },
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
        Command::Chmod { mode, path } => {
            let m = u16::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    anyhow!("invalid mode {mode:?}: give octal bits like 640, or 1777 for a sticky directory")
                })?;
            Ok(client(&cli.cluster)?.chmod(&path, m)?)
        }
        Command::Umask { mask } => {
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
            let now = client(&cli.cluster)?.umask(set)?;
            say!("{now:03o}");
            Ok(())
        }
        Command::Chown { owner, path } => {
            let (user, group) = match owner.split_once(':') {
                Some((u, g)) => (u, Some(g)),
                None => (owner.as_str(), None),
            };
            let user = (!user.is_empty()).then_some(user);
            let group = group.filter(|g| !g.is_empty());
            if user.is_none() && group.is_none() {
                bail!("chown needs USER, USER:GROUP or :GROUP");
            }
            Ok(client(&cli.cluster)?.chown(&path, user, group)?)
        }
        Command::Stats { json } => stats::run(&cli.cluster, json),
    }
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
