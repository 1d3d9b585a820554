//! Byte-range file handles (what FUSE and the Python package use) against a real cluster:
//! a random sequence of writes, truncates and reads matches the same sequence on a
//! byte vector, across stripe boundaries, and what `get` returns afterwards is the model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, Cluster};
use maat_client::{ClientError, OpenFlags};
use maat_proto::msg::{ErrorCode, STRIPE_UNIT_BYTES};

/// A small deterministic generator (xorshift64*): the sequence is the same every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const WRITE: OpenFlags = OpenFlags {
    write: true,
    create: Some(0o644),
    exclusive: false,
    truncate: false,
};

#[test]
fn random_writes_truncates_and_reads_match_a_local_model() {
    model_sequence(Cluster::start(3, &[]), false);
}

/// The same sequence on an encrypted file (SPEC H3): stripes kept whole by the handle,
/// sealed under fresh generations when sent.
#[test]
fn random_writes_truncates_and_reads_of_an_encrypted_file_match_a_local_model() {
    model_sequence(Cluster::start_encrypting(3, &[]), true);
}

fn model_sequence(cluster: Cluster, encrypted: bool) {
    let c = cluster.admin_client();
    let stripe = STRIPE_UNIT_BYTES;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut model: Vec<u8> = Vec::new();
    let mut h = c.open_file("/model", WRITE).unwrap();
    assert_eq!(h.stat().encrypted, encrypted);
    for step in 0..60u32 {
        match rng.below(10) {
            0..=4 => {
                // Writes near stripe boundaries, sometimes past the end (a zero-filled gap).
                let limit = model.len() as u64 + stripe / 2;
                let near = rng.below(4) * stripe;
                let offset = (near + rng.below(stripe / 8))
                    .saturating_sub(stripe / 16)
                    .min(limit);
                let len = 1 + rng.below(stripe + stripe / 4) as usize;
                let byte = (step % 251) as u8 + 1;
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                c.write_file_at(&mut h, offset, &data).unwrap();
                let end = offset as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&data);
            }
            5..=6 => {
                let size = rng.below(model.len() as u64 + stripe);
                c.truncate_file(&mut h, size).unwrap();
                model.resize(size as usize, 0);
                // Recorded at once, and nothing past the new end survives at the OSDs.
                let mut whole = Vec::new();
                c.get("/model", &mut whole, &mut |_| {}).unwrap();
                assert!(whole == model, "step {step}: get after truncate to {size}");
            }
            _ => {
                let offset = rng.below(model.len() as u64 + 10);
                let len = rng.below(2 * stripe) as usize;
                let got = c.read_file_at(&h, offset, len).unwrap();
                let from = (offset as usize).min(model.len());
                let to = (from + len).min(model.len());
                assert_eq!(got.len(), to - from, "step {step}: read length at {offset}");
                assert!(got == model[from..to], "step {step}: bytes at {offset}");
            }
        }
        assert_eq!(h.size(), model.len() as u64, "step {step}: size");
    }
    c.flush_file(&mut h).unwrap();
    assert!(!h.dirty());
    assert_eq!(c.stat("/model").unwrap().size, model.len() as u64);
    let mut whole = Vec::new();
    c.get("/model", &mut whole, &mut |_| {}).unwrap();
    assert!(
        whole == model,
        "get after the sequence differs from the model"
    );

    // A new handle sees the recorded size and the same bytes.
    let r = c.open_file("/model", OpenFlags::READ).unwrap();
    assert_eq!(r.size(), model.len() as u64);
    assert!(c.read_file_at(&r, 0, model.len() + 1).unwrap() == model);
}

