//! Prometheus metrics: every daemon can serve its counters and request latencies in the
//! Prometheus text format (version 0.0.4) at `http://ADDR/metrics`, on an address of its
//! own (`metrics` in its config file; `maat up` puts each daemon on a free loopback port
//! and prints the endpoints). Read-only, unauthenticated: bind it to an address only the
//! operators' scrapers reach.
//!
//! Names: a counter `x` becomes `maat_x_total`; `refused:REASON` becomes
//! `maat_refusals_by_reason_total{reason="REASON"}`; `grouping:STRATEGY:x` becomes
//! `maat_grouping_x_total{strategy="STRATEGY"}`; `renewal:x` becomes `maat_renewal_x_total`;
//! levels (cache sizes, tables) are gauges without the suffix. Every series carries
//! `daemon="mds"` or `daemon="osd N"`. Latency: `maat_request_duration_seconds`, a histogram
//! per frame kind (`plain`, `request`, `sec_request`, `insecure`) and request (`open`,
//! `stat`, `renew`, … at the MDS; `read`, `write`, `supply_proof`, … at OSDs; `-` when
//! refused before it was decoded).

use crate::ServerError;
use maat_proto::msg::DaemonStats;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency buckets, seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];
use crate::limits::REQUEST_BYTES_MAX;

/// Counters that are levels, not totals.
const GAUGES: [&str; 7] = [
    "trees_cached",
    "replay_streams",
    "job_keys",
    "capabilities_renewed",
    "revoked_entries",
    "renewal:outstanding",
    "sessions",
];

#[derive(Default, Clone)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Request latencies by frame kind and request name.
#[derive(Default)]
pub struct Latencies {
    by_kind: Mutex<BTreeMap<(&'static str, &'static str), Histogram>>,
}

impl Latencies {
    /// Records one request of frame kind `kind` and name `request` (`-` when it was
    /// refused before its name was known) that took `elapsed`.
    pub fn observe(&self, kind: &'static str, request: &'static str, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut map = self.by_kind.lock().unwrap_or_else(|p| p.into_inner());
        let h = map.entry((kind, request)).or_default();
        for (bucket, le) in h.buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if secs <= le {
                *bucket += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }
}

/// A metric family: its type and its series (extra labels, value).
type Family = (&'static str, Vec<(String, f64)>);

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn metric_name(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect::<String>()
        .to_ascii_lowercase()
}

/// The Prometheus text for `stats` and `latencies`.
pub fn render(stats: &DaemonStats, latencies: &Latencies) -> String {
    let daemon = label_value(&stats.daemon);
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for (raw, value) in &stats.counters {
        let parts: Vec<&str> = raw.split(':').collect();
        let (name, labels, gauge) = match parts.as_slice() {
            ["refused", reason] => (
                "maat_refusals_by_reason_total".to_string(),
                format!(",reason=\"{}\"", label_value(reason)),
                false,
            ),
            ["grouping", strategy, field] => (
                format!("maat_grouping_{}_total", metric_name(field)),
                format!(",strategy=\"{}\"", label_value(strategy)),
                false,
            ),
            _ if GAUGES.contains(&raw.as_str()) => {
                (format!("maat_{}", metric_name(raw)), String::new(), true)
            }
            _ => (
                format!("maat_{}_total", metric_name(raw)),
                String::new(),
                false,
            ),
        };
        let family = families
            .entry(name)
            .or_insert((if gauge { "gauge" } else { "counter" }, Vec::new()));
        family.1.push((labels, *value as f64));
    }
    let mut out = String::new();
    for (name, (kind, series)) in &families {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in series {
            let _ = writeln!(out, "{name}{{daemon=\"{daemon}\"{labels}}} {value}");
        }
    }
    let map = latencies
        .by_kind
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let name = "maat_request_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time to answer one request, by frame kind and request."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for ((kind, request), h) in &map {
        for (count, le) in h.buckets.iter().zip(LATENCY_BUCKETS) {
            let _ = writeln!(
                out,
                "{name}_bucket{{daemon=\"{daemon}\",kind=\"{kind}\",request=\"{request}\",le=\"{le}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{daemon=\"{daemon}\",kind=\"{kind}\",request=\"{request}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "{name}_sum{{daemon=\"{daemon}\",kind=\"{kind}\",request=\"{request}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            out,
            "{name}_count{{daemon=\"{daemon}\",kind=\"{kind}\",request=\"{request}\"}} {}",
            h.count
        );
    }
    out
}

fn answer(
    mut stream: TcpStream,
    source: &(dyn Fn() -> DaemonStats + Send + Sync),
    latencies: &Latencies,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < REQUEST_BYTES_MAX {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    let line = request.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (status, content_type, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(&source(), latencies),
        ),
        (Some("GET"), Some(_)) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_string(),
        ),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// Serves `/metrics` on `listen` from a thread of its own; returns the bound address.
pub fn serve(
    listen: &str,
    source: Arc<dyn Fn() -> DaemonStats + Send + Sync>,
    latencies: Arc<Latencies>,
) -> Result<String, ServerError> {
    let listener = TcpListener::bind(listen)
        .map_err(crate::io(format!("binding the metrics address {listen}")))?;
    let addr = listener
        .local_addr()
        .map_err(crate::io("metrics address"))?
        .to_string();
    std::thread::spawn(move || {
        // One scrape at a time: scrapers are few and each answer is small.
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, source.as_ref(), &latencies);
        }
    });
    Ok(addr)
}
