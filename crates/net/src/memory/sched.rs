//! The scheduler of the in-process network: simulated tasks (client operations and their
//! lanes, each on a thread of its own, exactly one running at a time), frames in flight
//! as events on the simulated clock, and the faults between them. See the parent module.

use super::{refused, MemoryNet, State};
use crate::NetError;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long (real time) the scheduler waits for a task it handed the turn to before it
/// calls it stuck: the task is blocked on something the simulator does not know about
/// (a lock held by a task that is waiting on the network, say).
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// How long (simulated) a sender waits before it sees a connection whose frame was
/// dropped as reset: TCP's retransmissions give up after about this long.
pub(super) const RESET_AFTER_MILLIS: u64 = 10_000;

/// Faults between tasks and the daemons they call, drawn from the network's seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Each frame (request or answer) takes 0 to this many milliseconds to arrive;
    /// frames on one connection keep their order (TCP), frames on different ones do not.
    pub delay_max_ms: u64,
    /// Per thousand frames, how many are lost: the connection is reset, a lost request
    /// was never handled, a lost answer's request was.
    pub drop_per_mille: u32,
    /// Per thousand requests, how many an attacker on the path captures and sends again
    /// later, on a connection of its own (its answer goes nowhere).
    pub replay_per_mille: u32,
}

/// What a task waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Waiting {
    /// The turn (it can run).
    Turn,
    /// An answer on a link.
    Link(u64),
    /// Its timer.
    Timer,
    /// Its lanes to end.
    Lanes(BTreeSet<u64>),
}

#[derive(Debug)]
pub(super) struct TaskState {
    pub(super) name: String,
    /// `None`: done.
    pub(super) waiting: Option<Waiting>,
    /// The task that started it as a lane, which waits for it.
    pub(super) parent: Option<u64>,
}

/// A connection opened by a task: its frames travel as events.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) to: String,
    /// The peer's incarnation when the link was made (a restart closes every link).
    pub(super) incarnation: u64,
    /// Answers arrived and not read (`None`: the connection was reset).
    pub(super) inbox: std::collections::VecDeque<Option<Vec<u8>>>,
    /// Requests sent whose answers have not arrived (nor a reset for them).
    pub(super) in_flight: u64,
    /// The latest time a frame on this link arrives at either end: frames keep their
    /// order on one connection.
    pub(super) requests_until: u64,
    pub(super) answers_until: u64,
    /// Reset: nothing more travels on it.
    pub(super) broken: bool,
    /// Its peer hung while a request was on it: the reset reads as a timeout.
    pub(super) hung: bool,
    /// How long its sender waits for an answer before the reset that reads as a
    /// timeout (the connection's `io_timeout` when it last sent), in milliseconds.
    pub(super) timeout_millis: u64,
    /// The task waiting for its next answer.
    pub(super) waiter: Option<u64>,
}

pub(super) enum Event {
    /// A request reaches its peer.
    Request { link: u64, frame: Vec<u8> },
    /// An answer (or, `None`, a reset) reaches the task.
    Answer { link: u64, frame: Option<Vec<u8>> },
    /// A task's timer fires.
    Wake { task: u64 },
    /// A task that waits on `link` with a deadline ([`MemoryNet::wait_async`]) reaches
    /// it: woken if it still waits there.
    WakeWaiter { task: u64, link: u64 },
    /// An attacker sends a captured request again.
    Replay { to: String, frame: Vec<u8> },
    /// Periodic work (a daemon's background threads), run where it falls due and then
    /// again `period` later.
    Every { period: u64, work: Periodic },
}

/// Periodic work for [`MemoryNet::every`].
pub type Periodic = Arc<dyn Fn() + Send + Sync>;

thread_local! {
    /// The simulated task this thread runs, and the network it belongs to.
    static CURRENT: std::cell::RefCell<Option<(MemoryNet, u64)>> =
        const { std::cell::RefCell::new(None) };
}

