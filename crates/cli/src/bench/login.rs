//! `maat bench login-flood` (SPEC T6): what a forged login first message costs the MDS
//! with anti-clogging cookies, next to a real one, measured as the MDS process's own CPU
//! time (from /proc): one at a time (an answer awaited before the next is sent: a wake-up
//! of the MDS each) and as a flood sends them (many in flight); and a real login timed
//! with and without a flood running.

use super::{counter, cpu_secs, LocalCluster};
use anyhow::{anyhow, bail, Context, Result};
use maat_client::{Client, Credential, Home};
use maat_net::Connection;
use maat_proto::msg::{self, MdsPlainRequest, MdsPlainResponse, WireError};
use maat_proto::wire::FrameType;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Forged first messages a flooder keeps in flight on its connection.
const FLOOD_WINDOW: u64 = 64;

fn mds_pid(data: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(data.join("mds.pid"))
        .context("reading the MDS pid file")?
        .trim()
        .to_string())
}

fn start_message(ke1: Vec<u8>, nonce: [u8; 16], cookie: Option<[u8; 32]>) -> Result<Vec<u8>> {
    Ok(msg::encode(&MdsPlainRequest::OpaqueLoginStart {
        name: "admin".into(),
        ke1,
        signing_key: [1; 32],
        sealing_key: [2; 32],
        nonce,
        cookie,
    })?)
}

fn ask(conn: &mut Connection, message: &[u8]) -> Result<MdsPlainResponse> {
    let (t, answer) = conn.call(FrameType::Plain, message)?;
    if t != FrameType::Plain {
        bail!("the MDS answered a {t:?} frame");
    }
    let r: std::result::Result<MdsPlainResponse, WireError> = msg::decode(&answer)?;
    r.map_err(|e| anyhow!("refused: {e}"))
}

/// A forged first message: no cookie, a KE1 of the right length made of noise.
fn forged(i: u64) -> Result<Vec<u8>> {
    let mut nonce = [0u8; 16];
    if let Some(head) = nonce.get_mut(..8) {
        head.copy_from_slice(&i.to_be_bytes());
    }
    start_message(vec![0x5a; 96], nonce, None)
}

fn timed_login(cluster: &LocalCluster) -> Result<Duration> {
    let home = Home::new(cluster.data.join("admin"));
    let (name, key) = home
        .identity()?
        .ok_or_else(|| anyhow!("no admin identity"))?;
    let c = Client::new(cluster.file.clone(), None)?;
    let t0 = Instant::now();
    c.login(&name, Credential::Key(key))?;
    Ok(t0.elapsed())
}

/// The three ways first messages reach the MDS, each timed as one phase.
#[derive(Clone, Copy)]
enum Phase {
    /// Forged first messages, one at a time: each is answered with a cookie.
    Forged,
    /// The same as a flood sends them: many in flight on the connection, no wait for each
    /// answer (the MDS answers a batch that arrived together in one write).
    Flood,
    /// Real first messages with a valid cookie: each costs the MDS a KE2.
    Real,
}

const PHASES: [Phase; 3] = [Phase::Forged, Phase::Flood, Phase::Real];

/// What the phases of every round added up to: wall seconds and MDS CPU seconds.
#[derive(Default)]
struct Totals {
    wall: [f64; 3],
    cpu: [f64; 3],
    /// Cookies the MDS counted during the forged and flood phases.
    cookies: u64,
}

