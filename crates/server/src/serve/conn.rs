//! One connection as the accept loop and the threads that serve it hand it between them:
//! the socket, whom it is from, the bytes of the next frame read so far, and whether it has
//! proven a key. And the one rule for where a frame ends.

use crate::limits::FRAME_BYTES_PER_SECOND_MIN;
use maat_proto::wire::{self, FrameHead, FRAME_HEADER_START_BYTES};
use maat_proto::ProtoError;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A connection and what has been read of it.
pub(super) struct Conn {
    /// The socket (blocking, reads time out after [`crate::limits::LINGER`]).
    pub(super) stream: TcpStream,
    /// The peer's address.
    pub(super) from: SocketAddr,
    /// The peer's IP address as bytes (no port), as handlers take it.
    pub(super) peer: Vec<u8>,
    /// Bytes read and not yet answered: the start of the next frame, or several frames.
    pub(super) buf: Vec<u8>,
    /// When the first byte of the frame at the start of `buf` arrived.
    pub(super) frame_began: Option<Instant>,
    /// Whether a request on it was answered under a session key (it proved one).
    pub(super) proven: bool,
}

impl Conn {
    /// A connection just accepted from `from`.
    pub(super) fn new(stream: TcpStream, from: SocketAddr) -> Self {
        let peer = match from.ip() {
            std::net::IpAddr::V4(ip) => ip.octets().to_vec(),
            std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
        };
        Conn {
            stream,
            from,
            peer,
            buf: Vec::new(),
            frame_began: None,
            proven: false,
        }
    }

    /// Notes that bytes of a frame are here (its first ones now, if none were).
    pub(super) fn frame_begun(&mut self, now: Instant) {
        if self.buf.is_empty() {
            self.frame_began = None;
        } else if self.frame_began.is_none() {
            self.frame_began = Some(now);
        }
    }

    /// Gives back the memory of a large frame once it is answered, so that an idle
    /// connection holds no buffer.
    pub(super) fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > maat_net::READ_AHEAD_BYTES {
            self.buf = Vec::new();
        }
    }
}

/// How much of a frame a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Extent {
    /// Not all of it; `total` is its length once its header is here.
    Partial {
        /// Header and payload bytes, when known.
        total: Option<usize>,
    },
    /// A whole frame at the start of the buffer.
    Whole {
        /// Its type and id.
        head: FrameHead,
        /// Header bytes (the payload starts here).
        header: usize,
        /// Header and payload bytes.
        total: usize,
    },
}

/// Where the frame at the start of `buf` ends, as far as its bytes tell; an error for a
/// header that is not one (its length is checked against the limit before any payload is
/// read).
pub(super) fn extent(buf: &[u8]) -> Result<Extent, ProtoError> {
    let Some(start) = buf.first_chunk::<FRAME_HEADER_START_BYTES>() else {
        return Ok(Extent::Partial { total: None });
    };
    let header = FRAME_HEADER_START_BYTES + wire::header_rest_bytes(start)?;
    let Some(bytes) = buf.get(..header) else {
        return Ok(Extent::Partial { total: None });
    };
    let decoded = wire::decode_header(bytes)?;
    let total = header + decoded.payload_bytes;
    Ok(if buf.len() >= total {
        Extent::Whole {
            head: decoded.head,
            header,
            total,
        }
    } else {
        Extent::Partial { total: Some(total) }
    })
}

/// How long a frame of `total` bytes (unknown before its header is here) may take from its
/// first byte to its last: `seconds_min` plus its length at
/// [`FRAME_BYTES_PER_SECOND_MIN`].
pub(super) fn frame_allowance(seconds_min: u64, total: Option<usize>) -> Duration {
    let bytes = total.unwrap_or(0) as u64;
    Duration::from_secs(seconds_min + bytes / FRAME_BYTES_PER_SECOND_MIN)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;
    use maat_proto::wire::FrameType;

    #[test]
    fn a_frame_is_whole_only_with_its_last_byte_and_a_bad_header_is_an_error() {
        let mut f = Vec::new();
        maat_net::write_frame(&mut f, FrameHead::new(FrameType::Plain, 3), &[7; 40]).unwrap();
        for cut in 0..f.len() {
            assert!(
                matches!(extent(&f[..cut]).unwrap(), Extent::Partial { .. }),
                "cut at {cut}"
            );
        }
        let with_next = [&f[..], b"next"].concat();
        match extent(&with_next).unwrap() {
            Extent::Whole { total, header, .. } => {
                assert_eq!(total, f.len());
                assert_eq!(total - header, 40);
            }
            other => panic!("{other:?}"),
        }
        assert!(extent(b"XXnot a frame").is_err());
        assert_eq!(frame_allowance(10, None), Duration::from_secs(10));
        assert_eq!(
            frame_allowance(10, Some(2 * 1024 * 1024)),
            Duration::from_secs(10 + 8)
        );
    }
}
