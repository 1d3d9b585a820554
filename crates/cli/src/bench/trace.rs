//! `maat bench trace` (E7, paper 002 §7): a trace-shaped workload of many clients running
//! the same simulation, as in the LLNL trace the paper replayed (that trace is not
//! public; this is a synthetic stand-in with its proportions). Clients, each its own
//! user, are in UNIX groups of [`GROUP`] ("teams"). Each client lists its directories,
//! reads [`INPUTS`] shared input files (0644, the administrator's) and writes its own
//! region of its team's [`OUTPUTS`] shared output files (0660, group-writable), then
//! records their size: about 90 MDS requests and, by default, 1,800 I/Os per client, to
//! a small set of files, all clients at once. Every client opens the first input first:
//! the hot file.
//!
//! Per setting, on fresh files: the exact MDS signatures, MDS capability-cache hits and
//! misses, OSD capability verifications, the MDS hit ratio over time (after 1, 5, 10, 25,
//! 50 and 100 % of the opens), the aggregate open latency of the hot file, and the wall
//! time beside NOSEC (run first and again last, the mean of the two; its clients start as
//! warm as the secure ones: MDS and every OSD connected). Settings: no grouping; UNIX; Recent Popularity prediction (the
//! MDS's own); prediction with clients sending the next files they open; and every
//! strategy together with client predictions.

use super::{sum_counter, LocalCluster};
use anyhow::{anyhow, bail, Context, Result};
use maat_client::Client;
use maat_proto::msg::Access;
use std::path::PathBuf;
use std::time::Instant;

/// Clients per UNIX group.
const GROUP: usize = 32;
/// Input files every client reads, and output files every team shares.
const INPUTS: usize = 30;
const OUTPUTS: usize = 30;
/// How many of its next files a client names with an open (when it sends predictions).
const HINTS: usize = 8;
/// Points of the hit-ratio curve, percent of all opens.
const CURVE: [u32; 6] = [1, 5, 10, 25, 50, 100];

/// A setting: name, grouping strategies (`None`: NOSEC), whether clients send predictions.
type Setting = (&'static str, Option<&'static str>, bool);
const SETTINGS: [Setting; 6] = [
    ("nosec", None, false),
    ("none", Some("none"), false),
    ("unix", Some("unix"), false),
    ("predict", Some("predict"), false),
    ("client_predict", Some("predict"), true),
    ("all_strategies", Some("all"), true),
];

/// One open: when it completed (µs since the start), its latency (µs), whether the MDS
/// answered it from its capability cache, whether it was of the hot file.
struct OpenEvent {
    done_us: f64,
    latency_us: f64,
    mds_hit: bool,
    hot: bool,
}

/// Where a client works.
struct Plan {
    run: String,
    team: String,
    rank: usize,
}

/// The bytes a client reads or writes per file: `per_file` I/Os of `io` bytes.
struct Shape {
    per_file: usize,
    io: usize,
}

fn names(dir: &str, prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{dir}/{prefix}{i}")).collect()
}

/// The next files after `i` in `list` (the client's own prediction), when it sends them.
fn hints(list: &[String], i: usize, send: bool) -> Vec<String> {
    if !send {
        return Vec::new();
    }
    list.iter().skip(i + 1).take(HINTS).cloned().collect()
}

