//! The daemon shell every service runs in: its listening socket (bound, or handed down
//! by `maat up`), its metrics endpoint, the announcement that it serves, and the accept
//! loop around its frame handler. A daemon supplies what differs: its name, its counters
//! and its handler; `run_mds`, `run_osd` and `run_kds` are this plus their periodic
//! threads, and a later service (a gateway) is one more of the same.

use crate::metrics::{self, Latencies};
use crate::serve::{self, Handler, ServeLimits, ServeStats};
use crate::{announce_metrics, bind, io, ServerError, Shutdown};
use maat_proto::msg::DaemonStats;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

/// A daemon's socket, bound and not yet served.
pub(crate) struct Shell {
    listener: TcpListener,
    /// The address it is bound to.
    pub(crate) local: String,
}

impl Shell {
    /// Binds `listen` (or takes the socket `maat up` handed down for it).
    pub(crate) fn bind(listen: &str) -> Result<Shell, ServerError> {
        let listener = bind(listen)?;
        let local = listener
            .local_addr()
            .map_err(io("local address"))?
            .to_string();
        Ok(Shell { listener, local })
    }

    /// Serves metrics (when `metrics` names an address; `DATA_DIR/metrics.addr` records
    /// where), says it is ready at `ready_address`, and answers frames with the handler
    /// `handler` makes until `shutdown` fires.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn serve(
        self,
        name: &str,
        metrics_listen: Option<&str>,
        data_dir: &Path,
        stats: Arc<dyn Fn() -> DaemonStats + Send + Sync>,
        handler: impl FnOnce(Arc<Latencies>) -> Arc<Handler>,
        shutdown: &Shutdown,
        ready_address: &str,
        ready: impl FnOnce(&str),
    ) -> Result<(), ServerError> {
        let latencies = Arc::new(Latencies::default());
        let serving = Arc::new(ServeStats::default());
        if let Some(listen) = metrics_listen {
            let connections = serving.clone();
            let stats: Arc<dyn Fn() -> DaemonStats + Send + Sync> = Arc::new(move || {
                let mut s = stats();
                s.counters.extend(connections.counters());
                s
            });
            let served = metrics::serve(listen, stats, latencies.clone());
            announce_metrics(data_dir, served)?;
        }
        let handler = handler(latencies);
        let limits = ServeLimits::for_open_files(open_files_limit());
        ready(ready_address);
        serve::serve(self.listener, handler, shutdown, name, limits, serving);
        Ok(())
    }
}

/// Raises this process's soft limit on open files to its hard limit (often 1,024 and far
/// more) and returns it: a daemon holds a descriptor per connection.
pub fn open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Ends the process on any panic, after the usual message (issue 39): a tripped
/// assertion means the state it guards is wrong, and neither the thread that tripped it
/// nor any other may go on with it (without this a panic ended one connection's thread
/// and the daemon served on). Installed by every daemon as it starts; libraries,
/// simulations and tests keep unwinding.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    /// Issue 39: a panic in any thread of a daemon ends the process (before, a tripped
    /// assertion ended one connection's thread and the daemon served on). The test runs
    /// itself again as a child that installs the hook and panics in a thread that is not
    /// its main one, and sees it killed by SIGABRT; without the hook the child would go
    /// on and exit 0.
    #[test]
    fn a_panic_in_any_thread_ends_a_daemon() {
        if std::env::var_os("MAAT_ABORT_CHILD").is_some() {
            super::abort_on_panic();
            let _ = std::thread::spawn(|| panic!("a broken invariant")).join();
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shell::tests::a_panic_in_any_thread_ends_a_daemon",
                "--nocapture",
            ])
            .env("MAAT_ABORT_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "the child carried on after a panic: {:?}",
            out.status
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("a broken invariant"));
    }
}