/// The task this thread is on `net`, if it runs one.
pub(super) fn current_task(net: &MemoryNet) -> Option<u64> {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(n, _)| Arc::ptr_eq(&n.state, &net.state))
            .map(|(_, t)| *t)
    })
}

/// What a run of the scheduler ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// Nothing is left to do: every task is done and no frame or timer is pending.
    Idle,
    /// The time asked for was reached with work still pending.
    Until,
    /// Tasks wait for something that never comes (named, with what they wait for).
    Stuck(Vec<String>),
}

/// A task started by [`MemoryNet::spawn`]: what its function returned, once done.
pub struct Task<T> {
    result: Arc<Mutex<Option<std::thread::Result<T>>>>,
    name: String,
}

impl<T> Task<T> {
    /// The task's result once it has ended (`Err`: it panicked), taken once.
    pub fn take(&self) -> Option<std::thread::Result<T>> {
        self.result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The name it was started with.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl MemoryNet {
    fn now_locked(s: &State) -> u64 {
        s.clock.as_ref().map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn wait<'a>(&'a self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.turn
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the turn back to the scheduler (the task `me` now waits for `why`) and
    /// returns when the scheduler hands it back.
    fn yield_turn<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        me: u64,
        why: Waiting,
    ) -> MutexGuard<'a, State> {
        if let Some(t) = s.tasks.get_mut(&me) {
            t.waiting = Some(why);
        }
        s.baton = None;
        self.turn.notify_all();
        while s.baton != Some(me) {
            s = self.wait(s);
        }
        s
    }

    /// Starts `f` as a simulated task named `name`, on a thread of its own that runs only
    /// when the scheduler ([`MemoryNet::run`]) gives it the turn.
    pub fn spawn<T: Send + 'static>(
        &self,
        name: impl Into<String>,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Task<T> {
        let name = name.into();
        let id = self.new_task(name.clone(), None);
        let result = Arc::new(Mutex::new(None));
        let slot = result.clone();
        let net = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("sim-{name}"))
            .spawn(move || {
                net.enter(id);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
                net.leave(id);
            });
        if spawned.is_err() {
            // No thread: the task ends at once, with no result.
            self.state().tasks.remove(&id);
        }
        Task { result, name }
    }

    fn new_task(&self, name: String, parent: Option<u64>) -> u64 {
        let mut s = self.state();
        s.next_task += 1;
        let id = s.next_task;
        s.tasks.insert(
            id,
            TaskState {
                name,
                waiting: Some(Waiting::Turn),
                parent,
            },
        );
        id
    }

    /// On a task's own thread, before it runs: waits for its first turn.
    fn enter(&self, id: u64) {
        CURRENT.with(|c| *c.borrow_mut() = Some((self.clone(), id)));
        let mut s = self.state();
        while s.baton != Some(id) {
            s = self.wait(s);
        }
    }

    /// On a task's own thread, when it ends: gives the turn back for good.
    fn leave(&self, id: u64) {
        CURRENT.with(|c| *c.borrow_mut() = None);
        let mut s = self.state();
        let parent = s.tasks.get_mut(&id).and_then(|t| {
            t.waiting = None;
            t.parent
        });
        if let Some(p) = parent {
            let done = {
                let s = &*s;
                matches!(
                    s.tasks.get(&p).and_then(|t| t.waiting.as_ref()),
                    Some(Waiting::Lanes(lanes))
                        if lanes.iter().all(|l| s.tasks.get(l).is_none_or(|t| t.waiting.is_none()))
                )
            };
            if done {
                if let Some(t) = s.tasks.get_mut(&p) {
                    t.waiting = Some(Waiting::Turn);
                }
            }
        }
        s.baton = None;
        self.turn.notify_all();
    }