/// Runs `phase` once (`messages` first messages, round `round`), adding to `totals`.
fn run_phase(
    cluster: &LocalCluster,
    conn: &mut Connection,
    pid: &str,
    phase: Phase,
    messages: u32,
    round: u64,
    totals: &mut Totals,
) -> Result<()> {
    // Distinct messages in every phase and round.
    let base = round << 48;
    let mut admin = cluster.admin()?;
    let cookies0 = counter(&mut admin, "mds", "login_cookies_sent")?;
    // What a real phase sends is made before the clock starts (a KE1's cost is the
    // client's), and its cookie fetched.
    let mut ke1s = Vec::new();
    let mut cookie = None;
    if let Phase::Real = phase {
        let mut rng = maat_crypto::OsRng;
        for _ in 0..messages {
            ke1s.push(maat_crypto::pake::client_login_start(b"flood", &mut rng)?.1);
        }
        cookie = match ask(
            conn,
            &start_message(ke1s.first().cloned().unwrap_or_default(), [0xee; 16], None)?,
        )? {
            MdsPlainResponse::LoginCookie { cookie } => Some(cookie),
            other => bail!("no cookie: {other:?}"),
        };
    }
    let cpu0 = cpu_secs(pid)?;
    let t0 = Instant::now();
    match phase {
        Phase::Forged => {
            for i in 0..u64::from(messages) {
                match ask(conn, &forged(base | i)?)? {
                    MdsPlainResponse::LoginCookie { .. } => {}
                    other => bail!("a forged first message got {other:?}"),
                }
            }
        }
        Phase::Flood => {
            let mut sent_so_far = 0u64;
            while sent_so_far < u64::from(messages) {
                let window = (u64::from(messages) - sent_so_far).min(FLOOD_WINDOW);
                for i in sent_so_far..sent_so_far + window {
                    conn.send(FrameType::Plain, &forged(base | 1 << 32 | i)?)?;
                }
                for _ in 0..window {
                    let (t, answer) = conn.receive()?;
                    let r: std::result::Result<MdsPlainResponse, WireError> = msg::decode(&answer)?;
                    match (t, r) {
                        (FrameType::Plain, Ok(MdsPlainResponse::LoginCookie { .. })) => {}
                        other => bail!("a forged first message in a flood got {other:?}"),
                    }
                }
                sent_so_far += window;
            }
        }
        Phase::Real => {
            for (i, ke1) in ke1s.into_iter().enumerate() {
                let mut nonce = [0xc0; 16];
                if let Some(head) = nonce.get_mut(..8) {
                    head.copy_from_slice(&(base | i as u64).to_be_bytes());
                }
                match ask(conn, &start_message(ke1, nonce, cookie)?)? {
                    MdsPlainResponse::OpaqueLoginChallenge { .. } => {}
                    other => bail!("a first message with a cookie got {other:?}"),
                }
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid)? - cpu0;
    let k = phase as usize;
    if let (Some(w), Some(c)) = (totals.wall.get_mut(k), totals.cpu.get_mut(k)) {
        *w += wall;
        *c += cpu;
    }
    if !matches!(phase, Phase::Real) {
        totals.cookies +=
            counter(&mut admin, "mds", "login_cookies_sent")?.saturating_sub(cookies0);
    }
    Ok(())
}

/// `maat bench login-flood`.
pub fn run_login_flood(
    messages: u32,
    rounds: u32,
    flooders: u32,
    data: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    if messages == 0 || rounds == 0 {
        bail!("--messages and --rounds must be at least 1");
    }
    let cluster = LocalCluster::start(data)?;
    let pid = mds_pid(&cluster.data)?;
    let mut conn = Connection::new(cluster.file.mds.clone());
    // The phases take turns, in reverse order every other round, so that none always
    // runs on a colder or warmer MDS than the others.
    let mut totals = Totals::default();
    for round in 0..rounds {
        let mut order = PHASES;
        if round % 2 == 1 {
            order.reverse();
        }
        for phase in order {
            run_phase(
                &cluster,
                &mut conn,
                &pid,
                phase,
                messages,
                u64::from(round),
                &mut totals,
            )?;
        }
    }
    let Totals { wall, cpu, cookies } = totals;
    let [forged_wall, flood_wall, real_wall] = wall;
    let [forged_cpu, flood_cpu, real_cpu] = cpu;

    // A real login, alone and during a flood of forged first messages.
    let quiet = timed_login(&cluster)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for f in 0..flooders {
        let stop = stop.clone();
        let sent = sent.clone();
        let address = cluster.file.mds.clone();
        handles.push(std::thread::spawn(move || -> Result<()> {
            let mut conn = Connection::new(address);
            let mut i = u64::from(f) << 40;
            while !stop.load(Ordering::Relaxed) {
                ask(&mut conn, &forged(i)?)?;
                sent.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok(())
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let flooded = timed_login(&cluster);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| anyhow!("flooder panicked"))??;
    }
    let flooded = flooded?;

    let n = f64::from(messages) * f64::from(rounds);
    let forged_us = forged_cpu * 1e6 / n;
    let flood_us = flood_cpu * 1e6 / n;
    let real_us = real_cpu * 1e6 / n;
    if json {
        say!(
            "{}",
            serde_json::json!({
                "messages": messages,
                "rounds": rounds,
                "mds_cookies_forged": cookies,
                "forged_mds_cpu_us": forged_us,
                "forged_per_s": n / forged_wall,
                "flood_mds_cpu_us": flood_us,
                "flood_per_s": n / flood_wall,
                "flood_mds_cpu_s": flood_cpu,
                "with_cookie_mds_cpu_us": real_us,
                "with_cookie_per_s": n / real_wall,
                "forged_over_with_cookie": forged_us / real_us,
                "login_quiet_ms": quiet.as_secs_f64() * 1e3,
                "login_during_flood_ms": flooded.as_secs_f64() * 1e3,
                "flood_messages_sent": sent.load(Ordering::Relaxed),
            })
        );
    } else {
        say!(
            "login first messages, {messages} of each kind in each of {rounds} round(s) (the kinds \
             in alternating order), MDS CPU from /proc (the MDS answered {cookies} cookies to the {} \
             forged ones)",
            2 * u64::from(messages) * u64::from(rounds)
        );
        say!(
            "  forged, no cookie:   {forged_us:8.1} µs of MDS CPU each ({:.0}/s over one connection)",
            n / forged_wall
        );
        say!(
            "  forged, as a flood:  {flood_us:8.1} µs of MDS CPU each ({:.0}/s, {FLOOD_WINDOW} in flight): \
             the {} cost {flood_cpu:.3} s of MDS CPU",
            n / flood_wall,
            u64::from(messages) * u64::from(rounds)
        );
        say!(
            "  with a valid cookie: {real_us:8.1} µs of MDS CPU each ({:.0}/s): OPRF + 3DH + seal",
            n / real_wall
        );
        say!("  forged / real: {:.3}", forged_us / real_us);
        // /proc counts CPU in clock ticks: a phase under a few ticks reads as 0 or 1.
        let tick = 1.0 / rustix::param::clock_ticks_per_second() as f64;
        if forged_cpu.min(flood_cpu).min(real_cpu) < 10.0 * tick {
            say!(
                "  (a phase used under 10 of /proc's {:.0} ms ticks of MDS CPU: its figure is \
                 that coarse; more --messages make it finer)",
                tick * 1e3
            );
        }
        say!(
            "a real login: {:.1} ms alone, {:.1} ms during a flood from {flooders} senders ({} forged messages sent)",
            quiet.as_secs_f64() * 1e3,
            flooded.as_secs_f64() * 1e3,
            sent.load(Ordering::Relaxed)
        );
    }
    Ok(())
}
