//! `maat bench ops` (E1, paper 000 Table 1's shape): open, 128 KiB write and read under
//! NOSEC, a generated capability, a cached one, and one that names its files by a Merkle
//! root neither the client nor the OSD has seen (the paper's "Maat (Merkle)" column: the
//! OSD asks the client for the tree, the client asks the MDS), with exact crypto counts;
//! sequential throughput per protection method.

use super::{sum_counter, LocalCluster};
use anyhow::{anyhow, bail, Result};
use maat_client::{Client, Opened};
use maat_proto::msg::{Access, ADMIN_USER_ID};
use maat_proto::protection::Protection;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
        mds_signatures: sum_counter(&s, "mds", "signatures_made")?,
        osd_verifications: sum_counter(&s, "osd", "signatures_verified")?,
        macs: sum_counter(&s, "mds", "macs_computed")? + sum_counter(&s, "osd", "macs_computed")?,
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
    /// A capability under directory grouping: its files are a Merkle root of the file's
    /// directory, one directory per index, so every operation meets a cold tree.
    Merkle,
}

/// The variants in the order pass 2 rotates them.
const SECS: [Sec; 4] = [Sec::Nosec, Sec::Generated, Sec::Cached, Sec::Merkle];

/// The grouping the Merkle opens are made under, and the cluster's default restored after.
const MERKLE_GROUPING: &str = "directory";
const DEFAULT_GROUPING: &str = "unix,onthefly";

const VARIANTS: [(OpKind, Sec, &str); 12] = [
    (OpKind::Open, Sec::Nosec, "open NOSEC"),
    (OpKind::Open, Sec::Generated, "open capability generated"),
    (OpKind::Open, Sec::Cached, "open capability cached"),
    (OpKind::Open, Sec::Merkle, "open Merkle cold trees"),
    (OpKind::Write, Sec::Nosec, "write 128K NOSEC"),
    (
        OpKind::Write,
        Sec::Generated,
        "write 128K capability generated",
    ),
    (OpKind::Write, Sec::Cached, "write 128K capability cached"),
    (OpKind::Write, Sec::Merkle, "write 128K Merkle cold trees"),
    (OpKind::Read, Sec::Nosec, "read 128K NOSEC"),
    (
        OpKind::Read,
        Sec::Generated,
        "read 128K capability generated",
    ),
    (OpKind::Read, Sec::Cached, "read 128K capability cached"),
    (OpKind::Read, Sec::Merkle, "read 128K Merkle cold trees"),
];

