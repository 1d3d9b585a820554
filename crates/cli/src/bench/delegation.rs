//! `maat bench delegation` (SPEC M10, paper 000 §3.5): P participants, each its own user
//! and session, read the same F files. Three ways, each on fresh files so no cache from
//! an earlier one helps:
//!
//! * `open-none`: every participant opens every file itself (files readable by all, no
//!   grouping): P × F opens at the MDS;
//! * `open-unix`: the same with UNIX grouping (one capability per file for all others);
//! * `job`: the files are the lead's alone; the lead makes one job, opens the F files for
//!   it (`openg`) and exports the key to the P participants, who read through their
//!   handles without asking the MDS anything.
//!
//! Per way: MDS requests, MDS signatures made, OSD signature verifications (each counted
//! exactly by the daemons) and the wall time from the first request to the last byte
//! (participants read in parallel, one thread each). Every participant holds a session
//! with every OSD before anything is measured, so session offers are in no figure. The
//! ways take turns over `--rounds`, in alternating order (forward, then backward), and the
//! figures are means over the rounds (issue 45: the job always ran last).

use super::LocalCluster;
use anyhow::{anyhow, bail, Result};
use maat_client::{Client, JobHandle};
use maat_proto::msg::Access;
use std::path::PathBuf;
use std::time::Instant;

/// The ways compared.
const WAYS: [&str; 3] = ["open-none", "open-unix", "job"];

/// (MDS requests, MDS signatures made, OSD signatures verified) now, from one `Stats`
/// round (which is itself one MDS request).
fn counts(admin: &mut Client) -> Result<[u64; 3]> {
    let stats = admin.daemon_stats()?;
    let sum = |prefix: &str, name: &str| super::sum_counter(&stats, prefix, name);
    Ok([
        sum("mds", "requests")?,
        sum("mds", "signatures_made")?,
        sum("osd", "signatures_verified")?,
    ])
}

/// Runs `work` for every participant at once; the wall time in seconds.
fn parallel(
    participants: &mut [Client],
    work: impl Fn(usize, &mut Client) -> Result<()> + Sync,
) -> Result<f64> {
    let t = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = participants
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let work = &work;
                s.spawn(move || work(i, c))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow!("a participant panicked"))?)
    })?;
    Ok(t.elapsed().as_secs_f64())
}

fn read_through(c: &mut Client, handle: &JobHandle, expect: u64) -> Result<()> {
    let opened = c.openfh(handle)?;
    let mut sink = Vec::new();
    let n = c.get_opened("job file", &opened, &mut sink, &mut |_| {})?;
    if n != expect {
        bail!("read {n} bytes through a job handle, expected {expect}");
    }
    Ok(())
}

/// One way for `participants` in one round (its files are its own): (MDS requests,
/// signatures, OSD verifications, seconds).
fn measure(
    (way, round): (&str, u32),
    admin: &mut Client,
    lead: &mut Client,
    names: &[String],
    participants: &mut [Client],
    files: u32,
    content: &[u8],
) -> Result<([u64; 3], f64)> {
    let dir = format!("/deleg/{way}-{}-r{round}", participants.len());
    // The lead's files are made with grouping off, whatever the way before left on.
    admin.set_grouping("none")?;
    lead.mkdir(&dir, 0o755, false)?;
    let paths: Vec<String> = (0..files).map(|f| format!("{dir}/f{f}")).collect();
    for p in &paths {
        lead.put(&mut &content[..], content.len() as u64, p, &mut |_| {})?;
    }
    let size = content.len() as u64;
    if way == "job" {
        for p in &paths {
            lead.chmod(p, 0o600)?;
        }
    }
    admin.set_grouping(if way == "open-unix" { "unix" } else { "none" })?;
    let before = counts(admin)?;
    let seconds = if way == "job" {
        let t = Instant::now();
        let (key, lifetime) = lead.job_create()?;
        let mut handles = Vec::with_capacity(paths.len());
        for p in &paths {
            handles.push(lead.openg(&key, p, Access::Read, None)?.0);
        }
        let mut bundles = Vec::with_capacity(names.len());
        for name in names {
            bundles.push(lead.job_export("bench", &key, &lifetime, &handles, name)?);
        }
        let reading = parallel(participants, |i, c| {
            let bundle = bundles.get(i).ok_or_else(|| anyhow!("no bundle"))?;
            let (grant, _) = c.job_join(bundle)?;
            for bytes in &grant.handles {
                let handle = c.verify_handle(bytes)?;
                read_through(c, &handle, size)?;
            }
            Ok(())
        })?;
        let _ = reading;
        t.elapsed().as_secs_f64()
    } else {
        parallel(participants, |_, c| {
            for p in &paths {
                let mut sink = Vec::new();
                let n = c.get(p, &mut sink, &mut |_| {})?;
                if n != size {
                    bail!("read {n} bytes of {p}, expected {size}");
                }
            }
            Ok(())
        })?
    };
    let after = counts(admin)?;
    // The second counter snapshot's own Stats request is not the way's.
    let delta = [
        after[0].saturating_sub(before[0]).saturating_sub(1),
        after[1].saturating_sub(before[1]),
        after[2].saturating_sub(before[2]),
    ];
    Ok((delta, seconds))
}

