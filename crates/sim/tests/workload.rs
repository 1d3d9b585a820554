//! Random workloads under faults, each from a seed (a failure names its seed, and the same
//! seed replays it exactly): puts, gets, removals, renames and edits through file handles (writes
//! at offsets, truncates, reads of what the handle wrote, flushes: what FUSE and the
//! Python package do) by two users, while OSDs go down and come back, answers are lost
//! after the daemon acted, daemons restart, and time jumps. Checked
//! against a model of what was acknowledged:
//!
//! * a get never returns bytes other than the file's acknowledged content;
//! * with no fault in the way, every operation on a file whose state is known succeeds;
//! * once the faults are over, every acknowledged file reads back whole, and every removed
//!   one is gone.
//!
//! An operation that failed leaves its files unknown (it may have been applied, in part)
//! until an acknowledged put or removal makes them known again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_client::{Client, ClientError, OpenFlags};
use maat_proto::msg::ErrorCode;
use maat_proto::msg::STRIPE_UNIT_BYTES;
use maat_sim::{osd_address, SimCluster, KDS, MDS};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

const OSDS: u64 = 3;
const STEPS: u32 = 70;
const SIZES: [usize; 5] = [0, 1, 5_000, 70_000, 600_000];

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// The acknowledged content.
    Known(Vec<u8>),
    /// Acknowledged as removed (or never created).
    Absent,
    /// A failed operation may have changed it.
    Unknown,
}

struct World {
    sim: SimCluster,
    clients: Vec<Client>,
    /// Per client, its paths and their states.
    model: Vec<BTreeMap<String, State>>,
    down: Option<u64>,
    rng: ChaCha8Rng,
    log: Vec<String>,
    /// Per operation kind: (succeeded, failed).
    outcomes: BTreeMap<&'static str, (u32, u32)>,
}

fn get(c: &mut Client, path: &str) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    c.get(path, &mut out, &mut |_| {})?;
    Ok(out)
}

impl World {
    fn new(seed: u64) -> World {
        let sim = SimCluster::start(seed, OSDS).unwrap();
        let mut admin = sim.admin().unwrap();
        let ada = sim.user(&mut admin, "ada", b"pw").unwrap();
        let dirs = ["/", "/home/ada/"];
        let model = dirs
            .iter()
            .map(|d| {
                (0..4)
                    .map(|i| (format!("{d}f{i}"), State::Absent))
                    .collect()
            })
            .collect();
        World {
            sim,
            clients: vec![admin, ada],
            model,
            down: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            log: Vec::new(),
            outcomes: BTreeMap::new(),
        }
    }

    fn count(&mut self, kind: &'static str, ok: bool) {
        let e = self.outcomes.entry(kind).or_default();
        if ok {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.next_u32() as usize % from.len()]
    }

    fn path(&mut self, who: usize) -> String {
        let paths: Vec<String> = self.model[who].keys().cloned().collect();
        paths[self.rng.next_u32() as usize % paths.len()].clone()
    }

    /// Runs one operation; `faulty` when a fault may stand in its way.
    fn step(&mut self, faulty: bool) {
        let who = (self.rng.next_u32() % 2) as usize;
        let path = self.path(who);
        let state = self.model[who][&path].clone();
        match self.rng.next_u32() % 6 {
            4 => self.edit(who, path, state, faulty),
            5 => self.rename(who, path, state, faulty),
            0 | 1 => {
                let size = self.pick(&SIZES);
                let mut data = vec![0u8; size];
                self.rng.fill_bytes(&mut data);
                let c = &mut self.clients[who];
                let r = c.put(&mut &data[..], size as u64, &path, &mut |_| {});
                self.log.push(format!(
                    "put {path} {size} faulty={faulty}: {:?}",
                    r.as_ref().err()
                ));
                self.count("put", r.is_ok());
                let next = match r {
                    Ok(_) => State::Known(data),
                    Err(e) => {
                        assert!(faulty, "put {path} failed with no fault: {e}");
                        State::Unknown
                    }
                };
                self.model[who].insert(path, next);
            }
            2 => {
                let r = get(&mut self.clients[who], &path);
                self.count("get", r.is_ok());
                self.log.push(format!(
                    "get {path} faulty={faulty}: {:?}",
                    r.as_ref().map(Vec::len).map_err(ToString::to_string)
                ));
                match (&state, r) {
                    (State::Known(want), Ok(got)) => {
                        assert!(got == *want, "get {path}: other bytes than acknowledged")
                    }
                    (State::Known(_), Err(e)) => {
                        assert!(faulty, "get {path} failed with no fault: {e}")
                    }
                    (State::Absent, Ok(got)) => {
                        panic!("get {path}: {} bytes of a removed file", got.len())
                    }
                    (State::Absent, Err(e)) => assert!(
                        faulty || e.code() == Some(ErrorCode::NoSuchFile),
                        "get {path} of a removed file: {e}"
                    ),
                    (State::Unknown, _) => {}
                }
            }
            _ => {
                let r = self.clients[who].unlink(&path);
                self.count("rm", r.is_ok());
                self.log.push(format!(
                    "rm {path} faulty={faulty}: {:?}",
                    r.as_ref().err().map(ToString::to_string)
                ));
                let next = match (&state, r) {
                    (_, Ok(())) => State::Absent,
                    (State::Absent, Err(e)) if e.code() == Some(ErrorCode::NoSuchFile) => {
                        State::Absent
                    }
                    (State::Known(_), Err(e)) if !faulty => {
                        panic!("rm {path} failed with no fault: {e}")
                    }
                    (State::Absent, Err(e)) if !faulty => {
                        panic!("rm {path} of a removed file: {e}")
                    }
                    _ => State::Unknown,
                };
                self.model[who].insert(path, next);
            }
        }
    }

