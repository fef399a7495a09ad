//! The Arrow Flight SQL listener (`DUCKGATE_FLIGHT_LISTEN`), driven by the
//! clients people use: ADBC's Flight SQL driver (the Go driver in
//! `adbc-driver-flightsql`) for queries, prepared statements, metadata and
//! cancel, and pyarrow's plain Flight client where a test needs the raw
//! calls (tickets, CancelFlightInfo). Answers are compared with Python
//! DuckDB's own Arrow for the same SQL; refusals are asserted by gRPC code
//! and message.

use std::time::Duration;

use serde_json::Value;

use crate::common::{eventually, python, App, Gateway};

const TOKEN: &str = "analyst:flight-token-7c1d";
const SECRET: &str = "flight-token-7c1d";
const OTHER: &str = "auditor:flight-other-9e2a";
const OTHER_SECRET: &str = "flight-other-9e2a";

/// A gateway with the Flight SQL listener on a free port, and its URI.
async fn gateway(extra: &[(&str, &str)]) -> (App, String) {
    let mut b = Gateway::builder()
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_QUERY_TOKENS", format!("{TOKEN},{OTHER}"));
    for (k, v) in extra {
        b = b.env(k, v);
    }
    let app = b.spawn_app().await;
    let uri = app.flight_uri().await;
    (app, uri)
}

/// Python shared by the scripts: an ADBC connection and raw Flight helpers.
const PRELUDE: &str = r#"
import json, sys, threading, time
import adbc_driver_flightsql as af
import adbc_driver_flightsql.dbapi as fs
import pyarrow as pa
import pyarrow.flight as fl

URI, TOKEN = sys.argv[1], sys.argv[2]

def connect(token=TOKEN):
    kw = {}
    if token is not None:
        kw[af.DatabaseOptions.AUTHORIZATION_HEADER.value] = "Bearer " + token
    return fs.connect(URI, db_kwargs=kw, autocommit=True)

def error_of(f):
    try:
        f()
    except Exception as e:
        return str(e)
    return None

# Flight SQL commands by hand (pyarrow has plain Flight only).
def field(n, data):
    if isinstance(data, str):
        data = data.encode()
    out, v = bytes([n << 3 | 2]), len(data)
    while v >= 0x80:
        out += bytes([v & 0x7F | 0x80]); v >>= 7
    return out + bytes([v]) + data

def command(name, payload):
    return field(1, "type.googleapis.com/arrow.flight.protocol.sql." + name) + field(2, payload)

def options(token):
    return fl.FlightCallOptions(headers=[(b"authorization", ("Bearer " + token).encode())])

def raw_client():
    return fl.FlightClient(URI)
"#;

fn run(uri: &str, script: &str) -> Value {
    let out = python(&format!("{PRELUDE}\n{script}"), &[uri, SECRET]);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The audit lines of queries that came through Flight SQL.
fn flight_audit_lines(app: &App) -> Vec<String> {
    app.log_text()
        .lines()
        .filter(|l| l.contains("query ended") && l.contains("api=\"flight\""))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_answers_match_duckdbs_own_arrow() {
    let (app, uri) = gateway(&[]).await;
    let v = run(
        &uri,
        r#"
import duckdb
QUERIES = [
    "SELECT 1::TINYINT a, -2::SMALLINT b, 3::INTEGER c, 4::BIGINT d, 5::UTINYINT e, 60000::USMALLINT f, 4000000000::UINTEGER g, 18446744073709551615::UBIGINT h, true AS t",
    "SELECT 1.23::DECIMAL(4,2) a, -123456789012345.678::DECIMAL(18,3) b, 1234567890123456789012345.6789::DECIMAL(38,4) c, 1.5::FLOAT f, -0.25::DOUBLE d, 1e308::DOUBLE big",
    "SELECT DATE '2024-02-29' AS d, DATE '1900-01-01' AS early, TIME '12:34:56.789' AS t, TIMESTAMP '2024-01-01 12:34:56.789' AS ts, TIMESTAMP_MS '2024-01-01 00:00:01.5' AS ms, TIMESTAMP_NS '2024-01-01 00:00:00.123456789' AS ns, TIMESTAMPTZ '2024-06-01 12:00:00+02' AS tz",
    "SELECT INTERVAL '1 year 2 months 3 days 04:05:06.789' i, INTERVAL '-90 minutes' neg",
    "SELECT [1, 2, NULL] l, [[1], [2, 3], []] ll, ['a', 'b']::VARCHAR[] s, {'a': 1, 'b': 'x', 'c': [1.5]} st, MAP {'k1': 1, 'k2': 2} m, [{'x': 1}, NULL] ls",
    "SELECT '\\xAA\\x00\\xFF'::BLOB b, ''::BLOB empty, NULL::BLOB n",
    "SELECT NULL::INTEGER i, NULL::VARCHAR v, NULL::DATE d, NULL::INTEGER[] l, NULL n",
    "SELECT 'héllo wörld ✓ 😀' u, '日本語テキスト' j, '' e, 'a''quote\"' q",
    "SELECT 'a'::ENUM('a', 'b') e, '550e8400-e29b-41d4-a716-446655440000'::UUID u",
    "SELECT i, i::VARCHAR s, i % 7 = 0 b FROM range(250000) t(i) ORDER BY i",
    "SELECT * FROM range(0) t(i)",
    # Batches past one gRPC message (2 MiB): cut, dictionaries kept.
    "SELECT i, repeat(chr((65 + i % 26)::INTEGER), 3000) AS s FROM range(6000) t(i) ORDER BY i",
    "SELECT i, (['a', 'b', 'c'])[i % 3 + 1]::ENUM('a', 'b', 'c') AS e, repeat('y', 2500) AS pad FROM range(5000) t(i) ORDER BY i",
]
# The gateway's session time zone.
ref = duckdb.connect()
ref.sql("SET TimeZone = 'UTC'")
conn = connect()
cur = conn.cursor()
out = []
for q in QUERIES:
    cur.execute(q)
    got = cur.fetch_arrow_table()
    want = ref.sql(q).arrow().read_all()
    out.append({
        "sql": q,
        "rows": got.num_rows,
        "same_values": got.to_pylist() == want.to_pylist(),
        "same_types": got.schema.equals(want.schema),
        "got_types": str(got.schema),
        "want_types": str(want.schema),
        "got": repr(got.slice(0, 2).to_pylist())[:400],
        "want": repr(want.slice(0, 2).to_pylist())[:400],
    })
info = conn.adbc_get_info()
print(json.dumps({"results": out, "info": {k: str(v) for k, v in info.items()}}))
"#,
    );
    for r in v["results"].as_array().unwrap() {
        assert!(r["same_values"].as_bool().unwrap(), "values differ: {r:#}");
        assert!(r["same_types"].as_bool().unwrap(), "types differ: {r:#}");
    }
    assert_eq!(v["results"][9]["rows"], 250000);
    assert_eq!(v["results"][10]["rows"], 0);
    assert_eq!(v["results"][11]["rows"], 6000);
    assert_eq!(v["results"][12]["rows"], 5000);
    assert_eq!(v["info"]["vendor_name"], "duckgate");
    assert!(v["info"]["vendor_version"]
        .as_str()
        .unwrap()
        .contains("DuckDB v1.5.5"));
    // One audit line per statement, as POST /query writes it, marked flight.
    let audit = flight_audit_lines(&app);
    assert_eq!(audit.len(), 13, "{audit:#?}");
    assert!(
        audit
            .iter()
            .all(|l| l.contains("token=analyst") && l.contains("outcome=ok")),
        "{audit:#?}"
    );
    assert!(
        !app.log_text().contains(SECRET),
        "the token reached the log"
    );
    // The calls by method and code; the queries count as /query's do.
    let m = app.get_text("/metrics").await;
    let calls = crate::common::metric(
        &m,
        "duckgate_flight_requests_total{method=\"GetFlightInfo\",code=\"Ok\"}",
    );
    assert_eq!(calls, 13.0, "{m}");
    assert!(crate::common::metric(&m, "duckgate_queries_total{outcome=\"ok\"}") >= 13.0);
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_prepared_statements_bind_parameters_and_updates_count_rows() {
    let (app, uri) = gateway(&[("DUCKGATE_POLICY", "read-write")]).await;
    let v = run(
        &uri,
        r#"
import datetime, decimal
conn = connect()
cur = conn.cursor()
cur.execute("SELECT ? + 1 AS n, ? AS s, ?::DECIMAL(10,2) AS d, ?::DATE + 1 AS day, ? IS NULL AS isnull, ?::DOUBLE AS f",
            parameters=(41, "hé ✓", decimal.Decimal("12.50"), datetime.date(2024, 2, 28), None, 2.5))
row = cur.fetchone()
cur.execute("CREATE TABLE t (id INTEGER, name VARCHAR)")
def update(sql):
    cur.adbc_statement.set_sql_query(sql)
    n = cur.adbc_statement.execute_update()
    return n[0] if isinstance(n, tuple) else n
inserted = update("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
cur.executemany("INSERT INTO t VALUES (?, ?)", [(3, "three"), (4, "four"), (5, None)])
many = cur.rowcount
cur.executemany("UPDATE t SET name = upper(name) WHERE id <= ?", [(2,)])
updated = cur.rowcount
cur.execute("SELECT id, name FROM t ORDER BY id")
rows = cur.fetchall()
# The same prepared statement, run again with other parameters.
cur.execute("SELECT count(*) FROM t WHERE id > ?", parameters=(1,))
c1 = cur.fetchone()[0]
cur.execute("SELECT count(*) FROM t WHERE id > ?", parameters=(3,))
c2 = cur.fetchone()[0]
# A statement the policy refuses, with parameters: refused at execute.
refused = error_of(lambda: cur.execute("SELECT current_setting(?)", parameters=("threads",)))
print(json.dumps({"row": [str(x) for x in row], "inserted": inserted, "many": many, "updated": updated,
                  "rows": rows, "c1": c1, "c2": c2, "refused": refused}))
"#,
    );
    assert_eq!(
        v["row"],
        serde_json::json!(["42", "hé ✓", "12.50", "2024-02-29", "True", "2.5"])
    );
    assert_eq!(v["inserted"], 2, "{v:#}");
    assert_eq!(v["many"], 3);
    assert_eq!(v["updated"], 2);
    assert_eq!(
        v["rows"],
        serde_json::json!([[1, "ONE"], [2, "TWO"], [3, "three"], [4, "four"], [5, null]])
    );
    assert_eq!((v["c1"].as_i64(), v["c2"].as_i64()), (Some(4), Some(2)));
    let refused = v["refused"].as_str().unwrap();
    assert!(refused.contains("current_setting"), "{refused}");
    assert!(!app.log_text().contains(SECRET));

    // Read-only (the default): a write is the guard's refusal.
    let (_ro, uri) = gateway(&[]).await;
    let v = run(
        &uri,
        r#"
cur = connect().cursor()
print(json.dumps({"err": error_of(lambda: cur.execute("CREATE TABLE x (a INTEGER)"))}))
"#,
    );
    let err = v["err"].as_str().unwrap();
    assert!(err.contains("(PermissionDenied;"), "{err}");
    assert!(err.contains("Statement not allowed"), "{err}");
}

/// A batch of DuckDB's larger than one gRPC message (clients such as
/// grpc-java, under the JDBC driver, refuse messages past 4 MiB by
/// default) reaches the client cut into messages of at most 2 MiB, its
/// dictionaries with it; the small batches of the same stream pass as the
/// engine wrote them. Read with pyarrow's own DoGet reader, one chunk per
/// message, and compared with Python DuckDB.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_cuts_batches_past_one_grpc_message() {
    let (_app, uri) = gateway(&[]).await;
    let v = run(
        &uri,
        r#"
import duckdb
QUERIES = [
    "SELECT i, repeat(chr((65 + i % 26)::INTEGER), 3000) AS s FROM range(6000) t(i) ORDER BY i",
    "SELECT i, (['a', 'b', 'c'])[i % 3 + 1]::ENUM('a', 'b', 'c') AS e, repeat('y', 2500) AS pad FROM range(5000) t(i) ORDER BY i",
    "SELECT i FROM range(100000) t(i)",
]
client = raw_client()
ref = duckdb.connect()
out = []
for q in QUERIES:
    info = client.get_flight_info(fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, q))), options(TOKEN))
    reader = client.do_get(info.endpoints[0].ticket, options(TOKEN))
    chunks = []
    while True:
        try:
            chunks.append(reader.read_chunk().data)
        except StopIteration:
            break
    got = pa.Table.from_batches(chunks, schema=reader.schema)
    want = ref.sql(q).arrow().read_all()
    out.append({"sql": q, "same": got.equals(want), "rows": got.num_rows,
                "largest": max(c.nbytes for c in chunks), "chunks": len(chunks)})
print(json.dumps(out))
"#,
    );
    for r in v.as_array().unwrap() {
        assert_eq!(r["same"], true, "{r:#}");
        assert!(r["largest"].as_u64().unwrap() <= 2 * 1024 * 1024, "{r:#}");
    }
    // DuckDB's first batch of the wide rows is 2,048 rows of 3,000 bytes.
    assert!(v[0]["chunks"].as_u64().unwrap() > 3, "{v:#}");
}

