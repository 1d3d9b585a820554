//! Helpers the whole-cluster simulator tests share.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use maat_client::{Client, ClientError};

/// Bytes that differ at every position (a misplaced block shows).
pub fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4093) as u8).collect()
}

pub fn put(c: &mut Client, path: &str, data: &[u8]) {
    c.put(&mut &data[..], data.len() as u64, path, &mut |_| {})
        .unwrap();
}

pub fn get(c: &mut Client, path: &str) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {})?;
    Ok(out)
}

pub fn counter(stats: &maat_proto::msg::DaemonStats, name: &str) -> u64 {
    stats
        .counters
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{} has no counter {name}", stats.daemon))
}
