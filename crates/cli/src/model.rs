//! `maat model` (SPEC M12, E6): paper 001 §4.6's petascale analysis. The MDS's cost of
//! authorizing `opens` opens of files of `file_size` bytes striped in objects of
//! `object_size` bytes is
//!
//! `M(S) = ((objects per byte × S) / G) × C`
//!
//! with G the authorizations per capability and C the cost of making one: extended
//! capabilities (G = `group_files` × objects of a file, one signature), whole-file
//! capabilities (G = objects of a file, one signature) and per-object capabilities (G = 1,
//! one MAC: T10 credentials). Beside it, what the OSDs spend checking them: an extended or
//! whole-file capability is verified once per OSD that caches it, a per-object credential
//! per request. The costs are measured on this machine at start and printed beside the
//! paper's (ESIGN 350 µs, HMAC 3 µs), which reproduce its figures (35 s, 350 s, 3,072 s).
//! Then the same analysis per second for given numbers of clients, files in use and open
//! rates ([`rates`]): MDS cores, checks per OSD, live capabilities and what renewing them
//! costs one by one against one batched token per renewal period (SPEC M8).

use anyhow::{bail, Result};
use maat_crypto::mac::MacKey;
use maat_crypto::sign::SigningKey;
use maat_crypto::Secret32;
use std::time::Instant;

/// The paper's signature cost (ESIGN), µs.
pub const PAPER_SIGNATURE_US: f64 = 350.0;
/// The paper's MAC cost (HMAC), µs.
pub const PAPER_MAC_US: f64 = 3.0;

/// Workload of the model.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// open() calls.
    pub opens: f64,
    /// Bytes per file.
    pub file_size: f64,
    /// Bytes per object.
    pub object_size: f64,
    /// Files one extended capability authorizes.
    pub group_files: f64,
    /// OSDs a file's objects spread over.
    pub osds: f64,
}

/// Crypto costs, µs.
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    /// Make one signature.
    pub sign_us: f64,
    /// Verify one signature.
    pub verify_us: f64,
    /// Compute or check one MAC.
    pub mac_us: f64,
}

/// One scheme's total costs, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchemeCost {
    /// MDS time making capabilities.
    pub mds_s: f64,
    /// OSD time checking them (all OSDs together).
    pub osd_s: f64,
}

/// Extended, whole-file and per-object costs.
pub fn model(w: &Workload, c: &Costs) -> [SchemeCost; 3] {
    let objects = (w.file_size / w.object_size).ceil().max(1.0);
    // Each file's objects reach min(objects, osds) OSDs; a capability is verified once at
    // each OSD it reaches (then cached), a credential at every object request.
    let osds_per_file = objects.min(w.osds);
    let extended_caps = w.opens / w.group_files;
    let extended = SchemeCost {
        mds_s: extended_caps * c.sign_us / 1e6,
        osd_s: extended_caps * (w.group_files * osds_per_file).min(w.osds) * c.verify_us / 1e6,
    };
    let whole = SchemeCost {
        mds_s: w.opens * c.sign_us / 1e6,
        osd_s: w.opens * osds_per_file * c.verify_us / 1e6,
    };
    let per_object = SchemeCost {
        mds_s: w.opens * objects * c.mac_us / 1e6,
        osd_s: w.opens * objects * c.mac_us / 1e6,
    };
    [extended, whole, per_object]
}

/// A load in steady state: the paper's analysis per second, for given numbers of clients,
/// files and request rates.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Clients.
    pub clients: f64,
    /// Distinct files the clients open within one capability lifetime.
    pub files: f64,
    /// open() calls per client per second.
    pub open_rate: f64,
    /// Capability lifetime, seconds (SPEC M7; renewal at 80 % of it, M8).
    pub lifetime_s: f64,
}

/// One scheme under a [`Load`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchemeRate {
    /// Signatures (or MACs, per-object) the MDS makes per second to authorize opens.
    pub mds_ops_per_s: f64,
    /// MDS cores those take.
    pub mds_cores: f64,
    /// Checks (verifications, or MACs) per second at each OSD.
    pub osd_ops_per_s: f64,
    /// Capabilities (credentials) alive at once, each renewed or reissued once a lifetime.
    pub live: f64,
    /// Signatures per second to renew them one by one.
    pub renew_each_per_s: f64,
}

