//! Client operations running at once, as simulated tasks on the shipping client (its
//! threads, lanes and connection pool included), against the daemons' own code, while the
//! in-process network delays, reorders (between connections), loses and replays frames;
//! everything from one seed, which also draws the cluster's shape (1 to 5 OSDs) and the
//! fault rates (issue 39). A chaos task cuts daemons off, takes OSDs down, crashes MDS
//! instances, loses answers, lets time pass and hangs OSDs (issue 41: silent for 2–27 s,
//! their check-ins stopped).
//!
//! Each task owns its files (two tasks share each user's client) and checks every answer
//! against a model of what was acknowledged, as `workload.rs` does:
//!
//! * a get never returns bytes other than the file's acknowledged content;
//! * an operation that failed leaves its file unknown until an acknowledged put or
//!   removal makes it known again;
//! * every task ends (none waits for something that never comes), with faults and after;
//! * once the faults are over, every operation succeeds, every acknowledged file reads
//!   back whole and every removed one is gone;
//! * a seed repeats byte for byte (the frames exchanged, digested, are the same in two
//!   runs).
//!
//! `MAAT_SIM_SEED=N` replays one seed; `MAAT_SIM_SOAK=SECONDS` runs random seeds for that
//! long and prints the first that fails; `MAAT_SIM_LOG=all` prints every step of a
//! failing seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use maat_client::{Client, ClientError, OpenFlags};
use maat_net::memory::{Faults, Run};
use maat_proto::msg::{ErrorCode, STRIPE_UNIT_BYTES};
use maat_server::faults::{StorageFaultRates, StorageFaults};
use maat_sim::{panic_text, Access, SimCluster};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const USERS: usize = 2;
/// Capability lifetime of the simulated cluster: short, so that expiry, renewal and the
/// end of a revoked user's access fall inside a run.
const LIFETIME_SECS: u64 = 20;
const TASKS_PER_USER: usize = 2;
const FILES_PER_TASK: usize = 3;
const STEPS: u32 = 14;
/// Sizes: empty, tiny, one stripe, two stripes (over two OSDs: two lanes), three.
const SIZES: [usize; 6] = [0, 1, 5_000, 70_000, 600_000, 1_200_000];

#[derive(Clone, Debug, PartialEq)]
enum State {
    Known(Vec<u8>),
    Absent,
    Unknown,
}

/// What a seed draws: the cluster's shape and the faults.
#[derive(Debug, Clone, Copy)]
struct Shape {
    osds: u64,
    faults: Faults,
    /// The disks' faults (the MDS's commits, the OSDs' object reads and writes).
    storage: StorageFaultRates,
    /// Whether a chaos task places faults by address as well.
    chaos: bool,
    /// Whether tasks try other users' files (the access audit's new work).
    intruders: bool,
    /// MDS instances (issue 42): one over its redb file, or several over one shared
    /// database that the chaos task crashes them on.
    instances: usize,
    /// Whether an instance whose database connection broke answers until it is
    /// restarted (the first several-instances model) instead of exiting at once.
    failed_instances_answer: bool,
    /// Whether the chaos task also cuts OSDs off from every MDS instance, one way
    /// (issue 41: the OSD's lease); not on seeds found before that, which replay as
    /// they were.
    cuts: bool,
    /// Whether the chaos task also hangs OSDs (a stopped process: connections taken,
    /// nothing answered, no check-in) for 2–27 s (issue 41: reads cut short, probes,
    /// copies skipped on the MDS's report); not on seeds found before that.
    hangs: bool,
}

fn shape(seed: u64) -> Shape {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    // Drawn in the order of the first fault model, the disks' rates after.
    let osds = 1 + u64::from(rng.next_u32()) % 5;
    let faults = Faults {
        delay_max_ms: u64::from(rng.next_u32() % 41),
        drop_per_mille: rng.next_u32() % 41,
        replay_per_mille: rng.next_u32() % 61,
    };
    let chaos = rng.next_u32() % 3 != 0;
    let storage = StorageFaultRates {
        write_lost: rng.next_u32() % 61,
        write_torn: rng.next_u32() % 61,
        read_failed: rng.next_u32() % 61,
        read_flipped: rng.next_u32() % 61,
        commit_failed: rng.next_u32() % 31,
    };
    Shape {
        osds,
        faults,
        storage,
        chaos,
        intruders: false,
        instances: 1,
        failed_instances_answer: false,
        cuts: false,
        hangs: false,
    }
}

/// A seed's shape under the current fault model: [`shape`]'s, with disk faults and
/// intruders unless the seed was found under the first model (message faults only),
/// which it then replays as it was found.
fn current_shape(seed: u64) -> Shape {
    let first = shape(seed);
    if FIRST_MODEL_REGRESSIONS.contains(&seed) {
        return Shape {
            storage: StorageFaultRates::default(),
            ..first
        };
    }
    let found_before_cuts = [REGRESSIONS, INSTANCE_REGRESSIONS]
        .iter()
        .any(|list| list.contains(&seed));
    Shape {
        intruders: true,
        cuts: !found_before_cuts,
        hangs: !found_before_cuts,
        ..first
    }
}

