//! Fuzzes the HTTP API from its own OpenAPI document with schemathesis
//! (`$DUCKGATE_TEST_SCHEMATHESIS`, installed by scripts/test-env): every
//! operation, every check schemathesis has (no server errors, status codes,
//! content types, headers and bodies as the spec says, valid data accepted,
//! invalid data rejected, auth not ignored), a bounded number of examples per
//! operation, and a wall-clock bound. The gateway runs with an admin token, no
//! query tokens (anonymous queries on loopback), and a real S3 secret from the
//! loopback S3/STS emulation, so the admin and health answers carry secret
//! metadata for the response-schema checks.
//!
//! `cargo test --release --test schemathesis -- --nocapture` shows the number
//! of test cases run and schemathesis' own report.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::S3Server;

const ADMIN: &str = "schemathesis-admin-0123456789";
/// Test cases per operation and phase.
const MAX_EXAMPLES: u32 = 30;
/// Wall-clock bound of the whole schemathesis run.
const WALL_CLOCK: Duration = Duration::from_secs(300);

/// schemathesis.toml for the run. Two checks are narrowed for `POST /query`,
/// `POST /statements` (the same body) and `GET /query` and its per-format
/// routes (the same fields in the URL; HEAD the first only) only, each because it cannot apply as
/// written:
///
/// - `positive_data_acceptance` also accepts 400 there. A schema-valid body
///   can still be invalid SQL, carry a `params` array whose length does
///   not match the statement's placeholders, or ask a CSV answer for
///   Arrow's buffer compression; neither DuckDB's grammar nor those
///   consistencies can be written in JSON Schema, and 400 is the contract
///   for them. Every other operation keeps the default.
/// - `not_a_server_error` also accepts 504 there: it is the documented
///   answer when a query runs past the `timeout_ms` the client itself chose
///   (schemathesis sends 1 or 2 ms). Every other 5xx still fails.
///
/// Most generated `sql` values are replaced by real statements (one reads
/// S3, one is refused by the guard), so 200 answers in every format, and
/// their schemas, are exercised, not only the 400 of random text.
const CONFIG: &str = r#"
[[operations]]
include-name = "POST /query"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "504"]

[[operations]]
include-name = "POST /statements"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "504"]

[[operations]]
include-name-regex = "^GET /query(/(arrow|csv|ndjson|parquet))?$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "504"]

[[operations]]
include-name-regex = "^HEAD /query(/(arrow|csv|ndjson|parquet))?$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]

[dictionaries.sql]
values = [
    "SELECT 42 AS answer",
    "SELECT * FROM range(3)",
    "SELECT 'x' AS s, NULL AS n, 1.5 AS d, [1, 2] AS l, {'a': 1} AS st, DATE '2024-01-01' AS dt",
    "SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')",
    "DROP SECRET duckgate_s3",
]

[parameters]
"body.sql" = { dictionary = "sql", probability = 0.7 }
"query.sql" = { dictionary = "sql", probability = 0.7 }
"#;

fn schemathesis() -> String {
    std::env::var("DUCKGATE_TEST_SCHEMATHESIS").unwrap_or_else(|_| {
        panic!("DUCKGATE_TEST_SCHEMATHESIS is not set: run the suite with scripts/test (scripts/test-env installs schemathesis)")
    })
}

/// `N` from schemathesis' summary line `N generated, ...`.
fn cases_run(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let (n, rest) = line.trim().split_once(' ')?;
        rest.starts_with("generated")
            .then(|| n.parse().ok())
            .flatten()
    })
}

#[tokio::test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
async fn openapi_fuzzing_finds_no_server_errors_or_spec_violations() {
    let started = Instant::now();
    let s3 = S3Server::start(&[]);
    // A process: a panic in any of its threads reaches its log (stderr)
    // through the panic hook, which the check at the end reads; in this
    // process the hook would print to the test's stderr instead.
    let g = s3.app(3600).env("DUCKGATE_ADMIN_TOKEN", ADMIN).start();
    let work = tempfile::tempdir().unwrap();
    let out_path = work.path().join("schemathesis.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let config = common::write_file(work.path(), "schemathesis.toml", CONFIG);

    let mut child = Command::new(schemathesis())
        .current_dir(work.path())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(g.url("/openapi.json"))
        .args(["--url", &g.base])
        // Schemathesis leaves out the operation that serves the schema
        // itself unless asked; this selects all of them.
        .args(["--include-path-regex", "."])
        .args(["--checks", "all"])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        // One worker: with two, hypothesis parses lambda sources from two
        // threads at once, which trips CPython 3.11's AST recursion-depth
        // bookkeeping (gh-106905: "SystemError: AST constructor recursion
        // depth mismatch"), failing the run inside the tool.
        .args(["--workers", "1"])
        .args(["--request-timeout", "30"])
        // The admin operations need the admin token to get past 401; the
        // query route ignores it (no query tokens are configured). The
        // `ignored_auth` check still sends requests without it.
        .args(["--header", &format!("Authorization: Bearer {ADMIN}")])
        // No example database on disk: every run starts fresh.
        .args(["--generation-database", "none"])
        .args(["--no-color", "--output-truncate", "false"])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("spawn schemathesis");
    let deadline = Instant::now() + WALL_CLOCK;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&out_path).unwrap_or_default();
            panic!("schemathesis ran past {WALL_CLOCK:?}:\n{output}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let output = std::fs::read_to_string(&out_path).unwrap();
    eprintln!("{output}");
    let cases = cases_run(&output);
    eprintln!(
        "schemathesis: {} test cases run against {} in {:.1} s (exit {:?})",
        cases.map_or("an unknown number of".to_string(), |n| n.to_string()),
        g.base,
        started.elapsed().as_secs_f64(),
        status.code()
    );
    let selected = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Selected: "))
        .and_then(|s| s.split_once('/'));
    assert!(
        selected.is_some_and(|(n, total)| n == total && n != "0"),
        "schemathesis did not test every operation ({selected:?}):\n{output}"
    );
    assert!(
        status.success(),
        "schemathesis found problems (exit {:?}):\n{output}",
        status.code()
    );
    assert!(cases.is_some_and(|n| n > 0), "no test cases ran:\n{output}");
    // The gateway is still healthy and its S3 secret still works.
    assert_eq!(g.health().await["status"], "ok");
    let v = g
        .query_ok("SELECT count(*) FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"], serde_json::json!([[3]]));
    assert!(!g.log_text().contains("panicked"), "{}", g.log_text());
}
