//! Serving connections: an accept loop that holds every idle or slow connection without a
//! thread (`reactor`), threads that serve busy ones back to back (`pool`, `turn`), and
//! the frame rule they share (`conn`). Why this shape, and what each limit bounds:
//! `docs/ARCHITECTURE.md` ("Connections") and `docs/THREAT_MODEL.md` ("Availability").

mod conn;
mod pool;
mod reactor;
mod turn;

use maat_proto::wire::FrameType;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::limits::CONNECTIONS_MAX;
pub use crate::limits::IDLE_SECONDS_MAX;
use crate::limits::{
    BUFFERED_BYTES_MAX, BUFFERED_BYTES_PER_PEER_MAX, CONNECTIONS_PER_PEER_MAX, FRAME_SECONDS_MIN,
    IDLE_UNPROVEN_SECONDS_MAX, LISTEN_BACKLOG, WORKERS_MAX, WORKERS_UNPROVEN_MAX,
};

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
    /// The request was taken as its sender's own although it proved no key: an insecure
    /// (NOSEC) request served by a daemon configured to allow them (benchmarks only),
    /// where there is no key to prove. Its connection is then served in the class of
    /// those that proved one, so that a NOSEC baseline is not held to the few threads
    /// kept for unproven senders (issue 45: 100 NOSEC clients waited on 64 threads).
    pub proves: bool,
}

impl Answer {
    /// The answer `parts`.
    pub fn parts(frame_type: FrameType, parts: Vec<Vec<u8>>) -> Self {
        Answer {
            frame_type,
            parts,
            file: None,
            proves: false,
        }
    }

    /// This answer, marked as taking its insecure request ([`Answer::proves`]).
    pub fn proving(mut self) -> Self {
        self.proves = true;
        self
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

/// The limits one daemon serves under (`limits.rs` has the defaults and what each bounds).
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections open at once.
    pub connections_max: usize,
    /// Connections open at once from one address.
    pub connections_per_peer_max: usize,
    /// Threads serving connections at once.
    pub workers_max: usize,
    /// Of those, threads serving connections that proved no key.
    pub workers_unproven_max: usize,
    /// Bytes of frames still arriving held for all connections.
    pub buffered_bytes_max: usize,
    /// Of those, bytes held for one address.
    pub buffered_bytes_per_peer_max: usize,
    /// Seconds a frame may take besides its length's share
    /// ([`crate::limits::FRAME_SECONDS_MIN`]).
    pub frame_seconds_min: u64,
    /// Seconds a connection that proved a key may stay idle.
    pub idle_seconds: u32,
    /// Seconds a connection that proved no key may stay idle.
    pub idle_unproven_seconds: u32,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            connections_max: CONNECTIONS_MAX,
            connections_per_peer_max: CONNECTIONS_PER_PEER_MAX,
            workers_max: WORKERS_MAX,
            workers_unproven_max: WORKERS_UNPROVEN_MAX,
            buffered_bytes_max: BUFFERED_BYTES_MAX,
            buffered_bytes_per_peer_max: BUFFERED_BYTES_PER_PEER_MAX,
            frame_seconds_min: FRAME_SECONDS_MIN,
            idle_seconds: IDLE_SECONDS_MAX,
            idle_unproven_seconds: IDLE_UNPROVEN_SECONDS_MAX,
        }
    }
}

impl ServeLimits {
    /// The defaults, with at most as many connections as `open_files` descriptors leave
    /// room for (the rest are the daemon's files).
    pub fn for_open_files(open_files: u64) -> Self {
        let room = usize::try_from(open_files.saturating_sub(256)).unwrap_or(usize::MAX);
        let mut limits = Self::default();
        limits.connections_max = limits.connections_max.min(room.max(64));
        limits.connections_per_peer_max =
            limits.connections_per_peer_max.min(limits.connections_max);
        limits
    }
}

/// What the accept loop and its threads count, for `/metrics`.
#[derive(Debug, Default)]
pub struct ServeStats {
    open: AtomicU64,
    accepted: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
    frames_late: AtomicU64,
    idle_closed: AtomicU64,
    workers: AtomicU64,
    workers_busy: AtomicU64,
    buffered: AtomicU64,
}

impl ServeStats {
    /// `(name, value)` pairs; `connections_open`, `workers`, `workers_busy` and
    /// `buffered_bytes` are levels.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("connections_open", l(&self.open)),
            ("connections_accepted", l(&self.accepted)),
            ("connections_evicted", l(&self.evicted)),
            ("connections_refused_busy", l(&self.refused)),
            ("connections_frame_late", l(&self.frames_late)),
            ("connections_idle_closed", l(&self.idle_closed)),
            ("workers", l(&self.workers)),
            ("workers_busy", l(&self.workers_busy)),
            ("buffered_bytes", l(&self.buffered)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// Serves `listener` with `handler` until `shutdown` fires.
pub(crate) fn serve(
    listener: TcpListener,
    handler: Arc<Handler>,
    shutdown: &Shutdown,
    name: &str,
    limits: ServeLimits,
    stats: Arc<ServeStats>,
) {
    if let Ok(addr) = listener.local_addr() {
        shutdown.watch(addr);
    }
    // A shutdown that fired before the address was watched woke nothing: it must be seen
    // here (a daemon stopped while it was starting would otherwise serve on alone).
    if shutdown.is_set() {
        return;
    }
    // std listens with a backlog of 128: a burst of new connections past it waits a SYN
    // retry (a second or more). Listening again on a listening socket only raises it (the
    // kernel caps it at net.core.somaxconn).
    if let Err(e) = rustix::net::listen(&listener, LISTEN_BACKLOG) {
        tracing::warn!(error = %e, "could not raise the listen backlog");
    }
    let wake = match rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    ) {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            tracing::error!(error = %e, "cannot serve: no eventfd");
            return;
        }
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waker = wake.clone();
    let pool = pool::Pool::new(
        handler,
        shutdown.clone(),
        done_tx,
        Arc::new(move || {
            let _ = rustix::io::write(&*waker, &1u64.to_ne_bytes());
        }),
        stats.clone(),
        limits.workers_max,
        limits.workers_unproven_max,
        name,
    );
    match reactor::Reactor::new(listener, wake, pool, done_rx, limits, stats, name) {
        Ok(r) => r.run(&|| shutdown.is_set()),
        Err(e) => tracing::error!(error = %e, "cannot serve: epoll"),
    }
}

#[cfg(test)]
mod tests;