/// Faults placed by a task of their own while the others run: a daemon cut off from
/// everyone for a while, an OSD down and back, an MDS instance crashed (when there are
/// several), an answer lost, time passing (several capability lifetimes included).
fn chaos(
    net: maat_net::memory::MemoryNet,
    clock: Arc<std::sync::atomic::AtomicU64>,
    (osds, instances, cuts, hangs): (u64, maat_sim::MdsInstances, bool, bool),
    seed: u64,
    log: Arc<Mutex<Vec<String>>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc4a05);
    // Cuts draw from a stream of their own, so that the other faults stay as they were.
    let mut cut_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0c07);
    // So do hangs.
    let mut hang_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4a96);
    let mut down: Option<String> = None;
    let several = instances.len() > 1;
    for _ in 0..6 {
        net.sleep(u64::from(rng.next_u32() % 8_000));
        let (peer, instance) = match u64::from(rng.next_u32()) % (osds + 2) {
            // (With one instance, no draw: a seed's run stays as it was.)
            0 if several => {
                let i = rng.next_u32() as usize % instances.len();
                (maat_sim::mds_address(i), Some(i))
            }
            0 => (maat_sim::MDS.to_string(), None),
            1 => (maat_sim::KDS.to_string(), None),
            n => (maat_sim::osd_address(n - 1), None),
        };
        let now = clock.load(std::sync::atomic::Ordering::SeqCst);
        let what = match rng.next_u32() % 4 {
            0 => {
                let until = now + 1_000 + u64::from(rng.next_u32() % 20_000);
                net.partition(&peer, until);
                format!("{peer} cut off until +{} ms", until - now)
            }
            1 if instance.is_some() => {
                let i = instance.unwrap_or_default();
                match instances.restart(i) {
                    Ok(()) => format!("{peer} crashed and restarted"),
                    Err(e) => panic!("restarting {peer}: {e}"),
                }
            }
            1 => {
                if let Some(d) = down.take() {
                    net.set_down(&d, false);
                }
                if peer.starts_with("osd") {
                    net.set_down(&peer, true);
                    down = Some(peer.clone());
                }
                format!("{peer} down")
            }
            2 => {
                net.lose_answers(&peer, 1);
                format!("an answer of {peer} lost")
            }
            _ => {
                let millis = u64::from(rng.next_u32() % 200_000);
                net.sleep(millis);
                format!("{millis} ms pass")
            }
        };
        log.lock().unwrap().push(format!("chaos: {what}"));
        // An OSD cut off from every MDS instance while clients still reach it (often
        // the one just cut off from everyone or taken down, so that a copy it missed
        // meanwhile is asked for before it can learn so).
        if cuts && cut_rng.next_u32() % 2 == 0 && peer.starts_with("osd") {
            let until = now + 2_000 + u64::from(cut_rng.next_u32() % 25_000);
            for i in 0..instances.len() {
                net.cut(&peer, &maat_sim::mds_address(i), until);
            }
            log.lock().unwrap().push(format!(
                "chaos: {peer} cut off from the MDS until +{} ms",
                until - now
            ));
        }
        // An OSD hung: it takes connections and answers nothing, and checks in with no
        // MDS instance, until then.
        if hangs && hang_rng.next_u32() % 3 == 0 {
            let osd = maat_sim::osd_address(1 + u64::from(hang_rng.next_u32()) % osds);
            let until = now + 2_000 + u64::from(hang_rng.next_u32() % 25_000);
            net.hang(&osd, until);
            for i in 0..instances.len() {
                net.cut(&osd, &maat_sim::mds_address(i), until);
            }
            log.lock()
                .unwrap()
                .push(format!("chaos: {osd} hung until +{} ms", until - now));
        }
    }
    if let Some(d) = down.take() {
        net.set_down(&d, false);
    }
    for p in [maat_sim::KDS.to_string()]
        .into_iter()
        .chain((0..instances.len()).map(maat_sim::mds_address))
        .chain((1..=osds).map(maat_sim::osd_address))
    {
        net.lose_answers(&p, 0);
        net.partition(&p, 0);
        net.hang(&p, 0);
        for i in 0..instances.len() {
            net.cut(&p, &maat_sim::mds_address(i), 0);
        }
    }
    log.lock().unwrap().push("chaos: over".into());
}

/// One task's files, its model of them, its generator and its log.
struct Owner {
    client: Arc<Client>,
    model: BTreeMap<String, State>,
    rng: ChaCha8Rng,
    log: Arc<Mutex<Vec<String>>>,
    name: String,
    /// Other users' files this task tries to read and overwrite now and then (each
    /// attempt must be refused), with the generator that decides when; `None`: never
    /// (seeds of the first fault model replay as they were found).
    intrude: Option<(Vec<String>, ChaCha8Rng)>,
}

fn get(c: &Client, path: &str) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    c.get_whole(path, &mut out, &mut |_| {})?;
    Ok(out)
}

