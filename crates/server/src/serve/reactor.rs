//! The accept loop. One thread holds every connection that no thread is serving (idle,
//! or with a frame arriving slowly) in an epoll set, at the cost of a table entry and its
//! socket; it reads slow frames itself, under their deadlines and the memory budgets, and
//! hands a connection to the pool once a whole frame is here. It admits every new
//! connection while it can: at a limit (all connections, or one address's) it closes the
//! connection idle longest for the new one, one that proved no key first.

use super::conn::{extent, frame_allowance, Conn, Extent};
use super::pool::{Done, Job, Pool};
use super::turn::{Turn, READ_TIMEOUT};
use super::{ServeLimits, ServeStats};
use maat_net::write_frame;
use maat_proto::msg::{ErrorCode, WireError};
use maat_proto::wire::FrameHead;
use rustix::event::epoll;
use rustix::fd::OwnedFd;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: u64 = u64::MAX;
const WAKER: u64 = u64::MAX - 1;
/// How often deadlines and idle limits are checked (and shutdown, when nothing wakes it).
const SWEEP: Duration = Duration::from_millis(250);
/// Most bytes read from one connection per readiness event.
const READ_CHUNK: usize = 64 * 1024;

/// Whether a connection has proven a key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Unproven,
    Proven,
}

impl Class {
    fn of(proven: bool) -> Self {
        if proven {
            Class::Proven
        } else {
            Class::Unproven
        }
    }
}

struct Entry {
    /// The connection, while no thread serves it.
    conn: Option<Conn>,
    peer: IpAddr,
    /// When it last had a frame answered (or was accepted), and that moment's order.
    since: Instant,
    seq: u64,
    class: Class,
    /// When the frame being read must be whole.
    deadline: Option<Instant>,
    /// Bytes of its buffer counted against the budgets.
    buffered: usize,
    /// Not read for want of budget (taken out of the epoll set until some is freed).
    starved: bool,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// Connections in the loop (no thread serving them), by class, oldest first: `(order of
/// the moment they were last served or accepted, index)`.
#[derive(Default)]
struct Idle {
    unproven: BTreeSet<(u64, usize)>,
    proven: BTreeSet<(u64, usize)>,
}

impl Idle {
    fn of(&mut self, class: Class) -> &mut BTreeSet<(u64, usize)> {
        match class {
            Class::Unproven => &mut self.unproven,
            Class::Proven => &mut self.proven,
        }
    }

    /// The oldest, one that proved no key first.
    fn oldest(&self) -> Option<usize> {
        self.unproven
            .first()
            .or_else(|| self.proven.first())
            .map(|(_, index)| *index)
    }

    fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.unproven
            .iter()
            .chain(self.proven.iter())
            .map(|(_, index)| *index)
    }
}

#[derive(Default)]
struct PeerState {
    conns: usize,
    buffered: usize,
    /// Its connections in the loop.
    idle: Idle,
}

pub(super) struct Reactor {
    epoll: OwnedFd,
    listener: TcpListener,
    wake: Arc<OwnedFd>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    peers: HashMap<IpAddr, PeerState>,
    /// Every connection in the loop.
    idle: Idle,
    open: usize,
    buffered: usize,
    seq: u64,
    starved: Vec<usize>,
    pool: Pool,
    done: Receiver<Done>,
    limits: ServeLimits,
    stats: Arc<ServeStats>,
    name: String,
    scratch: Vec<u8>,
    /// Connections closed for new ones since the last sweep (logged there, counted).
    evicted_unlogged: u64,
}

fn token(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | index as u64
}

fn untoken(token: u64) -> (usize, u32) {
    ((token & 0xffff_ffff) as usize, (token >> 32) as u32)
}

fn readable() -> epoll::EventFlags {
    epoll::EventFlags::IN | epoll::EventFlags::RDHUP
}

