//! `maat model`'s metadata table (issue 42): what N MDS instances over one PostgreSQL
//! database serve. Each metadata request is a number of statements, each a round trip to
//! the database and some of its CPU; the instances share the database, and every change
//! runs under one writer lock across them. So reads grow with instances until the
//! database's cores are busy, and changes are bounded by the round trips one holder of
//! the lock makes, whatever the number of instances.
//!
//! The defaults are this machine's, measured 2026-11-28 (docs/PERFORMANCE.md, issue 42):
//! statements per request from the database's statement log (6.4 per stat, 9.1 per
//! unlink, of which the session read and the nonce are outside the lock), a statement's
//! round trip and CPU from `pgbench -M prepared` with a one-row primary-key read over the
//! unix socket (33 µs with one client; about 86,000 a second on two cores, both ends
//! included), and the MDS's own CPU per request from `maat bench meta` on redb (about
//! 30,000 stats a second on two cores shared with the clients).

use clap::Args;

/// The metadata model's parameters.
#[derive(Args, Debug, Clone)]
pub struct MetaArgs {
    /// MDS instance counts for the metadata table.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub mds_instances: Vec<u32>,
    /// Cores of each MDS instance.
    #[arg(long, default_value_t = 2.0)]
    pub mds_cores: f64,
    /// The MDS's own CPU per metadata request, µs.
    #[arg(long, default_value_t = 30.0)]
    pub mds_request_us: f64,
    /// Database statements per metadata read (a stat or an open).
    #[arg(long, default_value_t = 6.4)]
    pub statements_per_read: f64,
    /// Database statements a change makes while it holds the writer lock (the lock's
    /// take and release included).
    #[arg(long, default_value_t = 7.1)]
    pub statements_per_change: f64,
    /// A statement's round trip, µs.
    #[arg(long, default_value_t = 33.0)]
    pub statement_rtt_us: f64,
    /// Database CPU per statement, µs.
    #[arg(long, default_value_t = 23.0)]
    pub statement_cpu_us: f64,
    /// Cores of the database server.
    #[arg(long, default_value_t = 16.0)]
    pub db_cores: f64,
}

/// What `instances` instances serve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetaRate {
    /// Instances.
    pub instances: u32,
    /// Reads a second the instances' own CPUs allow.
    pub mds_reads_per_s: f64,
    /// Reads a second the database's cores allow.
    pub db_reads_per_s: f64,
    /// Reads a second served: the lower of the two.
    pub reads_per_s: f64,
    /// Changes a second: one holder of the writer lock at a time, whatever the instances.
    pub changes_per_s: f64,
}

/// Reads a second one instance's own CPUs allow.
fn reads_per_instance(a: &MetaArgs) -> f64 {
    a.mds_cores * 1e6 / a.mds_request_us.max(f64::MIN_POSITIVE)
}

/// The metadata rates of each instance count in `a`.
pub fn meta_rates(a: &MetaArgs) -> Vec<MetaRate> {
    let per_instance = reads_per_instance(a);
    let db_reads =
        a.db_cores * 1e6 / (a.statements_per_read * a.statement_cpu_us).max(f64::MIN_POSITIVE);
    let changes = 1e6 / (a.statements_per_change * a.statement_rtt_us).max(f64::MIN_POSITIVE);
    a.mds_instances
        .iter()
        .map(|&n| {
            let mds = f64::from(n) * per_instance;
            MetaRate {
                instances: n,
                mds_reads_per_s: mds,
                db_reads_per_s: db_reads,
                reads_per_s: mds.min(db_reads),
                changes_per_s: changes,
            }
        })
        .collect()
}

/// Instances a load of `opens_per_s` reads needs (their CPU alone), and the database
/// cores it takes.
pub fn needed(a: &MetaArgs, opens_per_s: f64) -> (f64, f64) {
    let instances = (opens_per_s / reads_per_instance(a)).ceil().max(1.0);
    let db_cores = opens_per_s * a.statements_per_read * a.statement_cpu_us / 1e6;
    (instances, db_cores)
}

