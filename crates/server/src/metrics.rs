//! Prometheus metrics: every daemon can serve its counters and request latencies in the
//! Prometheus text format (version 0.0.4) at `http://ADDR/metrics`, on an address of its
//! own (`metrics` in its config file; `maat up` puts each daemon on a free loopback port
//! and prints the endpoints). Read-only, unauthenticated: bind it to an address only the
//! operators' scrapers reach.
//!
//! Names: a counter `x` becomes `maat_x_total`; `refused:REASON` becomes
//! `maat_refusals_by_reason_total{reason="REASON"}`; `grouping:STRATEGY:x` becomes
//! `maat_grouping_x_total{strategy="STRATEGY"}`; `renewal:x` becomes `maat_renewal_x_total`;
//! `copies_missed_on:ID` becomes the gauge `maat_copies_missed_on{osd="ID"}` (issue 41);
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency buckets, seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];
use crate::limits::{METRICS_REQUEST_TIME, METRICS_SCRAPES_MAX, REQUEST_BYTES_MAX};

/// Counters that are levels, not totals.
const GAUGES: [&str; 15] = [
    "connections_open",
    "workers",
    "workers_busy",
    "buffered_bytes",
    "trees_cached",
    "replay_streams",
    "job_keys",
    "capabilities_renewed",
    "revoked_entries",
    "renewal:outstanding",
    "sessions",
    // Issue 41: degraded copies now, and the last scrub.
    "copies_missed",
    "objects_degraded",
    "scrub_last_run_timestamp_seconds",
    "scrub_last_run_unrepaired",
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
            ["copies_missed_on", osd] => (
                "maat_copies_missed_on".to_string(),
                format!(",osd=\"{}\"", label_value(osd)),
                true,
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
    // One deadline for the whole request, not one per read: a scraper that trickles its
    // request a byte at a time is cut off with the rest.
    let deadline = std::time::Instant::now() + METRICS_REQUEST_TIME;
    stream.set_write_timeout(Some(METRICS_REQUEST_TIME))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < REQUEST_BYTES_MAX {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
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

/// Serves `/metrics` on `listen` from a thread of its own, each scrape on a thread of its
/// own (at most [`METRICS_SCRAPES_MAX`] at once; more are answered 503 at once), so a slow
/// scraper delays no other; returns the bound address.
pub fn serve(
    listen: &str,
    source: Arc<dyn Fn() -> DaemonStats + Send + Sync>,
    latencies: Arc<Latencies>,
) -> Result<String, ServerError> {
    let listener = TcpListener::bind(listen)
        .map_err(crate::io(format!("binding the metrics address {listen}")))?;
    let bound = listener
        .local_addr()
        .map_err(crate::io("metrics address"))?;
    if bound.ip().is_unspecified() {
        tracing::warn!(address = %bound, "metrics (unauthenticated) are served on every address of this host");
    }
    let addr = bound.to_string();
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if active.load(Ordering::SeqCst) >= METRICS_SCRAPES_MAX {
                let mut stream = stream;
                let _ = stream.set_nonblocking(true);
                let _ = stream.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            }
            active.fetch_add(1, Ordering::SeqCst);
            let (source, latencies, done) = (source.clone(), latencies.clone(), active.clone());
            let spawned = std::thread::Builder::new()
                .name("metrics-scrape".into())
                .spawn(move || {
                    let _ = answer(stream, source.as_ref(), &latencies);
                    done.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn get(addr: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Issue 41: degraded copies per OSD are one labelled gauge family; the scrub's
    /// totals are counters and its last run's end a gauge.
    #[test]
    fn degraded_copies_and_scrub_counts_render_as_their_kinds() {
        let stats = DaemonStats {
            daemon: "mds".into(),
            counters: vec![
                ("copies_missed".into(), 3),
                ("copies_missed_on:2".into(), 3),
                ("copies_missed_on:4".into(), 0),
                ("scrub_copies_repaired".into(), 9),
                ("scrub_last_run_timestamp_seconds".into(), 1_800_000_000),
            ],
        };
        let text = render(&stats, &Latencies::default());
        for line in [
            "# TYPE maat_copies_missed gauge",
            "maat_copies_missed{daemon=\"mds\"} 3",
            "# TYPE maat_copies_missed_on gauge",
            "maat_copies_missed_on{daemon=\"mds\",osd=\"2\"} 3",
            "maat_copies_missed_on{daemon=\"mds\",osd=\"4\"} 0",
            "# TYPE maat_scrub_copies_repaired_total counter",
            "maat_scrub_copies_repaired_total{daemon=\"mds\"} 9",
            "# TYPE maat_scrub_last_run_timestamp_seconds gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }

    /// Issue 40, item 3: scrapes were answered one at a time with a 2 s timeout per read,
    /// so a client that connected and sent nothing (or a byte a second) held every scrape:
    /// here the scrape would wait at least 5.6 s (2 s for the silent one, 3.6 s for the
    /// trickler); the bound of 3 s is far from both.
    #[test]
    fn a_silent_scraper_delays_no_other_scrape() {
        let stats: Arc<dyn Fn() -> DaemonStats + Send + Sync> = Arc::new(|| DaemonStats {
            daemon: "test".into(),
            counters: vec![("requests".into(), 7)],
        });
        let addr = serve("127.0.0.1:0", stats, Arc::default()).unwrap();
        let mut silent = TcpStream::connect(&addr).unwrap();
        let trickler = TcpStream::connect(&addr).unwrap();
        let t = std::thread::spawn(move || {
            let mut trickler = trickler;
            for b in b"GET /metr" {
                if trickler.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        let started = std::time::Instant::now();
        let answer = get(&addr);
        assert!(
            answer.contains("maat_requests_total{daemon=\"test\"} 7"),
            "{answer}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a scrape waited {:?} behind a silent one",
            started.elapsed()
        );
        // The silent one is cut off at the request deadline.
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        let _ = silent.read_to_end(&mut rest);
        t.join().unwrap();
    }
}
