//! `maat up` (a supervised local cluster) and the single-daemon commands.
//!
//! `maat up` writes one TOML config per daemon on first start, then runs each daemon as a
//! child process of the same binary (`maat mds --config …`, `maat osd --config …`), waits
//! for each to report it serves, writes `DIR/client.toml`, and prints `ready`. A daemon
//! that dies is restarted. Ctrl-C / SIGTERM closes the children's standard input, which is
//! their signal to shut down cleanly.

use crate::up_restart::Restarts;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use maat_server::{KdsFileConfig, MdsFileConfig, OsdFileConfig, Shutdown};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `maat up`.
#[derive(Args, Clone)]
pub struct UpArgs {
    /// Data directory (created on first start; reused after).
    #[arg(long, default_value = "./maat-data")]
    pub data: PathBuf,
    /// Number of OSDs (first start only).
    #[arg(long, default_value_t = 4)]
    pub osds: u32,
    /// MDS address; OSDs take the following ports. Port 0 picks free ports.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: String,
    /// Capability lifetime in seconds for a new cluster (revocation is expiry: shorter is
    /// safer, longer means fewer signatures).
    #[arg(long, default_value_t = maat_proto::limits::CAPABILITY_LIFETIME_MILLIS_DEFAULT / 1000)]
    pub capability_lifetime: u64,
    /// Let daemons accept NOSEC requests (benchmarks only; anyone can act as anyone).
    #[arg(long, hide = true)]
    pub danger_allow_insecure: bool,
    /// Protection method of the `default` partition of a new cluster (SPEC T1): CAPKEY,
    /// CMDRSP, ALLDATA or CONFIDENTIAL (NOSEC only with the danger flag). More partitions:
    /// `maat admin partition create`.
    #[arg(long, default_value = "ALLDATA", value_parser = parse_protection)]
    pub security: maat_proto::protection::Protection,
    /// Grouping strategies of a new cluster (SPEC M6): `none`, `all`, or a list of
    /// `unix` (one capability per file and mode for every user its permissions allow),
    /// `directory` (also the files beside it), `batch` (flash crowds of one file, and
    /// bursts of one user's opens, share one capability; adds up to 5 ms to their
    /// opens), `onthefly` (opens arriving while one is signed share the next),
    /// `predict` (also the files a user is predicted to open next: Recent Popularity,
    /// `predict_j` of the last `predict_k` successors, 4 and 6 by default in the MDS
    /// config, and the files clients say they open next) and `defined` (also the other
    /// files of the user's and the administrator's file sets, `maat fileset`). Change it
    /// later with `maat admin grouping`.
    #[arg(long, default_value = "unix,onthefly", value_parser = parse_grouping)]
    pub grouping: String,
    /// Number of key distribution servers (SPEC H4; first start only). They share one
    /// key pair and keep no state; clients spread key requests over them and fail over.
    /// 0: no KDS, so no encrypted files.
    #[arg(long, default_value_t = 1)]
    pub kds: u32,
    /// Do not encrypt new files by default (first start only; `maat put --encrypt` still
    /// encrypts one when a KDS runs).
    #[arg(long)]
    pub no_encrypt: bool,
    /// Serve no Prometheus metrics (by default a new cluster's daemons each serve
    /// `/metrics` on a port of `--metrics-host` chosen at the first start and kept after,
    /// printed when the cluster is ready).
    #[arg(long)]
    pub no_metrics: bool,
    /// The umask new users start with, in octal (first start only): the permission bits
    /// the MDS clears from the mode of everything they create. 077, the default, keeps
    /// what each user creates to that user (files 0600, directories 0700); 022 makes it
    /// readable by everyone, as on most Unix systems. Homes are made 0755 under it (0700
    /// with 077). Each user changes their own with `maat umask`.
    #[arg(long, default_value = "077", value_parser = parse_umask)]
    pub umask: String,
    /// Address the daemons' `/metrics` endpoints bind to (first start only). They are
    /// unauthenticated, so loopback by default whatever `--listen` says; name an address
    /// your Prometheus reaches, and only it, to scrape from another host.
    #[arg(long, default_value = "127.0.0.1")]
    pub metrics_host: String,
    /// Write every namespace change (create, size, mkdir, rename, unlink) alone, with an
    /// fsync of its own, under the MDS's write lock (first start only; `group_commit` in
    /// the MDS config). By default the changes of concurrent requests are written
    /// together (group commit); either way no answer leaves the MDS before what it
    /// reports is on disk.
    #[arg(long)]
    pub no_group_commit: bool,
    /// Copies of each object the `default` partition keeps, each on a different OSD
    /// (first start only; issue 41): fewer are kept while the cluster has fewer OSDs,
    /// and copies go to different hosts while there are enough. A write is acknowledged
    /// once every copy is on disk; a read fails over to another copy. Other partitions
    /// choose theirs: `maat admin partition create NAME --replicas N`.
    #[arg(long, default_value_t = maat_proto::limits::REPLICAS_DEFAULT,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(maat_proto::limits::REPLICAS_MAX)))]
    pub replicas: u8,
    /// Seconds between the scrubber's repairing scrubs of every copy of every object
    /// (issue 41; 0: none but those below). The scrubber also runs after the cluster
    /// starts, when an OSD was restarted, and when the MDS shows an OSD up again, and
    /// puts back missing and damaged copies from good ones (`maat admin scrub --repair`).
    #[arg(long, default_value_t = 86_400)]
    pub scrub_every: u64,
    /// At most this many MiB/s of copies the scrubber writes back (0: no limit), so that
    /// clients keep their share while a lost OSD's copies are put back (on this kind of
    /// 2-core machine, 64 kept client puts at 0.72x their rate; see PERFORMANCE.md).
    #[arg(long, value_name = "MIB_PER_S", default_value_t = 0)]
    pub scrub_rate: u64,
    /// Run no scrubber: lost copies stay lost until `maat admin scrub --repair`.
    #[arg(long)]
    pub no_scrubber: bool,
    /// Where the MDS keeps its metadata (first start only; issue 42): `redb`, one file
    /// in DATA/mds, or `postgres`, a PostgreSQL server of the cluster's own in
    /// DATA/postgres, run from the installed binaries (apt-get install postgresql) on a
    /// unix socket only its account can reach, started and stopped with the cluster.
    /// Started by root, the server runs as the `postgres` account, which must be able to
    /// pass through the directories above DATA.
    #[arg(long, value_enum, default_value_t = crate::up_meta::Meta::Redb)]
    pub meta: crate::up_meta::Meta,
    /// An existing PostgreSQL database for the metadata instead (first start only), as a
    /// `postgresql://` URL or libpq `key=value` pairs. With a password in it, the MDS
    /// config (DATA/mds/mds.toml) is kept readable by its owner only.
    #[arg(long, value_name = "URL")]
    pub meta_url: Option<String>,
    /// MDS instances to run over the metadata database (first start only; issue 42):
    /// more than one needs `--meta postgres` or `--meta-url`. Each serves every request
    /// (changes run one at a time across them, under the database's lock); the cluster
    /// file lists them all, and clients move to another when theirs stops answering.
    #[arg(long, default_value_t = 1)]
    pub mds: u32,
}