/// One client's run of the application.
fn work(
    c: &mut Client,
    plan: &Plan,
    shape: &Shape,
    send_hints: bool,
    started: Instant,
) -> Result<Vec<OpenEvent>> {
    let mut events = Vec::with_capacity(INPUTS + OUTPUTS);
    c.stat(&plan.run)?;
    c.readdir(&format!("{}/in", plan.run))?;
    c.readdir(&plan.team)?;
    let inputs = names(&format!("{}/in", plan.run), "in", INPUTS);
    let outputs = names(&plan.team, "out", OUTPUTS);
    let io = shape.io as u64;
    let mut open = |c: &mut Client, list: &[String], i: usize, access| -> Result<_> {
        let path = list.get(i).ok_or_else(|| anyhow!("no file {i}"))?;
        let t = Instant::now();
        let opened = c.open_predicting(path, access, None, &hints(list, i, send_hints))?;
        events.push(OpenEvent {
            done_us: started.elapsed().as_secs_f64() * 1e6,
            latency_us: t.elapsed().as_secs_f64() * 1e6,
            mds_hit: opened.mds_cached,
            hot: access == Access::Read && i == 0,
        });
        Ok(opened)
    };
    for i in 0..INPUTS {
        let opened = open(c, &inputs, i, Access::Read)?;
        for j in 0..shape.per_file {
            let at = ((plan.rank + j) % shape.per_file) as u64 * io;
            c.read_at(&opened, at, shape.io as u32)?;
        }
    }
    let region = (plan.rank * shape.per_file) as u64 * io;
    for (o, path) in outputs.iter().enumerate() {
        let opened = open(c, &outputs, o, Access::ReadWrite)?;
        for j in 0..shape.per_file {
            c.write_at(&opened, region + j as u64 * io, vec![j as u8; shape.io])?;
        }
        c.set_size(path, &opened, (GROUP * shape.per_file) as u64 * io)?;
    }
    Ok(events)
}

/// What one setting measured.
struct Outcome {
    seconds: f64,
    signatures: u64,
    hits: u64,
    misses: u64,
    verifications: u64,
    hot_aggregate_ms: f64,
    curve: Vec<f64>,
    opens: usize,
}

/// Fresh files for `tag`: the inputs (the administrator's, 0644, with `shape`'s bytes)
/// and each team's outputs (its first member's, group-writable).
fn make_files(
    admin: &mut Client,
    users: &[(String, Client)],
    teams: usize,
    tag: &str,
    shape: &Shape,
) -> Result<String> {
    let run = format!("/e7/{tag}");
    admin.mkdir(&run, 0o755, false)?;
    admin.mkdir(&format!("{run}/in"), 0o755, false)?;
    let content = vec![7u8; shape.per_file * shape.io];
    for path in names(&format!("{run}/in"), "in", INPUTS) {
        admin.put(&mut &content[..], content.len() as u64, &path, &mut |_| {})?;
        admin.chmod(&path, 0o644)?;
    }
    for t in 0..teams {
        let dir = format!("{run}/t{t}");
        admin.mkdir(&dir, 0o777, false)?;
        let owner = &users.get(t * GROUP).ok_or_else(|| anyhow!("no owner"))?.0;
        for path in names(&dir, "out", OUTPUTS) {
            admin.put(&mut &b""[..], 0, &path, &mut |_| {})?;
            admin.chown(&path, Some(owner), Some(&format!("e7t{t}")))?;
            admin.chmod(&path, 0o660)?;
        }
    }
    Ok(run)
}