    /// Waits `millis` of simulated time: a task sleeps until its timer fires (others run
    /// meanwhile); anyone else (a test, a daemon's handler) moves the clock on, and runs
    /// the periodic work that fell due meanwhile (a daemon's own threads would have run
    /// it while the caller waited: a client waiting for an OSD's check-in, issue 41).
    pub fn sleep(&self, millis: u64) {
        let mut s = self.state();
        let Some(me) = current_task(self) else {
            if let Some(c) = &s.clock {
                c.fetch_add(millis, Ordering::SeqCst);
            }
            let now = Self::now_locked(&s);
            let due: Vec<(u64, u64)> = s
                .events
                .iter()
                .filter(|((at, _), e)| *at <= now && matches!(e, Event::Every { .. }))
                .map(|(k, _)| *k)
                .collect();
            let mut works = Vec::with_capacity(due.len());
            for k in due {
                if let Some(Event::Every { period, work }) = s.events.remove(&k) {
                    works.push((period, work));
                }
            }
            drop(s);
            for (period, work) in works {
                work();
                let mut s = self.state();
                let at = Self::now_locked(&s) + period;
                s.schedule(at, Event::Every { period, work });
            }
            return;
        };
        let at = Self::now_locked(&s).saturating_add(millis);
        s.schedule(at, Event::Wake { task: me });
        let _s = self.yield_turn(s, me, Waiting::Timer);
    }

    /// Runs `run` over every lane: from a task, each lane on a thread of its own as a
    /// task of its own (the scheduler interleaves them with everything else), the caller
    /// waiting until all have ended; from anywhere else, one after the other.
    pub fn run_lanes<T: Send>(&self, lanes: &mut [T], run: &(dyn Fn(&mut T) + Sync)) {
        // Outside a task, or one lane (as on TCP: no thread for it), on this thread.
        let Some(me) = current_task(self).filter(|_| lanes.len() > 1) else {
            lanes.iter_mut().for_each(run);
            return;
        };
        let ids: Vec<u64> = (0..lanes.len())
            .map(|i| self.new_task(format!("lane {i}"), Some(me)))
            .collect();
        std::thread::scope(|scope| {
            for (lane, &id) in lanes.iter_mut().zip(&ids) {
                let net = self.clone();
                scope.spawn(move || {
                    net.enter(id);
                    // A lane that panics still gives the turn back; the panic reaches
                    // the caller when the scope joins it.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(lane)));
                    net.leave(id);
                    if let Err(p) = r {
                        std::panic::resume_unwind(p);
                    }
                });
            }
            let s = self.state();
            let _s = self.yield_turn(s, me, Waiting::Lanes(ids.iter().copied().collect()));
        });
    }

