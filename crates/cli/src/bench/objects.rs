//! `maat bench objects` (the shape of `rados bench`): concurrent writers of whole objects,
//! then readers, per protection method (and for Horus-encrypted files), in rounds of
//! alternating order.

use super::LocalCluster;
use anyhow::{anyhow, bail, Result};
use maat_client::Client;
use maat_proto::msg::ADMIN_USER_ID;
use maat_proto::protection::Protection;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What one run of the benchmark measures: plaintext files under a protection method, or
/// encrypted files (SPEC H3; they travel under CMDRSP, the block AEAD protecting the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plaintext files in a partition with this method.
    Method(Protection),
    /// Encrypted files (Horus leaf keys from the KDS, sealed blocks).
    Encrypted,
}

impl Mode {
    /// The name `--security` takes and the JSON keys start with (lower case there).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Method(m) => m.name(),
            Mode::Encrypted => "ENCRYPTED",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a `--security` value of `maat bench objects`.
pub fn parse_mode(name: &str) -> Result<Mode, String> {
    if name.eq_ignore_ascii_case("ENCRYPTED") {
        return Ok(Mode::Encrypted);
    }
    Protection::parse(name).map(Mode::Method).ok_or_else(|| {
        format!("{name:?}: expected NOSEC, CAPKEY, CMDRSP, ALLDATA, CONFIDENTIAL or ENCRYPTED")
    })
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
    /// Durable commits (fsyncs) of the MDS's store per object written: 2 without group
    /// commit (a create and a size), less when the puts of many clients share them.
    mds_fsyncs_per_object: f64,
}

impl ModeResult {
    fn add(&mut self, r: &ModeResult) {
        self.write_mb_s += r.write_mb_s;
        self.write_latency_ms += r.write_latency_ms;
        self.read_mb_s += r.read_mb_s;
        self.read_latency_ms += r.read_latency_ms;
        self.objects += r.objects;
        self.cpu_ms_per_mib += r.cpu_ms_per_mib;
        self.mds_fsyncs_per_object += r.mds_fsyncs_per_object;
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
            mds_fsyncs_per_object: self.mds_fsyncs_per_object / d,
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

/// The MDS's `store_fsyncs` counter now.
fn mds_fsyncs(cluster: &LocalCluster) -> Result<u64> {
    let stats = cluster.admin()?.daemon_stats()?;
    stats
        .iter()
        .find(|s| s.daemon == "mds")
        .and_then(|s| s.counter("store_fsyncs"))
        .ok_or_else(|| anyhow!("the MDS reports no store_fsyncs counter"))
}

fn objects_mode(
    cluster: &LocalCluster,
    size: u64,
    threads: u32,
    seconds: u64,
    mode: Mode,
    cold: bool,
) -> Result<ModeResult> {
    let insecure = mode == Mode::Method(Protection::NoSec);
    let encrypt = mode == Mode::Encrypted;
    let tag = mode.name().to_ascii_lowercase();
    let dir = format!("/bench-objects-{tag}");
    {
        let admin = cluster.admin()?;
        let partition = match mode {
            Mode::Encrypted | Mode::Method(Protection::NoSec | Protection::AllData) => None,
            Mode::Method(m) => {
                let name = format!("bench-{tag}");
                if !admin.partitions()?.iter().any(|p| p.name == name) {
                    admin.partition_create_replicated(&name, m, cluster.replicas)?;
                }
                Some(name)
            }
        };
        admin.mkdir_in(&dir, 0o755, true, partition.as_deref())?;
    }
    let cpu_before = cluster_cpu_secs(&cluster.data);
    let fsyncs_before = mds_fsyncs(cluster)?;
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
    for (t, c) in clients.into_iter().enumerate() {
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
                    c.put_with(
                        &mut payload.as_slice(),
                        size,
                        &path,
                        Some(encrypt),
                        &mut |_| {},
                    )?;
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
    let fsyncs = mds_fsyncs(cluster)?.saturating_sub(fsyncs_before);
    let start = Instant::now();
    let mut handles = Vec::new();
    for (c, paths) in clients.into_iter().zip(written) {
        // Cold readers open every object at the MDS and ask the KDS for every encrypted
        // object's keys, as a client that did not write it would (the writer kept its
        // opens and derived the keys from the root key it made).
        if cold {
            c.forget_opens();
            c.forget_file_keys();
        }
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
        .map(|(c, paths)| {
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
        mds_fsyncs_per_object: fsyncs as f64 / n,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_objects(
    size: u64,
    threads: u32,
    seconds: u64,
    methods: &[Mode],
    rounds: u32,
    replicas: u8,
    data: Option<PathBuf>,
    cold: bool,
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
    let copies = replicas.to_string();
    let cluster = LocalCluster::start_with(data, &["--replicas", &copies])?;
    // An untimed warm-up round: the first mode to run otherwise pays for growing every
    // daemon's heap and the page cache (measured: the first mode ran ~35% slower than
    // the same mode run later).
    if let Some(&first) = methods.first() {
        objects_mode(&cluster, size, threads, seconds.min(2), first, cold)?;
    }
    let mut sums: Vec<(Mode, ModeResult)> = methods
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
            sum.add(&objects_mode(&cluster, size, threads, seconds, *m, cold)?);
        }
    }
    let results: Vec<(Mode, ModeResult)> = sums
        .into_iter()
        .map(|(m, sum)| (m, sum.mean(rounds.max(1))))
        .collect();
    let find = |m: Mode| results.iter().find(|(x, _)| *x == m).map(|(_, r)| r);
    let nosec = find(Mode::Method(Protection::NoSec));
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
            obj.insert(
                format!("{name}_mds_fsyncs_per_object"),
                r.mds_fsyncs_per_object.into(),
            );
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
            if *m == Mode::Method(Protection::AllData) {
                put("secure", r);
            }
        }
        if let (Some(n), Some(s)) = (nosec, find(Mode::Method(Protection::AllData))) {
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
        obj.insert("cold_readers".into(), cold.into());
        obj.insert("replicas".into(), replicas.into());
        say!("{}", serde_json::Value::Object(obj));
    } else {
        say!(
            "objects of {size} B in {replicas} cop{} each, {threads} threads, {seconds} s of writes per method and round, means over {rounds} rounds in alternating order; {}",
            if replicas == 1 { "y" } else { "ies" },
            if cold {
                "cold readers (every get opens at the MDS, encrypted ones ask the KDS)"
            } else {
                "each writer reads back what it wrote"
            }
        );
        say!(
            "{:<13} {:>10} {:>12} {:>10} {:>12} {:>8} {:>11} {:>11} {:>9} {:>9}",
            "method",
            "write MB/s",
            "write ms/op",
            "read MB/s",
            "read ms/op",
            "objects",
            "CPU ms/MiB",
            "MDS fsync/w",
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
            say!(
                "{:<13} {:>10.1} {:>12.2} {:>10.1} {:>12.2} {:>8} {:>11.2} {:>11.2} {:>9} {:>9}",
                m.name(),
                r.write_mb_s,
                r.write_latency_ms,
                r.read_mb_s,
                r.read_latency_ms,
                r.objects,
                r.cpu_ms_per_mib,
                r.mds_fsyncs_per_object,
                w,
                rd
            );
        }
    }
    Ok(())
}
