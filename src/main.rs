//! The `duckgate` binary: parse the configuration, start logging, serve until
//! SIGINT or SIGTERM.

use clap::Parser;
use duckgate::config::{Cli, Command};

/// glibc's malloc adapts its mmap threshold to the largest block freed and
/// its trim threshold to twice that, so after the first large result every
/// Arrow buffer comes from the heap and freed ones are kept: a 10M-row
/// Parquet statement page peaked at 246 MB, 30M rows at 337 MB. Fixed
/// thresholds (blocks of 1 MiB and more mapped and unmapped, the heap
/// trimmed past 16 MiB free) keep it at 135 and 141 MB. An operator's own
/// `MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` win.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
        && std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none()
    {
        // SAFETY: mallopt only sets allocator parameters; called before
        // any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
        }
    }
}

fn main() -> std::process::ExitCode {
    tune_malloc();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime")
        .block_on(serve())
}

async fn serve() -> std::process::ExitCode {
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
