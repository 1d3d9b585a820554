//! `maat bench crypt-io` (E9, paper 004 Fig. 7): sequential write and read of one large
//! encrypted file, the read measured four ways in the same run:
//!
//! * `aead`: the writer reads back with the keys it derived when it made the file (block
//!   AEAD and leaf-key derivation only, no KDS);
//! * `aggregated`: a reader that holds no keys asks a KDS once for the level-0 key and
//!   derives every leaf key itself (Horus with one aggregated range key);
//! * `leaf`: a reader asks for leaf keys only, one request per read window (SPEC H8 at
//!   the deepest level, no prefetching);
//! * `leaf_prefetch`: leaf keys, each request also asking for the next `--prefetch-mib`.
//!
//! Rounds alternate the order of the reads. KDS requests and keys per read are exact
//! (the KDS's own counters).

use super::{counter, LocalCluster};
use anyhow::{anyhow, bail, Result};
use maat_client::Client;
use std::path::PathBuf;
use std::time::Instant;

const MIB: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Read {
    Aead,
    Aggregated,
    Leaf,
    LeafPrefetch,
}

impl Read {
    const ALL: [Read; 4] = [Read::Aead, Read::Aggregated, Read::Leaf, Read::LeafPrefetch];

    fn name(self) -> &'static str {
        match self {
            Read::Aead => "aead",
            Read::Aggregated => "aggregated",
            Read::Leaf => "leaf",
            Read::LeafPrefetch => "leaf_prefetch",
        }
    }
}

/// A deterministic, incompressible-looking byte stream.
struct Pattern(u64);

impl std::io::Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        for b in buf.iter_mut() {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
        Ok(buf.len())
    }
}

/// Seconds, KDS grants and keys of one whole-file read by `c`.
fn read_once(c: &mut Client, admin: &mut Client, path: &str) -> Result<(f64, u64, u64)> {
    let (g0, k0) = (
        counter(admin, "kds", "grants")?,
        counter(admin, "kds", "keys_granted")?,
    );
    let start = Instant::now();
    let n = c.get(path, &mut std::io::sink(), &mut |_| {})?;
    let secs = start.elapsed().as_secs_f64();
    if n == 0 {
        bail!("{path} read back empty");
    }
    let (g1, k1) = (
        counter(admin, "kds", "grants")?,
        counter(admin, "kds", "keys_granted")?,
    );
    Ok((secs, g1 - g0, k1 - k0))
}

pub(super) fn run_crypt_io(
    size_mib: u64,
    rounds: u32,
    prefetch_mib: u64,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    if size_mib == 0 || size_mib > 64 * 1024 || rounds == 0 {
        bail!("--size-mib must be 1 to 65536 and --rounds at least 1");
    }
    let cluster = LocalCluster::start(data)?;
    let mut admin = cluster.admin()?;
    let mut writer = cluster.admin()?;
    let mut reader = cluster.admin()?;
    let path = "/crypt-io";
    let size = size_mib * MIB;
    let leaf_level = maat_proto::encrypted::file_shape().leaf_level();
    let mut write_secs = 0.0;
    let mut read_secs = [0.0f64; 4];
    let mut kds = [(0u64, 0u64); 4];
    // KDS requests and keys of the last round's write (as `kds` holds the last round's
    // reads).
    let mut write_kds = (0u64, 0u64);
    for round in 0..rounds {
        if !json {
            eprintln!(
                "bench crypt-io: round {}: writing {size_mib} MiB",
                round + 1
            );
        }
        let kds_before = (
            counter(&mut admin, "kds", "grants")?,
            counter(&mut admin, "kds", "keys_granted")?,
        );
        let start = Instant::now();
        writer.put_with(
            &mut Pattern(0x6d61_6174 + u64::from(round)),
            size,
            path,
            Some(true),
            &mut |_| {},
        )?;
        write_secs += start.elapsed().as_secs_f64();
        // Measured, as the reads are: what the KDS served during the write.
        write_kds = (
            counter(&mut admin, "kds", "grants")?.saturating_sub(kds_before.0),
            counter(&mut admin, "kds", "keys_granted")?.saturating_sub(kds_before.1),
        );
        let mut order = Read::ALL.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for mode in order {
            let i = Read::ALL
                .iter()
                .position(|m| *m == mode)
                .ok_or_else(|| anyhow!("mode"))?;
            let c = match mode {
                Read::Aead => &mut writer,
                _ => &mut reader,
            };
            match mode {
                Read::Aead => {}
                Read::Aggregated => {
                    c.set_key_level(0);
                    c.set_key_prefetch(0);
                }
                Read::Leaf => {
                    c.set_key_level(leaf_level);
                    c.set_key_prefetch(0);
                }
                Read::LeafPrefetch => {
                    c.set_key_level(leaf_level);
                    c.set_key_prefetch(prefetch_mib * MIB);
                }
            }
            if mode != Read::Aead {
                c.forget_file_keys();
            }
            if !json {
                eprintln!("bench crypt-io: round {}: read, {}", round + 1, mode.name());
            }
            let (secs, grants, keys) = read_once(c, &mut admin, path)?;
            if let (Some(t), Some(k)) = (read_secs.get_mut(i), kds.get_mut(i)) {
                *t += secs;
                *k = (grants, keys);
            }
        }
    }
    let mb_s = |secs: f64| size_mib as f64 * f64::from(rounds) / secs;
    let aead = mb_s(read_secs.first().copied().unwrap_or(f64::NAN));
    let mut out = serde_json::Map::new();
    out.insert("size_mib".into(), size_mib.into());
    out.insert("write_mb_s".into(), mb_s(write_secs).into());
    out.insert("kds_requests_write".into(), write_kds.0.into());
    out.insert("kds_keys_write".into(), write_kds.1.into());
    let rows: Vec<(Read, f64, (u64, u64))> = Read::ALL
        .iter()
        .zip(read_secs.iter().zip(kds.iter()))
        .map(|(m, (secs, k))| (*m, mb_s(*secs), *k))
        .collect();
    for (mode, rate, (requests, keys)) in &rows {
        out.insert(format!("read_{}_mb_s", mode.name()), (*rate).into());
        out.insert(
            format!("read_{}_over_aead", mode.name()),
            (rate / aead).into(),
        );
        out.insert(format!("kds_requests_{}", mode.name()), (*requests).into());
        out.insert(format!("kds_keys_{}", mode.name()), (*keys).into());
    }
    if json {
        say!("{}", serde_json::Value::Object(out));
        return Ok(());
    }
    say!(
        "E9 crypt-io: one {size_mib} MiB encrypted file (64 KiB blocks), 4 OSDs, {rounds} round(s), MiB/s\n"
    );
    say!("| op | MiB/s | × AEAD-only read | KDS requests per op | keys per op |");
    say!("|---|---|---|---|---|");
    say!(
        "| write (creator's keys) | {:.0} | | {} | {} |",
        mb_s(write_secs),
        write_kds.0,
        write_kds.1
    );
    for (mode, rate, (requests, keys)) in &rows {
        say!(
            "| read, {} | {rate:.0} | {:.2} | {requests} | {keys} |",
            mode.name(),
            rate / aead,
        );
    }
    say!("\nTarget: aggregated ≥ 0.90 × AEAD-only (paper 004 Fig. 7 shape).");
    Ok(())
}