pub(super) fn run_delegation(
    sizes: &[u32],
    files: u32,
    file_kib: u64,
    rounds: u32,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    if largest == 0 || largest > 1000 || files == 0 || files > 1000 || rounds == 0 {
        bail!("--participants and --files must be between 1 and 1000, --rounds at least 1");
    }
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    admin.mkdir("/deleg", 0o777, false)?;
    if !json {
        eprintln!(
            "bench delegation: adding and logging in {} users",
            largest + 1
        );
    }
    let mut users = cluster.logged_in_users("part", 0..largest + 1)?;
    let (_, mut lead) = users.remove(0);
    let (names, mut participants): (Vec<String>, Vec<Client>) = users.into_iter().unzip();
    for c in participants.iter_mut() {
        c.connect_osds()?;
    }
    let content = vec![7u8; (file_kib * 1024) as usize];
    let mut obj = serde_json::Map::new();
    let mut rows = Vec::new();
    for &p in sizes {
        let p = p as usize;
        let mut row = vec![p as f64];
        // Per way: summed MDS requests, signatures, OSD verifications and seconds.
        let mut sums = [[0f64; 4]; WAYS.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..WAYS.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for w in order {
                let way = WAYS.get(w).copied().ok_or_else(|| anyhow!("way"))?;
                let ([requests, signatures, verified], seconds) = measure(
                    (way, round),
                    &mut admin,
                    &mut lead,
                    names.get(..p).unwrap_or_default(),
                    participants.get_mut(..p).unwrap_or_default(),
                    files,
                    &content,
                )?;
                if let Some(sum) = sums.get_mut(w) {
                    for (acc, v) in sum.iter_mut().zip([
                        requests as f64,
                        signatures as f64,
                        verified as f64,
                        seconds,
                    ]) {
                        *acc += v;
                    }
                }
            }
        }
        for (way, sum) in WAYS.iter().zip(sums) {
            let [requests, signatures, verified, seconds] = sum.map(|v| v / f64::from(rounds));
            let key = way.replace('-', "_");
            obj.insert(format!("mds_requests_{key}_{p}"), requests.into());
            obj.insert(format!("mds_signatures_{key}_{p}"), signatures.into());
            obj.insert(format!("osd_verifications_{key}_{p}"), verified.into());
            obj.insert(format!("seconds_{key}_{p}"), seconds.into());
            row.extend([requests, signatures, verified, seconds]);
        }
        rows.push(row);
    }
    admin.set_grouping("unix,onthefly")?;
    if json {
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "M10 delegation: P participants read the same {files} files of {file_kib} KiB \
         (MDS requests, MDS signatures, OSD verifications, seconds; means of {rounds} \
         round(s), the ways in alternating order)"
    );
    say!(
        "{:>5} | {:>26} | {:>26} | {:>26}",
        "P",
        "each opens, no grouping",
        "each opens, UNIX grouping",
        "one job (openg + export)"
    );
    for r in rows {
        let cell = |i: usize| -> String {
            match r.get(i..i + 4) {
                Some([q, s, v, t]) => format!("{q:>6} {s:>5} {v:>6} {t:>6.2}s"),
                _ => String::new(),
            }
        };
        say!(
            "{:>5} | {:>26} | {:>26} | {:>26}",
            r.first().copied().unwrap_or(0.0),
            cell(1),
            cell(5),
            cell(9)
        );
    }
    Ok(())
}
