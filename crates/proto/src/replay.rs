//! SPEC T7's replay window: what a receiver remembers of the requests it accepted, so that
//! none is accepted twice, and the sequenced nonces a sender uses so that it remembers
//! little.
//!
//! A request nonce is 16 bytes: a *stream* (the first 8) and a *counter* (the last 8, big
//! endian). A sender that seals its requests in order on one connection gives that
//! connection a random stream and counts 1, 2, 3, … ([`NonceStream`]); the receiver keeps,
//! per (session, stream), the highest counter accepted and which of the 63 below it were
//! accepted. Requests on one connection reach the receiver in the order they were sealed,
//! so a connection costs the receiver one entry however many requests it carries. A sender
//! that draws whole nonces at random (every sender before this layout, and the daemons'
//! own rare requests) makes a stream per request: one entry per request, as a set of
//! nonces would. Both are safe, because the rule never depends on how the nonce was made:
//! a (session, stream, counter) is accepted at most once while its timestamp is fresh.
//!
//! Before nonce streams the window kept every (session, nonce) for 30 s, at most 65,536
//! per session: a client sending more than about 2,200 requests a second to one daemon
//! was refused as busy within half a minute (`docs/PERFORMANCE.md`, "Replay window by
//! nonce stream").

use crate::limits::{
    NONCE_BYTES, REPLAY_ENTRIES_MAX, REPLAY_ENTRIES_PER_SESSION_MAX, SESSION_ID_BYTES,
};
use crate::msg::ErrorCode;
use crate::wire::{FUTURE_SKEW_MILLIS, REPLAY_WINDOW_MILLIS};
use crate::UnixMillis;
use std::collections::{HashMap, VecDeque};

/// Bytes of a nonce that name its stream.
pub const STREAM_BYTES: usize = 8;

/// How far behind its stream's highest counter a request may arrive and still be
/// accepted (if unseen): requests on one connection arrive in order, so this only
/// allows for a receiver that handles one connection's requests out of order.
pub const STREAM_REORDER_MAX: u64 = 64;

/// Why the replay window refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Outside the window, or older than the receiver's boot.
    Stale,
    /// Seen before inside the window.
    Replayed,
    /// The window is full of live entries.
    Busy,
    /// Dated inside the receiver's first moments after start (see [`ReplayWindow`]):
    /// refused as not ready, and worth retrying after [`FUTURE_SKEW_MILLIS`].
    JustStarted,
    /// Its counter is [`STREAM_REORDER_MAX`] or more behind the highest of its stream
    /// (a replay, or a request held back that long: sent again, it gets a new counter).
    Behind,
}

impl Freshness {
    /// The refusal a receiver answers with: its code and detail.
    pub fn refusal(self) -> (ErrorCode, &'static str) {
        match self {
            Freshness::Stale => (ErrorCode::StaleRequest, "check the clock"),
            Freshness::Replayed => (ErrorCode::ReplayedRequest, ""),
            Freshness::Busy => (ErrorCode::Busy, "replay window full"),
            Freshness::JustStarted => (
                ErrorCode::NotReady,
                "just started: requests dated before its start + 500 ms wait; retry",
            ),
            Freshness::Behind => (
                ErrorCode::StaleRequest,
                "nonce counter too far behind its stream's; send again",
            ),
        }
    }
}

/// A sender's sequenced nonces: one random stream, counted from 1. Use one per
/// connection (requests sealed in the order they are sent), never one across
/// connections or threads that race.
#[derive(Debug, Clone)]
pub struct NonceStream {
    stream: [u8; STREAM_BYTES],
    next: u64,
}

impl NonceStream {
    /// A stream named by `stream` (random: two senders of one session must not share
    /// one).
    pub fn new(stream: [u8; STREAM_BYTES]) -> Self {
        Self { stream, next: 1 }
    }

    /// The next request nonce.
    pub fn next_nonce(&mut self) -> [u8; NONCE_BYTES] {
        let mut nonce = [0u8; NONCE_BYTES];
        let (stream, counter) = nonce.split_at_mut(STREAM_BYTES);
        stream.copy_from_slice(&self.stream);
        counter.copy_from_slice(&self.next.to_be_bytes());
        // 2^64 requests never happen; were they to, the repeated nonce is refused.
        self.next = self.next.saturating_add(1);
        nonce
    }
}

/// A nonce's stream and counter.
fn split(nonce: &[u8; NONCE_BYTES]) -> ([u8; STREAM_BYTES], u64) {
    let mut stream = [0u8; STREAM_BYTES];
    let mut counter = [0u8; 8];
    let (s, c) = nonce.split_at(STREAM_BYTES);
    stream.copy_from_slice(s);
    counter.copy_from_slice(c);
    (stream, u64::from_be_bytes(counter))
}

type StreamKey = ([u8; SESSION_ID_BYTES], [u8; STREAM_BYTES]);

/// What was accepted on one stream.
#[derive(Debug)]
struct Seen {
    /// The highest counter accepted.
    highest: u64,
    /// Bit `i` set: counter `highest - i` was accepted (bit 0 is `highest` itself).
    below: u64,
    /// The newest timestamp accepted: once it is out of the window, so is every request
    /// the stream carried, and the stream is forgotten.
    newest: UnixMillis,
}

impl Seen {
    fn accept(&mut self, counter: u64) -> Result<(), Freshness> {
        if counter > self.highest {
            let ahead = counter - self.highest;
            self.below = if ahead >= STREAM_REORDER_MAX {
                0
            } else {
                self.below << ahead
            };
            self.below |= 1;
            self.highest = counter;
            return Ok(());
        }
        let back = self.highest - counter;
        if back >= STREAM_REORDER_MAX {
            return Err(Freshness::Behind);
        }
        let bit = 1u64 << back;
        if self.below & bit != 0 {
            return Err(Freshness::Replayed);
        }
        self.below |= bit;
        Ok(())
    }
}

