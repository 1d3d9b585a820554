#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
use super::*;
use maat_net::{read_frame, write_frame, Connection};
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::wire::FrameHead;
use std::io::{Read, Write};
use std::time::Instant;

/// Small limits for a test: `n` connections (from anyone and from one address), a frame
/// deadline of one second.
fn limits(n: usize) -> ServeLimits {
    ServeLimits {
        connections_max: n,
        connections_per_peer_max: n,
        workers_max: 8,
        workers_unproven_max: 4,
        buffered_bytes_max: 1 << 20,
        buffered_bytes_per_peer_max: 1 << 20,
        frame_seconds_min: 1,
        idle_seconds: 120,
        idle_unproven_seconds: 30,
    }
}

/// Answers a `Request` frame with a `Response` (so the connection proves a key, as a real
/// daemon's sealed answer does), an `Insecure` one with a `Plain` that takes it (as a
/// daemon that allows NOSEC does) and any other frame with itself.
fn echo(_: &[u8], t: FrameType, p: &[u8]) -> Answer {
    if t == FrameType::Insecure {
        return Answer::from((FrameType::Plain, p.to_vec())).proving();
    }
    let t = if t == FrameType::Request {
        FrameType::Response
    } else {
        t
    };
    (t, p.to_vec()).into()
}

/// A server on a free loopback port with `handler` and `limits`; its address, the switch
/// that stops it and its counters.
fn server_with(
    handler: Arc<Handler>,
    limits: ServeLimits,
) -> (SocketAddr, Shutdown, Arc<ServeStats>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let stats = Arc::new(ServeStats::default());
    let (s, st) = (shutdown.clone(), stats.clone());
    std::thread::spawn(move || serve(listener, handler, &s, "test", limits, st));
    (addr, shutdown, stats)
}

/// An echo server (see [`echo`]) for `n` connections.
fn echo_server(n: usize) -> (SocketAddr, Shutdown, Arc<ServeStats>) {
    server_with(Arc::new(echo), limits(n))
}

fn counter(stats: &ServeStats, name: &str) -> u64 {
    stats
        .counters()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap()
}

/// Waits until `done` holds (up to 5 s).
fn eventually(what: &str, done: impl Fn() -> bool) {
    eventually_within(Duration::from_secs(5), what, done)
}

/// Waits until `done` holds (up to `wait`).
fn eventually_within(wait: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + wait;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn frame(id: u32, t: FrameType, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    write_frame(&mut f, FrameHead::new(t, id), payload).unwrap();
    f
}

/// Whether the server closed `stream` (a read sees the end, or a reset).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 64];
    match stream.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        // Still open after the wait (a timeout is not a close).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(_) => true,
    }
}

#[test]
fn a_shutdown_before_serving_began_ends_the_serving() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let shutdown = Shutdown::new();
    shutdown.trigger();
    let s = shutdown.clone();
    let done = std::thread::spawn(move || {
        serve(
            listener,
            Arc::new(echo),
            &s,
            "test",
            limits(2),
            Arc::default(),
        )
    });
    eventually(
        "serving ends after a shutdown that fired before it began",
        || done.is_finished(),
    );
}

/// Issue 40, item 2: 1,025 idle connections shut every user out ("busy: 1024 connections
/// open"). Now idle connections past the limit make room for a new one.
#[test]
fn idle_connections_past_the_limit_make_room_for_a_new_one() {
    let (addr, shutdown, stats) = echo_server(4);
    let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(addr).unwrap()).collect();
    eventually("ten connections accepted", || {
        counter(&stats, "connections_accepted") == 10
    });
    let mut c = Connection::new(addr.to_string());
    let (t, answer) = c.call(FrameType::Plain, b"still served").unwrap();
    assert_eq!((t, &answer[..]), (FrameType::Plain, &b"still served"[..]));
    assert_eq!(counter(&stats, "connections_evicted"), 7);
    assert_eq!(counter(&stats, "connections_refused_busy"), 0);
    assert!(counter(&stats, "connections_open") <= 4);
    drop(idle);
    shutdown.trigger();
}

