//! The accept loop: a thread per connection, bounded; frames in, frames out.

use maat_net::{
    configure, read_frame_buffered, write_frame, write_frame_from_file, write_frame_parts_after,
    NetError,
};
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::wire::{FrameHead, FrameType};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::limits::CONNECTIONS_MAX;
pub use crate::limits::IDLE_SECONDS_MAX;

/// A shutdown signal shared by a daemon's threads.
#[derive(Clone, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    wake: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires: stops accepting, lets requests in flight finish.
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let addrs = self.wake.lock().map(|a| a.clone()).unwrap_or_default();
        for a in addrs {
            // Wake the blocking accept.
            let _ = TcpStream::connect_timeout(&a, Duration::from_millis(200));
        }
    }

    /// Whether it fired.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    fn watch(&self, addr: SocketAddr) {
        if let Ok(mut a) = self.wake.lock() {
            a.push(addr);
        }
    }
}

/// An answer frame whose payload is the concatenation of `parts` (sent without
/// assembling it, so bulk data is not copied into an envelope), with, when `file` is
/// set, a range of a file in place of the data part.
pub struct Answer {
    /// The frame type.
    pub frame_type: FrameType,
    /// The payload, in parts.
    pub parts: Vec<Vec<u8>>,
    /// A range of an object's file sent before `parts[index]`, straight from the file
    /// (`maat_osd::OsdCore::execute_zero_copy`).
    pub file: Option<(usize, maat_osd::FileRange)>,
}

impl Answer {
    /// The answer `parts`.
    pub fn parts(frame_type: FrameType, parts: Vec<Vec<u8>>) -> Self {
        Answer {
            frame_type,
            parts,
            file: None,
        }
    }

    /// The whole payload in memory, the file range read (for an in-process network,
    /// which has no socket to send a file to).
    pub fn payload(self) -> std::io::Result<Vec<u8>> {
        let Some((index, range)) = self.file else {
            return Ok(self.parts.concat());
        };
        let mut data = vec![0u8; usize::try_from(range.len).map_err(std::io::Error::other)?];
        std::os::unix::fs::FileExt::read_exact_at(&range.file, &mut data, range.offset)?;
        let (before, after) = self.parts.split_at(index.min(self.parts.len()));
        Ok([before.concat(), data, after.concat()].concat())
    }
}

impl From<(FrameType, Vec<u8>)> for Answer {
    fn from((frame_type, payload): (FrameType, Vec<u8>)) -> Self {
        Answer::parts(frame_type, vec![payload])
    }
}

/// What a daemon does with one frame: given the sender's IP address (as bytes, no port),
/// the frame type and the payload.
pub type Handler = dyn Fn(&[u8], FrameType, &[u8]) -> Answer + Send + Sync;

pub(crate) fn serve(listener: TcpListener, handler: Arc<Handler>, shutdown: &Shutdown, name: &str) {
    serve_at_most(listener, handler, shutdown, name, CONNECTIONS_MAX);
}

fn serve_at_most(
    listener: TcpListener,
    handler: Arc<Handler>,
    shutdown: &Shutdown,
    name: &str,
    connections_max: usize,
) {
    if let Ok(addr) = listener.local_addr() {
        shutdown.watch(addr);
    }
    // A shutdown that fired before the address was watched woke no accept: it must be
    // seen here (a daemon stopped while it was starting would otherwise serve on alone).
    if shutdown.is_set() {
        return;
    }
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if shutdown.is_set() {
            break;
        }
        let Ok(stream) = stream else { continue };
        if active.load(Ordering::SeqCst) >= connections_max {
            // Refused with a reason, not dropped silently (bounded: a peer that does not
            // read cannot stall the accept loop).
            let mut stream = stream;
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let (t, answer) = crate::refusal_frame(&WireError::new(
                ErrorCode::Busy,
                format!("{name}: {connections_max} connections open; try again later"),
            ));
            let _ = write_frame(&mut stream, FrameHead::v1(t), &answer);
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let handler = handler.clone();
        let active = active.clone();
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            connection(stream, handler.as_ref(), &shutdown);
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
    // Let requests in flight finish (bounded wait).
    for _ in 0..100 {
        if active.load(Ordering::SeqCst) == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An answer this small may be held back for the next (see `connection`).
const ANSWER_HELD_BYTES_MAX: usize = 16 * 1024;
/// At most this much of answers is held back before they are written.
const ANSWERS_HELD_BYTES_MAX: usize = 64 * 1024;

/// How long an idle connection's read waits before shutdown is checked again.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Reads a socket whose reads time out after [`IDLE_CHECK`]. Between frames (`until`
/// unset) a timeout is returned, so that the loop can check for shutdown; once a frame
/// has begun, timeouts are waited out until `until`, which every read that brings bytes
/// moves to the I/O timeout from then: a frame may fall silent for up to the I/O timeout
/// at a time, as with the socket's own timeout, however long it takes in all.
struct Patient<'a> {
    stream: &'a TcpStream,
    until: Option<Instant>,
}

impl Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match (&mut &*self.stream).read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) && self.until.is_some_and(|t| Instant::now() < t) => {}
                Ok(n) => {
                    if n > 0 && self.until.is_some() {
                        self.until = Some(Instant::now() + maat_net::IO_TIMEOUT);
                    }
                    return Ok(n);
                }
                other => return other,
            }
        }
    }
}