/// The Handshake with HTTP basic credentials, as the Flight SQL JDBC driver
/// sends `user` and `password` (pyarrow's `authenticate_basic_token` makes
/// the same call): the token as the password answers the bearer header the
/// client then sends on every call; any other password is UNAUTHENTICATED.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_basic_auth_handshake_hands_back_a_bearer_header() {
    let (app, uri) = gateway(&[]).await;
    let v = run(
        &uri,
        r#"
import duckdb
client = raw_client()
key, value = client.authenticate_basic_token("whoever", TOKEN)
opts = fl.FlightCallOptions(headers=[(key, value)])
q = "SELECT 42 AS answer, 'basic' AS how"
info = client.get_flight_info(fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, q))), opts)
got = client.do_get(info.endpoints[0].ticket, opts).read_all()
want = duckdb.sql(q).arrow().read_all()
print(json.dumps({"key": key.decode(), "same_header": value.decode() == "Bearer " + TOKEN,
                  "same": got.equals(want), "got": str(got.to_pylist()),
                  "wrong": error_of(lambda: client.authenticate_basic_token("whoever", "not-the-token"))}))
"#,
    );
    assert_eq!(v["key"], "authorization", "{v:#}");
    assert_eq!(v["same_header"], true, "{v:#}");
    assert_eq!(v["same"], true, "{v:#}");
    let wrong = v["wrong"].as_str().unwrap_or_default();
    assert!(wrong.to_lowercase().contains("unauthenticated"), "{v:#}");
    assert!(
        !app.log_text().contains(SECRET),
        "the token reached the log"
    );
}

