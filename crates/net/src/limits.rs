//! Every limit of the network layer in one place: connect and I/O timeouts.

use std::time::Duration;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a peer may stay silent in the middle of a call.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes a connection reads ahead: a small frame's header and payload arrive in one
/// `recv` instead of three; a larger payload's rest is read straight into its buffer.
pub const READ_AHEAD_BYTES: usize = 16 * 1024;
