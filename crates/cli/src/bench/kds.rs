//! `maat bench kds` (E9, paper 004 Fig. 5–6): how many range keys a KDS hands out per
//! second, from one and from two instances, as client threads grow, with single requests
//! (one file, one level-0 key) and batched ones (many files per request, every node of a
//! deeper level per file); then the request-level sweep (SPEC H8): keys and time per
//! request as the level asked for moves from the root towards the leaves; then paper 004's
//! branch and depth sweep (Fig. 6, Table 1): for key trees of 4 KiB leaves, branching 2
//! to 16 and depth 3 to 11, every leaf key of a file's first `--sweep-mib` MiB obtained
//! by asking a real KDS for the leaf level, level 0, or level 4 and deriving the rest here
//! (the KDS is handed a lockbox made for that shape: `Client::request_keys_with_shape`).
//!
//! Every key counted was granted by a KDS and checked by the client (the grant opened
//! with the login's X25519 key, its KDS signature verified, the file matched), so the
//! figures include the client's side of each request. Client threads and KDS instances
//! share this machine's cores, so each measurement also reads the KDS instances' own CPU
//! time from `/proc` (issue 45): requests per second of KDS CPU is what one KDS core
//! serves, whatever the clients beside it take.

use super::LocalCluster;
use anyhow::{anyhow, bail, Result};
use maat_client::{Client, Opened};
use maat_crypto::kht::{KeyedHashAlg, KhtShape, Node, RangeKey};
use maat_proto::msg::Access;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What one measurement asks per request.
#[derive(Clone, Copy)]
enum Shape {
    /// One file, its one level-0 key.
    Single,
    /// `files` files, every node of `level` of each.
    Batched { files: usize, level: u8 },
}

/// (keys granted, requests, seconds) with `clients` asking at once for `seconds`, each
/// client over the files of `sets[i % sets.len()]` (one set per KDS instance used).
fn measure(
    clients: &mut [Client],
    sets: &[Vec<Opened>],
    shape: Shape,
    seconds: u64,
) -> Result<(u64, u64, f64)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let set = sets.get(i % sets.len().max(1)).cloned().unwrap_or_default();
                s.spawn(move || -> Result<(u64, u64)> {
                    let (files, level) = match shape {
                        Shape::Single => (1, 0),
                        Shape::Batched { files, level } => (files, level),
                    };
                    let batch = set
                        .get(..files.min(set.len()))
                        .ok_or_else(|| anyhow!("no files"))?;
                    let (mut keys, mut requests) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        keys += c.request_keys_batch(batch, level)? as u64;
                        requests += 1;
                    }
                    Ok((keys, requests))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a client panicked")))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let (mut keys, mut requests) = (0, 0);
    for r in results {
        let (k, q) = r?;
        keys += k;
        requests += q;
    }
    Ok((keys, requests, secs))
}

/// The arguments of `maat bench kds`.
pub(super) struct KdsArgs {
    pub threads: Vec<u32>,
    pub seconds: u64,
    pub batch_files: u32,
    pub batch_level: u8,
    /// Bytes of the file whose leaf keys the shape sweep obtains (0: no sweep).
    pub sweep_bytes: u64,
}

/// Branching (log2) and depth of the key trees the shape sweep measures (4 KiB leaves,
/// as the paper's).
const SWEEP_BRANCHING_LOG2: [u8; 4] = [1, 2, 3, 4];
const SWEEP_DEPTHS: [u8; 5] = [3, 5, 7, 9, 11];

