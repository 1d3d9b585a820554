//! The threads that serve busy connections: made on demand up to [`WORKERS_MAX`], kept
//! while there is work, a few kept idle. Connections that proved a key are served first;
//! at most [`WORKERS_UNPROVEN_MAX`] threads serve the others at once.

use super::conn::Conn;
use super::turn::{take_turn, Turn};
use super::{Handler, ServeStats, Shutdown};
use crate::limits::{WORKERS_KEPT, WORKER_KEEP};
use maat_net::READ_AHEAD_BYTES;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A connection for a thread to serve, by its place in the accept loop's table.
pub(super) struct Job {
    pub(super) token: u64,
    pub(super) conn: Conn,
}

/// A connection handed back, with how its turn ended.
pub(super) struct Done {
    pub(super) token: u64,
    pub(super) conn: Conn,
    pub(super) turn: Turn,
}

#[derive(Default)]
struct Queue {
    proven: VecDeque<Job>,
    unproven: VecDeque<Job>,
    /// Threads alive.
    workers: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Threads serving connections that have not proven a key.
    unproven_busy: usize,
    stopping: bool,
}

impl Queue {
    fn pick(&mut self, unproven_max: usize) -> Option<(Job, bool)> {
        if let Some(job) = self.proven.pop_front() {
            return Some((job, false));
        }
        if self.unproven_busy < unproven_max {
            if let Some(job) = self.unproven.pop_front() {
                self.unproven_busy += 1;
                return Some((job, true));
            }
        }
        None
    }
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    handler: Arc<Handler>,
    shutdown: Shutdown,
    done: Sender<Done>,
    wake: Arc<dyn Fn() + Send + Sync>,
    stats: Arc<ServeStats>,
    workers_max: usize,
    unproven_max: usize,
    name: String,
}

/// The pool.
#[derive(Clone)]
pub(super) struct Pool {
    shared: Arc<Shared>,
}

/// A poisoned queue means a thread panicked holding it, which ends the daemon (see
/// [`worker`]); the state is never taken over.
fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    match m.lock() {
        Ok(g) => g,
        Err(_) => std::process::abort(),
    }
}

impl Pool {
    /// A pool that answers frames with `handler` and hands connections back through
    /// `done`, calling `wake` after each.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        handler: Arc<Handler>,
        shutdown: Shutdown,
        done: Sender<Done>,
        wake: Arc<dyn Fn() + Send + Sync>,
        stats: Arc<ServeStats>,
        workers_max: usize,
        unproven_max: usize,
        name: &str,
    ) -> Self {
        Pool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                handler,
                shutdown,
                done,
                wake,
                stats,
                workers_max: workers_max.max(1),
                unproven_max: unproven_max.max(1).min(workers_max.max(1)),
                name: name.to_string(),
            }),
        }
    }

    /// Queues `job` and makes sure a thread will take it.
    pub(super) fn submit(&self, job: Job) {
        let s = &self.shared;
        let mut q = lock(&s.queue);
        if job.conn.proven {
            q.proven.push_back(job);
        } else {
            q.unproven.push_back(job);
        }
        if q.idle > 0 {
            s.ready.notify_one();
            return;
        }
        if q.workers >= s.workers_max {
            return;
        }
        q.workers += 1;
        drop(q);
        let shared = s.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-worker", s.name))
            .spawn(move || worker(&shared));
        match spawned {
            Ok(_) => {
                s.stats.workers.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // The job stays queued for a thread that exists (there is at least one
                // unless none could ever be made).
                tracing::warn!(error = %e, "could not start a thread to serve connections");
                lock(&s.queue).workers -= 1;
            }
        }
    }

    /// Stops the threads once the queue is empty; returns whether all ended within
    /// `wait`.
    pub(super) fn stop(&self, wait: std::time::Duration) -> bool {
        let s = &self.shared;
        lock(&s.queue).stopping = true;
        s.ready.notify_all();
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if lock(&s.queue).workers == 0 {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }
}

/// Ends the daemon if a thread serving connections panics: a tripped assertion means the
/// state it guards is wrong, and no other thread may go on with it.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::process::abort();
        }
    }
}

fn worker(s: &Shared) {
    let _abort = AbortOnPanic;
    let mut scratch = [0u8; READ_AHEAD_BYTES];
    loop {
        let picked = {
            let mut q = lock(&s.queue);
            loop {
                if let Some(picked) = q.pick(s.unproven_max) {
                    break Some(picked);
                }
                if q.stopping {
                    break None;
                }
                q.idle += 1;
                let (guard, waited) = match s.ready.wait_timeout(q, WORKER_KEEP) {
                    Ok(r) => r,
                    Err(_) => std::process::abort(),
                };
                q = guard;
                q.idle -= 1;
                if waited.timed_out()
                    && q.proven.is_empty()
                    && q.unproven.is_empty()
                    && q.workers > WORKERS_KEPT
                {
                    break None;
                }
            }
        };
        let Some((mut job, unproven)) = picked else {
            lock(&s.queue).workers -= 1;
            s.stats.workers.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        s.stats.workers_busy.fetch_add(1, Ordering::Relaxed);
        let turn = take_turn(&mut job.conn, s.handler.as_ref(), &s.shutdown, &mut scratch);
        s.stats.workers_busy.fetch_sub(1, Ordering::Relaxed);
        if unproven {
            let mut q = lock(&s.queue);
            q.unproven_busy -= 1;
            if !q.unproven.is_empty() && q.idle > 0 {
                s.ready.notify_one();
            }
        }
        let sent = s.done.send(Done {
            token: job.token,
            conn: job.conn,
            turn,
        });
        if sent.is_ok() {
            (s.wake)();
        }
    }
}