impl Reactor {
    /// A loop over `listener` (made non-blocking), woken by `wake` when the pool hands a
    /// connection back on `done`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        listener: TcpListener,
        wake: Arc<OwnedFd>,
        pool: Pool,
        done: Receiver<Done>,
        limits: ServeLimits,
        stats: Arc<ServeStats>,
        name: &str,
    ) -> std::io::Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        listener.set_nonblocking(true)?;
        epoll::add(
            &epoll,
            &listener,
            epoll::EventData::new_u64(LISTENER),
            epoll::EventFlags::IN,
        )?;
        epoll::add(
            &epoll,
            &*wake,
            epoll::EventData::new_u64(WAKER),
            epoll::EventFlags::IN,
        )?;
        Ok(Reactor {
            epoll,
            listener,
            wake,
            slots: Vec::new(),
            free: Vec::new(),
            peers: HashMap::new(),
            idle: Idle::default(),
            open: 0,
            buffered: 0,
            seq: 0,
            starved: Vec::new(),
            pool,
            done,
            limits,
            stats,
            name: name.to_string(),
            scratch: vec![0u8; READ_CHUNK],
            evicted_unlogged: 0,
        })
    }

    /// Serves until `stopped` says so; then closes what is idle and lets the threads
    /// finish what they serve (bounded).
    pub(super) fn run(mut self, stopped: &dyn Fn() -> bool) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut next_sweep = Instant::now() + SWEEP;
        while !stopped() {
            events.clear();
            let wait = next_sweep.saturating_duration_since(Instant::now());
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "epoll_wait failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            for event in &events {
                match event.data.u64() {
                    LISTENER => self.accept_all(),
                    WAKER => {
                        let mut count = [0u8; 8];
                        let _ = rustix::io::read(&*self.wake, &mut count);
                    }
                    t => self.read(t, event.flags),
                }
            }
            self.take_back();
            let now = Instant::now();
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP;
            }
        }
        let open: Vec<usize> = self.idle.all().collect();
        for index in open {
            self.close(index);
        }
        self.pool.stop(Duration::from_secs(2));
    }

    fn entry(&mut self, index: usize) -> Option<&mut Entry> {
        self.slots.get_mut(index).and_then(|s| s.entry.as_mut())
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => self.admit(stream, from),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, most likely: the connections waiting stay
                    // queued in the kernel until some close.
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    /// Takes a new connection in, making room for it when a limit is reached.
    fn admit(&mut self, stream: TcpStream, from: SocketAddr) {
        let peer = from.ip();
        let peer_conns = self.peers.get(&peer).map_or(0, |p| p.conns);
        if peer_conns >= self.limits.connections_per_peer_max && !self.evict(Some(peer)) {
            return self.refuse(
                stream,
                format!(
                    "{}: {} connections open from {peer}, all busy; try again later",
                    self.name, self.limits.connections_per_peer_max
                ),
            );
        }
        if self.open >= self.limits.connections_max && !self.evict(None) {
            return self.refuse(
                stream,
                format!(
                    "{}: {} connections open, all busy; try again later",
                    self.name, self.limits.connections_max
                ),
            );
        }
        let configured = maat_net::configure(&stream)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                stream
                    .set_read_timeout(Some(READ_TIMEOUT))
                    .map_err(|e| e.to_string())
            });
        if configured.is_err() {
            return;
        }
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                generation: 0,
                entry: None,
            });
            self.slots.len() - 1
        });
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        slot.generation = slot.generation.wrapping_add(1);
        let t = token(index, slot.generation);
        if let Err(e) = epoll::add(
            &self.epoll,
            &stream,
            epoll::EventData::new_u64(t),
            readable(),
        ) {
            tracing::warn!(error = %e, "could not watch a connection");
            self.free.push(index);
            return;
        }
        self.seq += 1;
        slot.entry = Some(Entry {
            conn: Some(Conn::new(stream, from)),
            peer,
            since: Instant::now(),
            seq: self.seq,
            class: Class::Unproven,
            deadline: None,
            buffered: 0,
            starved: false,
        });
        self.open += 1;
        let state = self.peers.entry(peer).or_default();
        state.conns += 1;
        state.idle.of(Class::Unproven).insert((self.seq, index));
        self.idle.of(Class::Unproven).insert((self.seq, index));
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        self.stats.open.store(self.open as u64, Ordering::Relaxed);
    }

    /// Closes the connection idle longest (of `peer`, or of anyone), one that proved no key
    /// first; false when every one is being served.
    fn evict(&mut self, peer: Option<IpAddr>) -> bool {
        let victim = match peer {
            Some(p) => self.peers.get(&p).and_then(|state| state.idle.oldest()),
            None => self.idle.oldest(),
        };
        let Some(index) = victim else {
            return false;
        };
        self.evicted_unlogged += 1;
        // Counted before the close, so that whoever sees the connection closed also sees
        // it counted (a test once read the counter between the two).
        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        self.close(index);
        true
    }

    /// Answers a connection that cannot be admitted with `Busy` and its reason, without
    /// waiting for the peer.
    fn refuse(&mut self, mut stream: TcpStream, reason: String) {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nonblocking(true);
        let (t, answer) = crate::refusal_frame(&WireError::new(ErrorCode::Busy, reason));
        let _ = write_frame(&mut stream, FrameHead::v1(t), &answer);
    }

    /// Bytes `peer` may still have buffered here.
    fn room(&self, peer: IpAddr) -> usize {
        let peer_used = self.peers.get(&peer).map_or(0, |p| p.buffered);
        READ_CHUNK
            .min(self.limits.buffered_bytes_max.saturating_sub(self.buffered))
            .min(
                self.limits
                    .buffered_bytes_per_peer_max
                    .saturating_sub(peer_used),
            )
    }

    /// Reads what a connection in the loop sent; hands it to a thread once a frame is
    /// whole (or its header is bad: the thread answers and closes).
    fn read(&mut self, t: u64, flags: epoll::EventFlags) {
        let (index, generation) = untoken(t);
        let Some(slot) = self.slots.get(index) else {
            return;
        };
        if slot.generation != generation {
            return;
        }
        let Some(entry) = slot.entry.as_ref() else {
            return;
        };
        if entry.conn.is_none() {
            return;
        }
        if entry.starved {
            // Watched only for the peer's end: it holds its bytes until it goes.
            if flags.intersects(
                epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR,
            ) {
                self.close(index);
            }
            return;
        }
        let peer = entry.peer;
        let room = self.room(peer);
        if room == 0 {
            self.starve(index);
            return;
        }
        let Some(conn) = self
            .slots
            .get_mut(index)
            .and_then(|s| s.entry.as_mut())
            .and_then(|e| e.conn.as_mut())
        else {
            return;
        };
        let buf = self.scratch.get_mut(..room).unwrap_or_default();
        let got = rustix::net::recv(&conn.stream, buf, rustix::net::RecvFlags::DONTWAIT);
        let n = match got {
            Ok((0, _)) => return self.close(index),
            Ok((n, _)) => n,
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => return,
            Err(_) => return self.close(index),
        };
        conn.buf
            .extend_from_slice(self.scratch.get(..n).unwrap_or_default());
        let now = Instant::now();
        conn.frame_begun(now);
        let began = conn.frame_began.unwrap_or(now);
        let found = extent(&conn.buf);
        self.buffered += n;
        if let Some(p) = self.peers.get_mut(&peer) {
            p.buffered += n;
        }
        let seconds_min = self.limits.frame_seconds_min;
        let Some(entry) = self.entry(index) else {
            return;
        };
        entry.buffered += n;
        match found {
            Ok(Extent::Partial { total }) => {
                entry.deadline = Some(began + frame_allowance(seconds_min, total));
            }
            Ok(Extent::Whole { .. }) | Err(_) => self.dispatch(index),
        }
    }

    /// Stops reading a connection until budget is freed (it stays watched for its end).
    fn starve(&mut self, index: usize) {
        let t = self
            .slots
            .get(index)
            .map_or(0, |s| token(index, s.generation));
        let Some(e) = self.slots.get_mut(index).and_then(|s| s.entry.as_mut()) else {
            return;
        };
        if let Some(conn) = &e.conn {
            let _ = epoll::modify(
                &self.epoll,
                &conn.stream,
                epoll::EventData::new_u64(t),
                epoll::EventFlags::RDHUP,
            );
        }
        e.starved = true;
        self.starved.push(index);
    }

    /// Gives `n` buffered bytes of `peer` back, and lets starved connections read again.
    fn release(&mut self, peer: IpAddr, n: usize) {
        self.buffered = self.buffered.saturating_sub(n);
        if let Some(p) = self.peers.get_mut(&peer) {
            p.buffered = p.buffered.saturating_sub(n);
        }
        if n == 0 || self.starved.is_empty() {
            return;
        }
        for index in std::mem::take(&mut self.starved) {
            let Some(slot) = self.slots.get_mut(index) else {
                continue;
            };
            let t = token(index, slot.generation);
            let Some(e) = slot.entry.as_mut() else {
                continue;
            };
            if !e.starved {
                continue;
            }
            e.starved = false;
            if let Some(conn) = &e.conn {
                let _ = epoll::modify(
                    &self.epoll,
                    &conn.stream,
                    epoll::EventData::new_u64(t),
                    readable(),
                );
            }
        }
    }

    /// Takes a connection out of the loop and gives it to a thread.
    fn dispatch(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let t = token(index, slot.generation);
        let Some(e) = slot.entry.as_mut() else {
            return;
        };
        let Some(conn) = e.conn.take() else {
            return;
        };
        let _ = epoll::delete(&self.epoll, &conn.stream);
        e.starved = false;
        e.deadline = None;
        let (peer, n, key, class) = (e.peer, e.buffered, (e.seq, index), e.class);
        e.buffered = 0;
        self.idle.of(class).remove(&key);
        if let Some(p) = self.peers.get_mut(&peer) {
            p.idle.of(class).remove(&key);
        }
        self.release(peer, n);
        self.pool.submit(Job { token: t, conn });
    }

    /// Takes back the connections threads are done with.
    fn take_back(&mut self) {
        while let Ok(done) = self.done.try_recv() {
            let (index, generation) = untoken(done.token);
            if self.slots.get(index).map(|s| s.generation) != Some(generation) {
                continue;
            }
            if done.turn == Turn::Closed {
                self.close(index);
                continue;
            }
            let Done { conn, turn, .. } = done;
            let now = Instant::now();
            self.seq += 1;
            let seq = self.seq;
            let class = Class::of(conn.proven);
            let held = conn.buf.len();
            let deadline = (turn == Turn::Slow).then(|| {
                let total = match extent(&conn.buf) {
                    Ok(Extent::Partial { total }) => total,
                    _ => None,
                };
                conn.frame_began.unwrap_or(now)
                    + frame_allowance(self.limits.frame_seconds_min, total)
            });
            if let Err(e) = epoll::add(
                &self.epoll,
                &conn.stream,
                epoll::EventData::new_u64(done.token),
                readable(),
            ) {
                tracing::warn!(error = %e, "could not watch a connection");
                self.close(index);
                continue;
            }
            let Some(e) = self.entry(index) else {
                continue;
            };
            let peer = e.peer;
            if turn == Turn::Idle {
                e.since = now;
            }
            e.seq = seq;
            e.class = class;
            e.deadline = deadline;
            e.buffered = held;
            e.conn = Some(conn);
            let key = (seq, index);
            self.idle.of(class).insert(key);
            self.buffered += held;
            if let Some(p) = self.peers.get_mut(&peer) {
                p.idle.of(class).insert(key);
                p.buffered += held;
            }
        }
    }

    /// Closes a connection and forgets it.
    fn close(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let Some(e) = slot.entry.take() else {
            return;
        };
        if let Some(conn) = &e.conn {
            let _ = epoll::delete(&self.epoll, &conn.stream);
        }
        let key = (e.seq, index);
        self.idle.of(e.class).remove(&key);
        self.free.push(index);
        self.open = self.open.saturating_sub(1);
        if let Some(p) = self.peers.get_mut(&e.peer) {
            p.idle.of(e.class).remove(&key);
            p.conns = p.conns.saturating_sub(1);
        }
        self.release(e.peer, e.buffered);
        if self.peers.get(&e.peer).is_some_and(|p| p.conns == 0) {
            self.peers.remove(&e.peer);
        }
        self.stats.open.store(self.open as u64, Ordering::Relaxed);
        self.stats
            .buffered
            .store(self.buffered as u64, Ordering::Relaxed);
    }

    /// Closes connections whose frame is late or that have been idle too long.
    fn sweep(&mut self, now: Instant) {
        let mut late = Vec::new();
        let mut idle = Vec::new();
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(e) = &slot.entry else { continue };
            let Some(conn) = &e.conn else { continue };
            if e.deadline.is_some_and(|d| now >= d) {
                late.push((index, conn.from));
            } else if conn.buf.is_empty() {
                let limit = match e.class {
                    Class::Proven => self.limits.idle_seconds,
                    Class::Unproven => self.limits.idle_unproven_seconds,
                };
                if now.duration_since(e.since) >= Duration::from_secs(u64::from(limit)) {
                    idle.push(index);
                }
            }
        }
        // One line a sweep, not one a connection: a flood must not become a log flood.
        if let Some((_, from)) = late.first() {
            tracing::info!(peer = %from, count = late.len(), "closed connections whose frame did not arrive whole in time (one peer named)");
        }
        if self.evicted_unlogged > 0 {
            tracing::info!(
                count = self.evicted_unlogged,
                "closed the connections idle longest for new ones"
            );
            self.evicted_unlogged = 0;
        }
        for (index, _) in late {
            self.stats.frames_late.fetch_add(1, Ordering::Relaxed);
            self.close(index);
        }
        for index in idle {
            self.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
            self.close(index);
        }
        self.stats
            .buffered
            .store(self.buffered as u64, Ordering::Relaxed);
    }
}
