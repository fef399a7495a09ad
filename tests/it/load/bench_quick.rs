//! `bench/run --quick` (the benchmark suite of issue 6, small sizes) runs to
//! the end and prints every row of its table. A benchmark is not a test: no
//! timing figure is checked here, only that each measurement ran.
//!
//! The gateway under test is this build's binary. `scripts/test` builds the
//! examples next to it (`<target>/<profile>/examples/bench`) before the
//! tests, so the harness is used as built; only when it is missing does
//! `bench/run` build it (in release mode, in the same target directory).

use std::path::Path;
use std::process::Command;

/// The start of every row `--quick` must print.
const ROWS: &[&str] = &[
    "| 1 | small: SELECT 42, ",
    "| 1 | small: point aggregate over 1M rows, ",
    "| 2 | large: 100k rows, JSON |",
    "| 2 | large: 100k rows, NDJSON |",
    "| 2 | large: 100k rows, CSV |",
    "| 2 | large: 100k rows, ARROW |",
    "| 2 | large: 1M rows, JSON |",
    "| 2 | large: 1M rows, NDJSON |",
    "| 2 | large: 1M rows, CSV |",
    "| 2 | large: 1M rows, ARROW |",
    "| 3 | memory: peak RSS, JSON, 1M vs 100k rows |",
    "| 3 | memory: peak RSS, NDJSON, 1M vs 100k rows |",
    "| 3 | memory: peak RSS, CSV, 1M vs 100k rows |",
    "| 3 | memory: peak RSS, ARROW, 1M vs 100k rows |",
    "| 4 | /healthz at 1000/s for 3 s, ",
    "| 4 | /healthz on DUCKGATE_PROBE_LISTEN at 1000/s for 3 s, ",
    "| 5 | S3: scan 100k-row Parquet (cold, first scan) |",
    "| 5 | S3: scan 100k-row Parquet (warm, repeated) |",
    "| 6 | rotation: one rotation ",
    "| 6 | rotation: SELECT 42 p99, ",
    "| 8 | DuckLake: scan 100k-row table on S3 (warm) |",
];

#[test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
fn bench_run_quick_prints_every_row() {
    let gateway = Path::new(env!("CARGO_BIN_EXE_duckgate"));
    let bin_dir = gateway.parent().expect("binary directory");
    let mut cmd = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/run"));
    cmd.arg("--quick")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("DUCKGATE_BENCH_GATEWAY", gateway);
    let example = bin_dir.join("examples/bench");
    if example.is_file() {
        cmd.env("DUCKGATE_BENCH_EXAMPLE", &example);
    }
    if let Some(target) = bin_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let out = cmd.output().expect("run bench/run --quick");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench/run --quick failed ({}):\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    let missing: Vec<&str> = ROWS
        .iter()
        .copied()
        .filter(|row| !stdout.lines().any(|l| l.starts_with(row)))
        .collect();
    assert!(
        missing.is_empty(),
        "rows missing from the table: {missing:#?}\n{stdout}\n--- stderr ---\n{stderr}"
    );
    assert!(
        !stdout.contains("FAILED"),
        "a benchmark failed:\n{stdout}\n--- stderr ---\n{stderr}"
    );
}