impl Owner {
    fn say(&self, line: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}: {line}", self.name));
    }

    fn pick_path(&mut self) -> String {
        let paths: Vec<String> = self.model.keys().cloned().collect();
        paths[self.rng.next_u32() as usize % paths.len()].clone()
    }

    /// One operation; `faulty`: a fault may stand in its way (then it may fail).
    fn step(&mut self, faulty: bool) {
        if let Some((targets, rng)) = &mut self.intrude {
            if rng.next_u32() % 4 == 0 {
                let target = targets[rng.next_u32() as usize % targets.len()].clone();
                let write = rng.next_u32() % 2 == 0;
                return self.intrude(&target, write);
            }
        }
        let path = self.pick_path();
        let state = self.model[&path].clone();
        match self.rng.next_u32() % 6 {
            0 | 1 => self.put(&path, faulty),
            2 | 3 => self.get(&path, &state, faulty),
            4 => self.edit(&path, state, faulty),
            _ => self.rm(&path, &state, faulty),
        }
    }

    fn put(&mut self, path: &str, faulty: bool) {
        let size = SIZES[self.rng.next_u32() as usize % SIZES.len()];
        let mut data = vec![0u8; size];
        self.rng.fill_bytes(&mut data);
        let r = self
            .client
            .put(&mut &data[..], size as u64, path, &mut |_| {});
        self.say(format!("put {path} {size}: {:?}", r.as_ref().err()));
        let next = match r {
            Ok(_) => State::Known(data),
            Err(e) => {
                assert!(faulty, "put {path} failed with no fault: {e}");
                State::Unknown
            }
        };
        self.model.insert(path.to_string(), next);
    }

    fn get(&mut self, path: &str, state: &State, faulty: bool) {
        let r = get(&self.client, path);
        self.say(format!(
            "get {path}: {:?}",
            r.as_ref().map(Vec::len).map_err(ToString::to_string)
        ));
        match (state, r) {
            (State::Known(want), Ok(got)) => {
                assert!(got == *want, "get {path}: other bytes than acknowledged")
            }
            (State::Known(_), Err(e)) => assert!(faulty, "get {path} failed with no fault: {e}"),
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

    /// Tries to read, or to overwrite, another user's file (mode 0600, in a home others
    /// may enter or not): every attempt fails, whatever the faults.
    fn intrude(&mut self, path: &str, write: bool) {
        let r = if write {
            self.client
                .put(&mut &b"intruder"[..], 8, path, &mut |_| {})
                .map(|_| 8)
        } else {
            get(&self.client, path).map(|d| d.len())
        };
        let what = if write { "overwrite" } else { "read" };
        self.say(format!(
            "{what} {path} (not ours): {:?}",
            r.as_ref().map_err(ToString::to_string)
        ));
        if let Ok(n) = r {
            panic!(
                "{} could {what} {path} ({n} bytes), another user's 0600 file",
                self.name
            );
        }
    }

    fn rm(&mut self, path: &str, state: &State, faulty: bool) {
        let r = self.client.unlink(path);
        self.say(format!(
            "rm {path}: {:?}",
            r.as_ref().err().map(ToString::to_string)
        ));
        let next = match (state, r) {
            (_, Ok(())) => State::Absent,
            (State::Absent, Err(e)) if e.code() == Some(ErrorCode::NoSuchFile) => State::Absent,
            // Only this task touches the file, and it was there: an unlink whose first
            // attempt was applied (its answer lost) and answered "no such file" when sent
            // again was applied twice, not once (issue 42).
            (State::Known(_), Err(e)) if e.code() == Some(ErrorCode::NoSuchFile) => {
                panic!("rm {path}: an existing file answered \"no such file\" (not exactly once)")
            }
            (_, Err(e)) => {
                assert!(faulty, "rm {path} failed with no fault: {e}");
                State::Unknown
            }
        };
        self.model.insert(path.to_string(), next);
    }

    /// Opens `path` for writing (created if absent), writes at offsets and truncates,
    /// reads back through the handle, and flushes.
    fn edit(&mut self, path: &str, state: State, faulty: bool) {
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
        let client = self.client.clone();
        let result = (|| -> Result<(), ClientError> {
            let mut h = client.open_file(path, flags)?;
            for _ in 0..1 + self.rng.next_u32() % 3 {
                if self.rng.next_u32() % 3 == 0 {
                    let size = self.offset(content.len());
                    steps.push(format!("truncate {size}"));
                    client.truncate_file(&mut h, size as u64)?;
                    content.resize(size, 0);
                } else {
                    let at = self.offset(content.len());
                    let mut data = vec![0u8; 1 + self.rng.next_u32() as usize % 9_000];
                    self.rng.fill_bytes(&mut data);
                    steps.push(format!("write {}..{}", at, at + data.len()));
                    client.write_file_at(&mut h, at as u64, &data)?;
                    if content.len() < at + data.len() {
                        content.resize(at + data.len(), 0);
                    }
                    content[at..at + data.len()].copy_from_slice(&data);
                }
                let back = client.read_file_at(&h, 0, content.len())?;
                assert!(
                    back == content,
                    "edit {path}: the handle reads back other bytes"
                );
            }
            client.flush_file(&mut h)
        })();
        self.say(format!(
            "edit {path} [{}]: {:?}",
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
        self.model.insert(path.to_string(), next);
    }

    fn offset(&mut self, len: usize) -> usize {
        match self.rng.next_u32() % 4 {
            0 => len,
            1 => STRIPE_UNIT_BYTES as usize - 100,
            _ => self.rng.next_u32() as usize % (len + 1),
        }
    }

    /// After the faults: every file is read and checked, and one that a failed
    /// operation left unknown is put again; nothing may fail now.
    fn settle(&mut self) {
        for (path, state) in self.model.clone() {
            match state {
                State::Known(want) => {
                    let got = get(&self.client, &path)
                        .unwrap_or_else(|e| panic!("{path} after the faults: {e}"));
                    assert!(got == want, "{path} after the faults: other bytes");
                }
                State::Absent => {
                    let r = get(&self.client, &path);
                    assert_eq!(
                        r.as_ref().err().and_then(|e| e.code()),
                        Some(ErrorCode::NoSuchFile),
                        "{path} was removed: {:?}",
                        r.as_ref().map(Vec::len).map_err(ToString::to_string)
                    )
                }
                State::Unknown => {
                    self.put(&path, false);
                    let State::Known(want) = self.model[&path].clone() else {
                        unreachable!()
                    };
                    let got = get(&self.client, &path)
                        .unwrap_or_else(|e| panic!("{path} put again: {e}"));
                    assert!(got == want, "{path} put again: other bytes");
                }
            }
        }
    }
}

/// The shared file's path (alice shares it with bob, then takes it back, and again).
const SHARED: &str = "/home/u0/shared";
/// How a read that found the file changed under its open (data missing, a block from
/// a newer write) is recorded.
const MISSING: &str = "missing: ";
/// How a read refused for an expired capability is recorded.
const EXPIRED: &str = "expired: ";

/// How a read that failed while the disks were failing reads is recorded (a flipped
/// bit found, a read error): never an error in the model.
const DISK: &str = "disk fault: ";

/// The disks' read faults so far (a read whose span saw them move may fail).
fn read_faults(faults: &StorageFaults) -> u64 {
    let c = faults.counts();
    c.reads_failed + c.reads_flipped
}

/// A read's error as the checks see it; `disk`: read faults struck while it ran.
fn classify(e: &ClientError, disk: bool) -> String {
    match e {
        _ if disk => format!("{DISK}{e}"),
        // (A read that met a new version after handing out bytes of the old one is
        // allowed on the same terms as missing data: only while a put is under way.)
        ClientError::DataMissing(_) | ClientError::Integrity { .. } | ClientError::Replaced(_) => {
            format!("{MISSING}{e}")
        }
        ClientError::Refused(w) if w.code == ErrorCode::CapabilityExpired => {
            format!("{EXPIRED}{e}")
        }
        e => e.to_string(),
    }
}

/// A version of the shared file: its content and when its put began and was
/// acknowledged (`None`: it failed, so it may or may not have been applied).
#[derive(Clone, Debug)]
struct Version {
    data: Vec<u8>,
    began: u128,
    acked: Option<u128>,
}

/// What happened to the shared file and its readers, on the simulated clock.
#[derive(Default, Debug)]
struct Sharing {
    versions: Vec<Version>,
    /// (began, acknowledged or `None`, mode) of each chmod.
    modes: Vec<(u128, Option<u128>, u16)>,
    /// (began, ended, what the reader got: bytes or the error) of each get by bob.
    reads: Vec<(u128, u128, Result<Vec<u8>, String>)>,
    /// (began, ended, bytes read or the error) of each read through bob's long-lived
    /// file handle (it outlives its capability and the versions it was opened at).
    handle_reads: Vec<(u128, u128, Result<usize, String>)>,
    /// The shared file's inodes (alice looks after each put, when `record_ids`).
    shared_ids: std::collections::BTreeSet<u64>,
    record_ids: bool,
}

/// The moment now, totally ordered: the simulated time (ms) in the high half and, in the
/// low, a counter that orders what happens at one instant (tasks run one at a time, so
/// the counter follows their order).
fn now(clock: &std::sync::atomic::AtomicU64) -> u128 {
    static ORDER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let ms = clock.load(std::sync::atomic::Ordering::SeqCst);
    let n = ORDER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (u128::from(ms) << 64) | u128::from(n)
}

/// The simulated time (ms) of a moment from [`now`].
fn millis(moment: u128) -> u64 {
    (moment >> 64) as u64
}

/// Alice's side: puts new versions of the shared file and flips its mode between 0644
/// and 0600 (a revocation by permission change, SPEC M7).
fn share(
    owner: Arc<Client>,
    net: maat_net::memory::MemoryNet,
    clock: Arc<std::sync::atomic::AtomicU64>,
    seed: u64,
    sharing: Arc<Mutex<Sharing>>,
    log: Arc<Mutex<Vec<String>>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5ba7e);
    for step in 0..10 {
        if rng.next_u32() % 3 == 0 && step > 0 {
            let mode = if rng.next_u32() % 2 == 0 {
                0o600
            } else {
                0o644
            };
            let began = now(&clock);
            let r = owner.chmod(SHARED, mode);
            let acked = r.is_ok().then(|| now(&clock));
            log.lock()
                .unwrap()
                .push(format!("alice: chmod {mode:o} {SHARED}: {:?}", r.err()));
            sharing.lock().unwrap().modes.push((began, acked, mode));
        } else {
            let size = SIZES[rng.next_u32() as usize % SIZES.len()];
            let mut data = vec![0u8; size];
            rng.fill_bytes(&mut data);
            let began = now(&clock);
            let r = owner.put(&mut &data[..], size as u64, SHARED, &mut |_| {});
            let acked = r.is_ok().then(|| now(&clock));
            if sharing.lock().unwrap().record_ids {
                if let Ok(stat) = owner.stat(SHARED) {
                    sharing.lock().unwrap().shared_ids.insert(stat.id);
                }
            }
            log.lock()
                .unwrap()
                .push(format!("alice: put {SHARED} {size}: {:?}", r.err()));
            sharing
                .lock()
                .unwrap()
                .versions
                .push(Version { data, began, acked });
        }
        net.sleep(u64::from(rng.next_u32() % 30_000));
    }
}

/// Bob's side: reads the shared file again and again.
fn read_shared(
    reader: Arc<Client>,
    faults: Arc<StorageFaults>,
    net: maat_net::memory::MemoryNet,
    clock: Arc<std::sync::atomic::AtomicU64>,
    seed: u64,
    sharing: Arc<Mutex<Sharing>>,
    log: Arc<Mutex<Vec<String>>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xb0b);
    let mut handle = None;
    for _ in 0..16 {
        // Through a handle kept open (its capability renewed as it goes), every other
        // time.
        if rng.next_u32() % 2 == 0 {
            if handle.is_none() {
                handle = reader.open_file(SHARED, OpenFlags::READ).ok();
            }
            if let Some(h) = &handle {
                let began = now(&clock);
                let faults_before = read_faults(&faults);
                let r = reader.read_file_at(h, 0, 64);
                let ended = now(&clock);
                let disk = read_faults(&faults) != faults_before;
                log.lock().unwrap().push(format!(
                    "bob: handle read {}..{}: {:?}",
                    millis(began),
                    millis(ended),
                    r.as_ref().map(Vec::len).map_err(ToString::to_string)
                ));
                let outcome = match r {
                    Ok(bytes) => Ok(bytes.len()),
                    Err(e) => {
                        handle = None;
                        Err(classify(&e, disk))
                    }
                };
                sharing
                    .lock()
                    .unwrap()
                    .handle_reads
                    .push((began, ended, outcome));
            }
        }
        let began = now(&clock);
        let faults_before = read_faults(&faults);
        let r = get(&reader, SHARED);
        let ended = now(&clock);
        let disk = read_faults(&faults) != faults_before;
        log.lock().unwrap().push(format!(
            "bob: get {SHARED} {}..{}: {:?}",
            millis(began),
            millis(ended),
            r.as_ref().map(Vec::len).map_err(ToString::to_string)
        ));
        sharing
            .lock()
            .unwrap()
            .reads
            .push((began, ended, r.map_err(|e| classify(&e, disk))));
        net.sleep(u64::from(rng.next_u32() % 20_000));
    }
}

impl Sharing {
    /// Whether a read over `began..ended` came more than a lifetime (and a second) after
    /// a chmod to 0600 was acknowledged, with no chmod back to 0644 begun before it ended.
    fn revoked_then(&self, began: u128, ended: u128, lifetime: u64) -> bool {
        self.modes.iter().any(|(_, acked, mode)| {
            *mode == 0o600
                && acked.is_some_and(|a| millis(a) + lifetime + 1_000 < millis(began))
                && !self
                    .modes
                    .iter()
                    .any(|(b, _, m)| *m == 0o644 && *b < ended && acked.is_some_and(|a| *b > a))
        })
    }

    /// Whether every put alice began before `ended` was acknowledged before `began`:
    /// nothing was under way during the read and no failed put left the file half
    /// written.
    fn settled(&self, began: u128, ended: u128) -> bool {
        self.versions
            .iter()
            .filter(|v| v.began < ended)
            .all(|v| v.acked.is_some_and(|a| a < began))
    }

    /// SPEC M7 and freshness, checked on what bob read:
    /// * no read that began one capability lifetime (and a second) after a chmod to 0600
    ///   was acknowledged returns data, unless a chmod back to 0644 began before it
    ///   ended;
    /// * every get's bytes are a version alice put, begun before the read ended, and not
    ///   older than the newest version acknowledged before the read began;
    /// * no read fails for an expired capability, nor finds data missing while nothing
    ///   was under way (no put in flight, none failed).
    fn check(&self, lifetime: u64) -> Result<(), String> {
        for (began, ended, got) in &self.handle_reads {
            let when = format!("{}..{}", millis(*began), millis(*ended));
            match got {
                Ok(n) if *n > 0 && self.revoked_then(*began, *ended, lifetime) => {
                    return Err(format!(
                        "bob read {n} bytes through his handle at {when}, more than a lifetime after alice took the file back"
                    ));
                }
                Err(e) if e.starts_with(EXPIRED) => {
                    return Err(format!(
                        "bob's handle read at {when}: {e} (an open past its lifetime is made again)"
                    ));
                }
                Err(e) if e.starts_with(MISSING) && self.settled(*began, *ended) => {
                    return Err(format!("bob's handle read at {when}: {e}"));
                }
                _ => {}
            }
        }
        for (began, ended, got) in &self.reads {
            let data = match got {
                Ok(data) => data,
                // A file alice keeps reads as missing data only while one of her puts
                // is under way or after one failed (a put replaces stripes before it
                // records the size: no atomic replace), never once every put begun
                // before the read was acknowledged before it.
                Err(e) if e.starts_with(MISSING) => {
                    if self.settled(*began, *ended) {
                        return Err(format!(
                            "bob's get at {}..{}: {e}",
                            millis(*began),
                            millis(*ended)
                        ));
                    }
                    continue;
                }
                Err(_) => continue,
            };
            if self.revoked_then(*began, *ended, lifetime) {
                return Err(format!(
                    "bob read {} bytes at {}..{}, more than a lifetime after alice took the file back",
                    data.len(),
                    millis(*began),
                    millis(*ended)
                ));
            }
            let newest_acked = self
                .versions
                .iter()
                .enumerate()
                .filter(|(_, v)| v.acked.is_some_and(|a| a < *began))
                .map(|(i, _)| i)
                .max();
            let fits = self.versions.iter().enumerate().any(|(i, v)| {
                v.data == *data && v.began < *ended && newest_acked.is_none_or(|n| i >= n)
            });
            if !fits {
                return Err(format!(
                    "bob read {} bytes at {}..{}: not a version alice put then (a stale or invented read); versions: {:?}",
                    data.len(),
                    millis(*began),
                    millis(*ended),
                    self.versions
                        .iter()
                        .map(|v| (v.data.len(), millis(v.began), v.acked.map(millis)))
                        .collect::<Vec<_>>()
                ));
            }
        }
        Ok(())
    }
}

/// SPEC M3 at the OSDs, from outside the MDS: every data access an OSD authorized was
/// by the file's owner, or a read by another user of the shared file while its mode
/// let others read (or less than a lifetime after it stopped). Returns how many
/// accesses were audited, how many of them by another user than the owner, and how many
/// could not be audited (their file removed by then).
fn audit(
    accesses: &[Access],
    sharing: &Sharing,
    lifetime: u64,
) -> Result<(usize, usize, usize), String> {
    let (mut unknown, mut others) = (0, 0);
    for a in accesses {
        let Some((owner, mode)) = a.owner else {
            unknown += 1;
            continue;
        };
        if a.user == owner {
            continue;
        }
        others += 1;
        let what = format!(
            "user {} {} file {} of user {owner} (mode {mode:o}) at osd {}, time {}",
            a.user,
            if a.writes { "wrote" } else { "read" },
            a.file,
            a.osd,
            a.at.0
        );
        if a.writes {
            return Err(format!("{what}: beyond the ACL"));
        }
        if mode & 0o004 != 0 {
            continue;
        }
        let moment = u128::from(a.at.0) << 64;
        if sharing.shared_ids.contains(&a.file) && !sharing.revoked_then(moment, moment, lifetime) {
            continue;
        }
        return Err(format!("{what}: beyond the ACL"));
    }
    Ok((accesses.len() - unknown, others, unknown))
}

/// Runs every owner's `phase` as a task at once; returns the owners back, or the first
/// failure.
fn run_phase(
    sim: &SimCluster,
    owners: Vec<Owner>,
    phase: fn(&mut Owner),
) -> Result<Vec<Owner>, String> {
    let tasks: Vec<_> = owners
        .into_iter()
        .map(|mut o| {
            sim.spawn(o.name.clone(), move || {
                phase(&mut o);
                o
            })
        })
        .collect();
    match sim.run(None) {
        Run::Idle => {}
        other => return Err(format!("the tasks did not all end: {other:?}")),
    }
    let mut back = Vec::new();
    for t in tasks {
        match t.take() {
            Some(Ok(o)) => back.push(o),
            Some(Err(panic)) => return Err(format!("{}: {}", t.name(), panic_text(&panic))),
            None => return Err(format!("{}: no result", t.name())),
        }
    }
    Ok(back)
}

/// One seed, start to end; the transcript digest, or what failed and the log.
fn run_seed(seed: u64, shape_of: fn(u64) -> Shape) -> Result<[u8; 32], (String, Vec<String>)> {
    let shape = shape_of(seed);
    let sim =
        SimCluster::start_instances(seed, shape.osds, LIFETIME_SECS, shape.instances).unwrap();
    if shape.failed_instances_answer {
        sim.mds_instances().keep_failed_answering();
    }
    let log = Arc::new(Mutex::new(vec![format!("seed {seed}: {shape:?}")]));
    let mut admin = sim.admin().unwrap();
    let mut owners = Vec::new();
    let mut clients = Vec::new();
    for u in 0..USERS {
        let name = format!("u{u}");
        let client = Arc::new(sim.user(&mut admin, &name, b"user passphrase").unwrap());
        clients.push(client.clone());
        for t in 0..TASKS_PER_USER {
            owners.push(Owner {
                client: client.clone(),
                model: (0..FILES_PER_TASK)
                    .map(|f| (format!("/home/{name}/t{t}-f{f}"), State::Absent))
                    .collect(),
                rng: ChaCha8Rng::seed_from_u64(
                    seed.wrapping_mul(31).wrapping_add((u * 7 + t) as u64),
                ),
                log: log.clone(),
                name: format!("{name}.t{t}"),
                intrude: None,
            });
        }
    }
    // Each task tries other users' files now and then (new fault model only).
    if shape.intruders {
        let all: Vec<(String, String)> = owners
            .iter()
            .flat_map(|o| {
                let user = o.name.split('.').next().unwrap_or_default().to_string();
                o.model.keys().map(move |p| (user.clone(), p.clone()))
            })
            .collect();
        for (i, o) in owners.iter_mut().enumerate() {
            let me = o.name.split('.').next().unwrap_or_default().to_string();
            let targets: Vec<String> = all
                .iter()
                .filter(|(user, _)| *user != me)
                .map(|(_, p)| p.clone())
                .collect();
            o.intrude = Some((
                targets,
                ChaCha8Rng::seed_from_u64(seed ^ (0x1d0 + i as u64)),
            ));
        }
    }
    // u0 shares one file with u1 (its home open to others, the file 0644 at first).
    clients[0].chmod("/home/u0", 0o755).unwrap();
    clients[0]
        .put(&mut &b"first"[..], 5, SHARED, &mut |_| {})
        .unwrap();
    clients[0].chmod(SHARED, 0o644).unwrap();
    let sharing = Arc::new(Mutex::new(Sharing {
        versions: vec![Version {
            data: b"first".to_vec(),
            began: now(&sim.clock()),
            acked: Some(now(&sim.clock())),
        }],
        record_ids: shape.intruders,
        ..Sharing::default()
    }));
    if shape.intruders {
        let id = clients[0].stat(SHARED).unwrap().id;
        sharing.lock().unwrap().shared_ids.insert(id);
    }
    let mut sharers = Vec::new();
    let reader = Arc::new(sim.client().unwrap());
    reader
        .login(
            "u1",
            maat_client::Credential::Passphrase(b"user passphrase"),
        )
        .unwrap();
    {
        let (c, n, clock, sh, l) = (
            clients[0].clone(),
            sim.net().clone(),
            sim.clock(),
            sharing.clone(),
            log.clone(),
        );
        sharers.push(sim.spawn("alice shares", move || share(c, n, clock, seed, sh, l)));
        let (c, n, clock, sh, l) = (
            reader.clone(),
            sim.net().clone(),
            sim.clock(),
            sharing.clone(),
            log.clone(),
        );
        let faults = sim.storage_faults();
        sharers.push(sim.spawn("bob reads", move || {
            read_shared(c, faults, n, clock, seed, sh, l)
        }));
    }
    sim.net().set_faults(shape.faults);
    sim.storage_faults().set_rates(shape.storage);
    let fail = |why: String| (why, log.lock().unwrap().clone());
    if shape.chaos {
        let (net, clock, l) = (sim.net().clone(), sim.clock(), log.clone());
        let daemons = (shape.osds, sim.mds_instances(), shape.cuts, shape.hangs);
        let _chaos = sim.spawn("chaos", move || chaos(net, clock, daemons, seed, l));
    }
    let owners = run_phase(&sim, owners, |o| {
        for _ in 0..STEPS {
            o.step(true);
        }
    })
    .map_err(fail)?;
    for t in &sharers {
        if let Some(Err(panic)) = t.take() {
            return Err(fail(format!("{}: {}", t.name(), panic_text(&panic))));
        }
    }
    sharing
        .lock()
        .unwrap()
        .check(LIFETIME_SECS * 1000)
        .map_err(fail)?;
    // The faults end; a second past them, the daemons have caught up.
    sim.net().set_faults(Faults::default());
    sim.storage_faults().set_rates(StorageFaultRates::default());
    log.lock().unwrap().push(format!(
        "faults end: disk faults {:?}, MDS restarts {}, changes applied whose commit was reported lost {}",
        sim.storage_faults().counts(),
        sim.mds_restarts(),
        sim.mds_instances().applied_then_failed()
    ));
    let owners = run_phase(&sim, owners, Owner::settle).map_err(fail)?;
    // And without faults nothing fails.
    run_phase(&sim, owners, |o| {
        for _ in 0..4 {
            o.step(false);
        }
    })
    .map_err(fail)?;
    if shape.intruders {
        let (audited, others, unknown) = audit(
            &sim.accesses(),
            &sharing.lock().unwrap(),
            LIFETIME_SECS * 1000,
        )
        .map_err(fail)?;
        log.lock().unwrap().push(format!(
            "access audit: {audited} accesses within the ACL ({others} by another user than the owner), {unknown} to files removed since"
        ));
    }
    if std::env::var("MAAT_SIM_LOG").as_deref() == Ok("all") {
        for line in log.lock().unwrap().iter() {
            eprintln!("  {line}");
        }
    }
    Ok(sim.transcript())
}

fn report(seed: u64, why: &str, log: &[String]) -> String {
    let shown = match std::env::var("MAAT_SIM_LOG").as_deref() {
        Ok("all") => log.len(),
        _ => 16,
    };
    let tail: Vec<&String> = log.iter().rev().take(shown).rev().collect();
    let mut out =
        format!("seed {seed} failed (replay: MAAT_SIM_SEED={seed}): {why}\nlast steps:\n");
    for line in tail {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// Seeds that found a bug under the first fault model (message faults, no disk faults,
/// no intruders), run under it: each replays the run that found its bug.
const FIRST_MODEL_REGRESSIONS: &[u64] = &[1, 3, 1_795_695_013_855_379_319];

/// Seeds that found a bug stay here (each named by what it found; `2..=7` run too).
const REGRESSIONS: &[u64] = &[
    // Seed 3: bob's client kept an open of the shared file (SPEC M5) whose size was
    // older than alice's shorter put: his get said "data missing: stripe 0 not found"
    // for a file that exists (fixed: a get whose stripe is missing asks the MDS again,
    // once). Seed 1 (in the range run by default): bob's file handle sat idle past its
    // capability's lifetime, and every read through it failed "capability expired" for
    // good (fixed: a handle's read with an out-of-date open opens the file again).
    3,
    1,
    // Bob's handle was opened when the file had 70,000 bytes; alice's put cut it to 0,
    // and every read through the handle said "data missing: stripe 0 not found" instead
    // of reading short, as POSIX reads of a file another process cut do (fixed: a
    // handle that wrote nothing reads under the open made again, of its size).
    1_795_695_013_855_379_319,
    // Found by a soak (stop 47): after the faults stopped (an MDS restart among them),
    // the KDS's revocations were 14 s stale and it refused keys NotReady; the client
    // asked each KDS once and gave up, so a put after the faults failed (fixed: a key
    // request that no KDS answered and one refused as not ready waits and asks again).
    1_795_708_511_589_368_694,
    // Found by a soak (stop 53): bob's handle read under faults took 30 s; its open was
    // made again once, and the read under the new open took 20 s more, past that
    // capability's lifetime too, and failed "capability expired" (fixed: a handle's read
    // opens its file again as often as its open expires under it, three times at most).
    1_795_768_784_292_664_129,
    // Found by a soak (stop 55): bob's handle read met an encrypted block that failed to
    // authenticate (alice's put had failed on some copies) three times, each time
    // opening the file again; the fourth read took 20 s under faults and its open
    // expired, with no reopen left, so the read said "capability expired" (fixed:
    // expiries and changed views each have their own budget of reopens).
    1_795_786_300_935_978_245,
    // Found by soaks (stops 54, 55): bob's get of the shared file handed out its first
    // stripes, then met a block sealed under alice's newer put, opened the file again and
    // read the rest of the new version: a torn read, half one version and half the other
    // (fixed: a get whose handed-out stripes changed fails `Replaced`, and `get_whole`
    // starts it over).
    1_795_785_959_017_621_573,
    1_795_786_985_521_578_218,
];

#[test]
fn concurrent_operations_under_message_faults_keep_what_was_acknowledged() {
    let seeds: Vec<u64> = (2..=7).chain(REGRESSIONS.iter().copied()).collect();
    run_seeds(current_shape, seeds);
}

/// Seeds of the several-instances run that found a bug (each named by what it found).
const INSTANCE_REGRESSIONS: &[u64] = &[
    // Found under the first model (an instance whose connection broke answered until its
    // restart), and replayed under it: bob read a stale copy of the shared file: alice's put recorded the copy as missed
    // at one instance, which counted its OSD as down (so the record as known to it),
    // because the OSDs checked in at another instance, which copied only the first
    // OSD's check-in into the store: the others were heard in the millisecond of the
    // copy (fixed: an instance copies the OSDs heard since its last copy, by set).
    1_795_844_521_937_002_315,
    // Under the current model: an instance whose database connection broke went on answering "internal error"
    // until the periodic work restarted it, so a client's read after the faults failed
    // (the simulator's fault, fixed there: the instance exits at once, as the daemon
    // does, and clients move to another).
    1_795_844_823_977_633_497,
];

/// A seed's shape with three MDS instances over one shared database (issue 42), the
/// chaos task on (it crashes instances too) and intruders.
fn instances_shape(seed: u64) -> Shape {
    Shape {
        instances: 3,
        chaos: true,
        intruders: true,
        failed_instances_answer: FIRST_INSTANCES_MODEL.contains(&seed),
        hangs: !INSTANCE_REGRESSIONS.contains(&seed),
        ..shape(seed)
    }
}

/// Seeds found under the first several-instances model, replayed under it.
const FIRST_INSTANCES_MODEL: &[u64] = &[1_795_844_521_937_002_315];

/// Issue 42 in the simulator: the same tasks, model and audit, with three MDS
/// instances over one shared database whose commits fail (half of them after they were
/// applied: the instance dies not knowing), instances crashed and restarted, and answers
/// lost; clients move between instances and send changes again as `Once`.
#[test]
fn several_mds_instances_under_faults_keep_what_was_acknowledged() {
    let seeds: Vec<u64> = (2..=4)
        .chain(INSTANCE_REGRESSIONS.iter().copied())
        .collect();
    run_seeds(instances_shape, seeds);
}

/// Runs `seeds` (or `MAAT_SIM_SEED`, or random seeds for `MAAT_SIM_SOAK` seconds) under
/// the shapes `shape_of` draws.
fn run_seeds(shape_of: fn(u64) -> Shape, seeds: Vec<u64>) {
    if let Ok(secs) = std::env::var("MAAT_SIM_SOAK") {
        let secs: u64 = secs.parse().expect("MAAT_SIM_SOAK: seconds");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut ran = 0;
        while std::time::Instant::now() < until {
            if let Err((why, log)) = run_seed(seed, shape_of) {
                panic!("{}", report(seed, &why, &log));
            }
            ran += 1;
            seed = seed.wrapping_add(1);
        }
        eprintln!("soak: {ran} seeds passed");
        return;
    }
    let seeds: Vec<u64> = match std::env::var("MAAT_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("MAAT_SIM_SEED: a number")],
        Err(_) => {
            let mut seeds = seeds;
            seeds.sort_unstable();
            seeds.dedup();
            seeds
        }
    };
    for (i, seed) in seeds.into_iter().enumerate() {
        let first = run_seed(seed, shape_of)
            .unwrap_or_else(|(why, log)| panic!("{}", report(seed, &why, &log)));
        // The same seed gives the same frames: shown on the first two seeds (every seed
        // run twice doubled this test's time in CI for a property of the simulator, not of
        // the seed; `MAAT_SIM_SEED=N` still runs one seed twice).
        if i < 2 {
            let again = run_seed(seed, shape_of).unwrap_or_else(|(why, log)| {
                panic!("{}", report(seed, &format!("second run: {why}"), &log))
            });
            assert_eq!(first, again, "seed {seed} did not repeat its transcript");
        }
    }
}
