//! `maat bench grouping` (E2, paper 000 Fig. 7, §4.3): a mixed workload. Every 10 clients
//! share a UNIX group; each client writes the 6 files its group shares (mode 0660) and 4
//! files of its own (0600), each `--file-kib` KiB (paper: 5 MB) in 128 KiB chunks. Per
//! client count and grouping setting, on fresh files (a cold capability cache): the mean
//! MDS open latency, the mean write latency, the total write throughput, the exact MDS
//! signatures and OSD verifications, beside NOSEC. Settings: none, UNIX, prediction
//! (Recent Popularity, learnt during the run: the clients of a group open its shared
//! files in the same order, so earlier opens teach the successors of later ones), and
//! combined (UNIX, directory, temporal batching, on-the-fly and prediction).
//!
//! Then a workload whose access order repeats (issue 45: in the mixed one, every client of
//! a group opens the shared files at the same moment, so prediction has nothing learnt
//! yet when it could help): the clients open their group's shared files in the same
//! order one client after another, as job steps that read the same inputs in turn. Per
//! client count, the mean open latency and the exact MDS signatures without grouping and
//! with prediction alone.

use super::{counter, LocalCluster};
use anyhow::{anyhow, bail, Context, Result};
use maat_client::Client;
use maat_proto::msg::Access;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes per write (the paper's chunk).
const CHUNK: u64 = 128 * 1024;
/// Clients per UNIX group (the paper's).
const GROUP: usize = 10;
/// Shared files per group and private files per client (the paper's).
const SHARED: usize = 6;
const PRIVATE: usize = 4;

/// Settings compared: name, grouping strategies (`None`: NOSEC).
const MODES: [(&str, Option<&str>); 5] = [
    ("nosec", None),
    ("none", Some("none")),
    ("unix", Some("unix")),
    ("predict", Some("predict")),
    ("combined", Some("unix,directory,batch,onthefly,predict")),
];
/// Settings of the repeated-order workload: no grouping against prediction alone.
const REPEAT_MODES: [&str; 2] = ["none", "predict"];
/// Where the combined setting's figures start in a row (after the client count).
const COMBINED_AT: usize = 1 + 5 * (MODES.len() - 1);

/// What one client measured: open latencies and write latencies (µs), bytes written.
#[derive(Default)]
struct Sample {
    opens: Vec<f64>,
    writes: Vec<f64>,
    bytes: u64,
}

/// One client's work: open each path for writing (creating its own files 0600), write
/// it in chunks, record the size.
fn work(c: &mut Client, paths: &[String], file_bytes: u64) -> Result<Sample> {
    let mut s = Sample::default();
    for path in paths {
        let t = Instant::now();
        let opened = c.open(path, Access::ReadWrite, Some(0o600))?;
        s.opens.push(t.elapsed().as_secs_f64() * 1e6);
        let mut at = 0;
        while at < file_bytes {
            let len = CHUNK.min(file_bytes - at);
            let t = Instant::now();
            c.write_at(&opened, at, vec![at as u8; len as usize])?;
            s.writes.push(t.elapsed().as_secs_f64() * 1e6);
            at += len;
        }
        c.set_size(path, &opened, file_bytes)?;
        s.bytes += file_bytes;
    }
    Ok(s)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The clients, their NOSEC twins and names.
struct Clients {
    secure: Vec<Client>,
    insecure: Vec<(Client, u64)>,
    names: Vec<String>,
}

/// One setting for the first `n` clients on fresh files (`tag` names them):
/// [mean open µs, mean write µs, MB/s, MDS signatures, OSD verifications].
fn run_mode(
    admin: &mut Client,
    clients: &mut Clients,
    (mode, strategies): (&str, Option<&str>),
    n: usize,
    tag: &str,
    file_bytes: u64,
) -> Result<[f64; 5]> {
    let Clients {
        secure,
        insecure,
        names,
    } = clients;
    let (secure, insecure) = (
        secure.get_mut(..n).unwrap_or_default(),
        insecure.get_mut(..n).unwrap_or_default(),
    );
    // Fresh files: the shared ones made by the administrator for each group.
    let base = format!("/e2/{mode}-{n}-{tag}");
    make_shared(admin, &base, names, n)?;
    if let Some(s) = strategies {
        admin.set_grouping(s)?;
    }
    let mut plans: Vec<Vec<String>> = Vec::with_capacity(n);
    for (i, name) in names.iter().take(n).enumerate() {
        let dir = format!("{base}/g{}", i / GROUP);
        let mut paths: Vec<String> = (0..SHARED).map(|f| format!("{dir}/shared{f}")).collect();
        paths.extend((0..PRIVATE).map(|f| format!("{dir}/{name}-{f}")));
        plans.push(paths);
    }
    let signed = counter(admin, "mds", "signatures_made")?;
    let verified = counter(admin, "osd", "signatures_verified")?;
    let started = Instant::now();
    let samples: Vec<Sample> = std::thread::scope(|s| -> Result<Vec<Sample>> {
        let handles: Vec<_> = if strategies.is_some() {
            secure
                .iter_mut()
                .zip(&plans)
                .map(|(c, paths)| s.spawn(move || work(c, paths, file_bytes)))
                .collect()
        } else {
            insecure
                .iter_mut()
                .zip(&plans)
                .map(|((c, _), paths)| s.spawn(move || work(c, paths, file_bytes)))
                .collect()
        };
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow!("a client thread panicked"))?
                    .with_context(|| format!("mode {mode}"))
            })
            .collect()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let sigs = counter(admin, "mds", "signatures_made")?.saturating_sub(signed);
    let verifs = counter(admin, "osd", "signatures_verified")?.saturating_sub(verified);
    let opens: Vec<f64> = samples.iter().flat_map(|s| s.opens.clone()).collect();
    let writes: Vec<f64> = samples.iter().flat_map(|s| s.writes.clone()).collect();
    let bytes: u64 = samples.iter().map(|s| s.bytes).sum();
    let mb_s = bytes as f64 / 1e6 / seconds.max(1e-9);
    Ok([
        mean(&opens),
        mean(&writes),
        mb_s,
        sigs as f64,
        verifs as f64,
    ])
}

/// Makes `base` and in it, for each group of the first `n` clients, `g<G>/shared<F>`:
/// empty, owned by the group's first client and the group `e2g<G>`, mode 0660. Made with
/// grouping off: under prediction the MDS would learn the administrator's creation order
/// as one more walk of the chain (found at 140 clients, where the administrator's
/// reserved ids ran out and its creates went through capability issue: from the 9th group
/// on, 3 clients taught the chain instead of 4).
fn make_shared(admin: &mut Client, base: &str, names: &[String], n: usize) -> Result<()> {
    admin.set_grouping("none")?;
    admin.mkdir(base, 0o777, false)?;
    for g in 0..n.div_ceil(GROUP) {
        let dir = format!("{base}/g{g}");
        admin.mkdir(&dir, 0o777, false)?;
        let owner = names.get(g * GROUP).ok_or_else(|| anyhow!("no owner"))?;
        for f in 0..SHARED {
            let path = format!("{dir}/shared{f}");
            admin.put(&mut &b""[..], 0, &path, &mut |_| {})?;
            admin.chown(&path, Some(owner), Some(&format!("e2g{g}")))?;
            admin.chmod(&path, 0o660)?;
        }
    }
    Ok(())
}

/// The repeated-order workload under `strategies` for the first `n` clients, on fresh
/// files: each client in turn opens its group's shared files in order. [mean open µs,
/// MDS signatures].
fn run_repeated(
    admin: &mut Client,
    clients: &mut Clients,
    strategies: &str,
    n: usize,
    tag: &str,
) -> Result<[f64; 2]> {
    let base = format!("/e2/repeat-{strategies}-{n}-{tag}");
    make_shared(admin, &base, &clients.names, n)?;
    admin.set_grouping(strategies)?;
    let signed = counter(admin, "mds", "signatures_made")?;
    let mut opens = Vec::with_capacity(n * SHARED);
    for (i, c) in clients.secure.iter_mut().take(n).enumerate() {
        let dir = format!("{base}/g{}", i / GROUP);
        for f in 0..SHARED {
            let t = Instant::now();
            c.open(&format!("{dir}/shared{f}"), Access::ReadWrite, None)?;
            opens.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let sigs = counter(admin, "mds", "signatures_made")?.saturating_sub(signed);
    Ok([mean(&opens), sigs as f64])
}

pub(super) fn run_grouping(
    sizes: &[u32],
    file_kib: u64,
    rounds: u32,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    if largest == 0 || largest > 1000 || file_kib == 0 {
        bail!("--clients must be between 1 and 1000, --file-kib at least 1");
    }
    let file_bytes = file_kib * 1024;
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    admin.mkdir("/e2", 0o777, false)?;
    if !json {
        eprintln!("bench grouping: adding and logging in {largest} users");
    }
    let users = cluster.logged_in_users("e2u", 0..largest)?;
    let groups = largest.div_ceil(GROUP);
    for g in 0..groups {
        let group = format!("e2g{g}");
        admin.group_add(&group)?;
        for (name, _) in users.iter().skip(g * GROUP).take(GROUP) {
            admin.group_member_add(&group, name)?;
        }
    }
    let mut secure = Vec::with_capacity(largest);
    let mut insecure = Vec::with_capacity(largest);
    let mut names = Vec::with_capacity(largest);
    // The MDS reads a user's groups at every request: memberships added after the
    // logins apply at once.
    for (name, c) in users {
        let uid = c.uid().ok_or_else(|| anyhow!("no uid after login"))?;
        // Sessions with every OSD first: no setting pays for them.
        c.connect_osds()?;
        names.push(name);
        secure.push(c);
        let mut i = Client::new(cluster.file.clone(), None)?;
        i.danger_insecure_as(uid);
        // The NOSEC twin starts as warm: connected to the MDS, the map fetched, every
        // OSD connected (issue 45: it paid for these inside the timed window).
        i.stat("/e2")?;
        i.connect_osds()?;
        insecure.push((i, uid));
    }
    let mut clients = Clients {
        secure,
        insecure,
        names,
    };
    let mut obj = serde_json::Map::new();
    let mut rows = Vec::new();
    let mut repeated = Vec::new();
    for &n in sizes {
        let n = n as usize;
        let mut sums = [[0f64; 5]; MODES.len()];
        let mut repeat_sums = [[0f64; 2]; REPEAT_MODES.len()];
        for round in 0..rounds {
            // Forward, then backward: a store growing during the run favours no setting.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..MODES.len()).collect()
            } else {
                (0..MODES.len()).rev().collect()
            };
            for m in order {
                let mode = MODES.get(m).copied().ok_or_else(|| anyhow!("mode"))?;
                let got = run_mode(
                    &mut admin,
                    &mut clients,
                    mode,
                    n,
                    &format!("r{round}"),
                    file_bytes,
                )?;
                if let Some(sum) = sums.get_mut(m) {
                    for (acc, v) in sum.iter_mut().zip(got) {
                        *acc += v;
                    }
                }
            }
            for k in 0..REPEAT_MODES.len() {
                let m = if round % 2 == 0 {
                    k
                } else {
                    REPEAT_MODES.len() - 1 - k
                };
                let strategies = REPEAT_MODES
                    .get(m)
                    .copied()
                    .ok_or_else(|| anyhow!("mode"))?;
                let got = run_repeated(
                    &mut admin,
                    &mut clients,
                    strategies,
                    n,
                    &format!("r{round}"),
                )?;
                if let Some(sum) = repeat_sums.get_mut(m) {
                    for (acc, v) in sum.iter_mut().zip(got) {
                        *acc += v;
                    }
                }
            }
        }
        let mut repeat_row = vec![n as f64];
        for (mode, sum) in REPEAT_MODES.iter().zip(repeat_sums) {
            let [open_us, sigs] = sum.map(|v| v / f64::from(rounds));
            obj.insert(format!("repeat_open_{mode}_us_{n}"), open_us.into());
            obj.insert(format!("repeat_signatures_{mode}_{n}"), sigs.into());
            repeat_row.extend([open_us, sigs]);
        }
        repeated.push(repeat_row);
        let mut row = vec![n as f64];
        for ((mode, _), sum) in MODES.iter().zip(sums) {
            let [open_us, write_us, mb_s, sigs, verifs] = sum.map(|v| v / f64::from(rounds));
            obj.insert(format!("open_{mode}_us_{n}"), open_us.into());
            obj.insert(format!("write_{mode}_us_{n}"), write_us.into());
            obj.insert(format!("write_{mode}_mb_s_{n}"), mb_s.into());
            obj.insert(format!("signatures_{mode}_{n}"), sigs.into());
            obj.insert(format!("osd_verifications_{mode}_{n}"), verifs.into());
            row.extend([open_us, write_us, mb_s, sigs, verifs]);
        }
        if let (Some(nosec), Some(combined)) = (row.get(1).copied(), row.get(COMBINED_AT).copied())
        {
            obj.insert(
                format!("open_combined_over_nosec_{n}"),
                (combined / nosec.max(1e-9)).into(),
            );
        }
        rows.push(row);
    }
    admin.set_grouping("unix,onthefly")?;
    if json {
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "E2 mixed workload: per client {SHARED} group-shared + {PRIVATE} private files of \
         {file_kib} KiB in 128 KiB writes; groups of {GROUP}"
    );
    say!("(mean open µs, mean write µs, total write MB/s, MDS signatures, OSD verifications)");
    say!(
        "{:>7} | {:>30} | {:>30} | {:>30} | {:>30} | {:>30}",
        "clients",
        "NOSEC",
        "no grouping",
        "UNIX",
        "prediction",
        "combined"
    );
    for r in rows {
        let cell = |i: usize| -> String {
            match r.get(i..i + 5) {
                Some([o, w, t, s, v]) => format!("{o:>6.0} {w:>6.0} {t:>6.1} {s:>4} {v:>5}"),
                _ => String::new(),
            }
        };
        say!(
            "{:>7} | {:>30} | {:>30} | {:>30} | {:>30} | {:>30}",
            r.first().copied().unwrap_or(0.0),
            cell(1),
            cell(6),
            cell(11),
            cell(16),
            cell(21)
        );
    }
    say!(
        "repeated order: the clients, one after another, open their group's {SHARED} shared \
         files in the same order (mean open µs, MDS signatures)"
    );
    say!(
        "{:>7} | {:>18} | {:>18}",
        "clients",
        "no grouping",
        "prediction"
    );
    for r in repeated {
        if let [n, none_us, none_sigs, predict_us, predict_sigs] = r.as_slice() {
            say!("{n:>7} | {none_us:>8.0} {none_sigs:>9} | {predict_us:>8.0} {predict_sigs:>9}");
        }
    }
    Ok(())
}