/// Extended, whole-file, per-object and extended with the MDS's capability cache
/// (SPEC M5: under UNIX grouping at most three capabilities per file, owner, group,
/// other, each signed again after half its lifetime) under `load`.
pub fn rates(w: &Workload, load: &Load, c: &Costs) -> [SchemeRate; 4] {
    let objects = (w.file_size / w.object_size).ceil().max(1.0);
    let osds_per_file = objects.min(w.osds);
    let opens = load.clients * load.open_rate;
    let in_lifetime = opens * load.lifetime_s;
    let scheme = |issued_per_s: f64, cost_us: f64, osd_ops_per_s: f64, live: f64| SchemeRate {
        mds_ops_per_s: issued_per_s,
        mds_cores: issued_per_s * cost_us / 1e6,
        osd_ops_per_s: osd_ops_per_s / w.osds,
        live,
        renew_each_per_s: live / load.lifetime_s,
    };
    let extended_per_s = opens / w.group_files;
    let reach = (w.group_files * osds_per_file).min(w.osds);
    let extended = scheme(
        extended_per_s,
        c.sign_us,
        extended_per_s * reach,
        in_lifetime / w.group_files,
    );
    let whole = scheme(opens, c.sign_us, opens * osds_per_file, in_lifetime);
    let per_object = scheme(
        opens * objects,
        c.mac_us,
        opens * objects,
        in_lifetime * objects,
    );
    // A cached capability is handed out again until half its lifetime is spent: at most
    // 3 per file group per half lifetime are signed, however many clients open.
    let cached_live = (3.0 * load.files / w.group_files).min(in_lifetime / w.group_files);
    let cached_per_s = extended_per_s.min(cached_live / (load.lifetime_s / 2.0));
    let cached = scheme(cached_per_s, c.sign_us, cached_per_s * reach, cached_live);
    [extended, whole, per_object, cached]
}

/// The file size above which extended capabilities cost the MDS less than per-object ones.
pub fn crossover_bytes(w: &Workload, c: &Costs) -> f64 {
    w.object_size * c.sign_us / (w.group_files * c.mac_us)
}

/// Median of `rounds` timings of `iterations` calls of `f`, µs per call.
fn time_us(iterations: u32, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iterations {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(0.0)
}

/// Signature, verification and MAC costs on this machine (a capability-sized message).
pub fn measure() -> Result<Costs> {
    let key = SigningKey::from_seed(&[7; 32]);
    let verifying = key.verifying_key();
    let message = [0x5au8; 160];
    let signature = key.sign(&message);
    let mac = MacKey::new(Secret32::from_bytes([9; 32]));
    let sign_us = time_us(400, || {
        std::hint::black_box(key.sign(std::hint::black_box(&message)));
    });
    let verify_us = time_us(200, || {
        let _ = std::hint::black_box(verifying.verify(&message, &signature));
    });
    let mac_us = time_us(20_000, || {
        std::hint::black_box(mac.tag(&[std::hint::black_box(&message)]));
    });
    if verifying.verify(&message, &signature).is_err() {
        bail!("the signature measured does not verify");
    }
    Ok(Costs {
        sign_us,
        verify_us,
        mac_us,
    })
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS.get(unit).unwrap_or(&"B"))
}

