#![allow(clippy::indexing_slicing, clippy::unwrap_used)]
use super::*;
use proptest::prelude::*;

const BOOT: UnixMillis = UnixMillis(1_000_000);
const NOW: UnixMillis = UnixMillis(1_010_000);

fn nonce(stream: u64, counter: u64) -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    n[..8].copy_from_slice(&stream.to_be_bytes());
    n[8..].copy_from_slice(&counter.to_be_bytes());
    n
}

#[test]
fn replay_window_refuses_replays_stale_and_pre_boot() {
    let boot = UnixMillis(1_000_000);
    let mut w = ReplayWindow::new(boot);
    let sid = [1u8; 16];
    let n = [2u8; 16];
    let now = UnixMillis(1_010_000);
    assert_eq!(w.check_and_record(&sid, &n, now, now), Ok(()));
    assert_eq!(
        w.check_and_record(&sid, &n, now, now),
        Err(Freshness::Replayed)
    );
    assert_eq!(
        w.check_and_record(&sid, &[3u8; 16], UnixMillis(999_999), now),
        Err(Freshness::Stale)
    );
    let later = UnixMillis(now.0 + REPLAY_WINDOW_MILLIS + 1);
    assert_eq!(
        w.check_and_record(&sid, &[4u8; 16], now, later),
        Err(Freshness::Stale)
    );
    // After the window passes the old nonce is forgotten, but it would be stale anyway.
    assert_eq!(w.check_and_record(&sid, &[5u8; 16], later, later), Ok(()));
    assert_eq!(w.len(), 1);
    // Future-dated beyond the skew, and inside the boot grace: both stale.
    let future = UnixMillis(later.0 + FUTURE_SKEW_MILLIS + 1);
    assert_eq!(
        w.check_and_record(&sid, &[6u8; 16], future, later),
        Err(Freshness::Stale)
    );
    assert_eq!(
        w.check_time(
            UnixMillis(boot.0 + FUTURE_SKEW_MILLIS - 1),
            UnixMillis(boot.0 + 1000)
        ),
        Err(Freshness::Stale)
    );
    // A fresh request to a receiver younger than the skew: not ready, retry.
    assert_eq!(
        ReplayWindow::new(boot).check_time(UnixMillis(boot.0 + 100), UnixMillis(boot.0 + 100)),
        Err(Freshness::JustStarted)
    );
    // A request captured just before a restart cannot pass after it: its timestamp is
    // at most capture + skew, below the new boot + skew.
    let captured_at = UnixMillis(2_000_000);
    let ts = UnixMillis(captured_at.0 + FUTURE_SKEW_MILLIS);
    let restarted = ReplayWindow::new(UnixMillis(captured_at.0 + 1));
    assert_eq!(
        restarted.check_time(ts, UnixMillis(captured_at.0 + 5000)),
        Err(Freshness::Stale)
    );
    // A clock stepping back does not resurrect forgotten nonces.
    let mut w = ReplayWindow::new(boot);
    let t1 = UnixMillis(1_100_000);
    assert_eq!(w.check_and_record(&sid, &[7u8; 16], t1, t1), Ok(()));
    let t2 = UnixMillis(t1.0 + REPLAY_WINDOW_MILLIS + 10);
    assert_eq!(w.check_and_record(&sid, &[8u8; 16], t2, t2), Ok(()));
    let back = UnixMillis(t1.0 + 10);
    assert_eq!(
        w.check_and_record(&sid, &[7u8; 16], t1, back),
        Err(Freshness::Stale)
    );
}

#[test]
fn one_session_cannot_fill_the_window() {
    let boot = UnixMillis(1_000_000);
    let now = UnixMillis(1_010_000);
    let mut w = ReplayWindow::new(boot);
    let mut nonce = [0u8; 16];
    for i in 0..REPLAY_ENTRIES_PER_SESSION_MAX {
        nonce[..4].copy_from_slice(&i.to_be_bytes());
        assert_eq!(w.check_and_record(&[1; 16], &nonce, now, now), Ok(()));
    }
    nonce[..4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        w.check_and_record(&[1; 16], &nonce, now, now),
        Err(Freshness::Busy)
    );
    // Another session is unaffected, and the first recovers once its nonces age out.
    assert_eq!(w.check_and_record(&[2; 16], &nonce, now, now), Ok(()));
    let later = UnixMillis(now.0 + REPLAY_WINDOW_MILLIS + 1);
    assert_eq!(w.check_and_record(&[1; 16], &nonce, later, later), Ok(()));
}

