//! `maat up --mds N` (issue 42): several MDS instances over the one metadata database,
//! each a daemon of its own in DATA/mds-I (its config, metrics address and lease name),
//! all with the first instance's keys (DATA/mds-keys), started after it so that it made
//! them. Clients find them all in the cluster file (`mds`, `mds_others`), OSDs and KDS
//! instances in their configs (`mds`, `mds_others`).

use anyhow::{bail, Result};
use maat_server::config::MdsFileConfig;
use std::path::{Path, PathBuf};

/// The most instances `maat up` runs (each holds up to 32 database connections).
pub const MDS_INSTANCES_MAX: u32 = 3;

/// Refuses `--mds N` where the instances could not share a store.
pub fn check(instances: u32, shared_store: bool) -> Result<()> {
    if instances == 0 || instances > MDS_INSTANCES_MAX {
        bail!("--mds must be between 1 and {MDS_INSTANCES_MAX}");
    }
    if instances > 1 && !shared_store {
        bail!(
            "--mds {instances} needs a metadata store the instances share: add --meta postgres \
             (a PostgreSQL server of the cluster's own) or --meta-url URL; redb is one \
             process's file"
        );
    }
    Ok(())
}

/// Writes the configs of instances 2.. at `addresses`: `first`'s, each with a metrics
/// address `metrics` gives and a directory of its own.
pub fn write_configs(
    data: &Path,
    first: &MdsFileConfig,
    addresses: &[String],
    mut metrics: impl FnMut() -> Result<Option<String>>,
) -> Result<()> {
    for (i, listen) in (2..).zip(addresses) {
        let dir = data.join(format!("mds-{i}"));
        let config = MdsFileConfig {
            listen: listen.clone(),
            data_dir: dir.clone(),
            // The first instance writes them (the same keys for all).
            public_keys_file: None,
            key_dir: Some(first.key_dir()),
            metrics: metrics()?,
            ..first.clone()
        };
        maat_server::private::create_private_dir(&dir)?;
        maat_server::private::replace_file(
            &dir.join("mds.toml"),
            toml::to_string(&config)?.as_bytes(),
        )?;
    }
    Ok(())
}

/// The configs of the instances after the first, in order.
pub fn configs(data: &Path) -> Result<Vec<PathBuf>> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(data)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let i = name.strip_prefix("mds-")?.parse().ok()?;
            let config = e.path().join("mds.toml");
            config.exists().then_some((i, config))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, c)| c).collect())
}
