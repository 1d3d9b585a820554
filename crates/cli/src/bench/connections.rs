//! `maat bench connections` (issue 40): connections at the scale of the papers. Against one
//! daemon at a time (the MDS, the OSD, the KDS): a client's open, 64 KiB put and cold get
//! with N idle connections held against it and without, in alternating order; the daemon's
//! resident memory per idle connection; then the same client work while one attacker
//! address holds as many connections as it may open and trickles partial frames on them.

use super::LocalCluster;
use anyhow::{anyhow, bail, Context, Result};
use maat_client::Client;
use maat_proto::msg::Access;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Connections held from one source address (under the daemons' per-address limit, 4,096).
const PER_SOURCE: usize = 4_000;
/// Latencies by operation.
type Samples = BTreeMap<&'static str, Vec<Duration>>;

/// Bytes of every object put and got.
const OBJECT_BYTES: usize = 64 * 1024;

/// A connection to `to` from the loopback address `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> Result<TcpStream> {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    bind(&fd, &SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
    connect(&fd, &to)?;
    Ok(TcpStream::from(fd))
}

/// Opens `n` idle connections to `to`, at most [`PER_SOURCE`] from each of 127.0.0.10, .11, …
fn hold(to: SocketAddr, n: usize) -> Result<Vec<TcpStream>> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let source = Ipv4Addr::new(127, 0, 0, 10 + (i / PER_SOURCE) as u8);
        held.push(
            connect_from(source, to)
                .with_context(|| format!("idle connection {i} to {to} from {source}"))?,
        );
    }
    Ok(held)
}

/// Resident memory of process `pid`, bytes.
fn rss_bytes(pid: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow!("no VmRSS for process {pid}"))
}

fn pid(data: &Path, daemon: &str) -> Result<String> {
    Ok(std::fs::read_to_string(data.join(format!("{daemon}.pid")))
        .with_context(|| format!("the pid file of {daemon}"))?
        .trim()
        .to_string())
}

/// Median and 99th percentile of `samples`, µs.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

/// One measurement: `ops` rounds of an open of an existing file, a put of a new encrypted
/// 64 KiB object, and a get of it by a reader that forgot its opens and keys (so it asks
/// the MDS and the KDS); latencies by operation.
fn measure(writer: &Client, reader: &Client, ops: u32, tag: &str) -> Result<Samples> {
    let data = vec![0x5au8; OBJECT_BYTES];
    let mut out = Samples::new();
    for i in 0..ops {
        let path = format!("/bench-connections/{tag}-{i}");
        let t = Instant::now();
        writer.put_with(
            &mut &data[..],
            data.len() as u64,
            &path,
            Some(true),
            &mut |_| {},
        )?;
        out.entry("put").or_default().push(t.elapsed());
        reader.forget_opens();
        let t = Instant::now();
        reader.open(&path, Access::Read, None)?;
        out.entry("open").or_default().push(t.elapsed());
        reader.forget_opens();
        reader.forget_file_keys();
        let mut got = Vec::with_capacity(OBJECT_BYTES);
        let t = Instant::now();
        reader.get(&path, &mut got, &mut |_| {})?;
        out.entry("get").or_default().push(t.elapsed());
        if got != data {
            bail!("{path} read back wrong");
        }
    }
    Ok(out)
}