/// The key of every leaf under `keys` (one level of `shape`, ascending) that holds a byte
/// of the first `size` bytes, derived one level at a time: how many.
fn derive_leaves(shape: &KhtShape, keys: Vec<RangeKey>, size: u64) -> Result<u64> {
    let mut frontier = keys;
    let Some(mut level) = frontier.first().map(|k| k.node.level) else {
        return Ok(0);
    };
    while level < shape.leaf_level() {
        let shift = shape.region_size_log2(level)? - shape.region_size_log2(level + 1)?;
        let end = shape.node_at(level + 1, size.saturating_sub(1))?.index + 1;
        let mut next = Vec::with_capacity(frontier.len() << shift);
        for k in &frontier {
            let first = k.node.index << shift;
            for index in first..((k.node.index + 1) << shift).min(end) {
                let node = Node {
                    level: level + 1,
                    index,
                };
                next.push(shape.derive(k, node)?);
            }
        }
        frontier = next;
        level += 1;
    }
    Ok(frontier.len() as u64)
}

/// One point of the shape sweep: (keys asked of the KDS, keys derived here, seconds) to
/// obtain every leaf key of the first `size` bytes asking for level `level`.
fn shape_point(
    client: &Client,
    file: &Opened,
    shape: &KhtShape,
    level: u8,
    size: u64,
) -> Result<(u64, u64, f64)> {
    let last = shape.node_at(level, size - 1)?.index;
    let max = maat_proto::limits::RANGE_GRANT_NODES_MAX as u64;
    let start = Instant::now();
    let (mut asked, mut derived) = (0u64, 0u64);
    let mut first = 0;
    while first <= last {
        let end = (first + max).min(last + 1);
        let nodes: Vec<(u8, u64)> = (first..end).map(|i| (level, i)).collect();
        let keys = client.request_keys_with_shape(file, shape, nodes)?;
        if keys.len() as u64 != end - first {
            bail!("the KDS granted {} keys of {}", keys.len(), end - first);
        }
        asked += keys.len() as u64;
        if level < shape.leaf_level() {
            derived += derive_leaves(shape, keys, size)?;
        }
        first = end;
    }
    Ok((asked, derived, start.elapsed().as_secs_f64()))
}

