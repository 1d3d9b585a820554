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
mod files;
mod fileset;
mod health;
mod job;
mod keys;
mod model;
mod model_meta;
mod scrub_status;
mod scrubber;
mod session;
mod show;
mod stats;
mod up;
mod up_instances;
mod up_meta;
mod up_restart;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use maat_client::{Client, ClusterFile, Home};
use std::path::PathBuf;
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
    #[command(flatten)]
    Session(session::SessionCommand),
    #[command(flatten)]
    Files(files::FileCommand),
    /// The cluster at a glance (issue 41): OSDs up and down as the MDS knows it (an OSD
    /// silent for 5 s is down), hosts, each partition's copies, where the MDS keeps its
    /// metadata (redb or PostgreSQL), and what is wrong, as HEALTH_OK or HEALTH_WARN with
    /// one line per warning. `maat admin osd ls` lists the OSDs.
    Health {
        /// One JSON object.
        #[arg(long)]
        json: bool,
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
        command: fileset::FilesetCommand,
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
        /// The metadata table (issue 42): MDS instances over one PostgreSQL database.
        #[command(flatten)]
        meta: model_meta::MetaArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Nothing;

/// Whether `e` is standard output closed under the command.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn main() -> ExitCode {
    // Everything maat writes (keys, databases, objects, sessions, configs) is for this
    // account only; files that are meant to be shared are handed over explicitly.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    // Daemons hold a socket per client and a benchmark client one per OSD per thread.
    maat_server::open_files_limit();
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
    let mut c = Client::new(cluster_file(cluster)?, Some(Home::new(home_dir())))?;
    if let Some(level) = KEY_LEVEL.get() {
        c.set_key_level(*level);
    }
    Ok(c)
}

/// The cluster file `--cluster`/`MAAT_CLUSTER` names.
fn cluster_file(cluster: &Option<PathBuf>) -> Result<ClusterFile> {
    let path = cluster.clone().ok_or_else(|| {
        anyhow!("no cluster file: pass --cluster FILE or set MAAT_CLUSTER (maat up writes DIR/client.toml)")
    })?;
    Ok(ClusterFile::load(&path)?)
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

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Up(args) => up::run(args),
        Command::Mds { config } => up::run_mds_daemon(&config),
        Command::Osd { config } => up::run_osd_daemon(&config),
        Command::Kds { config } => up::run_kds_daemon(&config),
        Command::Bench { command } => bench::run(command),
        Command::Job { command } => job::run(&cli.cluster, command),
        Command::Keys { command } => keys::run(&cli.cluster, command),
        Command::Fileset { command } => fileset::run(&cli.cluster, command),
        Command::Session(command) => session::run(&cli.cluster, command),
        Command::Files(command) => files::run(&cli.cluster, command),
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
            meta,
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
            &meta,
            json,
        ),
        Command::Admin { command } => admin::run(&cli.cluster, command),
        Command::Stats { json } => stats::run(&cli.cluster, json),
        Command::Health { json } => health::health(&cli.cluster, json),
    }
}
