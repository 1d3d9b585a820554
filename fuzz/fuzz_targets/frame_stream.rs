#![no_main]
//! A byte stream read as frames through read-ahead, as daemons and clients read sockets:
//! frames are read until one fails, whatever the bytes, and none may panic. Before each
//! read, the daemons' test of whether the bytes hold a whole frame (to hold an answer
//! back for the next request) must agree with the read: a whole frame it sees reads.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut reader = std::io::BufReader::with_capacity(64, data);
    let mut rest = data;
    for _ in 0..64 {
        let whole = maat_net::starts_with_whole_frame(rest);
        match maat_net::read_frame_buffered(&mut reader) {
            Ok(_) => rest = rest.get(frame_len(rest)..).unwrap_or_default(),
            Err(_) => {
                assert!(!whole, "a whole frame was seen where the read failed");
                break;
            }
        }
    }
});

/// Header plus payload length of the frame `bytes` begins with (0 when it has none).
fn frame_len(bytes: &[u8]) -> usize {
    use maat_proto::wire::{decode_header, header_rest_bytes, FRAME_HEADER_START_BYTES};
    let Some(start) = bytes.first_chunk::<FRAME_HEADER_START_BYTES>() else {
        return 0;
    };
    let Ok(rest) = header_rest_bytes(start) else {
        return 0;
    };
    let n = FRAME_HEADER_START_BYTES + rest;
    bytes
        .get(..n)
        .and_then(|h| decode_header(h).ok())
        .map_or(0, |h| n + h.payload_bytes)
}
