//! DuckDB's own type tests replayed through the gateway (issues 10, 59): a
//! slow suite (about 3 to 5 minutes on two cores), left out of
//! `scripts/test --fast`; CI runs it.

use crate::common;

use crate::common::Gateway;

/// Gateways the files are shared between, each with its own replay (the
/// files create objects under the same names, so one database each).
const SHARDS: usize = 2;

/// Every sqllogictest type file of DuckDB 1.5.5 (`test/sql/types/**`, see
/// tests/data/duckdb-types/README.md) replayed through the gateway in every
/// format, and through its Flight SQL listener with ADBC's driver, by
/// `tests/support/replay_types.py`, each answer compared with Python DuckDB
/// 1.5.5 doing the same work; VARIANT and TYPE values as docs/api.md maps
/// them where DuckDB's Arrow export has no type for them. Any wrong value,
/// error text in a cell, 5xx or cut body fails the test; statements the
/// security policy refuses (PREPARE, macros, TEMP tables, names in `main`)
/// are counted apart and listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn duckdb_type_tests_replayed_in_every_format() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut runs = Vec::new();
    for shard in 0..SHARDS {
        let g = Gateway::builder()
            .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
            .env("DUCKGATE_POLICY", "read-write")
            .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
            .spawn_app()
            .await;
        let flight = g.flight_uri().await;
        let report = g.data_dir.path().join("replay.json");
        let child = std::process::Command::new(common::test_python())
            .arg(root.join("tests/support/replay_types.py"))
            .args(["--base", &g.base, "--flight", &flight, "--report"])
            .arg(&report)
            .args(["--shard", &format!("{shard}/{SHARDS}")])
            .arg(root.join("tests/data/duckdb-types"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("python");
        runs.push((g, report, child));
    }
    let mut wrong = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for (g, report, child) in runs {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .expect("python");
        assert!(out.status.success(), "the replay harness failed");
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        wrong.extend(
            report["cases"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["status"] == "wrong")
                .map(|c| {
                    format!(
                        "{} {}:{}\n  {}\n  {}",
                        c["format"], c["file"], c["line"], c["query"], c["detail"]
                    )
                }),
        );
        for format in ["json", "ndjson", "csv", "arrow", "parquet", "flight"] {
            *counts.entry(format.to_string()).or_default() +=
                report["counts"][format]["same"].as_u64().unwrap_or(0);
        }
        drop(g);
    }
    assert!(
        wrong.is_empty(),
        "{} answers differ from DuckDB's:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // The replay really ran, over every file, in every format (Arrow needs
    // pyarrow): about 6,700 answers each equal DuckDB's.
    for (format, same) in counts {
        assert!(same >= 6500, "{format}: only {same} answers compared");
    }
}
