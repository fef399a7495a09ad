//! What the `duckgate` binary runs: parse the configuration, start logging,
//! serve until SIGINT or SIGTERM. Here rather than in `main.rs` because the
//! futures of a library's async functions are compiled in the crate that
//! polls them: a binary that awaited [`crate::run`] itself compiled the
//! gateway's whole async side again (20-26 s of its build).

use clap::Parser;

use crate::config::{Cli, Command};

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
    let cli = Cli::parse();
    if let Some(Command::Openapi) = cli.command {
        println!("{}", crate::api::docs::spec_json());
        return std::process::ExitCode::SUCCESS;
    }
    let config = cli.serve_config();
    crate::telemetry::init(config.server.log_format);
    // Refuse a bad configuration before binding anything.
    if let Err(e) = config
        .clone()
        .resolve()
        .and_then(|_| crate::load_tokens(&config, config.server.listen).map(|_| ()))
    {
        crate::telemetry::flush();
        eprintln!("duckgate: {e}");
        return std::process::ExitCode::from(2);
    }
    let listener = match tokio::net::TcpListener::bind(config.server.listen).await {
        Ok(l) => l,
        Err(e) => {
            crate::telemetry::flush();
            eprintln!(
                "duckgate: DUCKGATE_LISTEN: cannot listen on {}: {e}",
                config.server.listen
            );
            return std::process::ExitCode::from(2);
        }
    };
    match crate::run(config, listener, shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, naming the setting where there is one.
            crate::telemetry::flush();
            eprintln!("duckgate: {}", format!("{e:#}").replace('\n', " "));
            std::process::ExitCode::from(2)
        }
    }
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