    /// Renames `path` to another of the same user's paths (refused when that exists).
    fn rename(&mut self, who: usize, from: String, state: State, faulty: bool) {
        let to = self.path(who);
        if to == from {
            return;
        }
        let target = self.model[who][&to].clone();
        let r = self.clients[who].rename(&from, &to);
        self.count("mv", r.is_ok());
        self.log.push(format!(
            "mv {from} {to} faulty={faulty}: {:?}",
            r.as_ref().err().map(ToString::to_string)
        ));
        let code = r.as_ref().err().and_then(ClientError::code);
        match (&state, &target, r) {
            (State::Absent, _, Ok(())) => panic!("mv {from}: a removed file moved"),
            (State::Known(_), State::Known(_), Ok(())) => {
                panic!("mv {from} {to}: replaced an existing file")
            }
            (_, _, Ok(())) => {
                self.model[who].insert(to, state);
                self.model[who].insert(from, State::Absent);
            }
            (State::Absent, _, Err(_)) if code == Some(ErrorCode::NoSuchFile) => {}
            (State::Known(_), State::Known(_) | State::Unknown, Err(_))
                if code == Some(ErrorCode::AlreadyExists) => {}
            (State::Unknown, _, Err(_)) if !faulty => {}
            (_, _, Err(e)) => {
                assert!(faulty, "mv {from} {to} failed with no fault: {e}");
                self.model[who].insert(to, State::Unknown);
                self.model[who].insert(from, State::Unknown);
            }
        }
    }

    /// An offset for an edit of a file of `len` bytes: inside it, just past it, or at a
    /// stripe boundary.
    fn offset(&mut self, len: usize) -> usize {
        match self.rng.next_u32() % 4 {
            0 => len,
            1 => STRIPE_UNIT_BYTES as usize - 100,
            _ => self.rng.next_u32() as usize % (len + 1),
        }
    }

    /// Opens `path` for writing (created if absent), makes one to three writes and
    /// truncates, reads back through the handle, and flushes.
    fn edit(&mut self, who: usize, path: String, state: State, faulty: bool) {
        let mut content = match state {
            State::Known(c) => c,
            State::Absent => Vec::new(),
            State::Unknown => return,
        };
        let flags = OpenFlags {
            write: true,
            create: Some(0o644),
            ..OpenFlags::READ
        };
        let mut steps = Vec::new();
        let result = (|| -> Result<(), ClientError> {
            let mut h = self.clients[who].open_file(&path, flags)?;
            for _ in 0..1 + self.rng.next_u32() % 3 {
                if self.rng.next_u32() % 3 == 0 {
                    let size = self.offset(content.len());
                    steps.push(format!("truncate {size}"));
                    self.clients[who].truncate_file(&mut h, size as u64)?;
                    content.resize(size, 0);
                } else {
                    let at = self.offset(content.len());
                    let mut data = vec![0u8; 1 + self.rng.next_u32() as usize % 9_000];
                    self.rng.fill_bytes(&mut data);
                    steps.push(format!("write {}..{}", at, at + data.len()));
                    self.clients[who].write_file_at(&mut h, at as u64, &data)?;
                    if content.len() < at + data.len() {
                        content.resize(at + data.len(), 0);
                    }
                    content[at..at + data.len()].copy_from_slice(&data);
                }
                let back = self.clients[who].read_file_at(&h, 0, content.len())?;
                assert!(
                    back == content,
                    "edit {path}: the handle reads back other bytes"
                );
            }
            self.clients[who].flush_file(&mut h)
        })();
        self.count("edit", result.is_ok());
        self.log.push(format!(
            "edit {path} [{}] faulty={faulty}: {:?}",
            steps.join(", "),
            result.as_ref().err().map(ToString::to_string)
        ));
        let next = match result {
            Ok(()) => State::Known(content),
            Err(e) => {
                assert!(faulty, "edit {path} failed with no fault: {e}");
                State::Unknown
            }
        };
        self.model[who].insert(path, next);
    }