/// Prints the model for `w` with the paper's costs and this machine's, then per second
/// under `load`.
pub fn run(w: Workload, load: Load, meta: &crate::model_meta::MetaArgs, json: bool) -> Result<()> {
    crate::model_meta::check(meta)?;
    if w.opens <= 0.0 || w.file_size <= 0.0 || w.object_size <= 0.0 || w.group_files < 1.0 {
        bail!("--opens, --file-size and --object-size must be positive, --group-files at least 1");
    }
    if w.osds < 1.0 {
        bail!("--osds must be at least 1");
    }
    if load.clients < 1.0 || load.files < 1.0 || load.open_rate <= 0.0 || load.lifetime_s <= 0.0 {
        bail!("--clients and --files must be at least 1, --open-rate and --lifetime positive");
    }
    let paper = Costs {
        sign_us: PAPER_SIGNATURE_US,
        verify_us: PAPER_SIGNATURE_US,
        mac_us: PAPER_MAC_US,
    };
    let here = measure()?;
    let names = ["extended", "whole_file", "per_object"];
    let with_paper = model(&w, &paper);
    let with_here = model(&w, &here);
    if json {
        let mut obj = serde_json::Map::new();
        obj.insert("sign_us".into(), here.sign_us.into());
        obj.insert("verify_us".into(), here.verify_us.into());
        obj.insert("mac_us".into(), here.mac_us.into());
        for ((name, p), h) in names.iter().zip(with_paper).zip(with_here) {
            obj.insert(format!("{name}_mds_s_paper_costs"), p.mds_s.into());
            obj.insert(format!("{name}_mds_s"), h.mds_s.into());
            obj.insert(format!("{name}_osd_s"), h.osd_s.into());
        }
        obj.insert("crossover_bytes".into(), crossover_bytes(&w, &here).into());
        obj.insert(
            "crossover_bytes_paper_costs".into(),
            crossover_bytes(&w, &paper).into(),
        );
        let rate_names = ["extended", "whole_file", "per_object", "extended_cached"];
        for (name, r) in rate_names.iter().zip(rates(&w, &load, &here)) {
            obj.insert(format!("{name}_mds_ops_per_s"), r.mds_ops_per_s.into());
            obj.insert(format!("{name}_mds_cores"), r.mds_cores.into());
            obj.insert(format!("{name}_osd_ops_per_s_each"), r.osd_ops_per_s.into());
            obj.insert(format!("{name}_live"), r.live.into());
            obj.insert(
                format!("{name}_renew_each_per_s"),
                r.renew_each_per_s.into(),
            );
        }
        obj.insert(
            "renew_batched_per_s".into(),
            (1.0 / renewal_period_s(&load)).into(),
        );
        for r in crate::model_meta::meta_rates(meta) {
            let n = r.instances;
            obj.insert(format!("mds_x{n}_reads_per_s"), r.reads_per_s.into());
            obj.insert(
                format!("mds_x{n}_mds_reads_per_s"),
                r.mds_reads_per_s.into(),
            );
            obj.insert(format!("mds_x{n}_db_reads_per_s"), r.db_reads_per_s.into());
            obj.insert(format!("mds_x{n}_changes_per_s"), r.changes_per_s.into());
        }
        let (instances, db_cores) = crate::model_meta::needed(meta, load.clients * load.open_rate);
        obj.insert("load_mds_instances_needed".into(), instances.into());
        obj.insert("load_db_cores_needed".into(), db_cores.into());
        say!("{}", serde_json::Value::Object(obj));
        return Ok(());
    }
    say!(
        "E6 cost model (paper 001 §4.6): {} opens of {} files in {} objects over {} OSDs, \
         {} files per extended capability",
        w.opens,
        human_bytes(w.file_size),
        human_bytes(w.object_size),
        w.osds,
        w.group_files
    );
    say!(
        "costs: paper sign {PAPER_SIGNATURE_US} µs, MAC {PAPER_MAC_US} µs; this machine \
         sign {:.1} µs, verify {:.1} µs, MAC {:.3} µs",
        here.sign_us,
        here.verify_us,
        here.mac_us
    );
    say!(
        "{:<22} {:>18} {:>18} {:>18}",
        "scheme",
        "MDS s (paper C)",
        "MDS s (here)",
        "OSD s (here)"
    );
    let labels = [
        "extended capability",
        "whole-file capability",
        "per-object (T10)",
    ];
    for ((label, p), h) in labels.iter().zip(with_paper).zip(with_here) {
        say!(
            "{label:<22} {:>18.1} {:>18.3} {:>18.3}",
            p.mds_s,
            h.mds_s,
            h.osd_s
        );
    }
    say!(
        "extended capabilities cost the MDS less than per-object ones for files over {} \
         (paper's costs: {})",
        human_bytes(crossover_bytes(&w, &here)),
        human_bytes(crossover_bytes(&w, &paper))
    );
    say!();
    say!(
        "per second: {} clients × {} opens/s, {} files in use, {} s lifetime (this machine's costs)",
        load.clients,
        load.open_rate,
        load.files,
        load.lifetime_s
    );
    say!(
        "{:<22} {:>14} {:>10} {:>16} {:>14} {:>16}",
        "scheme",
        "MDS crypto/s",
        "MDS cores",
        "checks/s/OSD",
        "live",
        "renewals/s each"
    );
    let rate_labels = [
        "extended capability",
        "whole-file capability",
        "per-object (T10)",
        "extended + MDS cache",
    ];
    for (label, r) in rate_labels.iter().zip(rates(&w, &load, &here)) {
        say!(
            "{label:<22} {:>14.1} {:>10.3} {:>16.2} {:>14.0} {:>16.1}",
            r.mds_ops_per_s,
            r.mds_cores,
            r.osd_ops_per_s,
            r.live,
            r.renew_each_per_s
        );
    }
    say!(
        "batched renewal (M8): one signed token per renewal period ({}% of a lifetime, {:.0} s) \
         renews every live capability: {:.4} signatures/s, whatever the number of clients",
        maat_client::limits::RENEW_AT_PERCENT,
        renewal_period_s(&load),
        1.0 / renewal_period_s(&load)
    );
    crate::model_meta::print(meta, load.clients * load.open_rate)
}

