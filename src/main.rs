//! The `duckgate` binary: parse the configuration, start logging, serve until
//! SIGINT or SIGTERM.

use clap::Parser;
use duckgate::config::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Openapi) = cli.command {
        println!("{}", duckgate::api::docs::spec_json());
        return std::process::ExitCode::SUCCESS;
    }
    let config = cli.serve_config();
    duckgate::telemetry::init(config.server.log_format);
    // Refuse a bad configuration before binding anything.
    if let Err(e) = config
        .validate()
        .and_then(|_| duckgate::load_tokens(&config, config.server.listen).map(|_| ()))
    {
        eprintln!("duckgate: {e}");
        return std::process::ExitCode::from(2);
    }
    let listener = match tokio::net::TcpListener::bind(config.server.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "duckgate: DUCKGATE_LISTEN: cannot listen on {}: {e}",
                config.server.listen
            );
            return std::process::ExitCode::from(2);
        }
    };
    match duckgate::run(config, listener, shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, naming the setting where there is one.
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