struct OpsState {
    nosec: Vec<Option<Opened>>,
    generated: Vec<Option<Opened>>,
    fresh: Vec<Opened>,
    cached: Opened,
    merkle: Vec<Option<Opened>>,
    merkle_fresh: Vec<Opened>,
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
            (OpKind::Open, Sec::Merkle) => {
                let o = c.open(&format!("/bench/m/{i}/a"), Access::ReadWrite, None)?;
                *self.merkle.get_mut(idx).ok_or_else(missing)? = Some(o);
            }
            (OpKind::Write, sec) => {
                let target = match sec {
                    Sec::Nosec => self.nosec.get(idx).and_then(Option::as_ref),
                    Sec::Generated => self.generated.get(idx).and_then(Option::as_ref),
                    Sec::Cached => Some(&self.cached),
                    Sec::Merkle => self.merkle.get(idx).and_then(Option::as_ref),
                }
                .ok_or_else(missing)?;
                c.write_object(target, 0, self.block.clone())?;
            }
            (OpKind::Read, sec) => {
                let target = match sec {
                    Sec::Nosec => self.nosec.get(idx).and_then(Option::as_ref),
                    Sec::Generated => self.fresh.get(idx),
                    Sec::Cached => Some(&self.cached),
                    Sec::Merkle => self.merkle_fresh.get(idx),
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

pub(super) fn run_ops(
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
    // Merkle files: m/<i>/a (opened, written), mr/<i>/a (read); each directory holds a
    // second file b, so a directory capability names a set of two (a tree), not one file.
    for i in 0..total {
        for dir in [format!("/bench/m/{i}"), format!("/bench/mr/{i}")] {
            c.mkdir(&dir, 0o755, true)?;
            for name in ["a", "b"] {
                let o = c.open(&format!("{dir}/{name}"), Access::ReadWrite, Some(0o644))?;
                c.write_object(&o, 0, block.clone())?;
            }
        }
    }
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
        merkle: vec![None; total],
        merkle_fresh: Vec::new(),
        block,
    };
    for i in 0..total {
        state
            .fresh
            .push(c.open(&format!("/bench/r/{i}"), Access::Read, None)?);
    }
    // Capabilities for the Merkle reads, each naming its directory's two files by a root
    // that neither this client nor any OSD has the tree of yet.
    c.set_grouping(MERKLE_GROUPING)?;
    for i in 0..total {
        state
            .merkle_fresh
            .push(c.open(&format!("/bench/mr/{i}/a"), Access::Read, None)?);
    }
    c.set_grouping(DEFAULT_GROUPING)?;
    // Open the cached file again, as the timed opens will: the open that created it may
    // have been served under a block of reserved ids, whose capability the MDS does not
    // keep for the file (with few iterations, the first timed "cached" open signed).
    state.cached = c.open("/bench/c", Access::ReadWrite, None)?;
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
        let grouped = *kind == OpKind::Open && *sec == Sec::Merkle;
        if grouped {
            c.set_grouping(MERKLE_GROUPING)?;
        }
        measure(&mut c, a, n, per, *sec == Sec::Nosec, |c, i| {
            state.run(c, *kind, *sec, i)
        })?;
        if grouped {
            c.set_grouping(DEFAULT_GROUPING)?;
        }
    }
    let counted: Vec<Row> = acc.iter().map(|a| a.row(overhead)).collect();

    // Pass 2, times: per operation kind, the four variants one after another for each
    // index (rotating which goes first), so drift on a shared machine hits all alike.
    // Medians are reported (scheduler hiccups on a shared VM skew means); means too. The
    // grouping switch around a Merkle open is an MDS request outside the timed span.
    let mut samples: Vec<Vec<Duration>> = (0..VARIANTS.len())
        .map(|_| Vec::with_capacity(n as usize))
        .collect();
    for (k, kind) in [OpKind::Open, OpKind::Write, OpKind::Read]
        .into_iter()
        .enumerate()
    {
        for i in 0..n {
            for r in 0..SECS.len() {
                let s = (i as usize + r) % SECS.len();
                let sec = SECS
                    .get(s)
                    .copied()
                    .ok_or_else(|| anyhow!("internal: variant"))?;
                let grouped = kind == OpKind::Open && sec == Sec::Merkle;
                c.secure();
                if grouped {
                    c.set_grouping(MERKLE_GROUPING)?;
                }
                if sec == Sec::Nosec {
                    c.danger_insecure_as(ADMIN_USER_ID);
                }
                let t0 = Instant::now();
                state.run(&mut c, kind, sec, i)?;
                if let Some(v) = samples.get_mut(k * SECS.len() + s) {
                    v.push(t0.elapsed());
                }
                if grouped {
                    c.set_grouping(DEFAULT_GROUPING)?;
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
            let kind = r.name.split(' ').next().unwrap_or("");
            if !r.name.ends_with("NOSEC") {
                obj.insert(format!("{key}_over_nosec"), (r.micros / base(kind)).into());
            }
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
        say!("{}", serde_json::Value::Object(obj));
    } else {
        say!("E1 (paper 000 Table 1 shape), {n} operations each, 4 OSDs on loopback");
        say!("(crypto columns per operation: MDS signatures made, OSD signature verifications, MACs computed by the daemons)");
        say!(
            "{:<34} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
            "operation",
            "median µs",
            "mean µs",
            "× NOSEC",
            "MDS sig",
            "OSD verify",
            "daemon MAC"
        );
        for r in &rows {
            let kind = r.name.split(' ').next().unwrap_or("");
            say!(
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
        say!(
            "paper 000 Table 1, × baseline: generated open 14.6, write 1.9, read 6.5; \
             cached open 1.07, write 1.01, read 1.07; Merkle (cold trees) open 15.0, \
             write 4.7, read 28.9"
        );
        say!(
            "sequential {seq_mib} MiB, medians of 6 rounds in alternating order (MB/s): put {put_secure:.0} / {put_nosec:.0}, get {get_secure:.0} / {get_nosec:.0}, put+get {seq_secure:.0} / {seq_nosec:.0} (ALLDATA / NOSEC)"
        );
        for (m, [p, g, b]) in &seq {
            say!(
                "  {:<13} put {p:7.0}  get {g:7.0}  put+get {b:7.0}  × NOSEC {:.3}",
                m.name(),
                b / seq_nosec
            );
        }
        say!(
            "open_cached_over_nosec {open_cached_over_nosec:.3} (target ≤ 1.05), open_generated_over_nosec {open_generated_over_nosec:.3}, seq_throughput_secure_over_nosec {seq_ratio:.3} (ALLDATA, target ≥ 0.95; CMDRSP ≥ 0.98)"
        );
    }
    Ok(())
}
