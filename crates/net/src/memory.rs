//! An in-process network for whole-cluster tests without sockets: each address names a
//! handler (a daemon's frame handler), and every frame is encoded and decoded exactly as
//! on TCP.
//!
//! Called from an ordinary thread (a test, or a daemon's handler calling another daemon),
//! delivery is synchronous and in order: the handler runs on the caller's thread. Called
//! from a simulated *task* ([`MemoryNet::spawn`]: a client operation on a thread of its
//! own), a frame is an event on the simulated clock (`sched.rs`): it arrives after a
//! delay drawn from the seed, frames of one connection in order and frames of different
//! ones in any order, and may be lost (the connection resets), replayed by an attacker,
//! or refused by a peer that is down, restarted or cut off. Exactly one task runs at a
//! time, handed the turn by the scheduler ([`MemoryNet::run`]), which also runs every
//! handler where its frame arrives: a run from a seed repeats byte for byte.
//!
//! Faults placed by address work both ways: a peer that is down refuses connections
//! before the request is delivered; a lost answer is dropped *after* the peer handled the
//! request, which is the case a caller must not paper over by resending.

mod sched;

pub use sched::{Faults, Run, Task};

use crate::{read_frame, write_frame_parts, NetError};
use maat_proto::wire::FrameType;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A peer: one frame in, one frame out.
pub type Peer = Arc<dyn Fn(FrameType, &[u8]) -> (FrameType, Vec<u8>) + Send + Sync>;

/// One delivered request and its answer, as encoded frames (header and payload).
pub struct Exchange<'a> {
    /// The address the request went to.
    pub to: &'a str,
    /// The request frame.
    pub request: &'a [u8],
    /// The answer frame (also when the fault plan then loses it).
    pub answer: &'a [u8],
}

/// Sees every exchange, in order (for transcripts and digests).
pub type Observer = Arc<dyn Fn(&Exchange<'_>) + Send + Sync>;

#[derive(Default)]
struct State {
    peers: BTreeMap<String, Peer>,
    /// Bumped each time an address is attached: a restart closes every connection.
    incarnations: BTreeMap<String, u64>,
    down: BTreeSet<String>,
    /// Addresses cut off from everyone until a time.
    partitioned: BTreeMap<String, u64>,
    /// Addresses hung until a time ([`MemoryNet::hang`]).
    hung: BTreeMap<String, u64>,
    /// (party, address): calls the party makes to the address fail until a time.
    cuts: BTreeMap<(String, String), u64>,
    lose_answers: BTreeMap<String, u32>,
    observer: Option<Observer>,
    delivered: u64,
    /// The simulated clock (none: time stands at 0 for the scheduler).
    clock: Option<Arc<AtomicU64>>,
    /// The scheduler's generator state (seeded).
    rng: u64,
    faults: Faults,
    seq: u64,
    events: BTreeMap<(u64, u64), sched::Event>,
    links: BTreeMap<u64, sched::Link>,
    next_link: u64,
    tasks: BTreeMap<u64, sched::TaskState>,
    next_task: u64,
    /// The task that runs now (`None`: none does; the scheduler, or a test, runs).
    baton: Option<u64>,
}

/// The in-process network. Cloned handles share it.
#[derive(Clone, Default)]
pub struct MemoryNet {
    state: Arc<Mutex<State>>,
    /// Signalled whenever the turn changes hands.
    turn: Arc<Condvar>,
    /// The party calling through this handle ([`MemoryNet::as_party`]), for
    /// [`MemoryNet::cut`].
    party: Option<Arc<str>>,
}

fn refused(address: &str) -> NetError {
    NetError::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("{address}: down (in-memory network)"),
    ))
}

fn timed_out(address: &str) -> NetError {
    NetError::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{address}: no answer (hung, in-memory network)"),
    ))
}

