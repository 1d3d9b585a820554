//! `maat bench`: E1 (paper 000 Table 1) and a `rados bench`-shaped object benchmark, each
//! against a local cluster started for the run with NOSEC allowed, secure and NOSEC
//! measured side by side in the same run.

mod login;

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use maat_client::{Client, ClusterFile, Credential, Home, Opened};
use maat_proto::msg::{Access, DaemonStats, ADMIN_USER_ID};
use maat_proto::protection::Protection;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// SPEC T6: a flood of forged login first messages against the MDS, what each costs
    /// it next to a real one, and how long a real login takes during the flood.
    LoginFlood {
        /// Forged (and real) first messages per measurement.
        #[arg(long, default_value_t = 20_000)]
        messages: u32,
        /// Threads sending the flood during the timed real login.
        #[arg(long, default_value_t = 4)]
        flooders: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E1: open / 128 KiB write / 128 KiB read under NOSEC, capability generated and
    /// capability cached, plus sequential put/get throughput secure vs NOSEC.
    Ops {
        /// Operations per measurement.
        #[arg(long, default_value_t = 400)]
        iterations: u32,
        /// Size of the sequential-throughput file in MiB.
        #[arg(long, default_value_t = 32)]
        seq_mib: u64,
        /// Protection methods for the sequential throughput (SPEC T1), each in a partition
        /// of its own; NOSEC and ALLDATA (`secure`, the cluster default) always run.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "NOSEC,CAPKEY,CMDRSP,ALLDATA,CONFIDENTIAL",
            value_parser = crate::up::parse_protection
        )]
        security: Vec<Protection>,
        /// Cluster data directory (default: a fresh temporary one; use /dev/shm/... to
        /// take the disk out of the measurement).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// N concurrent writers of whole objects for S seconds, then reads of what was
    /// written; NOSEC and secure in the same run (the shape of `rados bench`).
    Objects {
        /// Object size in bytes.
        #[arg(long, default_value_t = 4 * 1024 * 1024)]
        size: u64,
        /// Concurrent writers / readers.
        #[arg(long, default_value_t = 4)]
        threads: u32,
        /// Seconds of writing per mode.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Protection methods to compare, comma separated (SPEC T1). NOSEC is the insecure
        /// baseline; the others each use a partition of their own. JSON keys are
        /// `<method>_write_mb_s` etc.; ALLDATA (the cluster default) also as `secure_`.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "NOSEC,CAPKEY,CMDRSP,ALLDATA,CONFIDENTIAL",
            value_parser = crate::up::parse_protection
        )]
        security: Vec<Protection>,
        /// Rounds over the methods, in alternating order (forward, then backward, ...), so
        /// that a machine getting slower or faster during the run favours none; figures
        /// are the means over the rounds.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

struct LocalCluster {
    child: Child,
    data: PathBuf,
    _temp: Option<tempfile::TempDir>,
    file: ClusterFile,
}

