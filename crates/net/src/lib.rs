//! Framing over TCP for Maat's daemons and client: bounded reads, timeouts, reconnects.
//! No protocol decisions live here; frames are checked by `maat_proto::wire`.

use maat_proto::wire::{self, FrameType, FRAME_HEADER_BYTES};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer may stay silent in the middle of a call.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// This crate's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The peer closed the connection between frames.
    #[error("connection closed by peer")]
    Closed,
    /// A socket operation failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes received are not a valid frame.
    #[error("bad frame: {0}")]
    Frame(#[from] maat_proto::ProtoError),
    /// The address does not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
}

/// Reads one frame. `Closed` means the peer hung up cleanly before a new frame began.
pub fn read_frame(stream: &mut impl Read) -> Result<(FrameType, Vec<u8>), NetError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    let mut filled = 0;
    while filled < FRAME_HEADER_BYTES {
        let rest = header.get_mut(filled..).unwrap_or_default();
        match stream.read(rest) {
            Ok(0) if filled == 0 => return Err(NetError::Closed),
            Ok(0) => {
                return Err(NetError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "truncated frame header",
                )))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The length is checked against the limit before anything is allocated.
    let header = wire::decode_header(&header)?;
    let mut payload = vec![0u8; header.payload_bytes];
    stream.read_exact(&mut payload)?;
    Ok((header.frame_type, payload))
}

/// Writes one frame in a single buffer (one segment train with `TCP_NODELAY`).
pub fn write_frame(
    stream: &mut impl Write,
    frame_type: FrameType,
    payload: &[u8],
) -> Result<(), NetError> {
    let frame = wire::encode_frame(frame_type, payload)?;
    stream.write_all(&frame)?;
    stream.flush()?;
    Ok(())
}

/// Prepares an accepted or connected socket: no Nagle delay, bounded silences.
pub fn configure(stream: &TcpStream) -> Result<(), NetError> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(())
}

/// A client connection that reconnects once when the peer went away between calls.
#[derive(Debug)]
pub struct Connection {
    address: String,
    stream: Option<TcpStream>,
}

impl Connection {
    /// A connection to `address` (connected lazily).
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            stream: None,
        }
    }

    /// The peer address.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn connect(&self) -> Result<TcpStream, NetError> {
        let addrs: Vec<SocketAddr> = self
            .address
            .to_socket_addrs()
            .map_err(|_| NetError::Resolve(self.address.clone()))?
            .collect();
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    configure(&s)?;
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => NetError::Io(e),
            None => NetError::Resolve(self.address.clone()),
        })
    }

    /// Sends a frame and reads the answer. When a reused connection fails (the peer closed
    /// it while idle, or restarted) the frame is sent once more on a new connection; if the
    /// first copy did arrive, the receiver's replay window refuses the second, so a request
    /// never runs twice.
    pub fn call(
        &mut self,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        let reused = self.stream.is_some();
        match self.try_call(frame_type, payload) {
            Err(NetError::Closed) | Err(NetError::Io(_)) if reused => {
                self.stream = None;
                self.try_call(frame_type, payload)
            }
            other => other,
        }
    }

    fn try_call(
        &mut self,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        if self.stream.is_none() {
            self.stream = Some(self.connect()?);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(NetError::Closed);
        };
        let result = write_frame(stream, frame_type, payload).and_then(|()| read_frame(stream));
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    /// Sends raw bytes and reads one frame (tests use this to send malformed frames).
    pub fn call_raw(&mut self, bytes: &[u8]) -> Result<(FrameType, Vec<u8>), NetError> {
        if self.stream.is_none() {
            self.stream = Some(self.connect()?);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(NetError::Closed);
        };
        stream.write_all(bytes)?;
        let result = read_frame(stream);
        if result.is_err() {
            self.stream = None;
        }
        result
    }
}
