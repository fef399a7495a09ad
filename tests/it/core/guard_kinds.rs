//! Every kind of statement the pinned DuckDB parses, and every slot of it
//! that holds an expression or a query, either is judged by the guard or is
//! refused (issue 20). Two halves:
//!
//! - The kinds: the variants of DuckDB's `StatementType`, `ParseInfoType`,
//!   `CatalogType` (what CREATE makes), `AlterType` and `AlterTableType`, read
//!   from the headers of the DuckDB the gateway is built with, must equal the
//!   lists below, each with what covers it. A DuckDB that adds a kind fails
//!   this test until someone decides how the guard treats it.
//! - The slots: each sample runs twice under the read-write policy, once
//!   with a harmless constant and once with a probe the guard refuses
//!   anywhere (`duckdb_secrets()`, which reveals secrets). Where the
//!   harmless statement runs (200), the probe's must be refused (403): the
//!   slot is inspected. Where DuckDB or the policy refuses the kind itself,
//!   the probe's is refused too. A probe never runs.

use std::collections::BTreeSet;

use crate::common::Gateway;
use serde_json::json;

const PROBE: &str = "(SELECT count(*) FROM duckdb_secrets())";
/// For slots DuckDB allows no subquery in (CHECK, generated columns): a
/// scalar function off the allow-list.
const SCALAR_PROBE: &str = "length(getenv('HOME'))";

/// Statements with `{}` where an expression or query goes (`{s}`: an
/// expression without subqueries); statements without either have no slot
/// and are run once, for their kind.
const SAMPLES: &[&str] = &[
    // SELECT and what reads inside other statements.
    "SELECT {} AS x",
    "EXPLAIN SELECT {} AS x",
    "EXPLAIN ANALYZE SELECT {} AS x",
    "SUMMARIZE SELECT {} AS x",
    "DESCRIBE SELECT {} AS x",
    "PREPARE p1 AS SELECT {} AS x",
    "CALL range({})",
    // INSERT: values, query, RETURNING, ON CONFLICT.
    "INSERT INTO t VALUES (100, {})",
    "INSERT INTO t SELECT 101, {}",
    "INSERT INTO t VALUES (102, 1) RETURNING {}",
    "INSERT INTO t VALUES (1, 1) ON CONFLICT DO UPDATE SET j = {}",
    "INSERT INTO t VALUES (1, 1) ON CONFLICT DO UPDATE SET j = 2 WHERE j < {}",
    // UPDATE and DELETE: SET, WHERE, FROM/USING, RETURNING.
    "UPDATE t SET j = {}",
    "UPDATE t SET j = 1 WHERE i = {}",
    "UPDATE t SET j = s.x FROM (SELECT {} AS x) s",
    "UPDATE t SET j = 1 RETURNING {}",
    "DELETE FROM t WHERE i = {} + 1000",
    "DELETE FROM t USING (SELECT {} AS x) s WHERE t.i = s.x + 1000",
    "DELETE FROM t WHERE i = 1000 RETURNING {}",
    "MERGE INTO t USING (SELECT 1 AS x) s ON t.i = s.x WHEN MATCHED THEN UPDATE SET j = {}",
    // CREATE: every kind with an expression or a query.
    "CREATE TABLE c_default (i INT DEFAULT {})",
    "CREATE TABLE c_check (i INT CHECK (i < {s} + 10))",
    "CREATE TABLE c_generated (i INT, g INT GENERATED ALWAYS AS (i + {s}))",
    "CREATE TABLE c_as AS SELECT {} AS x",
    "CREATE TABLE c_fk (i INT REFERENCES t (i), j INT DEFAULT {})",
    "CREATE VIEW v_q AS SELECT {} AS x",
    "CREATE MACRO m_s(a) AS a + {}",
    "CREATE MACRO m_d(a, b := {}) AS a + b",
    "CREATE MACRO m_t(a) AS TABLE SELECT {} AS x",
    "CREATE TYPE e_q AS ENUM (SELECT ({})::VARCHAR)",
    "CREATE INDEX i_e ON t ((j + {}))",
    "CREATE SEQUENCE s_q START WITH 1",
    "CREATE SECRET sec_q (TYPE s3, KEY_ID ({})::VARCHAR)",
    // ALTER TABLE: defaults, types, constraints.
    "ALTER TABLE t ADD COLUMN k_{n} INT DEFAULT {}",
    "ALTER TABLE t ALTER COLUMN j SET DEFAULT {}",
    "ALTER TABLE t ALTER j TYPE BIGINT USING (j + {})",
    "ALTER TABLE t ADD CONSTRAINT ck CHECK (j < {s})",
    "ALTER TABLE t SET PARTITIONED BY ({})",
    "ALTER TABLE t SET SORTED BY ({})",
    // Kinds the policy never admits, with an expression where they take one.
    "SET threads = {}",
    "SET VARIABLE v_q = {}",
    "PRAGMA threads = {}",
    "COPY (SELECT {} AS x) TO '/tmp/duckgate-kinds.csv'",
    "ATTACH ':memory:' AS a_q",
    "LOAD httpfs",
    "EXPORT DATABASE '/tmp/duckgate-kinds-export'",
    "COPY FROM DATABASE memory TO memory",
    "UPDATE EXTENSIONS",
    "VACUUM t",
    "ANALYZE t",
    "BEGIN TRANSACTION",
    "CHECKPOINT",
    "DETACH a_q",
    "USE memory",
    "RESET threads",
    "EXECUTE p1",
    "COMMENT ON TABLE t IS 'x'",
    "DROP TABLE IF EXISTS c_none",
    "CREATE SCHEMA s_none",
];

