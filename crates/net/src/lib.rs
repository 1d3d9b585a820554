//! Framing over TCP for Maat's daemons and client: bounded reads, timeouts, reconnects;
//! and the same frames over an in-process network ([`memory`]) for whole-cluster tests.
//! No protocol decisions live here; frames are checked by `maat_proto::wire`.

mod connection;
pub mod limits;

pub use connection::{Connection, Watch};

#[cfg(feature = "sim")]
pub mod memory;
#[cfg(feature = "sim")]
pub use memory::MemoryNet;

use maat_proto::wire::{self, FrameHead, FRAME_HEADER_BYTES, FRAME_HEADER_START_BYTES};
use std::io::{BufReader, IoSlice, Read, Write};
use std::net::TcpStream;

pub use crate::limits::CONNECT_TIMEOUT;
pub use crate::limits::IO_TIMEOUT;
pub use crate::limits::READ_AHEAD_BYTES;

/// Where connections go: TCP (daemons and clients), or an in-process network (tests of
/// a whole cluster without sockets).
#[derive(Clone, Debug, Default)]
pub enum Network {
    /// TCP sockets.
    #[default]
    Tcp,
    /// An in-process network (feature `sim`, simulations only).
    #[cfg(feature = "sim")]
    Memory(MemoryNet),
}

impl Network {
    /// Runs `run` over every lane at once: on TCP each lane on a thread of its own (one
    /// lane: on the caller's); on an in-process network each as a simulated task when the
    /// caller is one ([`MemoryNet::run_lanes`]). Returns when every lane has ended.
    pub fn run_lanes<T: Send>(&self, lanes: &mut [T], run: &(dyn Fn(&mut T) + Sync)) {
        match self {
            #[cfg(feature = "sim")]
            Network::Memory(net) => net.run_lanes(lanes, run),
            Network::Tcp if lanes.len() <= 1 => lanes.iter_mut().for_each(run),
            Network::Tcp => std::thread::scope(|scope| {
                for lane in lanes.iter_mut() {
                    scope.spawn(move || run(lane));
                }
            }),
        }
    }

    /// Waits `millis` milliseconds: on an in-process network, simulated ones.
    pub fn sleep(&self, millis: u64) {
        match self {
            #[cfg(feature = "sim")]
            Network::Memory(net) => net.sleep(millis),
            Network::Tcp => std::thread::sleep(std::time::Duration::from_millis(millis)),
        }
    }

    /// A connection to `address` on this network (connected lazily).
    pub fn connect(&self, address: impl Into<String>) -> crate::Connection {
        match self {
            Network::Tcp => crate::Connection::new(address),
            #[cfg(feature = "sim")]
            Network::Memory(net) => crate::Connection::in_memory(address, net.clone()),
        }
    }
}

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The peer closed the connection between frames.
    #[error("connection closed by peer")]
    Closed,
    /// A socket operation failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes received are not a valid frame.
    #[error("bad frame: {0}")]
    Frame(#[from] maat_proto::ProtoError),
    /// The address does not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
}

/// Reads one frame (either version). `Closed` means the peer hung up cleanly before a new
/// frame began.
pub fn read_frame(stream: &mut impl Read) -> Result<(FrameHead, Vec<u8>), NetError> {
    let header = read_header(stream)?;
    // The buffer is filled straight from the socket, never zeroed first.
    let mut payload = Vec::with_capacity(header.payload_bytes);
    read_payload_rest(stream, &mut payload, header.payload_bytes)?;
    Ok((header.head, payload))
}

/// [`read_frame`] through read-ahead: the header and as much of the payload as was read
/// ahead come from the buffer (a small frame: one `recv` in all), the rest of a larger
/// payload straight from the socket into its own buffer, past the read-ahead.
pub fn read_frame_buffered<R: Read>(
    reader: &mut BufReader<R>,
) -> Result<(FrameHead, Vec<u8>), NetError> {
    let header = read_header(reader)?;
    let mut payload = Vec::with_capacity(header.payload_bytes);
    let ahead = reader.buffer();
    let from_ahead = ahead.len().min(header.payload_bytes);
    payload.extend_from_slice(ahead.get(..from_ahead).unwrap_or_default());
    std::io::BufRead::consume(reader, from_ahead);
    // Either the payload is complete or the read-ahead is empty: reading past it loses
    // nothing.
    read_payload_rest(reader.get_mut(), &mut payload, header.payload_bytes)?;
    Ok((header.head, payload))
}

