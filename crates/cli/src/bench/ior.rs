//! `maat bench ior` (E5, paper 000 Fig. 9 / paper 001 §4.5): an IOR-like run. P client
//! processes, each its own user and session, each write F files of their own in 64 KiB
//! chunks (open with create, chunked writes, size recorded), then open each again and read
//! it back in 64 KiB chunks. The whole run is timed under NOSEC, secure without grouping
//! and secure with grouping (UNIX, on-the-fly and directory: each process's files live in
//! its own directory), in alternating order over rounds; the overhead over NOSEC and the
//! exact MDS signatures are reported.

use super::{counter, LocalCluster};
use anyhow::{anyhow, bail, Context, Result};
use maat_client::Client;
use maat_proto::msg::Access;
use maat_proto::protection::Protection;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes per write and per read (IOR's transfer size in the paper).
const CHUNK: u64 = 64 * 1024;

/// Settings compared: name, grouping strategies (`None`: NOSEC).
const MODES: [(&str, Option<&str>); 3] = [
    ("nosec", None),
    ("none", Some("none")),
    ("grouped", Some("unix,onthefly,directory")),
];

struct Proc {
    secure: Client,
    insecure: Client,
    name: String,
}

/// One process's work: write its files, then read them back and check them.
fn work(c: &mut Client, dir: &str, files: u32, file_bytes: u64) -> Result<()> {
    let chunks = file_bytes.div_ceil(CHUNK);
    for f in 0..files {
        let path = format!("{dir}/f{f}");
        let opened = c.open(&path, Access::ReadWrite, Some(0o640))?;
        for k in 0..chunks {
            let len = CHUNK.min(file_bytes - k * CHUNK);
            c.write_at(
                &opened,
                k * CHUNK,
                vec![(f as u8) ^ (k as u8); len as usize],
            )?;
        }
        c.set_size(&path, &opened, file_bytes)?;
    }
    for f in 0..files {
        let path = format!("{dir}/f{f}");
        let opened = c.open(&path, Access::Read, None)?;
        for k in 0..chunks {
            let len = CHUNK.min(file_bytes - k * CHUNK) as u32;
            let data = c.read_at(&opened, k * CHUNK, len)?;
            if data.len() != len as usize || data.first() != Some(&((f as u8) ^ (k as u8))) {
                bail!("{path}: chunk {k} read back wrong");
            }
        }
    }
    Ok(())
}

/// What to run.
pub(super) struct IorArgs {
    pub procs: u32,
    pub files: u32,
    pub file_kib: u64,
    pub rounds: u32,
    pub security: Protection,
}

pub(super) fn run_ior(args: IorArgs, data: Option<PathBuf>, json: bool) -> Result<()> {
    let IorArgs {
        procs,
        files,
        file_kib,
        rounds,
        security,
    } = args;
    if procs == 0 || procs > 256 || files == 0 || file_kib == 0 || rounds == 0 {
        bail!("--procs 1..=256, and --files, --file-kib and --rounds at least 1");
    }
    if security == Protection::NoSec {
        bail!("--security names the secure runs' method; NOSEC always runs beside them");
    }
    let file_bytes = file_kib * 1024;
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    // The secure runs' files live in a partition of the chosen method (SPEC T1).
    let partition = (security != Protection::AllData).then(|| "bench-ior".to_string());
    if let Some(name) = &partition {
        admin.partition_create(name, security)?;
    }
    admin.mkdir_in("/ior", 0o777, false, partition.as_deref())?;
    if !json {
        eprintln!("bench ior: adding and logging in {procs} users");
    }
    let mut all = Vec::new();
    for (name, secure) in cluster.logged_in_users("ior", 0..procs as usize)? {
        let uid = secure.uid().ok_or_else(|| anyhow!("no uid after login"))?;
        let mut insecure = Client::new(cluster.file.clone(), None)?;
        insecure.danger_insecure_as(uid);
        // Both sides equally warm before anything is timed (issue 45): connected to the
        // MDS and every OSD, sessions negotiated on the secure side.
        secure.connect_osds()?;
        insecure.connect_osds()?;
        all.push(Proc {
            secure,
            insecure,
            name,
        });
    }
    let mut seconds = [0f64; 3];
    let mut sigs = [0u64; 3];
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for m in order {
            let (mode, strategies) = MODES.get(m).copied().ok_or_else(|| anyhow!("mode"))?;
            if let Some(s) = strategies {
                admin.set_grouping(s)?;
            }
            let base = format!("/ior/{mode}-{round}");
            admin.mkdir(&base, 0o777, false)?;
            for p in all.iter_mut() {
                let c = if strategies.is_some() {
                    &mut p.secure
                } else {
                    &mut p.insecure
                };
                c.mkdir(&format!("{base}/{}", p.name), 0o755, false)?;
            }
            let before = counter(&mut admin, "mds", "signatures_made")?;
            let started = Instant::now();
            std::thread::scope(|s| -> Result<()> {
                let handles: Vec<_> = all
                    .iter_mut()
                    .map(|p| {
                        let dir = format!("{base}/{}", p.name);
                        let secure = strategies.is_some();
                        s.spawn(move || {
                            let c = if secure {
                                &mut p.secure
                            } else {
                                &mut p.insecure
                            };
                            work(c, &dir, files, file_bytes)
                        })
                    })
                    .collect();
                for h in handles {
                    h.join()
                        .map_err(|_| anyhow!("a process thread panicked"))?
                        .with_context(|| format!("mode {mode}"))?;
                }
                Ok(())
            })?;
            if let (Some(t), Some(n)) = (seconds.get_mut(m), sigs.get_mut(m)) {
                *t += started.elapsed().as_secs_f64();
                *n += counter(&mut admin, "mds", "signatures_made")?.saturating_sub(before);
            }
        }
    }
    admin.set_grouping("unix,onthefly")?;
    let r = f64::from(rounds);
    let [nosec, none, grouped] = seconds.map(|s| s / r);
    let overhead = |t: f64| (t - nosec) / nosec.max(1e-9);
    if json {
        let obj = serde_json::json!({
            "security": security.name(),
            "time_nosec_s": nosec,
            "time_none_s": none,
            "time_grouped_s": grouped,
            "overhead_none": overhead(none),
            "overhead_grouped": overhead(grouped),
            "signatures_nosec": sigs[0] as f64 / r,
            "signatures_none": sigs[1] as f64 / r,
            "signatures_grouped": sigs[2] as f64 / r,
        });
        say!("{obj}");
        return Ok(());
    }
    let opens = 2 * procs * files;
    say!(
        "E5 IOR-like: {procs} processes × {files} files × {file_kib} KiB, 64 KiB writes then reads, \
         {opens} opens per run, {rounds} round(s), secure runs under {security}"
    );
    say!(
        "{:<24} {:>9} {:>12} {:>16}",
        "mode",
        "seconds",
        "over NOSEC",
        "MDS signatures"
    );
    // Measured like the others: a NOSEC run should cause none, and the row shows it if not.
    say!(
        "{:<24} {nosec:>9.2} {:>12} {:>16.0}",
        "NOSEC",
        "-",
        sigs[0] as f64 / r
    );
    say!(
        "{:<24} {none:>9.2} {:>11.1}% {:>16.0}",
        "secure, no grouping",
        100.0 * overhead(none),
        sigs[1] as f64 / r
    );
    say!(
        "{:<24} {grouped:>9.2} {:>11.1}% {:>16.0}",
        "secure, grouped",
        100.0 * overhead(grouped),
        sigs[2] as f64 / r
    );
    Ok(())
}