/// What covers each variant of DuckDB's enums: a sample above (by its
/// start) or why the variant has no slot to inspect.
const KINDS: &[(&str, &[(&str, &str)])] = &[
    (
        "common/enums/statement_type.hpp:StatementType",
        &[
            ("INVALID_STATEMENT", "never parsed"),
            ("SELECT_STATEMENT", "SELECT"),
            ("INSERT_STATEMENT", "INSERT"),
            ("UPDATE_STATEMENT", "UPDATE"),
            ("CREATE_STATEMENT", "CREATE"),
            ("DELETE_STATEMENT", "DELETE"),
            ("PREPARE_STATEMENT", "PREPARE"),
            ("EXECUTE_STATEMENT", "EXECUTE"),
            ("ALTER_STATEMENT", "ALTER"),
            ("TRANSACTION_STATEMENT", "BEGIN"),
            ("COPY_STATEMENT", "COPY ("),
            ("ANALYZE_STATEMENT", "ANALYZE"),
            ("VARIABLE_SET_STATEMENT", "SET VARIABLE"),
            ("CREATE_FUNC_STATEMENT", "CREATE MACRO"),
            ("EXPLAIN_STATEMENT", "EXPLAIN"),
            ("DROP_STATEMENT", "DROP"),
            ("EXPORT_STATEMENT", "EXPORT"),
            ("PRAGMA_STATEMENT", "PRAGMA"),
            ("VACUUM_STATEMENT", "VACUUM"),
            ("CALL_STATEMENT", "CALL"),
            ("SET_STATEMENT", "SET threads"),
            ("LOAD_STATEMENT", "LOAD"),
            (
                "RELATION_STATEMENT",
                "built by client APIs, never parsed from SQL text",
            ),
            (
                "EXTENSION_STATEMENT",
                "parsed only by a loaded extension's parser; clients cannot LOAD",
            ),
            (
                "LOGICAL_PLAN_STATEMENT",
                "built by client APIs, never parsed from SQL text",
            ),
            ("ATTACH_STATEMENT", "ATTACH"),
            ("DETACH_STATEMENT", "DETACH"),
            (
                "MULTI_STATEMENT",
                "one statement per request: refused before the guard",
            ),
            ("COPY_DATABASE_STATEMENT", "COPY FROM DATABASE"),
            ("UPDATE_EXTENSIONS_STATEMENT", "UPDATE EXTENSIONS"),
            ("MERGE_INTO_STATEMENT", "MERGE INTO"),
        ],
    ),
    (
        "parser/parsed_data/parse_info.hpp:ParseInfoType",
        &[
            ("ALTER_INFO", "ALTER"),
            ("ATTACH_INFO", "ATTACH"),
            ("COPY_INFO", "COPY ("),
            ("CREATE_INFO", "CREATE"),
            ("CREATE_SECRET_INFO", "CREATE SECRET"),
            ("DETACH_INFO", "DETACH"),
            ("DROP_INFO", "DROP"),
            ("BOUND_EXPORT_DATA", "EXPORT"),
            ("LOAD_INFO", "LOAD"),
            ("PRAGMA_INFO", "PRAGMA"),
            ("SHOW_SELECT_INFO", "SUMMARIZE"),
            ("TRANSACTION_INFO", "BEGIN"),
            ("VACUUM_INFO", "VACUUM"),
            ("COMMENT_ON_INFO", "COMMENT ON"),
            ("COMMENT_ON_COLUMN_INFO", "COMMENT ON"),
            ("COPY_DATABASE_INFO", "COPY FROM DATABASE"),
            ("UPDATE_EXTENSIONS_INFO", "UPDATE EXTENSIONS"),
        ],
    ),
    (
        "common/enums/catalog_type.hpp:CatalogType",
        &[
            ("INVALID", "never parsed"),
            ("TABLE_ENTRY", "CREATE TABLE"),
            ("SCHEMA_ENTRY", "CREATE SCHEMA"),
            ("VIEW_ENTRY", "CREATE VIEW"),
            ("INDEX_ENTRY", "CREATE INDEX"),
            ("PREPARED_STATEMENT", "PREPARE"),
            ("SEQUENCE_ENTRY", "CREATE SEQUENCE"),
            ("COLLATION_ENTRY", "no CREATE COLLATION in DuckDB's SQL"),
            ("TYPE_ENTRY", "CREATE TYPE"),
            ("DATABASE_ENTRY", "ATTACH"),
            (
                "COORDINATE_SYSTEM_ENTRY",
                "no SQL creates one (spatial's catalog entries)",
            ),
            ("TABLE_FUNCTION_ENTRY", "CREATE MACRO m_t"),
            ("SCALAR_FUNCTION_ENTRY", "CREATE MACRO m_s"),
            ("AGGREGATE_FUNCTION_ENTRY", "no SQL creates one"),
            ("PRAGMA_FUNCTION_ENTRY", "no SQL creates one"),
            ("COPY_FUNCTION_ENTRY", "no SQL creates one"),
            ("MACRO_ENTRY", "CREATE MACRO m_s"),
            ("TABLE_MACRO_ENTRY", "CREATE MACRO m_t"),
            ("DELETED_ENTRY", "catalog bookkeeping, never created by SQL"),
            ("RENAMED_ENTRY", "catalog bookkeeping, never created by SQL"),
            ("SECRET_ENTRY", "CREATE SECRET"),
            ("SECRET_TYPE_ENTRY", "no SQL creates one"),
            ("SECRET_FUNCTION_ENTRY", "no SQL creates one"),
            (
                "DEPENDENCY_ENTRY",
                "catalog bookkeeping, never created by SQL",
            ),
        ],
    ),
    (
        "parser/parsed_data/alter_info.hpp:AlterType",
        &[
            ("INVALID", "never parsed"),
            ("ALTER_TABLE", "ALTER TABLE"),
            ("ALTER_VIEW", "ALTER VIEW renames only: no slot"),
            (
                "ALTER_SEQUENCE",
                "ALTER SEQUENCE changes ownership only: no slot",
            ),
            ("CHANGE_OWNERSHIP", "no slot"),
            (
                "ALTER_SCALAR_FUNCTION",
                "added by extensions' APIs, never by SQL",
            ),
            (
                "ALTER_TABLE_FUNCTION",
                "added by extensions' APIs, never by SQL",
            ),
            ("SET_COMMENT", "COMMENT ON"),
            ("SET_COLUMN_COMMENT", "COMMENT ON"),
            ("ALTER_DATABASE", "ALTER DATABASE renames only: no slot"),
        ],
    ),
    (
        "parser/parsed_data/alter_table_info.hpp:AlterTableType",
        &[
            ("INVALID", "never parsed"),
            ("RENAME_COLUMN", "no slot"),
            ("RENAME_TABLE", "no slot"),
            ("ADD_COLUMN", "ALTER TABLE t ADD COLUMN"),
            ("REMOVE_COLUMN", "no slot"),
            ("ALTER_COLUMN_TYPE", "ALTER TABLE t ALTER j TYPE"),
            ("SET_DEFAULT", "ALTER TABLE t ALTER COLUMN j SET DEFAULT"),
            ("FOREIGN_KEY_CONSTRAINT", "CREATE TABLE c_fk"),
            ("SET_NOT_NULL", "no slot"),
            ("DROP_NOT_NULL", "no slot"),
            ("SET_COLUMN_COMMENT", "no slot"),
            ("ADD_CONSTRAINT", "ALTER TABLE t ADD CONSTRAINT"),
            ("SET_PARTITIONED_BY", "ALTER TABLE t SET PARTITIONED BY"),
            ("SET_SORTED_BY", "ALTER TABLE t SET SORTED BY"),
            ("ADD_FIELD", "ALTER TABLE t ADD COLUMN"),
            ("REMOVE_FIELD", "no slot"),
            ("RENAME_FIELD", "no slot"),
            ("SET_TABLE_OPTIONS", "no slot"),
            ("RESET_TABLE_OPTIONS", "no slot"),
        ],
    ),
];

