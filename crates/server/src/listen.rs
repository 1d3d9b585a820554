//! The daemon's listening socket: bound here, or handed down by a supervisor.
//!
//! `maat up` binds each daemon's address itself and passes the open socket to the daemon
//! it starts (the systemd socket-activation convention, `LISTEN_FDS` with
//! `LISTEN_FDS_FIRST_FD`). A port chosen with `bind(":0")` and released before the
//! daemon binds it can be taken in between by any other process's `bind(":0")` or
//! outgoing connection; a socket that is never released cannot.

use crate::{io, ServerError};
use std::net::{TcpListener, ToSocketAddrs};
use std::sync::Mutex;

static HANDED_DOWN: Mutex<Option<TcpListener>> = Mutex::new(None);

/// Takes the listening socket a supervisor passed in the environment, if any, for the
/// next [`bind`]. Call once at start, before the process starts threads: it removes the
/// variables that describe the socket, so that nothing the daemon starts inherits them.
pub fn adopt_handed_down_listener() -> Result<(), ServerError> {
    let listener = listenfd::ListenFd::from_env()
        .take_tcp_listener(0)
        .map_err(io("take the listening socket passed by the supervisor"))?;
    if let Some(listener) = listener {
        *HANDED_DOWN.lock().unwrap_or_else(|e| e.into_inner()) = Some(listener);
    }
    Ok(())
}

/// A listener on `address`: the handed-down socket when it is bound to that address
/// (port 0 takes any port), otherwise a new one.
pub(crate) fn bind(address: &str) -> Result<TcpListener, ServerError> {
    if let Some(listener) = take_handed_down(address) {
        return Ok(listener);
    }
    TcpListener::bind(address).map_err(io(format!("listen on {address}")))
}

fn take_handed_down(address: &str) -> Option<TcpListener> {
    let mut slot = HANDED_DOWN.lock().unwrap_or_else(|e| e.into_inner());
    let bound = slot.as_ref()?.local_addr().ok()?;
    let wanted: Vec<_> = address.to_socket_addrs().ok()?.collect();
    let fits = wanted
        .iter()
        .any(|w| w.port() == bound.port() || w.port() == 0)
        && wanted
            .iter()
            .any(|w| w.ip() == bound.ip() || w.ip().is_unspecified());
    if fits {
        slot.take()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_handed_down_socket_is_used_only_for_its_own_address() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        *HANDED_DOWN.lock().unwrap() = Some(held.try_clone().unwrap());
        // Another address binds anew and leaves the socket in place.
        let other = bind(&format!("127.0.0.2:{port}")).unwrap();
        assert_eq!(other.local_addr().unwrap().ip().to_string(), "127.0.0.2");
        assert!(HANDED_DOWN.lock().unwrap().is_some());
        drop(other);
        // Its own address gets the very socket: binding anew would fail while `held`
        // is open.
        let mine = bind(&format!("127.0.0.1:{port}")).unwrap();
        assert_eq!(mine.local_addr().unwrap().port(), port);
        assert!(HANDED_DOWN.lock().unwrap().is_none());
    }
}
