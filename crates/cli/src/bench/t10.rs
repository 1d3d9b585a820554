//! `maat bench t10` (SPEC E8, paper 003 Fig. 8 shape): Maat's signed capabilities against
//! T10 credentials (SPEC T2), per open and per I/O, at 1 OSD and at many, under each
//! protection method, with NOSEC as the baseline, in one run per cluster size.
//!
//! Per cluster (OSD count) and method, two partitions: one whose opens get MDS-signed
//! capabilities (`maat`), one whose opens get a T10 credential per OSD (`t10`). Rows:
//! * `open+write` / `open+read`: a put and a get of a new small file (an open each: the
//!   MDS signs a capability for the first, or issues credentials);
//! * `seq write` / `seq read` / `rand write` / `rand read`: I/Os of SIZE bytes inside one
//!   open file (the per-I/O path: session MAC vs capability-key MAC).
//!
//! Times are means per operation; crypto operations per operation are exact counts from
//! the daemons' counters (signatures made at the MDS, verified at OSDs, MACs made and
//! checked everywhere).

use super::LocalCluster;
use anyhow::{bail, Result};
use maat_client::Client;
use maat_proto::msg::{Access, Credentials, ADMIN_USER_ID};
use maat_proto::protection::Protection;
use std::time::Instant;

struct Row {
    osds: u32,
    method: Protection,
    credentials: &'static str,
    op: String,
    micros: f64,
    signatures: f64,
    macs: f64,
}

/// Signatures (made + verified) and MAC computations (each MAC made or checked is one)
/// over the MDS and every OSD.
fn crypto(c: &mut Client) -> Result<(u64, u64)> {
    let stats = c.daemon_stats()?;
    let sum = |name: &str| super::sum_counter(&stats, "", name);
    Ok((
        sum("signatures_made") + sum("signatures_verified"),
        sum("macs_computed"),
    ))
}

/// Times `ops` runs of `op` (mean µs) and counts their crypto operations per run.
fn measure(
    c: &mut Client,
    ops: u32,
    mut op: impl FnMut(&mut Client, u32) -> Result<()>,
) -> Result<(f64, f64, f64)> {
    let (sig0, mac0) = crypto(c)?;
    let t = Instant::now();
    for i in 0..ops {
        op(c, i)?;
    }
    let micros = t.elapsed().as_secs_f64() * 1e6 / f64::from(ops);
    let (sig1, mac1) = crypto(c)?;
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / f64::from(ops);
    Ok((micros, per(sig1, sig0), per(mac1, mac0)))
}

/// Byte offsets of `ops` I/Os of `size` bytes in a file of `file_bytes`: in order, or
/// scattered (a fixed odd stride modulo the slot count).
fn offset(i: u32, size: u64, file_bytes: u64, random: bool) -> u64 {
    let slots = (file_bytes / size).max(1);
    let slot = if random {
        (u64::from(i) * 7919) % slots
    } else {
        u64::from(i) % slots
    };
    slot * size
}

pub(super) fn run_t10(
    osd_counts: &[u32],
    methods: &[Protection],
    sizes_kib: &[u64],
    iterations: u32,
) -> Result<()> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let mut rows = Vec::new();
    for &osds in osd_counts {
        let count = osds.to_string();
        let cluster = LocalCluster::start_with(None, &["--osds", &count])?;
        let mut c = cluster.admin()?;
        let mut modes: Vec<(Protection, &'static str, String)> = Vec::new();
        c.mkdir("/t10", 0o755, true)?;
        modes.push((Protection::NoSec, "-", "/t10/nosec".into()));
        c.mkdir("/t10/nosec", 0o755, true)?;
        for &m in methods.iter().filter(|m| **m != Protection::NoSec) {
            for credentials in [Credentials::Maat, Credentials::T10] {
                let name = format!("{}-{}", m.name().to_lowercase(), credentials.name());
                c.partition_create(&name, m)?;
                c.partition_set_credentials(&name, credentials)?;
                let dir = format!("/t10/{name}");
                c.mkdir_in(&dir, 0o755, true, Some(&name))?;
                modes.push((m, credentials.name(), dir));
            }
        }
        // The MDS sets the new partitions' keys within a second or two.
        std::thread::sleep(std::time::Duration::from_secs(3));
        for &kib in sizes_kib {
            let size = kib * 1024;
            let block = vec![0x5a_u8; size as usize];
            for (method, credentials, dir) in &modes {
                if *method == Protection::NoSec {
                    c.danger_insecure_as(ADMIN_USER_ID);
                } else {
                    c.secure();
                }
                let mut row = |op: &str, (micros, signatures, macs): (f64, f64, f64)| {
                    rows.push(Row {
                        osds,
                        method: *method,
                        credentials,
                        op: format!("{op} {kib} KiB"),
                        micros,
                        signatures,
                        macs,
                    })
                };
                let small = |i: u32| format!("{dir}/s{kib}-{i}");
                row(
                    "open+write",
                    measure(&mut c, iterations, |c, i| {
                        c.put(&mut block.as_slice(), size, &small(i), &mut |_| {})
                            .map(drop)
                            .map_err(Into::into)
                    })?,
                );
                row(
                    "open+read",
                    measure(&mut c, iterations, |c, i| {
                        let mut sink = Vec::with_capacity(block.len());
                        c.get(&small(i), &mut sink, &mut |_| {})?;
                        Ok(())
                    })?,
                );
                let big = format!("{dir}/io{kib}");
                let file_bytes = 4 * 1024 * 1024;
                let opened = c.open(&big, Access::ReadWrite, Some(0o644))?;
                for (op, random, write) in [
                    ("seq write", false, true),
                    ("seq read", false, false),
                    ("rand write", true, true),
                    ("rand read", true, false),
                ] {
                    row(
                        op,
                        measure(&mut c, iterations, |c, i| {
                            let at = offset(i, size, file_bytes, random);
                            if write {
                                c.write_at(&opened, at, block.clone())?;
                            } else {
                                c.read_at(&opened, at, size as u32)?;
                            }
                            Ok(())
                        })?,
                    );
                }
            }
        }
        c.secure();
        drop(cluster);
    }
    print(&rows);
    Ok(())
}

fn print(rows: &[Row]) {
    println!(
        "{:>4}  {:<13} {:<5} {:<20} {:>10} {:>8} {:>8} {:>9}",
        "osds", "method", "cred", "op", "µs/op", "×NOSEC", "sig/op", "MAC/op"
    );
    for r in rows {
        let nosec = rows
            .iter()
            .find(|b| b.osds == r.osds && b.op == r.op && b.method == Protection::NoSec)
            .map_or(f64::NAN, |b| b.micros);
        // Throughput ratio to NOSEC (higher is better): NOSEC time over this time.
        println!(
            "{:>4}  {:<13} {:<5} {:<20} {:>10.1} {:>8.2} {:>8.2} {:>9.2}",
            r.osds,
            r.method.name(),
            r.credentials,
            r.op,
            r.micros,
            nosec / r.micros,
            r.signatures,
            r.macs
        );
    }
}