/// Holds `n` connections from one attacker address and trickles a frame header byte on
/// each every 500 ms until `stop`, saying on `ready` once all are open; returns how many
/// it opened and how many were still open at the end (a write to one the daemon closed
/// fails from the second on).
fn attacker(
    to: SocketAddr,
    n: usize,
    ready: &std::sync::atomic::AtomicBool,
    stop: &std::sync::atomic::AtomicBool,
) -> (usize, usize) {
    use std::sync::atomic::Ordering;
    let source = Ipv4Addr::new(127, 0, 0, 200);
    let mut conns: Vec<TcpStream> = (0..n)
        .filter_map(|_| connect_from(source, to).ok())
        .collect();
    let opened = conns.len();
    for c in &conns {
        let _ = c.set_nonblocking(true);
    }
    ready.store(true, Ordering::SeqCst);
    let mut header = Vec::new();
    let _ = maat_net::write_frame(
        &mut header,
        maat_proto::wire::FrameHead::new(maat_proto::wire::FrameType::Plain, 1),
        &[0u8; 1000],
    );
    header.truncate(maat_proto::wire::FRAME_HEADER_BYTES);
    let mut i = 0usize;
    loop {
        let at = i % header.len();
        conns.retain_mut(|c| c.write_all(header.get(at..=at).unwrap_or_default()).is_ok());
        i += 1;
        if stop.load(Ordering::SeqCst) && i >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    (opened, conns.len())
}

/// Runs the benchmark.
pub fn run_connections(
    idle: usize,
    attacker_connections: usize,
    ops: u32,
    rounds: u32,
    data: Option<std::path::PathBuf>,
    json: bool,
) -> Result<()> {
    let cluster = LocalCluster::start_with(data, &["--osds", "1", "--kds", "1"])?;
    let admin = cluster.admin()?;
    admin.mkdir("/bench-connections", 0o777, false)?;
    let reader = cluster.admin()?;
    let map = admin.cluster_map()?;
    let targets: [(&str, &str, String); 3] = [
        ("mds", "mds", cluster.file.mds.clone()),
        (
            "osd",
            "osd-1",
            map.osds
                .first()
                .map(|o| o.address.clone())
                .ok_or_else(|| anyhow!("no OSD in the map"))?,
        ),
        (
            "kds",
            "kds-1",
            map.kds
                .first()
                .map(|k| k.address.clone())
                .ok_or_else(|| anyhow!("no KDS in the map"))?,
        ),
    ];
    // Warm both clients (sessions with every daemon) before anything is timed.
    measure(&admin, &reader, 5, "warm")?;
    let mut figures: BTreeMap<String, f64> = BTreeMap::new();
    let mut table = Vec::new();
    for (label, daemon, address) in &targets {
        let to: SocketAddr = address
            .parse()
            .with_context(|| format!("{label} address {address}"))?;
        let pid = pid(&cluster.data, daemon)?;
        // Latencies alone and with the idle connections held.
        let (mut alone, mut loaded): (Samples, Samples) = Default::default();
        let mut rss_per_conn = Vec::new();
        for round in 0..rounds {
            let order: [bool; 2] = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with_idle in order {
                let tag = format!("{label}-{round}-{with_idle}");
                let measured = if with_idle {
                    let before = rss_bytes(&pid)?;
                    let held = hold(to, idle)?;
                    // Let the daemon take them all in.
                    std::thread::sleep(Duration::from_millis(500));
                    let after = rss_bytes(&pid)?;
                    rss_per_conn.push(after.saturating_sub(before) as f64 / idle.max(1) as f64);
                    let m = measure(&admin, &reader, ops, &tag)?;
                    drop(held);
                    m
                } else {
                    measure(&admin, &reader, ops, &tag)?
                };
                let into = if with_idle { &mut loaded } else { &mut alone };
                for (op, v) in measured {
                    into.entry(op).or_default().extend(v);
                }
            }
        }
        // Attacker: one address, as many connections as it may open, trickling.
        let (ready, stop) = (
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
        );
        let (attacked, (opened, still_open)) = std::thread::scope(|s| -> Result<_> {
            let a = s.spawn(|| attacker(to, attacker_connections, &ready, &stop));
            // Every connection open (past the listen backlog, some take a retry of their
            // SYN), then a second of trickling before the work is measured.
            while !ready.load(std::sync::atomic::Ordering::SeqCst) && !a.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_secs(1));
            let m = measure(&admin, &reader, ops, &format!("{label}-attacked"));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let counts = a
                .join()
                .map_err(|_| anyhow!("the attacker thread panicked"))?;
            Ok((m?, counts))
        })?;
        let rss = rss_per_conn.iter().sum::<f64>() / rss_per_conn.len().max(1) as f64;
        figures.insert(format!("{label}_rss_bytes_per_idle_connection"), rss);
        figures.insert(format!("{label}_attacker_opened"), opened as f64);
        figures.insert(format!("{label}_attacker_still_open"), still_open as f64);
        for op in ["open", "put", "get"] {
            let (base, _) = percentiles(alone.get(op).cloned().unwrap_or_default());
            let (with_idle, with_idle_p99) =
                percentiles(loaded.get(op).cloned().unwrap_or_default());
            let (under_attack, _) = percentiles(attacked.get(op).cloned().unwrap_or_default());
            figures.insert(format!("{label}_{op}_us"), base);
            figures.insert(format!("{label}_{op}_us_idle_{idle}"), with_idle);
            figures.insert(format!("{label}_{op}_p99_us_idle_{idle}"), with_idle_p99);
            figures.insert(format!("{label}_{op}_us_attacked"), under_attack);
            figures.insert(
                format!("{label}_{op}_idle_ratio"),
                with_idle / base.max(1e-9),
            );
            figures.insert(
                format!("{label}_{op}_attacked_ratio"),
                under_attack / base.max(1e-9),
            );
            table.push(format!(
                "| {label} | {op} | {base:.0} | {with_idle:.0} | {:.2} | {under_attack:.0} | {:.2} |",
                with_idle / base.max(1e-9),
                under_attack / base.max(1e-9)
            ));
        }
        table.push(format!(
            "| {label} | memory | {rss:.0} bytes per idle connection | attacker opened {opened}, {still_open} still open at the end | | | |"
        ));
    }
    if json {
        let obj: serde_json::Map<String, serde_json::Value> = figures
            .into_iter()
            .map(|(k, v)| (k, serde_json::json!(v)))
            .chain([
                ("idle_connections".to_string(), serde_json::json!(idle)),
                ("ops".to_string(), serde_json::json!(ops)),
                (
                    "attacker_connections".to_string(),
                    serde_json::json!(attacker_connections),
                ),
                ("rounds".to_string(), serde_json::json!(rounds)),
            ])
            .collect();
        println!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    println!(
        "{idle} idle connections against one daemon at a time (its median latency beside the same \
         work without them, {rounds} rounds in alternating order, {ops} of each operation per \
         measurement); then one attacker address opening {attacker_connections} connections and \
         trickling a frame header byte on each every 500 ms"
    );
    println!("| daemon | operation | µs alone | µs with idle | ratio | µs attacked | ratio |");
    println!("|---|---|---|---|---|---|---|");
    for line in table {
        println!("{line}");
    }
    Ok(())
}
