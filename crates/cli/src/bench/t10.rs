//! `maat bench t10` (SPEC E8, paper 003 Fig. 8 and Tables 2-3 shape): Maat's signed
//! capabilities against T10 credentials (SPEC T2), per open, per I/O and per metadata
//! operation, at 1 OSD and at many, under each protection method, with NOSEC as the
//! baseline, in one run per cluster size; then logins and the T10 key commands.
//!
//! Per cluster (OSD count) and method, two partitions: one whose opens get MDS-signed
//! capabilities (`maat`), one whose opens get a T10 credential per OSD (`t10`). Rows:
//! * `open+write` / `open+read`: a put and a get of a new small file (in a Maat
//!   partition the put stores under a reserved id and links it, one signed capability per
//!   64 puts, and the get's open is signed; in a T10 partition an open each, with
//!   credentials);
//! * `seq write` / `seq read` / `rand write` / `rand read`: I/Os of SIZE bytes inside one
//!   open file (the per-I/O path: session MAC vs capability-key MAC);
//! * `mkdir`, `readdir`, `rmdir`, `create` (an open that creates, no data), `rm`: the MDS
//!   operations of paper 003 Table 2, in the partition's directory;
//! * `login`, `logout` (no method applies: NOSEC has no login), and, in the first
//!   partition with T10 credentials, `keys rotate` (two SET KEYs per OSD: partition and
//!   working key), `keys rotate --master` (plus one SET MASTER KEY per OSD) and
//!   `revoke-object` (one SET POLICY TAG per OSD), each answered once every OSD has made
//!   the key durable. The key commands' own MACs and HKDFs are not in the daemons'
//!   counters, so their crypto columns are empty.
//!
//! Times are means per operation; crypto operations per operation are exact counts from
//! the daemons' counters (signatures made at the MDS, verified at OSDs, MACs made and
//! checked everywhere).

use super::LocalCluster;
use anyhow::{anyhow, bail, Result};
use maat_client::{Client, Credential, Home};
use maat_proto::msg::{Access, Credentials, ADMIN_USER_ID};
use maat_proto::protection::Protection;
use std::time::Instant;

/// Most runs of the slow administrative rows (logins, key commands).
const ADMIN_ITERATIONS_MAX: u32 = 20;

struct Row {
    osds: u32,
    /// The partition's protection method, or `-` where none applies.
    method: &'static str,
    credentials: &'static str,
    op: String,
    micros: f64,
    signatures: f64,
    macs: f64,
}

impl Row {
    /// Throughput ratio to NOSEC in the same cluster (higher is better).
    fn ratio(&self, rows: &[Row]) -> f64 {
        rows.iter()
            .find(|b| b.osds == self.osds && b.op == self.op && b.method == "NOSEC")
            .map_or(f64::NAN, |b| b.micros / self.micros)
    }
}

/// A partition's directory and how its opens are authorized.
struct Mode {
    method: Protection,
    credentials: &'static str,
    partition: String,
    dir: String,
}

/// The rows of one cluster.
struct Table<'a> {
    rows: &'a mut Vec<Row>,
    osds: u32,
}

impl Table<'_> {
    fn push(
        &mut self,
        method: &'static str,
        credentials: &'static str,
        op: String,
        (micros, signatures, macs): (f64, f64, f64),
    ) {
        self.rows.push(Row {
            osds: self.osds,
            method,
            credentials,
            op,
            micros,
            signatures,
            macs,
        });
    }
}

/// Signatures (made + verified) and MAC computations (each MAC made or checked is one)
/// over the MDS and every OSD.
fn crypto(c: &mut Client) -> Result<(u64, u64)> {
    let stats = c.daemon_stats()?;
    let sum = |name: &str| super::sum_counter(&stats, "", name);
    Ok((
        sum("signatures_made")? + sum("signatures_verified")?,
        sum("macs_computed")?,
    ))
}

