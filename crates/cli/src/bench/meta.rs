//! `maat bench meta` (issue 42, mdtest's shape): T client threads, each in a directory of
//! its own, create N empty files, stat them, open each with a capability the MDS makes
//! (the client's cache of opens emptied before each), list the directory, rename and
//! remove them; operations per second of each phase, for the MDS on redb and on
//! PostgreSQL with 1, 2, ... instances, in one run, each on a fresh cluster of one OSD
//! (the data path is not measured: the files are empty). Threads act as the
//! administrator, each a client of its own, so that they spread over the instances as
//! separate clients do.

use super::LocalCluster;
use anyhow::{anyhow, Context, Result};
use maat_client::Client;
use maat_proto::msg::Access;
use std::time::Instant;

/// The phases, in the order they run.
const PHASES: [&str; 6] = ["create", "stat", "open", "readdir", "rename", "unlink"];

/// How many `readdir`s a thread makes (each lists its N files).
const READDIRS_PER_THREAD: usize = 10;

/// One configuration's operations per second, by phase.
struct Measured {
    name: String,
    per_second: [f64; 6],
}

/// Runs one phase on every thread at once; its operations per second.
fn phase(
    clients: &[Client],
    ops_per_thread: usize,
    op: impl Fn(&Client, usize, usize) -> Result<(), maat_client::ClientError> + Sync,
) -> Result<f64> {
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(t, c)| {
                let op = &op;
                s.spawn(move || (0..ops_per_thread).try_for_each(|i| op(c, t, i)))
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("a client thread panicked"))??;
        }
        Ok::<(), anyhow::Error>(())
    })?;
    let ops = (clients.len() * ops_per_thread) as f64;
    Ok(ops / started.elapsed().as_secs_f64().max(1e-9))
}

fn file(t: usize, i: usize) -> String {
    format!("/meta-bench/t{t}/f{i}")
}

fn renamed(t: usize, i: usize) -> String {
    format!("/meta-bench/t{t}/g{i}")
}

/// Every phase on a fresh cluster `maat up` starts with `extra`.
fn measure(name: String, extra: &[&str], threads: usize, files: usize) -> Result<Measured> {
    let cluster = LocalCluster::start_with(None, extra)
        .with_context(|| format!("starting the {name} cluster"))?;
    let admin = cluster.admin()?;
    admin.mkdir("/meta-bench", 0o755, false)?;
    let clients = (0..threads)
        .map(|t| {
            admin.mkdir(&format!("/meta-bench/t{t}"), 0o755, false)?;
            cluster.admin()
        })
        .collect::<Result<Vec<_>>>()?;
    let mut per_second = [0.0; 6];
    per_second[0] = phase(&clients, files, |c, t, i| {
        c.open(&file(t, i), Access::ReadWrite, Some(0o644))
            .map(drop)
    })?;
    per_second[1] = phase(&clients, files, |c, t, i| c.stat(&file(t, i)).map(drop))?;
    per_second[2] = phase(&clients, files, |c, t, i| {
        c.forget_opens();
        c.open(&file(t, i), Access::Read, None).map(drop)
    })?;
    per_second[3] = phase(&clients, READDIRS_PER_THREAD, |c, t, _| {
        c.readdir(&format!("/meta-bench/t{t}")).map(drop)
    })?;
    per_second[4] = phase(&clients, files, |c, t, i| {
        c.rename(&file(t, i), &renamed(t, i))
    })?;
    per_second[5] = phase(&clients, files, |c, t, i| c.unlink(&renamed(t, i)))?;
    drop(clients);
    drop(cluster);
    Ok(Measured { name, per_second })
}

/// `maat bench meta`.
pub fn run_meta(threads: usize, files: usize, instances: &[u32], json: bool) -> Result<()> {
    let mut runs = vec![measure("redb".into(), &["--osds", "1"], threads, files)?];
    match maat_server::pg_server::cannot_start_here() {
        Some(why) => say!("maat bench meta: PostgreSQL runs skipped: {why}"),
        None => {
            for n in instances {
                let n_text = n.to_string();
                let extra = ["--osds", "1", "--meta", "postgres", "--mds", &n_text];
                runs.push(measure(format!("postgres×{n}"), &extra, threads, files)?);
            }
        }
    }
    let redb = runs.first().map(|r| r.per_second).unwrap_or_default();
    if json {
        let mut obj = serde_json::Map::new();
        for r in &runs {
            for (p, v) in PHASES.iter().zip(r.per_second) {
                obj.insert(format!("{p}_per_s_{}", r.name), v.into());
            }
        }
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "maat bench meta: {threads} threads × {files} files each, operations per second \
         (ratio to redb in brackets)"
    );
    let mut head = format!("{:<12}", "store");
    for p in PHASES {
        head.push_str(&format!(" {p:>16}"));
    }
    say!("{head}");
    for r in &runs {
        let mut line = format!("{:<12}", r.name);
        for (v, base) in r.per_second.iter().zip(redb) {
            line.push_str(&format!(" {:>8.0} ({:>4.2})", v, v / base.max(1e-9)));
        }
        say!("{line}");
    }
    Ok(())
}