impl MemoryNet {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `address` with `peer` (replacing what served it before: the connections
    /// tasks had to it are closed, as a restart closes a daemon's sockets).
    pub fn attach(&self, address: impl Into<String>, peer: Peer) {
        let address = address.into();
        let mut s = self.state();
        *s.incarnations.entry(address.clone()).or_insert(0) += 1;
        s.peers.insert(address, peer);
    }

    /// The simulated clock the scheduler moves (and every party reads).
    pub fn set_clock(&self, clock: Arc<AtomicU64>) {
        self.state().clock = Some(clock);
    }

    /// Seeds the scheduler's choices (delays, losses, which task runs next).
    pub fn set_seed(&self, seed: u64) {
        self.state().rng = seed;
    }

    /// The faults between tasks and peers from now on.
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// Cuts `address` off from everyone until the simulated time `until`: connections to
    /// it are refused and frames to or from it on open ones are lost.
    pub fn partition(&self, address: &str, until: u64) {
        self.state().partitioned.insert(address.to_string(), until);
    }

    /// Hangs `address` until the simulated time `until`, as a stopped process or a dead
    /// disk holding a daemon's threads: connections to it are taken, but every request
    /// sent to it goes unanswered, and its caller's wait ends with a timeout when the
    /// connection's `io_timeout` (as it was when the request was sent) has passed. Calls made
    /// outside a simulated task fail with the timeout at once. The daemon's own calls
    /// (check-ins) are not stopped: cut them with [`MemoryNet::cut`].
    pub fn hang(&self, address: &str, until: u64) {
        self.state().hung.insert(address.to_string(), until);
    }

    /// This network as seen by the daemon at `party`: calls made through the handle (and
    /// its clones: a daemon's handlers and periodic work) are the party's, so that
    /// [`MemoryNet::cut`] can fail them.
    pub fn as_party(&self, party: &str) -> MemoryNet {
        MemoryNet {
            party: Some(party.into()),
            ..self.clone()
        }
    }

    /// Cuts the calls that `party` makes to `to` until the simulated time `until`, one
    /// way: `to` still reaches `party`, and everyone else reaches both (a daemon cut off
    /// from the MDS and not from clients). Calls between daemons are synchronous (made
    /// from handlers and periodic work), so a cut call is refused before delivery.
    pub fn cut(&self, party: &str, to: &str, until: u64) {
        self.state()
            .cuts
            .insert((party.to_string(), to.to_string()), until);
    }

    /// Whether some of `party`'s calls are cut now ([`MemoryNet::cut`]).
    pub fn is_cut(&self, party: &str) -> bool {
        let s = self.state();
        let now = s
            .clock
            .as_ref()
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::SeqCst));
        s.cuts
            .iter()
            .any(|((p, _), until)| p == party && now < *until)
    }

    /// Whether the caller is a simulated task.
    pub fn in_task(&self) -> bool {
        sched::current_task(self).is_some()
    }

    /// Stops serving `address` (connections to it are refused until it is attached
    /// again).
    pub fn detach(&self, address: &str) {
        self.state().peers.remove(address);
    }

    /// Takes `address` down (connections refused before delivery) or brings it back.
    pub fn set_down(&self, address: &str, down: bool) {
        let mut s = self.state();
        if down {
            s.down.insert(address.to_string());
        } else {
            s.down.remove(address);
        }
    }

    /// Drops the answers to the next `count` requests delivered to `address` (each request
    /// is handled; its caller sees a reset connection).
    pub fn lose_answers(&self, address: &str, count: u32) {
        self.state().lose_answers.insert(address.to_string(), count);
    }

    /// Calls `observer` with every exchange from now on.
    pub fn observe(&self, observer: Observer) {
        self.state().observer = Some(observer);
    }

    /// Requests delivered so far.
    pub fn delivered(&self) -> u64 {
        self.state().delivered
    }

    /// Delivers one encoded request frame to `address`; returns the encoded answer frame
    /// (`None`: the peer handled the request and its answer was lost), or why the request
    /// was not delivered.
    pub(crate) fn deliver(&self, address: &str, frame: &[u8]) -> Result<Option<Vec<u8>>, NetError> {
        let peer = {
            let s = self.state();
            let now = s
                .clock
                .as_ref()
                .map_or(0, |c| c.load(std::sync::atomic::Ordering::SeqCst));
            let cut = self.party.as_ref().is_some_and(|party| {
                s.cuts
                    .get(&(party.to_string(), address.to_string()))
                    .is_some_and(|until| now < *until)
            });
            if cut || s.down.contains(address) || s.cut_off(address, now) {
                return Err(refused(address));
            }
            if s.hung_now(address, now) {
                return Err(timed_out(address));
            }
            s.peers
                .get(address)
                .cloned()
                .ok_or_else(|| refused(address))?
        };
        // The peer side: the frame is read exactly as a daemon reads it from a socket, and
        // the handler runs without the network's lock (it may call other peers).
        let (head, payload) = read_frame(&mut Cursor::new(frame))?;
        let (answer_type, answer_payload) = peer(head.frame_type, &payload);
        let mut answer = Vec::with_capacity(answer_payload.len() + 12);
        write_frame_parts(&mut answer, head.answer(answer_type), &[&answer_payload])?;
        let (observer, lost) = {
            let mut s = self.state();
            s.delivered += 1;
            let lost = match s.lose_answers.get_mut(address) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            };
            (s.observer.clone(), lost)
        };
        if let Some(observe) = observer {
            observe(&Exchange {
                to: address,
                request: frame,
                answer: &answer,
            });
        }
        Ok((!lost).then_some(answer))
    }
}