/// Reads into `payload` until it holds `total` bytes.
fn read_payload_rest(
    stream: &mut impl Read,
    payload: &mut Vec<u8>,
    total: usize,
) -> Result<(), NetError> {
    let rest = total.saturating_sub(payload.len());
    if rest > 0 {
        stream.take(rest as u64).read_to_end(payload)?;
    }
    if payload.len() != total {
        return Err(NetError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "truncated frame payload",
        )));
    }
    Ok(())
}

/// Reads and checks a frame header; its length is checked against the limit before
/// anything is allocated for the payload.
fn read_header(stream: &mut impl Read) -> Result<wire::FrameHeader, NetError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    let mut filled = 0;
    let mut wanted = FRAME_HEADER_START_BYTES;
    while filled < wanted {
        let rest = header.get_mut(filled..wanted).unwrap_or_default();
        match stream.read(rest) {
            Ok(0) if filled == 0 => return Err(NetError::Closed),
            Ok(0) => {
                return Err(NetError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "truncated frame header",
                )))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        if filled == FRAME_HEADER_START_BYTES && wanted == FRAME_HEADER_START_BYTES {
            // The version says how long the rest of the header is.
            if let Some(start) = header.first_chunk::<FRAME_HEADER_START_BYTES>() {
                wanted += wire::header_rest_bytes(start)?;
            }
        }
    }
    Ok(wire::decode_header(
        header.get(..wanted).unwrap_or_default(),
    )?)
}

/// Writes one frame: header and payload in one vectored write (no copy of the payload,
/// one segment train with `TCP_NODELAY`).
pub fn write_frame(
    stream: &mut impl Write,
    head: FrameHead,
    payload: &[u8],
) -> Result<(), NetError> {
    write_frame_parts(stream, head, &[payload])
}

/// Writes one frame whose payload is the concatenation of `parts`, without assembling it.
pub fn write_frame_parts(
    stream: &mut impl Write,
    head: FrameHead,
    parts: &[&[u8]],
) -> Result<(), NetError> {
    write_frame_parts_after(stream, &[], head, parts)
}

/// Whether `buf` begins with a whole frame, header and payload (a bad header: false; the
/// reader finds it). A server answering pipelined requests holds its answer back while
/// the next request is already here whole ([`append_frame`], [`write_frame_parts_after`]).
pub fn starts_with_whole_frame(buf: &[u8]) -> bool {
    let Some(start) = buf.first_chunk::<FRAME_HEADER_START_BYTES>() else {
        return false;
    };
    let Ok(rest) = wire::header_rest_bytes(start) else {
        return false;
    };
    let header_bytes = FRAME_HEADER_START_BYTES + rest;
    buf.get(..header_bytes)
        .and_then(|h| wire::decode_header(h).ok())
        .is_some_and(|h| buf.len() >= header_bytes + h.payload_bytes)
}

