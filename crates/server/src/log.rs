//! Daemon logs: `tracing` events, written to stderr one line each, prefixed with the
//! daemon's name (several daemons share one terminal under `maat up`). `MAAT_LOG` chooses
//! what is written, as `tracing_subscriber`'s targets filter reads it: a level (`warn`,
//! `info`, the default, `debug`), or levels per module (`info,maat_server::serve=warn`).
//! Libraries and tests install nothing, so their daemons' events go nowhere.

use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable that filters daemon logs.
pub const LOG_ENV: &str = "MAAT_LOG";

/// Each line: the daemon's name, then the standard format (time, level, module, message,
/// fields).
struct Prefixed {
    daemon: String,
    inner: Format<Full>,
}

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "{} ", self.daemon)?;
        self.inner.format_event(ctx, writer, event)
    }
}

/// Installs the log writer of the daemon `daemon` (`mds`, `osd 3`, `kds`) for this
/// process. Returns the filter in force, or why `MAAT_LOG` was not understood (the
/// default, `info`, is then in force).
pub fn init_logging(daemon: &str) -> Result<String, String> {
    let (filter, problem) = match std::env::var(LOG_ENV) {
        Ok(text) => match text.parse::<Targets>() {
            Ok(f) => (f, None),
            Err(e) => (
                default_filter(),
                Some(format!(
                    "{LOG_ENV}={text:?} not understood ({e}); logging at info"
                )),
            ),
        },
        Err(_) => (default_filter(), None),
    };
    let shown = filter.to_string();
    // A second call in one process (never in a daemon) keeps the first writer.
    let _ = subscriber(daemon, filter, std::io::stderr).try_init();
    match problem {
        Some(p) => Err(p),
        None => Ok(shown),
    }
}

/// The subscriber `init_logging` installs, writing to `writer`.
fn subscriber<W>(daemon: &str, filter: Targets, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .event_format(Prefixed {
            daemon: daemon.to_string(),
            inner: Format::default().with_ansi(false),
        });
    tracing_subscriber::registry().with(layer).with(filter)
}

fn default_filter() -> Targets {
    Targets::new().with_default(tracing::Level::INFO)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_line_names_the_daemon_and_the_filter_holds_back_what_it_excludes() {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let filter: super::Targets = "info".parse().unwrap();
        let subscriber = super::subscriber("osd 3", filter, move || out.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(peer = %"127.0.0.1:9", "refused");
            tracing::debug!("not shown at info");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(lines[0].starts_with("osd 3 "), "{text}");
        assert!(
            lines[0].contains("INFO") && lines[0].contains("refused"),
            "{text}"
        );
        assert!(lines[0].contains("peer=127.0.0.1:9"), "{text}");
    }

    #[test]
    fn maat_log_takes_levels_and_per_module_levels() {
        for text in ["warn", "debug", "info,maat_server::serve=warn"] {
            assert!(text.parse::<super::Targets>().is_ok(), "{text}");
        }
        assert!("no such level=7=7".parse::<super::Targets>().is_err());
    }
}
