//! `maat health` and `maat admin osd ls` (issue 41), in the spirit of `ceph -s` and `ceph
//! osd tree`: which OSDs are up as the MDS knows it, their failure domains, and what
//! each partition's copies mean while some are down.

use anyhow::Result;
use maat_client::placement::failure_domain;
use maat_proto::msg::{OsdEntry, OsdState};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn domain(o: &OsdState) -> String {
    failure_domain(&OsdEntry {
        id: o.id,
        address: o.address.clone(),
        sealing_key: [0; 32],
        weight: o.weight,
    })
    .to_string()
}

fn heard(o: &OsdState) -> String {
    match o.heard_ms_ago {
        Some(ms) => format!("{:.1} s ago", ms as f64 / 1000.0),
        None => "not since the MDS started".into(),
    }
}

/// `maat admin osd ls`.
pub fn osd_ls(cluster: &Option<PathBuf>, json: bool) -> Result<()> {
    let c = crate::client(cluster)?;
    let placement = c.refresh_placement()?;
    let stats = c.mds_stats()?;
    // (An older MDS, or one whose store failed while counting, reports none.)
    let missed = |o: &OsdState| stats.counter(&format!("copies_missed_on:{}", o.id));
    if json {
        let rows: Vec<serde_json::Value> = placement
            .osds
            .iter()
            .map(|o| {
                serde_json::json!({
                    "id": o.id,
                    "address": o.address,
                    "host": domain(o),
                    "weight": o.weight,
                    "up": o.up,
                    "heard_ms_ago": o.heard_ms_ago,
                    "copies_missed": missed(o),
                })
            })
            .collect();
        say!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    say!(
        "{:>4}  {:<24} {:<18} {:>6}  {:<5} {:>6}  last heard",
        "id",
        "address",
        "host (domain)",
        "weight",
        "state",
        "missed"
    );
    for o in &placement.osds {
        say!(
            "{:>4}  {:<24} {:<18} {:>6}  {:<5} {:>6}  {}",
            o.id,
            o.address,
            domain(o),
            o.weight,
            if o.up { "up" } else { "DOWN" },
            missed(o).map_or("?".to_string(), |n| n.to_string()),
            heard(o)
        );
    }
    say!("(missed: copies on that OSD that missed a change; never served until a repairing scrub puts them back)");
    Ok(())
}

/// `maat health`.
pub fn health(cluster: &Option<PathBuf>, json: bool) -> Result<()> {
    let c = crate::client(cluster)?;
    let placement = c.refresh_placement()?;
    let osds = placement.osds.len();
    let down: Vec<&OsdState> = placement.osds.iter().filter(|o| !o.up).collect();
    let up = osds - down.len();
    let hosts: BTreeSet<String> = placement.osds.iter().map(domain).collect();
    // Issue 42: every instance the cluster file lists, each asked itself.
    let instances = c.mds_instance_stats()?;
    let stats = match instances.iter().find_map(|(_, s)| s.as_ref().ok()) {
        Some(s) => s.clone(),
        None => c.mds_stats()?,
    };
    let copies = c.partitions_copies()?;
    let copies_missed = stats.counter("copies_missed");
    // (An MDS from before issue 42 does not say: it ran on redb.)
    let engine = stats
        .counters
        .iter()
        .find_map(|(k, v)| k.strip_prefix("meta_engine:").filter(|_| *v == 1))
        .unwrap_or("redb")
        .to_string();
    let objects_degraded = stats.counter("objects_degraded");
    // Issue 42: whether the MDS holds the leader lease (singleton duties: T10 key
    // upkeep), and its fencing token. (An MDS from before does not say.)
    let leader = stats.counter("leader");
    let leader_token = stats.counter("leader_token");
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    if let (Some(copies @ 1..), Some(objects)) = (copies_missed, objects_degraded) {
        warnings.push(format!(
            "{objects} object(s) degraded: {copies} copie(s) missed a change while their OSD was away; they are never served, and a repairing scrub puts them back (`maat up`'s scrubber, or `maat admin scrub --repair`)"
        ));
    }
    if osds == 0 {
        warnings.push("no OSD has registered: nothing can be stored".to_string());
    }
    let instance_leader = |s: &maat_proto::msg::DaemonStats| {
        (s.counter("leader") == Some(1)).then(|| s.counter("leader_token"))
    };
    let leaders = instances
        .iter()
        .filter(|(_, s)| s.as_ref().is_ok_and(|s| instance_leader(s).is_some()))
        .count();
    for (address, answer) in &instances {
        if let Err(e) = answer {
            warnings.push(format!(
                "MDS instance {address} does not answer ({e}): clients move to the others"
            ));
        }
    }
    let (leader, leader_token) = match instances.len() {
        1 => (leader, leader_token),
        // Several: the cluster has a leader if any instance holds the lease.
        _ => (
            Some(u64::from(leaders > 0)),
            instances
                .iter()
                .find_map(|(_, s)| s.as_ref().ok().and_then(instance_leader).flatten()),
        ),
    };
    if leader == Some(0) {
        warnings.push(
            "the MDS does not hold the leader lease (another instance holds it, or the metadata store did not answer): it does no T10 key upkeep until it does".to_string(),
        );
    }
    for o in &down {
        warnings.push(format!(
            "osd {} ({}) is down, last heard {}: reads of its copies go to other copies; writes to objects with a copy on it are acknowledged once their partition's min_size of copies took them, and its copies are recorded as missed (never read until a repairing scrub puts them back)",
            o.id,
            o.address,
            heard(o)
        ));
    }
    for p in copies
        .iter()
        .filter(|p| p.replicas > 1 && p.min_size >= p.replicas)
    {
        notes.push(format!(
            "partition {} acknowledges a change only once all its {} copies took it (min_size {}): while any of its OSDs is down, writes to its objects there fail",
            p.name, p.replicas, p.min_size
        ));
    }
    for (name, copies) in &placement.partitions {
        let copies = usize::from(*copies);
        if copies > osds {
            warnings.push(format!(
                "partition {name} keeps {copies} copies but the cluster has {osds} OSDs: its objects get {osds}"
            ));
        } else if copies > hosts.len() && copies > 1 {
            // A local cluster's normal state, not a fault: said, not warned.
            notes.push(format!(
                "partition {name} keeps {copies} copies on {} host(s): copies share a host, so one host's loss can take them all",
                hosts.len()
            ));
        }
    }
    // What `maat up`'s scrubber last did, where this is its cluster's file.
    let scrub = match cluster {
        Some(path) => crate::scrub_status::load_beside(path)?,
        None => None,
    };
    let now = crate::scrub_status::now_ms();
    if let Some(st) = &scrub {
        if let Some(e) = &st.error {
            warnings.push(format!(
                "the scrubber's last run failed ({}): {e}",
                crate::scrub_status::ago(st.finished_ms, now)
            ));
        } else if st.unrepaired > 0 {
            warnings.push(format!(
                "the scrubber's last run left {} findings unrepaired (`maat admin scrub` names them)",
                st.unrepaired
            ));
        }
    }
    let status = if warnings.is_empty() {
        "HEALTH_OK"
    } else {
        "HEALTH_WARN"
    };
    if json {
        say!(
            "{}",
            serde_json::json!({
                "status": status,
                "osds": osds,
                "osds_up": up,
                "hosts": hosts.len(),
                "metadata": engine,
                "leader": leader.map(|l| l == 1),
                "mds_instances": instances.iter().map(|(address, answer)| serde_json::json!({
                    "address": address,
                    "up": answer.is_ok(),
                    "leader": answer.as_ref().ok().map(|s| instance_leader(s).is_some()),
                    "error": answer.as_ref().err().map(ToString::to_string),
                })).collect::<Vec<_>>(),
                "leader_token": leader_token,
                "copies_missed": copies_missed,
                "objects_degraded": objects_degraded,
                "partitions": copies.iter().map(|p| serde_json::json!({"name": p.name, "copies": p.replicas, "min_size": p.min_size})).collect::<Vec<_>>(),
                "warnings": warnings,
                "notes": notes,
                "scrub": scrub,
            })
        );
        return Ok(());
    }
    say!("cluster: {status}");
    say!(
        "  osds:       {osds} ({up} up, {} down) on {} host(s)",
        down.len(),
        hosts.len()
    );
    let partitions: Vec<String> = copies
        .iter()
        .map(|p| {
            format!(
                "{} ({} cop{}, min_size {})",
                p.name,
                p.replicas,
                if p.replicas == 1 { "y" } else { "ies" },
                p.min_size
            )
        })
        .collect();
    say!("  partitions: {}", partitions.join(", "));
    let engine_note = match engine.as_str() {
        "redb" => " (a file beside it)",
        "postgresql" => " (a PostgreSQL database)",
        _ => "",
    };
    if instances.len() == 1 {
        say!(
            "  metadata:   {engine}, one MDS{engine_note}{}",
            match (leader, leader_token) {
                (Some(1), Some(token)) => format!(", leader (lease token {token})"),
                (Some(_), _) => ", not the leader".to_string(),
                _ => String::new(),
            }
        );
    } else {
        let up = instances.iter().filter(|(_, s)| s.is_ok()).count();
        say!(
            "  metadata:   {engine}{engine_note}, {} MDS instances ({up} up)",
            instances.len()
        );
        for (address, answer) in &instances {
            let state = match answer {
                Ok(s) => match instance_leader(s) {
                    Some(Some(token)) => format!("up, leader (lease token {token})"),
                    Some(None) => "up, leader".to_string(),
                    None => "up".to_string(),
                },
                Err(_) => "DOWN".to_string(),
            };
            say!("    mds {address}: {state}");
        }
    }
    match (copies_missed, objects_degraded) {
        (Some(0), _) => say!("  copies:     every copy current"),
        (Some(copies), Some(objects)) => {
            say!("  copies:     {objects} object(s) degraded ({copies} copie(s) missed a change)")
        }
        _ => say!("  copies:     unknown (the MDS does not count degraded copies)"),
    }
    // Said plainly: copies come back only by a repairing scrub.
    say!("  recovery:   by repairing scrubs: `maat up`'s scrubber (after an OSD restarts or returns, and daily), or `maat admin scrub --repair`");
    match &scrub {
        Some(st) if st.error.is_none() => say!(
            "  scrub:      last {} run {} ({:.1} s): {} files, {} objects, {} copies missing, {} bad, {} repaired ({} in all); last deep run {}",
            st.depth,
            crate::scrub_status::ago(st.finished_ms, now),
            st.seconds,
            st.files,
            st.objects,
            st.copies_missing,
            st.copies_bad,
            st.copies_repaired,
            st.copies_repaired_total,
            st.last_deep_ms
                .map_or("never".into(), |ms| crate::scrub_status::ago(ms, now))
        ),
        Some(_) => {}
        None => say!("  scrub:      no run recorded beside this cluster file"),
    }
    for w in &warnings {
        say!("  warning: {w}");
    }
    for n in &notes {
        say!("  note:    {n}");
    }
    Ok(())
}

/// `maat admin scrub [PATH] [--repair]`.
pub fn scrub(
    c: &maat_client::Client,
    path: &str,
    depth: maat_client::ScrubDepth,
    repair: bool,
    json: bool,
) -> Result<()> {
    let mut files = 0u64;
    let report = c.scrub(path, depth, repair, &mut |p| {
        files += 1;
        if !json && files % 100 == 0 {
            eprintln!("maat: scrub: {files} files, at {p}");
        }
    })?;
    if json {
        say!("{}", serde_json::to_string(&report)?);
    } else {
        say!(
            "scrubbed {} files, {} objects: {} copies good, {} missing, {} bad, {} repaired; {} objects with no good copy",
            report.files,
            report.objects,
            report.copies_good,
            report.copies_missing,
            report.copies_bad,
            report.copies_repaired,
            report.objects_lost
        );
        for f in &report.findings {
            say!("  {f}");
        }
    }
    if report.unrepaired() > 0 {
        use std::io::Write as _;
        std::io::stdout().flush()?;
        std::process::exit(1);
    }
    Ok(())
}