impl LocalCluster {
    fn start(data: Option<PathBuf>) -> Result<Self> {
        let (data, temp) = match data {
            Some(d) => {
                if d.join("mds/mds.toml").exists() {
                    bail!(
                        "{} already holds a cluster; benchmarks need a fresh directory",
                        d.display()
                    );
                }
                (d, None)
            }
            None => {
                let t = tempfile::Builder::new().prefix("maat-bench-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args([
                "up",
                "--osds",
                "4",
                "--listen",
                "127.0.0.1:0",
                "--danger-allow-insecure",
                "--data",
            ])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the local cluster")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("ready") => break,
                Some(Ok(_)) => continue,
                _ => bail!("local cluster did not start"),
            }
        }
        std::thread::spawn(move || for _ in lines {});
        let file = ClusterFile::load(&data.join("client.toml"))?;
        Ok(Self {
            child,
            data,
            _temp: temp,
            file,
        })
    }

    fn admin(&self) -> Result<Client> {
        let home = Home::new(self.data.join("admin"));
        let (name, key) = home
            .identity()?
            .ok_or_else(|| anyhow!("no admin identity"))?;
        let mut c = Client::new(self.file.clone(), None)?;
        c.login(&name, Credential::Key(key))?;
        Ok(c)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // SIGTERM-equivalent for our supervisor: kill it; its children see stdin close.
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn counter(stats: &[DaemonStats], daemon_prefix: &str, name: &str) -> u64 {
    stats
        .iter()
        .filter(|d| d.daemon.starts_with(daemon_prefix))
        .flat_map(|d| d.counters.iter())
        .filter(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .sum()
}

#[derive(Default, Clone, Copy)]
struct Counts {
    mds_signatures: u64,
    osd_verifications: u64,
    macs: u64,
}

fn counts(c: &mut Client) -> Result<Counts> {
    c.secure();
    let s = c.daemon_stats()?;
    Ok(Counts {
        mds_signatures: counter(&s, "mds", "signatures_made"),
        osd_verifications: counter(&s, "osd", "signatures_verified"),
        macs: counter(&s, "mds", "macs_computed") + counter(&s, "osd", "macs_computed"),
    })
}

struct Row {
    name: &'static str,
    /// Median.
    micros: f64,
    mean_micros: f64,
    signatures: f64,
    verifications: f64,
    macs: f64,
}

fn per_op(before: Counts, after: Counts, n: u32, stats_overhead: Counts) -> (f64, f64, f64) {
    let n = f64::from(n);
    (
        after
            .mds_signatures
            .saturating_sub(before.mds_signatures + stats_overhead.mds_signatures) as f64
            / n,
        after
            .osd_verifications
            .saturating_sub(before.osd_verifications + stats_overhead.osd_verifications)
            as f64
            / n,
        after.macs.saturating_sub(before.macs + stats_overhead.macs) as f64 / n,
    )
}

/// Accumulates one row over several interleaved rounds.
struct Acc {
    name: &'static str,
    elapsed: Duration,
    ops: u32,
    before_after: Vec<(Counts, Counts)>,
}

impl Acc {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            elapsed: Duration::ZERO,
            ops: 0,
            before_after: Vec::new(),
        }
    }

    fn row(&self, overhead: Counts) -> Row {
        let n = f64::from(self.ops.max(1));
        let mut s = 0.0;
        let mut v = 0.0;
        let mut m = 0.0;
        for (b, a) in &self.before_after {
            let (ds, dv, dm) = per_op(*b, *a, 1, overhead);
            s += ds;
            v += dv;
            m += dm;
        }
        let mean = self.elapsed.as_secs_f64() * 1e6 / n;
        Row {
            name: self.name,
            micros: mean,
            mean_micros: mean,
            signatures: s / n,
            verifications: v / n,
            macs: m / n,
        }
    }
}