/// Times the runs `ops` of `op` and counts their crypto operations: totals of µs,
/// signatures and MACs. Reading the counters costs MACs of its own (the stats request
/// over the session): the cost of one read, taken back to back before the runs, is
/// subtracted.
fn measure(
    c: &mut Client,
    ops: std::ops::Range<u32>,
    mut op: impl FnMut(&mut Client, u32) -> Result<()>,
) -> Result<(f64, f64, f64)> {
    let (sig_a, mac_a) = crypto(c)?;
    let (sig0, mac0) = crypto(c)?;
    let (sig_read, mac_read) = (sig0.saturating_sub(sig_a), mac0.saturating_sub(mac_a));
    let t = Instant::now();
    for i in ops {
        op(c, i)?;
    }
    let micros = t.elapsed().as_secs_f64() * 1e6;
    let (sig1, mac1) = crypto(c)?;
    let net = |after: u64, before: u64, read: u64| {
        after.saturating_sub(before).saturating_sub(read) as f64
    };
    Ok((micros, net(sig1, sig0, sig_read), net(mac1, mac0, mac_read)))
}

/// [`measure`] of runs `0..runs`, as means per run.
fn mean(
    c: &mut Client,
    runs: u32,
    op: impl FnMut(&mut Client, u32) -> Result<()>,
) -> Result<(f64, f64, f64)> {
    let (micros, sigs, macs) = measure(c, 0..runs, op)?;
    let n = f64::from(runs);
    Ok((micros / n, sigs / n, macs / n))
}

/// Rounds a row's runs are split into, the modes taking turns within each.
const ROUNDS: u32 = 10;

/// Runs `op(client, mode index, i)` for `i` in `0..iterations` under every mode and pushes
/// one row per mode (means per run). The runs go in rounds in which each mode takes a
/// turn, starting with another mode each round: the machine is shared and its speed
/// drifts, and modes measured one block after another would carry the drift into their
/// ratios to NOSEC (seen: NOSEC's 64 KiB reads at 45 µs in one run and 82 µs in the next).
fn interleaved(
    c: &mut Client,
    table: &mut Table<'_>,
    modes: &[Mode],
    label: &str,
    iterations: u32,
    mut op: impl FnMut(&mut Client, usize, u32) -> Result<()>,
) -> Result<()> {
    let rounds = ROUNDS.min(iterations);
    let mut sums = vec![(0.0, 0.0, 0.0); modes.len()];
    for r in 0..rounds {
        let runs = iterations * r / rounds..iterations * (r + 1) / rounds;
        for k in 0..modes.len() {
            let m = (k + r as usize) % modes.len();
            let (Some(mode), Some(sum)) = (modes.get(m), sums.get_mut(m)) else {
                continue;
            };
            enter(c, mode);
            let (micros, sigs, macs) = measure(c, runs.clone(), |c, i| op(c, m, i))?;
            *sum = (sum.0 + micros, sum.1 + sigs, sum.2 + macs);
        }
    }
    let n = f64::from(iterations);
    for (mode, (micros, sigs, macs)) in modes.iter().zip(sums) {
        table.push(
            mode.method.name(),
            mode.credentials,
            label.to_string(),
            (micros / n, sigs / n, macs / n),
        );
    }
    Ok(())
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
    json: bool,
) -> Result<()> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let mut rows = Vec::new();
    for &osds in osd_counts {
        let count = osds.to_string();
        let cluster = LocalCluster::start_with(None, &["--osds", &count])?;
        let mut c = cluster.admin()?;
        let modes = partitions(&mut c, methods)?;
        // The MDS sets the new partitions' keys within a second or two.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let mut table = Table {
            rows: &mut rows,
            osds,
        };
        for &kib in sizes_kib {
            data_rows(&mut c, &mut table, &modes, kib, iterations)?;
        }
        metadata_rows(&mut c, &mut table, &modes, iterations)?;
        c.secure();
        let admin_runs = iterations.min(ADMIN_ITERATIONS_MAX);
        session_rows(&cluster, &mut c, &mut table, admin_runs)?;
        if let Some(mode) = modes.iter().find(|m| m.credentials == "t10") {
            key_rows(&mut c, &mut table, mode, admin_runs)?;
        }
        drop(cluster);
    }
    if json {
        print_json(&rows)?;
    } else {
        print(&rows)?;
    }
    Ok(())
}

