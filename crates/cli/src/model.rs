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

/// Prints the model for `w` with the paper's costs and this machine's.
pub fn run(w: Workload, json: bool) -> Result<()> {
    if w.opens <= 0.0 || w.file_size <= 0.0 || w.object_size <= 0.0 || w.group_files < 1.0 {
        bail!("--opens, --file-size and --object-size must be positive, --group-files at least 1");
    }
    if w.osds < 1.0 {
        bail!("--osds must be at least 1");
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
    Ok(())
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