/// Runs `op` for indexes `first..first + count`, adding time and crypto counts to `acc`.
fn measure<F: FnMut(&mut Client, u32) -> Result<()>>(
    c: &mut Client,
    acc: &mut Acc,
    first: u32,
    count: u32,
    insecure: bool,
    mut op: F,
) -> Result<()> {
    let before = counts(c)?;
    if insecure {
        c.danger_insecure_as(ADMIN_USER_ID);
    }
    let start = Instant::now();
    for i in first..first + count {
        op(c, i)?;
    }
    acc.elapsed += start.elapsed();
    acc.ops += count;
    c.secure();
    let after = counts(c)?;
    acc.before_after.push((before, after));
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Open,
    Write,
    Read,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sec {
    Nosec,
    Generated,
    Cached,
}

const VARIANTS: [(OpKind, Sec, &str); 9] = [
    (OpKind::Open, Sec::Nosec, "open NOSEC"),
    (OpKind::Open, Sec::Generated, "open capability generated"),
    (OpKind::Open, Sec::Cached, "open capability cached"),
    (OpKind::Write, Sec::Nosec, "write 128K NOSEC"),
    (
        OpKind::Write,
        Sec::Generated,
        "write 128K capability generated",
    ),
    (OpKind::Write, Sec::Cached, "write 128K capability cached"),
    (OpKind::Read, Sec::Nosec, "read 128K NOSEC"),
    (
        OpKind::Read,
        Sec::Generated,
        "read 128K capability generated",
    ),
    (OpKind::Read, Sec::Cached, "read 128K capability cached"),
];

struct OpsState {
    nosec: Vec<Option<Opened>>,
    generated: Vec<Option<Opened>>,
    fresh: Vec<Opened>,
    cached: Opened,
    block: Vec<u8>,
}

impl OpsState {
    /// One E1 operation. Generated variants use index `i`'s own file, whose capability
    /// neither the MDS (open) nor the OSD (write, read) has seen; cached variants reuse one.
    fn run(&mut self, c: &mut Client, kind: OpKind, sec: Sec, i: u32) -> Result<()> {
        let idx = i as usize;
        let missing = || anyhow!("internal: file {i} not opened");
        match (kind, sec) {
            (OpKind::Open, Sec::Nosec) => {
                let o = c.open(&format!("/bench/n{i}"), Access::ReadWrite, None)?;
                *self.nosec.get_mut(idx).ok_or_else(missing)? = Some(o);
            }
            (OpKind::Open, Sec::Generated) => {
                let o = c.open(&format!("/bench/g{i}"), Access::ReadWrite, None)?;
                *self.generated.get_mut(idx).ok_or_else(missing)? = Some(o);
            }
            (OpKind::Open, Sec::Cached) => {
                c.open("/bench/c", Access::ReadWrite, None)?;
            }
            (OpKind::Write, sec) => {
                let target = match sec {
                    Sec::Nosec => self.nosec.get(idx).and_then(Option::as_ref),
                    Sec::Generated => self.generated.get(idx).and_then(Option::as_ref),
                    Sec::Cached => Some(&self.cached),
                }
                .ok_or_else(missing)?;
                c.write_object(target, 0, self.block.clone())?;
            }
            (OpKind::Read, sec) => {
                let target = match sec {
                    Sec::Nosec => self.nosec.get(idx).and_then(Option::as_ref),
                    Sec::Generated => self.fresh.get(idx),
                    Sec::Cached => Some(&self.cached),
                }
                .ok_or_else(missing)?;
                c.read_object(target, 0)?;
            }
        }
        Ok(())
    }
}

/// The counting pass runs `iterations / ROUNDS` operations per variant.
const ROUNDS: u32 = 4;

fn run_ops(
    iterations: u32,
    seq_mib: u64,
    methods: &[Protection],
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    if iterations < ROUNDS {
        bail!("--iterations must be at least {ROUNDS}");
    }
    let cluster = LocalCluster::start(data)?;
    let mut c = cluster.admin()?;
    c.mkdir("/bench", 0o755, true)?;
    let n = iterations - iterations % ROUNDS;
    let per = n / ROUNDS;
    let total = (n + per) as usize;
    let block = vec![0x5au8; 128 * 1024];
    // Files n<i>: NOSEC; g<i>: capability generated; c: capability cached; r/<i>: fresh
    // capabilities for reads. Indexes 0..n are timed, n..n+per counted.
    c.mkdir("/bench/r", 0o755, true)?;
    c.danger_insecure_as(ADMIN_USER_ID);
    // Every object exists with 128 KiB before measuring, so all three variants overwrite
    // and read existing objects: the differences are the security path, not file creation.
    for i in 0..total {
        for name in [
            format!("/bench/n{i}"),
            format!("/bench/g{i}"),
            format!("/bench/r/{i}"),
        ] {
            let o = c.open(&name, Access::ReadWrite, Some(0o644))?;
            c.write_object(&o, 0, block.clone())?;
        }
    }
    c.secure();
    let mut state = OpsState {
        nosec: vec![None; total],
        generated: vec![None; total],
        fresh: Vec::new(),
        cached: c.open("/bench/c", Access::ReadWrite, Some(0o644))?,
        block,
    };
    for i in 0..total {
        state
            .fresh
            .push(c.open(&format!("/bench/r/{i}"), Access::Read, None)?);
    }
    // Warm the cached file's capability at the OSD it lives on.
    c.write_object(&state.cached, 0, state.block.clone())?;
    // What one `counts` call itself costs (it MACs requests), measured, then subtracted.
    // (A first call negotiates OSD sessions, which costs extra; measure after it.)
    counts(&mut c)?;
    let o0 = counts(&mut c)?;
    let o1 = counts(&mut c)?;
    let overhead = Counts {
        mds_signatures: o1.mds_signatures - o0.mds_signatures,
        osd_verifications: o1.osd_verifications - o0.osd_verifications,
        macs: o1.macs - o0.macs,
    };

    // Pass 1, exact counts: each variant alone over indexes n..n+per.
    let mut acc: Vec<Acc> = VARIANTS.iter().map(|(_, _, name)| Acc::new(name)).collect();
    for (v, (kind, sec, _)) in VARIANTS.iter().enumerate() {
        let a = acc.get_mut(v).ok_or_else(|| anyhow!("internal: variant"))?;
        measure(&mut c, a, n, per, *sec == Sec::Nosec, |c, i| {
            state.run(c, *kind, *sec, i)
        })?;
    }
    let counted: Vec<Row> = acc.iter().map(|a| a.row(overhead)).collect();

    // Pass 2, times: per operation kind, the three variants one after another for each
    // index (rotating which goes first), so drift on a shared machine hits all alike.
    // Medians are reported (scheduler hiccups on a shared VM skew means); means too.
    let mut samples: Vec<Vec<Duration>> = (0..9).map(|_| Vec::with_capacity(n as usize)).collect();
    for (k, kind) in [OpKind::Open, OpKind::Write, OpKind::Read]
        .into_iter()
        .enumerate()
    {
        for i in 0..n {
            for r in 0..3 {
                let s = (i as usize + r) % 3;
                let sec = [Sec::Nosec, Sec::Generated, Sec::Cached]
                    .get(s)
                    .copied()
                    .ok_or_else(|| anyhow!("internal: variant"))?;
                if sec == Sec::Nosec {
                    c.danger_insecure_as(ADMIN_USER_ID);
                } else {
                    c.secure();
                }
                let t0 = Instant::now();
                state.run(&mut c, kind, sec, i)?;
                if let Some(v) = samples.get_mut(k * 3 + s) {
                    v.push(t0.elapsed());
                }
            }
        }
    }
    c.secure();
    let rows: Vec<Row> = counted
        .into_iter()
        .zip(samples)
        .map(|(r, mut v)| {
            v.sort();
            let total: Duration = v.iter().sum();
            Row {
                micros: v
                    .get(v.len() / 2)
                    .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6),
                mean_micros: total.as_secs_f64() * 1e6 / v.len().max(1) as f64,
                ..r
            }
        })
        .collect();

    // Sequential throughput per method, six rounds in alternating order (forward, then
    // backward); medians. Each method writes in a directory of a partition of its own.
    let size = seq_mib * 1024 * 1024;
    let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut modes = vec![Protection::NoSec];
    for m in methods.iter().copied().chain([Protection::AllData]) {
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    let mut dirs = Vec::new();
    for m in &modes {
        let tag = m.name().to_ascii_lowercase();
        let dir = format!("/bench/seq-{tag}");
        let partition = match m {
            Protection::NoSec | Protection::AllData => None,
            other => {
                let name = format!("bench-{tag}");
                c.partition_create(&name, *other)?;
                Some(name)
            }
        };
        c.mkdir_in(&dir, 0o755, true, partition.as_deref())?;
        dirs.push(dir);
    }
    // Per mode: [put, get, put and get together] samples in MB/s (the last is bytes moved
    // over the time both took, the figure the ratios use).
    let mut seq: Vec<[Vec<f64>; 3]> = modes.iter().map(|_| Default::default()).collect();
    for round in 0..6 {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..modes.len()).collect()
        } else {
            (0..modes.len()).rev().collect()
        };
        for i in order {
            let (Some(m), Some(dir), Some(samples)) = (modes.get(i), dirs.get(i), seq.get_mut(i))
            else {
                bail!("internal: mode index");
            };
            if *m == Protection::NoSec {
                c.danger_insecure_as(ADMIN_USER_ID);
            } else {
                c.secure();
            }
            let path = format!("{dir}/{round}");
            let t = Instant::now();
            c.put(&mut payload.as_slice(), size, &path, &mut |_| {})?;
            let put_time = t.elapsed().as_secs_f64();
            let mut sink = Vec::with_capacity(size as usize);
            let t = Instant::now();
            c.get(&path, &mut sink, &mut |_| {})?;
            let get_time = t.elapsed().as_secs_f64();
            if sink != payload {
                bail!("sequential read-back differs from what was written");
            }
            let [put, get, both] = samples;
            put.push(size as f64 / put_time / 1e6);
            get.push(size as f64 / get_time / 1e6);
            both.push(2.0 * size as f64 / (put_time + get_time) / 1e6);
        }
    }
    c.secure();
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let seq: Vec<(Protection, [f64; 3])> = modes
        .iter()
        .copied()
        .zip(seq)
        .map(|(m, [mut p, mut g, mut b])| (m, [med(&mut p), med(&mut g), med(&mut b)]))
        .collect();
    let of = |m: Protection| {
        seq.iter()
            .find(|(x, _)| *x == m)
            .map(|(_, v)| *v)
            .unwrap_or([f64::NAN; 3])
    };
    let [put_nosec, get_nosec, seq_nosec] = of(Protection::NoSec);
    let [put_secure, get_secure, seq_secure] = of(Protection::AllData);

    let base = |prefix: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(prefix) && r.name.ends_with("NOSEC"))
            .map(|r| r.micros)
            .unwrap_or(f64::NAN)
    };
    let find = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| r.micros)
            .unwrap_or(f64::NAN)
    };
    let open_cached_over_nosec = find("open capability cached") / base("open");
    let open_generated_over_nosec = find("open capability generated") / base("open");
    let seq_ratio = seq_secure / seq_nosec;
    if json {
        let mut obj = serde_json::Map::new();
        for r in &rows {
            let key = r.name.replace(' ', "_").to_lowercase();
            obj.insert(format!("{key}_us"), r.micros.into());
            obj.insert(format!("{key}_mean_us"), r.mean_micros.into());
            obj.insert(format!("{key}_signatures_per_op"), r.signatures.into());
            obj.insert(
                format!("{key}_verifications_per_op"),
                r.verifications.into(),
            );
            obj.insert(format!("{key}_macs_per_op"), r.macs.into());
        }
        obj.insert(
            "open_cached_over_nosec".into(),
            open_cached_over_nosec.into(),
        );
        obj.insert(
            "open_generated_over_nosec".into(),
            open_generated_over_nosec.into(),
        );
        obj.insert("seq_throughput_secure_over_nosec".into(), seq_ratio.into());
        obj.insert("seq_put_nosec_mb_s".into(), put_nosec.into());
        obj.insert("seq_put_secure_mb_s".into(), put_secure.into());
        obj.insert("seq_get_nosec_mb_s".into(), get_nosec.into());
        obj.insert("seq_get_secure_mb_s".into(), get_secure.into());
        obj.insert("seq_put_get_nosec_mb_s".into(), seq_nosec.into());
        obj.insert("seq_put_get_secure_mb_s".into(), seq_secure.into());
        for (m, [p, g, b]) in &seq {
            let tag = m.name().to_ascii_lowercase();
            obj.insert(format!("seq_put_{tag}_mb_s"), (*p).into());
            obj.insert(format!("seq_get_{tag}_mb_s"), (*g).into());
            obj.insert(format!("seq_put_get_{tag}_mb_s"), (*b).into());
            obj.insert(format!("seq_{tag}_over_nosec"), (b / seq_nosec).into());
        }
        obj.insert("iterations".into(), n.into());
        obj.insert("seq_mib".into(), seq_mib.into());
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!("E1 (paper 000 Table 1 shape), {n} operations each, 4 OSDs on loopback");
        println!("(crypto columns per operation: MDS signatures made, OSD signature verifications, MACs computed by the daemons)");
        println!(
            "{:<34} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
            "operation", "median µs", "mean µs", "× NOSEC", "MDS sig", "OSD verify", "daemon MAC"
        );
        for r in &rows {
            let kind = r.name.split(' ').next().unwrap_or("");
            println!(
                "{:<34} {:>10.1} {:>10.1} {:>8.2} {:>10.2} {:>10.2} {:>8.2}",
                r.name,
                r.micros,
                r.mean_micros,
                r.micros / base(kind),
                r.signatures,
                r.verifications,
                r.macs
            );
        }
        println!(
            "sequential {seq_mib} MiB, medians of 6 rounds in alternating order (MB/s): put {put_secure:.0} / {put_nosec:.0}, get {get_secure:.0} / {get_nosec:.0}, put+get {seq_secure:.0} / {seq_nosec:.0} (ALLDATA / NOSEC)"
        );
        for (m, [p, g, b]) in &seq {
            println!(
                "  {:<13} put {p:7.0}  get {g:7.0}  put+get {b:7.0}  × NOSEC {:.3}",
                m.name(),
                b / seq_nosec
            );
        }
        println!(
            "open_cached_over_nosec {open_cached_over_nosec:.3} (target ≤ 1.10), open_generated_over_nosec {open_generated_over_nosec:.3}, seq_throughput_secure_over_nosec {seq_ratio:.3} (target ≥ 0.97)"
        );
    }
    Ok(())
}

