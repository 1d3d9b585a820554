//! `maat bench`: E1 (paper 000 Table 1) and a `rados bench`-shaped object benchmark, each
//! against a local cluster started for the run with NOSEC allowed, secure and NOSEC
//! measured side by side in the same run.

mod connections;
mod crowd;
mod crypt_io;
mod delegation;
mod failover;
mod grouping;
mod ior;
mod kds;
mod login;
mod meta;
mod objects;
mod ops;
mod renewal;
mod t10;
mod trace;

use anyhow::{anyhow, Context, Result};
use clap::Subcommand;
use maat_client::{Client, ClusterFile, Credential};
use maat_proto::protection::Protection;
use std::path::PathBuf;

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// E3 (paper 000 Fig. 8a): N clients, each its own user, open one file at once;
    /// median open and exact MDS signatures without grouping, with temporal and
    /// on-the-fly batching, and with UNIX grouping, beside NOSEC. JSON keys
    /// `signatures_<none|batched|unix>_<N>`, `open_<mode>_us_<N>`,
    /// `open_<mode>_over_nosec_<N>`, `open_nosec_us_<N>` (medians over the rounds; each
    /// round's under `..._rounds_...`), `crowd_spread_nosec_us_<N>`. Then a model: from
    /// the batched crowds' own start times, the least median any schedule signing 2
    /// capabilities could give (`batched_bound_2_signatures_us_<N>`,
    /// `..._over_nosec_<N>`, `crowd_starts_spread_batched_us_<N>`), and where the MDS's
    /// batch leaders spent their time (`batched_<turn|gather|sign>_us_per_batch_<N>`,
    /// `batched_batches_<N>`).
    FlashCrowd {
        /// Crowd sizes.
        #[arg(long, value_delimiter = ',', default_value = "20,40,60,80,100")]
        clients: Vec<u32>,
        /// Crowds per size and side; each figure is the median over them (one crowd
        /// on two shared cores swings several-fold).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E5 (paper 000 Fig. 9, IOR-like): P processes, each its own user, write F files of
    /// their own in 64 KiB chunks and read them back; the run timed under NOSEC, secure
    /// without grouping and secure with grouping (UNIX, on-the-fly, directory), in
    /// alternating order over rounds. JSON keys `overhead_grouped`, `overhead_none`,
    /// `time_<nosec|none|grouped>_s`, `signatures_<none|grouped>`.
    Ior {
        /// Client processes (threads, each its own user and session).
        #[arg(long, default_value_t = 8)]
        procs: u32,
        /// Files per process.
        #[arg(long, default_value_t = 25)]
        files: u32,
        /// Size of each file, KiB.
        #[arg(long, default_value_t = 512)]
        file_kib: u64,
        /// Rounds over the three settings (forward, then backward, ...).
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Protection method of the secure runs (SPEC T1; ALLDATA is the cluster default,
        /// CAPKEY checks capabilities without per-request MACs, as the paper measured).
        #[arg(long, default_value = "ALLDATA", value_parser = crate::up::parse_protection)]
        security: Protection,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E4 (paper 000 Fig. 8b): N clients, each its own user and file, write and renew
    /// their capabilities every renewal period (80 % of a short lifetime); per N the MDS
    /// signatures per period, renewal requests per period and MDS time spent renewing.
    /// JSON keys `signatures_per_period_<N>`, `renewals_per_period_<N>`,
    /// `mds_us_per_period_<N>`, `mds_us_per_renewal_<N>`.
    Renewal {
        /// Client counts.
        #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
        clients: Vec<u32>,
        /// Renewal periods measured per client count.
        #[arg(long, default_value_t = 3)]
        periods: u32,
        /// Capability lifetime of the bench cluster, seconds (clients renew at 80 %).
        #[arg(long, default_value_t = 5)]
        lifetime: u64,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E2 (paper 000 Fig. 7): a mixed workload. Every 10 clients share a UNIX group; each
    /// client writes its group's 6 shared files and 4 of its own in 128 KiB chunks. Per
    /// client count: mean open and write latency, write throughput, MDS signatures and
    /// OSD verifications under NOSEC, no grouping, UNIX, prediction and combined
    /// grouping, in alternating order, every client (NOSEC's too) connected to the MDS
    /// and every OSD before it is timed. JSON keys `open_<mode>_us_<N>`,
    /// `write_<mode>_us_<N>`, `write_<mode>_mb_s_<N>`, `signatures_<mode>_<N>`,
    /// `osd_verifications_<mode>_<N>`, `open_combined_over_nosec_<N>` (mode: nosec,
    /// none, unix, predict, combined). Then a workload whose order repeats: the clients,
    /// one after another, open their group's shared files in the same order, without
    /// grouping and with prediction alone: `repeat_open_<none|predict>_us_<N>`,
    /// `repeat_signatures_<none|predict>_<N>`.
    Grouping {
        /// Client counts (the paper: 10 to 140).
        #[arg(long, value_delimiter = ',', default_value = "10,20,40")]
        clients: Vec<u32>,
        /// Size of each file, KiB (the paper: 5 MB).
        #[arg(long, default_value_t = 1024)]
        file_kib: u64,
        /// Rounds over the settings, in alternating order; figures are means.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// SPEC M10 (paper 000 §3.5): P participants read the same F files, each opening
    /// them itself (without and with UNIX grouping) or through one job the lead opened
    /// them for; MDS requests, MDS signatures and OSD verifications counted exactly.
    /// JSON keys `mds_requests_<way>_<P>`, `mds_signatures_<way>_<P>`,
    /// `osd_verifications_<way>_<P>`, `seconds_<way>_<P>` (way: open_none, open_unix,
    /// job).
    Delegation {
        /// Participant counts.
        #[arg(long, value_delimiter = ',', default_value = "1,10,50")]
        participants: Vec<u32>,
        /// Files every participant reads.
        #[arg(long, default_value_t = 8)]
        files: u32,
        /// Size of each file, KiB.
        #[arg(long, default_value_t = 64)]
        file_kib: u64,
        /// Rounds over the three ways, in alternating order; figures are means.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E7 (paper 002 §7): a trace-shaped workload. Clients (each its own user, in teams
    /// of 32) list their directories, read 30 shared inputs and write their region of
    /// 30 team-shared outputs: about 90 MDS requests and `--ios` I/Os each, all at once.
    /// Per setting (no grouping, UNIX, MDS prediction, prediction with client-sent
    /// predictions, every strategy): exact MDS signatures, MDS cache hits and the hit
    /// ratio over time, OSD capability verifications, the hot file's aggregate open
    /// latency, time beside NOSEC. JSON keys `osd_verifications_<setting>`,
    /// `mds_hit_ratio_<setting>`, `mds_hit_ratio_<setting>_at_<P>pct`,
    /// `mds_signatures_<setting>`, `hot_open_aggregate_ms_<setting>`,
    /// `seconds_<setting>` (setting: nosec, none, unix, predict, client_predict,
    /// all_strategies).
    Trace {
        /// Clients (the paper: 256).
        #[arg(long, default_value_t = 256)]
        clients: u32,
        /// I/Os per client, spread evenly over its 60 files (the paper: about 1,800).
        #[arg(long, default_value_t = 1800)]
        ios: u32,
        /// Bytes per I/O.
        #[arg(long, default_value_t = 1024)]
        io_bytes: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E9 (paper 004 Fig. 5–6): range keys per second from one and two KDS instances as
    /// client threads grow, single requests (one file's level-0 key) and batched ones
    /// (several files, every node of a deeper level each); then keys and time per request
    /// per tree level (SPEC H8); then paper 004's branch and depth sweep (Fig. 6, Table 1):
    /// every leaf key of a file's first MiB asked at the leaf level, level 0 or level 4
    /// for trees of branching 2–16 and depth 3–11. Each key counted was checked by its
    /// client. JSON keys `keys_s_<single|batched>_<1|2>kds_<T>`, `requests_s_...`,
    /// `level_<L>_keys_per_request`, `level_<L>_us_per_request`, `level_<L>_keys_s`,
    /// `shape_b<B>_d<D>_l<L>_<requested|calculated|keys_s>`; per measurement also the KDS
    /// instances' CPU from /proc (`kds_cpu_s_...`), requests per second of KDS CPU
    /// (`requests_per_kds_cpu_s_...`), the clients' CPU (`clients_cpu_s_...`) and what this machine's
    /// cores could serve at that cost (`requests_s_cores_most_...`: equal to the measured rate
    /// when the KDS and the clients fill every core).
    Kds {
        /// Client thread counts (each its own login).
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        threads: Vec<u32>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Files per batched request (at most 256).
        #[arg(long, default_value_t = 16)]
        batch_files: u32,
        /// Tree level of batched requests (with 64 KiB leaves, level 4 is 512 keys per
        /// file, each for 2 GiB).
        #[arg(long, default_value_t = 4)]
        batch_level: u8,
        /// MiB of the file whose every leaf key each point of the shape sweep obtains (the
        /// paper: 4096); 0 skips the sweep.
        #[arg(long, default_value_t = 256)]
        sweep_mib: u64,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E9 (paper 004 Fig. 7): sequential write and read of one large encrypted file; the
    /// read with the writer's keys (AEAD only), with one aggregated level-0 key from the
    /// KDS, with leaf keys asked per read window, and with leaf keys prefetched. KDS
    /// requests and keys per read are counted. JSON keys `write_mb_s`,
    /// `read_<aead|aggregated|leaf|leaf_prefetch>_mb_s`, `read_<mode>_over_aead`,
    /// `kds_requests_<mode>`, `kds_keys_<mode>`.
    CryptIo {
        /// File size, MiB.
        #[arg(long, default_value_t = 256)]
        size_mib: u64,
        /// Rounds (reads in alternating order); figures are over all rounds.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// What `leaf_prefetch` asks for past each read window, MiB.
        #[arg(long, default_value_t = 64)]
        prefetch_mib: u64,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// SPEC T6: a flood of forged login first messages against the MDS, what each costs
    /// it next to a real one, and how long a real login takes during the flood.
    LoginFlood {
        /// Forged (and real) first messages per measurement.
        #[arg(long, default_value_t = 20_000)]
        messages: u32,
        /// Times each kind is measured, the kinds in alternating order (figures are
        /// over all rounds).
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Threads sending the flood during the timed real login.
        #[arg(long, default_value_t = 4)]
        flooders: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Issue 40: against the MDS, the OSD and the KDS in turn, a client's open, 64 KiB
    /// encrypted put and cold get with N idle connections held against the daemon and
    /// without (alternating order; median and 99th percentile), the daemon's resident
    /// memory per idle connection, and the same work while one attacker address opens as
    /// many connections as it may and trickles partial frames on them. JSON keys
    /// `<daemon>_<op>_us`, `<daemon>_<op>_us_idle_<N>`, `<daemon>_<op>_idle_ratio`,
    /// `<daemon>_<op>_attacked_ratio`, `<daemon>_rss_bytes_per_idle_connection`.
    Connections {
        /// Idle connections held against each daemon (from 127.0.0.10 and up, at most
        /// 4,000 from each address).
        #[arg(long, default_value_t = 10_000)]
        idle: usize,
        /// Connections the attacker opens from its one address (more than the 4,096 a
        /// daemon keeps from one address).
        #[arg(long, default_value_t = 5_000)]
        attacker: usize,
        /// Operations of each kind per measurement.
        #[arg(long, default_value_t = 100)]
        ops: u32,
        /// Rounds with and without the idle connections, in alternating order.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Issues 41 and 42: what clients see when a daemon fails under load, each case on a
    /// fresh local cluster. T client threads put 4 KiB files and read back, and a third of
    /// the way in one of three MDS instances over PostgreSQL is SIGKILLed (skipped,
    /// saying so, without the PostgreSQL server binaries), or one of four OSDs of a
    /// three-copy cluster is SIGSTOPped (hung), once while the threads put and get and
    /// once while they only get. Prints operations per second before and after, the
    /// longest pause any thread saw, the operations that failed, and how long the MDS
    /// took to report the OSD down. JSON keys `<mds|osd|osd_gets>_before_per_s`,
    /// `..._after_per_s`, `..._longest_pause_ms`, `..._failed_ops`,
    /// `<osd|osd_gets>_reported_down_ms`.
    Failover {
        /// Client threads (each its own client; they spread over the MDS instances).
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Seconds per case; the daemon fails a third of the way in.
        #[arg(long, default_value_t = 15)]
        seconds: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Issue 42 (mdtest's shape): T threads, each in a directory of its own, create N
    /// empty files, stat, open (a capability from the MDS each), readdir, rename and
    /// unlink them; operations per second per phase, for the MDS on redb and on
    /// PostgreSQL with each number of instances of `--instances` (needs the PostgreSQL
    /// server binaries; skipped, saying so, without them), each on a fresh cluster, in
    /// one run. JSON keys `<phase>_per_s_<redb|postgres×N>`.
    Meta {
        /// Client threads (each its own client; they spread over the instances).
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Files per thread.
        #[arg(long, default_value_t = 200)]
        files: usize,
        /// Numbers of MDS instances over PostgreSQL to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        instances: Vec<u32>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// E1 (paper 000 Table 1): open / 128 KiB write / 128 KiB read under NOSEC, a
    /// capability generated, one cached, and one naming its files by a Merkle root whose
    /// tree neither the client nor the OSD holds (the OSD asks the client, the client the
    /// MDS), with exact crypto counts; plus sequential put/get throughput per method.
    /// JSON keys `<op>_<variant>_us` (median), `..._over_nosec`, `..._signatures_per_op`,
    /// `..._verifications_per_op`, `..._macs_per_op` (op: open, write_128k, read_128k;
    /// variant: nosec, capability_generated, capability_cached, merkle_cold_trees).
    Ops {
        /// Operations per measurement.
        #[arg(long, default_value_t = 400)]
        iterations: u32,
        /// Size of the sequential-throughput file in MiB.
        #[arg(long, default_value_t = 32)]
        seq_mib: u64,
        /// Protection methods for the sequential throughput (SPEC T1), each in a partition
        /// of its own; NOSEC and ALLDATA (`secure`, the cluster default) always run.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "NOSEC,CAPKEY,CMDRSP,ALLDATA,CONFIDENTIAL",
            value_parser = crate::up::parse_protection
        )]
        security: Vec<Protection>,
        /// Cluster data directory (default: a fresh temporary one; use /dev/shm/... to
        /// take the disk out of the measurement).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// SPEC E8 (paper 003 Fig. 8, Tables 2-3 shape): Maat's signed capabilities against
    /// T10 credentials (SPEC T2), per open (a put and a get of a new small file), per I/O
    /// (sequential and random reads and writes inside one open file) and per metadata
    /// operation (mkdir, readdir, rmdir, create, rm), under each method, at each OSD
    /// count, with NOSEC as the baseline; then login and logout, and the T10 key commands
    /// (SET KEY, SET MASTER KEY, SET POLICY TAG) as the administrator runs them. Mean µs
    /// per operation, the throughput ratio to NOSEC, exact signatures and MACs per
    /// operation.
    T10 {
        /// OSD counts, one cluster each.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        osds: Vec<u32>,
        /// Protection methods (NOSEC always runs as the baseline).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "CAPKEY,CMDRSP,ALLDATA",
            value_parser = crate::up::parse_protection
        )]
        security: Vec<Protection>,
        /// I/O sizes in KiB.
        #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64")]
        sizes: Vec<u64>,
        /// Operations per row (key commands and logins: at most 20).
        #[arg(long, default_value_t = 200)]
        iterations: u32,
        /// Print one JSON object (`rows`: one per line of the table).
        #[arg(long)]
        json: bool,
    },
    /// N concurrent writers of whole objects for S seconds, then reads of what was
    /// written; NOSEC, each protection method and encrypted files in the same run (the
    /// shape of `rados bench`).
    Objects {
        /// Object size in bytes.
        #[arg(long, default_value_t = 4 * 1024 * 1024)]
        size: u64,
        /// Concurrent writers / readers.
        #[arg(long, default_value_t = 4)]
        threads: u32,
        /// Seconds of writing per mode.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Protection methods to compare, comma separated (SPEC T1), and ENCRYPTED:
        /// Horus-encrypted files (SPEC H3, sealed blocks under CMDRSP, keys from the KDS).
        /// NOSEC is the insecure baseline; every other method uses a partition of its own;
        /// the other modes' files are plaintext. JSON keys are `<mode>_write_mb_s` etc.;
        /// ALLDATA (the cluster default) also as `secure_`.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "NOSEC,CAPKEY,CMDRSP,ALLDATA,CONFIDENTIAL,ENCRYPTED",
            value_parser = objects::parse_mode
        )]
        security: Vec<objects::Mode>,
        /// Rounds over the methods, in alternating order (forward, then backward, ...), so
        /// that a machine getting slower or faster during the run favours none; figures
        /// are the means over the rounds.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Cluster data directory (default: a fresh temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Readers start cold: each forgets the opens and range keys it kept from writing,
        /// so every get opens the file at the MDS and an encrypted one asks the KDS for
        /// its keys, as a client that did not write the objects would. By default each
        /// writer reads back what it wrote, as `rados bench` does.
        #[arg(long)]
        cold_readers: bool,
        /// Copies of each object, on distinct OSDs (issue 41): 1 compares with a
        /// `rados bench` pool of size 1, 3 with Ceph's default of three copies
        /// (`POOL_SIZE=3 NUM_OSDS=3` in `../shared/peers/ceph/run.sh`). A write is
        /// acknowledged once every copy is durable.
        #[arg(long, default_value_t = 1,
              value_parser = clap::value_parser!(u8).range(1..=i64::from(maat_proto::limits::REPLICAS_MAX)))]
        replicas: u8,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// What requests cost of counter `name`, summed over the daemons whose name starts with
/// `prefix`, in one `Stats` snapshot: the counter less its `NAME_background` part, the
/// work no request causes (each KDS's once-a-second revocation catch-up, SPEC M9, signs
/// and checks signatures at the MDS and the KDS), subtracted by name. A name that no
/// such daemon reports is an error, not a zero: a misspelt counter would otherwise print
/// as "nothing happened" (issue 45; it did, for the login flood's cookies).
fn sum_counter(stats: &[maat_proto::msg::DaemonStats], prefix: &str, name: &str) -> Result<u64> {
    let reported = stats
        .iter()
        .filter(|d| d.daemon.starts_with(prefix))
        .any(|d| d.counters.iter().any(|(k, _)| k == name));
    if !reported {
        anyhow::bail!("no daemon named {prefix}* reports a counter {name:?}");
    }
    Ok(maat_proto::msg::DaemonStats::request_share(
        stats, prefix, name,
    ))
}

/// CPU seconds the process `pid` has used.
pub(super) fn cpu_secs(pid: &str) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))
    };
    Ok((field(11)? + field(12)?) / rustix::param::clock_ticks_per_second() as f64)
}

/// [`sum_counter`] of a snapshot taken now.
fn counter(admin: &mut Client, prefix: &str, name: &str) -> Result<u64> {
    sum_counter(&admin.daemon_stats()?, prefix, name)
}

/// A local cluster for one benchmark ([`maat_local::LocalCluster`], this very binary's
/// `maat up`), NOSEC allowed, with its data directory and cluster file at hand.
struct LocalCluster {
    local: maat_local::LocalCluster,
    data: PathBuf,
    file: ClusterFile,
    /// Copies of each object in the partitions it makes (issue 41; 1, the papers'
    /// shape, unless `--replicas` was passed to `maat up`).
    replicas: u8,
}

impl LocalCluster {
    fn start(data: Option<PathBuf>) -> Result<Self> {
        Self::start_with(data, &[])
    }

    /// A local cluster with `extra` arguments to `maat up`.
    fn start_with(data: Option<PathBuf>, extra: &[&str]) -> Result<Self> {
        let exe = std::env::current_exe()?;
        let mut args: Vec<&str> = Vec::new();
        // Four OSDs unless the caller names a count; one copy of each object (the
        // papers measured one) unless it names a number of copies.
        if !extra.contains(&"--osds") {
            args.extend(["--osds", "4"]);
        }
        let replicas = match extra.iter().position(|a| *a == "--replicas") {
            Some(i) => extra
                .get(i + 1)
                .and_then(|r| r.parse::<u8>().ok())
                .ok_or_else(|| anyhow::anyhow!("--replicas needs a number"))?,
            None => {
                args.extend(["--replicas", "1"]);
                1
            }
        };
        args.extend([
            // Nothing in the background of a measurement.
            "--no-scrubber",
            "--listen",
            "127.0.0.1:0",
            "--danger-allow-insecure",
            // Every benchmark measures plaintext files unless it asks for encrypted
            // ones per file (`maat bench objects --security ENCRYPTED`).
            "--no-encrypt",
            // Benchmarks share files between their users by the exact modes they ask
            // for.
            "--umask",
            "000",
        ]);
        args.extend_from_slice(extra);
        let local = maat_local::LocalCluster::start(&exe, data.as_deref(), &args)
            .context("starting the local cluster")?;
        let file = local.cluster_file()?;
        let data = local.data().to_path_buf();
        Ok(Self {
            local,
            data,
            file,
            replicas,
        })
    }

    /// CPU seconds daemon `name` (`kds-1`, ...) has used so far, from `/proc`.
    fn daemon_cpu_secs(&self, name: &str) -> Result<f64> {
        cpu_secs(&self.local.pid(name)?.to_string())
    }

    /// Adds users `{prefix}{i}` for `i` in `range` (Argon2id defaults, as the MDS
    /// requires) and logs each into a client of its own; returns (name, client) pairs.
    /// Key stretching dominates: the range is split over two threads (this machine's
    /// cores), each with an administrator session of its own.
    fn logged_in_users(
        &self,
        prefix: &str,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<(String, Client)>> {
        let part = |range: std::ops::Range<usize>| -> Result<Vec<(String, Client)>> {
            let admin = self.admin()?;
            let mut out = Vec::with_capacity(range.len());
            for i in range {
                let name = format!("{prefix}{i}");
                let pass = format!("{prefix} passphrase {i}");
                admin.user_add(
                    &name,
                    &[],
                    pass.as_bytes(),
                    maat_crypto::kdf::PassphraseParams::DEFAULT,
                )?;
                let client = Client::new(self.file.clone(), None)?;
                client.login(&name, Credential::Passphrase(pass.as_bytes()))?;
                out.push((name, client));
            }
            Ok(out)
        };
        let middle = range.start + range.len() / 2;
        std::thread::scope(|s| {
            let second = s.spawn(|| part(middle..range.end));
            let mut first = part(range.start..middle)?;
            first.extend(
                second
                    .join()
                    .map_err(|_| anyhow!("a setup thread panicked"))??,
            );
            Ok(first)
        })
    }

    fn admin(&self) -> Result<Client> {
        Ok(self.local.admin()?)
    }
}

/// Runs a benchmark.
pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Meta {
            threads,
            files,
            instances,
            json,
        } => meta::run_meta(threads, files, &instances, json),
        BenchCommand::Failover {
            threads,
            seconds,
            json,
        } => failover::run_failover(threads, seconds, json),
        BenchCommand::Ops {
            iterations,
            seq_mib,
            security,
            data,
            json,
        } => ops::run_ops(iterations, seq_mib, &security, data, json),
        BenchCommand::T10 {
            osds,
            security,
            sizes,
            iterations,
            json,
        } => t10::run_t10(&osds, &security, &sizes, iterations, json),
        BenchCommand::Objects {
            size,
            threads,
            seconds,
            security,
            rounds,
            data,
            cold_readers,
            replicas,
            json,
        } => objects::run_objects(
            size,
            threads,
            seconds,
            &security,
            rounds,
            replicas,
            data,
            cold_readers,
            json,
        ),
        BenchCommand::FlashCrowd {
            clients,
            rounds,
            data,
            json,
        } => crowd::run_flash_crowd(&clients, rounds, data, json),
        BenchCommand::Ior {
            procs,
            files,
            file_kib,
            rounds,
            security,
            data,
            json,
        } => ior::run_ior(
            ior::IorArgs {
                procs,
                files,
                file_kib,
                rounds,
                security,
            },
            data,
            json,
        ),
        BenchCommand::Renewal {
            clients,
            periods,
            lifetime,
            data,
            json,
        } => renewal::run_renewal(&clients, periods, lifetime, data, json),
        BenchCommand::Grouping {
            clients,
            file_kib,
            rounds,
            data,
            json,
        } => grouping::run_grouping(&clients, file_kib, rounds, data, json),
        BenchCommand::Delegation {
            participants,
            files,
            file_kib,
            rounds,
            data,
            json,
        } => delegation::run_delegation(&participants, files, file_kib, rounds, data, json),
        BenchCommand::Trace {
            clients,
            ios,
            io_bytes,
            data,
            json,
        } => trace::run_trace(clients, ios, io_bytes, data, json),
        BenchCommand::Kds {
            threads,
            seconds,
            batch_files,
            batch_level,
            sweep_mib,
            data,
            json,
        } => kds::run_kds(
            kds::KdsArgs {
                threads,
                seconds,
                batch_files,
                batch_level,
                sweep_bytes: sweep_mib << 20,
            },
            data,
            json,
        ),
        BenchCommand::CryptIo {
            size_mib,
            rounds,
            prefetch_mib,
            data,
            json,
        } => crypt_io::run_crypt_io(size_mib, rounds, prefetch_mib, data, json),
        BenchCommand::Connections {
            idle,
            attacker,
            ops,
            rounds,
            data,
            json,
        } => connections::run_connections(idle, attacker, ops, rounds, data, json),
        BenchCommand::LoginFlood {
            messages,
            rounds,
            flooders,
            data,
            json,
        } => login::run_login_flood(messages, rounds, flooders, data, json),
    }
}
