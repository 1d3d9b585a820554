//! `maat keys …`: range grants on encrypted files (SPEC H6) and their revocation by a new
//! key tree (SPEC H7) from the command line, and the byte-range syntax `maat cat
//! --range` shares with them.

use anyhow::{anyhow, bail, Result};
use clap::Subcommand;
use std::io::{IsTerminal, Write};
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
    /// capability lifetime, 5 minutes by default). Keys they already fetched still
    /// open the file's objects until `maat keys rekey` re-encrypts them.
    Revoke {
        /// Path in Maat.
        path: String,
        /// User names, comma-separated or repeated.
        #[arg(long, required = true, value_delimiter = ',')]
        from: Vec<String>,
    },
    /// Give an encrypted file you own a new key tree and re-encrypt it under it, so that
    /// no key of the old tree (one a revoked user took away, say) decrypts anything the
    /// file holds. The file stays readable and writable throughout: each stripe is
    /// rewritten and recorded in turn, and readers use the old tree for stripes not yet
    /// rewritten; a writer that opened it before the rekey is refused when it records
    /// what it wrote, and must open it again. It may run right after `keys revoke`: the
    /// permits a range grantee kept name the old tree, and a KDS gives no key of a newer
    /// one under them. Users whose access ended by chmod keep their capabilities (and so
    /// the new tree's keys) until those expire, 5 minutes by default, as they keep
    /// reading the file: rekey after that, or `maat admin revoke` them first. Avoid
    /// writing the file while it runs (a stripe written at the same moment races as with
    /// two writers: one write is lost).
    Rekey {
        /// Path in Maat (an encrypted file).
        path: String,
        /// Finish an interrupted rekey with its tree instead of making a new one (keys
        /// of that tree given out since stay good: after a new revocation, start anew).
        #[arg(long)]
        resume: bool,
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
    let c = crate::client(cluster)?;
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
        KeysCommand::Rekey { path, resume } => {
            let mut bar: Option<indicatif::ProgressBar> = None;
            let report = c.rekey(&path, resume, &mut |done, total| {
                if total == 0 || !std::io::stderr().is_terminal() {
                    return std::ops::ControlFlow::Continue(());
                }
                let b = bar.get_or_insert_with(|| {
                    let b = indicatif::ProgressBar::new(u64::from(total));
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "re-encrypting {pos}/{len} stripes [{bar:30}] eta {eta}",
                    ) {
                        b.set_style(style);
                    }
                    b
                });
                b.set_position(u64::from(done));
                std::ops::ControlFlow::Continue(())
            })?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let tree = if report.new_tree {
                "new key tree"
            } else {
                "key tree (resumed)"
            };
            say!(
                "{path}: {tree} version {}; re-encrypted {} stripes ({} bytes)",
                report.tree_version,
                report.stripes,
                report.bytes
            );
            if report.remaining > 0 {
                bail!(
                    "{path}: {} stripes are still under an earlier key tree (written during the rekey?): run `maat keys rekey --resume {path}`",
                    report.remaining
                );
            }
        }
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
                    writeln!(
                        out,
                        "{}\tslice {} of {n}",
                        crate::show::name(&g.user),
                        i + 1
                    )?;
                } else {
                    writeln!(out, "{}\t{}", crate::show::name(&g.user), ranges.join(","))?;
                }
            }
        }
    }
    Ok(())
}

/// What `maat stat` says of an encrypted file's key tree: its version and, while a rekey
/// is rolling out, how many stripes are still under earlier trees (`None` when this
/// user may not open the file to see it).
pub fn tree_summary(c: &mut maat_client::Client, path: &str) -> Option<String> {
    // A fresh open (not the client's cache of read opens, which may predate a rekey).
    let handle = c.open_file(path, maat_client::OpenFlags::READ).ok()?;
    let opened = handle.stat();
    let crypt = opened.crypt.as_ref()?;
    let version = maat_proto::horus::Lockbox::decode(&crypt.lockbox)
        .ok()?
        .tree_version;
    let left: u32 = crypt
        .stripes_on_earlier(maat_client::stripes_for(opened.size))
        .iter()
        .map(|(run, _)| run.end - run.start)
        .sum();
    Some(if left > 0 {
        format!(
            "key tree version {version}; rekey in progress: {left} stripes still under an earlier tree (`maat keys rekey --resume {path}` finishes it)"
        )
    } else {
        format!("key tree version {version}")
    })
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