/// Binary parameters (ADBC binds Python `bytes` as an Arrow binary column)
/// are bound as DuckDB's BLOB: compared, stored and read back equal to
/// Python DuckDB binding the same bytes itself, every byte value included.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_binds_binary_parameters_as_blobs() {
    let (_app, uri) = gateway(&[("DUCKGATE_POLICY", "read-write")]).await;
    let v = run(
        &uri,
        r#"
import duckdb
values = [bytes(range(256)), b"", b"\x00", "hé ✓".encode()]
queries = ["SELECT ? AS b, typeof(?) AS t, octet_length(?) AS n, hex(?) AS h",
           "SELECT ? = from_hex('00') AS is_nul"]
cur = connect().cursor()
ref = duckdb.connect()
out = {"selects": [], "rows": None, "want_rows": None}
for q in queries:
    for b in values:
        ps = (b,) * q.count("?")
        cur.execute(q, parameters=ps)
        got = cur.fetch_arrow_table()
        want = ref.execute(q, ps).arrow().read_all()
        out["selects"].append({"q": q, "len": len(b), "same": got.equals(want),
                               "got": str(got.to_pylist()), "want": str(want.to_pylist())})
for c in (cur, ref):
    c.execute("CREATE TABLE blobs (id INTEGER, b BLOB)")
cur.executemany("INSERT INTO blobs VALUES (?, ?)", list(enumerate(values)))
ref.executemany("INSERT INTO blobs VALUES (?, ?)", list(enumerate(values)))
cur.execute("SELECT id, b FROM blobs WHERE b <> ? ORDER BY id", parameters=(b"",))
out["rows"] = [[i, b.hex()] for i, b in cur.fetchall()]
out["want_rows"] = [[i, b.hex()] for i, b in ref.execute("SELECT id, b FROM blobs WHERE b <> ? ORDER BY id", (b"",)).fetchall()]
print(json.dumps(out))
"#,
    );
    let selects = v["selects"].as_array().unwrap();
    assert_eq!(selects.len(), 8, "{v:#}");
    for s in selects {
        assert_eq!(s["same"], true, "{s:#}");
    }
    assert_eq!(v["rows"], v["want_rows"], "{v:#}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 3, "{v:#}");
}

/// CreatePreparedStatement answers the result's and the parameters' Arrow
/// schemas before anything runs (what JDBC's `getMetaData` and ADBC's
/// `ExecuteSchema` / `GetParameterSchema` read): the result's equals Python
/// DuckDB's own Arrow schema of the same query and the schema the execution
/// then streams; each parameter is typed as DuckDB types the expression it
/// meets; a result whose types follow the values (`? + 1`, where DuckDB
/// itself reports no result types) has none yet; described statements are
/// not run (an INSERT adds no row), and the guard refuses at the create.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_prepared_statements_report_their_schemas_before_they_run() {
    let (app, uri) = gateway(&[("DUCKGATE_POLICY", "read-write")]).await;
    let v = run(
        &uri,
        r#"
import duckdb
ref = duckdb.connect()
ref.sql("SET TimeZone = 'UTC'")
cur = connect().cursor()

def described(sql):
    params = cur.adbc_prepare(sql)
    try:
        dataset = pa.schema(cur.adbc_statement.execute_schema())
    except Exception as e:
        dataset = "error: " + str(e)
    return dataset, params

QUERIES = [
    "SELECT 1::TINYINT a, -2::SMALLINT b, 3::INTEGER c, 4::BIGINT d, 5::UTINYINT e, 18446744073709551615::UBIGINT h, true AS t",
    "SELECT 1.23::DECIMAL(4,2) a, 1234567890123456789012345.6789::DECIMAL(38,4) c, 1.5::FLOAT f, -0.25::DOUBLE d",
    "SELECT DATE '2024-02-29' AS d, TIME '12:34:56.789' AS t, TIMESTAMP '2024-01-01 12:34:56.789' AS ts, TIMESTAMP_MS '2024-01-01 00:00:01.5' AS ms, TIMESTAMP_NS '2024-01-01 00:00:00.123456789' AS ns, TIMESTAMPTZ '2024-06-01 12:00:00+02' AS tz, INTERVAL '1 day' i",
    "SELECT [1, 2, NULL] l, [[1], [2, 3], []] ll, {'a': 1, 'b': 'x', 'c': [1.5]} st, MAP {'k1': 1, 'k2': 2} m, '\\xAA'::BLOB b, NULL n",
    "SELECT 'a'::ENUM('a', 'b') e, '550e8400-e29b-41d4-a716-446655440000'::UUID u, 'héllo' s",
    "SELECT i, i::VARCHAR s, i % 7 = 0 b FROM range(250000) t(i) ORDER BY i",
    "SELECT count(*) AS n, sum(x) AS total FROM (SELECT 1.5::DECIMAL(10,2) AS x) GROUP BY ALL",
]
out = {"queries": []}
for q in QUERIES:
    got, params = described(q)
    want = ref.sql(q).arrow().schema
    cur.execute(q)
    ran = cur.fetch_arrow_table().schema
    out["queries"].append({"sql": q, "got": str(got), "want": str(want),
                           "same_as_duckdb": isinstance(got, pa.Schema) and got.equals(want),
                           "same_as_run": isinstance(got, pa.Schema) and got.equals(ran),
                           "params": len(params)})
# UHUGEINT: DuckDB exports a signed Decimal128 of its bits; the gateway's
# answers carry Decimal256(39, 0) (docs/api.md), and so does the description.
got, _ = described("SELECT 340282366920938463463374607431768211455::UHUGEINT u")
cur.execute("SELECT 340282366920938463463374607431768211455::UHUGEINT u")
out["uhugeint"] = {"got": str(got), "ran": str(cur.fetch_arrow_table().schema)}

# Parameters, typed as DuckDB types the expression each one meets.
PARAMS = [
    ("SELECT ?::INTEGER + 1 AS n, ?::DATE AS d", "SELECT NULL::INTEGER AS \"1\", NULL::DATE AS \"2\"", (1, "2024-01-01")),
    ("SELECT r FROM range(10) t(r) WHERE r > ?", "SELECT (SELECT r FROM range(1) t(r)) AS \"1\"", (5,)),
    ("SELECT $name::VARCHAR AS v", "SELECT NULL::VARCHAR AS \"name\"", None),
]
out["params"] = []
for q, shape, values in PARAMS:
    dataset, params = described(q)
    ref.execute("PREPARE p AS " + q)
    duck = ref.sql("SELECT parameter_types, result_types FROM duckdb_prepared_statements() WHERE name = 'p'").fetchone()
    ref.execute("DEALLOCATE p")
    want_params = ref.sql(shape).arrow().schema
    row = {"sql": q, "params": str(params), "want_params": str(want_params),
           "same_params": params.equals(want_params),
           "count_as_duckdb": len(params) == len(duck[0])}
    if values is not None:
        want = ref.execute(q, values).arrow().read_all().schema
        row["dataset"], row["want"] = str(dataset), str(want)
        row["same_dataset"] = isinstance(dataset, pa.Schema) and dataset.equals(want)
    out["params"].append(row)

# A result whose type follows the parameter's value: DuckDB reports none.
dataset, params = described("SELECT ? + 1 AS n")
ref.execute("PREPARE p AS SELECT ? + 1 AS n")
out["untyped"] = {"dataset": str(dataset), "params": str(params),
                  "duckdb_result_types": ref.sql("SELECT result_types FROM duckdb_prepared_statements()").fetchone()[0]}
cur.execute("SELECT ? + 1 AS n", parameters=(41,))
out["untyped"]["row"] = cur.fetchone()[0]

# Described, not run: a prepared INSERT adds nothing until it executes.
cur.execute("CREATE TABLE t (id INTEGER)")
dataset, params = described("INSERT INTO t VALUES (?)")
cur.execute("SELECT count(*) FROM t")
out["insert"] = {"dataset": str(dataset), "params": str(params), "rows": cur.fetchone()[0]}
ref.execute("CREATE TABLE t (id INTEGER)")
out["insert"]["want"] = str(ref.execute("INSERT INTO t VALUES (1)").arrow().read_all().schema)
out["insert"]["want_params"] = str(ref.sql('SELECT id AS "1" FROM t').arrow().read_all().schema)

# The guard judges the create: a refused function never gets a handle.
out["refused"] = error_of(lambda: cur.adbc_prepare("SELECT current_setting('threads')"))
out["missing"] = error_of(lambda: cur.adbc_prepare("SELECT * FROM no_such_table"))
print(json.dumps(out))
"#,
    );
    for q in v["queries"].as_array().unwrap() {
        assert_eq!(q["same_as_duckdb"], true, "{q:#}");
        assert_eq!(q["same_as_run"], true, "{q:#}");
        assert_eq!(q["params"], 0, "{q:#}");
    }
    let u = &v["uhugeint"];
    assert_eq!(u["got"], "u: decimal256(39, 0)", "{u:#}");
    assert_eq!(u["got"], u["ran"], "{u:#}");
    for p in v["params"].as_array().unwrap() {
        assert_eq!(p["same_params"], true, "{p:#}");
        assert_eq!(p["count_as_duckdb"], true, "{p:#}");
        if p.get("same_dataset").is_some() {
            assert_eq!(p["same_dataset"], true, "{p:#}");
        }
    }
    let untyped = &v["untyped"];
    assert_eq!(untyped["duckdb_result_types"], Value::Null, "{untyped:#}");
    assert!(
        untyped["dataset"]
            .as_str()
            .unwrap()
            .contains("did not provide schema"),
        "{untyped:#}"
    );
    assert_eq!(untyped["params"], "1: null", "{untyped:#}");
    assert_eq!(untyped["row"], 42);
    let insert = &v["insert"];
    assert_eq!(insert["rows"], 0, "{insert:#}");
    assert_eq!(insert["dataset"], insert["want"], "{insert:#}");
    assert_eq!(insert["params"], insert["want_params"], "{insert:#}");
    let refused = v["refused"].as_str().unwrap();
    assert!(
        refused.contains("(PermissionDenied;") && refused.contains("current_setting"),
        "{refused}"
    );
    let missing = v["missing"].as_str().unwrap();
    assert!(
        missing.contains("(InvalidArgument;") && missing.contains("no_such_table"),
        "{missing}"
    );
    // A description is audited apart from the runs, never with the token.
    let log = app.log_text();
    let described = log
        .lines()
        .filter(|l| l.contains("query ended") && l.contains("api=\"flight-describe\""))
        .count();
    // At least one per `described()` call above (ADBC describes its runs too).
    assert!(described >= 13, "{described}");
    assert!(!log.contains(SECRET));
}