fn parse_umask(text: &str) -> Result<String, String> {
    u16::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .map(|m| format!("{m:03o}"))
        .ok_or_else(|| format!("{text:?}: expected octal bits like 077 or 022"))
}

fn parse_grouping(text: &str) -> Result<String, String> {
    maat_mds::grouping::Strategies::parse(text).map(|s| s.names())
}

/// A protection method by name, for command-line options.
pub fn parse_protection(name: &str) -> Result<maat_proto::protection::Protection, String> {
    maat_proto::protection::Protection::parse(name)
        .ok_or_else(|| format!("{name:?}: expected NOSEC, CAPKEY, CMDRSP, ALLDATA or CONFIDENTIAL"))
}

const READY_PREFIX: &str = "maat-daemon-ready ";

/// A free port, held (the listener is kept in `held`) until the daemon is given it, so
/// that the ports of one cluster are distinct and nothing takes one in between.
///
/// Chosen below the kernel's ephemeral range when it can be: the cluster keeps its ports
/// across restarts, and a port in that range, free while the cluster is down, can be
/// taken by any outgoing connection or `bind(":0")` on the host (the kernel hands those
/// out from the range), after which the daemon cannot start again.
fn free_port(host: &str, held: &mut Vec<TcpListener>) -> Result<u16> {
    use maat_crypto::OsRng;
    use rand_core::RngCore;
    let low = ephemeral_ports_start();
    let floor = (low / 2).max(1024);
    if low > floor {
        for _ in 0..64 {
            let port = floor + (OsRng.next_u32() % u32::from(low - floor)) as u16;
            if let Ok(l) = TcpListener::bind((host, port)) {
                held.push(l);
                return Ok(port);
            }
        }
    }
    let l = TcpListener::bind((host, 0)).with_context(|| format!("bind {host}:0"))?;
    let port = l.local_addr()?.port();
    held.push(l);
    Ok(port)
}