/// `/t10/nosec`, and per method a partition of each credential format with its directory.
fn partitions(c: &mut Client, methods: &[Protection]) -> Result<Vec<Mode>> {
    c.mkdir("/t10", 0o755, true)?;
    c.mkdir("/t10/nosec", 0o755, true)?;
    let mut modes = vec![Mode {
        method: Protection::NoSec,
        credentials: "-",
        partition: "default".into(),
        dir: "/t10/nosec".into(),
    }];
    for &m in methods.iter().filter(|m| **m != Protection::NoSec) {
        for credentials in [Credentials::Maat, Credentials::T10] {
            let name = format!("{}-{}", m.name().to_lowercase(), credentials.name());
            c.partition_create(&name, m)?;
            c.partition_set_credentials(&name, credentials)?;
            let dir = format!("/t10/{name}");
            c.mkdir_in(&dir, 0o755, true, Some(&name))?;
            modes.push(Mode {
                method: m,
                credentials: credentials.name(),
                partition: name,
                dir,
            });
        }
    }
    Ok(modes)
}

/// NOSEC requests go unauthenticated (the cluster runs with the danger flag); the others
/// over the administrator's session.
fn enter(c: &mut Client, mode: &Mode) {
    if mode.method == Protection::NoSec {
        c.danger_insecure_as(ADMIN_USER_ID);
    } else {
        c.secure();
    }
}