/// The table, and what a load of `opens_per_s` reads needs.
pub fn print(a: &MetaArgs, opens_per_s: f64) -> anyhow::Result<()> {
    say!();
    say!(
        "metadata over PostgreSQL (issue 42): {} statements per read, {} per change under \
         the writer lock, {} µs round trip and {} µs database CPU each, MDS {} µs per \
         request on {} cores per instance, database {} cores",
        a.statements_per_read,
        a.statements_per_change,
        a.statement_rtt_us,
        a.statement_cpu_us,
        a.mds_request_us,
        a.mds_cores,
        a.db_cores
    );
    say!(
        "{:>10} {:>16} {:>16} {:>14} {:>12}",
        "instances",
        "MDS reads/s",
        "database reads/s",
        "reads/s",
        "changes/s"
    );
    for r in meta_rates(a) {
        say!(
            "{:>10} {:>16.0} {:>16.0} {:>14.0} {:>12.0}",
            r.instances,
            r.mds_reads_per_s,
            r.db_reads_per_s,
            r.reads_per_s,
            r.changes_per_s
        );
    }
    let (instances, db_cores) = needed(a, opens_per_s);
    say!(
        "changes run one at a time under the writer lock: more instances serve more reads, \
         never more changes. The load's {opens_per_s:.0} opens/s need {instances:.0} \
         instance(s) and {db_cores:.1} database cores."
    );
    Ok(())
}

/// Checks the parameters.
pub fn check(a: &MetaArgs) -> anyhow::Result<()> {
    let positive = [
        a.mds_cores,
        a.mds_request_us,
        a.statements_per_read,
        a.statements_per_change,
        a.statement_rtt_us,
        a.statement_cpu_us,
        a.db_cores,
    ];
    if positive.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        anyhow::bail!(
            "--mds-cores, --mds-request-us, --statements-per-read, --statements-per-change, \
             --statement-rtt-us, --statement-cpu-us and --db-cores must be positive"
        );
    }
    if a.mds_instances.is_empty() || a.mds_instances.contains(&0) {
        anyhow::bail!("--mds-instances must list counts of at least 1");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        meta: MetaArgs,
    }

    fn defaults() -> MetaArgs {
        Cli::parse_from(["model"]).meta
    }

    #[test]
    fn reads_grow_with_instances_until_the_database_is_busy_and_changes_do_not_grow() {
        let a = defaults();
        let r = meta_rates(&a);
        assert_eq!(
            r.iter().map(|r| r.instances).collect::<Vec<_>>(),
            [1, 2, 4, 8, 16]
        );
        // One instance of two cores: 2 / 30 µs.
        assert!((r[0].mds_reads_per_s - 66_666.7).abs() < 1.0, "{r:?}");
        // The database: 16 cores / (6.4 × 23 µs).
        assert!((r[0].db_reads_per_s - 108_695.7).abs() < 1.0, "{r:?}");
        assert_eq!(r[0].reads_per_s, r[0].mds_reads_per_s);
        assert_eq!(
            r[1].reads_per_s, r[1].db_reads_per_s,
            "two instances fill the database"
        );
        assert_eq!(r[4].reads_per_s, r[1].reads_per_s);
        // Changes: 1 / (7.1 × 33 µs), the same for every count.
        assert!((r[0].changes_per_s - 4_268.0).abs() < 1.0, "{r:?}");
        assert!(r.iter().all(|x| x.changes_per_s == r[0].changes_per_s));
    }

    #[test]
    fn a_load_needs_instances_by_mds_cpu_and_cores_by_statements() {
        let a = defaults();
        let (instances, cores) = needed(&a, 10_000.0);
        assert_eq!(instances, 1.0);
        assert!((cores - 1.472).abs() < 1e-9, "{cores}");
        let (instances, _) = needed(&a, 200_000.0);
        assert_eq!(instances, 3.0);
    }

    #[test]
    fn nonsense_parameters_are_refused() {
        let mut a = defaults();
        assert!(check(&a).is_ok());
        a.statement_rtt_us = 0.0;
        assert!(check(&a).is_err());
        let mut a = defaults();
        a.mds_instances = vec![2, 0];
        assert!(check(&a).is_err());
    }
}