#[derive(Default)]
struct ModeResult {
    write_mb_s: f64,
    write_latency_ms: f64,
    read_mb_s: f64,
    read_latency_ms: f64,
    objects: usize,
    /// CPU of the client and all daemons per MiB moved (written plus read).
    cpu_ms_per_mib: f64,
}

impl ModeResult {
    fn add(&mut self, r: &ModeResult) {
        self.write_mb_s += r.write_mb_s;
        self.write_latency_ms += r.write_latency_ms;
        self.read_mb_s += r.read_mb_s;
        self.read_latency_ms += r.read_latency_ms;
        self.objects += r.objects;
        self.cpu_ms_per_mib += r.cpu_ms_per_mib;
    }

    fn mean(self, n: u32) -> ModeResult {
        let d = f64::from(n);
        ModeResult {
            write_mb_s: self.write_mb_s / d,
            write_latency_ms: self.write_latency_ms / d,
            read_mb_s: self.read_mb_s / d,
            read_latency_ms: self.read_latency_ms / d,
            objects: self.objects,
            cpu_ms_per_mib: self.cpu_ms_per_mib / d,
        }
    }
}

/// CPU seconds used so far by this process and every daemon of the cluster (from
/// `/proc`; the daemons' pid files are in the data directory).
fn cluster_cpu_secs(data: &std::path::Path) -> f64 {
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let mut pids = vec!["self".to_string()];
    if let Ok(dir) = std::fs::read_dir(data) {
        for e in dir.flatten() {
            if e.path().extension().is_some_and(|x| x == "pid") {
                if let Ok(p) = std::fs::read_to_string(e.path()) {
                    pids.push(p.trim().to_string());
                }
            }
        }
    }
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which may hold spaces): utime is the 14th
            // field of the line, stime the 15th.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .sum()
}