/// The variant names of `enum class NAME` in `header`.
fn enum_variants(header: &str, name: &str) -> BTreeSet<String> {
    let start = header
        .find(&format!("enum class {name} "))
        .unwrap_or_else(|| panic!("enum {name} not in its header"));
    let body = &header[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
    body.lines()
        .map(|l| l.split("//").next().unwrap())
        .flat_map(|l| l.split(','))
        .map(|v| v.split('=').next().unwrap().trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

#[test]
fn every_kind_of_the_pinned_duckdb_is_listed_with_what_covers_it() {
    let root = std::env::var("DUCKDB_LIB_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/libduckdb-v1.5.5")
        });
    let root = if root.is_relative() {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(root)
    } else {
        root
    };
    let include = root.join("duckdb/src/include/duckdb");
    if !include.exists() {
        eprintln!(
            "SKIPPED: DuckDB's headers are not at {} (a --features bundled build); the default build checks them",
            include.display()
        );
        return;
    }
    for (place, listed) in KINDS {
        let (file, name) = place.split_once(':').unwrap();
        let header = std::fs::read_to_string(include.join(file)).unwrap();
        let found = enum_variants(&header, name);
        let known: BTreeSet<String> = listed.iter().map(|(v, _)| v.to_string()).collect();
        assert_eq!(
            found,
            known,
            "DuckDB's {name} changed: decide how the guard treats the new kinds, then list them here"
        );
        // Each cover that names a sample names one that exists.
        for (variant, cover) in listed.iter() {
            let is_sample = cover.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && !cover.starts_with("ALTER VIEW renames")
                && !cover.starts_with("ALTER SEQUENCE")
                && !cover.starts_with("ALTER DATABASE");
            if is_sample {
                assert!(
                    SAMPLES.iter().any(|s| s.starts_with(cover)),
                    "{name}::{variant}: no sample starts with `{cover}`"
                );
            }
        }
    }
}

#[tokio::test]
async fn every_slot_is_judged_or_its_kind_refused() {
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .spawn_app()
        .await;
    for setup in [
        "CREATE TABLE t (i INT PRIMARY KEY, j INT)",
        "INSERT INTO t VALUES (1, 1), (2, 2)",
    ] {
        g.query_ok(setup).await;
    }
    let mut report = Vec::new();
    let mut holes = Vec::new();
    for (n, sample) in SAMPLES.iter().enumerate() {
        let sample = sample.replace("{n}", &n.to_string());
        let g = &g;
        let run = |sql: String| async move {
            let r = g.query(json!({ "sql": sql })).await;
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            (status, body["detail"].as_str().unwrap_or("").to_string())
        };
        if !sample.contains("{}") && !sample.contains("{s}") {
            // No slot: the kind alone decides, and it is one of the kinds
            // listed above.
            let (status, detail) = run(sample.clone()).await;
            report.push(format!("{status} (no slot)  {sample}  | {detail}"));
            if !matches!(status, 200 | 403) {
                holes.push(format!("{sample}: {status} ({detail})"));
            }
            continue;
        }
        // The probe first: a harmless run may create what the probe's
        // statement would then find taken.
        let with = |value: &str, scalar: &str| sample.replace("{}", value).replace("{s}", scalar);
        let (probe_status, probe_detail) = run(with(PROBE, SCALAR_PROBE)).await;
        let (plain_status, plain_detail) = run(with("1", "1")).await;
        report.push(format!(
            "{plain_status} / {probe_status}  {sample}  | {}",
            if probe_status == 403 {
                &probe_detail
            } else {
                &plain_detail
            }
        ));
        let ok = match (plain_status, probe_status) {
            // Never: the probe ran.
            (_, 200) => false,
            // The slot is judged: the harmless statement runs, the probe is refused.
            (200, 403) => true,
            // The kind is refused whatever it holds.
            (403, 403) => true,
            // DuckDB itself refuses the statement (not supported here):
            // nothing runs either way.
            (400, 400 | 403) => true,
            _ => false,
        };
        if !ok {
            holes.push(format!(
                "{sample}: harmless {plain_status}, probe {probe_status} ({probe_detail})"
            ));
        }
    }
    eprintln!("harmless / probe  statement | why\n{}", report.join("\n"));
    assert!(holes.is_empty(), "slots not judged:\n{}", holes.join("\n"));
}
