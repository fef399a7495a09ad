//! httpfs copies `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` from the process
//! environment into global settings that `current_setting()` and
//! `duckdb_settings()` read. The gateway's engine empties them before any
//! client connection exists (issue 9, #3): checked in-process, on the same
//! database a pooled connection would use.

mod common;

use std::sync::Arc;

use clap::Parser;
use duckgate::config::Cli;
use duckgate::engine::Engine;
use duckgate::state::Health;

const ENV_KEY_ID: &str = "AKIAENVIRONMENTBASE1";
const ENV_SECRET: &str = "environment-base-secret-do-not-leak";

#[test]
fn settings_hold_no_credentials_from_the_environment() {
    // This test binary is its own process: the variables reach no other test.
    std::env::set_var("AWS_ACCESS_KEY_ID", ENV_KEY_ID);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", ENV_SECRET);
    std::env::set_var("AWS_SESSION_TOKEN", ENV_SECRET);
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
        .spawn(move || Engine::open(&cli.config, Arc::new(Health::new("test".into())), true))
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