/// SPEC T7: timestamps plus a window of nonce streams.
///
/// A request is fresh when its timestamp is at most [`REPLAY_WINDOW_MILLIS`] old, at most
/// [`FUTURE_SKEW_MILLIS`] ahead of `now`, not earlier than `boot + FUTURE_SKEW_MILLIS`,
/// and its (session, stream, counter) was not accepted before (module docs). The boot
/// rules make an in-memory window safe across restarts: a request captured at time `t`
/// before a restart at `b > t` has a timestamp `≤ t + FUTURE_SKEW < b + FUTURE_SKEW`, so it
/// is refused as stale afterwards and nothing needs to be persisted. A stream is forgotten
/// once the newest timestamp it accepted is out of the window (then so is every request it
/// carried); "out" is judged against the latest `now` seen, so a clock that steps back
/// cannot make forgotten requests acceptable again.
#[derive(Debug)]
pub struct ReplayWindow {
    boot: UnixMillis,
    window_millis: u64,
    streams: HashMap<StreamKey, Seen>,
    /// Every remembered stream once, in about the order their newest timestamps fall out
    /// of the window (a stream still in use when it comes up goes to the back).
    order: VecDeque<(UnixMillis, StreamKey)>,
    per_session: HashMap<[u8; SESSION_ID_BYTES], u32>,
    latest_now: UnixMillis,
}

impl ReplayWindow {
    /// A window for a receiver that booted at `boot`.
    pub fn new(boot: UnixMillis) -> Self {
        Self {
            boot,
            window_millis: REPLAY_WINDOW_MILLIS,
            streams: HashMap::new(),
            order: VecDeque::new(),
            per_session: HashMap::new(),
            latest_now: boot,
        }
    }

    /// Checks only the timestamp (cheap; done before the MAC).
    pub fn check_time(&self, timestamp: UnixMillis, now: UnixMillis) -> Result<(), Freshness> {
        // "Old" is judged against the latest time seen, so a clock stepping back cannot
        // bring a pruned nonce's timestamp back into the window.
        let too_old = now.max(self.latest_now).0.saturating_sub(timestamp.0) > self.window_millis;
        let too_new = timestamp.0 > now.0.saturating_add(FUTURE_SKEW_MILLIS);
        let before_boot = timestamp.0 < self.boot.0.saturating_add(FUTURE_SKEW_MILLIS);
        if too_old || too_new {
            return Err(Freshness::Stale);
        }
        if before_boot {
            // While the receiver is younger than FUTURE_SKEW_MILLIS even fresh requests
            // fall here (it cannot tell them from replays captured before its restart):
            // "not ready, retry". Later, such a timestamp can only be old: stale.
            if now.0 < self.boot.0.saturating_add(FUTURE_SKEW_MILLIS) {
                return Err(Freshness::JustStarted);
            }
            return Err(Freshness::Stale);
        }
        Ok(())
    }

    /// Checks the timestamp and records the nonce (done after the MAC verified, so
    /// forged requests cannot fill the window).
    pub fn check_and_record(
        &mut self,
        session_id: &[u8; SESSION_ID_BYTES],
        nonce: &[u8; NONCE_BYTES],
        timestamp: UnixMillis,
        now: UnixMillis,
    ) -> Result<(), Freshness> {
        self.check_time(timestamp, now)?;
        self.prune(now);
        let (stream, counter) = split(nonce);
        let key = (*session_id, stream);
        if let Some(seen) = self.streams.get_mut(&key) {
            seen.accept(counter)?;
            seen.newest = seen.newest.max(timestamp);
            return Ok(());
        }
        let mine = self.per_session.get(session_id).copied().unwrap_or(0);
        if self.streams.len() >= REPLAY_ENTRIES_MAX || mine >= REPLAY_ENTRIES_PER_SESSION_MAX {
            return Err(Freshness::Busy);
        }
        self.per_session.insert(*session_id, mine + 1);
        self.streams.insert(
            key,
            Seen {
                highest: counter,
                below: 1,
                newest: timestamp,
            },
        );
        self.order.push_back((timestamp, key));
        Ok(())
    }

    fn prune(&mut self, now: UnixMillis) {
        // A stream is forgotten once its newest timestamp could no longer pass
        // `check_time`. The queue holds each stream once, in about the order its entry
        // ages out; one that accepted newer requests since it was queued goes to the
        // back, and one queued out of order is kept a little longer, never dropped early.
        self.latest_now = self.latest_now.max(now);
        let horizon = self.latest_now.0.saturating_sub(self.window_millis);
        while let Some((queued, key)) = self.order.front().copied() {
            if queued.0 >= horizon {
                break;
            }
            self.order.pop_front();
            match self.streams.get(&key) {
                Some(seen) if seen.newest.0 >= horizon => {
                    self.order.push_back((seen.newest, key));
                }
                Some(_) => {
                    self.streams.remove(&key);
                    if let Some(n) = self.per_session.get_mut(&key.0) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            self.per_session.remove(&key.0);
                        }
                    }
                }
                None => {}
            }
        }
    }

    /// Number of remembered streams (a stream per connection of a sender that sequences
    /// its nonces, a stream per request of one that does not), as of the last request:
    /// streams are forgotten when a request comes, so an idle receiver's figure stays.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

#[cfg(test)]
mod tests;
