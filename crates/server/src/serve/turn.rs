//! A thread's turn on a connection: it answers the frames that are here and those that
//! follow back to back, in order, and gives the connection back to the accept loop as soon
//! as the peer pauses ([`LINGER`]) or a frame arrives slowly ([`WORKER_FRAME_PATIENCE`]).

use super::conn::{extent, Conn, Extent};
use super::{Answer, Handler, Shutdown};
use crate::limits::{LINGER, WORKER_FRAME_PATIENCE};
use maat_net::{write_frame_from_file, write_frame_parts_after, NetError, READ_AHEAD_BYTES};
use maat_proto::msg::WireError;
use maat_proto::wire::{FrameHead, FrameType};
use std::io::{ErrorKind, Read, Write};
use std::time::Instant;

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// Everything here was answered and the peer paused: the connection waits in the
    /// accept loop for its next frame.
    Idle,
    /// A frame is arriving slowly: the accept loop reads the rest, under its deadline.
    Slow,
    /// The peer closed it, it failed, or a frame could not be parsed (answered with a
    /// refusal): it is closed.
    Closed,
}

/// An answer this small may be held back for the next (see [`take_turn`]).
const ANSWER_HELD_BYTES_MAX: usize = 16 * 1024;
/// At most this much of answers is held back before they are written.
const ANSWERS_HELD_BYTES_MAX: usize = 64 * 1024;

/// Whether a request of type `request` answered with `answer` shows that the peer holds a
/// session key (the answer is sealed or MACed under it, which the daemon does only for a
/// request that verified).
fn proves_a_key(request: FrameType, answer: FrameType) -> bool {
    matches!(
        request,
        FrameType::Request | FrameType::SecRequest | FrameType::T10Request
    ) && matches!(answer, FrameType::Response | FrameType::SecResponse)
}

/// Serves `conn` until it pauses, slows or ends. Requests are answered in order, each in
/// its request's version and with its id; a small answer is held back while the next
/// request is already here whole, so that answers to a pipelined sender go out in one
/// write (never for a request still arriving: its sender may be waiting for this answer).
pub(super) fn take_turn(
    conn: &mut Conn,
    handler: &Handler,
    shutdown: &Shutdown,
    scratch: &mut [u8; READ_AHEAD_BYTES],
) -> Turn {
    let mut pending: Vec<u8> = Vec::new();
    let turn = loop {
        if shutdown.is_set() {
            break Turn::Closed;
        }
        let found = match extent(&conn.buf) {
            Ok(found) => found,
            Err(e) => {
                // A bad header leaves the stream unsynchronized: answer, then close.
                let refusal = WireError::from(e);
                tracing::warn!(peer = %conn.from, code = ?refusal.code, detail = %refusal.detail, "refused a frame");
                let (t, answer) = crate::refusal_frame(&refusal);
                let _ = write_frame_parts_after(
                    &mut &conn.stream,
                    &pending,
                    FrameHead::v1(t),
                    &[&answer],
                );
                return Turn::Closed;
            }
        };
        let total = match found {
            Extent::Whole {
                head,
                header,
                total,
            } => {
                if answer_one(conn, handler, &mut pending, head, header, total).is_err() {
                    break Turn::Closed;
                }
                continue;
            }
            Extent::Partial { total } => total,
        };
        // The next frame is not here whole: what is held goes out before any wait.
        if !pending.is_empty() {
            if conn.stream.write_all(&pending).is_err() {
                break Turn::Closed;
            }
            pending.clear();
        }
        let now = Instant::now();
        conn.frame_begun(now);
        if conn
            .frame_began
            .is_some_and(|began| now.duration_since(began) > WORKER_FRAME_PATIENCE)
        {
            break Turn::Slow;
        }
        match read_more(conn, total, scratch) {
            Ok(0) => {
                if !conn.buf.is_empty() {
                    tracing::warn!(peer = %conn.from, "refused a truncated frame");
                }
                break Turn::Closed;
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break if conn.buf.is_empty() {
                    Turn::Idle
                } else {
                    Turn::Slow
                };
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break Turn::Closed,
        }
    };
    if !pending.is_empty() && conn.stream.write_all(&pending).is_err() {
        return Turn::Closed;
    }
    conn.frame_begun(Instant::now());
    conn.shrink();
    turn
}

/// Reads what comes next: the rest of a payload longer than the read-ahead straight into
/// the frame's buffer (no copy; the bytes stay if the peer pauses), otherwise one read of
/// up to the read-ahead. Each read waits at most [`LINGER`] (the socket's read timeout).
fn read_more(
    conn: &mut Conn,
    total: Option<usize>,
    scratch: &mut [u8; READ_AHEAD_BYTES],
) -> std::io::Result<usize> {
    if let Some(total) = total {
        let rest = total.saturating_sub(conn.buf.len());
        if rest > READ_AHEAD_BYTES {
            conn.buf.reserve_exact(rest);
            let before = conn.buf.len();
            // `read_to_end` keeps what it read when a read times out.
            let read = (&conn.stream).take(rest as u64).read_to_end(&mut conn.buf);
            let got = conn.buf.len() - before;
            return match read {
                Ok(_) => Ok(got),
                Err(_) if got > 0 => Ok(got),
                Err(e) => Err(e),
            };
        }
    }
    let n = (&conn.stream).read(scratch)?;
    conn.buf
        .extend_from_slice(scratch.get(..n).unwrap_or_default());
    Ok(n)
}

/// Answers the whole frame at the start of `conn.buf` (`header` bytes of header, `total`
/// in all) and drops it from the buffer.
fn answer_one(
    conn: &mut Conn,
    handler: &Handler,
    pending: &mut Vec<u8>,
    head: FrameHead,
    header: usize,
    total: usize,
) -> Result<(), NetError> {
    let payload = conn.buf.get(header..total).unwrap_or_default();
    let answer: Answer = handler(&conn.peer, head.frame_type, payload);
    conn.buf.drain(..total.min(conn.buf.len()));
    conn.frame_began = None;
    if answer.frame_type == FrameType::Refusal {
        if let Some(Ok(e)) = answer
            .parts
            .first()
            .map(|p| maat_proto::msg::decode::<WireError>(p))
        {
            tracing::info!(peer = %conn.from, code = ?e.code, detail = %e.detail, "refused");
        }
    } else if answer.proves || proves_a_key(head.frame_type, answer.frame_type) {
        conn.proven = true;
    }
    let parts: Vec<&[u8]> = answer.parts.iter().map(Vec::as_slice).collect();
    // The answer goes back in its request's version, with its id.
    let head = head.answer(answer.frame_type);
    let small = parts.iter().map(|p| p.len()).sum::<usize>() <= ANSWER_HELD_BYTES_MAX;
    match &answer.file {
        None if small
            && pending.len() < ANSWERS_HELD_BYTES_MAX
            && maat_net::starts_with_whole_frame(&conn.buf) =>
        {
            maat_net::append_frame(pending, head, &parts)
        }
        None => {
            let sent = write_frame_parts_after(&mut &conn.stream, pending, head, &parts);
            pending.clear();
            sent
        }
        Some((index, r)) => {
            let (before, after) = parts.split_at((*index).min(parts.len()));
            let earlier = conn.stream.write_all(pending).map_err(NetError::from);
            pending.clear();
            earlier.and_then(|()| {
                write_frame_from_file(
                    &conn.stream,
                    head,
                    before,
                    (&r.file, r.offset, r.len),
                    after,
                )
            })
        }
    }
}

/// The read timeout a served socket keeps for its life.
pub(super) const READ_TIMEOUT: std::time::Duration = LINGER;