    /// Sends `frame` on the task's link `link` (a new link to `to` when `link` is `None`
    /// or reset with nothing in flight); returns the link.
    pub(crate) fn send_async(
        &self,
        to: &str,
        link: Option<u64>,
        frame: Vec<u8>,
        timeout_millis: u64,
    ) -> Result<u64, NetError> {
        let mut s = self.state();
        let now = Self::now_locked(&s);
        let incarnation = s.incarnations.get(to).copied().unwrap_or(0);
        let reusable = link.filter(|l| {
            s.links
                .get(l)
                .is_some_and(|k| k.in_flight > 0 || (!k.broken && k.incarnation == incarnation))
        });
        let id = match reusable {
            Some(id) => id,
            None => {
                // A connect: refused at once by a peer that is down, unknown or cut off.
                if s.down.contains(to) || !s.peers.contains_key(to) || s.cut_off(to, now) {
                    return Err(refused(to));
                }
                s.next_link += 1;
                let id = s.next_link;
                s.links.insert(
                    id,
                    Link {
                        to: to.to_string(),
                        incarnation,
                        inbox: Default::default(),
                        in_flight: 0,
                        requests_until: now,
                        answers_until: now,
                        broken: false,
                        hung: false,
                        timeout_millis,
                        waiter: None,
                    },
                );
                id
            }
        };
        let delay = s.delay();
        let dropped = s.dropped();
        let replay = s.replayed();
        let hung = s.hung_now(to, now);
        let Some(k) = s.links.get_mut(&id) else {
            return Err(NetError::Closed);
        };
        if k.broken {
            return Err(NetError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                format!("{to}: connection reset (in-memory network)"),
            )));
        }
        k.in_flight += 1;
        k.timeout_millis = timeout_millis;
        let at = (now + delay).max(k.requests_until);
        k.requests_until = at;
        if hung {
            // Taken and never answered: the sender's wait ends with its timeout.
            k.broken = true;
            k.hung = true;
            s.schedule(
                now.saturating_add(timeout_millis),
                Event::Answer {
                    link: id,
                    frame: None,
                },
            );
        } else if dropped {
            // The request never arrives; the sender sees the reset much later.
            k.broken = true;
            s.schedule(
                now + RESET_AFTER_MILLIS,
                Event::Answer {
                    link: id,
                    frame: None,
                },
            );
        } else {
            if replay {
                let later = at + 1 + s.delay() * 4;
                s.schedule(
                    later,
                    Event::Replay {
                        to: to.to_string(),
                        frame: frame.clone(),
                    },
                );
            }
            s.schedule(at, Event::Request { link: id, frame });
        }
        Ok(id)
    }

    /// The next answer on link `link` for the task on this thread, waiting for it.
    pub(crate) fn receive_async(&self, link: u64) -> Result<Vec<u8>, NetError> {
        let mut s = self.state();
        let me = current_task(self).ok_or(NetError::Closed)?;
        loop {
            let Some(k) = s.links.get_mut(&link) else {
                return Err(NetError::Closed);
            };
            if let Some(answer) = k.inbox.pop_front() {
                return answer.ok_or_else(|| match k.hung {
                    true => NetError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{}: no answer (hung, in-memory network)", k.to),
                    )),
                    false => NetError::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        format!("{}: connection reset (in-memory network)", k.to),
                    )),
                });
            }
            if k.in_flight == 0 {
                return Err(NetError::Closed);
            }
            k.waiter = Some(me);
            s = self.yield_turn(s, me, Waiting::Link(link));
        }
    }

    /// Waits at most `millis` of simulated time for link `link` to have something for
    /// [`MemoryNet::receive_async`] (an answer, a reset, or nothing in flight): whether it
    /// has. The link is left as it was (a caller that stops waiting closes it). Outside a
    /// task: true (the receive does not wait).
    pub(crate) fn wait_async(&self, link: u64, millis: u64) -> bool {
        let mut s = self.state();
        let Some(me) = current_task(self) else {
            return true;
        };
        let deadline = Self::now_locked(&s).saturating_add(millis);
        let wake = s.schedule(deadline, Event::WakeWaiter { task: me, link });
        let ready = loop {
            let now = Self::now_locked(&s);
            let Some(k) = s.links.get_mut(&link) else {
                break true;
            };
            if !k.inbox.is_empty() || k.in_flight == 0 {
                break true;
            }
            if now >= deadline {
                break false;
            }
            k.waiter = Some(me);
            s = self.yield_turn(s, me, Waiting::Link(link));
        };
        // (A wait that ended early leaves no timer behind to move the clock on.)
        s.events.remove(&wake);
        ready
    }

    /// Runs `work` every `period` milliseconds of simulated time while the scheduler
    /// runs, on the scheduler's thread (as a daemon's periodic threads would: a
    /// revocation catch-up, key upkeep). It keeps no run from ending: once nothing else is
    /// pending, a run is over.
    pub fn every(&self, period: u64, work: Periodic) {
        let mut s = self.state();
        let at = Self::now_locked(&s) + period.max(1);
        s.schedule(
            at,
            Event::Every {
                period: period.max(1),
                work,
            },
        );
    }

    /// Forgets link `link` (its connection was dropped by the caller).
    pub(crate) fn close_async(&self, link: u64) {
        self.state().links.remove(&link);
    }

    /// Runs the simulation until nothing is left to do or the clock reaches `until`:
    /// hands the turn to tasks that can run (one at a time, chosen by the seed) and
    /// delivers frames and timers in time order, running each daemon's handler where the
    /// frame arrives. The caller must not be a task.
    pub fn run(&self, until: Option<u64>) -> Run {
        loop {
            let mut s = self.state();
            let ready: Vec<u64> = s
                .tasks
                .iter()
                .filter(|(_, t)| t.waiting == Some(Waiting::Turn))
                .map(|(id, _)| *id)
                .collect();
            let chosen = s.choose(ready.len());
            if let Some(&pick) = ready.get(chosen) {
                if let Some(t) = s.tasks.get_mut(&pick) {
                    t.waiting = None;
                }
                s.baton = Some(pick);
                self.turn.notify_all();
                let started = Instant::now();
                while s.baton.is_some() {
                    let (guard, _) = self
                        .turn
                        .wait_timeout(s, Duration::from_millis(200))
                        .unwrap_or_else(PoisonError::into_inner);
                    s = guard;
                    if s.baton.is_some() && started.elapsed() > STUCK_AFTER {
                        let name = s.tasks.get(&pick).map_or("?", |t| t.name.as_str());
                        return Run::Stuck(vec![format!(
                            "{name}: did not give the turn back in {STUCK_AFTER:?} (blocked outside the simulator)"
                        )]);
                    }
                }
                // Tasks that ended are forgotten (their results are in their slots).
                s.tasks.retain(|_, t| t.waiting.is_some());
                continue;
            }
            let only_periodic = s.events.values().all(|e| matches!(e, Event::Every { .. }));
            // Only periodic work left: nothing a task waits for can come any more.
            let first = s.events.first_key_value().map(|(k, _)| *k);
            let Some((at, seq)) = first.filter(|_| !only_periodic) else {
                let waiting: Vec<String> = s
                    .tasks
                    .values()
                    .map(|t| format!("{} waits for {:?}", t.name, t.waiting))
                    .collect();
                return if waiting.is_empty() {
                    Run::Idle
                } else {
                    Run::Stuck(waiting)
                };
            };
            if until.is_some_and(|u| at > u) {
                if let (Some(c), Some(u)) = (&s.clock, until) {
                    c.fetch_max(u, Ordering::SeqCst);
                }
                return Run::Until;
            }
            let Some(event) = s.events.remove(&(at, seq)) else {
                continue;
            };
            if let Some(c) = &s.clock {
                c.fetch_max(at, Ordering::SeqCst);
            }
            drop(s);
            self.process(event);
        }
    }

    fn process(&self, event: Event) {
        match event {
            Event::Wake { task } => {
                let mut s = self.state();
                if let Some(t) = s.tasks.get_mut(&task) {
                    t.waiting = Some(Waiting::Turn);
                }
            }
            Event::WakeWaiter { task, link } => {
                let mut s = self.state();
                let waits_here = s
                    .tasks
                    .get(&task)
                    .is_some_and(|t| t.waiting == Some(Waiting::Link(link)));
                if !waits_here {
                    return;
                }
                if let Some(k) = s.links.get_mut(&link) {
                    k.waiter = None;
                }
                if let Some(t) = s.tasks.get_mut(&task) {
                    t.waiting = Some(Waiting::Turn);
                }
            }
            Event::Answer { link, frame } => {
                let mut s = self.state();
                let Some(k) = s.links.get_mut(&link) else {
                    return;
                };
                k.in_flight = k.in_flight.saturating_sub(1);
                if frame.is_none() {
                    k.broken = true;
                    // A reset answers everything still in flight.
                    let lost = k.in_flight;
                    k.in_flight = 0;
                    k.inbox.push_back(None);
                    for _ in 0..lost {
                        k.inbox.push_back(None);
                    }
                } else if k.broken {
                    // The connection was reset after this answer left: it is lost too.
                    k.inbox.push_back(None);
                } else {
                    k.inbox.push_back(frame);
                }
                if let Some(w) = k.waiter.take() {
                    if let Some(t) = s.tasks.get_mut(&w) {
                        t.waiting = Some(Waiting::Turn);
                    }
                }
            }
            Event::Request { link, frame } => {
                let (to, incarnation) = {
                    let s = self.state();
                    match s.links.get(&link) {
                        Some(k) if !k.broken => (k.to.clone(), k.incarnation),
                        _ => return,
                    }
                };
                let (alive, hung) = {
                    let s = self.state();
                    let now = Self::now_locked(&s);
                    (
                        s.incarnations.get(&to).copied().unwrap_or(0) == incarnation,
                        s.hung_now(&to, now),
                    )
                };
                if hung {
                    // Arrived while its peer hangs: taken and never answered, as one sent
                    // to it then (`send_async`).
                    let mut s = self.state();
                    let now = Self::now_locked(&s);
                    let mut timeout = 0;
                    if let Some(k) = s.links.get_mut(&link) {
                        k.broken = true;
                        k.hung = true;
                        timeout = k.timeout_millis;
                    }
                    s.schedule(
                        now.saturating_add(timeout),
                        Event::Answer { link, frame: None },
                    );
                    return;
                }
                let answer = if alive {
                    self.deliver(&to, &frame).ok().flatten()
                } else {
                    None
                };
                let mut s = self.state();
                let now = Self::now_locked(&s);
                let delay = s.delay();
                let dropped = answer.is_some() && s.dropped();
                let Some(k) = s.links.get_mut(&link) else {
                    return;
                };
                let (at, frame) = match answer {
                    Some(a) if !dropped => {
                        let at = (now + delay).max(k.answers_until);
                        k.answers_until = at;
                        (at, Some(a))
                    }
                    // Not delivered (down, restarted, cut off), or the answer was lost:
                    // the connection is reset (nothing more travels on it), and the
                    // sender sees it so later.
                    _ => {
                        k.broken = true;
                        (now + RESET_AFTER_MILLIS, None)
                    }
                };
                s.schedule(at, Event::Answer { link, frame });
            }
            Event::Replay { to, frame } => {
                // On a connection of its own; whatever the peer answers goes nowhere.
                let _ = self.deliver(&to, &frame);
            }
            Event::Every { period, work } => {
                work();
                let mut s = self.state();
                let at = Self::now_locked(&s) + period;
                s.schedule(at, Event::Every { period, work });
            }
        }
    }
}