/// Appends one frame (header, then the payload's parts) to `out`.
pub fn append_frame(out: &mut Vec<u8>, head: FrameHead, parts: &[&[u8]]) -> Result<(), NetError> {
    let len = parts.iter().map(|p| p.len()).sum();
    out.extend_from_slice(wire::encode_header(head, len)?.as_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
    Ok(())
}

/// Writes `pending` (whole frames made by [`append_frame`]) and then one frame, in one
/// vectored write.
pub fn write_frame_parts_after(
    stream: &mut impl Write,
    pending: &[u8],
    head: FrameHead,
    parts: &[&[u8]],
) -> Result<(), NetError> {
    let len = parts.iter().map(|p| p.len()).sum();
    let header = wire::encode_header(head, len)?;
    let slices: Vec<&[u8]> = [pending, header.as_bytes()]
        .into_iter()
        .chain(parts.iter().copied())
        .collect();
    write_all_vectored(stream, &slices)?;
    stream.flush()?;
    Ok(())
}

/// Writes one frame whose payload is `before ‖ len bytes of file from offset ‖ after`.
/// The file's bytes go from the file to the socket in the kernel (sendfile(2)), never
/// read into memory here: how an OSD answers a read whose data carries no MAC.
pub fn write_frame_from_file(
    stream: &TcpStream,
    head: FrameHead,
    before: &[&[u8]],
    file: (&std::fs::File, u64, u64),
    after: &[&[u8]],
) -> Result<(), NetError> {
    let (file, mut offset, len) = file;
    let parts: usize = before.iter().chain(after).map(|p| p.len()).sum();
    let total = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_add(parts))
        .ok_or_else(|| std::io::Error::other("a frame longer than memory"))?;
    let header = wire::encode_header(head, total)?;
    let slices: Vec<&[u8]> = std::iter::once(header.as_bytes())
        .chain(before.iter().copied())
        .collect();
    let mut writer = stream;
    write_all_vectored(&mut writer, &slices)?;
    let mut left = len;
    while left > 0 {
        let chunk = usize::try_from(left.min(1 << 30)).unwrap_or(1 << 30);
        match rustix::fs::sendfile(stream, file, Some(&mut offset), chunk) {
            // The file ended early: the frame cannot be completed.
            Ok(0) => {
                return Err(NetError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file ended before the range sent from it",
                )))
            }
            Ok(n) => left = left.saturating_sub(n as u64),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(NetError::Io(e.into())),
        }
    }
    write_all_vectored(&mut writer, after)
}

