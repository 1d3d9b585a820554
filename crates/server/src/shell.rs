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