fn run_setting(
    admin: &mut Client,
    users: &mut [(String, Client)],
    insecure: &mut [Client],
    setting: Setting,
    tag: &str,
    shape: &Shape,
) -> Result<Outcome> {
    let (name, strategies, send_hints) = setting;
    if let Some(s) = strategies {
        admin.set_grouping(s)?;
    }
    let teams = users.len().div_ceil(GROUP);
    let run = make_files(admin, users, teams, tag, shape)?;
    let plans: Vec<Plan> = (0..users.len())
        .map(|k| Plan {
            run: run.clone(),
            team: format!("{run}/t{}", k / GROUP),
            rank: k % GROUP,
        })
        .collect();
    let before = admin.daemon_stats()?;
    let started = Instant::now();
    let clients: Vec<&mut Client> = if strategies.is_some() {
        users.iter_mut().map(|(_, c)| c).collect()
    } else {
        insecure.iter_mut().collect()
    };
    let events: Vec<OpenEvent> = std::thread::scope(|s| -> Result<Vec<OpenEvent>> {
        let handles: Vec<_> = clients
            .into_iter()
            .zip(&plans)
            .map(|(c, plan)| s.spawn(move || work(c, plan, shape, send_hints, started)))
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(
                h.join()
                    .map_err(|_| anyhow!("a client thread panicked"))?
                    .with_context(|| format!("setting {name}"))?,
            );
        }
        Ok(all)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let after = admin.daemon_stats()?;
    let delta = |prefix: &str, counter: &str| -> Result<u64> {
        Ok(sum_counter(&after, prefix, counter)?
            .saturating_sub(sum_counter(&before, prefix, counter)?))
    };
    let mut order: Vec<&OpenEvent> = events.iter().collect();
    order.sort_by(|a, b| a.done_us.total_cmp(&b.done_us));
    let curve = CURVE
        .iter()
        .map(|pct| {
            let n = (order.len() * *pct as usize).div_ceil(100).max(1);
            let first = order.get(..n).unwrap_or(&order[..]);
            first.iter().filter(|e| e.mds_hit).count() as f64 / first.len().max(1) as f64
        })
        .collect();
    Ok(Outcome {
        seconds,
        signatures: delta("mds", "signatures_made")?,
        hits: delta("mds", "capability_cache_hits")?,
        misses: delta("mds", "capability_cache_misses")?,
        verifications: delta("osd", "signatures_verified")?,
        hot_aggregate_ms: events
            .iter()
            .filter(|e| e.hot)
            .map(|e| e.latency_us)
            .sum::<f64>()
            / 1e3,
        curve,
        opens: events.len(),
    })
}

pub(super) fn run_trace(
    clients: u32,
    ios: u32,
    io_bytes: u32,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let n = clients as usize;
    let per_file = ios as usize / (INPUTS + OUTPUTS);
    if n == 0 || n > 1000 {
        bail!("--clients must be between 1 and 1000");
    }
    if per_file == 0 || io_bytes == 0 || io_bytes > 1 << 20 {
        bail!(
            "--ios must be at least {} (one per file) and --io-bytes between 1 and 1 MiB",
            INPUTS + OUTPUTS
        );
    }
    let shape = Shape {
        per_file,
        io: io_bytes as usize,
    };
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    admin.mkdir("/e7", 0o755, false)?;
    if !json {
        eprintln!("bench trace: adding and logging in {n} users");
    }
    let mut users = cluster.logged_in_users("e7u", 0..n)?;
    let teams = n.div_ceil(GROUP);
    for t in 0..teams {
        let group = format!("e7t{t}");
        admin.group_add(&group)?;
        for (name, _) in users.iter().skip(t * GROUP).take(GROUP) {
            admin.group_member_add(&group, name)?;
        }
    }
    let mut insecure = Vec::with_capacity(n);
    for (_, c) in users.iter_mut() {
        let uid = c.uid().ok_or_else(|| anyhow!("no uid after login"))?;
        // Sessions with every OSD first: no setting pays for them.
        c.connect_osds()?;
        let mut i = Client::new(cluster.file.clone(), None)?;
        i.danger_insecure_as(uid);
        // The NOSEC twin as warm: MDS connected, map fetched, every OSD connected
        // (issue 45: it paid for these inside the timed window).
        i.stat("/e7")?;
        i.connect_osds()?;
        insecure.push(i);
    }
    let mut outcomes = Vec::with_capacity(SETTINGS.len());
    for setting in SETTINGS {
        if !json {
            eprintln!("bench trace: {} ...", setting.0);
        }
        outcomes.push(run_setting(
            &mut admin,
            &mut users,
            &mut insecure,
            setting,
            setting.0,
            &shape,
        )?);
    }
    // NOSEC first and again last (issue 45): a cluster that warms up or fills during the
    // run favours neither side; its figures are the mean of the two.
    if !json {
        eprintln!("bench trace: nosec again ...");
    }
    let (first, last) = {
        let last = run_setting(
            &mut admin,
            &mut users,
            &mut insecure,
            SETTINGS[0],
            "nosec-last",
            &shape,
        )?;
        let first = outcomes
            .first_mut()
            .ok_or_else(|| anyhow!("no NOSEC run"))?;
        let seconds = (first.seconds, last.seconds);
        first.seconds = (first.seconds + last.seconds) / 2.0;
        first.hot_aggregate_ms = (first.hot_aggregate_ms + last.hot_aggregate_ms) / 2.0;
        seconds
    };
    admin.set_grouping("unix,onthefly")?;
    let nosec_s = outcomes.first().map_or(1.0, |o| o.seconds).max(1e-9);
    let mut obj = serde_json::Map::new();
    obj.insert("seconds_nosec_first".into(), first.into());
    obj.insert("seconds_nosec_last".into(), last.into());
    for ((name, strategies, _), o) in SETTINGS.iter().zip(&outcomes) {
        obj.insert(format!("seconds_{name}"), o.seconds.into());
        obj.insert(
            format!("time_over_nosec_{name}"),
            (o.seconds / nosec_s).into(),
        );
        obj.insert(
            format!("hot_open_aggregate_ms_{name}"),
            o.hot_aggregate_ms.into(),
        );
        if strategies.is_none() {
            continue;
        }
        let ratio = o.hits as f64 / (o.hits + o.misses).max(1) as f64;
        obj.insert(format!("osd_verifications_{name}"), o.verifications.into());
        obj.insert(format!("mds_signatures_{name}"), o.signatures.into());
        obj.insert(format!("mds_cache_hits_{name}"), o.hits.into());
        obj.insert(format!("mds_cache_misses_{name}"), o.misses.into());
        obj.insert(format!("mds_hit_ratio_{name}"), ratio.into());
        for (pct, r) in CURVE.iter().zip(&o.curve) {
            obj.insert(format!("mds_hit_ratio_{name}_at_{pct}pct"), (*r).into());
        }
    }
    if json {
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    let opens = outcomes.get(1).map_or(0, |o| o.opens);
    say!(
        "E7 trace-shaped workload: {n} clients in teams of {GROUP}; each lists 3 directories, \
         reads {INPUTS} shared inputs and writes {OUTPUTS} team-shared outputs, {per_file} I/Os \
         of {io_bytes} B per file ({} per client); {opens} opens per setting",
        per_file * (INPUTS + OUTPUTS)
    );
    say!(
        "NOSEC ran first and last ({first:.2} s, {last:.2} s); its row is their mean. Both \
         sides start connected to the MDS and every OSD."
    );
    say!(
        "{:>15} | {:>7} {:>8} | {:>6} {:>6} {:>6} {:>8} | {:>7} | hit ratio after 1/5/10/25/50/100 % of opens",
        "setting", "s", "/NOSEC", "sigs", "hits", "misses", "OSD ver", "hot ms"
    );
    for ((name, strategies, _), o) in SETTINGS.iter().zip(&outcomes) {
        let curve: Vec<String> = o.curve.iter().map(|r| format!("{:.3}", r)).collect();
        if strategies.is_none() {
            say!(
                "{name:>15} | {:>7.2} {:>8.2} | {:>6} {:>6} {:>6} {:>8} | {:>7.1} |",
                o.seconds,
                1.0,
                "-",
                "-",
                "-",
                "-",
                o.hot_aggregate_ms
            );
            continue;
        }
        say!(
            "{name:>15} | {:>7.2} {:>8.2} | {:>6} {:>6} {:>6} {:>8} | {:>7.1} | {}",
            o.seconds,
            o.seconds / nosec_s,
            o.signatures,
            o.hits,
            o.misses,
            o.verifications,
            o.hot_aggregate_ms,
            curve.join(" ")
        );
    }
    Ok(())
}