/// Writes every byte of `parts` in vectored writes.
fn write_all_vectored(stream: &mut impl Write, parts: &[&[u8]]) -> Result<(), NetError> {
    // (Empty parts are left out: a write of nothing but them would look like a stall.)
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        match stream.write_vectored(rest) {
            Ok(0) => {
                return Err(NetError::Io(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "peer stopped reading",
                )))
            }
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Prepares an accepted or connected socket: no Nagle delay, bounded silences.
pub fn configure(stream: &TcpStream) -> Result<(), NetError> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;
    use maat_proto::wire::FrameType;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_frame_sent_from_a_file_arrives_whole_and_a_short_file_fails_the_send() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("object");
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let head = FrameHead::v1(FrameType::PlainBulk);
        let reader = std::thread::spawn(move || read_frame(&mut receiver).unwrap());
        write_frame_from_file(
            &sender,
            head,
            &[b"before", b""],
            (&file, 1000, 250_000),
            &[b"", b"after"],
        )
        .unwrap();
        let (got_head, payload) = reader.join().unwrap();
        assert_eq!(got_head, head);
        let expected = [&b"before"[..], &content[1000..251_000], b"after"].concat();
        assert_eq!(payload, expected);
        // A range past the file's end cannot be sent whole: the send fails (the daemon
        // then closes the connection) instead of leaving the frame short.
        let r = write_frame_from_file(&sender, head, &[], (&file, 290_000, 20_000), &[]);
        assert!(r.is_err());
    }

    /// A server that echoes frames: `answer_once` closes after the first answer on each
    /// connection, `drop_second` reads the second frame of a connection and closes without
    /// answering it, `slow` answers each after 100 ms, `wrong_id` answers with another
    /// request's id, `silent` never answers, `serve` keeps serving. Counts the frames it
    /// received.
    fn server(mode: &'static str) -> (String, Arc<AtomicU32>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let seen = Arc::new(AtomicU32::new(0));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let mut conn = conn.unwrap();
                let mut on_this = 0;
                while let Ok((t, p)) = read_frame(&mut conn) {
                    s.fetch_add(1, Ordering::SeqCst);
                    on_this += 1;
                    if mode == "silent" {
                        continue;
                    }
                    if mode == "drop_second" && on_this == 2 {
                        break;
                    }
                    if mode == "busy_second" && on_this == 2 {
                        // A connection-level refusal (version 1, no id), then close.
                        write_frame(&mut conn, FrameHead::v1(FrameType::Refusal), b"busy").unwrap();
                        break;
                    }
                    if mode == "slow" {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    let head = match (mode, t.request_id) {
                        ("wrong_id", Some(id)) => FrameHead::new(t.frame_type, id + 1),
                        _ => t,
                    };
                    write_frame(&mut conn, head, &p).unwrap();
                    if mode == "answer_once" {
                        break;
                    }
                }
            }
        });
        (addr, seen)
    }

    /// Issue 41: a watched call asks its watch after each silent slice, and an answer
    /// that comes after several slices arrives whole; a watch that says stop ends the
    /// call at once with a timeout naming why, long before the connection's timeout; a
    /// watch that never says stop waits the connection's timeout, as an unwatched call.
    #[test]
    fn a_watched_call_stops_waiting_when_told_and_loses_no_answer_while_it_waits() {
        use std::time::{Duration, Instant};
        let asked = AtomicU32::new(0);
        let go_on = || {
            asked.fetch_add(1, Ordering::SeqCst);
            None
        };
        let watch = Watch {
            every: Duration::from_millis(20),
            keep_waiting: &go_on,
        };
        let (addr, _) = server("slow");
        let mut c = Connection::new(addr);
        let payload = vec![7u8; 300_000];
        let (_, answer) = c
            .call_parts_watched(FrameType::Plain, &[&payload], Some(&watch))
            .unwrap();
        assert_eq!(answer, payload);
        assert!(asked.load(Ordering::SeqCst) >= 2, "the watch was not asked");
        // (The connection serves on after the watched call.)
        assert_eq!(c.call(FrameType::Plain, b"again").unwrap().1, b"again");

        let (addr, seen) = server("silent");
        let mut c = Connection::new(addr.clone());
        c.set_io_timeout(Duration::from_secs(30));
        let asked = AtomicU32::new(0);
        let stop_third = || {
            (asked.fetch_add(1, Ordering::SeqCst) >= 2).then(|| "the peer is reported down".into())
        };
        let watch = Watch {
            every: Duration::from_millis(20),
            keep_waiting: &stop_third,
        };
        let started = Instant::now();
        let e = c
            .call_parts_watched(FrameType::Plain, &[b"write"], Some(&watch))
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(&e, NetError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut
                && io.to_string().contains("given up: the peer is reported down")),
            "{e}"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        assert_eq!(seen.load(Ordering::SeqCst), 1, "sent once");

        // Given up on a peer that answers late: the connection's next call gets its own
        // answer (a new connection), never the late one.
        let (late, _) = server("slow");
        let mut c = Connection::new(late);
        let asked = AtomicU32::new(0);
        let stop_second = || (asked.fetch_add(1, Ordering::SeqCst) >= 1).then(|| "down".into());
        let watch = Watch {
            every: Duration::from_millis(20),
            keep_waiting: &stop_second,
        };
        assert!(c
            .call_parts_watched(FrameType::Plain, &[b"first"], Some(&watch))
            .is_err());
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(c.call(FrameType::Plain, b"second").unwrap().1, b"second");

        let mut c = Connection::new(addr);
        c.set_io_timeout(Duration::from_millis(300));
        let watch = Watch {
            every: Duration::from_millis(20),
            keep_waiting: &|| None,
        };
        let started = Instant::now();
        let e = c
            .call_parts_watched(FrameType::Plain, &[b"write"], Some(&watch))
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(
            matches!(&e, NetError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut
                && io.to_string().contains("no answer within")),
            "{e}"
        );
    }

    #[test]
    fn a_connection_the_peer_closed_while_idle_is_replaced_before_sending() {
        let (addr, seen) = server("answer_once");
        let mut c = Connection::new(addr);
        for i in 0..3u8 {
            let (_, answer) = c.call(FrameType::Plain, &[i; 5]).unwrap();
            assert_eq!(answer, [i; 5]);
            // Let the server's close arrive before the next call.
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(seen.load(Ordering::SeqCst), 3, "each request sent once");
    }

    #[test]
    fn a_request_whose_answer_is_lost_is_reported_not_resent() {
        let (addr, seen) = server("drop_second");
        let mut c = Connection::new(addr);
        c.call(FrameType::Plain, b"first").unwrap();
        // On the reused connection the answer never comes: an error, and no second copy
        // on a new connection.
        assert!(c.call(FrameType::Plain, b"write").is_err());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "the write was sent exactly once"
        );
    }

    #[test]
    fn requests_to_two_peers_are_in_flight_at_once_from_one_thread() {
        let (a, seen_a) = server("serve");
        let (b, seen_b) = server("serve");
        let (mut ca, mut cb) = (Connection::new(a), Connection::new(b));
        ca.send(FrameType::Plain, b"to a").unwrap();
        cb.send(FrameType::Plain, b"to b").unwrap();
        // Both arrived before either answer was read.
        for _ in 0..100 {
            if seen_a.load(Ordering::SeqCst) + seen_b.load(Ordering::SeqCst) == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            seen_a.load(Ordering::SeqCst) + seen_b.load(Ordering::SeqCst),
            2
        );
        assert_eq!(cb.receive().unwrap().1, b"to b");
        assert_eq!(ca.receive().unwrap().1, b"to a");
        // And the connections go on as usual.
        assert_eq!(ca.call(FrameType::Plain, b"again").unwrap().1, b"again");
        assert!(cb.receive().is_err(), "nothing sent: an error, not a wait");
    }

    #[test]
    fn a_request_after_one_whose_answer_was_not_read_gets_its_own_answer() {
        // The abandoned request's answer is not there yet when the next is sent, so only
        // the connection knowing an answer is due keeps it from being taken as the next's.
        let (addr, _) = server("slow");
        let mut c = Connection::new(addr);
        c.send(FrameType::Plain, b"abandoned").unwrap();
        assert_eq!(c.call(FrameType::Plain, b"next").unwrap().1, b"next");
    }

    #[test]
    fn a_connection_counts_its_nonces_on_one_stream_until_told_to_start_another() {
        let mut c = Connection::new("127.0.0.1:1");
        let mut names = [[1u8; 8], [2u8; 8]].into_iter();
        let mut name = || names.next().unwrap_or([9; 8]);
        let a = c.next_nonce(&mut name);
        let b = c.next_nonce(&mut name);
        assert_eq!((&a[..8], &b[..8]), (&[1u8; 8][..], &[1u8; 8][..]));
        assert_eq!(a[8..], 1u64.to_be_bytes());
        assert_eq!(b[8..], 2u64.to_be_bytes());
        c.renew_nonce_stream();
        let d = c.next_nonce(&mut name);
        assert_eq!(d[..8], [2u8; 8]);
        assert_eq!(d[8..], 1u64.to_be_bytes());
    }

    #[test]
    fn requests_pipelined_on_one_connection_get_their_own_answers_in_order() {
        let (addr, seen) = server("slow");
        let mut c = Connection::new(addr);
        for i in 0..3u8 {
            c.send(FrameType::Plain, &[i; 3]).unwrap();
        }
        assert_eq!(c.in_flight(), 3);
        for i in 0..3u8 {
            assert_eq!(c.receive().unwrap().1, [i; 3]);
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "one connection, three requests"
        );
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn an_answer_with_another_requests_id_is_refused() {
        let (addr, _) = server("wrong_id");
        let mut c = Connection::new(addr);
        let e = c.call(FrameType::Plain, b"x").unwrap_err();
        assert!(matches!(e, NetError::Frame(_)), "{e}");
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn a_refusal_without_an_id_answers_the_call_even_with_older_requests_pending() {
        let (addr, _) = server("busy_second");
        let mut c = Connection::new(addr);
        c.send(FrameType::Plain, b"older").unwrap();
        let (t, answer) = c.call(FrameType::Plain, b"this").unwrap();
        assert_eq!((t, answer.as_slice()), (FrameType::Refusal, &b"busy"[..]));
    }

    #[test]
    fn a_request_too_large_to_send_leaves_the_connection_and_its_answers_due() {
        let (addr, seen) = server("serve");
        let mut c = Connection::new(addr);
        c.send(FrameType::Plain, b"first").unwrap();
        let big = vec![0u8; maat_proto::wire::FRAME_PAYLOAD_BYTES_MAX + 1];
        assert!(matches!(
            c.send(FrameType::Plain, &big),
            Err(NetError::Frame(_))
        ));
        assert_eq!(c.receive().unwrap().1, b"first");
        assert_eq!(c.call(FrameType::Plain, b"next").unwrap().1, b"next");
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "one connection, nothing resent"
        );
    }

    #[test]
    fn version_1_frames_still_read() {
        let mut bytes = wire::encode_frame(FrameHead::v1(FrameType::Plain), b"old").unwrap();
        bytes.extend(wire::encode_frame(FrameHead::new(FrameType::Plain, 5), b"new").unwrap());
        let mut r = std::io::Cursor::new(bytes);
        assert_eq!(
            read_frame(&mut r).unwrap(),
            (FrameHead::v1(FrameType::Plain), b"old".to_vec())
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            (FrameHead::new(FrameType::Plain, 5), b"new".to_vec())
        );
        assert!(matches!(read_frame(&mut r), Err(NetError::Closed)));
    }

    #[test]
    fn frames_in_parts_arrive_whole() {
        let (addr, _) = server("serve");
        let mut c = Connection::new(addr);
        let big = vec![7u8; 300_000];
        let (_, answer) = c
            .call_parts(FrameType::Plain, &[b"head", &big, b"tail"])
            .unwrap();
        assert_eq!(answer.len(), 4 + big.len() + 4);
        assert_eq!(&answer[..4], b"head");
        assert_eq!(&answer[answer.len() - 4..], b"tail");
    }

    /// Gives at most `step` bytes a read, as a socket may.
    struct Trickle {
        bytes: std::io::Cursor<Vec<u8>>,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step);
            self.bytes.read(&mut buf[..n])
        }
    }

    /// Back-to-back frames of every size around the read-ahead, however the bytes arrive,
    /// are read whole and in order through read-ahead: none loses bytes of the next.
    #[test]
    fn frames_read_through_read_ahead_arrive_whole_and_in_order() {
        let sizes = [
            0,
            1,
            100,
            READ_AHEAD_BYTES - 20,
            READ_AHEAD_BYTES,
            READ_AHEAD_BYTES + 1,
            3 * READ_AHEAD_BYTES + 7,
            2,
        ];
        let mut bytes = Vec::new();
        for (i, len) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..*len).map(|k| (k + i) as u8).collect();
            bytes.extend(
                wire::encode_frame(FrameHead::new(FrameType::Plain, i as u32), &payload).unwrap(),
            );
        }
        for step in [1, 7, 4096, READ_AHEAD_BYTES, usize::MAX] {
            let mut r = BufReader::with_capacity(
                READ_AHEAD_BYTES,
                Trickle {
                    bytes: std::io::Cursor::new(bytes.clone()),
                    step,
                },
            );
            for (i, len) in sizes.iter().enumerate() {
                let (head, payload) = read_frame_buffered(&mut r).unwrap();
                assert_eq!(
                    head,
                    FrameHead::new(FrameType::Plain, i as u32),
                    "step {step}"
                );
                let expected: Vec<u8> = (0..*len).map(|k| (k + i) as u8).collect();
                assert_eq!(payload, expected, "frame {i}, step {step}");
            }
            assert!(matches!(read_frame_buffered(&mut r), Err(NetError::Closed)));
        }
        // A payload cut short is refused, not returned short.
        let cut = &bytes[..bytes.len() - 1];
        let mut r = BufReader::with_capacity(READ_AHEAD_BYTES, cut);
        for _ in 0..sizes.len() - 1 {
            read_frame_buffered(&mut r).unwrap();
        }
        assert!(matches!(read_frame_buffered(&mut r), Err(NetError::Io(_))));
    }

    /// The frame fuzz corpus (fuzz/corpus/frame), each file read as a stream of frames
    /// with and without read-ahead: both read the same frames and fail at the same one.
    #[test]
    fn the_frame_corpus_reads_alike_with_and_without_read_ahead() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/frame");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let mut plain = std::io::Cursor::new(bytes.clone());
            let mut ahead = BufReader::with_capacity(64, &bytes[..]);
            for _ in 0..64 {
                let (a, b) = (read_frame(&mut plain), read_frame_buffered(&mut ahead));
                match (a, b) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b),
                    (Err(a), Err(b)) => {
                        assert_eq!(format!("{a:?}"), format!("{b:?}"));
                        break;
                    }
                    (a, b) => panic!("{a:?} against {b:?}"),
                }
            }
            files += 1;
        }
        assert!(
            files > 10,
            "the corpus at {} has {files} files",
            dir.display()
        );
    }
}