fn objects_mode(
    cluster: &LocalCluster,
    size: u64,
    threads: u32,
    seconds: u64,
    method: Protection,
) -> Result<ModeResult> {
    let insecure = method == Protection::NoSec;
    let tag = method.name().to_ascii_lowercase();
    let dir = format!("/bench-objects-{tag}");
    {
        let mut admin = cluster.admin()?;
        let partition = match method {
            Protection::NoSec | Protection::AllData => None,
            m => {
                let name = format!("bench-{tag}");
                if !admin.partitions()?.iter().any(|p| p.name == name) {
                    admin.partition_create(&name, m)?;
                }
                Some(name)
            }
        };
        admin.mkdir_in(&dir, 0o755, true, partition.as_deref())?;
    }
    let cpu_before = cluster_cpu_secs(&cluster.data);
    let payload: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let payload = std::sync::Arc::new(payload);
    // Clients log in before the clock starts.
    let mut clients = Vec::new();
    for _ in 0..threads {
        let mut c = cluster.admin()?;
        if insecure {
            c.danger_insecure_as(ADMIN_USER_ID);
        }
        clients.push(c);
    }
    let mut handles = Vec::new();
    let start = Instant::now();
    for (t, mut c) in clients.into_iter().enumerate() {
        let payload = payload.clone();
        let dir = dir.clone();
        handles.push(std::thread::spawn(
            move || -> Result<(Client, Vec<(String, Duration)>)> {
                let mut done = Vec::new();
                let deadline = start + Duration::from_secs(seconds);
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let path = format!("{dir}/{t}-{i}");
                    let t0 = Instant::now();
                    c.put(&mut payload.as_slice(), size, &path, &mut |_| {})?;
                    done.push((path, t0.elapsed()));
                    i += 1;
                }
                Ok((c, done))
            },
        ));
    }
    let mut clients = Vec::new();
    let mut written: Vec<Vec<String>> = Vec::new();
    let mut write_latency = Duration::ZERO;
    let mut count = 0usize;
    for h in handles {
        let (c, done) = h.join().map_err(|_| anyhow!("writer panicked"))??;
        count += done.len();
        write_latency += done.iter().map(|(_, d)| *d).sum::<Duration>();
        written.push(done.into_iter().map(|(p, _)| p).collect());
        clients.push(c);
    }
    let write_elapsed = start.elapsed();
    let start = Instant::now();
    let mut handles = Vec::new();
    for (mut c, paths) in clients.into_iter().zip(written) {
        let expected = payload.clone();
        handles.push(std::thread::spawn(
            move || -> Result<(Duration, Client, Vec<String>)> {
                let mut total = Duration::ZERO;
                for p in &paths {
                    let mut sink = Vec::with_capacity(size as usize);
                    let t0 = Instant::now();
                    c.get(p, &mut sink, &mut |_| {})?;
                    total += t0.elapsed();
                    if sink != *expected {
                        bail!("{p}: read back differs");
                    }
                }
                Ok((total, c, paths))
            },
        ));
    }
    let mut read_latency = Duration::ZERO;
    let mut cleanup = Vec::new();
    for h in handles {
        let (latency, c, paths) = h.join().map_err(|_| anyhow!("reader panicked"))??;
        read_latency += latency;
        cleanup.push((c, paths));
    }
    let read_elapsed = start.elapsed();
    let cpu = cluster_cpu_secs(&cluster.data) - cpu_before;
    // As `rados bench` does: remove what was written (untimed), so that every mode starts
    // from the same empty store.
    let removers: Vec<_> = cleanup
        .into_iter()
        .map(|(mut c, paths)| {
            std::thread::spawn(move || -> Result<()> {
                for p in paths {
                    c.unlink(&p)?;
                }
                Ok(())
            })
        })
        .collect();
    for r in removers {
        r.join().map_err(|_| anyhow!("cleanup panicked"))??;
    }
    let bytes = (count as u64 * size) as f64;
    let n = count.max(1) as f64;
    Ok(ModeResult {
        cpu_ms_per_mib: cpu * 1e3 / (2.0 * bytes / 1_048_576.0).max(1e-9),
        write_mb_s: bytes / write_elapsed.as_secs_f64() / 1e6,
        write_latency_ms: write_latency.as_secs_f64() * 1e3 / n,
        read_mb_s: bytes / read_elapsed.as_secs_f64() / 1e6,
        read_latency_ms: read_latency.as_secs_f64() * 1e3 / n,
        objects: count,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_objects(
    size: u64,
    threads: u32,
    seconds: u64,
    methods: &[Protection],
    rounds: u32,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    if size == 0 || threads == 0 || seconds == 0 {
        bail!("--size, --threads and --seconds must be at least 1");
    }
    if size > 1 << 30 {
        bail!("--size above 1 GiB is not supported by this benchmark");
    }
    if methods.is_empty() {
        bail!("--security names no method");
    }
    let cluster = LocalCluster::start(data)?;
    // An untimed warm-up round: the first mode to run otherwise pays for growing every
    // daemon's heap and the page cache (measured: the first mode ran ~35% slower than
    // the same mode run later).
    if let Some(&first) = methods.first() {
        objects_mode(&cluster, size, threads, seconds.min(2), first)?;
    }
    let mut sums: Vec<(Protection, ModeResult)> = methods
        .iter()
        .map(|&m| (m, ModeResult::default()))
        .collect();
    for round in 0..rounds.max(1) {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..methods.len()).collect()
        } else {
            (0..methods.len()).rev().collect()
        };
        for i in order {
            let Some((m, sum)) = sums.get_mut(i) else {
                continue;
            };
            if !json {
                eprintln!(
                    "bench objects: round {}, {m} for {seconds} s of writes, then reads",
                    round + 1
                );
            }
            sum.add(&objects_mode(&cluster, size, threads, seconds, *m)?);
        }
    }
    let results: Vec<(Protection, ModeResult)> = sums
        .into_iter()
        .map(|(m, sum)| (m, sum.mean(rounds.max(1))))
        .collect();
    let find = |m: Protection| results.iter().find(|(x, _)| *x == m).map(|(_, r)| r);
    let nosec = find(Protection::NoSec);
    if json {
        let mut obj = serde_json::Map::new();
        let mut put = |name: &str, r: &ModeResult| {
            obj.insert(format!("{name}_write_mb_s"), r.write_mb_s.into());
            obj.insert(
                format!("{name}_write_latency_ms"),
                r.write_latency_ms.into(),
            );
            obj.insert(format!("{name}_read_mb_s"), r.read_mb_s.into());
            obj.insert(format!("{name}_read_latency_ms"), r.read_latency_ms.into());
            obj.insert(format!("{name}_objects"), r.objects.into());
            obj.insert(format!("{name}_cpu_ms_per_mib"), r.cpu_ms_per_mib.into());
            if let Some(n) = nosec {
                obj.insert(
                    format!("{name}_write_over_nosec"),
                    (r.write_mb_s / n.write_mb_s).into(),
                );
                obj.insert(
                    format!("{name}_read_over_nosec"),
                    (r.read_mb_s / n.read_mb_s).into(),
                );
            }
        };
        for (m, r) in &results {
            put(&m.name().to_ascii_lowercase(), r);
            if *m == Protection::AllData {
                put("secure", r);
            }
        }
        if let (Some(n), Some(s)) = (nosec, find(Protection::AllData)) {
            obj.insert(
                "write_secure_over_nosec".into(),
                (s.write_mb_s / n.write_mb_s).into(),
            );
            obj.insert(
                "read_secure_over_nosec".into(),
                (s.read_mb_s / n.read_mb_s).into(),
            );
        }
        obj.insert("size".into(), size.into());
        obj.insert("threads".into(), threads.into());
        obj.insert("seconds".into(), seconds.into());
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!(
            "objects of {size} B, {threads} threads, {seconds} s of writes per method and round, means over {rounds} rounds in alternating order"
        );
        println!(
            "{:<13} {:>10} {:>12} {:>10} {:>12} {:>8} {:>11} {:>9} {:>9}",
            "method",
            "write MB/s",
            "write ms/op",
            "read MB/s",
            "read ms/op",
            "objects",
            "CPU ms/MiB",
            "w/NOSEC",
            "r/NOSEC"
        );
        for (m, r) in &results {
            let (w, rd) = match nosec {
                Some(n) => (
                    format!("{:.3}", r.write_mb_s / n.write_mb_s),
                    format!("{:.3}", r.read_mb_s / n.read_mb_s),
                ),
                None => ("-".into(), "-".into()),
            };
            println!(
                "{:<13} {:>10.1} {:>12.2} {:>10.1} {:>12.2} {:>8} {:>11.2} {:>9} {:>9}",
                m.name(),
                r.write_mb_s,
                r.write_latency_ms,
                r.read_mb_s,
                r.read_latency_ms,
                r.objects,
                r.cpu_ms_per_mib,
                w,
                rd
            );
        }
    }
    Ok(())
}

/// Runs a benchmark.
pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Ops {
            iterations,
            seq_mib,
            security,
            data,
            json,
        } => run_ops(iterations, seq_mib, &security, data, json),
        BenchCommand::Objects {
            size,
            threads,
            seconds,
            security,
            rounds,
            data,
            json,
        } => run_objects(size, threads, seconds, &security, rounds, data, json),
        BenchCommand::LoginFlood {
            messages,
            flooders,
            data,
            json,
        } => login::run_login_flood(messages, flooders, data, json),
    }
}