/// The lowest port of the kernel's range for `bind(":0")` and outgoing connections
/// (Linux's default when it cannot be read).
fn ephemeral_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

fn split_host_port(listen: &str) -> Result<(String, u16)> {
    let (host, port) = listen
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("--listen wants HOST:PORT, got {listen:?}"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow!("--listen: bad port in {listen:?}"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

fn write_new(path: &Path, text: &str) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

/// Writes the configs for a new cluster under `data`, and answers with the listeners
/// holding the ports it chose, which the daemons are then given (see [`Daemon::start`]).
fn init(args: &UpArgs, data: &Path) -> Result<Vec<TcpListener>> {
    // Checked before anything is written, so that a refused start leaves no half-made
    // cluster behind for the next one to resume.
    if args.security == maat_proto::protection::Protection::NoSec && !args.danger_allow_insecure {
        bail!("--security NOSEC needs --danger-allow-insecure (anyone could then act as anyone)");
    }
    if args.osds == 0 || args.osds > 64 {
        bail!("--osds must be between 1 and 64");
    }
    if args.capability_lifetime == 0 {
        bail!("--capability-lifetime must be at least 1 second");
    }
    if args.kds > 16 {
        bail!("--kds must be between 0 and 16");
    }
    crate::up_instances::check(
        args.mds,
        args.meta == crate::up_meta::Meta::Postgres || args.meta_url.is_some(),
    )?;
    let (host, port) = split_host_port(&args.listen)?;
    if port != 0 {
        let last = u32::from(port) + args.osds + args.kds + (args.mds - 1);
        if last > 65_535 {
            bail!("--listen {}: OSD ports would run past 65535", args.listen);
        }
        // Nothing is written before every port is known to be free.
        for p in port..=last as u16 {
            TcpListener::bind((host.as_str(), p))
                .with_context(|| format!("port {host}:{p} is taken (choose another --listen)"))?;
        }
    }
    let mut held = Vec::new();
    // Each daemon's metrics port is chosen now and kept in its config, so that a static
    // Prometheus configuration stays right across restarts; the listeners that reserve
    // them are dropped when `init` returns (each daemon binds its own).
    let mut metrics_held = Vec::new();
    let mut metrics = || -> Result<Option<String>> {
        if args.no_metrics {
            return Ok(None);
        }
        let host = args.metrics_host.trim_matches(['[', ']']);
        let port = free_port(host, &mut metrics_held)?;
        Ok(Some(if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }))
    };
    let mds_port = if port == 0 {
        free_port(&host, &mut held)?
    } else {
        port
    };
    let mds_address = format!("{host}:{mds_port}");
    // Issue 42: the other instances' addresses, which OSDs and KDS instances also check
    // in at when the first does not answer.
    let mut mds_others = Vec::new();
    for i in 1..args.mds {
        let p = if port == 0 {
            free_port(&host, &mut held)?
        } else {
            port.checked_add((args.osds + args.kds + i) as u16)
                .ok_or_else(|| anyhow!("MDS ports run past 65535"))?
        };
        mds_others.push(format!("{host}:{p}"));
    }
    let mds = MdsFileConfig {
        listen: mds_address.clone(),
        data_dir: data.join("mds"),
        // Apart from the database directory, so that copying or backing that up does
        // not carry the MDS's secrets.
        key_dir: Some(data.join("mds-keys")),
        admin_key_file: data.join("admin/key"),
        join_key_file: data.join("mds/join.key"),
        public_keys_file: Some(data.join("mds/public-keys.toml")),
        ticket_lifetime_secs: maat_mds::TICKET_LIFETIME_MILLIS_DEFAULT / 1000,
        capability_lifetime_secs: args.capability_lifetime,
        danger_allow_insecure: args.danger_allow_insecure,
        default_security: Some(args.security.name().into()),
        grouping: Some(args.grouping.clone()),
        batch_threshold: None,
        batch_detect_ms: None,
        batch_gather_ms: None,
        batch_hot_ms: None,
        predict_j: None,
        predict_k: None,
        metrics: metrics()?,
        kds: Vec::new(),
        kds_public_keys_file: None,
        encrypt_new_files: !args.no_encrypt,
        group_commit: !args.no_group_commit,
        default_umask: Some(args.umask.clone()),
        default_replicas: Some(args.replicas),
        meta_url: crate::up_meta::new_cluster_url(args.meta, args.meta_url.as_deref(), data)?,
    };
    let mut mds = mds;
    if args.kds > 0 {
        // One key pair for every instance (lockboxes are sealed to it); its public half
        // goes to the MDS, which hands it to clients in the cluster map.
        let key_dir = data.join("kds-keys");
        maat_server::private::create_private_dir(&key_dir)?;
        let seed = maat_server::key_file_or_create(&key_dir.join("kds.key"))?;
        let public = key_dir.join("public-keys.toml");
        std::fs::write(&public, maat_server::kds_public_keys_text(&seed)?)?;
        mds.kds_public_keys_file = Some(public);
        for i in 1..=args.kds {
            let kds_port = if port == 0 {
                free_port(&host, &mut held)?
            } else {
                port.checked_add((args.osds + i) as u16)
                    .ok_or_else(|| anyhow!("KDS ports run past 65535"))?
            };
            let listen = format!("{host}:{kds_port}");
            mds.kds.push(listen.clone());
            let kds = KdsFileConfig {
                listen,
                key_file: key_dir.join("kds.key"),
                public_keys_file: None,
                mds_public_keys_file: data.join("mds/public-keys.toml"),
                metrics: metrics()?,
                run_dir: data.join(format!("kds-{i}")),
                mds: Some(mds_address.clone()),
                mds_others: mds_others.clone(),
            };
            write_new(
                &data.join(format!("kds-{i}/kds.toml")),
                &toml::to_string(&kds)?,
            )?;
        }
    }
    for i in 1..=args.osds {
        let osd_port = if port == 0 {
            free_port(&host, &mut held)?
        } else {
            port.checked_add(i as u16)
                .ok_or_else(|| anyhow!("OSD ports run past 65535"))?
        };
        let osd = OsdFileConfig {
            id: u64::from(i),
            listen: format!("{host}:{osd_port}"),
            advertise: None,
            data_dir: data.join(format!("osd-{i}")),
            mds: mds_address.clone(),
            mds_others: mds_others.clone(),
            join_key_file: data.join("mds/join.key"),
            weight: 1,
            danger_allow_insecure: args.danger_allow_insecure,
            metrics: metrics()?,
        };
        write_new(
            &data.join(format!("osd-{i}/osd.toml")),
            &toml::to_string(&osd)?,
        )?;
    }
    crate::up_instances::write_configs(data, &mds, &mds_others, &mut metrics)?;
    let home = maat_client::Home::new(data.join("admin"));
    home.write_identity("admin", Path::new("key"))?;
    // Last: its presence marks a complete cluster directory.
    write_new(&data.join("mds/mds.toml"), &toml::to_string(&mds)?)?;
    Ok(held)
}

/// The socket a daemon is to serve `listen` on: one `init` holds for it, or a new one.
fn listener_for(listen: &str, held: &mut Vec<TcpListener>) -> Result<TcpListener> {
    let (_, port) = split_host_port(listen)?;
    let mine = held
        .iter()
        .position(|l| l.local_addr().is_ok_and(|a| a.port() == port));
    match mine {
        Some(i) => Ok(held.swap_remove(i)),
        None => TcpListener::bind(listen)
            .with_context(|| format!("listen on {listen} (is another `maat up` using this port?)")),
    }
}

struct Daemon {
    name: String,
    config: PathBuf,
    /// The address the daemon serves on, from its config.
    listen: String,
    kind: &'static str,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// Its starts and quick exits, and when it is due to start again after an exit.
    restarts: Restarts,
}

impl Daemon {
    /// A daemon not started yet.
    fn new(name: String, listen: String, config: PathBuf, kind: &'static str) -> Self {
        Self {
            name,
            config,
            listen,
            kind,
            child: None,
            stdin: None,
            restarts: Restarts::new(Instant::now()),
        }
    }

    /// Starts the daemon and waits for it to serve. The supervisor binds the daemon's
    /// address and passes the socket down (`LISTEN_FDS`, as systemd does), so a port
    /// chosen by `init` is never free for another process to take in between.
    fn start(&mut self, exe: &Path, data: &Path, held: &mut Vec<TcpListener>) -> Result<String> {
        let listener = listener_for(&self.listen, held)?;
        // Inherited by this child only: daemons start one at a time, and the
        // supervisor's copy closes as soon as the child runs.
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty())
            .with_context(|| format!("pass the socket for {}", self.listen))?;
        let mut child = Command::new(exe)
            .arg(self.kind)
            .arg("--config")
            .arg(&self.config)
            .env("MAAT_SUPERVISED", "1")
            .env("LISTEN_FDS", "1")
            .env("LISTEN_FDS_FIRST_FD", listener.as_raw_fd().to_string())
            .env_remove("LISTEN_PID")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start {}", self.name))?;
        drop(listener);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("{}: no stdout", self.name))?;
        self.stdin = child.stdin.take();
        let pid = child.id();
        self.child = Some(child);
        self.restarts.started(Instant::now());
        // Written beside and renamed, so a reader never sees an empty pid file.
        let pid_file = data.join(format!("{}.pid", self.name.replace(' ', "-")));
        let temp = data.join(format!(".{}.pid.tmp", self.name.replace(' ', "-")));
        std::fs::write(&temp, format!("{pid}\n"))?;
        std::fs::rename(&temp, &pid_file)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let name = self.name.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix(READY_PREFIX) {
                    if !sent {
                        let _ = tx.send(addr.to_string());
                        sent = true;
                    }
                } else {
                    eprintln!("{name}: {line}");
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| {
                anyhow!(
                    "{} did not start (see its messages above; is another `maat up` using this data directory or port?)",
                    self.name
                )
            })
    }

    /// Whether to start the daemon again now: it exited (noticed here, its restart
    /// scheduled, said once) and its delay ([`crate::up_restart`]) is over.
    fn restart_due(&mut self) -> bool {
        if self.restarts.due().is_none() && self.exited() {
            self.schedule_restart();
        }
        self.restarts.due().is_some_and(|at| Instant::now() >= at)
    }

    /// The daemon exited or did not start: schedules its next start, saying when.
    fn schedule_restart(&mut self) {
        let delay = self.restarts.exited(Instant::now());
        if delay.is_zero() {
            eprintln!("maat: {} exited unexpectedly; restarting", self.name);
        } else {
            eprintln!(
                "maat: {} exited unexpectedly, {} times in a row within {} s of starting; \
                 restarting in {:.1} s",
                self.name,
                self.restarts.quick_exits(),
                crate::up_restart::RAN_LONG_ENOUGH.as_secs(),
                delay.as_secs_f64()
            );
        }
    }

    fn exited(&mut self) -> bool {
        matches!(
            self.child.as_mut().map(|c| c.try_wait()),
            Some(Ok(Some(_))) | Some(Err(_))
        )
    }

    fn stop(&mut self) {
        // Closing stdin asks the daemon to shut down cleanly.
        self.stdin = None;
    }

    fn wait(&mut self, deadline: Instant) {
        if let Some(child) = self.child.as_mut() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A cluster made before issue 40 named `HOST:0` for each daemon's metrics, so the port
/// changed at every start (breaking a static Prometheus configuration), and `--listen
/// 0.0.0.0:0` served the unauthenticated metrics on every address: each such config is
/// given a port of its own now, on loopback where it named every address, once.
fn pin_metrics_addresses(data: &Path) -> Result<()> {
    let mut configs = vec![data.join("mds/mds.toml")];
    for e in std::fs::read_dir(data)?.flatten() {
        for name in ["osd.toml", "kds.toml"] {
            let p = e.path().join(name);
            if p.exists() {
                configs.push(p);
            }
        }
    }
    configs.sort();
    let mut reserved = Vec::new();
    for path in configs {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let mut table: toml::Table =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let Some(toml::Value::String(addr)) = table.get("metrics") else {
            continue;
        };
        let (host, port) = split_host_port(addr)?;
        let every = matches!(host.as_str(), "0.0.0.0" | "::");
        if port != 0 && !every {
            continue;
        }
        let host = if every { "127.0.0.1".to_string() } else { host };
        let port = if port == 0 {
            free_port(&host, &mut reserved)?
        } else {
            port
        };
        let pinned = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        eprintln!(
            "note: {} now serves its metrics at {pinned} at every start (was {addr})",
            path.display()
        );
        table.insert("metrics".into(), toml::Value::String(pinned));
        maat_server::private::replace_file(&path, toml::to_string(&table)?.as_bytes())?;
    }
    Ok(())
}

/// `maat up`.
pub fn run(args: UpArgs) -> Result<()> {
    let data = args.data.clone();
    let first = !data.join("mds/mds.toml").exists();
    let mut held = Vec::new();
    if first {
        std::fs::create_dir_all(&data).with_context(|| format!("create {}", data.display()))?;
        held = init(&args, &data)?;
    }
    let data = data
        .canonicalize()
        .with_context(|| format!("{}", data.display()))?;
    if !first {
        pin_metrics_addresses(&data)?;
    }
    let exe = std::env::current_exe().context("locating the maat binary")?;
    let mut osd_configs: Vec<PathBuf> = std::fs::read_dir(&data)?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("osd.toml"))
        .filter(|p| p.exists())
        .collect();
    osd_configs.sort();
    if !first && osd_configs.len() != args.osds as usize && args.osds != 4 {
        eprintln!(
            "note: {} already holds {} OSDs; --osds applies to a new data directory only",
            data.display(),
            osd_configs.len()
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let mds_listen = MdsFileConfig::load(&data.join("mds/mds.toml"))?.listen;
    let mut daemons = vec![Daemon::new(
        "mds".into(),
        mds_listen.clone(),
        data.join("mds/mds.toml"),
        "mds",
    )];
    for c in crate::up_instances::configs(&data)? {
        let name = c
            .parent()
            .and_then(|d| d.file_name())
            .map_or_else(|| "mds-n".into(), |n| n.to_string_lossy().into_owned());
        let listen = MdsFileConfig::load(&c)?.listen;
        daemons.push(Daemon::new(name, listen, c, "mds"));
    }
    let mut kds_configs: Vec<PathBuf> = std::fs::read_dir(&data)?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("kds.toml"))
        .filter(|p| p.exists())
        .collect();
    kds_configs.sort();
    for c in &kds_configs {
        let name = c
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "kds".into());
        let mut config = KdsFileConfig::load(c)?;
        if config.mds.is_none() {
            // A KDS config from before KDS instances learned revocations (SPEC M9).
            config.mds = Some(mds_listen.clone());
            maat_server::private::replace_file(c, toml::to_string(&config)?.as_bytes())?;
            eprintln!(
                "note: {} now names the MDS, so that the KDS learns revocations",
                c.display()
            );
        }
        daemons.push(Daemon::new(name, config.listen, c.clone(), "kds"));
    }
    for (i, c) in osd_configs.iter().enumerate() {
        let cfg = OsdFileConfig::load(c)?;
        let _ = i;
        daemons.push(Daemon::new(
            format!("osd-{}", cfg.id),
            cfg.listen.clone(),
            c.clone(),
            "osd",
        ));
    }
    let started = Instant::now();
    let mut meta_server = crate::up_meta::start_own_server(&data)?;
    let mut mds_addresses = Vec::new();
    let mut osd_addresses = Vec::new();
    for d in daemons.iter_mut() {
        let addr = d.start(&exe, &data, &mut held)?;
        match d.kind {
            "mds" => mds_addresses.push(addr),
            "osd" => osd_addresses.push(addr),
            _ => {}
        }
    }
    write_client_file(&data, &mds_addresses)?;
    wait_for_osds(&data, &osd_addresses)?;
    let mds_address = mds_addresses.join(", ");
    say!(
        "maat: ready in {:.2}s: MDS at {mds_address}, {} OSDs, {} KDS, data in {}",
        started.elapsed().as_secs_f64(),
        osd_addresses.len(),
        kds_configs.len(),
        data.display()
    );
    let endpoints: Vec<String> = daemons
        .iter()
        .filter_map(|d| {
            let dir = if d.name == "mds" {
                data.join("mds")
            } else {
                data.join(&d.name)
            };
            // (KDS instances write theirs in their run directory, `kds-N`.)
            std::fs::read_to_string(dir.join("metrics.addr"))
                .ok()
                .map(|a| format!("{} http://{}/metrics", d.name, a.trim()))
        })
        .collect();
    if !endpoints.is_empty() {
        say!("maat: Prometheus metrics: {}", endpoints.join(", "));
    }
    let maat = exe.display();
    say!(
        "maat: in another terminal (Ctrl-C here stops the cluster):\n  export MAAT_CLUSTER={0}/client.toml MAAT_HOME={0}/admin\n  {maat} put README.md /readme && {maat} cat /readme\n  {maat} ls -l / && {maat} stats\n  {maat} --help",
        data.display()
    );
    let wanted = crate::scrubber::Wanted::default();
    if !args.no_scrubber {
        let every = (args.scrub_every > 0).then(|| Duration::from_secs(args.scrub_every));
        let rate = args.scrub_rate.saturating_mul(1 << 20);
        crate::scrubber::spawn(&data, every, rate, wanted.clone(), stop.clone());
    }
    // Supervise: restart daemons that die; stop on a signal.
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if let (Some(m), false) = (&mut meta_server, stop.load(Ordering::SeqCst)) {
            m.keep_running();
        }
        for d in daemons.iter_mut() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if d.restart_due() {
                if let Err(e) = d.start(&exe, &data, &mut Vec::new()) {
                    eprintln!("maat: restarting {} failed: {e}", d.name);
                    // (One still running but not ready is left be, as before; one that
                    // exited waits its turn.)
                    if d.exited() {
                        d.schedule_restart();
                    }
                } else if d.kind == "osd" {
                    wanted.ask(format!("{} was restarted", d.name));
                }
            }
        }
    }
    eprintln!("maat: shutting down");
    // OSDs first, then the MDS.
    for d in daemons.iter_mut().rev() {
        d.stop();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for d in daemons.iter_mut().rev() {
        d.wait(deadline);
    }
    // The metadata database last, once the MDS is gone.
    if let Some(m) = meta_server {
        m.stop();
    }
    eprintln!("maat: stopped");
    Ok(())
}

