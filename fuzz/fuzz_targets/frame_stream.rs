#![no_main]
//! A byte stream read as frames through read-ahead, as daemons and clients read sockets:
//! frames are read until one fails, whatever the bytes, and none may panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut reader = std::io::BufReader::with_capacity(64, data);
    for _ in 0..64 {
        if maat_net::read_frame_buffered(&mut reader).is_err() {
            break;
        }
    }
});