impl State {
    pub(super) fn schedule(&mut self, at: u64, event: Event) -> (u64, u64) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
        (at, self.seq)
    }

    fn draw(&mut self) -> u64 {
        // splitmix64: a seeded stream; the simulator needs repeatability, not quality.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn choose(&mut self, n: usize) -> usize {
        (self.draw() % n.max(1) as u64) as usize
    }

    fn delay(&mut self) -> u64 {
        match self.faults.delay_max_ms {
            0 => 0,
            max => self.draw() % (max + 1),
        }
    }

    fn dropped(&mut self) -> bool {
        self.faults.drop_per_mille > 0 && self.draw() % 1000 < u64::from(self.faults.drop_per_mille)
    }

    fn replayed(&mut self) -> bool {
        self.faults.replay_per_mille > 0
            && self.draw() % 1000 < u64::from(self.faults.replay_per_mille)
    }

    /// Whether `to` is cut off from everyone at `now` (a partition).
    pub(super) fn cut_off(&self, to: &str, now: u64) -> bool {
        self.partitioned.get(to).is_some_and(|until| now < *until)
    }

    /// Whether `to` is hung at `now` ([`super::MemoryNet::hang`]).
    pub(super) fn hung_now(&self, to: &str, now: u64) -> bool {
        self.hung.get(to).is_some_and(|until| now < *until)
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Request { link, frame } => {
                write!(f, "request on {link} ({} bytes)", frame.len())
            }
            Event::Answer { link, frame } => {
                write!(
                    f,
                    "answer on {link} ({:?} bytes)",
                    frame.as_ref().map(Vec::len)
                )
            }
            Event::Wake { task } => write!(f, "wake task {task}"),
            Event::WakeWaiter { task, link } => write!(f, "wake task {task} waiting on {link}"),
            Event::Replay { to, frame } => write!(f, "replay to {to} ({} bytes)", frame.len()),
            Event::Every { period, .. } => write!(f, "every {period} ms"),
        }
    }
}