/// The cluster file: the MDS instances at the addresses they serve on (the first is
/// `mds`), and the MDS's public keys.
fn write_client_file(data: &Path, mds_addresses: &[String]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Keys {
        mds_verifying_key: String,
        mds_sealing_key: String,
        #[serde(default)]
        mds_opaque_key: Option<String>,
    }
    let keys: Keys = toml::from_str(&std::fs::read_to_string(data.join("mds/public-keys.toml"))?)?;
    let file = maat_client::ClusterFile {
        mds: mds_addresses.first().cloned().unwrap_or_default(),
        mds_verifying_key: keys.mds_verifying_key,
        mds_sealing_key: keys.mds_sealing_key,
        mds_opaque_key: keys.mds_opaque_key,
        mds_others: mds_addresses.iter().skip(1).cloned().collect(),
    };
    std::fs::write(data.join("client.toml"), toml::to_string(&file)?)?;
    Ok(())
}

/// Waits until the MDS's map lists every OSD at the address it now serves on (after a
/// restart the map still holds the previous addresses until each OSD registers again).
fn wait_for_osds(data: &Path, addresses: &[String]) -> Result<()> {
    let expected = addresses.len();
    let file = maat_client::ClusterFile::load(&data.join("client.toml"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    while Instant::now() < deadline {
        let c = maat_client::Client::new(
            file.clone(),
            Some(maat_client::Home::new(data.join("admin"))),
        )?;
        match c.cluster_map() {
            Ok(m) => {
                let current = addresses
                    .iter()
                    .filter(|a| m.osds.iter().any(|o| &o.address == *a))
                    .count();
                if current == expected {
                    return Ok(());
                }
                last = format!("{current} of {expected} OSDs registered at their addresses");
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("cluster not ready: {last}")
}

fn install_shutdown(shutdown: &Shutdown) -> Result<()> {
    let s = shutdown.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            s.trigger();
        }
    });
    if std::env::var_os("MAAT_SUPERVISED").is_some() {
        // Under `maat up`: standard input closing (the supervisor stopping or dying)
        // means shut down.
        let s = shutdown.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            s.trigger();
        });
    }
    Ok(())
}

