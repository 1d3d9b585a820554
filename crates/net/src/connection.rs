//! The client side of a connection: one socket to one peer, connected lazily and
//! replaced when the peer closed it while idle; requests carry ids, so several may be in
//! flight, and each answer is checked to be its request's. On an in-process network
//! (feature `sim`) the same calls travel as the simulator's events.

#[cfg(feature = "sim")]
use crate::read_frame;
#[cfg(feature = "sim")]
use crate::MemoryNet;
use crate::{
    configure, read_frame_buffered, write_frame_parts, NetError, CONNECT_TIMEOUT, IO_TIMEOUT,
    READ_AHEAD_BYTES,
};
use maat_proto::replay::{NonceStream, STREAM_BYTES};
use maat_proto::wire::{FrameHead, FrameType};
use std::collections::VecDeque;
use std::io::BufReader;
#[cfg(feature = "test-hooks")]
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

/// How a caller waits for an answer it may stop waiting for
/// ([`Connection::call_parts_watched`]).
pub struct Watch<'a> {
    /// How long each silent slice is.
    pub every: std::time::Duration,
    /// Asked after each silent slice: `Some(why)` to stop waiting, `None` to go on.
    pub keep_waiting: &'a dyn Fn() -> Option<String>,
}

/// True when an idle connection is still open: nothing to read and no end of stream or
/// error pending (a peer that closed it shows as a readable end of stream). One
/// non-blocking peek (`MSG_DONTWAIT`), where switching the socket to non-blocking and
/// back cost two more system calls per request.
fn idle_and_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(
            stream,
            &mut byte[..],
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ),
        Err(rustix::io::Errno::AGAIN)
    )
}

/// A client connection, connected lazily and replaced when the peer closed it while idle.
/// Requests carry ids (frame version 2): several may be in flight ([`Connection::send`]
/// and [`Connection::receive`]), and each answer is checked to be its request's.
#[derive(Debug)]
pub struct Connection {
    address: String,
    /// The socket, read through [`READ_AHEAD_BYTES`] of read-ahead (written directly).
    stream: Option<BufReader<TcpStream>>,
    /// The id the next request gets.
    next_id: u32,
    /// Ids of the requests sent whose answers are not read, oldest first (the peer
    /// answers in order).
    pending: VecDeque<u32>,
    /// On an in-process network: the network, and the answers to the frames sent.
    #[cfg(feature = "sim")]
    memory: Option<MemoryLink>,
    /// The nonces of the requests sealed for this connection, once one was.
    nonces: Option<NonceStream>,
    /// How long the peer may stay silent in the middle of a call ([`IO_TIMEOUT`] unless
    /// set otherwise).
    io_timeout: std::time::Duration,
}

#[cfg(feature = "sim")]
#[derive(Debug)]
struct MemoryLink {
    net: MemoryNet,
    /// The encoded answers of frames delivered at once, oldest first (`None`: a lost
    /// answer).
    answers: VecDeque<Option<Vec<u8>>>,
    /// The connection a simulated task sends on (its frames are events, `memory.rs`).
    link: Option<u64>,
}

fn mismatched(what: &'static str) -> NetError {
    NetError::Frame(maat_proto::ProtoError::Malformed {
        what: "answer frame",
        reason: what,
    })
}