/// How often a client renews what it holds (SPEC M8): when the first of its capabilities
/// is past [`maat_client::limits::RENEW_AT_PERCENT`] of its lifetime, so every that fraction of a
/// lifetime.
fn renewal_period_s(load: &Load) -> f64 {
    load.lifetime_s * maat_client::limits::RENEW_AT_PERCENT as f64 / 100.0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const PAPER: Costs = Costs {
        sign_us: PAPER_SIGNATURE_US,
        verify_us: PAPER_SIGNATURE_US,
        mac_us: PAPER_MAC_US,
    };

    fn paper_workload() -> Workload {
        Workload {
            opens: 1e6,
            file_size: (1u64 << 30) as f64,
            object_size: (1u64 << 20) as f64,
            group_files: 10.0,
            osds: 1000.0,
        }
    }

    #[test]
    fn the_papers_costs_give_the_papers_figures() {
        let [extended, whole, per_object] = model(&paper_workload(), &PAPER);
        assert!((extended.mds_s - 35.0).abs() < 1e-9, "{extended:?}");
        assert!((whole.mds_s - 350.0).abs() < 1e-9, "{whole:?}");
        assert!((per_object.mds_s - 3072.0).abs() < 1e-9, "{per_object:?}");
        // "extended capabilities incur a lower overhead than per-object capabilities when
        // opening any file larger than 12 MB"
        let crossover = crossover_bytes(&paper_workload(), &PAPER) / (1u64 << 20) as f64;
        assert!((crossover - 11.67).abs() < 0.01, "{crossover}");
    }

    #[test]
    fn rates_scale_with_clients_and_the_cache_bounds_signatures_by_files() {
        let w = Workload {
            opens: 1.0,
            file_size: 4.0 * (1u64 << 20) as f64,
            object_size: (1u64 << 20) as f64,
            group_files: 10.0,
            osds: 8.0,
        };
        let one = Costs {
            sign_us: 100.0,
            verify_us: 100.0,
            mac_us: 1.0,
        };
        let load = |clients: f64| Load {
            clients,
            files: 1_000.0,
            open_rate: 2.0,
            lifetime_s: 300.0,
        };
        let [extended, whole, per_object, cached] = rates(&w, &load(1_000.0), &one);
        // 2,000 opens/s: 200 extended capabilities/s (10 files each), 2,000 whole-file.
        assert_eq!(extended.mds_ops_per_s, 200.0);
        assert!((extended.mds_cores - 0.02).abs() < 1e-12);
        assert_eq!(whole.mds_ops_per_s, 2_000.0);
        // Each extended capability reaches all 8 OSDs, a whole-file one its file's 4.
        assert_eq!(extended.osd_ops_per_s, 200.0);
        assert_eq!(whole.osd_ops_per_s, 1_000.0);
        // Per object: 4 MACs per open at the MDS, one per request at the OSDs.
        assert_eq!(per_object.mds_ops_per_s, 8_000.0);
        assert_eq!(per_object.osd_ops_per_s, 1_000.0);
        assert_eq!(whole.renew_each_per_s, 2_000.0);
        // The cache: 3 × 1,000 files / 10 = 300 capabilities per half lifetime (150 s).
        assert_eq!(cached.live, 300.0);
        assert_eq!(cached.mds_ops_per_s, 2.0);
        // Ten times the clients: ten times the uncached work, the cached bound unchanged.
        let [extended10, _, _, cached10] = rates(&w, &load(10_000.0), &one);
        assert_eq!(extended10.mds_ops_per_s, 2_000.0);
        assert_eq!(cached10.mds_ops_per_s, 2.0);
        // A load too light to fill the cache signs what it opens.
        let light = Load {
            clients: 1.0,
            files: 1_000.0,
            open_rate: 0.01,
            lifetime_s: 300.0,
        };
        let [extended, _, _, cached] = rates(&w, &light, &one);
        assert_eq!(cached.mds_ops_per_s, extended.mds_ops_per_s);
    }

    #[test]
    fn osd_work_per_scheme_counts_each_verification_once_per_osd() {
        let w = Workload {
            opens: 100.0,
            file_size: 4.0 * (1u64 << 20) as f64,
            object_size: (1u64 << 20) as f64,
            group_files: 10.0,
            osds: 8.0,
        };
        let one = Costs {
            sign_us: 1e6,
            verify_us: 1e6,
            mac_us: 1e6,
        };
        let [extended, whole, per_object] = model(&w, &one);
        // 10 capabilities, each reaching all 8 OSDs (10 files × 4 objects > 8).
        assert_eq!(extended.osd_s, 80.0);
        // 100 capabilities, each verified at the 4 OSDs of its file.
        assert_eq!(whole.osd_s, 400.0);
        // 400 object requests, one MAC each.
        assert_eq!(per_object.osd_s, 400.0);
        assert_eq!(per_object.mds_s, 400.0);
    }
}