#[test]
fn a_sequenced_stream_costs_one_entry_however_many_requests_it_carries() {
    // More requests in one window than a session could once have remembered (the old
    // per-session cap, which refused a busy client within half a minute).
    let mut w = ReplayWindow::new(BOOT);
    let sid = [1u8; 16];
    let mut stream = NonceStream::new(7u64.to_be_bytes());
    let n = u64::from(REPLAY_ENTRIES_PER_SESSION_MAX) + 1000;
    let mut sent = Vec::new();
    for i in 0..n {
        let nonce = stream.next_nonce();
        let at = UnixMillis(NOW.0 + i / 10_000);
        assert_eq!(
            w.check_and_record(&sid, &nonce, at, at),
            Ok(()),
            "request {i}"
        );
        if i % 9_973 == 0 || i + 3 >= n {
            sent.push((nonce, at));
        }
    }
    assert_eq!(w.len(), 1);
    // Every one of them, sent again, is refused: the last few as replayed, older ones
    // as too far behind.
    let at = UnixMillis(NOW.0 + n / 10_000);
    for (nonce, ts) in sent {
        let r = w.check_and_record(&sid, &nonce, ts, at);
        assert!(
            matches!(r, Err(Freshness::Replayed | Freshness::Behind)),
            "replay of {nonce:?} gave {r:?}"
        );
    }
}

#[test]
fn requests_reordered_a_little_pass_once_and_far_behind_are_refused() {
    let mut w = ReplayWindow::new(BOOT);
    let sid = [1u8; 16];
    for c in [10, 12, 11, 70, 13] {
        assert_eq!(
            w.check_and_record(&sid, &nonce(5, c), NOW, NOW),
            Ok(()),
            "{c}"
        );
    }
    for c in [10, 11, 12, 13, 70] {
        assert_eq!(
            w.check_and_record(&sid, &nonce(5, c), NOW, NOW),
            Err(Freshness::Replayed),
            "{c}"
        );
    }
    // 70 is the highest: 70 - 64 = 6 and below are too far behind (seen or not).
    assert_eq!(STREAM_REORDER_MAX, 64);
    assert_eq!(
        w.check_and_record(&sid, &nonce(5, 6), NOW, NOW),
        Err(Freshness::Behind)
    );
    assert_eq!(w.check_and_record(&sid, &nonce(5, 7), NOW, NOW), Ok(()));
    // A jump forward by more than the reorder span forgets nothing it must remember.
    assert_eq!(w.check_and_record(&sid, &nonce(5, 1_000), NOW, NOW), Ok(()));
    assert_eq!(
        w.check_and_record(&sid, &nonce(5, 70), NOW, NOW),
        Err(Freshness::Behind)
    );
    assert_eq!(
        w.check_and_record(&sid, &nonce(5, 1_000), NOW, NOW),
        Err(Freshness::Replayed)
    );
    // The same stream and counter under another session, or another stream: new.
    assert_eq!(
        w.check_and_record(&[2; 16], &nonce(5, 1_000), NOW, NOW),
        Ok(())
    );
    assert_eq!(w.check_and_record(&sid, &nonce(6, 1_000), NOW, NOW), Ok(()));
    assert_eq!(w.len(), 3);
}

#[test]
fn a_stream_in_use_is_kept_and_an_idle_one_is_forgotten_once_out_of_the_window() {
    let mut w = ReplayWindow::new(BOOT);
    let sid = [1u8; 16];
    let busy_first = nonce(1, 1);
    assert_eq!(w.check_and_record(&sid, &busy_first, NOW, NOW), Ok(()));
    assert_eq!(w.check_and_record(&sid, &nonce(2, 1), NOW, NOW), Ok(()));
    // Stream 1 keeps sending past the window; stream 2 falls silent.
    let mut t = NOW;
    for c in 2..40 {
        t = UnixMillis(t.0 + 1_000);
        assert_eq!(w.check_and_record(&sid, &nonce(1, c), t, t), Ok(()));
    }
    assert_eq!(
        w.len(),
        1,
        "the idle stream is forgotten, the busy one kept"
    );
    // The busy stream still refuses what it carried (its first request is stale by now,
    // a recent one replayed).
    assert_eq!(
        w.check_and_record(&sid, &busy_first, NOW, t),
        Err(Freshness::Stale)
    );
    assert_eq!(
        w.check_and_record(&sid, &nonce(1, 39), t, t),
        Err(Freshness::Replayed)
    );
}

