//! The statement guard's corpus (issue 3), against the real gateway (in the
//! test's process, base credentials from a file) with a real S3 secret (the
//! loopback S3/STS emulation).
//!
//! Every statement has its expected verdict in a table below. Forbidden ones
//! come in many spellings (case, `--` and nested `/* */` comments, tabs and
//! newlines, a `\r` that ends a `--` comment, the Unicode spaces DuckDB's
//! parser treats as blanks, quoted identifiers, trailing semicolons), and
//! allowed ones include queries that only look dangerous.
//!
//! A refusal is not enough: after the whole corpus has run, each test checks
//! that nothing happened. The S3 secret still reads the bucket (so nothing
//! replaced, dropped or shadowed it), `/admin/secrets` shows the same epoch
//! and key, no setting changed on any pooled connection, no database was
//! attached, no catalog object appeared, and no file was written by the COPY,
//! EXPORT, ATTACH or logging attempts (targets inside a scratch directory and
//! inside the gateway's data directory). No response body and no log line
//! carries a credential or the content of a file the client may not read.
//!
//! `{OUT}` in a statement is a scratch directory outside the data directory,
//! `{DATA}` the gateway's data directory, `{BASE}` the gateway's own URL.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::common::{assert_no_leaks, App, Endpoint, S3Server, Seen};
use serde_json::{json, Value};

