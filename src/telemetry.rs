//! Logging: `tracing` with an `EnvFilter` from `RUST_LOG`, as text or JSON;
//! the process logs to stderr, and an in-process gateway under test can be
//! given a subscriber of its own (see [`subscriber`]).

use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::fmt::writer::MakeWriterExt;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

/// The process's filter: `RUST_LOG`, else `info` with the AWS SDK's own
/// chatter at `warn`.
pub fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,aws_config=warn,aws_smithy_runtime=warn"))
}

/// The gateway's log format, with `filter`, writing to `writer`. Whatever
/// `filter` says, the AWS SDK's debug and trace lines are dropped: they
/// print the credentials it resolves (a base access key id, the STS
/// session's full key id), which must never reach a log.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let no_sdk_debug = tracing_subscriber::filter::filter_fn(|meta| {
        *meta.level() <= tracing::Level::INFO || !is_aws_sdk(meta.target())
    });
    let filter = filter.and(no_sdk_debug);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => Box::new(tracing_subscriber::registry().with(layer.with_filter(filter))),
        LogFormat::Json => Box::new(
            tracing_subscriber::registry()
                .with(layer.json().flatten_event(true).with_filter(filter)),
        ),
    }
}

/// The AWS SDK's crates (`aws_config`, `aws_sdk_sts`, `aws_smithy_*`, ...).
fn is_aws_sdk(target: &str) -> bool {
    target.starts_with("aws_") || target.starts_with("aws-")
}

/// Logs the process to stderr. Colour only for a person at a terminal,
/// never in files or pipes.
pub fn init(format: LogFormat) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = subscriber(
        format,
        filter(),
        std::io::stderr.with_max_level(tracing::Level::TRACE),
        ansi,
    )
    .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_aws_sdks_debug_lines_never_print_whatever_the_filter_says() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let sink = Sink::default();
            let writer = {
                let sink = sink.clone();
                move || sink.clone()
            };
            let subscriber = subscriber(format, EnvFilter::new("trace"), writer, false);
            tracing::subscriber::with_default(subscriber, || {
                tracing::debug!(target: "aws_config::sts", "resolved credentials AKIASECRETKEYID");
                tracing::trace!(target: "aws_smithy_runtime::client", "ASIASESSIONKEYID");
                tracing::info!(target: "aws_config::imds", "an info line");
                tracing::debug!(target: "duckgate::engine", "a debug line of ours");
            });
            let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            assert!(!text.contains("AKIA") && !text.contains("ASIA"), "{text}");
            assert!(
                text.contains("an info line") && text.contains("a debug line of ours"),
                "{text}"
            );
        }
    }
}
