//! `maat stats`: requests, refusals by reason, signatures, MACs, cache hit ratios and
//! grouping per daemon and for this client.

use anyhow::Result;
use std::path::PathBuf;

pub fn run(cluster: &Option<PathBuf>, json: bool) -> Result<()> {
    let c = crate::client(cluster)?;
    let daemons = c.daemon_stats()?;
    let cs = c.client_stats();
    let client_counters = vec![
        ("requests".to_string(), cs.requests),
        (
            "capability_cache_hits".to_string(),
            cs.capability_cache_hits,
        ),
        (
            "capability_cache_misses".to_string(),
            cs.capability_cache_misses,
        ),
        // Issue 41: reads another copy served, and copies a change did not reach.
        ("copy_failovers".to_string(), cs.copy_failovers),
        ("copies_failed".to_string(), cs.copies_failed),
        (
            "copies_recorded_missed".to_string(),
            cs.copies_recorded_missed,
        ),
    ];
    if json {
        let mut obj = serde_json::Map::new();
        for d in daemons.iter() {
            let mut m = serde_json::Map::new();
            for (k, v) in &d.counters {
                m.insert(k.clone(), (*v).into());
            }
            m.insert("cache_hit_ratio".into(), ratio(&d.counters).into());
            obj.insert(d.daemon.clone(), m.into());
        }
        let mut m = serde_json::Map::new();
        for (k, v) in &client_counters {
            m.insert(k.clone(), (*v).into());
        }
        m.insert("cache_hit_ratio".into(), ratio(&client_counters).into());
        obj.insert("client".into(), m.into());
        say!("{}", serde_json::Value::Object(obj));
    } else {
        let show = [
            "requests",
            "refusals",
            "signatures_made",
            "signatures_verified",
            "macs_computed",
            "macs_verified",
        ];
        say!(
            "{:<10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "daemon",
            "requests",
            "refused",
            "sig_made",
            "sig_verif",
            "mac_made",
            "mac_check",
            "cache_hit"
        );
        let mut rows: Vec<(String, Vec<(String, u64)>)> = daemons
            .into_iter()
            .map(|d| (d.daemon, d.counters))
            .collect();
        rows.push(("client".into(), client_counters));
        let mut reasons = Vec::new();
        let mut waits = Vec::new();
        let mut grouping = Vec::new();
        let mut backgrounds = Vec::new();
        for (name, counters) in rows {
            let get = |k: &str| {
                counters
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_else(|| "-".into())
            };
            let r = ratio(&counters);
            say!(
                "{:<10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
                name,
                get(show[0]),
                get(show[1]),
                get(show[2]),
                get(show[3]),
                get(show[4]),
                get(show[5]),
                if r.is_nan() {
                    "-".to_string()
                } else {
                    format!("{:.1}%", r * 100.0)
                }
            );
            for (k, v) in &counters {
                match k.strip_prefix("refused:") {
                    // A daemon's first 500 ms: requests wait and are sent again; not
                    // counted as refusals (SPEC T7).
                    Some("NotReady") => waits.push(format!("{name} {v}")),
                    Some(code) => reasons.push(format!("{name}: {code} {v}")),
                    None => {}
                }
            }
            grouping.extend(grouping_lines(&counters));
            let background = |k: &str| get(&format!("{k}_background"));
            let kinds = ["signatures_made", "signatures_verified", "macs_computed"];
            if kinds.iter().any(|k| background(k) != "-") {
                backgrounds.push(format!(
                    "{name} {} signed, {} verified, {} MACs",
                    background("signatures_made"),
                    background("signatures_verified"),
                    background("macs_computed")
                ));
            }
        }
        if !backgrounds.is_empty() {
            say!(
                "of the crypto above, background work (revocation catch-ups of each KDS and OSD, \
                 OSD registration; no request): {}",
                backgrounds.join(", ")
            );
        }
        if !reasons.is_empty() {
            say!("refused, by reason: {}", reasons.join(", "));
        }
        if !waits.is_empty() {
            say!(
                "asked to wait just after a start, then sent again (not refusals): {}",
                waits.join(", ")
            );
        }
        for line in grouping {
            say!("{line}");
        }
    }
    Ok(())
}

/// SPEC M6 per strategy, from the MDS's `grouping:<strategy>:<what>` counters: one line
/// per strategy that issued or served a capability.
fn grouping_lines(counters: &[(String, u64)]) -> Vec<String> {
    let get = |strategy: &str, what: &str| {
        counters
            .iter()
            .find(|(n, _)| *n == format!("grouping:{strategy}:{what}"))
            .map_or(0, |(_, v)| *v)
    };
    std::iter::once(&"single")
        .chain(maat_mds::grouping::Strategies::NAMES.iter())
        .filter_map(|s| {
            let (issued, auths, hits) = (
                get(s, "capabilities"),
                get(s, "authorizations"),
                get(s, "cache_hits"),
            );
            (issued + hits > 0).then(|| {
                format!(
                    "grouping {s}: {issued} capabilities, {:.1} authorizations each, {:.1}% of its opens from the cache",
                    auths as f64 / issued.max(1) as f64,
                    100.0 * hits as f64 / (issued + hits) as f64
                )
            })
        })
        .collect()
}

/// Capability cache hit ratio from a counter list (NaN when nothing was looked up).
fn ratio(counters: &[(String, u64)]) -> f64 {
    let get = |k: &str| {
        counters
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v)
            .unwrap_or(0)
    };
    let hits = get("capability_cache_hits") as f64;
    let total = hits + get("capability_cache_misses") as f64;
    if total == 0.0 {
        f64::NAN
    } else {
        hits / total
    }
}