const ADMIN: &str = "guard-corpus-admin-0123456789";
const POOL_SIZE: usize = 2;
const S3_COUNT: &str = "SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')";
/// Content of an object in the bucket outside the secret's scope.
const OTHER_MARKER: &str = "OTHER-BUCKET-MARKER-5d1c";
/// Text that appears only if a refused read returned file or object content.
const LEAK_MARKERS: &[&str] = &[
    "root:x:0:0",
    "localhost",
    "/etc/hostname",
    "/etc/shadow",
    "Credential operations",
    OTHER_MARKER,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    /// 200.
    Allowed,
    /// 403 `statement-forbidden`, `statement_kind` containing this text.
    Forbidden(&'static str),
    /// 400 `multiple-statements`.
    Multi,
    /// 400 `sql-error` with an `error_class`.
    SqlError,
    /// The guard admits it, DuckDB's lockdown refuses it: any 4xx, and none of
    /// the content it tried to read in the answer.
    Denied,
}
use Want::*;

struct Case {
    sql: &'static str,
    params: &'static [i64],
    want: Want,
}

const fn c(sql: &'static str, want: Want) -> Case {
    Case {
        sql,
        params: &[],
        want,
    }
}

const fn p(sql: &'static str, params: &'static [i64], want: Want) -> Case {
    Case { sql, params, want }
}

/// The secret-shadowing payload: a narrower scope than the gateway's secret,
/// so it would win for every S3 read under `data/`.
macro_rules! evil {
    () => {
        "(TYPE s3, KEY_ID 'AKIAEVILEVILEVIL', SECRET 'evil', SCOPE 's3://duckgate-test/data/')"
    };
}

/// The default (`read-only`) policy.
const READ_ONLY: &[Case] = &[
    // Reader options that create TEMP tables on a pooled connection, in
    // both spellings of named parameters.
    c("SELECT * FROM read_csv('{DATA}/files/allowed.csv', store_rejects := true, rejects_table := 'rj_alice', rejects_scan := 'rs_alice')", Forbidden("option store_rejects")),
    c("SELECT * FROM read_csv('{DATA}/files/allowed.csv', rejects_table := 'rj_alice')", Forbidden("option rejects_table")),
    c("SELECT * FROM read_csv_auto('{DATA}/files/allowed.csv', STORE_REJECTS := true)", Forbidden("option STORE_REJECTS")),
    c("SELECT * FROM read_csv('{DATA}/files/allowed.csv', store_rejects = true)", Forbidden("read_csv")),
    // ---- allowed: plain queries of every admitted kind ----
    c("SELECT 42 AS answer", Allowed),
    c(S3_COUNT, Allowed),
    c("FROM read_csv('s3://duckgate-test/data/small.csv') SELECT name ORDER BY id", Allowed),
    c("SELECT count(*) FROM read_csv('{DATA}/files/allowed.csv')", Allowed),
    c("WITH x AS (SELECT 1 AS a) SELECT a FROM x", Allowed),
    c("VALUES (1, 'one'), (2, 'two')", Allowed),
    c("FROM range(3)", Allowed),
    c("DESCRIBE SELECT 1 AS a, 'x' AS b", Allowed),
    c("SHOW TABLES", Allowed),
    c("SUMMARIZE SELECT * FROM range(10)", Allowed),
    c("EXPLAIN SELECT 1", Allowed),
    c("EXPLAIN ANALYZE SELECT sum(range) FROM range(100)", Allowed),
    c("PIVOT (VALUES (1, 'a'), (2, 'b')) t(n, k) ON k IN ('a', 'b') USING sum(n)", Allowed),
    c("UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v", Allowed),
    // Settings may hold credentials: not readable (issue 9).
    c("SELECT current_setting('threads'), current_setting('lock_configuration')", Forbidden("function current_setting()")),
    c("SELECT name, value FROM duckdb_settings() WHERE name = 'enable_external_access'", Forbidden("function duckdb_settings()")),
    // ---- allowed: looks dangerous, is not ----
    c("SELECT secret FROM (VALUES (1)) t(secret)", Allowed),
    c("SELECT \"secret\".x FROM (SELECT 1 AS x) AS \"secret\"", Allowed),
    c("WITH secret AS (SELECT 1 AS secret) SELECT secret FROM secret", Allowed),
    c("SELECT '; DROP SECRET x; --' AS s", Allowed),
    c("SELECT 1 AS one -- DROP SECRET duckgate_s3", Allowed),
    c("/* CREATE OR REPLACE SECRET duckgate_s3 (TYPE s3) */ SELECT 1", Allowed),
    c("SELECT 'duckdb_secrets()' AS s, 'which_secret(''s3://x'', ''s3'')' AS w", Allowed),
    c("SELECT $$DROP SECRET duckgate_s3; ATTACH 'x'$$ AS s", Allowed),
    c("SELECT 1 AS \"CREATE SECRET\", 2 AS \"SET threads = 1\"", Allowed),
    c("SELECT {'secret': 'x', 'query': 'y'} AS s", Allowed),
    c("SELECT 'ünïcødé 🦆' AS \"sécret\"", Allowed),
    c("SELECT 42;", Allowed),
    c("SELECT 42 ;  -- trailing comment\n\n", Allowed),
    c("\t\n  select\t42\n\t;;", Allowed),
    c("SELECT\u{a0}42\u{3000}AS\u{2003}x", Allowed),
    // DEVIATION (reported): the contract admits PIVOT, but without an IN list
    // DuckDB's parser expands it into CREATE TYPE ... AS ENUM + SELECT, two
    // statements, which the guard refuses as several statements.
    c("PIVOT (VALUES (1, 'a'), (2, 'b')) t(n, k) ON k USING sum(n)", Forbidden("MULTI")),
    // ---- CREATE SECRET ----
    c(concat!("CREATE SECRET evil ", evil!()), Forbidden("CREATE SECRET")),
    c("create or replace secret duckgate_s3 (type s3, key_id 'x', secret 'y')", Forbidden("CREATE SECRET")),
    c(concat!("CREATE PERSISTENT SECRET evil ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE TEMPORARY SECRET IF NOT EXISTS evil ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE OR REPLACE PERSISTENT SECRET evil IN local_file ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("/* hi */ CrEaTe /* a /* nested */ comment */ SeCrEt evil ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE -- line comment\n\tOR\tREPLACE\n\nSECRET \"evil\" ", evil!(), ";"), Forbidden("CREATE SECRET")),
    c(concat!("CREATE SECRET ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE SECRET évil_🦆 ", evil!()), Forbidden("CREATE SECRET")),
    c("CREATE SECRET evil (TYPE s3, PROVIDER credential_chain, SCOPE 's3://duckgate-test/data/')", Forbidden("CREATE SECRET")),
    c("CREATE SECRET evil (TYPE http, EXTRA_HTTP_HEADERS MAP {'x': 'y'})", Forbidden("CREATE SECRET")),
    // Blanks DuckDB's parser accepts between keywords (NBSP, em space, BOM).
    c(concat!("CREATE\u{a0}SECRET view ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE\u{2003}OR\u{2003}REPLACE\u{2003}SECRET schema ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("\u{feff}CREATE SECRET evil ", evil!()), Forbidden("CREATE SECRET")),
    // DuckDB ends a `--` comment at a carriage return as well as a newline.
    c(concat!("CREATE -- x\rSECRET view ", evil!(), " /*\n VIEW */"), Forbidden("CREATE SECRET")),
    // ---- DROP SECRET ----
    c("DROP SECRET duckgate_s3", Forbidden("DROP SECRET")),
    c("drop secret if exists duckgate_s3", Forbidden("DROP SECRET")),
    c("DROP TEMPORARY SECRET duckgate_s3", Forbidden("DROP SECRET")),
    c("DROP PERSISTENT SECRET IF EXISTS duckgate_s3 FROM local_file", Forbidden("DROP SECRET")),
    c("DROP SECRET \"duckgate_s3\";", Forbidden("DROP SECRET")),
    c("DROP/**/SECRET/**/duckgate_s3", Forbidden("DROP SECRET")),
    c("dRoP\n\t-- c\n  SeCrEt\tduckgate_s3 ;", Forbidden("DROP SECRET")),
    c("DROP SECRET no_such_secret_xyz", Forbidden("DROP SECRET")),
    c("DROP\u{3000}SECRET duckgate_s3", Forbidden("DROP SECRET")),
    // Not DuckDB syntax: its parser says so, nothing runs.
    c("EXPLAIN ANALYZE DROP SECRET duckgate_s3", SqlError),
    // ---- SET / RESET (settings) ----
    c("SET threads = 1", Forbidden("SET")),
    c("set threads to 1", Forbidden("SET")),
    c("SET GLOBAL enable_external_access = true", Forbidden("SET")),
    c("SET SESSION memory_limit = '1GB'", Forbidden("SET")),
    c("SET lock_configuration = false", Forbidden("SET")),
    c("SET allowed_directories = ['/']", Forbidden("SET")),
    c("SET s3_access_key_id = 'AKIAEVIL'", Forbidden("SET")),
    c("/**/SET/**/\"threads\"=1", Forbidden("SET")),
    c("SET VARIABLE x = 42", Forbidden("SET")),
    c("RESET threads", Forbidden("RESET")),
    c("reset SESSION memory_limit", Forbidden("RESET")),
    // ---- PRAGMA ----
    // DuckDB reads a PRAGMA assignment as SET.
    c("PRAGMA threads=1", Forbidden("SET")),
    c("PRAGMA enable_profiling", Forbidden("PRAGMA")),
    c("pragma disable_checkpoint_on_shutdown", Forbidden("PRAGMA")),
    c("PRAGMA show_tables", Forbidden("PRAGMA")),
    c("PRAGMA version", Forbidden("PRAGMA")),
    c("PRAGMA database_list", Forbidden("PRAGMA")),
    c("PRAGMA import_database('{DATA}')", Forbidden("IMPORT DATABASE")),
    // ---- ATTACH / DETACH / USE ----
    c("ATTACH ':memory:' AS evil", Forbidden("ATTACH")),
    c("ATTACH '{OUT}/evil.db' AS evil", Forbidden("ATTACH")),
    c("attach database '{DATA}/evil.db' (TYPE duckdb)", Forbidden("ATTACH")),
    c("ATTACH IF NOT EXISTS ':memory:' AS evil", Forbidden("ATTACH")),
    c("DETACH memory", Forbidden("DETACH")),
    c("detach database if exists evil", Forbidden("DETACH")),
    c("USE system", Forbidden("USE")),
    c("use temp.main", Forbidden("USE")),
    // ---- extensions ----
    c("INSTALL httpfs", Forbidden("INSTALL")),
    c("FORCE INSTALL httpfs", Forbidden("INSTALL")),
    c("INSTALL aws FROM community", Forbidden("INSTALL")),
    c("LOAD httpfs", Forbidden("LOAD")),
    c("load '{OUT}/evil.duckdb_extension'", Forbidden("LOAD")),
    c("UPDATE EXTENSIONS", Forbidden("UPDATE EXTENSIONS")),
    c("update extensions (httpfs)", Forbidden("UPDATE EXTENSIONS")),
    // ---- COPY / EXPORT / IMPORT ----
    c("COPY (SELECT 1) TO '{OUT}/copied.csv'", Forbidden("COPY")),
    c("COPY (SELECT 1) TO '{DATA}/copied.csv'", Forbidden("COPY")),
    c("copy (select 42) to '{DATA}/copied.parquet' (FORMAT parquet)", Forbidden("COPY")),
    c("COPY (SELECT 1) TO 's3://duckgate-test/data/evil.csv'", Forbidden("COPY")),
    c("/* x */ COPY\n(SELECT 1)\tTO '{DATA}/copied2.csv';", Forbidden("COPY")),
    c("COPY FROM DATABASE memory TO memory", Forbidden("COPY")),
    c("EXPLAIN ANALYZE COPY (SELECT 1) TO '{DATA}/explained.csv'", Forbidden("COPY")),
    c("EXPORT DATABASE '{OUT}/export'", Forbidden("EXPORT DATABASE")),
    c("export database '{DATA}/export' (FORMAT parquet)", Forbidden("EXPORT DATABASE")),
    c("IMPORT DATABASE '{DATA}'", Forbidden("IMPORT DATABASE")),
    c("import database '{OUT}'", Forbidden("IMPORT DATABASE")),
    // ---- CHECKPOINT / VACUUM / CALL / transactions / prepared statements ----
    c("CHECKPOINT", Forbidden("CHECKPOINT")),
    c("FORCE CHECKPOINT", Forbidden("CHECKPOINT")),
    c("checkpoint memory", Forbidden("CHECKPOINT")),
    c("VACUUM", Forbidden("VACUUM")),
    c("ANALYZE", Forbidden("VACUUM")),
    c("CALL duckdb_secrets()", Forbidden("CALL")),
    c("call pragma_version()", Forbidden("CALL")),
    c("CALL enable_logging()", Forbidden("CALL")),
    c("BEGIN", Forbidden("TRANSACTION")),
    c("begin transaction", Forbidden("TRANSACTION")),
    c("COMMIT", Forbidden("TRANSACTION")),
    c("ROLLBACK", Forbidden("TRANSACTION")),
    c("START TRANSACTION", Forbidden("TRANSACTION")),
    c("PREPARE p AS SELECT 1", Forbidden("PREPARE")),
    c("EXECUTE p", Forbidden("EXECUTE")),
    // ---- writes, refused by the read-only policy ----
    c("CREATE TABLE evil (a INTEGER)", Forbidden("CREATE TABLE")),
    c("CREATE TEMP TABLE evil AS SELECT 1 AS a", Forbidden("CREATE TEMP TABLE")),
    c("CREATE VIEW evil AS SELECT 1 AS a", Forbidden("CREATE VIEW")),
    c("CREATE MACRO evil(x) AS x + 1", Forbidden("CREATE MACRO")),
    c("CREATE SEQUENCE evil", Forbidden("CREATE SEQUENCE")),
    c("CREATE SCHEMA evil", Forbidden("CREATE SCHEMA")),
    c("DROP TABLE IF EXISTS evil", Forbidden("DROP TABLE")),
    c("INSERT INTO evil VALUES (1)", Forbidden("INSERT")),
    c("UPDATE evil SET a = 1", Forbidden("UPDATE")),
    c("DELETE FROM evil", Forbidden("DELETE")),
    c("EXPLAIN ANALYZE CREATE TABLE evil AS SELECT 1", Forbidden("CREATE TABLE")),
    // ---- functions no client may call ----
    c("SELECT * FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("SELECT * FROM duckdb_secrets(redact := false)", Forbidden("function duckdb_secrets()")),
    c("FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("SELECT name FROM \"DuckDB_Secrets\" ()", Forbidden("function duckdb_secrets()")),
    c("SELECT * FROM system.main.duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("SELECT (SELECT count(*) FROM duckdb_secrets()) AS n", Forbidden("function duckdb_secrets()")),
    c("WITH s AS (FROM duckdb_secrets()) SELECT * FROM s", Forbidden("function duckdb_secrets()")),
    c("SUMMARIZE SELECT * FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("EXPLAIN ANALYZE SELECT * FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("SELECT * FROM which_secret('s3://duckgate-test/data/small.csv', 's3')", Forbidden("function which_secret()")),
    c("DESCRIBE SELECT * FROM which_secret('s3://duckgate-test/', 's3')", Forbidden("function which_secret()")),
    c("SELECT * FROM query('SELECT * FROM duckdb_secrets()')", Forbidden("function query()")),
    c("SELECT * FROM query_table('duckdb_settings')", Forbidden("function query_table()")),
    c("SELECT getenv('HOME')", Forbidden("function getenv()")),
    // Runs a SELECT the guard never saw.
    c(
        "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT name, secret_string FROM duckdb_secrets()'))",
        Forbidden("function json_execute_serialized_sql()"),
    ),
    // Change settings or write files through table functions.
    c("SELECT * FROM enable_logging()", Forbidden("function enable_logging()")),
    c("SELECT * FROM enable_logging(storage := 'file', storage_path := '{OUT}/logs')", Forbidden("function enable_logging()")),
    c("SELECT * FROM enable_profiling(save_location := '{DATA}/profile.json', format := 'json')", Forbidden("function enable_profiling()")),
    c("FROM disable_logging()", Forbidden("function disable_logging()")),
    c("SELECT * FROM truncate_duckdb_logs()", Forbidden("function truncate_duckdb_logs()")),
    c("SELECT * FROM checkpoint()", Forbidden("function checkpoint()")),
    c("SELECT * FROM force_checkpoint('memory')", Forbidden("function force_checkpoint()")),
    c("SELECT count(*) FROM duckdb_logs()", Forbidden("function duckdb_logs()")),
    // The same behind a tokenizer trap: DuckDB ends the comment at `\r`.
    c("EXPLAIN ANALYZE -- x\rSELECT * FROM enable_logging() /*\n SELECT 1 --*/", Forbidden("function enable_logging()")),
    c("EXPLAIN ANALYZE -- x\rCOPY (SELECT 1) TO '{DATA}/trap.csv' /*\n SELECT 1 --*/", Forbidden("COPY")),
    c("EXPLAIN\u{a0}ANALYZE\u{a0}COPY (SELECT 1) TO '{DATA}/nbsp.csv'", Forbidden("COPY")),
    // ---- several statements: always 400, nothing runs ----
    c("SELECT 1; DROP SECRET duckgate_s3", Multi),
    c(concat!("SELECT 1;CREATE SECRET x ", evil!()), Multi),
    c("SELECT 1; SET threads = 1", Multi),
    c("DROP SECRET duckgate_s3; SELECT 1", Multi),
    c("SELECT 'a;b'; ATTACH ':memory:' AS evil", Multi),
    c("SELECT 1 /* ; */; COPY (SELECT 1) TO '{DATA}/multi.csv'", Multi),
    c("SELECT 1 -- c\r; DROP SECRET duckgate_s3", Multi),
    c("SELECT 1;\n\tDROP /**/ SECRET duckgate_s3;", Multi),
    c("BEGIN; DROP SECRET duckgate_s3; COMMIT", Multi),
    c("EXPLAIN SELECT 1; DROP SECRET duckgate_s3", Multi),
    c("SELECT 1; PRAGMA show_tables", Multi),
    // ---- admitted by the guard, refused by DuckDB's lockdown ----
    c("SELECT * FROM read_text('/etc/passwd')", Denied),
    c("SELECT content FROM read_blob('/etc/passwd')", Denied),
    c("SELECT * FROM glob('/etc/*')", Denied),
    c("FROM '/etc/passwd'", Denied),
    c("SELECT * FROM read_csv('/etc/hosts')", Denied),
    c("SELECT * FROM read_csv_auto('/etc/passwd', sep = ':')", Denied),
    c("SELECT * FROM sniff_csv('/etc/passwd')", Denied),
    c("SELECT * FROM read_text('{DATA}/../../../../../etc/passwd')", Denied),
    c("SELECT * FROM read_text('file:///etc/passwd')", Denied),
    c("SELECT * FROM read_text('{BASE}/openapi.json')", Denied),
    c("SELECT * FROM read_text('https://example.com/')", Denied),
    c("SELECT * FROM read_csv('s3://duckgate-other/data/other.csv')", Denied),
    c("SELECT * FROM glob('s3://duckgate-other/*')", Denied),
    c("SELECT * FROM read_text('s3://duckgate-other/data/other.csv')", Denied),
];

/// `read-write`: DML and DDL on the gateway's own objects, never the rest.
const READ_WRITE_SETUP: &[Case] = &[
    c("CREATE TABLE rw_t (a INTEGER, secret VARCHAR)", Allowed),
    c("INSERT INTO rw_t VALUES (1, 'x'), (2, '; DROP SECRET x; --')", Allowed),
    c("UPDATE rw_t SET secret = 'updated' WHERE a = 1", Allowed),
    c("DELETE FROM rw_t WHERE a = 2", Allowed),
    c("INSERT INTO rw_t SELECT count(*), 'csv' FROM read_csv('s3://duckgate-test/data/small.csv')", Allowed),
    c("CREATE VIEW rw_v AS SELECT * FROM rw_t", Allowed),
    c("CREATE SCHEMA rw_s", Allowed),
    c("CREATE TABLE rw_s.\"secret\" (secret INTEGER)", Allowed),
    c("CREATE TABLE secret (secret INTEGER)", Allowed),

    c("CREATE SEQUENCE rw_seq", Allowed),
    c("CREATE INDEX rw_i ON rw_t (a)", Allowed),
    c("CREATE TABLE rw_ctas AS SELECT 1 AS a", Allowed),
    c("CREATE OR REPLACE TABLE rw_ctas AS SELECT 2 AS a", Allowed),

    c("PIVOT rw_t ON a IN (1, 3) USING count(*)", Allowed),
    c("DROP VIEW rw_v", Allowed),

    c("DROP SEQUENCE rw_seq", Allowed),
    c("DROP INDEX rw_i", Allowed),
    c("DROP TABLE rw_s.\"secret\"", Allowed),
    c("DROP SCHEMA rw_s", Allowed),
    c("CREATE VIEW rw_keep AS SELECT a FROM rw_t", Allowed),
];

const READ_WRITE: &[Case] = &[
    c(concat!("CREATE SECRET evil ", evil!()), Forbidden("CREATE SECRET")),
    c("CREATE OR REPLACE SECRET duckgate_s3 (TYPE s3, KEY_ID 'x', SECRET 'y')", Forbidden("CREATE SECRET")),
    c(concat!("CREATE PERSISTENT SECRET IF NOT EXISTS evil ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("create /* c */ temporary -- c\n secret evil ", evil!()), Forbidden("CREATE SECRET")),
    c("DROP SECRET duckgate_s3", Forbidden("DROP SECRET")),
    c("DROP TEMPORARY SECRET IF EXISTS duckgate_s3 FROM memory", SqlError),
    c("DROP TEMPORARY SECRET IF EXISTS duckgate_s3", Forbidden("DROP SECRET")),
    // Tokenizer traps: the guard must read the same keywords DuckDB does.
    c(concat!("CREATE\u{a0}SECRET view ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE\u{200b}SECRET sequence ", evil!()), Forbidden("CREATE SECRET")),
    c(concat!("CREATE -- x\rSECRET schema ", evil!(), " /*\n VIEW */"), Forbidden("CREATE SECRET")),
    c("INSERT INTO rw_t (a, secret) SELECT 1, secret_string --\rFROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    p(
        "INSERT INTO rw_t (a, secret) SELECT $1a$, secret_string FROM duckdb_secrets() --$1a$",
        &[1],
        Forbidden("function duckdb_secrets()"),
    ),
    // Forbidden functions inside admitted DDL and DML.
    c("CREATE TABLE rw_evil AS SELECT * FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("CREATE VIEW rw_evil_v AS SELECT * FROM which_secret('s3://duckgate-test/data/small.csv', 's3')", Forbidden("function which_secret()")),
    c("CREATE MACRO rw_evil_m() AS TABLE SELECT * FROM enable_logging()", Forbidden("CREATE MACRO")),
    // Macros and temporary objects would carry state between clients.
    c("CREATE MACRO rw_m(x) AS x + 1", Forbidden("CREATE MACRO")),
    c("CREATE MACRO upper(x) AS 'pwned'", Forbidden("CREATE MACRO")),
    c("CREATE TEMP MACRO lower(x) AS 'pwned-temp'", Forbidden("CREATE MACRO")),
    c("CREATE TEMP TABLE rw_tt (i INTEGER)", Forbidden("CREATE TEMP TABLE")),
    c("INSERT INTO rw_t (a, secret) SELECT 1, secret_string FROM duckdb_secrets()", Forbidden("function duckdb_secrets()")),
    c("INSERT INTO rw_t SELECT * FROM query('SELECT 9, ''q''')", Forbidden("function query()")),
    c(
        "CREATE TABLE rw_json AS SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT name, secret_string FROM duckdb_secrets()'))",
        Forbidden("function json_execute_serialized_sql()"),
    ),
    c("CREATE TABLE rw_cp AS SELECT * FROM checkpoint()", Forbidden("function checkpoint()")),
    c("UPDATE rw_t SET secret = (SELECT max(name) FROM duckdb_secrets())", Forbidden("function duckdb_secrets()")),
    // Issue 20's red team: queries the serialized parse tree does not show
    // (CREATE TYPE ... AS ENUM (query)), reads judged only by name (a CTAS
    // over pg_settings), views over refused reads, and client objects that
    // would take a name of DuckDB's own for every client.
    c("CREATE TYPE rw_e AS ENUM (SELECT secret_string FROM duckdb_secrets())", Forbidden("function duckdb_secrets()")),
    c("CREATE TYPE rw_l AS ENUM (SELECT 'y' FROM enable_logging(['QueryLog', 'HTTP']) UNION ALL SELECT 'x')", Forbidden("function enable_logging()")),
    c("CREATE TYPE rw_q AS ENUM (SELECT * FROM query('SELECT ''a'''))", Forbidden("function query()")),
    c("CREATE TYPE rw_s AS ENUM (SELECT name FROM duckdb_settings())", Forbidden("function duckdb_settings()")),
    c("CREATE TYPE rw_w AS ENUM (SELECT secret_name FROM which_secret('s3://duckgate-test/data/small.csv', 's3'))", Forbidden("function which_secret()")),
    c("CREATE TYPE rw_r AS ENUM (SELECT setseed(0.5)::VARCHAR)", Forbidden("setseed")),
    c("CREATE TYPE rw_c AS ENUM (SELECT path FROM duckdb_external_file_cache())", Forbidden("duckdb_external_file_cache")),
    c("CREATE TABLE rw_p AS SELECT name, setting FROM pg_settings", Forbidden("duckdb_settings")),
    c("CREATE TABLE rw_ps AS SELECT * FROM pg_prepared_statements", Forbidden("duckdb_prepared_statements")),
    c("INSERT INTO rw_t (a, secret) SELECT 1, name FROM pg_settings", Forbidden("duckdb_settings")),
    c("CREATE VIEW rw_sv AS SELECT name, setting FROM pg_settings", Forbidden("duckdb_settings")),
    c("CREATE TABLE rw_via_view AS SELECT * FROM rw_keep, pg_settings", Forbidden("duckdb_settings")),
    c("UPDATE rw_t SET secret = (SELECT max(name) FROM pg_settings)", Forbidden("duckdb_settings")),
    c("CREATE TABLE rw_d (a VARCHAR DEFAULT current_setting('s3_access_key_id'))", Forbidden("function current_setting()")),
    c("CREATE TABLE rw_k (a INTEGER CHECK (a < length(getenv('HOME'))))", Forbidden("function getenv()")),
    c("CREATE TABLE rw_g (a INTEGER, b VARCHAR AS (current_setting('threads')))", Forbidden("function current_setting()")),
    c("CREATE VIEW duckdb_tables AS SELECT 'spoofed' AS table_name", Forbidden("name duckdb_tables")),
    c("CREATE VIEW pg_tables AS SELECT 'spoofed' AS tablename", Forbidden("name pg_tables")),
    c("CREATE TABLE DuckDB_Settings (name VARCHAR)", Forbidden("name DuckDB_Settings")),
    c("CREATE TYPE json AS INTEGER", Forbidden("name json")),
    c("CREATE TABLE upper (a INTEGER)", Forbidden("name upper")),
    c("CREATE SCHEMA information_schema", Forbidden("name information_schema")),
    c("CREATE SEQUENCE read_csv", Forbidden("name read_csv")),
    c("ALTER TABLE rw_t RENAME TO duckdb_tables", Forbidden("name duckdb_tables")),
    c("ALTER VIEW rw_keep RENAME TO duckdb_views", Forbidden("name duckdb_views")),
    // Never, in any policy.
    c("COPY rw_t TO '{DATA}/rw.csv'", Forbidden("COPY")),
    c("COPY rw_t FROM '{DATA}/files/allowed.csv'", Forbidden("COPY")),
    c("EXPORT DATABASE '{DATA}/rw_export'", Forbidden("EXPORT DATABASE")),
    c("ATTACH '{DATA}/rw.db' AS rw", Forbidden("ATTACH")),
    c("SET threads = 1", Forbidden("SET")),
    c("PRAGMA threads = 1", Forbidden("SET")),
    c("CHECKPOINT", Forbidden("CHECKPOINT")),
    c("BEGIN TRANSACTION", Forbidden("TRANSACTION")),
    c("LOAD httpfs", Forbidden("LOAD")),
    // Not DuckDB syntax: a parser error, nothing runs.
    c("CREATE DATABASE evil", SqlError),
    // Several statements: the harmless first one must not run either.
    c("CREATE TABLE rw_multi AS SELECT 1 AS a; DROP SECRET duckgate_s3", Multi),
    c("INSERT INTO rw_t VALUES (7, 'multi'); SET threads = 1", Multi),
    c(concat!("DROP VIEW rw_keep; CREATE SECRET evil ", evil!()), Multi),
];

/// Substitutes the placeholders.
struct Ctx {
    out: PathBuf,
    data: PathBuf,
    base: String,
}

impl Ctx {
    fn sql(&self, sql: &str) -> String {
        sql.replace("{OUT}", &self.out.display().to_string())
            .replace("{DATA}", &self.data.display().to_string())
            .replace("{BASE}", &self.base)
    }
}

/// Runs `cases` in order; returns one line per wrong verdict.
async fn run_cases(
    g: &Endpoint,
    ctx: &Ctx,
    cases: &[Case],
    tally: &mut BTreeMap<&'static str, usize>,
    seen: &mut Seen,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        let sql = ctx.sql(case.sql);
        let r = g.query(json!({"sql": sql, "params": case.params})).await;
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = r.text().await.unwrap_or_default();
        seen.0.push(text.clone());
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let problem_type = body["type"].as_str().unwrap_or("");
        let is_problem = content_type.starts_with("application/problem+json")
            && body["status"].as_u64() == Some(status as u64)
            && body["detail"].as_str().is_some_and(|d| !d.is_empty());
        let ok = match case.want {
            Allowed => status == 200,
            Forbidden(kind) => {
                status == 403
                    && is_problem
                    && problem_type == "urn:duckgate:problem:statement-forbidden"
                    && body["statement_kind"]
                        .as_str()
                        .is_some_and(|k| k.contains(kind))
            }
            Multi => {
                status == 400
                    && is_problem
                    && problem_type == "urn:duckgate:problem:multiple-statements"
            }
            SqlError => {
                status == 400
                    && is_problem
                    && problem_type == "urn:duckgate:problem:sql-error"
                    && body["error_class"].as_str().is_some_and(|c| !c.is_empty())
            }
            Denied => {
                (400..500).contains(&status)
                    && is_problem
                    && !LEAK_MARKERS.iter().any(|m| text.contains(m))
            }
        };
        let label = match case.want {
            Allowed => "200 allowed",
            Forbidden(_) => "403 forbidden",
            Multi => "400 multiple statements",
            SqlError => "400 SQL error",
            Denied => "4xx lockdown",
        };
        *tally.entry(label).or_default() += 1;
        if !ok {
            let shown: String = text.chars().take(300).collect();
            wrong.push(format!(
                "{sql:?}: want {:?}, got {status} {shown}",
                case.want
            ));
        }
    }
    wrong
}

/// What must not change while forbidden statements run.
#[derive(Debug, PartialEq)]
struct Snapshot {
    settings: Value,
    databases: Value,
    objects: Value,
    variables: Value,
    secret: Value,
    files: BTreeSet<String>,
}

async fn rows(g: &Endpoint, sql: &str) -> Value {
    g.query_ok(sql).await["rows"].clone()
}

async fn snapshot(g: &Endpoint, dirs: &[&Path]) -> Snapshot {
    // Every pooled connection, more than once: session state changed on one
    // connection shows only there. Settings themselves are no longer
    // readable by clients (they may hold credentials); what they decide is.
    let settings_sql = "SELECT current_database(), current_schema(), current_schemas(true), \
                        upper('a'), lower('B'), (SELECT count(*) FROM range(3))";
    let settings = rows(g, settings_sql).await;
    for _ in 0..POOL_SIZE * 2 {
        assert_eq!(
            rows(g, settings_sql).await,
            settings,
            "pooled connections disagree on settings"
        );
    }
    let r = g
        .client
        .get(g.url("/admin/secrets"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let admin: Value = r.json().await.unwrap();
    let secret = json!(admin["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([
            s["name"],
            s["epoch"],
            s["key_id_suffix"],
            s["rotations"],
            s["scope"]
        ]))
        .collect::<Vec<_>>());
    Snapshot {
        settings,
        databases: rows(g, "SELECT DISTINCT catalog_name FROM information_schema.schemata ORDER BY 1").await,
        objects: rows(
            g,
            "SELECT 'table ' || schema_name || '.' || table_name FROM duckdb_tables()
             UNION ALL SELECT 'view ' || schema_name || '.' || view_name FROM duckdb_views() WHERE NOT internal
             UNION ALL SELECT 'schema ' || schema_name FROM duckdb_schemas() WHERE NOT internal
             UNION ALL SELECT 'sequence ' || sequence_name FROM duckdb_sequences()
             UNION ALL SELECT 'index ' || index_name FROM duckdb_indexes()
             UNION ALL SELECT 'macro ' || function_name FROM duckdb_functions() WHERE NOT internal
             UNION ALL SELECT 'type ' || type_name FROM duckdb_types() WHERE NOT internal
             ORDER BY 1",
        )
        .await,
        // Variables are not readable by clients; `getvariable` is refused
        // too. What a variable would change (a query's answer) is.
        variables: rows(g, "SELECT count(*) FROM range(3)").await,
        secret,
        files: dirs.iter().flat_map(|d| list_files(d)).collect(),
    }
}

fn list_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            out.push(path.display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

async fn s3_count(g: &Endpoint) -> Value {
    g.query_ok(S3_COUNT).await["rows"].clone()
}

struct Setup {
    s3: S3Server,
    g: App,
    ctx: Ctx,
    _out: tempfile::TempDir,
}

async fn setup(policy: &str) -> Setup {
    let s3 = S3Server::start(&[]);
    let r = reqwest::Client::new()
        .post(format!(
            "{}/put?bucket=duckgate-other&key=data/other.csv",
            s3.control
        ))
        .body(format!("id,marker\n1,{OTHER_MARKER}\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let g = s3
        .app(3600)
        .env("DUCKGATE_POLICY", policy)
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .env("DUCKGATE_POOL_SIZE", POOL_SIZE)
        .spawn_app()
        .await;
    let out = tempfile::tempdir().unwrap();
    let data = g.data_dir.path().join("data").canonicalize().unwrap();
    common::write_file(&data.join("files"), "allowed.csv", "a,b\n1,2\n3,4\n");
    let ctx = Ctx {
        out: out.path().canonicalize().unwrap(),
        data,
        base: g.base.clone(),
    };
    Setup {
        s3,
        g,
        ctx,
        _out: out,
    }
}

fn report(name: &str, tally: &BTreeMap<&'static str, usize>, wrong: &[String], started: Instant) {
    let total: usize = tally.values().sum();
    eprintln!(
        "{name}: {total} statements; {tally:?}; {} wrong; {:.1} s",
        wrong.len(),
        started.elapsed().as_secs_f64()
    );
    for w in wrong {
        eprintln!("  WRONG {w}");
    }
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn read_only_corpus_refuses_and_nothing_happens() {
    let started = Instant::now();
    let Setup { s3, g, ctx, _out } = setup("read-only").await;
    assert_eq!(s3_count(&g).await, json!([[3]]));
    let before = snapshot(&g, &[&ctx.data, &ctx.out]).await;
    assert_eq!(
        before.secret.as_array().unwrap().len(),
        1,
        "{:?}",
        before.secret
    );
    assert_eq!(before.secret[0][1], 1, "the secret starts at epoch 1");

    let mut tally = BTreeMap::new();
    let mut seen = Seen::default();
    let wrong = run_cases(&g, &ctx, READ_ONLY, &mut tally, &mut seen).await;
    report("read-only corpus", &tally, &wrong, started);

    // Every pooled connection still answers, and nothing changed.
    for _ in 0..POOL_SIZE * 3 {
        assert_eq!(rows(&g, "SELECT 42").await, json!([[42]]));
    }
    assert_eq!(
        s3_count(&g).await,
        json!([[3]]),
        "the gateway's S3 secret no longer works"
    );
    let after = snapshot(&g, &[&ctx.data, &ctx.out]).await;
    assert_eq!(
        after.secret, before.secret,
        "the S3 secret was replaced or rotated"
    );
    assert_eq!(after.settings, before.settings, "a setting changed");
    assert_eq!(
        after.databases, before.databases,
        "a database was attached or detached"
    );
    assert_eq!(
        after.objects, before.objects,
        "a catalog object appeared or vanished"
    );
    assert_eq!(after.variables, before.variables, "a variable was set");
    assert_eq!(after.files, before.files, "a file was written");
    assert_no_leaks(&g, &s3, &seen, ADMIN).await;
    assert!(READ_ONLY.len() >= 70);
    assert!(
        wrong.is_empty(),
        "{} wrong verdicts:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn read_write_corpus_admits_ddl_but_never_secrets() {
    let started = Instant::now();
    let Setup { s3, g, ctx, _out } = setup("read-write").await;
    let mut tally = BTreeMap::new();
    let mut seen = Seen::default();
    let mut wrong = run_cases(&g, &ctx, READ_WRITE_SETUP, &mut tally, &mut seen).await;
    let table_rows = "SELECT a, secret FROM rw_t ORDER BY a";
    let rows_before = rows(&g, table_rows).await;
    assert_eq!(rows_before, json!([[1, "updated"], [3, "csv"]]));
    let before = snapshot(&g, &[&ctx.data, &ctx.out]).await;
    assert!(
        before.objects.to_string().contains("table client.secret"),
        "{}",
        before.objects
    );

    wrong.extend(run_cases(&g, &ctx, READ_WRITE, &mut tally, &mut seen).await);
    report("read-write corpus", &tally, &wrong, started);

    for _ in 0..POOL_SIZE * 3 {
        assert_eq!(rows(&g, "SELECT 42").await, json!([[42]]));
    }
    assert_eq!(
        s3_count(&g).await,
        json!([[3]]),
        "the gateway's S3 secret no longer works"
    );
    let after = snapshot(&g, &[&ctx.data, &ctx.out]).await;
    assert_eq!(
        after.secret, before.secret,
        "the S3 secret was replaced or rotated"
    );
    assert_eq!(after.settings, before.settings, "a setting changed");
    assert_eq!(
        after.databases, before.databases,
        "a database was attached or detached"
    );
    assert_eq!(
        after.objects, before.objects,
        "forbidden DDL created or dropped an object"
    );
    assert_eq!(after.variables, before.variables, "a variable was set");
    assert_eq!(after.files, before.files, "a file was written");
    assert_eq!(
        rows(&g, table_rows).await,
        rows_before,
        "forbidden DML changed rows"
    );
    assert_no_leaks(&g, &s3, &seen, ADMIN).await;
    assert!(
        wrong.is_empty(),
        "{} wrong verdicts:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