    fn run(&mut self) {
        for _ in 0..STEPS {
            match self.rng.next_u32() % 10 {
                // An OSD goes down, or the one down comes back.
                0 => match self.down.take() {
                    Some(id) => {
                        self.sim.net().set_down(&osd_address(id), false);
                        self.log.push(format!("osd {id} up"));
                    }
                    None => {
                        let id = 1 + u64::from(self.rng.next_u32()) % OSDS;
                        self.sim.net().set_down(&osd_address(id), true);
                        self.down = Some(id);
                        self.log.push(format!("osd {id} down"));
                    }
                },
                // One answer of the MDS, the KDS or an OSD lost, during the next operation.
                1 => {
                    let to = match self.rng.next_u32() as u64 % (OSDS + 2) {
                        0 => MDS.to_string(),
                        1 => KDS.to_string(),
                        n => osd_address(n - 1),
                    };
                    self.sim.net().lose_answers(&to, 1);
                    self.log.push(format!("lose an answer of {to}"));
                    self.step(true);
                    self.sim.net().lose_answers(&to, 0);
                }
                // A daemon restarts: the MDS (from its database) or an OSD (from its
                // files, its sessions and caches gone).
                3 => match self.rng.next_u32() as u64 % (OSDS + 1) {
                    0 => {
                        self.sim.restart_mds().unwrap();
                        self.log.push("mds restarted".into());
                    }
                    id => {
                        self.sim.restart_osd(id).unwrap();
                        self.log.push(format!("osd {id} restarted"));
                    }
                },
                // Time jumps by up to six minutes (past a capability's lifetime).
                2 => {
                    let millis = u64::from(self.rng.next_u32()) % 360_000;
                    self.sim.advance(millis).unwrap();
                    self.log.push(format!("advance {millis} ms"));
                }
                _ => self.step(self.down.is_some()),
            }
        }
        // The faults end: everything acknowledged reads back; every removed file is gone.
        if let Some(id) = self.down.take() {
            self.sim.net().set_down(&osd_address(id), false);
        }
        self.sim.tick().unwrap();
        for who in 0..2 {
            for (path, state) in self.model[who].clone() {
                let r = get(&mut self.clients[who], &path);
                match state {
                    State::Known(want) => {
                        let got = r.unwrap_or_else(|e| panic!("{path} after the faults: {e}"));
                        assert!(got == want, "{path} after the faults: other bytes");
                    }
                    State::Absent => assert_eq!(
                        r.err().and_then(|e| e.code()),
                        Some(ErrorCode::NoSuchFile),
                        "{path} was removed"
                    ),
                    State::Unknown => {}
                }
            }
        }
    }
}

#[test]
fn random_workloads_under_faults_keep_what_was_acknowledged() {
    let seeds: Vec<u64> = match std::env::var("MAAT_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("MAAT_SIM_SEED: a number")],
        // Seed 55 found stripes a failed put left past the end of a file that a later
        // put of 0 bytes kept (now removed by every put ending on a stripe boundary).
        Err(_) => (1..=24).chain([55]).collect(),
    };
    let mut outcomes: BTreeMap<&'static str, (u32, u32)> = BTreeMap::new();
    let all = seeds.len() > 1;
    for seed in seeds {
        let mut world = World::new(seed);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.run()));
        if let Err(panic) = run {
            // MAAT_SIM_LOG=all shows every step, not only the last ones.
            let shown = match std::env::var("MAAT_SIM_LOG").as_deref() {
                Ok("all") => world.log.len(),
                _ => 12,
            };
            let tail: Vec<&String> = world.log.iter().rev().take(shown).rev().collect();
            eprintln!("seed {seed} failed (replay: MAAT_SIM_SEED={seed}); last steps:");
            for line in tail {
                eprintln!("  {line}");
            }
            std::panic::resume_unwind(panic);
        }
        for (kind, (ok, failed)) in &world.outcomes {
            let e = outcomes.entry(kind).or_default();
            e.0 += ok;
            e.1 += failed;
        }
    }
    eprintln!("outcomes (succeeded, failed): {outcomes:?}");
    if all {
        // The run did what it claims: every kind of operation both went through and met
        // a fault.
        for kind in ["put", "get", "rm", "edit", "mv"] {
            let (ok, failed) = outcomes.get(kind).copied().unwrap_or_default();
            assert!(
                ok > 10 && failed > 0,
                "{kind}: {ok} succeeded, {failed} failed"
            );
        }
    }
}
