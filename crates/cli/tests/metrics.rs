//! Prometheus metrics on live daemons: `maat up` gives every daemon an endpoint, and what
//! it serves parses with a real Prometheus text parser (`prometheus-parse`) and reports
//! the work just done: requests, signatures, bytes, refusals by reason and latency
//! histograms per frame kind and request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;
use maat_client::ClientError;
use maat_proto::msg::{Access, ErrorCode};
use prometheus_parse::{Scrape, Value};
use std::io::{Read, Write};
use std::net::TcpStream;

fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

fn scrape(cluster: &Cluster, daemon_dir: &str) -> Scrape {
    let addr = std::fs::read_to_string(cluster.data().join(daemon_dir).join("metrics.addr"))
        .unwrap_or_else(|e| panic!("{daemon_dir} has no metrics endpoint: {e}"));
    let (head, body) = http_get(addr.trim(), "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{metric}: not a number: {other:?}"),
        })
        .collect();
    assert!(!found.is_empty(), "no {metric} {labels:?}");
    found.iter().sum()
}

#[test]
fn every_daemon_serves_parseable_prometheus_metrics_of_its_work() {
    let cluster = Cluster::start_with_metrics(2, &["--grouping", "none"]);
    cluster.add_user("alice", "alice passphrase", None);
    cluster.add_user("bob", "bob passphrase", None);
    cluster
        .admin_client()
        .mkdir("/shared", 0o777, false)
        .unwrap();
    let alice = cluster.user_client("alice", "alice passphrase");
    let data = vec![9u8; 200_000];
    alice
        .put(&mut &data[..], data.len() as u64, "/shared/m", &mut |_| {})
        .unwrap();
    // (The put's open is kept for reading: forgotten, so that this one asks the MDS.)
    alice.forget_opens();
    let opened = alice.open("/shared/m", Access::Read, None).unwrap();
    // A refusal with a reason: bob presents alice's capability.
    let bob = cluster.user_client("bob", "bob passphrase");
    match bob.read_object(&opened, 0) {
        Err(ClientError::Refused(e)) => assert_eq!(e.code, ErrorCode::WrongUser),
        other => panic!("{other:?}"),
    }

    let mds = scrape(&cluster, "mds");
    assert!(value(&mds, "maat_requests_total", &[("daemon", "mds")]) > 0.0);
    assert!(value(&mds, "maat_signatures_made_total", &[("daemon", "mds")]) >= 1.0);
    assert!(
        value(
            &mds,
            "maat_grouping_capabilities_total",
            &[("strategy", "single")]
        ) >= 1.0
    );
    let latency = mds
        .samples
        .iter()
        .find(|x| {
            x.metric == "maat_request_duration_seconds"
                && x.labels.get("kind") == Some("request")
                && x.labels.get("request") == Some("open")
        })
        .expect("a latency histogram for MDS opens");
    let Value::Histogram(buckets) = &latency.value else {
        panic!("{:?}", latency.value)
    };
    let total = buckets.last().unwrap().count;
    assert!(total > 0.0);
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));

    let mut names: std::collections::HashSet<String> =
        mds.samples.iter().map(|x| x.metric.clone()).collect();
    let mut written = 0.0;
    let mut wrong_user = 0.0;
    let mut timed_writes = false;
    for osd in ["osd-1", "osd-2"] {
        let s = scrape(&cluster, osd);
        names.extend(s.samples.iter().map(|x| x.metric.clone()));
        written += value(&s, "maat_bytes_written_total", &[]);
        timed_writes |= s.samples.iter().any(|x| {
            x.metric == "maat_request_duration_seconds"
                && x.labels.get("request") == Some("write")
                && matches!(&x.value, Value::Histogram(b) if b.last().is_some_and(|b| b.count > 0.0))
        });
        wrong_user += s
            .samples
            .iter()
            .filter(|x| {
                x.metric == "maat_refusals_by_reason_total"
                    && x.labels.get("reason") == Some("WrongUser")
            })
            .map(|x| match x.value {
                Value::Counter(v) => v,
                _ => 0.0,
            })
            .sum::<f64>();
    }
    assert!(written >= data.len() as f64, "{written}");
    assert_eq!(wrong_user, 1.0);
    assert!(timed_writes, "no OSD has a latency histogram for writes");

    // Every series the Grafana dashboard in the repository plots exists.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/maat.json"),
    )
    .unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut exprs = Vec::new();
    for panel in parsed["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 10);
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("maat_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = name.strip_suffix("_bucket").unwrap_or(&name);
            assert!(
                names.contains(base),
                "the dashboard plots {name}, which no daemon serves"
            );
            rest = &rest[at + name.len()..];
        }
    }

    // Anything but GET /metrics is answered, not served.
    let addr = std::fs::read_to_string(cluster.data().join("mds/metrics.addr")).unwrap();
    let (head, _) = http_get(addr.trim(), "/secrets");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

/// Issue 40, item 3: metrics ports changed at every restart (a static Prometheus
/// configuration broke) and `--listen 0.0.0.0:0` served them on every address. Now each
/// daemon's port is chosen once and kept, on loopback unless `--metrics-host` says
/// otherwise; a cluster whose configs still name port 0 is given fixed ports at its next
/// start.
#[test]
fn metrics_stay_on_loopback_at_the_same_port_across_restarts() {
    let mut cluster = Cluster::start_with_metrics(1, &["--no-encrypt", "--listen", "0.0.0.0:0"]);
    let daemons = ["mds", "osd-1", "kds-1"];
    let addresses = |c: &Cluster| -> Vec<String> {
        daemons
            .iter()
            .map(|d| {
                std::fs::read_to_string(c.data().join(d).join("metrics.addr"))
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .collect()
    };
    let before = addresses(&cluster);
    for a in &before {
        assert!(a.starts_with("127.0.0.1:"), "metrics bound to {a}");
        assert!(!a.ends_with(":0"), "{a}");
    }
    cluster.restart();
    assert_eq!(addresses(&cluster), before, "a restart moved the metrics");
    // A cluster from before, whose configs name port 0 on every address.
    cluster.restart_with(|data| {
        for (d, file) in [
            ("mds", "mds.toml"),
            ("osd-1", "osd.toml"),
            ("kds-1", "kds.toml"),
        ] {
            let path = data.join(d).join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let mut table: toml::Table = toml::from_str(&text).unwrap();
            table.insert("metrics".into(), toml::Value::String("0.0.0.0:0".into()));
            std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
        }
    });
    let pinned = addresses(&cluster);
    for a in &pinned {
        assert!(a.starts_with("127.0.0.1:") && !a.ends_with(":0"), "{a}");
    }
    cluster.restart();
    assert_eq!(addresses(&cluster), pinned, "pinned once, kept after");
    for a in &pinned {
        let (head, _) = http_get(a, "/metrics");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
}
