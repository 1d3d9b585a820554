//! `maat bench renewal` (E4, paper 000 Fig. 8b): N clients, each its own user with its
//! own session and file, write every renewal period (80 % of the capability lifetime),
//! and each write renews the client's capability when it is due (SPEC M8). Per N: the
//! renewal requests per period, the exact MDS signatures per period, and the MDS time
//! spent on renewals. The paper's claim: signatures per period stay constant as clients
//! grow, so the time per renewal falls.

use super::{counter, LocalCluster};
use anyhow::{anyhow, bail, Context, Result};
use maat_client::{Client, Opened};
use maat_proto::msg::Access;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Threads driving the clients.
const DRIVERS: usize = 8;
/// Bytes each client writes per period.
const WRITE_BYTES: usize = 4096;

/// One simulated client: its own user, session and file.
struct Sim {
    client: Client,
    name: String,
    opened: Option<Opened>,
}

/// Runs `work` for every client on [`DRIVERS`] threads.
fn drive(clients: &mut [Sim], work: impl Fn(&mut Sim) -> Result<()> + Sync) -> Result<()> {
    let chunk = clients.len().div_ceil(DRIVERS).max(1);
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = clients
            .chunks_mut(chunk)
            .map(|part| {
                s.spawn(move || -> Result<()> {
                    for sim in part.iter_mut() {
                        work(sim)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("a driver thread panicked"))??;
        }
        Ok(())
    })
}

struct Row {
    clients: usize,
    renewals: f64,
    signatures: f64,
    mds_us: f64,
}

pub(super) fn run_renewal(
    sizes: &[u32],
    periods: u32,
    lifetime: u64,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    if largest == 0 || largest > 1000 {
        bail!("--clients must be between 1 and 1000");
    }
    if periods == 0 || lifetime < 2 {
        bail!("--periods must be at least 1 and --lifetime at least 2 seconds");
    }
    let lifetime_arg = lifetime.to_string();
    let cluster = LocalCluster::start_with(
        data,
        &["--capability-lifetime", &lifetime_arg, "--grouping", "none"],
    )?;
    let mut admin = cluster.admin()?;
    admin.mkdir("/renew", 0o777, false)?;
    if !json {
        eprintln!("bench renewal: adding and logging in {largest} users");
    }
    let mut clients: Vec<Sim> = cluster
        .logged_in_users("renew", 0..largest)?
        .into_iter()
        .map(|(name, client)| Sim {
            client,
            name,
            opened: None,
        })
        .collect();
    let period = Duration::from_millis(lifetime * 1000 * 4 / 5);
    let mut rows = Vec::new();
    for &n in sizes {
        let n = n as usize;
        let group = clients.get_mut(..n).unwrap_or_default();
        // Each client opens a fresh file of its own and writes it once: its capability
        // is now in use.
        let opened_at = Instant::now();
        drive(group, |sim| {
            let path = format!("/renew/{n}-{}", sim.name);
            let opened = sim.client.open(&path, Access::ReadWrite, Some(0o600))?;
            sim.client.write_object(&opened, 0, vec![1; WRITE_BYTES])?;
            sim.opened = Some(opened);
            Ok(())
        })?;
        let spread = opened_at.elapsed();
        // The first capability opened must still be valid when the last one is due: the
        // opens must take less than the last fifth of a lifetime.
        let margin =
            Duration::from_millis(lifetime * 1000 / 5).saturating_sub(Duration::from_millis(150));
        if spread >= margin {
            bail!(
                "opening {n} files took {spread:?}, too long for a {lifetime} s lifetime: \
                 use a longer --lifetime"
            );
        }
        let signatures = counter(&mut admin, "mds", "signatures_made")?;
        let micros = counter(&mut admin, "mds", "renewal:micros")?;
        let renewals: u64 = group.iter().map(|s| s.client.client_stats().renewals).sum();
        // Every client's capability is due (80 % of its lifetime) once the last one
        // opened is.
        let mut start = Instant::now() + period + Duration::from_millis(50);
        for _ in 0..periods {
            std::thread::sleep(start.saturating_duration_since(Instant::now()));
            let began = Instant::now();
            drive(group, |sim| {
                let opened = sim
                    .opened
                    .as_ref()
                    .ok_or_else(|| anyhow!("no file opened"))?;
                sim.client
                    .write_object(opened, 0, vec![2; WRITE_BYTES])
                    .context("a write in a renewal period (try a longer --lifetime)")
            })?;
            if began.elapsed() >= margin {
                bail!(
                    "a period's {n} writes took {:?}, too long for a {lifetime} s lifetime: \
                     use a longer --lifetime",
                    began.elapsed()
                );
            }
            start = began + period + Duration::from_millis(50);
        }
        let p = f64::from(periods);
        let renewed: u64 = group
            .iter()
            .map(|s| s.client.client_stats().renewals)
            .sum::<u64>()
            - renewals;
        rows.push(Row {
            clients: n,
            renewals: renewed as f64 / p,
            signatures: counter(&mut admin, "mds", "signatures_made")?.saturating_sub(signatures)
                as f64
                / p,
            mds_us: counter(&mut admin, "mds", "renewal:micros")?.saturating_sub(micros) as f64 / p,
        });
    }
    if json {
        let mut obj = serde_json::Map::new();
        for r in &rows {
            let n = r.clients;
            obj.insert(format!("signatures_per_period_{n}"), r.signatures.into());
            obj.insert(format!("renewals_per_period_{n}"), r.renewals.into());
            obj.insert(format!("mds_us_per_period_{n}"), r.mds_us.into());
            obj.insert(
                format!("mds_us_per_renewal_{n}"),
                (r.mds_us / r.renewals.max(1.0)).into(),
            );
        }
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "E4 renewal: clients renew every {:.1} s ({lifetime} s lifetime), {periods} periods",
        period.as_secs_f64()
    );
    say!(
        "{:>7} {:>16} {:>19} {:>17} {:>16}",
        "clients",
        "renewals/period",
        "signatures/period",
        "MDS µs/period",
        "MDS µs/renewal"
    );
    for r in rows {
        say!(
            "{:>7} {:>16.1} {:>19.2} {:>17.0} {:>16.1}",
            r.clients,
            r.renewals,
            r.signatures,
            r.mds_us,
            r.mds_us / r.renewals.max(1.0)
        );
    }
    Ok(())
}