/// Opens and I/Os of `kib` KiB, every mode in turn.
fn data_rows(
    c: &mut Client,
    table: &mut Table<'_>,
    modes: &[Mode],
    kib: u64,
    iterations: u32,
) -> Result<()> {
    let size = kib * 1024;
    let block = vec![0x5a_u8; size as usize];
    let small = |m: usize, i: u32| {
        let dir = modes.get(m).map_or("", |mode| mode.dir.as_str());
        format!("{dir}/s{kib}-{i}")
    };
    interleaved(
        c,
        table,
        modes,
        &format!("open+write {kib} KiB"),
        iterations,
        |c, m, i| {
            c.put(&mut block.as_slice(), size, &small(m, i), &mut |_| {})
                .map(drop)
                .map_err(Into::into)
        },
    )?;
    // The puts' opens were kept (SPEC M5): each get below opens at the MDS, as a reader
    // that did not write the file would.
    c.forget_opens();
    interleaved(
        c,
        table,
        modes,
        &format!("open+read {kib} KiB"),
        iterations,
        |c, m, i| {
            let mut sink = Vec::with_capacity(block.len());
            c.get(&small(m, i), &mut sink, &mut |_| {})?;
            Ok(())
        },
    )?;
    let file_bytes = 4 * 1024 * 1024;
    let mut opened = Vec::with_capacity(modes.len());
    for mode in modes {
        enter(c, mode);
        let path = format!("{}/io{kib}", mode.dir);
        opened.push(c.open(&path, Access::ReadWrite, Some(0o644))?);
    }
    for (op, random, write) in [
        ("seq write", false, true),
        ("seq read", false, false),
        ("rand write", true, true),
        ("rand read", true, false),
    ] {
        let label = format!("{op} {kib} KiB");
        interleaved(c, table, modes, &label, iterations, |c, m, i| {
            let file = opened
                .get(m)
                .ok_or_else(|| anyhow!("no file for mode {m}"))?;
            let at = offset(i, size, file_bytes, random);
            if write {
                c.write_at(file, at, block.clone())?;
            } else {
                c.read_at(file, at, size as u32)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The MDS operations of paper 003 Table 2, in each partition's directory, every mode in
/// turn.
fn metadata_rows(
    c: &mut Client,
    table: &mut Table<'_>,
    modes: &[Mode],
    iterations: u32,
) -> Result<()> {
    let dir = |m: usize| modes.get(m).map_or("", |mode| mode.dir.as_str());
    interleaved(c, table, modes, "mkdir", iterations, |c, m, i| {
        Ok(c.mkdir(&format!("{}/d{i}", dir(m)), 0o755, false)?)
    })?;
    interleaved(c, table, modes, "readdir", iterations, |c, m, _| {
        Ok(c.readdir(dir(m)).map(drop)?)
    })?;
    interleaved(c, table, modes, "rmdir", iterations, |c, m, i| {
        Ok(c.rmdir(&format!("{}/d{i}", dir(m)))?)
    })?;
    interleaved(c, table, modes, "create", iterations, |c, m, i| {
        let path = format!("{}/c{i}", dir(m));
        Ok(c.open(&path, Access::ReadWrite, Some(0o644)).map(drop)?)
    })?;
    interleaved(c, table, modes, "rm", iterations, |c, m, i| {
        Ok(c.unlink(&format!("{}/c{i}", dir(m)))?)
    })?;
    Ok(())
}

/// Logins (OPAQUE with the administrator's key) and logouts, each on a client of its own.
fn session_rows(
    cluster: &LocalCluster,
    c: &mut Client,
    table: &mut Table<'_>,
    runs: u32,
) -> Result<()> {
    let (name, key) = Home::new(cluster.data.join("admin"))
        .identity()?
        .ok_or_else(|| anyhow!("no admin identity"))?;
    let mut clients = (0..runs)
        .map(|_| Client::new(cluster.file.clone(), None))
        .collect::<Result<Vec<_>, _>>()?;
    let login = mean(c, runs, |_, i| {
        let client = clients
            .get_mut(i as usize)
            .ok_or_else(|| anyhow!("client {i}"))?;
        Ok(client.login(&name, Credential::Key(key.clone()))?)
    })?;
    table.push("-", "-", "login".into(), login);
    let logout = mean(c, runs, |_, i| {
        let client = clients
            .get_mut(i as usize)
            .ok_or_else(|| anyhow!("client {i}"))?;
        Ok(client.logout()?)
    })?;
    table.push("-", "-", "logout".into(), logout);
    Ok(())
}

/// The T10 key commands as `maat admin keys` runs them on every OSD.
fn key_rows(c: &mut Client, table: &mut Table<'_>, mode: &Mode, runs: u32) -> Result<()> {
    let partition = mode.partition.as_str();
    let rotate = |c: &mut Client, master: bool| -> Result<()> {
        let info = c.t10_rotate(None, Some(partition), false, master)?;
        match info.iter().find_map(|i| i.problem.as_ref()) {
            Some(problem) => bail!("keys rotate: {problem}"),
            None => Ok(()),
        }
    };
    let method = mode.method.name();
    let uncounted = |(micros, _, _): (f64, f64, f64)| (micros, f64::NAN, f64::NAN);
    let m = mean(c, runs, |c, _| rotate(c, false))?;
    table.push(
        method,
        "t10",
        "keys rotate (2 SET KEY/OSD)".into(),
        uncounted(m),
    );
    let m = mean(c, runs, |c, _| rotate(c, true))?;
    table.push(
        method,
        "t10",
        "keys rotate --master (+1 SET MASTER KEY, +1 SET KEY/OSD)".into(),
        uncounted(m),
    );
    let file = format!("{}/tagged", mode.dir);
    c.open(&file, Access::ReadWrite, Some(0o644))?;
    let m = mean(c, runs, |c, _| {
        let r = c.t10_revoke_object(&file)?;
        match r.osds.iter().find_map(|(_, p)| p.as_ref()) {
            Some(problem) => bail!("revoke-object: {problem}"),
            None => Ok(()),
        }
    })?;
    table.push(
        method,
        "t10",
        "revoke-object (1 SET POLICY TAG/OSD)".into(),
        uncounted(m),
    );
    Ok(())
}

fn print(rows: &[Row]) -> Result<()> {
    say!(
        "{:>4}  {:<13} {:<5} {:<44} {:>10} {:>8} {:>8} {:>9}",
        "osds",
        "method",
        "cred",
        "op",
        "µs/op",
        "×NOSEC",
        "sig/op",
        "MAC/op"
    );
    let num = |v: f64, width: usize| {
        if v.is_nan() {
            format!("{:>width$}", "-")
        } else {
            format!("{v:>width$.2}")
        }
    };
    for r in rows {
        say!(
            "{:>4}  {:<13} {:<5} {:<44} {:>10.1} {} {} {}",
            r.osds,
            r.method,
            r.credentials,
            r.op,
            r.micros,
            num(r.ratio(rows), 8),
            num(r.signatures, 8),
            num(r.macs, 9)
        );
    }
    Ok(())
}

fn print_json(rows: &[Row]) -> Result<()> {
    let finite = |v: f64| v.is_finite().then_some(v);
    let list: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "osds": r.osds,
                "method": r.method,
                "credentials": r.credentials,
                "op": r.op,
                "us_per_op": r.micros,
                "ratio_to_nosec": finite(r.ratio(rows)),
                "signatures_per_op": finite(r.signatures),
                "macs_per_op": finite(r.macs),
            })
        })
        .collect();
    say!("{}", serde_json::json!({ "rows": list }));
    Ok(())
}