/// GetSchema answers a statement's columns without running it (ADBC's
/// `ExecuteSchema` of an unprepared statement, pyarrow's `get_schema`):
/// equal to Python DuckDB's own Arrow schema of the query and to the
/// schema the execution then streams, for plain and prepared statements;
/// a query that would run for minutes answers at once; an INSERT adds no
/// row; the guard judges the text first; a result typed by its parameters'
/// values has none yet; the metadata commands' schemas are their
/// FlightInfos'; a prepared statement is its owner's.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_get_schema_describes_without_running() {
    let (app, uri) = gateway(&[("DUCKGATE_POLICY", "read-write")]).await;
    let v = run(
        &uri,
        &format!(
            r#"
import duckdb
OTHER = "{OTHER_SECRET}"
ref = duckdb.connect()
ref.sql("SET TimeZone = 'UTC'")
conn = connect()
cur = conn.cursor()

def varint(b, i):
    n = shift = 0
    while True:
        n |= (b[i] & 0x7F) << shift
        i += 1
        if b[i - 1] < 0x80:
            return n, i
        shift += 7

def fields(b):
    """A protobuf message's length-delimited fields by number."""
    out, i = {{}}, 0
    while i < len(b):
        key, i = varint(b, i)
        if key & 7 == 2:
            n, i = varint(b, i)
            out[key >> 3] = b[i:i + n]
            i += n
        else:
            _, i = varint(b, i)
    return out

def plain_schema(sql):
    """ADBC's ExecuteSchema of an unprepared statement: GetSchema."""
    stmt = cur.adbc_statement
    stmt.set_sql_query(sql)
    return pa.schema(stmt.execute_schema())

client = raw_client()
def get_schema(cmd, token=TOKEN):
    return client.get_schema(fl.FlightDescriptor.for_command(cmd), options(token)).schema

def create_prepared(sql, token=TOKEN):
    action = fl.Action("CreatePreparedStatement", command("ActionCreatePreparedStatementRequest", field(1, sql)))
    body = list(client.do_action(action, options(token)))[0].body.to_pybytes()
    result = fields(fields(body)[2])  # Any.value: ActionCreatePreparedStatementResult
    return result[1], pa.ipc.read_schema(pa.py_buffer(result[2]))

QUERIES = [
    "SELECT 1::TINYINT a, -2::SMALLINT b, 3::INTEGER c, 4::BIGINT d, 18446744073709551615::UBIGINT h, true AS t",
    "SELECT 1.23::DECIMAL(4,2) a, 1234567890123456789012345.6789::DECIMAL(38,4) c, 1.5::FLOAT f, -0.25::DOUBLE d",
    "SELECT DATE '2024-02-29' AS d, TIME '12:34:56.789' AS t, TIMESTAMP_NS '2024-01-01 00:00:00.123456789' AS ns, TIMESTAMPTZ '2024-06-01 12:00:00+02' AS tz, INTERVAL '1 day' i",
    "SELECT [1, 2, NULL] l, {{'a': 1, 'b': 'x'}} st, MAP {{'k1': 1}} m, '\\xAA'::BLOB b, NULL n, 'a'::ENUM('a', 'b') e, gen_random_uuid() u",
    "SELECT i, i::VARCHAR s FROM range(10) t(i)",
]
out = {{"plain": [], "prepared": []}}
for q in QUERIES:
    want = ref.sql(q).arrow().schema
    got = plain_schema(q)
    cur.execute(q)
    ran = cur.fetch_arrow_table().schema
    out["plain"].append({{"sql": q, "got": str(got), "want": str(want),
                         "same_as_duckdb": got.equals(want), "same_as_run": got.equals(ran)}})
    handle, created = create_prepared(q)
    got = get_schema(command("CommandPreparedStatementQuery", field(1, handle)))
    out["prepared"].append({{"sql": q, "got": str(got), "same_as_duckdb": got.equals(want),
                            "same_as_create": got.equals(created)}})

# A query that would run for minutes is described at once.
t0 = time.time()
out["long"] = str(plain_schema("SELECT sum(i) AS s FROM range(100000000000) t(i)"))
out["long_s"] = time.time() - t0
out["long_want"] = str(ref.sql("SELECT sum(i) AS s FROM range(100000000000) t(i) LIMIT 0").arrow().schema)

# Described, not run.
cur.execute("CREATE TABLE t (id INTEGER)")
out["insert"] = str(get_schema(command("CommandStatementQuery", field(1, "INSERT INTO t VALUES (1), (2)"))))
cur.execute("SELECT count(*) FROM t")
out["insert_rows"] = cur.fetchone()[0]

out["untyped"] = error_of(lambda: get_schema(command("CommandStatementQuery", field(1, "SELECT ? + 1 AS n"))))
out["refused"] = error_of(lambda: plain_schema("SELECT current_setting('threads')"))
out["refused_raw"] = error_of(lambda: get_schema(command("CommandStatementQuery", field(1, "SELECT current_setting('threads')"))))
out["missing"] = error_of(lambda: plain_schema("SELECT * FROM no_such_table"))
out["junk"] = error_of(lambda: get_schema(b"not a command"))
out["wrong_token"] = error_of(lambda: get_schema(command("CommandStatementQuery", field(1, "SELECT 1")), "not-a-token"))
handle, _ = create_prepared("SELECT 1 AS one")
out["other_identity"] = error_of(lambda: get_schema(command("CommandPreparedStatementQuery", field(1, handle)), OTHER))

# A metadata command's schema is its FlightInfo's.
tables = command("CommandGetTables", field(4, "x"))
out["tables_same"] = get_schema(tables).equals(client.get_flight_info(fl.FlightDescriptor.for_command(tables), options(TOKEN)).schema)
out["sql_info"] = str(get_schema(command("CommandGetSqlInfo", b"")))
print(json.dumps(out))
"#
        ),
    );
    for k in ["plain", "prepared"] {
        for q in v[k].as_array().unwrap() {
            assert_eq!(q["same_as_duckdb"], true, "{k}: {q:#}");
            let other = if k == "plain" {
                "same_as_run"
            } else {
                "same_as_create"
            };
            assert_eq!(q[other], true, "{k}: {q:#}");
        }
    }
    assert_eq!(v["long"], v["long_want"], "{v:#}");
    assert!(v["long_s"].as_f64().unwrap() < 5.0, "{v:#}");
    assert_eq!(v["insert"], "Count: int64", "{v:#}");
    assert_eq!(v["insert_rows"], 0);
    let has = |k: &str, parts: &[&str]| {
        let e = v[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: no error: {v:#}"));
        for p in parts {
            assert!(e.contains(p), "{k}: {p:?} not in {e}");
        }
    };
    has("untyped", &["types follow the parameters"]);
    has(
        "refused",
        &[
            "(PermissionDenied;",
            "Statement not allowed",
            "current_setting",
        ],
    );
    has("refused_raw", &["unauthorized", "Statement not allowed"]);
    has("missing", &["(InvalidArgument;", "no_such_table"]);
    has("junk", &["invalid argument", "no Flight SQL command"]);
    has("wrong_token", &["unauthenticated", "not valid for queries"]);
    has("other_identity", &["another identity"]);
    assert_eq!(v["tables_same"], true, "{v:#}");
    assert!(v["sql_info"]
        .as_str()
        .unwrap()
        .contains("info_name: uint32"));
    // Each description is audited as one, never with the token; nothing
    // ran the INSERT or the long sum as a query.
    let log = app.log_text();
    let described = log
        .lines()
        .filter(|l| l.contains("query ended") && l.contains("api=\"flight-describe\""))
        .count();
    assert!(described >= 12, "{described}");
    let calls = crate::common::metric(
        &app.get_text("/metrics").await,
        "duckgate_flight_requests_total{method=\"GetSchema\",code=\"Ok\"}",
    );
    assert!(calls >= 12.0, "{calls}");
    assert!(!log.contains(SECRET) && !log.contains(OTHER_SECRET));
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_metadata_lists_catalogs_schemas_and_tables() {
    let (_app, uri) = gateway(&[("DUCKGATE_POLICY", "read-write")]).await;
    let v = run(
        &uri,
        r#"
conn = connect()
cur = conn.cursor()
cur.execute("CREATE SCHEMA sales")
cur.execute("CREATE TABLE sales.orders (id BIGINT, amount DECIMAL(10,2), placed TIMESTAMP, tags VARCHAR[])")
cur.execute("CREATE TABLE client.notes (body VARCHAR)")
cur.execute("CREATE VIEW sales.big AS SELECT * FROM sales.orders WHERE amount > 100")
objects = conn.adbc_get_objects().read_all().to_pylist()
filtered = conn.adbc_get_objects(depth="tables", db_schema_filter="sales", table_name_filter="ord%").read_all().to_pylist()
schema = conn.adbc_get_table_schema("orders", db_schema_filter="sales")
types = conn.adbc_get_table_types()
print(json.dumps({"objects": objects, "filtered": filtered, "schema": str(schema), "types": types}))
"#,
    );
    let objects = v["objects"].as_array().unwrap();
    let memory = objects
        .iter()
        .find(|c| c["catalog_name"] == "memory")
        .unwrap_or_else(|| panic!("{objects:#?}"));
    let schemas = memory["catalog_db_schemas"].as_array().unwrap();
    let sales = schemas
        .iter()
        .find(|s| s["db_schema_name"] == "sales")
        .unwrap();
    let mut tables: Vec<(String, String)> = sales["db_schema_tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["table_name"].as_str().unwrap().to_string(),
                t["table_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    tables.sort();
    assert_eq!(
        tables,
        [
            ("big".into(), "VIEW".into()),
            ("orders".into(), "TABLE".into())
        ]
    );
    let f = &v["filtered"];
    assert_eq!(f.as_array().unwrap().len(), 1, "{f:#}");
    assert_eq!(
        f[0]["catalog_db_schemas"].as_array().unwrap().len(),
        1,
        "{f:#}"
    );
    assert_eq!(
        f[0]["catalog_db_schemas"][0]["db_schema_tables"][0]["table_name"],
        "orders"
    );
    let schema = v["schema"].as_str().unwrap();
    for col in [
        "id: int64",
        "amount: decimal128(10, 2)",
        "placed: timestamp[us]",
        "tags: list<",
    ] {
        assert!(schema.contains(col), "{col} not in {schema}");
    }
    assert_eq!(v["types"], serde_json::json!(["TABLE", "VIEW"]));
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_refusals_reach_the_client_as_grpc_errors() {
    let (app, uri) = gateway(&[("DUCKGATE_MAX_ROWS", "1000")]).await;
    let v = run(
        &uri,
        &format!(
            r#"
OTHER = "{OTHER_SECRET}"
cur = connect().cursor()
out = {{}}
out["guard"] = error_of(lambda: cur.execute("SELECT current_setting('threads')"))
out["sql"] = error_of(lambda: cur.execute("SELECT * FROM no_such_table"))
def capped(n):
    cur.execute(f"SELECT * FROM range({{n}})")
    return cur.fetch_arrow_table().num_rows
out["at_cap"] = capped(1000)
out["past_cap"] = error_of(lambda: capped(1001))
out["far_past_cap"] = error_of(lambda: capped(5_000_000))
out["wrong_token"] = error_of(lambda: connect("not-a-token").cursor().execute("SELECT 1"))
out["no_token"] = error_of(lambda: connect(None).cursor().execute("SELECT 1"))
# A ticket is bound to the identity that asked for it.
client = raw_client()
desc = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, "SELECT 42 AS answer")))
info = client.get_flight_info(desc, options(TOKEN))
ticket = info.endpoints[0].ticket
out["other_identity"] = error_of(lambda: client.do_get(ticket, options(OTHER)).read_all())
out["owner"] = client.do_get(ticket, options(TOKEN)).read_all().to_pylist()
out["again"] = error_of(lambda: client.do_get(ticket, options(TOKEN)).read_all())
out["forged"] = error_of(lambda: client.do_get(fl.Ticket(command("TicketStatementQuery", field(1, b"0" * 16))), options(TOKEN)).read_all())
print(json.dumps(out))
"#
        ),
    );
    let has = |k: &str, parts: &[&str]| {
        let e = v[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: no error: {v:#}"));
        for p in parts {
            assert!(e.contains(p), "{k}: {p:?} not in {e}");
        }
    };
    has(
        "guard",
        &[
            "(PermissionDenied;",
            "Statement not allowed",
            "current_setting",
        ],
    );
    has("sql", &["(InvalidArgument;", "SQL error", "no_such_table"]);
    assert_eq!(v["at_cap"], 1000);
    has("past_cap", &["(ResourceExhausted;", "more than 1000 rows"]);
    has(
        "far_past_cap",
        &["(ResourceExhausted;", "more than 1000 rows"],
    );
    has(
        "wrong_token",
        &["(Unauthenticated;", "not valid for queries"],
    );
    has(
        "no_token",
        &["(Unauthenticated;", "bearer token is required"],
    );
    has("other_identity", &["another identity"]);
    assert_eq!(v["owner"], serde_json::json!([{"answer": 42}]));
    has("again", &["no such ticket"]);
    has("forged", &["no such ticket"]);
    let log = app.log_text();
    assert!(
        !log.contains(SECRET) && !log.contains(OTHER_SECRET),
        "a token reached the log"
    );
    assert!(!log.contains("not-a-token"));
}

/// HTTP's limits hold over Flight SQL, and the client sees each one: the
/// byte cap fails the result (before its first batch, or at the DoGet after
/// some) and never ends it short; `max_rows` and `timeout_ms` come as call
/// headers (ADBC's `rpc.call_header.*`, a JDBC URL's parameters) with
/// HTTP's meaning (the client's own cut is a clean end, the server's cap an
/// error; the time limit clamped by DUCKGATE_MAX_QUERY_TIMEOUT_MS); a timed
/// out query, by the header or by the client's gRPC deadline, is
/// interrupted and its connection serves the next query at once.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_limits_fail_visibly_and_timeouts_cancel() {
    // The default and the cap far enough apart, and from the header's
    // 500 ms, the client's 1 s deadline and the 30 s sleeps, that each
    // bound below has a busy machine's margin and still tells which limit
    // ended a call.
    let (default, cap) = (6.0, 12.0);
    let (app, uri) = gateway(&[
        ("DUCKGATE_POOL_SIZE", "1"),
        ("DUCKGATE_MAX_RESULT_BYTES", "1000000"),
        ("DUCKGATE_MAX_ROWS", "100000"),
        ("DUCKGATE_QUERY_TIMEOUT_MS", &(default * 1000.0).to_string()),
        ("DUCKGATE_MAX_QUERY_TIMEOUT_MS", &(cap * 1000.0).to_string()),
    ])
    .await;
    let v = run(
        &uri,
        r#"
def with_headers(**headers):
    kw = {af.DatabaseOptions.AUTHORIZATION_HEADER.value: "Bearer " + TOKEN}
    for k, v in headers.items():
        kw[af.DatabaseOptions.RPC_CALL_HEADER_PREFIX.value + k] = str(v)
    return fs.connect(URI, db_kwargs=kw, autocommit=True)

def table(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    return cur.fetch_arrow_table()

def timed(f):
    t0 = time.time()
    r = error_of(f)
    return {"error": r, "s": time.time() - t0}

out = {}
plain = connect()
# The byte cap: a result past it fails however it is read.
out["bytes_small"] = table(plain, "SELECT i FROM range(1000) t(i)").num_rows
big = "SELECT i, repeat('x', 200) AS s FROM range(100000) t(i)"
out["bytes_table"] = error_of(lambda: table(plain, big))
def rows_of_fetchall():
    cur = plain.cursor(); cur.execute(big); return len(cur.fetchall())
out["bytes_fetchall"] = error_of(rows_of_fetchall)
def rows_of_df():
    cur = plain.cursor(); cur.execute(big); return len(cur.fetch_df())
out["bytes_df"] = error_of(rows_of_df)
# The DoGet of a result past the cap after its first batches.
client = raw_client()
desc = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, big)))
info = client.get_flight_info(desc, options(TOKEN))
reader = client.do_get(info.endpoints[0].ticket, options(TOKEN))
got = {"rows": 0}
def read_all():
    for chunk in reader:
        got["rows"] += chunk.data.num_rows
out["bytes_doget"] = error_of(read_all)
out["bytes_doget_rows"] = got["rows"]

# max_rows: the client's cut is a clean end; past the server's cap, an error.
out["max_rows"] = table(with_headers(max_rows=10), "SELECT * FROM range(1000) t(i)").to_pylist()[-1]
out["max_rows_count"] = table(with_headers(max_rows=10), "SELECT * FROM range(1000) t(i)").num_rows
out["max_rows_over_cap"] = error_of(lambda: table(with_headers(max_rows=500000), "SELECT * FROM range(200000) t(i)"))
out["max_rows_bad"] = error_of(lambda: table(with_headers(max_rows=0), "SELECT 1"))
out["timeout_bad"] = error_of(lambda: table(with_headers(timeout_ms="soon"), "SELECT 1"))

# timeout_ms: the header's limit, not the default's 6 s; the connection
# (the pool's only one) serves the next query at once.
sleepy = "SELECT sleep_ms(30000) IS NULL AS slept"
out["timeout"] = timed(lambda: table(with_headers(timeout_ms=500), sleepy))
out["after_timeout"] = timed(lambda: table(plain, "SELECT 7 AS seven").to_pylist())
# Clamped by DUCKGATE_MAX_QUERY_TIMEOUT_MS (12 s), not the default's 6 s.
out["clamped"] = timed(lambda: table(with_headers(timeout_ms=600000), sleepy))
# The client's own gRPC deadline (ADBC's query timeout): the query stops.
deadline = fs.connect(URI, db_kwargs={
    af.DatabaseOptions.AUTHORIZATION_HEADER.value: "Bearer " + TOKEN,
    af.DatabaseOptions.TIMEOUT_QUERY.value: "1",
}, autocommit=True)
out["deadline"] = timed(lambda: table(deadline, sleepy))
out["after_deadline"] = timed(lambda: table(plain, "SELECT 8 AS eight").to_pylist())
print(json.dumps(out))
"#,
    );
    assert_eq!(v["bytes_small"], 1000);
    for k in ["bytes_table", "bytes_fetchall", "bytes_df", "bytes_doget"] {
        let e = v[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: read whole past the byte cap: {v:#}"));
        // ADBC: `(ResourceExhausted; ...)`; pyarrow: `resource exhausted`.
        let lower = e.to_lowercase();
        assert!(
            lower.contains("resource") && lower.contains("exhausted"),
            "{k}: {e}"
        );
        assert!(
            e.contains("Result larger than its cap")
                && e.contains("the gateway's cap (DUCKGATE_MAX_RESULT_BYTES)"),
            "{k}: {e}"
        );
    }
    // The stream failed after some batches: a partial read is an error.
    assert!(v["bytes_doget_rows"].as_u64().unwrap() < 100_000, "{v:#}");
    assert_eq!(v["max_rows"], serde_json::json!({"i": 9}));
    assert_eq!(v["max_rows_count"], 10);
    let over = v["max_rows_over_cap"].as_str().unwrap_or_default();
    assert!(
        over.contains("(ResourceExhausted;") && over.contains("more than 100000 rows"),
        "{over}"
    );
    let bad = v["max_rows_bad"].as_str().unwrap_or_default();
    assert!(
        bad.contains("(InvalidArgument;") && bad.contains("max_rows"),
        "{bad}"
    );
    let bad = v["timeout_bad"].as_str().unwrap_or_default();
    assert!(
        bad.contains("(InvalidArgument;") && bad.contains("timeout_ms"),
        "{bad}"
    );
    let t = &v["timeout"];
    let e = t["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("(DeadlineExceeded;") && e.contains("Query timed out"),
        "{t:#}"
    );
    // Half the default: the header's 500 ms, not the default, ended it.
    assert!(t["s"].as_f64().unwrap() < default / 2.0, "{t:#}");
    assert_eq!(
        v["after_timeout"]["error"],
        Value::Null,
        "{:#}",
        v["after_timeout"]
    );
    // The only connection was free at once (the 30 s sleep would hold it).
    assert!(
        v["after_timeout"]["s"].as_f64().unwrap() < default / 2.0,
        "{v:#}"
    );
    let c = &v["clamped"];
    assert!(
        c["error"]
            .as_str()
            .unwrap_or_default()
            .contains("(DeadlineExceeded;"),
        "{c:#}"
    );
    // The cap, not the default, and not the 30 s sleep's end.
    let s = c["s"].as_f64().unwrap();
    assert!((cap - 0.5..cap + default).contains(&s), "{c:#}");
    let d = &v["deadline"];
    // The client's own deadline ends the call: ADBC's Go driver says
    // DeadlineExceeded, or Canceled ("Timeout expired") when its context's
    // timer fires before gRPC's deadline does.
    let e = d["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("DeadlineExceeded") || e.contains("Timeout expired"),
        "{d:#}"
    );
    assert!(d["s"].as_f64().unwrap() < default / 2.0, "{d:#}");
    assert_eq!(v["after_deadline"]["error"], Value::Null, "{v:#}");
    assert!(
        v["after_deadline"]["s"].as_f64().unwrap() < default / 2.0,
        "{v:#}"
    );
    // Nothing waited for the 30 s sleeps: each call's own time above says
    // so (the script's whole time would add only the machine's speed).
    // The audit lines say what ended the timed-out queries.
    let audit = flight_audit_lines(&app);
    let timeouts = audit
        .iter()
        .filter(|l| l.contains("outcome=query-timeout"))
        .count();
    assert_eq!(timeouts, 2, "{audit:#?}");
    // The client's own deadline: the query ended as a client gone.
    assert!(
        audit.iter().any(|l| l.contains("outcome=client-gone")),
        "{audit:#?}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_cancel_interrupts_the_query() {
    let (app, uri) = gateway(&[("DUCKGATE_POOL_SIZE", "1")]).await;
    let v = run(
        &uri,
        r#"
out = {}
conn = connect()
cur = conn.cursor()
# ADBC's cancel (the client drops the call) while DuckDB runs.
t = threading.Timer(1.0, cur.adbc_cancel)
t.start()
t0 = time.time()
out["adbc_cancel"] = error_of(lambda: cur.execute("SELECT sleep_ms(30000) IS NULL AS slept"))
out["adbc_cancel_s"] = time.time() - t0
# The pool's one connection is free again.
cur2 = connect().cursor()
t0 = time.time()
cur2.execute("SELECT 7 AS seven")
out["next"] = cur2.fetchone()[0]
out["next_s"] = time.time() - t0
# CancelFlightInfo on a result waiting for its DoGet.
client = raw_client()
desc = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, "SELECT * FROM range(1000000000)")))
info = client.get_flight_info(desc, options(TOKEN))
res = list(client.do_action(fl.Action("CancelFlightInfo", field(1, info.serialize())), options(TOKEN)))
out["cancel_status"] = res[0].body.to_pybytes().hex()
out["after_cancel"] = error_of(lambda: client.do_get(info.endpoints[0].ticket, options(TOKEN)).read_all())
print(json.dumps(out))
"#,
    );
    assert!(v["adbc_cancel"].is_string(), "{v:#}");
    assert!(v["adbc_cancel_s"].as_f64().unwrap() < 10.0, "{v:#}");
    assert_eq!(v["next"], 7);
    assert!(v["next_s"].as_f64().unwrap() < 5.0, "{v:#}");
    // CancelFlightInfoResult { status: CANCEL_STATUS_CANCELLED (1) }.
    assert_eq!(v["cancel_status"], "0801");
    assert!(v["after_cancel"]
        .as_str()
        .unwrap()
        .contains("no such ticket"));
    // Nothing waited for the 30 s sleep: the cancel's and the next query's
    // own times above say so.
    // Both cancelled queries ended (audit lines) without finishing.
    let audit = flight_audit_lines(&app);
    let not_ok = audit.iter().filter(|l| !l.contains("outcome=ok")).count();
    assert!(not_ok >= 2, "{audit:#?}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_serves_tls_with_a_certificate_and_key() {
    let certs = tempfile::tempdir().unwrap();
    crate::common::pg_tls::make_certificates(certs.path());
    let (_app, uri) = gateway(&[
        (
            "DUCKGATE_FLIGHT_TLS_CERT",
            certs.path().join("server.crt").to_str().unwrap(),
        ),
        (
            "DUCKGATE_FLIGHT_TLS_KEY",
            certs.path().join("server.key").to_str().unwrap(),
        ),
    ])
    .await;
    assert!(uri.starts_with("grpc+tls://"), "{uri}");
    let ca = certs.path().join("ca.pem");
    let v = run(
        &uri,
        &format!(
            r#"
CA = open({ca:?}).read()
def tls_connect():
    return fs.connect(URI, db_kwargs={{
        af.DatabaseOptions.AUTHORIZATION_HEADER.value: "Bearer " + TOKEN,
        af.DatabaseOptions.TLS_ROOT_CERTS.value: CA,
    }}, autocommit=True)
cur = tls_connect().cursor()
cur.execute("SELECT 'over tls' AS s")
out = {{"row": cur.fetchone()[0]}}
# Without the CA the server's certificate is not trusted.
out["untrusted"] = error_of(lambda: connect().cursor().execute("SELECT 1"))
# Plain gRPC to the TLS port fails.
plain = URI.replace("grpc+tls://", "grpc://")
out["plain"] = error_of(lambda: fs.connect(plain, db_kwargs={{af.DatabaseOptions.AUTHORIZATION_HEADER.value: "Bearer " + TOKEN}}, autocommit=True).cursor().execute("SELECT 1"))
print(json.dumps(out))
"#,
            ca = ca.to_str().unwrap()
        ),
    );
    assert_eq!(v["row"], "over tls");
    assert!(v["untrusted"].is_string(), "{v:#}");
    assert!(v["plain"].is_string(), "{v:#}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_tickets_are_bounded_in_number_and_age() {
    // Four places, two of them each token's (two tokens share them).
    let (app, uri) = gateway(&[
        ("DUCKGATE_FLIGHT_MAX_TICKETS", "4"),
        ("DUCKGATE_FLIGHT_TICKET_TTL_MS", "1000"),
    ])
    .await;
    let v = run(
        &uri,
        r#"
client = raw_client()
def info(sql):
    desc = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, sql)))
    return client.get_flight_info(desc, options(TOKEN))
a = info("SELECT 1 AS a")
b = info("SELECT * FROM range(100000000)")
out = {"third": error_of(lambda: info("SELECT 3 AS c"))}
out["first"] = client.do_get(a.endpoints[0].ticket, options(TOKEN)).read_all().to_pylist()
# A place is free again once a ticket is fetched.
c = info("SELECT 3 AS c")
# On purpose: b's ticket must outlive its age (DUCKGATE_FLIGHT_TICKET_TTL_MS,
# 1 s) with room for the sweep.
time.sleep(3)
out["expired"] = error_of(lambda: client.do_get(b.endpoints[0].ticket, options(TOKEN)).read_all())
out["after"] = client.do_get(info("SELECT 4 AS d").endpoints[0].ticket, options(TOKEN)).read_all().to_pylist()
print(json.dumps(out))
"#,
    );
    let third = v["third"].as_str().unwrap();
    assert!(third.contains("DUCKGATE_FLIGHT_MAX_TICKETS"), "{third}");
    assert_eq!(v["first"], serde_json::json!([{"a": 1}]));
    assert!(
        v["expired"].as_str().unwrap().contains("no such ticket"),
        "{v:#}"
    );
    assert_eq!(v["after"], serde_json::json!([{"d": 4}]));
    // The expired result's query ended, interrupted, not as a whole answer.
    let audit = flight_audit_lines(&app);
    assert!(
        audit.iter().any(|l| !l.contains("outcome=ok")),
        "{audit:#?}"
    );
    assert!(app.log_text().contains("Flight SQL tickets expired"));
}

/// One identity cannot lock the others out (issue 55): it keeps at most
/// its share of the handles (prepared statements and results), however
/// busy it keeps them; the other token still prepares and runs. A command
/// whose bytes are no valid message (a query that is not UTF-8) is the
/// client's error, INVALID_ARGUMENT.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_handles_are_shared_per_identity_and_bad_bytes_are_invalid() {
    let (_app, uri) = gateway(&[("DUCKGATE_FLIGHT_MAX_TICKETS", "8")]).await;
    let v = run(
        &uri,
        &format!(
            r#"
OTHER = "{OTHER_SECRET}"
hog = connect()
kept, refused = [], None
for i in range(20):
    cur = hog.cursor()
    sql = "SELECT %d AS n" % i
    try:
        cur.adbc_prepare(sql)
        kept.append((cur, sql))
    except Exception as e:
        refused = str(e)
        break
# Its share is its own to use: one closed, the rest run (each result
# takes a place until it is fetched), kept busy.
kept[0][0].close()
for cur, sql in kept[1:]:
    cur.execute(sql)
    cur.fetchall()
other = connect(OTHER)
c = other.cursor()
c.execute("SELECT 42 AS answer")
answer = c.fetchall()
c2 = other.cursor()
c2.adbc_prepare("SELECT 7 AS seven")
c2.execute("SELECT 7 AS seven")
seven = c2.fetchall()
client = raw_client()
bad = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, b"SELECT '" + bytes([0xFF, 0xFE]) + b"'")))
try:
    client.get_flight_info(bad, options(TOKEN))
    bad_bytes = None
