//! `maat keys …`: range grants on encrypted files (SPEC H6) from the command line, and the
//! byte-range syntax `maat cat --range` shares with them.

use anyhow::{anyhow, bail, Result};
use clap::Subcommand;
use std::io::Write;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Let users read byte ranges of an encrypted file you own, beside its permission
    /// bits: they get the keys of those ranges and nothing else, so the rest stays
    /// unreadable to them even with raw access to the objects. Ranges are in whole
    /// blocks of the file's key tree (64 KiB for files made now). A grant never gives
    /// write access. With --slices, user i of the N named reads the i-th of N equal
    /// slices of the file (whole blocks; they follow the file's size).
    Grant {
        /// Path in Maat (an encrypted file).
        path: String,
        /// User names, comma-separated or repeated (in rank order for --slices).
        #[arg(long, required = true, value_delimiter = ',')]
        to: Vec<String>,
        /// A byte range START..END (END exclusive), with optional KiB, MiB, GiB
        /// suffixes (e.g. `0..1MiB`, `1MiB..2MiB`); repeat for several.
        #[arg(long, required_unless_present = "slices", value_parser = parse_range)]
        range: Vec<(u64, u64)>,
        /// The i-of-n slice policy over the users of --to (replaces the file's policy).
        #[arg(long, conflicts_with = "range")]
        slices: bool,
    },
    /// Withdraw every range grant of users on a file you own. New opens are refused at
    /// once; what they opened before stays readable until its capability expires (the
    /// capability lifetime, 5 minutes by default). Re-encrypting the revoked ranges
    /// (`rekey`) is not built yet.
    Revoke {
        /// Path in Maat.
        path: String,
        /// User names, comma-separated or repeated.
        #[arg(long, required = true, value_delimiter = ',')]
        from: Vec<String>,
    },
    /// The range grants on a file you own.
    List {
        /// Path in Maat.
        path: String,
        /// One JSON object per grant.
        #[arg(long)]
        json: bool,
    },
}

/// A byte count: digits with an optional `K`/`KiB`, `M`/`MiB`, `G`/`GiB` suffix.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| anyhow!("`{s}`: expected a byte count such as 65536 or 64KiB"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => bail!("`{s}`: unknown unit `{other}` (use KiB, MiB or GiB)"),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| anyhow!("`{s}` is too large"))
}

/// `START..END` (END exclusive, END > START).
pub fn parse_range(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| anyhow!("`{s}`: expected START..END, e.g. 0..1MiB"))?;
    let (a, b) = (parse_bytes(a)?, parse_bytes(b)?);
    if a >= b {
        bail!("`{s}`: the range is empty (END is exclusive and must exceed START)");
    }
    Ok((a, b))
}

pub fn run(cluster: &Option<PathBuf>, command: KeysCommand) -> Result<()> {
    let mut c = crate::client(cluster)?;
    match command {
        KeysCommand::Grant {
            path,
            to,
            range,
            slices,
        } => {
            if slices {
                c.keys_grant_slices(&path, &to)?;
            } else {
                c.keys_grant(&path, &to, &range)?;
            }
        }
        KeysCommand::Revoke { path, from } => c.keys_revoke(&path, &from)?,
        KeysCommand::List { path, json } => {
            let mut out = std::io::stdout().lock();
            for g in c.keys_list(&path)? {
                let ranges: Vec<String> =
                    g.ranges.iter().map(|(a, b)| format!("{a}..{b}")).collect();
                if json {
                    let v = serde_json::json!({
                        "user": g.user,
                        "ranges": g.ranges,
                        "slice": g.slice.map(|(i, n)| serde_json::json!({"rank": i, "of": n})),
                    });
                    writeln!(out, "{v}")?;
                } else if let Some((i, n)) = g.slice {
                    writeln!(out, "{}\tslice {} of {n}", g.user, i + 1)?;
                } else {
                    writeln!(out, "{}\t{}", g.user, ranges.join(","))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ranges_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_range("0..1MiB").unwrap(), (0, 1 << 20));
        assert_eq!(parse_range("64KiB..128K").unwrap(), (65536, 131072));
        assert_eq!(parse_range("1G..2GiB").unwrap(), (1 << 30, 2 << 30));
        for bad in [
            "5..5",
            "9..3",
            "0-10",
            "x..10",
            "0..10TB",
            "0..99999999999999999999",
        ] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
