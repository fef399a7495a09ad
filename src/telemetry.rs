//! Logging: `tracing` with an `EnvFilter` from `RUST_LOG`, as text or JSON;
//! the process logs to stderr, and an in-process gateway under test can be
//! given a subscriber of its own (see [`subscriber`]).

use tracing_subscriber::fmt::writer::MakeWriterExt;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The process's filter: `RUST_LOG`, else `info` with the AWS SDK's own
/// chatter at `warn`.
pub fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,aws_config=warn,aws_smithy_runtime=warn"))
}

/// The gateway's log format, with `filter`, writing to `writer`.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().flatten_event(true).finish()),
    }
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