/// `maat cat FILE | head -c 10`: the reader closing the pipe early is not a failure of
/// `cat` (the client's typed `Io` error with `BrokenPipe`), while a local file that
/// cannot be read is one, named.
#[test]
fn cat_into_a_pipe_closed_early_succeeds_and_local_errors_name_the_file() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let cluster = Cluster::start(1, &[]);
    let c = cluster.admin_client();
    // Bigger than a pipe's buffer, so that `cat` is still writing when the pipe closes.
    let data = vec![7u8; 4 << 20];
    c.put(&mut data.as_slice(), data.len() as u64, "/big", &mut |_| {})
        .unwrap();
    let mut child = Command::new(common::MAAT)
        .args(["cat", "/big"])
        .env("MAAT_CLUSTER", cluster.cluster_file())
        .env("MAAT_HOME", cluster.admin_home())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(first, [7u8; 10]);
    assert!(
        out.status.success(),
        "cat failed on a closed pipe: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let missing = cluster.dir.path().join("no-such-input");
    let missing = missing.to_str().unwrap();
    let out = cluster.maat(&cluster.admin_home(), &["put", missing, "/x"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-input"), "{stderr}");
}

#[test]
fn handles_refuse_what_their_flags_do_not_allow() {
    let cluster = Cluster::start(1, &[]);
    let c = cluster.admin_client();
    let mut w = c.open_file("/f", WRITE).unwrap();
    c.write_file_at(&mut w, 0, b"hello").unwrap();
    c.flush_file(&mut w).unwrap();

    let mut r = c.open_file("/f", OpenFlags::READ).unwrap();
    assert!(matches!(
        c.write_file_at(&mut r, 0, b"x"),
        Err(ClientError::NotOpenForWriting(_))
    ));
    assert!(matches!(
        c.truncate_file(&mut r, 0),
        Err(ClientError::NotOpenForWriting(_))
    ));
    let exclusive = OpenFlags {
        exclusive: true,
        ..WRITE
    };
    assert_eq!(code(c.open_file("/f", exclusive)), ErrorCode::AlreadyExists);
    assert_eq!(
        code(c.open_file("/nothing", OpenFlags::READ)),
        ErrorCode::NoSuchFile
    );
    c.mkdir("/d", 0o755, false).unwrap();
    assert_eq!(
        code(c.open_file("/d", OpenFlags::READ)),
        ErrorCode::IsADirectory
    );

    // Truncate on open empties the file; stale bytes never come back through `get`.
    let truncating = OpenFlags {
        truncate: true,
        ..WRITE
    };
    let h = c.open_file("/f", truncating).unwrap();
    assert_eq!(h.size(), 0);
    assert_eq!(c.stat("/f").unwrap().size, 0);
    let mut out = Vec::new();
    c.get("/f", &mut out, &mut |_| {}).unwrap();
    assert!(out.is_empty());
}

#[test]
fn truncation_removes_stripes_a_handle_never_saw() {
    let cluster = Cluster::start(2, &[]);
    let c = cluster.admin_client();
    // A writer that sent three stripes and never recorded its size (it failed): the MDS
    // says 0 bytes, the OSDs hold 1.5 MiB.
    let mut lost = c.open_file("/f", WRITE).unwrap();
    let stale = vec![7u8; 3 * STRIPE_UNIT_BYTES as usize];
    c.write_file_at(&mut lost, 0, &stale).unwrap();
    assert_eq!(c.stat("/f").unwrap().size, 0);

    // An open that truncates sees size 0, yet none of those bytes may come back.
    let truncating = OpenFlags {
        truncate: true,
        ..WRITE
    };
    let mut h = c.open_file("/f", truncating).unwrap();
    c.write_file_at(&mut h, 0, b"fresh").unwrap();
    c.flush_file(&mut h).unwrap();
    let mut out = Vec::new();
    c.get("/f", &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, b"fresh", "truncated bytes came back through get");

    // Past the largest file the MDS records: refused before any byte is sent.
    assert_eq!(
        code(c.write_file_at(&mut h, maat_proto::limits::FILE_BYTES_MAX, b"x")),
        ErrorCode::TooLarge
    );
    assert_eq!(code(c.truncate_file(&mut h, u64::MAX)), ErrorCode::TooLarge);
}

/// Issue 44: opening an existing file with `O_TRUNC` and writing less than it held (`cp
/// small big`, `echo ab > f`) left an encrypted file empty and failed at close. Plain and
/// encrypted, at sizes within a stripe and across several, read back with `get`.
#[test]
fn truncate_on_open_then_a_shorter_write_keeps_the_new_bytes() {
    for encrypted in [true, false] {
        let cluster = if encrypted {
            Cluster::start_encrypting(2, &[])
        } else {
            Cluster::start(2, &[])
        };
        let c = cluster.admin_client();
        let stripe = STRIPE_UNIT_BYTES as usize;
        for (old, new) in [
            (200_000, 3),
            (2 * stripe + 5, stripe + 1),
            (stripe, stripe / 2),
        ] {
            let path = format!("/t-{old}-{new}");
            let before: Vec<u8> = (0..old).map(|i| (i % 251) as u8).collect();
            c.put_with(
                &mut &before[..],
                old as u64,
                &path,
                Some(encrypted),
                &mut |_| {},
            )
            .unwrap();
            assert_eq!(
                c.open_file(&path, OpenFlags::READ)
                    .unwrap()
                    .stat()
                    .encrypted,
                encrypted
            );
            let truncating = OpenFlags {
                truncate: true,
                ..WRITE
            };
            let after: Vec<u8> = (0..new).map(|i| (i % 13) as u8 + 100).collect();
            let check = |h: &mut maat_client::FileHandle, how: &str| {
                c.write_file_at(h, 0, &after)
                    .unwrap_or_else(|e| panic!("{path} encrypted={encrypted} {how}: write: {e}"));
                c.flush_file(h)
                    .unwrap_or_else(|e| panic!("{path} encrypted={encrypted} {how}: flush: {e}"));
                let mut out = Vec::new();
                c.get(&path, &mut out, &mut |_| {}).unwrap();
                assert_eq!(out.len(), new, "{path} encrypted={encrypted} {how}");
                assert!(
                    out == after,
                    "{path} encrypted={encrypted} {how}: other bytes"
                );
            };
            // Truncated by the open itself.
            let mut h = c.open_file(&path, truncating).unwrap();
            check(&mut h, "truncating open");
            // As a mount's kernel does it: open, truncate by path (another handle), then
            // write through the first open, which is told of the new size.
            c.put_with(
                &mut &before[..],
                old as u64,
                &path,
                Some(encrypted),
                &mut |_| {},
            )
            .unwrap();
            let mut first = c.open_file(&path, WRITE).unwrap();
            let mut by_path = c.open_file(&path, WRITE).unwrap();
            c.truncate_file(&mut by_path, 0).unwrap();
            first.resized_elsewhere(0);
            check(&mut first, "truncate by path");
        }
    }
}

/// Issue 44 from the CLI: `maat ln` makes a hard link (one file under two names, its
/// objects kept until the last goes), `maat touch` makes a file or sets its times, and
/// `maat stat` shows the links and the three times.
#[test]
fn the_cli_makes_hard_links_and_sets_times() {
    let cluster = Cluster::start(2, &[]);
    let home = cluster.admin_home();
    let field = |path: &str, name: &str| -> String {
        let out = cluster.ok(&home, &["stat", "--epoch", path], None);
        String::from_utf8_lossy(&out)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {name} in {}", String::from_utf8_lossy(&out)))
    };
    cluster.ok(&home, &["touch", "/f"], None);
    assert_eq!(field("/f", "size"), "0", "touch made an empty file");
    cluster.ok(&home, &["put", "-", "/f"], Some(b"data"));
    cluster.ok(&home, &["ln", "/f", "/g"], None);
    assert_eq!(field("/f", "links"), "2");
    assert_eq!(field("/g", "id"), field("/f", "id"));
    let refused = cluster.fails(&home, &["ln", "/f", "/g"], None);
    assert!(
        refused.contains("AlreadyExists") || refused.contains("exists"),
        "{refused}"
    );
    cluster.ok(&home, &["rm", "/f"], None);
    assert_eq!(cluster.ok(&home, &["cat", "/g"], None), b"data");
    assert_eq!(field("/g", "links"), "1");
    cluster.ok(&home, &["touch", "-a", "--time", "5000", "/g"], None);
    cluster.ok(&home, &["touch", "-m", "--time", "7000", "/g"], None);
    assert_eq!(field("/g", "accessed"), "5000");
    assert_eq!(field("/g", "modified"), "7000");
    assert!(field("/g", "changed").parse::<u64>().unwrap() > 7000);
}
