//! Named sources (issue 39): the operator names files and globs with their
//! reader options (`[[source]]`), the gateway makes each a view of catalog
//! `sources`, and roles grant them like tables. Each answer is DuckDB's own
//! over the same files, read in-process with the same reader and options.
//!
//! `acme` (role `acme`) reads its sources and nothing else of the files:
//! another tenant's source is as missing as a name that exists nowhere, and
//! a raw path is refused unless it is exactly a granted source's; `bob`
//! holds no role and reads everything; `carol`'s role grants raw paths.

use super::grants::reference;
use crate::common::Gateway;
use serde_json::Value;

const ACME: &str = "acme-token-0123456789abcdef01";
const BOB: &str = "bob-token-0123456789abcdef012";
const CAROL: &str = "carol-token-0123456789abcdef0";

/// The operator's files, written by DuckDB: two tenants' Parquet, a hive
/// partitioned event set, a `|`-delimited CSV.
fn files(root: &std::path::Path) {
    for dir in [
        "acme",
        "globex",
        "events/tenant=acme",
        "events/tenant=globex",
        "csv",
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let r = root.display();
    conn.execute_batch(&format!(
        "COPY (SELECT i AS id, i * 2 AS amount FROM range(5) t(i)) TO '{r}/acme/a1.parquet';
         COPY (SELECT i + 5 AS id, i * 2 AS amount FROM range(3) t(i)) TO '{r}/acme/a2.parquet';
         COPY (SELECT i AS id, i * 3 AS amount FROM range(7) t(i)) TO '{r}/globex/g.parquet';
         COPY (SELECT i AS n FROM range(4) t(i)) TO '{r}/events/tenant=acme/e.parquet';
         COPY (SELECT i AS n FROM range(6) t(i)) TO '{r}/events/tenant=globex/e.parquet';
         COPY (SELECT i AS k, 'v|' || i AS note FROM range(3) t(i))
              TO '{r}/csv/c.csv' (DELIMITER ';', HEADER);"
    ))
    .unwrap();
}

fn config(root: &std::path::Path) -> String {
    let r = root.display();
    format!(
        r#"
[[source]]
name = "acme_orders"
path = "{r}/acme/*.parquet"

[[source]]
name = "globex_orders"
paths = ["{r}/globex/*.parquet"]
format = "parquet"

[[source]]
name = "events"
path = "{r}/events/*/*.parquet"
hive_partitioning = true

[[source]]
name = "notes"
path = "{r}/csv/c.csv"
[source.options]
delim = ";"
header = true

[[role]]
name = "acme"
members = ["acme"]
read = ["sources.main.acme_orders", "sources.main.events", "sources.main.notes"]

[[role]]
name = "raw"
members = ["carol"]
read = ["sources.main.acme_orders"]
raw_paths = true
"#
    )
}

#[tokio::test]
async fn named_sources_are_read_by_name_and_granted_like_tables() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    files(&root);
    let toml = dir.path().join("gateway.toml");
    std::fs::write(&toml, config(&root)).unwrap();
    let g = Gateway::builder()
        .env("DUCKGATE_FILES_DIR", root.display())
        .env("DUCKGATE_CONFIG", toml.display())
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("acme:{ACME},bob:{BOB},carol:{CAROL}"),
        )
        .start();
    let duckdb = duckdb::Connection::open_in_memory().unwrap();
    let r = root.display();
    let mut attempts = 0;

    // By name, DuckDB's answer over the same files with the same reader.
    let reads = [
        (
            "SELECT * FROM sources.acme_orders ORDER BY ALL",
            format!("SELECT * FROM read_parquet(['{r}/acme/*.parquet']) ORDER BY ALL"),
        ),
        (
            "SELECT tenant, count(*), sum(n) FROM sources.events GROUP BY ALL ORDER BY ALL",
            format!(
                "SELECT tenant, count(*), sum(n) FROM read_parquet(['{r}/events/*/*.parquet'], \
                 hive_partitioning = true) GROUP BY ALL ORDER BY ALL"
            ),
        ),
        (
            "SELECT * FROM sources.main.notes ORDER BY ALL",
            format!("SELECT * FROM read_csv(['{r}/csv/c.csv'], delim = ';', header = true) ORDER BY ALL"),
        ),
        (
            "SELECT a.id, e.n FROM sources.acme_orders a JOIN sources.events e ON a.id = e.n \
             WHERE e.tenant = 'acme' ORDER BY ALL",
            format!(
                "SELECT a.id, e.n FROM read_parquet(['{r}/acme/*.parquet']) a JOIN \
                 read_parquet(['{r}/events/*/*.parquet'], hive_partitioning = true) e \
                 ON a.id = e.n WHERE e.tenant = 'acme' ORDER BY ALL"
            ),
        ),
    ];
    for (sql, want_sql) in &reads {
        let want = reference(&duckdb, want_sql).unwrap_or_else(|e| panic!("{want_sql}: {e}"));
        assert_ne!(want, Value::Array(Vec::new()), "{want_sql}");
        for token in [ACME, BOB] {
            let (status, body) = g.run_sql(token, sql).await;
            assert_eq!(status, 200, "{sql}: {body}");
            assert_eq!(body["rows"], want, "{sql}");
            attempts += 1;
        }
    }

    // Another tenant's source is missing for acme, exactly as a name that
    // exists nowhere; bob reads it.
    for template in [
        "SELECT * FROM {x}",
        "SELECT count(*) FROM sources.acme_orders, {x}",
        "SELECT * FROM sources.acme_orders WHERE id IN (SELECT id FROM {x})",
    ] {
        let sql = template.replace("{x}", "sources.globex_orders");
        let control = template.replace("{x}", "sources.nosuch_orders");
        let (status, body) = g.run_sql(ACME, &sql).await;
        let (want_status, want) = g.run_sql(ACME, &control).await;
        assert_eq!((status, want_status), (400, 400), "{sql}: {body}");
        assert_eq!(
            body["detail"].as_str().unwrap().replace("globex", "nosuch"),
            want["detail"].as_str().unwrap(),
            "{sql}"
        );
        assert_eq!(
            (&body["line"], &body["column"]),
            (&want["line"], &want["column"])
        );
        let (status, body) = g.run_sql(BOB, &sql).await;
        assert_eq!(status, 200, "bob: {sql}: {body}");
        attempts += 2;
    }

    // Raw paths: refused to acme, but for exactly a source it is granted;
    // carol's role grants them; bob reads them.
    let globex = format!("SELECT count(*) FROM read_parquet('{r}/globex/*.parquet')");
    let one_file = format!("SELECT count(*) FROM '{r}/acme/a1.parquet'");
    let other_glob = format!("SELECT count(*) FROM read_parquet('{r}/*/*.parquet')");
    let own = format!("SELECT count(*) FROM read_parquet('{r}/acme/*.parquet')");
    for (sql, acme_status) in [
        (&globex, 403),
        (&one_file, 403),
        (&other_glob, 403),
        (&own, 200),
    ] {
        let want = reference(&duckdb, sql).unwrap();
        let (status, body) = g.run_sql(ACME, sql).await;
        assert_eq!(status, acme_status, "acme: {sql}: {body}");
        if status == 200 {
            assert_eq!(body["rows"], want, "{sql}");
        } else {
            assert!(
                body["detail"].as_str().unwrap().contains("named sources"),
                "{sql}: {body}"
            );
        }
        for token in [BOB, CAROL] {
            let (status, body) = g.run_sql(token, sql).await;
            assert_eq!(status, 200, "{sql}: {body}");
            assert_eq!(body["rows"], want, "{sql}");
        }
        attempts += 3;
    }

    // The catalog lists the sources acme may read, all of them for bob.
    let listed = |catalog: &Value| -> Vec<String> {
        let mut out = Vec::new();
        for d in catalog["databases"].as_array().unwrap() {
            for s in d["schemas"].as_array().unwrap() {
                for t in s["tables"].as_array().unwrap() {
                    if d["name"] == "sources" {
                        assert_eq!(d["kind"], "sources");
                        out.push(t["name"].as_str().unwrap().to_string());
                    }
                }
            }
        }
        out.sort();
        out
    };
    assert_eq!(
        listed(&g.get("/catalog", ACME).await.1),
        ["acme_orders", "events", "notes"]
    );
    assert_eq!(
        listed(&g.get("/catalog", BOB).await.1),
        ["acme_orders", "events", "globex_orders", "notes"]
    );
    let sql = "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'sources' \
               ORDER BY ALL";
    let (_, body) = g.run_sql(ACME, sql).await;
    assert_eq!(
        body["rows"],
        serde_json::json!([["acme_orders"], ["events"], ["notes"]])
    );
    // Nobody writes there.
    let (status, body) = g
        .run_sql(BOB, "CREATE VIEW sources.main.mine AS SELECT 1")
        .await;
    assert!(status == 400 || status == 403, "{body}");
    attempts += 4;
    assert!(attempts >= 30, "{attempts}");
    eprintln!("sources corpus: {attempts} attempts");
}

#[tokio::test]
async fn a_source_that_cannot_be_read_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    files(&root);
    let r = root.display();
    for (source, named) in [
        (
            format!("name = \"gone\"\npath = \"{r}/nosuch/*.parquet\""),
            "gone",
        ),
        (
            "name = \"rel\"\npath = \"acme/a1.parquet\"".to_string(),
            "rel",
        ),
        (format!("name = \"odd\"\npath = \"{r}/acme/a1.bin\""), "odd"),
        (
            format!(
                "name = \"opt\"\npath = \"{r}/acme/a1.parquet\"\n[source.options]\nfilename = true"
            ),
            "opt",
        ),
    ] {
        let toml = dir.path().join("gateway.toml");
        std::fs::write(&toml, format!("[[source]]\n{source}\n")).unwrap();
        let started = Gateway::builder()
            .env("DUCKGATE_FILES_DIR", root.display())
            .env("DUCKGATE_CONFIG", toml.display())
            .try_start();
        let Err((code, log)) = started else {
            panic!("{source}: the gateway started");
        };
        assert!(code.is_some_and(|c| c != 0), "{source}: {code:?} {log:?}");
        let log = log.join("\n");
        assert!(log.contains(&format!("`{named}`")), "{source}: {log}");
    }
}
