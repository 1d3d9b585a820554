//! Old data still loads: a cluster directory written by the format-0 release (secrets inside
//! `meta.redb`, unversioned records and `.attr` files, world-readable files, administrator
//! with a legacy long-term key) is refused until its loose database is made private, then
//! migrated in place: secrets into key files, records versioned, admin moved to OPAQUE on
//! its first login; its data reads back, and the migrated directory starts again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{Cluster, MAAT};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/format0-cluster.tar.gz"
);

/// `N` distinct free ports below the kernel's ephemeral range, as `maat up` chooses
/// them: the cluster is stopped and started again on them, and a port in that range can
/// be taken meanwhile by any other test's connection. Every listener is held until all
/// are chosen, so the ports are distinct.
fn free_ports<const N: usize>() -> [u16; N] {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u32 = range.split_whitespace().next().unwrap().parse().unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let span = low / 2;
    let start = (std::process::id().wrapping_mul(7919) ^ nanos) % span;
    let held: Vec<std::net::TcpListener> = (0..span)
        .map(|i| (span + (start + i) % span) as u16)
        .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
        .take(N)
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// Rewrites the fixture's relative paths and fixed ports for this run.
fn rewrite(file: &Path, data: &Path, ports: &[(&str, u16)]) {
    let mut text = std::fs::read_to_string(file).unwrap();
    text = text.replace("\"maat-data/", &format!("\"{}/", data.display()));
    for (old, new) in ports {
        text = text.replace(old, &new.to_string());
    }
    std::fs::write(file, text).unwrap();
}

#[test]
fn a_format0_cluster_is_refused_while_exposed_then_migrates_and_serves() {
    let dir = tempfile::Builder::new()
        .prefix("maat-upgrade-")
        .tempdir()
        .unwrap();
    let status = Command::new("tar")
        .arg("xzf")
        .arg(FIXTURE)
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let data = dir.path().join("data");
    std::fs::rename(dir.path().join("maat-data"), &data).unwrap();
    let [mds_port, osd_port] = free_ports::<2>();
    let ports = [("35127", mds_port), ("35753", osd_port)];
    for f in ["client.toml", "mds/mds.toml", "osd-1/osd.toml"] {
        rewrite(&data.join(f), &data, &ports);
    }

    // The format-0 database holds the signing seed and is 0644: refused, naming the fix.
    let out = Command::new(MAAT)
        .args(["up", "--data"])
        .arg(&data)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "an exposed database must not start");
    let err = String::from_utf8_lossy(&out.stderr);
    let db = data.join("mds/meta.redb");
    assert!(
        err.contains(&format!("chmod 600 {}", db.display())),
        "the refusal names the file and the fix: {err}"
    );

    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cluster = Cluster::adopt(dir);
    let data = cluster.data();
    // Secrets now live in their own private files.
    for f in ["signing.key", "sealing.key", "decoy.key", "opaque.key"] {
        let mode = std::fs::metadata(data.join("mds/keys").join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    // The database no longer carries the root of trust: the signing seed now in its key
    // file appears nowhere in it (the migration compacts the file).
    let seed = hex_decode(
        std::fs::read_to_string(data.join("mds/keys/signing.key"))
            .unwrap()
            .trim(),
    );
    let db_bytes = std::fs::read(data.join("mds/meta.redb")).unwrap();
    assert!(
        !db_bytes.windows(seed.len()).any(|w| w == seed.as_slice()),
        "the migrated database still holds the signing seed"
    );
    let admin = cluster.admin_home();
    let found = find_file(&cluster, &admin, "/");
    assert!(!found.is_empty(), "the format-0 cluster holds a file");
    assert_eq!(
        cluster.ok(&admin, &["cat", &found], None),
        b"hello from format 0\n"
    );
    // New writes work on the migrated cluster, and it starts again as format 1.
    cluster.ok(&admin, &["put", "-", "/after-upgrade"], Some(b"format 1"));
    cluster.restart();
    assert_eq!(
        cluster.ok(&admin, &["cat", &found], None),
        b"hello from format 0\n"
    );
    assert_eq!(
        cluster.ok(&admin, &["cat", "/after-upgrade"], None),
        b"format 1"
    );
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The first regular file under `dir`, depth first.
fn find_file(cluster: &Cluster, home: &Path, dir: &str) -> String {
    let out = String::from_utf8(cluster.ok(home, &["ls", "-l", dir], None)).unwrap();
    for line in out.lines() {
        let Some(name) = line.split_whitespace().last() else {
            continue;
        };
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        if line.starts_with('-') {
            return path;
        }
        if line.starts_with('d') {
            let found = find_file(cluster, home, &path);
            if !found.is_empty() {
                return found;
            }
        }
    }
    String::new()
}
