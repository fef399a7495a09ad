//! httpfs copies `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` from the process
//! environment into global settings that `current_setting()` and
//! `duckdb_settings()` read. The gateway's engine empties them before any
//! client connection exists (issue 9, #3): checked in-process, on the same
//! database a pooled connection would use.

use crate::common;

use std::sync::Arc;

use clap::Parser;
use duckgate::config::Cli;
use duckgate::engine::Engine;
use duckgate::state::Health;

const ENV_KEY_ID: &str = "AKIAENVIRONMENTBASE1";
const ENV_SECRET: &str = "environment-base-secret-do-not-leak";

/// Set in the copy of this test binary that the test runs as a process of
/// its own, with the credentials in its environment (they must reach no
/// other test of this binary).
const CHILD: &str = "DUCKGATE_TEST_HTTPFS_SETTINGS_CHILD";

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn settings_hold_no_credentials_from_the_environment() {
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "venv::httpfs_settings::settings_hold_no_credentials_from_the_environment",
                "--exact",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("AWS_ACCESS_KEY_ID", ENV_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
            .env("AWS_SESSION_TOKEN", ENV_SECRET)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::try_parse_from([
        "duckgate",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--extension-dir",
        &common::extension_dir(),
    ])
    .unwrap();
    // On a thread with the stack the engine requires of its threads.
    let engine = std::thread::Builder::new()
        .stack_size(duckgate::engine::nesting::STACK_BYTES)
        .spawn(move || {
            Engine::open(
                &cli.config,
                Arc::new(Health::new("test".into())),
                true,
                Default::default(),
            )
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let pooled = engine.db.connect().unwrap();
    let all: Vec<String> = pooled
        .prepare("SELECT name || '=' || coalesce(value, '') FROM duckdb_settings()")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(all.len() > 50);
    for s in &all {
        assert!(
            !s.contains(ENV_SECRET) && !s.contains(ENV_KEY_ID),
            "a setting holds a credential from the environment: {}",
            s.split('=').next().unwrap_or("")
        );
    }
    // URL parameters are refused by the S3 path guard instead of httpfs's
    // compatibility mode, which would make glob characters literal.
    assert!(all.iter().any(|s| s == "s3_url_compatibility_mode=false"));
}