pub(super) fn run_kds(args: KdsArgs, data: Option<PathBuf>, json: bool) -> Result<()> {
    let KdsArgs {
        threads,
        seconds,
        batch_files,
        batch_level,
        sweep_bytes,
    } = args;
    if threads.is_empty() || threads.iter().any(|&t| t == 0 || t > 256) {
        bail!("--threads takes counts from 1 to 256");
    }
    if seconds == 0 || batch_files == 0 || batch_files > 256 {
        bail!("--seconds must be at least 1 and --batch-files from 1 to 256");
    }
    let cluster = LocalCluster::start_with(data, &["--kds", "2"])?;
    let admin = cluster.admin()?;
    admin.mkdir("/bench-kds", 0o755, true)?;
    // Files whose requests go to KDS 1 (even ids) and to KDS 2 (odd ids): a client sends
    // its request to the instance its first file picks.
    let mut sets: [Vec<Opened>; 2] = [Vec::new(), Vec::new()];
    let mut i = 0;
    while sets.iter().any(|s| s.len() < batch_files as usize) {
        let path = format!("/bench-kds/{i}");
        admin.put_with(&mut &b"keys"[..], 4, &path, Some(true), &mut |_| {})?;
        let opened = admin.open(&path, Access::Read, None)?;
        if let Some(set) = sets.get_mut((opened.stat.id % 2) as usize) {
            if set.len() < batch_files as usize {
                set.push(opened);
            }
        }
        i += 1;
        if i > 4 * batch_files + 16 {
            bail!("file ids do not alternate between the two KDS instances");
        }
    }
    let most = threads.iter().copied().max().unwrap_or(1) as usize;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut clients = Vec::with_capacity(most);
    for _ in 0..most {
        clients.push(cluster.admin()?);
    }
    // Keys are requested with the capabilities of the administrator's opens: every
    // client is the administrator (another login each).
    let batched = Shape::Batched {
        files: batch_files as usize,
        level: batch_level,
    };
    let mut out = serde_json::Map::new();
    let mut rows = Vec::new();
    // One KDS and two take turns, the order swapped at every step (issue 45: one KDS
    // always ran first), so a machine getting slower or faster favours neither.
    let mut step = 0usize;
    for (kind, shape) in [("single", Shape::Single), ("batched", batched)] {
        for &t in &threads {
            let order: [usize; 2] = if step % 2 == 0 { [1, 2] } else { [2, 1] };
            step += 1;
            for instances in order {
                let t = t as usize;
                let used = sets.get(..instances).unwrap_or(&sets[..]);
                let clients = clients
                    .get_mut(..t)
                    .ok_or_else(|| anyhow!("too few clients"))?;
                if !json {
                    eprintln!(
                        "bench kds: {kind} requests, {t} threads, {instances} KDS, {seconds} s"
                    );
                }
                let kds_cpu = |cluster: &LocalCluster| -> Result<f64> {
                    (1..=instances)
                        .map(|k| cluster.daemon_cpu_secs(&format!("kds-{k}")))
                        .sum()
                };
                let me = std::process::id().to_string();
                let (cpu0, mine0) = (kds_cpu(&cluster)?, super::cpu_secs(&me)?);
                let (keys, requests, secs) = measure(clients, used, shape, seconds)?;
                let cpu = kds_cpu(&cluster)? - cpu0;
                // The clients' CPU (this process): with the KDS's, what a request costs
                // both sides, so what this machine's cores could serve at that cost. It
                // equals the measured rate when the two fill every core (saturated); the
                // MDS, OSDs and other load are not in it.
                let clients_cpu = super::cpu_secs(&me)? - mine0;
                let machine_most = cores * requests as f64 / (cpu + clients_cpu).max(1e-9);
                out.insert(
                    format!("clients_cpu_s_{kind}_{instances}kds_{t}"),
                    clients_cpu.into(),
                );
                out.insert(
                    format!("requests_s_cores_most_{kind}_{instances}kds_{t}"),
                    machine_most.into(),
                );
                let keys_s = keys as f64 / secs;
                let req_s = requests as f64 / secs;
                // Requests per second of KDS CPU: what one core of KDS serves.
                let per_cpu_s = requests as f64 / cpu.max(1e-9);
                out.insert(format!("kds_cpu_s_{kind}_{instances}kds_{t}"), cpu.into());
                out.insert(
                    format!("requests_per_kds_cpu_s_{kind}_{instances}kds_{t}"),
                    per_cpu_s.into(),
                );
                out.insert(format!("keys_s_{kind}_{instances}kds_{t}"), keys_s.into());
                out.insert(
                    format!("requests_s_{kind}_{instances}kds_{t}"),
                    req_s.into(),
                );
                rows.push((
                    instances,
                    kind,
                    t,
                    keys_s,
                    req_s,
                    keys / requests.max(1),
                    cpu / secs,
                    per_cpu_s,
                    machine_most,
                ));
            }
        }
    }
    // The level sweep: one client, one file per request, every node of the level.
    let mut sweep = Vec::new();
    let one = [sets
        .first()
        .and_then(|s| s.get(..1))
        .ok_or_else(|| anyhow!("no file"))?
        .to_vec()];
    let client = clients
        .get_mut(..1)
        .ok_or_else(|| anyhow!("too few clients"))?;
    for level in 0..=5u8 {
        let shape = Shape::Batched { files: 1, level };
        let (keys, requests, secs) = measure(client, &one, shape, seconds.min(2))?;
        let per_request = keys / requests.max(1);
        let us = secs * 1e6 / requests.max(1) as f64;
        out.insert(
            format!("level_{level}_keys_per_request"),
            per_request.into(),
        );
        out.insert(format!("level_{level}_us_per_request"), us.into());
        out.insert(format!("level_{level}_keys_s"), (keys as f64 / secs).into());
        sweep.push((level, per_request, us, keys as f64 / secs));
    }
    // Paper 004's branch and depth sweep.
    let mut shapes = Vec::new();
    if sweep_bytes > 0 {
        let client = clients.first().ok_or_else(|| anyhow!("no client"))?;
        let file = one
            .first()
            .and_then(|s| s.first())
            .ok_or_else(|| anyhow!("no file"))?;
        for branching in SWEEP_BRANCHING_LOG2 {
            for depth in SWEEP_DEPTHS {
                let shape = KhtShape::new(
                    KeyedHashAlg::Blake3,
                    12,
                    vec![branching; usize::from(depth - 1)],
                )?;
                let leaf = shape.leaf_level();
                // The leaf level, level 0 and level 4 (in a tree of 5 levels or fewer,
                // level 4 is the leaf level: measured once).
                let mut levels = vec![leaf, 0];
                if leaf > 4 {
                    levels.push(4);
                }
                for level in levels {
                    if !json {
                        eprintln!(
                            "bench kds: shape branch {} depth {depth}, level {level}",
                            1u32 << branching
                        );
                    }
                    let (asked, derived, secs) =
                        shape_point(client, file, &shape, level, sweep_bytes)?;
                    let leaves = sweep_bytes.div_ceil(shape.leaf_size_bytes());
                    let keys_s = leaves as f64 / secs;
                    let tag = format!("shape_b{}_d{depth}_l{level}", 1u32 << branching);
                    out.insert(format!("{tag}_requested"), asked.into());
                    out.insert(format!("{tag}_calculated"), derived.into());
                    out.insert(format!("{tag}_keys_s"), keys_s.into());
                    shapes.push((1u32 << branching, depth, level, asked, derived, keys_s));
                }
            }
        }
    }
    if json {
        out.insert("sweep_bytes".into(), sweep_bytes.into());
        out.insert("batch_files".into(), batch_files.into());
        out.insert("batch_level".into(), batch_level.into());
        say!("{}", serde_json::Value::Object(out));
        return Ok(());
    }
    say!(
        "range keys per second; single: 1 file, its level-0 key per request; batched: {batch_files} files, every level-{batch_level} node of each, per request"
    );
    say!(
        "(KDS cores: CPU seconds the KDS instances used per second of the run, from /proc; \
         per KDS core: requests per second of KDS CPU, what one core of KDS serves; \
         cores most: this machine's cores over the CPU a request cost the KDS and the clients \
         together, which equals requests/s when the two fill every core)"
    );
    say!(
        "{:>4} {:<8} {:>8} {:>14} {:>12} {:>13} {:>10} {:>14} {:>12}",
        "KDS",
        "requests",
        "threads",
        "keys/s",
        "requests/s",
        "keys/request",
        "KDS cores",
        "req/s per core",
        "cores most"
    );
    // Printed by KDS count, then kind, then threads, whatever order they ran in.
    rows.sort_by_key(|r| (r.0, r.1 != "single", r.2));
    for (instances, kind, t, keys_s, req_s, per, cores, per_core, most) in rows {
        say!(
            "{instances:>4} {kind:<8} {t:>8} {keys_s:>14.0} {req_s:>12.0} {per:>13} {cores:>10.2} {per_core:>14.0} {most:>12.0}"
        );
    }
    say!("request level sweep (SPEC H8): one client, one file per request, one KDS");
    say!(
        "{:>6} {:>13} {:>12} {:>12}",
        "level",
        "keys/request",
        "µs/request",
        "keys/s"
    );
    for (level, per, us, keys_s) in sweep {
        say!("{level:>6} {per:>13} {us:>12.0} {keys_s:>12.0}");
    }
    if !shapes.is_empty() {
        say!(
            "key tree shapes (paper 004 Fig. 6, Table 1): every 4 KiB leaf key of {} MiB, one client \
             thread, one KDS; level = the level asked for (leaf, 0, 4), the rest derived here",
            sweep_bytes >> 20
        );
        say!(
            "{:>7} {:>6} {:>6} {:>12} {:>12} {:>12}",
            "branch",
            "depth",
            "level",
            "requested",
            "calculated",
            "leaf keys/s"
        );
        for (branch, depth, level, asked, derived, keys_s) in shapes {
            say!("{branch:>7} {depth:>6} {level:>6} {asked:>12} {derived:>12} {keys_s:>12.0}");
        }
    }
    Ok(())
}