impl std::fmt::Debug for MemoryNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("MemoryNet")
            .field("peers", &s.peers.keys().collect::<Vec<_>>())
            .field("down", &s.down)
            .field("delivered", &s.delivered)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Connection, Network};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A peer that answers `(frame type, payload reversed)` and counts its calls.
    fn reverser(calls: Arc<AtomicU32>) -> Peer {
        Arc::new(move |t, p| {
            calls.fetch_add(1, Ordering::SeqCst);
            (t, p.iter().rev().copied().collect())
        })
    }

    #[test]
    fn a_request_is_framed_handled_and_answered_and_the_observer_sees_both_frames() {
        let net = MemoryNet::new();
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("a", reverser(calls.clone()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        net.observe(Arc::new(move |x: &Exchange<'_>| {
            s.lock()
                .unwrap()
                .push((x.to.to_string(), x.request.len(), x.answer.len()))
        }));
        let mut c = Network::Memory(net.clone()).connect("a");
        let (t, answer) = c.call_parts(FrameType::Plain, &[b"ab", b"c"]).unwrap();
        assert_eq!((t, answer.as_slice()), (FrameType::Plain, &b"cba"[..]));
        // Header (12 bytes, version 2) and payload, both ways.
        assert_eq!(*seen.lock().unwrap(), vec![("a".to_string(), 15, 15)]);
        assert_eq!((calls.load(Ordering::SeqCst), net.delivered()), (1, 1));
    }

    #[test]
    fn a_peer_that_is_down_or_unknown_gets_nothing() {
        let net = MemoryNet::new();
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("a", reverser(calls.clone()));
        net.set_down("a", true);
        let mut c = Connection::in_memory("a", net.clone());
        let e = c.call(FrameType::Plain, b"x").unwrap_err();
        assert!(
            matches!(e, NetError::Io(ref io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
        );
        assert!(Connection::in_memory("b", net.clone())
            .call(FrameType::Plain, b"x")
            .is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        net.set_down("a", false);
        assert_eq!(c.call(FrameType::Plain, b"xy").unwrap().1, b"yx");
    }

    #[test]
    fn a_hung_peer_handles_nothing_and_its_caller_times_out_until_it_resumes() {
        let net = MemoryNet::new();
        let clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
        net.set_clock(clock.clone());
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("a", reverser(calls.clone()));
        net.hang("a", 100);
        let mut c = Connection::in_memory("a", net.clone());
        let e = c.call(FrameType::Plain, b"x").unwrap_err();
        assert!(
            matches!(e, NetError::Io(ref io) if io.kind() == std::io::ErrorKind::TimedOut),
            "{e:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        clock.store(100, Ordering::SeqCst);
        assert_eq!(c.call(FrameType::Plain, b"xy").unwrap().1, b"yx");
    }

    #[test]
    fn a_lost_answer_follows_a_handled_request_and_the_connection_goes_on() {
        let net = MemoryNet::new();
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("a", reverser(calls.clone()));
        net.lose_answers("a", 1);
        let mut c = Connection::in_memory("a", net.clone());
        let e = c.call(FrameType::Plain, b"write").unwrap_err();
        assert!(
            matches!(e, NetError::Io(ref io) if io.kind() == std::io::ErrorKind::ConnectionReset)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "handled once, not resent");
        assert_eq!(c.call(FrameType::Plain, b"ok").unwrap().1, b"ko");
        assert!(
            c.receive().is_err(),
            "nothing sent: an error, not a stale answer"
        );
    }

    #[test]
    fn a_peer_may_call_another_peer_while_handling() {
        let net = MemoryNet::new();
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("inner", reverser(calls.clone()));
        let n = net.clone();
        net.attach(
            "outer",
            Arc::new(move |t, p| {
                let mut c = Connection::in_memory("inner", n.clone());
                c.call(t, p).unwrap()
            }),
        );
        let mut c = Connection::in_memory("outer", net.clone());
        assert_eq!(c.call(FrameType::Plain, b"abc").unwrap().1, b"cba");
        assert_eq!(net.delivered(), 2);
    }

    #[test]
    fn a_cut_fails_one_partys_calls_one_way_until_its_time() {
        let net = MemoryNet::new();
        let clock = Arc::new(AtomicU64::new(100));
        net.set_clock(clock.clone());
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("mds", reverser(calls.clone()));
        net.attach("osd-1", reverser(calls.clone()));
        let osd = net.as_party("osd-1");
        net.cut("osd-1", "mds", 200);
        assert!(Connection::in_memory("mds", osd.clone())
            .call(FrameType::Plain, b"x")
            .is_err());
        // The other way, and everyone else, still get through.
        let as_mds = net.as_party("mds");
        assert!(Connection::in_memory("osd-1", as_mds)
            .call(FrameType::Plain, b"x")
            .is_ok());
        assert!(Connection::in_memory("mds", net.clone())
            .call(FrameType::Plain, b"x")
            .is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        clock.store(200, Ordering::SeqCst);
        assert!(Connection::in_memory("mds", osd)
            .call(FrameType::Plain, b"x")
            .is_ok());
    }

    #[test]
    fn a_frame_too_large_is_refused_before_any_peer_sees_it() {
        let net = MemoryNet::new();
        let calls = Arc::new(AtomicU32::new(0));
        net.attach("a", reverser(calls.clone()));
        let big = vec![0u8; maat_proto::wire::FRAME_PAYLOAD_BYTES_MAX + 1];
        assert!(Connection::in_memory("a", net)
            .call(FrameType::Plain, &big)
            .is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}