except Exception as e:
    bad_bytes = type(e).__name__ + ": " + str(e)
for cur, _ in kept[1:]:
    cur.close()
for cur in (c, c2):
    cur.close()
print(json.dumps({{"kept": len(kept), "refused": refused, "answer": answer, "seven": seven, "bad": bad_bytes}}))
"#
        ),
    );
    assert_eq!(
        v["kept"], 4,
        "the hog keeps its share of 8 among two tokens: {v:#}"
    );
    assert!(
        v["refused"].as_str().unwrap_or_default().contains("share"),
        "{v:#}"
    );
    assert_eq!(v["answer"], serde_json::json!([[42]]), "{v:#}");
    assert_eq!(v["seven"], serde_json::json!([[7]]), "{v:#}");
    let bad = v["bad"].as_str().unwrap_or_default();
    // INVALID_ARGUMENT reaches pyarrow as ArrowInvalid (INTERNAL would be
    // FlightInternalError), with the gateway's words.
    assert!(
        bad.starts_with("ArrowInvalid") && bad.contains("could not be decoded"),
        "{bad}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_accepts_oidc_jwts_as_the_http_api_does() {
    use crate::venv::oidc::{Issuer, AUDIENCE};
    let issuer = Issuer::start();
    let (app, uri) = gateway(&[
        ("DUCKGATE_OIDC_ISSUER", issuer.base.as_str()),
        ("DUCKGATE_OIDC_AUDIENCE", AUDIENCE),
    ])
    .await;
    let jwt = issuer.mint("rsa-1", "RS256", issuer.claims("carol")).await;
    let mut expired = issuer.claims("carol");
    expired["exp"] = serde_json::json!(expired["iat"].as_i64().unwrap() - 3600);
    expired["iat"] = serde_json::json!(expired["iat"].as_i64().unwrap() - 7200);
    let expired = issuer.mint("rsa-1", "RS256", expired).await;
    let v = run(
        &uri,
        &format!(
            r#"
JWT, EXPIRED = "{jwt}", "{expired}"
cur = connect(JWT).cursor()
cur.execute("SELECT 'as carol' AS who")
out = {{"row": cur.fetchone()[0]}}
out["expired"] = error_of(lambda: connect(EXPIRED).cursor().execute("SELECT 1"))
# A JWT identity's ticket is not the static token's.
client = raw_client()
desc = fl.FlightDescriptor.for_command(command("CommandStatementQuery", field(1, "SELECT 1 AS one")))
info = client.get_flight_info(desc, options(JWT))
out["static"] = error_of(lambda: client.do_get(info.endpoints[0].ticket, options(TOKEN)).read_all())
out["jwt"] = client.do_get(info.endpoints[0].ticket, options(JWT)).read_all().to_pylist()
print(json.dumps(out))
"#
        ),
    );
    assert_eq!(v["row"], "as carol");
    let e = v["expired"].as_str().unwrap();
    assert!(
        e.contains("(Unauthenticated;") && e.contains("expired"),
        "{e}"
    );
    assert!(v["static"].as_str().unwrap().contains("another identity"));
    assert_eq!(v["jwt"], serde_json::json!([{"one": 1}]));
    let audit = flight_audit_lines(&app);
    assert!(
        audit.iter().any(|l| l.contains("token=oidc:carol")),
        "{audit:#?}"
    );
    let log = app.log_text();
    assert!(
        !log.contains(&jwt) && !log.contains(&expired),
        "a JWT reached the log"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_stops_accepting_with_the_gateway() {
    let (app, uri) = gateway(&[("DUCKGATE_SHUTDOWN_GRACE_MS", "200")]).await;
    let addr = uri.trim_start_matches("grpc://").to_string();
    let v = run(
        &uri,
        r#"
cur = connect().cursor()
cur.execute("SELECT 1 AS one")
print(json.dumps({"one": cur.fetchone()[0]}))
"#,
    );
    assert_eq!(v["one"], 1);
    std::net::TcpStream::connect(&addr).expect("the listener accepts while the gateway runs");
    drop(app);
    eventually(
        "the Flight SQL listener closed",
        Duration::from_secs(15),
        || {
            let addr = addr.clone();
            async move {
                match std::net::TcpStream::connect(&addr) {
                    Ok(_) => Err("still accepting"),
                    Err(_) => Ok(()),
                }
            }
        },
    )
    .await;
}

/// Roles confine Flight SQL callers as they do HTTP ones (issue 39): the
/// token `analyst` holds a role that reads `orders` only; through ADBC its
/// statements read `orders`, a hidden table is a missing one, and the
/// metadata calls list what it may read. The unconfined token sees both.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_callers_are_confined_by_their_roles() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    duckdb::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders AS SELECT range AS id FROM range(5);
             CREATE TABLE payroll AS SELECT range AS emp FROM range(3);",
        )
        .unwrap();
    let config = dir.path().join("roles.toml");
    std::fs::write(
        &config,
        "[[role]]\nname = \"reader\"\nmembers = [\"analyst\"]\nread = [\"ops.main.orders\"]\n",
    )
    .unwrap();
    let (_app, uri) = gateway(&[
        ("DUCKGATE_DATABASE", db.to_str().unwrap()),
        ("DUCKGATE_CONFIG", config.to_str().unwrap()),
    ])
    .await;
    let script = r#"
def tables(token):
    conn = connect(token)
    out = []
    for c in conn.adbc_get_objects(depth="tables").read_all().to_pylist():
        for s in c["catalog_db_schemas"] or []:
            for t in s["db_schema_tables"] or []:
                out.append(c["catalog_name"] + "." + s["db_schema_name"] + "." + t["table_name"])
    return sorted(out)

def count(token, sql):
    cur = connect(token).cursor()
    cur.execute(sql)
    return cur.fetchall()

OTHER = sys.argv[3]
print(json.dumps({
    "orders": count(TOKEN, "SELECT count(*) FROM orders"),
    "payroll": error_of(lambda: count(TOKEN, "SELECT * FROM payroll")),
    "mine": tables(TOKEN),
    "other": tables(OTHER),
    "other_payroll": count(OTHER, "SELECT count(*) FROM payroll"),
}))
"#;
    let out = python(
        &format!("{PRELUDE}\n{script}"),
        &[&uri, SECRET, OTHER_SECRET],
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["orders"], serde_json::json!([[5]]), "{v}");
    let refusal = v["payroll"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("Table with name payroll does not exist"),
        "{refusal}"
    );
    assert_eq!(v["mine"], serde_json::json!(["ops.main.orders"]), "{v}");
    assert_eq!(
        v["other"],
        serde_json::json!(["ops.main.orders", "ops.main.payroll"]),
        "{v}"
    );
    assert_eq!(v["other_payroll"], serde_json::json!([[3]]), "{v}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver); scripts/test installs it"]
async fn flight_metadata_carries_duckdbs_type_names_and_the_current_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("warehouse.duckdb");
    let seed = r#"
import sys, duckdb
c = duckdb.connect(sys.argv[1])
c.execute("""
CREATE SCHEMA sales;
CREATE TABLE sales.orders (id BIGINT, amount DECIMAL(10,2), big HUGEINT, token UUID,
                           placed TIMESTAMP, seen_at TIMESTAMPTZ, tags VARCHAR[], doc JSON, m MAP(VARCHAR, INTEGER));
CREATE VIEW sales.small AS SELECT id, amount FROM sales.orders;
""")
c.close()
"#;
    python(seed, &[db.to_str().unwrap()]);
    std::fs::create_dir(dir.path().join("ref")).unwrap();
    let reference = dir.path().join("ref").join("warehouse.duckdb");
    std::fs::copy(&db, &reference).unwrap();
    let (_app, uri) = gateway(&[("DUCKGATE_DATABASE", db.to_str().unwrap())]).await;
    let v = run(
        &uri,
        &format!(
            r#"
import duckdb
ref = duckdb.connect({reference:?}, read_only=True)
conn = connect()
objects = conn.adbc_get_objects(depth="columns", db_schema_filter="sales").read_all().to_pylist()
got = []
for c in objects:
    for s in c["catalog_db_schemas"] or []:
        for t in s["db_schema_tables"] or []:
            for col in t["table_columns"] or []:
                got.append([c["catalog_name"], s["db_schema_name"], t["table_name"], col["column_name"], col["xdbc_type_name"]])
want = [list(r) for r in ref.sql('''SELECT database_name, schema_name, table_name, column_name, data_type
    FROM duckdb_columns() WHERE schema_name = 'sales' ORDER BY ALL''').fetchall()]
print(json.dumps({{
    "got": sorted(got), "want": want,
    "catalog": conn.adbc_current_catalog, "schema": conn.adbc_current_db_schema,
    "want_catalog": ref.sql("SELECT current_database(), current_schema()").fetchone(),
    "set_other": error_of(lambda: setattr(conn, "adbc_current_catalog", "elsewhere")),
}}))
"#,
            reference = reference.to_str().unwrap()
        ),
    );
    assert_eq!(v["got"], v["want"], "{v:#}");
    assert_eq!(v["got"].as_array().unwrap().len(), 11, "{v:#}");
    assert_eq!(v["catalog"], v["want_catalog"][0], "{v:#}");
    assert_eq!(v["schema"], v["want_catalog"][1], "{v:#}");
    assert!(v["set_other"].is_string(), "{v:#}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, ADBC's Flight SQL driver, the OIDC issuer); scripts/test installs it"]
async fn flight_a_prepared_statement_closes_after_its_jwt_expired() {
    use crate::venv::oidc::{Issuer, AUDIENCE};
    let issuer = Issuer::start();
    let (_app, uri) = gateway(&[
        ("DUCKGATE_OIDC_ISSUER", issuer.base.as_str()),
        ("DUCKGATE_OIDC_AUDIENCE", AUDIENCE),
        ("DUCKGATE_OIDC_LEEWAY_MS", "0"),
    ])
    .await;
    // A JWT that expires 10 s from now (time to prepare with it), and
    // another identity's.
    let mut soon = issuer.claims("carol");
    let exp = soon["iat"].as_i64().unwrap() + 10;
    soon["exp"] = serde_json::json!(exp);
    let soon = issuer.mint("rsa-1", "RS256", soon).await;
    let dave = issuer.mint("rsa-1", "RS256", issuer.claims("dave")).await;
    let v = run(
        &uri,
        &format!(
            r#"
SOON, DAVE, EXP = "{soon}", "{dave}", {exp}
def fields(data):
    # A protobuf message's length-delimited fields: {{number: bytes}}.
    out, i = {{}}, 0
    while i < len(data):
        key, shift = 0, 0
        while True:
            b = data[i]; i += 1
            key |= (b & 0x7F) << shift; shift += 7
            if b < 0x80: break
        n, size, shift = key >> 3, 0, 0
        while True:
            b = data[i]; i += 1
            size |= (b & 0x7F) << shift; shift += 7
            if b < 0x80: break
        out[n] = data[i:i + size]; i += size
    return out

def action(name, payload, token):
    body = command(name, payload)
    return list(raw_client().do_action(fl.Action(name.replace("Action", "").replace("Request", ""), body), options(token)))

def prepare(token):
    result = action("ActionCreatePreparedStatementRequest", field(1, "SELECT 42 AS answer"), token)
    return fields(fields(result[0].body.to_pybytes())[2])[1]

def close(handle, token):
    return error_of(lambda: action("ActionClosePreparedStatementRequest", field(1, handle), token))

first, second = prepare(SOON), prepare(SOON)
time.sleep(max(0, EXP + 1 - time.time()))
out = {{
    # Past its expiry the JWT opens nothing...
    "query": error_of(lambda: connect(SOON).cursor().execute("SELECT 1")),
    # ...but closes what it prepared, once; another identity's token does not.
    "other": close(first, DAVE),
    "closed": close(first, SOON),
    "again": close(first, SOON),
    "forged": close(second, SOON + "x"),
}}
print(json.dumps(out))
"#
        ),
    );
    let query = v["query"].as_str().unwrap_or_default();
    assert!(query.contains("expired"), "{v:#}");
    assert!(
        v["other"]
            .as_str()
            .unwrap_or_default()
            .contains("another identity"),
        "{v:#}"
    );
    assert_eq!(v["closed"], serde_json::Value::Null, "{v:#}");
    assert!(v["again"].is_string(), "{v:#}");
    assert!(v["forged"].is_string(), "{v:#}");
}