fn connection(stream: TcpStream, handler: &Handler, shutdown: &Shutdown) {
    if configure(&stream).is_err() {
        return;
    }
    let Ok(from) = stream.peer_addr() else { return };
    let peer: Vec<u8> = match from.ip() {
        std::net::IpAddr::V4(ip) => ip.octets().to_vec(),
        std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let mut idle_seconds = 0u32;
    // Idle connections are checked for shutdown once a second; once a frame has begun it
    // must arrive within the normal I/O timeout ([`Patient`]). One setting for the
    // socket's life, where switching it per frame cost two system calls a request.
    if stream.set_read_timeout(Some(IDLE_CHECK)).is_err() {
        return;
    }
    // Frames are read through read-ahead (a small one in one `recv`); answers are
    // written to the socket directly.
    let mut reader = BufReader::with_capacity(
        maat_net::READ_AHEAD_BYTES,
        Patient {
            stream: &stream,
            until: None,
        },
    );
    let mut writer = &stream;
    // Answers held back while the next request is already read whole (a pipelined
    // sender): they go out together, one write and one wake-up of the peer for many.
    let mut pending: Vec<u8> = Vec::new();
    loop {
        if shutdown.is_set() {
            let _ = writer.write_all(&pending);
            return;
        }
        reader.get_mut().until = None;
        match reader.fill_buf() {
            Ok([]) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                idle_seconds += 1;
                if idle_seconds >= IDLE_SECONDS_MAX {
                    return;
                }
                continue;
            }
            Err(_) => return,
        }
        idle_seconds = 0;
        reader.get_mut().until = Some(Instant::now() + maat_net::IO_TIMEOUT);
        match read_frame_buffered(&mut reader) {
            Ok((head, payload)) => {
                let answer = handler(&peer, head.frame_type, &payload);
                if answer.frame_type == FrameType::Refusal {
                    if let Some(Ok(e)) = answer
                        .parts
                        .first()
                        .map(|p| maat_proto::msg::decode::<WireError>(p))
                    {
                        tracing::info!(peer = %from, code = ?e.code, detail = %e.detail, "refused");
                    }
                }
                let parts: Vec<&[u8]> = answer.parts.iter().map(Vec::as_slice).collect();
                // The answer goes back in its request's version, with its id.
                let head = head.answer(answer.frame_type);
                let small = parts.iter().map(|p| p.len()).sum::<usize>() <= ANSWER_HELD_BYTES_MAX;
                let sent = match &answer.file {
                    None if small
                        && pending.len() < ANSWERS_HELD_BYTES_MAX
                        && maat_net::starts_with_whole_frame(reader.buffer()) =>
                    {
                        maat_net::append_frame(&mut pending, head, &parts)
                    }
                    None => {
                        let sent = write_frame_parts_after(&mut writer, &pending, head, &parts);
                        pending.clear();
                        sent
                    }
                    Some((index, r)) => {
                        let (before, after) = parts.split_at((*index).min(parts.len()));
                        let earlier = writer.write_all(&pending).map_err(NetError::from);
                        pending.clear();
                        earlier.and_then(|()| {
                            write_frame_from_file(
                                &stream,
                                head,
                                before,
                                (&r.file, r.offset, r.len),
                                after,
                            )
                        })
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
            Err(NetError::Frame(e)) => {
                // A bad header leaves the stream unsynchronized: answer, then close.
                let refusal = WireError::from(e);
                tracing::warn!(peer = %from, code = ?refusal.code, detail = %refusal.detail, "refused a frame");
                let (t, answer) = crate::refusal_frame(&refusal);
                let _ =
                    write_frame_parts_after(&mut writer, &pending, FrameHead::v1(t), &[&answer]);
                return;
            }
            Err(NetError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::warn!(peer = %from, "refused a truncated frame");
                return;
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use maat_net::{read_frame, Connection};

    #[test]
    fn a_shutdown_before_serving_began_ends_the_serving() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let shutdown = Shutdown::new();
        shutdown.trigger();
        let handler: Arc<Handler> = Arc::new(|_: &[u8], t, p: &[u8]| (t, p.to_vec()).into());
        let s = shutdown.clone();
        let done = std::thread::spawn(move || serve_at_most(listener, handler, &s, "test", 2));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "still serving after a shutdown that fired before it began"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn connections_past_the_limit_are_refused_with_a_reason() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        let handler: Arc<Handler> = Arc::new(|_: &[u8], t, p: &[u8]| (t, p.to_vec()).into());
        std::thread::spawn(move || serve_at_most(listener, handler, &s, "test", 2));
        let mut held: Vec<Connection> = (0..2).map(|_| Connection::new(addr.clone())).collect();
        for c in held.iter_mut() {
            assert_eq!(c.call(FrameType::Plain, b"hi").unwrap().1, b"hi");
        }
        let (t, answer) = Connection::new(addr.clone())
            .call(FrameType::Plain, b"one too many")
            .unwrap();
        assert_eq!(t, FrameType::Refusal);
        let e: WireError = maat_proto::msg::decode(&answer).unwrap();
        assert_eq!(e.code, ErrorCode::Busy);
        assert!(e.detail.contains("2 connections open"), "{e:?}");
        drop(held);
        shutdown.trigger();
    }

    /// A server on a free loopback port answering every frame with itself (two
    /// connections at most), and the switch that stops it.
    fn echo_server() -> (SocketAddr, Shutdown) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        let handler: Arc<Handler> = Arc::new(|_: &[u8], t, p: &[u8]| (t, p.to_vec()).into());
        std::thread::spawn(move || serve_at_most(listener, handler, &s, "test", 2));
        (addr, shutdown)
    }

    /// A connection's reads time out every second (to check for shutdown); a frame that
    /// has begun still has the whole I/O timeout to arrive.
    #[test]
    fn a_frame_that_pauses_longer_than_the_idle_check_is_still_served() {
        use std::io::Write;
        let (addr, shutdown) = echo_server();
        let mut frame = Vec::new();
        write_frame(
            &mut frame,
            FrameHead::v1(FrameType::Plain),
            b"slow but whole",
        )
        .unwrap();
        let mut stream = TcpStream::connect(addr).unwrap();
        let (first, rest) = frame.split_at(3);
        stream.write_all(first).unwrap();
        std::thread::sleep(IDLE_CHECK + Duration::from_millis(500));
        stream.write_all(rest).unwrap();
        let (head, answer) = read_frame(&mut stream).unwrap();
        assert_eq!(head.frame_type, FrameType::Plain);
        assert_eq!(answer, b"slow but whole");
        shutdown.trigger();
    }

    /// Requests that arrive together are answered together, in order, each with its id;
    /// an answer is held back only while the next request is here whole, never for one
    /// still arriving (its sender may be waiting for that answer).
    #[test]
    fn pipelined_requests_are_answered_in_order_and_none_waits_for_a_frame_still_arriving() {
        use std::io::Write;
        let (addr, shutdown) = echo_server();
        let frame = |id: u32, payload: &[u8]| {
            let mut f = Vec::new();
            write_frame(&mut f, FrameHead::new(FrameType::Plain, id), payload).unwrap();
            f
        };
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // 300 requests in one write (several read-aheads' worth), some answers large.
        let mut burst = Vec::new();
        for id in 0..300u32 {
            let payload = vec![id as u8; if id % 50 == 7 { 20_000 } else { 40 }];
            burst.extend(frame(id, &payload));
        }
        stream.write_all(&burst).unwrap();
        for id in 0..300u32 {
            let (head, answer) = read_frame(&mut stream).unwrap();
            assert_eq!(head.request_id, Some(id));
            let len = if id % 50 == 7 { 20_000 } else { 40 };
            assert_eq!(answer, vec![id as u8; len], "answer {id}");
        }
        // A whole request and the start of the next: the first is answered now.
        let (whole, next) = (frame(1000, b"now"), frame(1001, b"later"));
        let (next_start, next_rest) = next.split_at(5);
        stream
            .write_all(&[&whole[..], next_start].concat())
            .unwrap();
        let (head, answer) = read_frame(&mut stream).unwrap();
        assert_eq!((head.request_id, &answer[..]), (Some(1000), &b"now"[..]));
        stream.write_all(next_rest).unwrap();
        let (head, answer) = read_frame(&mut stream).unwrap();
        assert_eq!((head.request_id, &answer[..]), (Some(1001), &b"later"[..]));
        shutdown.trigger();
    }

    #[test]
    fn a_whole_frame_is_told_from_a_part_of_one() {
        let mut f = Vec::new();
        write_frame(&mut f, FrameHead::new(FrameType::Plain, 9), &[1; 100]).unwrap();
        assert!(maat_net::starts_with_whole_frame(&f));
        assert!(maat_net::starts_with_whole_frame(
            &[&f[..], b"more"].concat()
        ));
        for cut in 0..f.len() {
            assert!(
                !maat_net::starts_with_whole_frame(&f[..cut]),
                "cut at {cut}"
            );
        }
        assert!(!maat_net::starts_with_whole_frame(b"XX not a frame at all"));
    }
}