#[test]
fn counters_at_the_edges_of_the_map_and_of_u64() {
    let mut w = ReplayWindow::new(BOOT);
    let sid = [1u8; 16];
    // Counter 0 and a jump of exactly 63: the old highest sits in the map's last bit.
    assert_eq!(w.check_and_record(&sid, &nonce(3, 0), NOW, NOW), Ok(()));
    assert_eq!(w.check_and_record(&sid, &nonce(3, 63), NOW, NOW), Ok(()));
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, 0), NOW, NOW),
        Err(Freshness::Replayed)
    );
    // One more step pushes counter 0 out: too far behind.
    assert_eq!(w.check_and_record(&sid, &nonce(3, 64), NOW, NOW), Ok(()));
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, 0), NOW, NOW),
        Err(Freshness::Behind)
    );
    assert_eq!(w.check_and_record(&sid, &nonce(3, 1), NOW, NOW), Ok(()));
    // The largest counter once, then never again, and nothing overflows.
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, u64::MAX), NOW, NOW),
        Ok(())
    );
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, u64::MAX), NOW, NOW),
        Err(Freshness::Replayed)
    );
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, u64::MAX - 63), NOW, NOW),
        Ok(())
    );
    assert_eq!(
        w.check_and_record(&sid, &nonce(3, 64), NOW, NOW),
        Err(Freshness::Behind)
    );
}

/// One step of the property below.
#[derive(Debug, Clone)]
enum Step {
    /// A request on (session, stream, counter), dated `now - age` (a negative age: ahead).
    Send(u8, u64, u64, i64),
    /// An exact copy of the n-th accepted request (modulo their number).
    Replay(usize),
    /// The clock moves on.
    Wait(u64),
    /// The clock steps back.
    ClockBack(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..2, 0u64..3, 0u64..200, -600i64..31_000)
            .prop_map(|(s, st, c, age)| Step::Send(s, st, c, age)),
        3 => any::<usize>().prop_map(Step::Replay),
        2 => (0u64..12_000).prop_map(Step::Wait),
        1 => (0u64..40_000).prop_map(Step::ClockBack),
    ]
}

proptest! {
    /// Whatever senders do with their nonces (in order, reordered, repeated, streams
    /// shared, dated late or early), no (session, nonce) is accepted twice while an
    /// earlier acceptance of it is inside the window, and an exact copy of an accepted
    /// request is always refused.
    #[test]
    fn no_request_is_accepted_twice(steps in proptest::collection::vec(step(), 1..300)) {
        let mut w = ReplayWindow::new(BOOT);
        let mut now = NOW;
        let mut accepted: Vec<([u8; 16], [u8; NONCE_BYTES], UnixMillis)> = Vec::new();
        for s in steps {
            match s {
                Step::Send(session, stream, counter, age) => {
                    let sid = [session; 16];
                    let n = nonce(stream, counter);
                    let ts = UnixMillis(now.0.saturating_add_signed(-age));
                    let r = w.check_and_record(&sid, &n, ts, now);
                    // Judged against the latest time the window itself has seen.
                    let latest = w.latest_now;
                    let earlier = accepted.iter().any(|(a, b, t)| {
                        *a == sid && *b == n && latest.0.saturating_sub(t.0) <= REPLAY_WINDOW_MILLIS
                    });
                    if r.is_ok() {
                        prop_assert!(!earlier, "{n:?} accepted twice at {now:?}");
                        accepted.push((sid, n, ts));
                    }
                }
                Step::Replay(i) if !accepted.is_empty() => {
                    let (sid, n, ts) = accepted[i % accepted.len()];
                    let r = w.check_and_record(&sid, &n, ts, now);
                    prop_assert!(r.is_err(), "replay of {n:?} (dated {ts:?}) accepted at {now:?}");
                }
                Step::Replay(_) => {}
                Step::Wait(ms) => now = UnixMillis(now.0 + ms),
                Step::ClockBack(ms) => now = UnixMillis(now.0.saturating_sub(ms).max(BOOT.0)),
            }
        }
    }
}
