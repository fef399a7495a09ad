//! DuckDB's own type tests replayed through the PostgreSQL door with
//! psycopg 3 (issue 58): `tests/support/replay_types_pg.py` reads every
//! query of `tests/data/duckdb-types` over the door in the text and the
//! binary formats and compares each value with Python DuckDB 1.5.5's by
//! the mapping of docs/postgres.md "Types". A slow suite (minutes on a
//! loaded machine), left out of `scripts/test --fast`.

use crate::common;
use crate::common::Gateway;

use super::pg_door::pg_addr;

/// Differences known and not yet fixed: file, line (0: every line of the
/// file), what differs. The files past line 0 came with the replay's
/// widening to every type-test file of DuckDB 1.5.5 (VARIANT, TYPE, maps
/// keyed by temporal and BLOB values) after the door's own mapping was
/// written; docs/postgres.md lists them under "Not supported yet".
const KNOWN: &[(&str, u64, &str)] = &[
    (
        "union/union_list.test",
        85,
        "a UNION of lists whose member DuckDB says is NULL arrives as another member's list",
    ),
    (
        "variant/",
        0,
        "VARIANT values: the door's text is not DuckDB's rendering of the value",
    ),
    (
        "type/test_make_get_type.test",
        0,
        "TYPE values: Python DuckDB cannot fetch them (NotImplementedException), the door answers",
    ),
    (
        "nested/map/map_from_entries/data_types.test",
        0,
        "a MAP keyed by BLOB, INTERVAL, TIME or TIMESTAMP: the door's text lacks DuckDB's quoting of keys",
    ),
    (
        "timestamp/test_infinite_time.test",
        0,
        "a MAP keyed by an infinite timestamp: the same quoting of keys",
    ),
    (
        "enum/test_enum_to_numbers.test",
        100,
        "EXPLAIN: the harness's reference wraps it in a SELECT, which DuckDB's parser refuses",
    ),
    (
        "geo/geometry_intersection_filter.test_slow",
        0,
        "EXPLAIN: the harness's reference wraps it in a SELECT, which DuckDB's parser refuses",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg); scripts/test installs it"]
async fn duckdb_type_tests_replayed_through_psycopg() {
    let g = Gateway::builder()
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_PG_LISTEN", "127.0.0.1:0")
        .spawn_app()
        .await;
    let addr = pg_addr(&g).await;
    let port = addr.rsplit(':').next().unwrap_or_default();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = g.data_dir.path().join("replay-pg.json");
    let dsn = format!("host=127.0.0.1 port={port} user=anyone dbname=gateway sslmode=disable");
    let out = std::process::Command::new(common::test_python())
        .arg(root.join("tests/support/replay_types_pg.py"))
        .args(["--base", &g.base, "--pg", &dsn, "--report"])
        .arg(&report)
        .arg(root.join("tests/data/duckdb-types"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("python");
    assert!(out.status.success(), "the replay harness failed");
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let wrong: Vec<String> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "wrong")
        .filter(|c| {
            !KNOWN.iter().any(|(file, line, _)| {
                c["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with(file) || (file.ends_with('/') && f.contains(file)))
                    && (*line == 0 || c["line"] == *line)
            })
        })
        .map(|c| {
            format!(
                "{}:{}\n  {}\n  {}",
                c["file"], c["line"], c["query"], c["detail"]
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} answers differ from DuckDB's:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let same = report["counts"]["same"].as_u64().unwrap_or(0);
    assert!(
        same >= 1000,
        "only {same} answers compared: {}",
        report["counts"]
    );
}