impl Connection {
    /// A connection to `address` (connected lazily).
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            stream: None,
            next_id: 0,
            pending: VecDeque::new(),
            #[cfg(feature = "sim")]
            memory: None,
            nonces: None,
            io_timeout: IO_TIMEOUT,
        }
    }

    /// How long the peer may stay silent in the middle of a call on this connection,
    /// from now on (a client that can ask another copy gives up on a hung OSD sooner
    /// than [`IO_TIMEOUT`]); a connect made from now on waits at most this too. On an
    /// in-process network, a request to a hung peer times out after it in simulated time.
    pub fn set_io_timeout(&mut self, timeout: std::time::Duration) {
        if timeout == self.io_timeout || timeout.is_zero() {
            return;
        }
        self.io_timeout = timeout;
        if let Some(stream) = &self.stream {
            let s = stream.get_ref();
            // A socket that refuses the setting (it never does on Linux for a non-zero
            // duration) keeps the one it has: slower failover, nothing worse.
            let _kept = s
                .set_read_timeout(Some(timeout))
                .and_then(|()| s.set_write_timeout(Some(timeout)));
        }
    }

    /// A connection to `address` on the in-process network `net`.
    #[cfg(feature = "sim")]
    pub fn in_memory(address: impl Into<String>, net: MemoryNet) -> Self {
        Self {
            memory: Some(MemoryLink {
                net,
                answers: VecDeque::new(),
                link: None,
            }),
            ..Self::new(address)
        }
    }

    /// The peer address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The nonce for the next request sealed to be sent on this connection: the next of
    /// its own nonce stream (SPEC T7, `maat_proto::replay`), named by `stream` on first
    /// use (random). Requests on one connection reach the peer in the order they are
    /// sent, so a peer remembers one stream for all of them; seal each request just
    /// before sending it.
    pub fn next_nonce(&mut self, stream: impl FnOnce() -> [u8; STREAM_BYTES]) -> [u8; 16] {
        self.nonces
            .get_or_insert_with(|| NonceStream::new(stream()))
            .next_nonce()
    }

    /// Starts a new nonce stream at the next request: after the peer refused one of this
    /// connection's requests as replayed or too far behind, so that a stream pushed
    /// ahead (by whoever else holds the session's key) cannot keep refusing it.
    pub fn renew_nonce_stream(&mut self) {
        self.nonces = None;
    }

    fn connect(&self) -> Result<BufReader<TcpStream>, NetError> {
        let addrs: Vec<SocketAddr> = self
            .address
            .to_socket_addrs()
            .map_err(|_| NetError::Resolve(self.address.clone()))?
            .collect();
        let mut last = None;
        for addr in addrs {
            // (A caller that waits less for answers waits no longer for the connect.)
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT.min(self.io_timeout)) {
                Ok(s) => {
                    configure(&s)?;
                    if self.io_timeout != IO_TIMEOUT {
                        s.set_read_timeout(Some(self.io_timeout))?;
                        s.set_write_timeout(Some(self.io_timeout))?;
                    }
                    return Ok(BufReader::with_capacity(READ_AHEAD_BYTES, s));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => NetError::Io(e),
            None => NetError::Resolve(self.address.clone()),
        })
    }

    /// Sends a frame and reads the answer. A request is sent at most once: an idle
    /// connection the peer has closed (idle timeout, restart) is detected *before*
    /// sending and replaced, and a failure after sending is reported, never retried here,
    /// because the request may have been applied (a resent write would be refused as
    /// replayed, or run twice under NOSEC). Callers retry only what is safe to retry.
    pub fn call(
        &mut self,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        self.call_parts(frame_type, &[payload])
    }

    /// [`Connection::call`] with the payload in parts (sent without assembling it). The
    /// answers to requests sent before it and not read are read and dropped on the way.
    pub fn call_parts(
        &mut self,
        frame_type: FrameType,
        parts: &[&[u8]],
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        self.call_parts_watched(frame_type, parts, None)
    }

    /// [`Connection::call_parts`], and while no byte of the answer has come, `watch` (if
    /// any) is asked after each silent slice whether to go on waiting: a caller that
    /// learns elsewhere that the peer is gone (the MDS reports an OSD down) stops before
    /// the whole timeout. A call given up on fails with a timeout that says why, and the
    /// connection is dropped (the request may still be applied: as after any timeout).
    pub fn call_parts_watched(
        &mut self,
        frame_type: FrameType,
        parts: &[&[u8]],
        watch: Option<&Watch<'_>>,
    ) -> Result<(FrameType, Vec<u8>), NetError> {
        let id = self.send_parts(frame_type, parts)?;
        if let Some(watch) = watch {
            self.wait_watched(watch)?;
        }
        loop {
            let (answered, answer) = self.receive_with_id()?;
            // A refusal without an id is the daemon's word on the whole connection (it
            // closes it): this request's answer too.
            if answered.is_none_or(|a| a == id) {
                return Ok(answer);
            }
        }
    }

    /// The first half of [`Connection::call`]: sends a frame (on a fresh connection if
    /// the idle one was closed by the peer) without waiting for the answer, so that
    /// requests to several peers, or several to one peer, can be in flight from one
    /// thread. [`Connection::receive`] reads the answers, oldest first.
    pub fn send(&mut self, frame_type: FrameType, payload: &[u8]) -> Result<(), NetError> {
        self.send_parts(frame_type, &[payload]).map(|_| ())
    }

    /// Requests sent whose answers are not read yet.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Sends one frame with the next request id; returns the id.
    fn send_parts(&mut self, frame_type: FrameType, parts: &[&[u8]]) -> Result<u32, NetError> {
        let id = self.next_id;
        let head = FrameHead::new(frame_type, id);
        #[cfg(feature = "sim")]
        if self.memory.is_some() {
            self.send_memory(head, parts)?;
        } else {
            self.send_tcp(head, parts)?;
        }
        #[cfg(not(feature = "sim"))]
        self.send_tcp(head, parts)?;
        self.next_id = self.next_id.wrapping_add(1);
        self.pending.push_back(id);
        Ok(id)
    }

    /// [`Connection::send_parts`] on TCP.
    fn send_tcp(&mut self, head: FrameHead, parts: &[&[u8]]) -> Result<(), NetError> {
        // Only an idle connection can be checked for a close by the peer (with answers
        // due, there is data to read) and replaced without losing anything.
        // Bytes read ahead with nothing in flight are not an answer to anything: such
        // a connection is replaced too.
        if self.pending.is_empty()
            && self
                .stream
                .as_ref()
                .is_some_and(|s| !s.buffer().is_empty() || !idle_and_open(s.get_ref()))
        {
            self.stream = None;
        }
        if self.stream.is_none() {
            self.pending.clear();
            self.stream = Some(self.connect()?);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(NetError::Closed);
        };
        match write_frame_parts(stream.get_mut(), head, parts) {
            Ok(()) => {}
            // Refused before a byte was written (too large): the stream is intact.
            Err(e @ NetError::Frame(_)) => return Err(e),
            // (A peer that takes no more bytes for a whole timeout is hung, as one that
            // sends no answer.)
            Err(e) => return Err(self.failed(e, "no bytes taken")),
        }
        Ok(())
    }

    /// [`Connection::send_parts`] on the in-process network.
    #[cfg(feature = "sim")]
    fn send_memory(&mut self, head: FrameHead, parts: &[&[u8]]) -> Result<(), NetError> {
        let Some(link) = self.memory.as_mut() else {
            return Err(NetError::Closed);
        };
        let mut frame = Vec::new();
        write_frame_parts(&mut frame, head, parts)?;
        if link.net.in_task() {
            // A simulated task: the frame travels as an event (a new connection when
            // the last one was reset or its peer restarted, nothing being in flight).
            if self.pending.is_empty() {
                link.answers.clear();
            }
            let timeout_millis = u64::try_from(self.io_timeout.as_millis()).unwrap_or(u64::MAX);
            match link
                .net
                .send_async(&self.address, link.link, frame, timeout_millis)
            {
                Ok(id) => link.link = Some(id),
                Err(e) => {
                    // As a failed write on a socket: the connection is gone.
                    self.drop_stream();
                    return Err(e);
                }
            }
        } else {
            link.answers
                .push_back(link.net.deliver(&self.address, &frame)?);
        }
        Ok(())
    }

    fn drop_stream(&mut self) {
        self.stream = None;
        self.pending.clear();
        #[cfg(feature = "sim")]
        if let Some(link) = self.memory.as_mut() {
            link.answers.clear();
            if let Some(id) = link.link.take() {
                link.net.close_async(id);
            }
        }
    }

    /// The second half of [`Connection::call`]: reads the answer to the oldest request
    /// [`Connection::send`] sent and not yet answered.
    pub fn receive(&mut self) -> Result<(FrameType, Vec<u8>), NetError> {
        self.receive_with_id().map(|(_, answer)| answer)
    }

    /// The stream dropped after `e`; a socket timeout (the peer silent, or taking no
    /// bytes, for a whole `io_timeout`) said as one: `what` happened within it.
    fn failed(&mut self, e: NetError, what: &str) -> NetError {
        self.drop_stream();
        match e {
            NetError::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                NetError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{what} within {} s (the peer is hung or overloaded)",
                        self.io_timeout.as_secs()
                    ),
                ))
            }
            other => other,
        }
    }

    /// Waits for the first byte of the next answer in slices of `watch.every`, asking
    /// `watch.keep_waiting` after each silent one; the rest of the answer is then read
    /// under the connection's timeout, as ever. Nothing is read here, so the answer's
    /// bytes are intact whatever happens.
    fn wait_watched(&mut self, watch: &Watch<'_>) -> Result<(), NetError> {
        let started = std::time::Instant::now();
        let mut slices: u32 = 0;
        // (On TCP the time really waited, the caller's asks included; simulated, the
        // slices.)
        let given_up = |reason: String, slices: u32, waited: Option<std::time::Duration>| {
            let waited = waited.unwrap_or_else(|| watch.every.saturating_mul(slices));
            NetError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer after {:.1} s, given up: {reason}",
                    waited.as_secs_f64()
                ),
            ))
        };
        #[cfg(feature = "sim")]
        if let Some(link) = self.memory.as_mut() {
            let (Some(id), true) = (link.link, link.answers.is_empty() && link.net.in_task())
            else {
                return Ok(());
            };
            let every = u64::try_from(watch.every.as_millis()).unwrap_or(u64::MAX);
            // (A hung peer's link is reset at the sender's timeout: the wait ends then.)
            while !link.net.wait_async(id, every.max(1)) {
                slices = slices.saturating_add(1);
                if let Some(reason) = (watch.keep_waiting)() {
                    self.drop_stream();
                    return Err(given_up(reason, slices, None));
                }
            }
            return Ok(());
        }
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        if !stream.buffer().is_empty() {
            return Ok(());
        }
        let timeout = self.io_timeout;
        let waited = loop {
            // (Time spent in the caller's ask counts: once it is all gone, one last look
            // of a millisecond, so an answer that came meanwhile is read, not dropped.)
            let left = timeout.saturating_sub(started.elapsed());
            let slice = watch
                .every
                .min(left)
                .max(std::time::Duration::from_millis(1));
            if let Err(e) = stream.get_ref().set_read_timeout(Some(slice)) {
                break Err(e.into());
            }
            match std::io::BufRead::fill_buf(stream) {
                // Bytes, or the end of the stream (the read that follows says so).
                Ok(_) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    slices = slices.saturating_add(1);
                    if left <= slice {
                        break Err(e.into());
                    }
                    if let Some(reason) = (watch.keep_waiting)() {
                        self.drop_stream();
                        return Err(given_up(reason, slices, Some(started.elapsed())));
                    }
                }
                Err(e) => break Err(e.into()),
            }
        };
        // (The rest of the answer waits as long as any.)
        let restored = stream.get_ref().set_read_timeout(Some(timeout));
        match waited.and(restored.map_err(NetError::from)) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failed(e, "no answer")),
        }
    }

    /// Reads the next answer and checks it answers the oldest pending request: returns
    /// its id, or `None` for a version-1 refusal, which a daemon sends when it cannot read
    /// a request's header or takes no more connections; it answers everything pending,
    /// and the daemon closes the connection.
    #[allow(clippy::type_complexity)]
    fn receive_with_id(&mut self) -> Result<(Option<u32>, (FrameType, Vec<u8>)), NetError> {
        let Some(&expected) = self.pending.front() else {
            return Err(NetError::Closed);
        };
        let read = self.read_next();
        let (head, payload) = match read {
            Ok(frame) => frame,
            Err(e) => return Err(self.failed(e, "no answer")),
        };
        match head.request_id {
            Some(id) if id == expected => {
                self.pending.pop_front();
                Ok((Some(id), (head.frame_type, payload)))
            }
            None if head.frame_type == FrameType::Refusal => {
                self.drop_stream();
                Ok((None, (head.frame_type, payload)))
            }
            _ => {
                self.drop_stream();
                Err(mismatched("not the answer to the oldest request in flight"))
            }
        }
    }

    /// The next frame that arrives on this connection.
    fn read_next(&mut self) -> Result<(FrameHead, Vec<u8>), NetError> {
        #[cfg(feature = "sim")]
        if let Some(link) = self.memory.as_mut() {
            return match link {
                MemoryLink {
                    net,
                    link: Some(id),
                    answers,
                } if answers.is_empty() && net.in_task() => net
                    .receive_async(*id)
                    .and_then(|answer| read_frame(&mut std::io::Cursor::new(answer))),
                link => match link.answers.pop_front().flatten() {
                    Some(answer) => read_frame(&mut std::io::Cursor::new(answer)),
                    None => Err(NetError::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        format!("{}: answer lost (in-memory network)", self.address),
                    ))),
                },
            };
        }
        match self.stream.as_mut() {
            Some(stream) => read_frame_buffered(stream),
            None => Err(NetError::Closed),
        }
    }

    /// Sends raw bytes and reads one frame (attack tests send malformed frames with it;
    /// feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn call_raw(&mut self, bytes: &[u8]) -> Result<(FrameType, Vec<u8>), NetError> {
        #[cfg(feature = "sim")]
        if let Some(link) = self.memory.as_mut() {
            let answer = link
                .net
                .deliver(&self.address, bytes)?
                .ok_or(NetError::Closed)?;
            return read_frame(&mut std::io::Cursor::new(answer)).map(|(h, p)| (h.frame_type, p));
        }
        if self.stream.is_none() {
            self.stream = Some(self.connect()?);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(NetError::Closed);
        };
        stream.get_mut().write_all(bytes)?;
        let result = read_frame_buffered(stream).map(|(h, p)| (h.frame_type, p));
        if result.is_err() {
            self.drop_stream();
        }
        result
    }
}