fn announce(kind: &str, addr: &str) {
    use std::io::Write;
    eprintln!("maat {kind}: serving on {addr}");
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{READY_PREFIX}{addr}");
    let _ = out.flush();
}

/// Installs the daemon's log writer (`MAAT_LOG`), saying so when the filter given was
/// not understood.
fn logging(daemon: &str) {
    if let Err(problem) = maat_server::init_logging(daemon) {
        eprintln!("{daemon}: {problem}");
    }
}

/// `maat mds --config FILE`.
pub fn run_mds_daemon(config: &Path) -> Result<()> {
    logging("mds");
    maat_server::adopt_handed_down_listener()?;
    let c = MdsFileConfig::load(config)?;
    let shutdown = Shutdown::new();
    install_shutdown(&shutdown)?;
    maat_server::abort_on_panic();
    maat_server::run_mds(&c, &shutdown, |addr| announce("mds", addr))?;
    Ok(())
}

/// `maat kds --config FILE`.
pub fn run_kds_daemon(config: &Path) -> Result<()> {
    logging("kds");
    maat_server::adopt_handed_down_listener()?;
    let c = KdsFileConfig::load(config)?;
    let shutdown = Shutdown::new();
    install_shutdown(&shutdown)?;
    maat_server::abort_on_panic();
    maat_server::run_kds(&c, &shutdown, |addr| announce("kds", addr))?;
    Ok(())
}

/// `maat osd --config FILE`.
pub fn run_osd_daemon(config: &Path) -> Result<()> {
    maat_server::adopt_handed_down_listener()?;
    let c = OsdFileConfig::load(config)?;
    let kind = format!("osd {}", c.id);
    logging(&kind);
    let shutdown = Shutdown::new();
    install_shutdown(&shutdown)?;
    maat_server::abort_on_panic();
    maat_server::run_osd(&c, &shutdown, |addr| announce(&kind, addr))?;
    Ok(())
}
