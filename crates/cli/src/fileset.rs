//! `maat fileset`: named file sets (SPEC M6 file-set grouping).

use crate::{client, show};
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub(crate) enum FilesetCommand {
    /// Define (or replace) your file set NAME as the files at PATHS (at most 256).
    Define {
        /// Set name (1 to 64 bytes, no '/').
        name: String,
        /// Files in Maat.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove your file set NAME.
    Rm {
        /// Set name.
        name: String,
    },
    /// List your file sets and the administrator's.
    Ls,
}

/// Runs a file-set command against the cluster of `cluster`.
pub(crate) fn run(cluster: &Option<PathBuf>, command: FilesetCommand) -> Result<()> {
    let c = client(cluster)?;
    match command {
        FilesetCommand::Define { name, paths } => {
            c.fileset_define(&name, &paths)?;
            say!("file set {name}: {} files", paths.len());
        }
        FilesetCommand::Rm { name } => c.fileset_remove(&name)?,
        FilesetCommand::Ls => {
            let sets = c.fileset_list()?;
            if sets.is_empty() {
                say!("no file sets (maat fileset define NAME PATH...)");
            }
            for s in sets {
                let whose = if s.everyone { "everyone" } else { "yours" };
                say!(
                    "{:<24} {:>5} files  ({whose})",
                    show::name(&s.name),
                    s.files
                );
            }
        }
    }
    Ok(())
}