/// Only when every connection is being served is a new one refused, with the reason.
#[test]
fn busy_connections_past_the_limit_are_refused_with_a_reason() {
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    let handler: Arc<Handler> = Arc::new(move |_: &[u8], t, p: &[u8]| {
        while !r.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        (t, p.to_vec()).into()
    });
    let (addr, shutdown, stats) = server_with(handler, limits(2));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                Connection::new(addr.to_string())
                    .call(FrameType::Plain, b"slow")
                    .unwrap()
            })
        })
        .collect();
    eventually("both connections are being served", || {
        counter(&stats, "workers_busy") == 2
    });
    let (t, answer) = Connection::new(addr.to_string())
        .call(FrameType::Plain, b"one too many")
        .unwrap();
    assert_eq!(t, FrameType::Refusal);
    let e: WireError = maat_proto::msg::decode(&answer).unwrap();
    assert_eq!(e.code, ErrorCode::Busy);
    assert!(e.detail.contains("2 connections open"), "{e:?}");
    release.store(true, Ordering::SeqCst);
    for b in busy {
        assert_eq!(b.join().unwrap().1, b"slow");
    }
    shutdown.trigger();
}

/// A connection that sent a `request` frame (answered `answer`) and has been idle
/// longest is kept when the server, at its limit of three, closes one for a new one:
/// an unproven connection goes instead.
fn kept_over_unproven(request: FrameType, answer: FrameType) {
    let (addr, shutdown, stats) = echo_server(3);
    let mut kept = Connection::new(addr.to_string());
    let (t, _) = kept.call(request, b"first").unwrap();
    assert_eq!(t, answer);
    // Back in the accept loop's table (a thread keeps a connection a while after its
    // answer, and one held by a thread is not closed for a new one).
    std::thread::sleep(crate::limits::LINGER * 4);
    let mut first = TcpStream::connect(addr).unwrap();
    let _second = TcpStream::connect(addr).unwrap();
    eventually("three connections accepted", || {
        counter(&stats, "connections_accepted") == 3
    });
    let _third = TcpStream::connect(addr).unwrap();
    assert!(
        closed_by_server(&mut first),
        "the unproven connection stays open; the one that sent {request:?} was closed"
    );
    assert_eq!(counter(&stats, "connections_evicted"), 1);
    let (t, back) = kept.call(request, b"again").unwrap();
    assert_eq!((t, &back[..]), (answer, &b"again"[..]));
    shutdown.trigger();
}

/// At the limit the connection closed for a new one is one that proved no key, even when
/// one that did has been idle longer.
#[test]
fn connections_that_proved_a_key_are_kept_over_those_that_did_not() {
    kept_over_unproven(FrameType::Request, FrameType::Response);
}

/// Issue 45: a daemon that takes NOSEC requests serves their connections in the class of
/// those that proved a key (no key to prove), so a NOSEC baseline is not held to the
/// threads kept for unproven senders, nor closed first.
#[test]
fn a_connection_whose_insecure_request_was_taken_counts_as_proven() {
    kept_over_unproven(FrameType::Insecure, FrameType::Plain);
}

/// Issue 40, item 2: a byte of a frame header every 50 s kept a connection forever. A
/// frame now has a deadline from its first byte, whatever trickles in between.
#[test]
fn a_frame_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let (addr, shutdown, stats) = echo_server(4);
    let f = frame(1, FrameType::Plain, b"never whole");
    let mut stream = TcpStream::connect(addr).unwrap();
    let began = Instant::now();
    let mut sent = 0;
    let cut = loop {
        if stream.write_all(&f[sent..=sent]).is_err() {
            break began.elapsed();
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(200));
        if counter(&stats, "connections_frame_late") == 1 {
            break began.elapsed();
        }
        assert!(
            sent < f.len() - 1,
            "the trickle reached the end of the frame"
        );
    };
    assert!(
        cut >= Duration::from_millis(900) && cut < Duration::from_secs(3),
        "{cut:?}"
    );
    assert!(closed_by_server(&mut stream));
    shutdown.trigger();
}

/// A frame that pauses longer than a thread waits (the accept loop reads the rest) is
/// still served whole.
#[test]
fn a_frame_that_pauses_is_still_served() {
    let (addr, shutdown, _) = echo_server(4);
    let f = frame(5, FrameType::Plain, b"slow but whole");
    let mut stream = TcpStream::connect(addr).unwrap();
    let (first, rest) = f.split_at(3);
    stream.write_all(first).unwrap();
    std::thread::sleep(crate::limits::WORKER_FRAME_PATIENCE + Duration::from_millis(300));
    stream.write_all(rest).unwrap();
    let (head, answer) = read_frame(&mut stream).unwrap();
    assert_eq!(head.frame_type, FrameType::Plain);
    assert_eq!(answer, b"slow but whole");
    shutdown.trigger();
}

