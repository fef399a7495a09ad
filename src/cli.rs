//! What the `duckgate` binary runs: parse the configuration, start logging,
//! serve until SIGINT or SIGTERM. Here rather than in `main.rs` because the
//! futures of a library's async functions are compiled in the crate that
//! polls them: a binary that awaited [`crate::run`] itself compiled the
//! gateway's whole async side again (20-26 s of its build).

use clap::{CommandFactory, Parser};

use crate::config::{Cli, Command, LogFormat};

/// Runs the gateway as the command line and the environment say; the exit
/// code is 2 for a configuration it refuses.
pub fn main() -> std::process::ExitCode {
    crate::runtime_builder()
        .build()
        .expect("the tokio runtime")
        .block_on(async {
            let code = serve().await;
            crate::telemetry::flush();
            code
        })
}

async fn serve() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refuse_arguments(e),
    };
    if let Some(Command::Openapi) = cli.command {
        println!("{}", crate::api::docs::spec_json());
        return std::process::ExitCode::SUCCESS;
    }
    if let Some(Command::SettingsDoc) = cli.command {
        print!("{}", crate::config::reference::markdown());
        return std::process::ExitCode::SUCCESS;
    }
    let config = cli.serve_config();
    let format = config.server.log_format;
    crate::telemetry::init(format);
    // A mistyped name would otherwise be ignored in silence.
    let vars = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned());
    for (name, near) in crate::config::unknown_env_settings(&Cli::command(), vars) {
        tracing::warn!(
            variable = %name,
            did_you_mean = near.as_deref(),
            "{name} is set but names no setting of this duckgate: it is ignored"
        );
    }
    // Refuse a bad configuration before binding anything.
    if let Err(e) = config
        .clone()
        .resolve()
        .and_then(|_| crate::load_tokens(&config, config.server.listen).map(|_| ()))
    {
        return refuse(format, Some(e.setting), &e.to_string());
    }
    let listener = match tokio::net::TcpListener::bind(config.server.listen).await {
        Ok(l) => l,
        Err(e) => {
            let message = format!(
                "DUCKGATE_LISTEN: cannot listen on {}: {e}",
                config.server.listen
            );
            return refuse(format, Some("DUCKGATE_LISTEN"), &message);
        }
    };
    match crate::run(config, listener, shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // One line, naming the setting where there is one.
        Err(e) => refuse(format, None, &format!("{e:#}").replace('\n', " ")),
    }
}

/// Refuses to start (exit code 2) with one line: `duckgate: <message>` on
/// stderr, or with JSON logs one JSON log line (level ERROR, the message,
/// and the setting at fault where it is known) a log pipeline reads like
/// every other.
fn refuse(format: LogFormat, setting: Option<&str>, message: &str) -> std::process::ExitCode {
    match format {
        LogFormat::Json => tracing::error!(setting, exit_code = 2, "{message}"),
        LogFormat::Text => {
            crate::telemetry::flush();
            eprintln!("duckgate: {message}");
        }
    }
    crate::telemetry::flush();
    std::process::ExitCode::from(2)
}

/// A command line or environment clap refuses: its own message (and exit
/// code 2), or with JSON logs asked for, one JSON line naming the setting.
/// `--help` and `--version` print as clap prints them.
fn refuse_arguments(e: clap::Error) -> std::process::ExitCode {
    if !e.use_stderr() || !json_logs_asked() {
        e.exit();
    }
    crate::telemetry::init(LogFormat::Json);
    let text = e.render().to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_string();
    let setting = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => env_of_flag(arg),
        _ => None,
    };
    refuse(LogFormat::Json, setting.as_deref(), &message)
}

/// Whether the environment or the arguments ask for JSON logs, read without
/// clap (whose parse just failed).
fn json_logs_asked() -> bool {
    let args: Vec<String> = std::env::args().collect();
    std::env::var("DUCKGATE_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"))
        || args.iter().any(|a| a == "--log-format=json")
        || args
            .windows(2)
            .any(|w| w[0] == "--log-format" && w[1] == "json")
}

/// The environment variable of the flag clap names in an error
/// (`--pool-size <POOL_SIZE>` is DUCKGATE_POOL_SIZE).
fn env_of_flag(arg: &str) -> Option<String> {
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let cli = Cli::command();
    let env = std::iter::once(&cli)
        .chain(cli.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned());
    env
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
