//! Logging: `tracing` with an `EnvFilter` from `RUST_LOG`, as text or JSON;
//! the process logs to stderr, and an in-process gateway under test can be
//! given a subscriber of its own (see [`subscriber`]).

use tracing_subscriber::fmt::writer::MakeWriterExt;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

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
    // Both filters apply to the whole subscriber (there is one output):
    // cheaper than a filter per layer, which keeps state per span and event.
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(no_sdk_debug);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => Box::new(registry.with(layer)),
        LogFormat::Json => Box::new(registry.with(layer.json().flatten_event(true))),
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
        BatchedStderr.with_max_level(tracing::Level::TRACE),
        ansi,
    )
    .try_init();
}

thread_local! {
    /// Depth of [`turn`]s running on this thread.
    static TURNS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Lines waiting for the outermost turn on this thread to end.
    static AFTER_TURN: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Emits `lines` (in the current span) when the [`turn`] running on this
/// thread ends, or at once outside one.
///
/// A connection's task runs in a turn ([`crate::api::repoll`]): hyper
/// writes the answer during the task's poll, and a query's access and audit
/// lines asked for in it are formatted after that write, not before: the
/// client has its answer that much sooner. Measured, 155-168 against
/// 152-163 µs of gateway CPU per `SELECT 42` (BENCHMARKS.md, row 11). Only
/// those two INFO lines are left for later; WARN and ERROR lines are
/// emitted where they happen.
pub fn after_this_turn(lines: impl FnOnce() + 'static) {
    if TURNS.with(|t| t.get()) == 0 {
        return lines();
    }
    let span = tracing::Span::current();
    AFTER_TURN.with(|q| q.borrow_mut().push(Box::new(move || span.in_scope(lines))));
}

/// Runs `poll`, then the lines it left for after it ([`after_this_turn`]);
/// a turn inside a turn leaves them to the outer one. They are emitted
/// even if `poll` panics.
pub fn turn<R>(poll: impl FnOnce() -> R) -> R {
    struct Ends;
    impl Drop for Ends {
        fn drop(&mut self) {
            let depth = TURNS.with(|t| {
                t.set(t.get() - 1);
                t.get()
            });
            // Out of every turn: a line that asks for another now gets it
            // at once.
            if depth == 0 {
                let waiting = AFTER_TURN.with(|q| std::mem::take(&mut *q.borrow_mut()));
                for lines in waiting {
                    lines();
                }
            }
        }
    }
    TURNS.with(|t| t.set(t.get() + 1));
    let _ends = Ends;
    poll()
}

/// Writes what the log holds but has not written yet (see [`BatchedStderr`]):
/// before the process writes to stderr itself, and before it exits.
pub fn flush() {
    batch().flush();
}

/// How long an INFO or DEBUG line may wait to be written.
const BATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// Bytes of waiting lines that are written at once, without waiting.
const BATCH_BYTES: usize = 64 * 1024;

/// stderr, written in batches. Every query logs two INFO lines (the access
/// line, the audit line) and writing each was a system call on the
/// request's thread: here INFO and DEBUG lines are gathered and written by
/// a thread of their own at most [`BATCH_DELAY`] later (or at once past
/// [`BATCH_BYTES`]), one `write` for many lines. A WARN or ERROR line goes
/// out at once, after every line before it, so the order holds and what
/// matters is never held back by a crash.
#[derive(Clone, Copy)]
pub struct BatchedStderr;

/// The lines waiting, and the thread that writes them.
struct Batch {
    waiting: std::sync::Mutex<Vec<u8>>,
    /// Parked until a line comes to an empty batch; `None` if it could not
    /// start (then every line is written at once).
    writer: Option<std::thread::Thread>,
}

impl Batch {
    /// Writes the waiting lines, then `line`. stderr's lock orders the
    /// writes; the batch is locked only to take its lines, so a request
    /// adding its line never waits for a write.
    fn write_out(&self, line: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let lines = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()));
        err.write_all(&lines)?;
        err.write_all(line)
    }

    fn flush(&self) {
        let _ = self.write_out(&[]);
    }
}

fn batch() -> &'static Batch {
    static BATCH: std::sync::OnceLock<Batch> = std::sync::OnceLock::new();
    BATCH.get_or_init(|| {
        let writer = std::thread::Builder::new()
            .name("duckgate-log".into())
            .spawn(|| loop {
                std::thread::park();
                std::thread::sleep(BATCH_DELAY);
                batch().flush();
            })
            .ok()
            .map(|h| h.thread().clone());
        Batch {
            waiting: std::sync::Mutex::new(Vec::new()),
            writer,
        }
    })
}

/// One log line on its way into the batch.
pub struct BatchedLine {
    /// WARN or ERROR: written at once.
    urgent: bool,
}

impl std::io::Write for BatchedLine {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let b = batch();
        if let (false, Some(writer)) = (self.urgent, &b.writer) {
            let mut waiting = b.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if waiting.len() + line.len() < BATCH_BYTES {
                let was_empty = waiting.is_empty();
                waiting.extend_from_slice(line);
                if was_empty {
                    writer.unpark();
                }
                return Ok(line.len());
            }
        }
        b.write_out(line)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = BatchedLine;

    fn make_writer(&'a self) -> BatchedLine {
        BatchedLine { urgent: true }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> BatchedLine {
        BatchedLine {
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
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
    fn lines_asked_for_after_a_turn_come_after_it_in_their_span() {
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || sink.clone()
        };
        let text = || String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let subscriber = subscriber(LogFormat::Text, EnvFilter::new("info"), writer, false);
        tracing::subscriber::with_default(subscriber, || {
            // Outside a turn: at once.
            after_this_turn(|| tracing::info!("outside"));
            assert!(text().contains("outside"), "{}", text());
            turn(|| {
                let span = tracing::info_span!("request", request_id = "r-1");
                span.in_scope(|| after_this_turn(|| tracing::info!("access")));
                // A nested turn leaves its lines to the outermost.
                turn(|| after_this_turn(|| tracing::info!("nested")));
                tracing::info!("during");
                assert!(!text().contains("access"), "{}", text());
                assert!(!text().contains("nested"), "{}", text());
            });
            let text = text();
            let at = |needle: &str| {
                text.find(needle)
                    .unwrap_or_else(|| panic!("{needle}: {text}"))
            };
            assert!(
                at("during") < at("access") && at("access") < at("nested"),
                "{text}"
            );
            let access = text.lines().find(|l| l.contains("access")).unwrap();
            assert!(access.contains("request{request_id=\"r-1\"}"), "{access}");
            // The thread is out of every turn again: at once.
            after_this_turn(|| tracing::info!("after"));
        });
        assert!(text().contains("after"), "{}", text());
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