/// Frames still arriving are held within the budget of their address: past it the accept
/// loop reads no more (TCP pushes back on the senders, whose frames then cannot end), and
/// what it holds is freed at their deadlines.
#[test]
fn frames_still_arriving_are_held_within_the_budget_until_their_deadline() {
    let mut l = limits(16);
    l.buffered_bytes_per_peer_max = 96 * 1024;
    let (addr, shutdown, stats) = server_with(Arc::new(echo), l);
    // 256 KiB frames: a deadline of 1 s + 1 s.
    let big = frame(1, FrameType::Plain, &vec![9u8; 256 * 1024]);
    let mut senders = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // Most of a frame: the last byte held back.
        let _ = stream.write_all(&big[..big.len() - 1]);
        senders.push(stream);
    }
    eventually("the budget is full", || {
        counter(&stats, "buffered_bytes") >= 64 * 1024
    });
    let held = counter(&stats, "buffered_bytes");
    assert!(held <= 96 * 1024, "held {held} bytes");
    // The senders give up; the frames read in part end at their deadlines, the others
    // are read to their end once there is budget again.
    drop(senders);
    // Two rounds of 1 s + 1 s deadlines at most.
    eventually_within(
        Duration::from_secs(10),
        "every connection is closed and the budget given back",
        || counter(&stats, "connections_open") == 0 && counter(&stats, "buffered_bytes") == 0,
    );
    assert!(counter(&stats, "connections_frame_late") >= 1);
    let mut c = Connection::new(addr.to_string());
    assert_eq!(c.call(FrameType::Plain, b"small").unwrap().1, b"small");
    shutdown.trigger();
}

/// Requests that arrive together are answered together, in order, each with its id; an
/// answer is held back only while the next request is here whole, never for one still
/// arriving (its sender may be waiting for that answer).
#[test]
fn pipelined_requests_are_answered_in_order_and_none_waits_for_a_frame_still_arriving() {
    let (addr, shutdown, _) = echo_server(4);
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // 300 requests in one write (several read-aheads' worth), some answers large.
    let mut burst = Vec::new();
    for id in 0..300u32 {
        let payload = vec![id as u8; if id % 50 == 7 { 20_000 } else { 40 }];
        burst.extend(frame(id, FrameType::Plain, &payload));
    }
    stream.write_all(&burst).unwrap();
    for id in 0..300u32 {
        let (head, answer) = read_frame(&mut stream).unwrap();
        assert_eq!(head.request_id, Some(id));
        let len = if id % 50 == 7 { 20_000 } else { 40 };
        assert_eq!(answer, vec![id as u8; len], "answer {id}");
    }
    // A whole request and the start of the next: the first is answered now.
    let (whole, next) = (
        frame(1000, FrameType::Plain, b"now"),
        frame(1001, FrameType::Plain, b"later"),
    );
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

/// A bad header is answered with a refusal and its connection closed; others go on.
#[test]
fn a_bad_header_is_refused_and_closes_only_its_connection() {
    let (addr, shutdown, _) = echo_server(4);
    let mut good = Connection::new(addr.to_string());
    assert_eq!(good.call(FrameType::Plain, b"a").unwrap().1, b"a");
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.write_all(b"XXXXXXXXXXXXXXXXXXXXXXXXXX").unwrap();
    let (head, answer) = read_frame(&mut bad).unwrap();
    assert_eq!(head.frame_type, FrameType::Refusal);
    let e: WireError = maat_proto::msg::decode(&answer).unwrap();
    assert_eq!(e.code, ErrorCode::Malformed);
    assert!(closed_by_server(&mut bad));
    assert_eq!(good.call(FrameType::Plain, b"b").unwrap().1, b"b");
    shutdown.trigger();
}

#[test]
fn a_whole_frame_is_told_from_a_part_of_one() {
    let f = frame(9, FrameType::Plain, &[1; 100]);
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
