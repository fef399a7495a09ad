//! The PostgreSQL wire door (`DUCKGATE_PG_LISTEN`) driven by the clients
//! people point at PostgreSQL: psql (Debian's postgresql-client), psycopg 3
//! (text and binary, server-side parameters), asyncpg (binary, prepared
//! statements), SQLAlchemy 2 with pandas' `read_sql`, node-postgres from
//! npm and pgjdbc from Maven Central. Every answer is compared with Python
//! DuckDB 1.5.5 over a copy of the same database file; a confined
//! identity's rows and hidden tables, cancel, timeouts, limits and TLS are
//! checked by what the client sees (SQLSTATEs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{eventually, metric, python, App, Gateway};

const ALICE: &str = "alice:pg-door-alice-7f3a";
const ALICE_SECRET: &str = "pg-door-alice-7f3a";
const CAROL: &str = "carol:pg-door-carol-2b9e";
const CAROL_SECRET: &str = "pg-door-carol-2b9e";

const SETUP: &str = r#"
import duckdb, shutil, sys
path = sys.argv[1]
c = duckdb.connect(path)
c.sql("CREATE TABLE orders(id INTEGER, tenant VARCHAR, amount DECIMAL(10,2), placed DATE, note VARCHAR)")
c.sql("INSERT INTO orders SELECT i, CASE WHEN i % 3 = 0 THEN 'b' ELSE 'a' END, i * 1.25, DATE '2024-01-01' + i::INTEGER, 'note ' || i FROM range(1, 31) t(i)")
c.sql("CREATE TABLE secret_stuff(x INTEGER PRIMARY KEY, y VARCHAR UNIQUE)")
c.sql("CREATE TABLE events(id INTEGER, kind VARCHAR)")
c.sql("CREATE INDEX events_by_kind ON events(kind)")
c.sql("INSERT INTO secret_stuff (x) VALUES (42)")
c.close()
shutil.copy(path, sys.argv[2])
"#;

const ROLES: &str = r#"
[[role]]
name = "tenant_a"
members = ["carol"]
read = ["ops.main.orders"]
[role.rows]
"ops.main.orders" = "tenant = 'a'"
"#;

/// A gateway over `ops.duckdb` with the door on a free port, its address,
/// and the reference copy of the database.
struct Door {
    app: App,
    addr: String,
    reference: PathBuf,
    dir: tempfile::TempDir,
}

impl Door {
    fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap_or_default()
    }

    /// A libpq connection string for `user` with `password`.
    fn dsn(&self, user: &str, password: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} password={password} dbname=ops sslmode=disable",
            self.port()
        )
    }
}

async fn door(extra: &[(&str, &str)]) -> Door {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    let reference = dir.path().join("reference.duckdb");
    python(SETUP, &[db.to_str().unwrap(), reference.to_str().unwrap()]);
    let roles = dir.path().join("roles.toml");
    std::fs::write(&roles, ROLES).unwrap();
    let mut b = Gateway::builder()
        .env("DUCKGATE_PG_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", roles.display())
        .env("DUCKGATE_QUERY_TOKENS", format!("{ALICE},{CAROL}"));
    for (k, v) in extra {
        b = b.env(k, v);
    }
    let app = b.spawn_app().await;
    let addr = pg_addr(&app).await;
    Door {
        app,
        addr,
        reference,
        dir,
    }
}

/// The door's address, once the gateway logged it.
pub(super) async fn pg_addr(app: &App) -> String {
    eventually("the PostgreSQL address", Duration::from_secs(10), || {
        let log = app.log_text();
        async move {
            log.lines()
                .find_map(|l| {
                    let rest = l.split("PostgreSQL listening on ").nth(1)?;
                    Some(rest.split_whitespace().next()?.to_string())
                })
                .ok_or("not logged yet")
        }
    })
    .await
}

/// Python shared by the scripts: the door's DSN, the reference DuckDB, and
/// values made comparable (a driver's Decimal, datetime, timedelta or
/// bytes against DuckDB's).
pub(super) const PRELUDE: &str = r#"
import datetime, decimal, json, sys, uuid
import duckdb
DSN, REFERENCE, ARGS = sys.argv[1], sys.argv[2], sys.argv[3:]
ref = duckdb.connect(REFERENCE, read_only=True)
ref.sql("SET TimeZone = 'UTC'")

def norm(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, decimal.Decimal):
        return ("dec", str(int(v)) if v == v.to_integral_value() else str(v))
    if isinstance(v, int):
        return ("dec", str(v))
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc)
        return ("ts", v.isoformat())
    if isinstance(v, (datetime.date, datetime.time)):
        return ("t", v.isoformat())
    if isinstance(v, datetime.timedelta):
        return ("interval", v.days * 86400 * 10**6 + v.seconds * 10**6 + v.microseconds)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(v).hex())
    if isinstance(v, uuid.UUID):
        return ("uuid", str(v))
    if isinstance(v, list):
        return ("list", [norm(x) for x in v])
    return ("t", str(v))

def rows(rs):
    return [[norm(v) for v in r] for r in rs]

def reference(sql, params=()):
    return rows(ref.execute(sql, list(params)).fetchall())

def done(**kw):
    print(json.dumps(kw, default=str))

def connect_error(port, user, password, ssl=False):
    """The SQLSTATE a connection attempt fails with (asyncpg reads it from
    the server's ErrorResponse; libpq's clients see only its text)."""
    import asyncio, asyncpg
    async def attempt():
        try:
            c = await asyncpg.connect(host="127.0.0.1", port=port, user=user, password=password, database="ops", ssl=ssl)
        except asyncpg.PostgresError as e:
            return e.sqlstate
        await c.close()
        return None
    return asyncio.run(attempt())
"#;

fn run(door: &Door, dsn: &str, script: &str, args: &[&str]) -> Value {
    let reference = door.reference.to_str().unwrap();
    let mut all = vec![dsn, reference];
    all.extend_from_slice(args);
    let out = python(&format!("{PRELUDE}\n{script}"), &all);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Queries over DuckDB's types whose values PostgreSQL has types for, each
/// with the SQL whose DuckDB answer it must equal (nested values and UUIDs
/// travel as DuckDB's text).
const TYPED: &str = r#"
QUERIES = [
    ("SELECT 1::TINYINT a, -2::SMALLINT b, 3::INTEGER c, 4::BIGINT d, 5::UTINYINT e, 60000::USMALLINT f, 4000000000::UINTEGER g, 18446744073709551615::UBIGINT h, true t, false f2", None),
    ("SELECT 1.23::DECIMAL(4,2) a, -123456789012345.678::DECIMAL(18,3) b, 1234567890123456789012345.6789::DECIMAL(38,4) c, 170141183460469231731687303715884105727::HUGEINT h, 1.5::FLOAT f, -0.25::DOUBLE d, 1e300::DOUBLE big, 1.5e-7::DOUBLE small", None),
    ("SELECT DATE '2024-02-29' d, DATE '1900-01-01' early, TIME '12:34:56.789' t, TIMESTAMP '2024-01-01 12:34:56.789' ts, TIMESTAMP_MS '2024-01-01 00:00:01.5' ms, TIMESTAMP_NS '2024-01-01 00:00:00.123456' ns, TIMESTAMPTZ '2024-06-01 12:00:00+02' tz", None),
    ("SELECT INTERVAL '2 months 3 days 04:05:06.789' i, INTERVAL '-90 minutes' neg, INTERVAL '0 seconds' z", None),
    ("SELECT 'héllo wörld ✓ 😀' u, '日本語' j, '' e, 'a''quote\"' q, NULL::VARCHAR n", None),
    ("SELECT '\\xAA\\x00\\xFF'::BLOB b, ''::BLOB e, NULL::BLOB n", None),
    ("SELECT [1, 2, NULL] l, [['a']] ll, {'a': 1, 'b': 'x'} st, MAP {'k': 'v'} m, [1.5, 2.0] f, [{'a': 1}] ls",
     "SELECT CAST([1, 2, NULL] AS VARCHAR), CAST([['a']] AS VARCHAR), CAST({'a': 1, 'b': 'x'} AS VARCHAR), CAST(MAP {'k': 'v'} AS VARCHAR), CAST([1.5, 2.0] AS VARCHAR), CAST([{'a': 1}] AS VARCHAR)"),
    ("SELECT ['a', 'b c', 'x,y', '', NULL, 'NULL', 'q\"u\\o{t}e', 'é'] s, []::VARCHAR[] e, NULL::VARCHAR[] n", None),
    ("SELECT '550e8400-e29b-41d4-a716-446655440000'::UUID u, NULL::UUID n, uuid_extract_version('550e8400-e29b-41d4-a716-446655440000'::UUID) v, u2 FROM (VALUES ('00000000-0000-0000-0000-000000000000'::UUID), ('ffffffff-ffff-ffff-ffff-ffffffffffff'::UUID)) t(u2) ORDER BY u2", None),
    ("SELECT id, tenant, amount, placed, note FROM orders ORDER BY id", None),
    ("SELECT i, i::VARCHAR s FROM range(20000) t(i) ORDER BY i", None),
    ("SELECT * FROM range(0) t(i)", None),
]
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg); scripts/test installs it"]
async fn psycopg_answers_match_duckdb_in_text_and_binary() {
    let d = door(&[]).await;
    let v = run(
        &d,
        &d.dsn("alice", ALICE_SECRET),
        &format!(
            "{TYPED}\n{}",
            r#"
import psycopg
out = []
with psycopg.connect(DSN, autocommit=True) as conn:
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        for q, r in QUERIES:
            cur.execute(q)
            got = rows(cur.fetchall())
            want = reference(r or q)
            if got != want:
                out.append({"binary": binary, "sql": q, "got": got[:3], "want": want[:3]})
    # Server-side parameters: text and binary, typed by the driver.
    cur = conn.cursor()
    params = [
        ("SELECT %s::INTEGER + 1 AS a, %s AS b, %s::DOUBLE AS c", (41, "hé", 2.5), "SELECT ?::INTEGER + 1, ?, ?::DOUBLE"),
        ("SELECT id, amount FROM orders WHERE id = %s AND tenant = %s", (4, "a"), "SELECT id, amount FROM orders WHERE id = ? AND tenant = ?"),
        ("SELECT %s::DATE AS d, %s::DECIMAL(10,2) AS n, %s::BLOB AS b", (datetime.date(2024, 2, 29), decimal.Decimal("12.34"), b"\x00\xff"), "SELECT ?::DATE, ?::DECIMAL(10,2), ?::BLOB"),
        ("SELECT %s::UUID AS u, %s::UUID = '550e8400-e29b-41d4-a716-446655440000'::UUID AS same", (uuid.UUID("550e8400-e29b-41d4-a716-446655440000"),) * 2, "SELECT ?::UUID, ?::UUID = '550e8400-e29b-41d4-a716-446655440000'::UUID"),
    ]
    for q, p, r in params:
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            cur.execute(q.replace("%s", "%b") if binary else q, p)
            got = rows(cur.fetchall())
            want = reference(r, p)
            if got != want:
                out.append({"params": True, "binary": binary, "sql": q, "got": got, "want": want})
    # The type OIDs the columns are described with.
    cur = conn.cursor()
    cur.execute("SELECT 1::INTEGER a, 2::BIGINT b, 'x' c, 1.5::DOUBLE d, 1.5::DECIMAL(4,2) e, DATE '2024-01-01' f, TIMESTAMPTZ '2024-01-01 00:00:00+00' g, INTERVAL 1 DAY h, true i, ''::BLOB j, uuid() k")
    oids = [c.type_code for c in cur.description]
done(mismatches=out, oids=oids)
"#
        ),
        &[],
    );
    assert_eq!(v["mismatches"], serde_json::json!([]), "{v}");
    // int4, int8, text, float8, numeric, date, timestamptz, interval, bool, bytea, uuid
    assert_eq!(
        v["oids"],
        serde_json::json!([23, 20, 25, 701, 1700, 1082, 1184, 1186, 16, 17, 2950])
    );
    // Every statement is audited as the door's.
    let log = d.app.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("query ended") && l.contains("api=\"pg\"")),
        "no audit line with api=pg:\n{log}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, asyncpg); scripts/test installs it"]
async fn asyncpg_prepared_statements_match_duckdb() {
    let d = door(&[]).await;
    let v = run(
        &d,
        "",
        &format!(
            "{TYPED}\nPORT = {}\nSECRET = {ALICE_SECRET:?}\n{}",
            d.port(),
            r#"
import asyncio, asyncpg
async def main():
    conn = await asyncpg.connect(host="127.0.0.1", port=PORT, user="alice", password=SECRET, database="ops", ssl=False)
    out = []
    for q, r in QUERIES:
        got = rows([tuple(rec.values()) for rec in await conn.fetch(q)])
        want = reference(r or q)
        if got != want:
            out.append({"sql": q, "got": got[:3], "want": want[:3]})
    st = await conn.prepare("SELECT id, amount, note FROM orders WHERE id > $1 AND tenant = $2 ORDER BY id")
    types = [a.name for a in st.get_parameters()]
    for args in [(3, "a"), (20, "b")]:
        got = rows([tuple(r.values()) for r in await st.fetch(*args)])
        want = reference("SELECT id, amount, note FROM orders WHERE id > ? AND tenant = ? ORDER BY id", args)
        if got != want:
            out.append({"prepared": args, "got": got, "want": want})
    # A UUID parameter, typed by DuckDB as the statement's describe says.
    u = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")
    st = await conn.prepare("SELECT $1::UUID AS u, $1::UUID = '550e8400-e29b-41d4-a716-446655440000'::UUID AS same")
    types.extend(a.name for a in st.get_parameters())
    got = rows([tuple(r.values()) for r in await st.fetch(u)])
    want = reference("SELECT ?::UUID, ?::UUID = '550e8400-e29b-41d4-a716-446655440000'::UUID", (u, u))
    if got != want:
        out.append({"prepared": str(u), "got": got, "want": want})
    await conn.close()
    return out, types
out, types = asyncio.run(main())
done(mismatches=out, types=types)
"#
        ),
        &[],
    );
    assert_eq!(v["mismatches"], serde_json::json!([]), "{v}");
    assert_eq!(
        v["types"],
        serde_json::json!(["int4", "text", "uuid"]),
        "{v}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, SQLAlchemy 2, pandas, psycopg); scripts/test installs it"]
async fn sqlalchemy_and_pandas_read_through_the_door() {
    let d = door(&[]).await;
    let url = format!(
        "postgresql+psycopg://alice:{ALICE_SECRET}@127.0.0.1:{}/ops?sslmode=disable",
        d.port()
    );
    let v = run(
        &d,
        &url,
        r#"
import pandas as pd
import sqlalchemy as sa
engine = sa.create_engine(DSN)
with engine.connect() as conn:
    frame = pd.read_sql(sa.text("SELECT id, tenant, amount, placed FROM orders WHERE id <= :n ORDER BY id"), conn, params={"n": 10})
    one = conn.execute(sa.text("SELECT count(*) FROM orders")).scalar()
want = ref.execute("SELECT id, tenant, amount, placed FROM orders WHERE id <= 10 ORDER BY id").df()
same = frame.astype(str).values.tolist() == want.astype(str).values.tolist() and list(frame.columns) == list(want.columns)
done(same=same, got=frame.astype(str).values.tolist()[:3], want=want.astype(str).values.tolist()[:3], count=one,
     ref_count=ref.execute("SELECT count(*) FROM orders").fetchone()[0])
"#,
        &[],
    );
    assert_eq!(v["same"], true, "{v}");
    assert_eq!(v["count"], v["ref_count"], "{v}");
}

/// Runs psql with `args` against the door; its stdout and stderr.
fn psql(d: &Door, user: &str, password: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("psql")
        .arg(
            d.dsn(user, password)
                .replace(&format!(" password={password}"), ""),
        )
        .args(["-X", "-v", "ON_ERROR_STOP=0"])
        .args(args)
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .current_dir(d.dir.path())
        .output()
        .expect("psql (Debian's postgresql-client; scripts/test-env installs it)");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
#[ignore = "tier venv: needs psql and the test venv; scripts/test installs them"]
async fn psql_queries_lists_copies_and_draws_its_caret() {
    let d = door(&[]).await;
    // A query, unaligned: rows equal DuckDB's.
    let (out, err) = psql(
        &d,
        "alice",
        ALICE_SECRET,
        &[
            "-A",
            "-t",
            "-F",
            "|",
            "-c",
            "SELECT id, tenant, amount FROM orders WHERE id < 5 ORDER BY id",
        ],
    );
    let want = python(
        "import duckdb,sys\nfor r in duckdb.connect(sys.argv[1], read_only=True).execute('SELECT id, tenant, amount FROM orders WHERE id < 5 ORDER BY id').fetchall(): print('|'.join(str(v) for v in r))",
        &[d.reference.to_str().unwrap()],
    );
    assert_eq!(out, want, "{err}");
    // \dt lists the tables.
    let (out, err) = psql(&d, "alice", ALICE_SECRET, &["-c", "\\dt"]);
    assert!(
        out.contains("orders") && out.contains("secret_stuff"),
        "{out}{err}"
    );
    // \copy writes a CSV file equal to DuckDB's rows, and says how many.
    let (out, err) = psql(
        &d,
        "alice",
        ALICE_SECRET,
        &["-c", "\\copy (SELECT id, note, amount FROM orders ORDER BY id) to 'orders.csv' with csv header"],
    );
    assert_eq!(out.trim(), "COPY 30", "{err}");
    let csv = std::fs::read_to_string(d.dir.path().join("orders.csv")).unwrap();
    let want = python(
        "import duckdb,sys\nc=duckdb.connect(sys.argv[1], read_only=True)\nprint('id,note,amount')\nfor r in c.execute('SELECT id, note, amount FROM orders ORDER BY id').fetchall(): print(','.join(str(v) for v in r))",
        &[d.reference.to_str().unwrap()],
    );
    assert_eq!(csv, want);
    // A syntax error: 42601 with DuckDB's place, psql's caret under it.
    let (_, err) = psql(
        &d,
        "alice",
        ALICE_SECRET,
        &[
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SELECT 1 FROM orders WHER id = 1",
        ],
    );
    assert!(err.contains("42601"), "{err}");
    let caret_line = err
        .lines()
        .skip_while(|l| !l.starts_with("LINE 1:"))
        .nth(1)
        .unwrap_or_default();
    let line = err
        .lines()
        .find(|l| l.starts_with("LINE 1:"))
        .unwrap_or_default();
    let at = caret_line.find('^').expect("a caret");
    assert_eq!(&line[at..at + 2], "id", "{err}");
}

/// COPY written a batch at a time: a copy over several of DuckDB's batches,
/// with NULLs and every byte the formats escape or quote (tab, newline,
/// carriage return, backslash, quotes, delimiters), reads back through
/// psycopg's own COPY parser (one row per `CopyData`, as PostgreSQL sends
/// them) and Python's csv module as DuckDB's rows; psql's `COPY n` counts
/// rows. A cap that ends the answer after its first batches reaches psycopg
/// as an error, in a COPY and in a binary fetch, never as a short answer
/// that looks whole.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg); scripts/test installs it"]
async fn copy_spans_messages_matches_duckdb_and_fails_loudly() {
    let d = door(&[("DUCKGATE_MAX_ROWS", "50000")]).await;
    let v = run(
        &d,
        &d.dsn("alice", ALICE_SECRET),
        r#"
import csv, io
import psycopg
Q = r"""SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE 'v' || i || chr(9) || 't' || chr(10) || 'n' || chr(13) || 'r\b\\' || '"q",;|' END AS s, CASE WHEN i % 5 = 0 THEN NULL ELSE i * 0.5 END AS d FROM range(30000) t(i) ORDER BY i"""
want = reference(Q)
out = {}
with psycopg.connect(DSN, autocommit=True) as conn:
    cur = conn.cursor()
    with cur.copy(f"COPY ({Q}) TO STDOUT") as cp:
        cp.set_types(["int8", "text", "numeric"])
        got = rows(list(cp.rows()))
    out["text_mismatch"] = [[g, w] for g, w in zip(got, want) if g != w][:3]
    out["text_rows"] = len(got)
    chunks, data = 0, b""
    with cur.copy(f"COPY ({Q}) TO STDOUT WITH (FORMAT csv, HEADER)") as cp:
        for chunk in cp:
            chunks += 1
            data += bytes(chunk)
    out["csv_chunks"] = chunks
    table = list(csv.reader(io.StringIO(data.decode(), newline="")))
    out["csv_header"] = table[0]
    plain = [["" if v is None else str(v) for v in r] for r in ref.execute(Q).fetchall()]
    out["csv_mismatch"] = [[g, w] for g, w in zip(table[1:], plain) if g != w][:3]
    out["csv_rows"] = len(table) - 1
    # Past DUCKGATE_MAX_ROWS: the error comes after rows were sent.
    big = "SELECT i, 'x' || i AS s FROM range(200000) t(i)"
    received = 0
    try:
        with cur.copy(f"COPY ({big}) TO STDOUT") as cp:
            for chunk in cp:
                received += len(chunk)
        out["copy_error"] = None
    except psycopg.Error as e:
        out["copy_error"] = e.sqlstate or str(e)
    out["copy_received"] = received
    fetched = 0
    try:
        for _ in conn.cursor(binary=True).stream(big, size=1000):
            fetched += 1
        out["fetch_error"] = None
    except psycopg.Error as e:
        out["fetch_error"] = e.sqlstate or str(e)
    out["fetched"] = fetched
    out["after"] = conn.execute("SELECT 42").fetchone()[0]
done(**out)
"#,
        &[],
    );
    assert_eq!(v["text_rows"], 30000, "{v}");
    assert_eq!(v["text_mismatch"], serde_json::json!([]), "{v}");
    assert_eq!(v["csv_header"], serde_json::json!(["i", "s", "d"]), "{v}");
    assert_eq!(v["csv_rows"], 30000, "{v}");
    assert_eq!(v["csv_mismatch"], serde_json::json!([]), "{v}");
    // The header and each row a message of its own.
    assert_eq!(v["csv_chunks"], 30001, "{v}");
    assert!(
        v["copy_error"].is_string(),
        "a capped COPY ended cleanly: {v}"
    );
    assert!(v["copy_received"].as_u64().unwrap_or_default() > 0, "{v}");
    assert!(
        v["fetch_error"].is_string(),
        "a capped fetch ended cleanly: {v}"
    );
    assert_eq!(v["after"], 42, "{v}");
    let (out, err) = psql(
        &d,
        "alice",
        ALICE_SECRET,
        &[
            "-c",
            "\\copy (SELECT i, 'x' || i FROM range(30000) t(i)) to 'n.txt'",
        ],
    );
    assert_eq!(out.trim(), "COPY 30000", "{err}");
    let copied = std::fs::read_to_string(d.dir.path().join("n.txt")).unwrap();
    assert_eq!(copied.lines().count(), 30000);
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg); scripts/test installs it"]
async fn a_confined_identity_reads_its_rows_and_hidden_tables_are_missing() {
    let d = door(&[]).await;
    let v = run(
        &d,
        &d.dsn("carol", CAROL_SECRET),
        r#"
import psycopg
with psycopg.connect(DSN, autocommit=True) as conn:
    got = rows(conn.execute("SELECT id, tenant, amount FROM orders ORDER BY id").fetchall())
    errors = {}
    for name in ("secret_stuff", "no_such_table"):
        try:
            conn.execute(f"SELECT * FROM {name}")
            errors[name] = None
        except psycopg.Error as e:
            errors[name] = [e.sqlstate, str(e).split("\n")[0].replace(name, "<t>")]
want = reference("SELECT id, tenant, amount FROM orders WHERE tenant = 'a' ORDER BY id")
done(same=got == want, n=len(got), errors=errors)
"#,
        &[],
    );
    assert_eq!(v["same"], true, "{v}");
    assert_eq!(v["n"], 20);
    assert_eq!(v["errors"]["secret_stuff"][0], "42P01", "{v}");
    assert_eq!(
        v["errors"]["secret_stuff"], v["errors"]["no_such_table"],
        "a hidden table answers exactly as a missing one: {v}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (psycopg); scripts/test installs it"]
async fn wrong_credentials_are_refused_with_28p01() {
    let d = door(&[]).await;
    let v = run(
        &d,
        &d.dsn("alice", "not-the-token-at-all"),
        &format!(
            "OTHER = {:?}\nUNKNOWN = {:?}\n{}",
            d.dsn("carol", ALICE_SECRET),
            d.dsn("nobody", ALICE_SECRET),
            r#"
import psycopg
def code(dsn):
    try:
        psycopg.connect(dsn).close()
        return None
    except psycopg.OperationalError as e:
        return [getattr(e, "sqlstate", None), str(e)]
port = int(DSN.split("port=")[1].split()[0])
done(wrong=code(DSN), other=code(OTHER), unknown=code(UNKNOWN),
     state=connect_error(port, "alice", "not-the-token-at-all"))
"#
        ),
        &[],
    );
    assert_eq!(v["state"], "28P01", "{v}");
    for case in ["wrong", "other", "unknown"] {
        let msg = v[case][1].as_str().unwrap_or_default();
        assert!(
            msg.contains("password authentication failed"),
            "{case}: {v}"
        );
        assert!(!msg.contains(ALICE_SECRET), "a token reached an error: {v}");
    }
    assert!(
        !d.app.log_text().contains(ALICE_SECRET),
        "a token reached the log"
    );
    let scrape = d.app.get_text("/metrics").await;
    assert!(
        metric(
            &scrape,
            "duckgate_auth_failures_total{route=\"pg\",reason=\"wrong\"}"
        ) >= 3.0,
        "{scrape}"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (psycopg); scripts/test installs it"]
async fn cancel_requests_and_statement_timeouts_stop_the_query() {
    let d = door(&[("DUCKGATE_POOL_SIZE", "2")]).await;
    let v = run(
        &d,
        &d.dsn("alice", ALICE_SECRET),
        &format!(
            "HTTP = {:?}\nTOKEN = {ALICE_SECRET:?}\n{}",
            d.app.url("/queries"),
            r#"
import threading, time, urllib.request
import psycopg
SLOW = "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3"
listed = []
with psycopg.connect(DSN, autocommit=True) as conn:
    def cancel_soon():
        # Wait until the query is listed in GET /queries, then cancel.
        for _ in range(200):
            req = urllib.request.Request(HTTP, headers={"authorization": "Bearer " + TOKEN})
            qs = __import__("json").loads(urllib.request.urlopen(req).read())
            qs = qs.get("queries", qs) if isinstance(qs, dict) else qs
            if qs:
                listed.append(qs[0].get("api"))
                conn.cancel_safe()
                return
            time.sleep(0.05)
    t = threading.Thread(target=cancel_soon)
    t.start()
    try:
        conn.execute(SLOW)
        cancelled = None
    except psycopg.Error as e:
        cancelled = e.sqlstate
    t.join()
    conn.execute("SET statement_timeout = 300")
    started = time.monotonic()
    try:
        conn.execute(SLOW)
        timed_out = None
    except psycopg.Error as e:
        timed_out = e.sqlstate
    took = time.monotonic() - started
    # The connection serves the next statement at once.
    after = conn.execute("SELECT 42").fetchone()[0]
# Idle connections hold no pooled DuckDB connection: more sessions than
# the pool has connections (DUCKGATE_POOL_SIZE=2) take turns.
sessions = [psycopg.connect(DSN, autocommit=True) for _ in range(5)]
turns = [int(c.execute("SELECT sum(i) FROM range(1000) t(i)").fetchone()[0]) for c in sessions + sessions]
for c in sessions:
    c.close()
done(cancelled=cancelled, timed_out=timed_out, took=took, after=after, listed=listed, turns=turns)
"#
        ),
        &[],
    );
    assert_eq!(v["cancelled"], "57014", "{v}");
    assert_eq!(v["timed_out"], "57014", "{v}");
    assert_eq!(v["after"], 42);
    assert_eq!(v["listed"], serde_json::json!(["pg"]), "{v}");
    assert_eq!(v["turns"], serde_json::json!(vec![499500; 10]), "{v}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (psycopg); scripts/test installs it"]
async fn the_doors_limits_hold() {
    let d = door(&[
        ("DUCKGATE_PG_MAX_CONNECTIONS", "3"),
        ("DUCKGATE_PG_MAX_CONNECTIONS_PER_IDENTITY", "2"),
        ("DUCKGATE_PG_IDLE_TIMEOUT_MS", "1500"),
        ("DUCKGATE_PG_STARTUP_TIMEOUT_MS", "1000"),
        ("DUCKGATE_PG_MAX_MESSAGE_BYTES", "64KiB"),
    ])
    .await;
    let v = run(
        &d,
        &d.dsn("alice", ALICE_SECRET),
        &format!(
            "CAROL = {:?}\nPORT = {}\n{}",
            d.dsn("carol", CAROL_SECRET),
            d.port(),
            r#"
import socket, time
import psycopg
def state(f):
    try:
        f()
        return None
    except psycopg.Error as e:
        return e.sqlstate or str(e)
a1 = psycopg.connect(DSN, autocommit=True)
a2 = psycopg.connect(DSN, autocommit=True)
third_alice = connect_error(PORT, "alice", ARGS[0])
c1 = psycopg.connect(CAROL, autocommit=True)
fourth = connect_error(PORT, "carol", ARGS[1])
c1.close()
# A message past the cap ends the connection.
too_big = state(lambda: a2.execute("SELECT '" + "x" * 100000 + "'"))
a2.close()
# Idle past the timeout: the server closes the session.
time.sleep(2.5)
idle = state(lambda: a1.execute("SELECT 1"))
a1.close()
# A socket that never starts up is closed after the startup timeout.
s = socket.create_connection(("127.0.0.1", PORT))
s.settimeout(10)
t0 = time.monotonic()
closed = s.recv(1) == b""
startup_closed_after = time.monotonic() - t0
done(third_alice=third_alice, fourth=fourth, too_big=too_big, idle=idle, closed=closed, startup_closed_after=startup_closed_after)
"#
        ),
        &[ALICE_SECRET, CAROL_SECRET],
    );
    assert_eq!(v["third_alice"], "53300", "{v}");
    assert_eq!(v["fourth"], "53300", "{v}");
    assert!(v["too_big"].is_string(), "{v}");
    assert!(v["idle"].is_string(), "{v}");
    assert_eq!(v["closed"], true, "{v}");
    let scrape = d.app.get_text("/metrics").await;
    for reason in [
        "connection_limit",
        "identity_limit",
        "idle_timeout",
        "message_too_large",
        "startup_timeout",
    ] {
        assert!(
            metric(
                &scrape,
                &format!("duckgate_pg_connections_refused_total{{reason=\"{reason}\"}}")
            ) >= 1.0,
            "{reason}: {scrape}"
        );
    }
}

/// A CA and a server certificate for `localhost` and 127.0.0.1, by the
/// venv's `cryptography`; their paths.
pub(super) fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    python(
        r#"
import datetime, ipaddress, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
d = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc)
ca_key = ec.generate_private_key(ec.SECP256R1())
ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "duckgate test CA")])
ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
      .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
      .not_valid_after(now + datetime.timedelta(days=2)).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
      .sign(ca_key, hashes.SHA256()))
key = ec.generate_private_key(ec.SECP256R1())
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256()))
open(f"{d}/ca.pem", "wb").write(ca.public_bytes(serialization.Encoding.PEM))
open(f"{d}/server.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(f"{d}/server.key", "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"#,
        &[dir.to_str().unwrap()],
    );
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[tokio::test]
#[ignore = "tier venv: needs psql, the test venv (psycopg, cryptography); scripts/test installs them"]
async fn tls_with_verify_full_and_tokens_as_cleartext_passwords_inside_it() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(certs.path());
    let d = door(&[
        ("DUCKGATE_PG_TLS_CERT", cert.to_str().unwrap()),
        ("DUCKGATE_PG_TLS_KEY", key.to_str().unwrap()),
    ])
    .await;
    let base = format!(
        "host=localhost port={} dbname=ops sslmode=verify-full sslrootcert={}",
        d.port(),
        ca.display()
    );
    let v = run(
        &d,
        &base,
        r#"
import psycopg
def attempt(extra):
    try:
        with psycopg.connect(DSN + " " + extra) as c:
            return [c.execute("SELECT 42").fetchone()[0], c.pgconn.ssl_in_use]
    except psycopg.Error as e:
        return [e.sqlstate, str(e)]
done(
    wrong_state=connect_error(int(ARGS[1]), "alice", "wrong-token", ssl="require"),
    token=attempt("user=alice password=" + ARGS[0]),
    any_user=attempt("user=whoever password=" + ARGS[0]),
    wrong=attempt("user=alice password=wrong-token"),
    plain=attempt("user=alice password=" + ARGS[0] + " sslmode=disable"),
)
"#,
        &[ALICE_SECRET, d.port()],
    );
    assert_eq!(v["token"], serde_json::json!([42, true]), "{v}");
    // Inside TLS the credential says who; the user name is ignored.
    assert_eq!(v["any_user"], serde_json::json!([42, true]), "{v}");
    assert!(
        v["wrong"][1]
            .as_str()
            .unwrap_or_default()
            .contains("password authentication failed"),
        "{v}"
    );
    assert_eq!(v["wrong_state"], "28P01", "{v}");
    // Without TLS the same gateway still takes the token over SCRAM.
    assert_eq!(v["plain"], serde_json::json!([42, false]), "{v}");
}

#[tokio::test]
#[ignore = "tier venv: needs node and node-postgres (scripts/test-env installs it)"]
async fn node_postgres_matches_duckdb() {
    let d = door(&[]).await;
    let node_path = std::env::var("DUCKGATE_TEST_NODE_PATH")
        .expect("DUCKGATE_TEST_NODE_PATH: eval \"$(scripts/test-env venv)\"");
    let script = r#"
const { Client } = require('pg');
(async () => {
  const c = new Client({ host: '127.0.0.1', port: +process.argv[1], user: 'alice', password: process.argv[2], database: 'ops', ssl: false });
  await c.connect();
  const plain = await c.query('SELECT id, tenant, amount::VARCHAR AS amount FROM orders WHERE id < 6 ORDER BY id');
  const params = await c.query('SELECT id, note FROM orders WHERE id = $1 AND tenant = $2', [4, 'a']);
  let err = null;
  try { await c.query('SELECT * FROM no_such_table'); } catch (e) { err = e.code; }
  await c.end();
  console.log(JSON.stringify({ plain: plain.rows, params: params.rows, err }));
})().catch(e => { console.error(e); process.exit(1); });
"#;
    let out = Command::new("node")
        .args(["-e", script, d.port(), ALICE_SECRET])
        .env("NODE_PATH", node_path)
        .output()
        .expect("node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Value = serde_json::from_str(
        python(
            r#"
import duckdb, json, sys
c = duckdb.connect(sys.argv[1], read_only=True)
plain = [{"id": i, "tenant": t, "amount": a} for i, t, a in c.execute("SELECT id, tenant, amount::VARCHAR FROM orders WHERE id < 6 ORDER BY id").fetchall()]
params = [{"id": i, "note": n} for i, n in c.execute("SELECT id, note FROM orders WHERE id = 4 AND tenant = 'a'").fetchall()]
print(json.dumps({"plain": plain, "params": params, "err": "42P01"}))
"#,
            &[d.reference.to_str().unwrap()],
        )
        .trim(),
    )
    .unwrap();
    assert_eq!(got, want);
}

/// The output of the pgjdbc program `source` (its class `class`), run by
/// the JDK's source launcher in `dir` with the door's `port`, `user` and
/// `secret` as its arguments; the run must succeed.
pub(super) fn pgjdbc(
    dir: &Path,
    class: &str,
    source: &str,
    port: &str,
    user: &str,
    secret: &str,
) -> String {
    let jar = std::env::var("DUCKGATE_TEST_PGJDBC")
        .expect("DUCKGATE_TEST_PGJDBC: eval \"$(scripts/test-env venv)\"");
    let main = dir.join(format!("{class}.java"));
    std::fs::write(&main, source).unwrap();
    let out = Command::new("java")
        .args(["-cp", &jar])
        .arg(&main)
        .args([port, user, secret])
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "{class} as {user}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
#[ignore = "tier venv: needs a JDK and pgjdbc (scripts/test-env installs them)"]
async fn pgjdbc_matches_duckdb() {
    let d = door(&[]).await;
    let got = pgjdbc(
        d.dir.path(),
        "Main",
        r#"
import java.sql.*;
public class Main {
  public static void main(String[] a) throws Exception {
    String url = "jdbc:postgresql://127.0.0.1:" + a[0] + "/ops?sslmode=disable";
    try (Connection c = DriverManager.getConnection(url, a[1], a[2])) {
      StringBuilder out = new StringBuilder();
      try (PreparedStatement p = c.prepareStatement("SELECT id, tenant, amount, placed FROM orders WHERE id > ? AND tenant = ? ORDER BY id")) {
        p.setInt(1, 25);
        p.setString(2, "a");
        try (ResultSet r = p.executeQuery()) {
          while (r.next()) {
            out.append(r.getInt(1)).append('|').append(r.getString(2)).append('|')
               .append(r.getBigDecimal(3)).append('|').append(r.getDate(4)).append('\n');
          }
        }
      }
      DatabaseMetaData md = c.getMetaData();
      out.append("product|").append(md.getDatabaseProductName()).append('\n');
      System.out.print(out);
    }
  }
}
"#,
        d.port(),
        "alice",
        ALICE_SECRET,
    );
    let want = python(
        r#"
import duckdb, sys
c = duckdb.connect(sys.argv[1], read_only=True)
for r in c.execute("SELECT id, tenant, amount, placed FROM orders WHERE id > 25 AND tenant = 'a' ORDER BY id").fetchall():
    print("|".join(str(v) for v in r))
print("product|PostgreSQL")
"#,
        &[d.reference.to_str().unwrap()],
    );
    assert_eq!(got, want);
}

/// DatabaseMetaData as DBeaver's navigator reads it through pgjdbc
/// (`getSchemas`, `getTables`, `getColumns`, `getPrimaryKeys`), one line
/// per row.
const JDBC_METADATA: &str = r#"
import java.sql.*;
public class Meta {
  static void dump(String what, ResultSet r, String... cols) throws SQLException {
    while (r.next()) {
      StringBuilder b = new StringBuilder(what);
      for (String c : cols) b.append('|').append(r.getString(c));
      System.out.println(b);
    }
  }
  public static void main(String[] a) throws Exception {
    String url = "jdbc:postgresql://127.0.0.1:" + a[0] + "/ops?sslmode=disable";
    try (Connection c = DriverManager.getConnection(url, a[1], a[2])) {
      DatabaseMetaData md = c.getMetaData();
      dump("schema", md.getSchemas(), "TABLE_SCHEM");
      dump("table", md.getTables(null, "main", "%", new String[]{"TABLE", "VIEW"}), "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE");
      dump("column", md.getColumns(null, "main", "%", "%"), "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "TYPE_NAME", "ORDINAL_POSITION", "IS_NULLABLE");
      for (String t : new String[]{"orders", "events", "secret_stuff"}) {
        dump("pk", md.getPrimaryKeys(null, "main", t), "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "KEY_SEQ", "PK_NAME");
      }
    }
  }
}
"#;

/// The same lines from DuckDB's own catalog (`duckdb_schemas()`,
/// `duckdb_tables()`, `duckdb_columns()` with the PostgreSQL type names of
/// DuckDB's `pg_type`, `duckdb_constraints()`), of the tables in `ARGS[0]`.
const JDBC_METADATA_REFERENCE: &str = r#"
import duckdb, json, sys
c = duckdb.connect(sys.argv[1], read_only=True)
tables = json.loads(sys.argv[2])
for (s,) in c.execute("SELECT DISTINCT schema_name FROM duckdb_tables() ORDER BY 1").fetchall():
    print(f"schema|{s}")
for s, t in c.execute("SELECT schema_name, table_name FROM duckdb_tables() ORDER BY 1, 2").fetchall():
    if t in tables:
        print(f"table|{s}|{t}|TABLE")
for s, t, col, typ, pos, nullable in c.execute("""
    SELECT col.schema_name, col.table_name, col.column_name, t.typname, col.column_index,
           CASE WHEN col.is_nullable THEN 'YES' ELSE 'NO' END
    FROM duckdb_columns() col
    JOIN (SELECT DISTINCT type_oid, type_name FROM duckdb_types() WHERE internal) dt ON dt.type_oid = col.data_type_id
    JOIN (SELECT DISTINCT oid, typname FROM pg_catalog.pg_type) t ON t.oid = pg_catalog.map_to_pg_oid(dt.type_name)
    ORDER BY 1, 2, 5""").fetchall():
    if t in tables:
        print(f"column|{s}|{t}|{col}|{typ}|{pos}|{nullable}")
for t in ("orders", "events", "secret_stuff"):
    for s, tn, col, seq, name in c.execute("""
        SELECT schema_name, table_name, unnest(constraint_column_names), generate_subscripts(constraint_column_names, 1), constraint_name
        FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' AND table_name = ? ORDER BY 4""", [t]).fetchall():
        if tn in tables:
            print(f"pk|{s}|{tn}|{col}|{seq}|{name}")
"#;

#[tokio::test]
#[ignore = "tier venv: needs a JDK and pgjdbc (scripts/test-env installs them)"]
async fn pgjdbc_metadata_as_dbeaver_reads_it_matches_duckdb() {
    let d = door(&[]).await;
    for (user, secret, tables) in [
        (
            "alice",
            ALICE_SECRET,
            &["events", "orders", "secret_stuff"][..],
        ),
        ("carol", CAROL_SECRET, &["orders"][..]),
    ] {
        let got = pgjdbc(d.dir.path(), "Meta", JDBC_METADATA, d.port(), user, secret);
        let want = python(
            JDBC_METADATA_REFERENCE,
            &[
                d.reference.to_str().unwrap(),
                &serde_json::to_string(tables).unwrap(),
            ],
        );
        assert_eq!(got, want, "{user}");
        // The hidden table, and its key, are not there for carol (alice,
        // the control, lists them).
        assert_eq!(
            got.contains("secret_stuff"),
            user == "alice",
            "{user}: {got}"
        );
    }
}

/// PostgreSQL's names of the DuckDB types of `orders` and `events`
/// (docs/postgres.md "Catalogs"), and SQLAlchemy's types for them.
const PG_NAMES: &[(&str, &str, &str)] = &[
    ("INTEGER", "integer", "INTEGER"),
    ("VARCHAR", "character varying", "VARCHAR"),
    ("DECIMAL(10,2)", "numeric(10,2)", "NUMERIC"),
    ("DATE", "date", "DATE"),
];

#[tokio::test]
#[ignore = "tier venv: needs psql and the test venv (SQLAlchemy 2, psycopg); scripts/test installs them"]
async fn psql_describes_tables_and_sqlalchemy_reflects_their_columns() {
    let d = door(&[]).await;
    // DuckDB's own columns of each table, in order.
    let columns: Value = serde_json::from_str(
        python(
            r#"
import duckdb, json, sys
c = duckdb.connect(sys.argv[1], read_only=True)
print(json.dumps({t: c.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position", [t]).fetchall() for t in ("orders", "events")}))
"#,
            &[d.reference.to_str().unwrap()],
        )
        .trim(),
    )
    .unwrap();
    let pg_name = |duck: &str| {
        PG_NAMES
            .iter()
            .find(|(d, _, _)| *d == duck)
            .unwrap_or_else(|| panic!("no PostgreSQL name for {duck}"))
    };
    // psql's \d: every column with PostgreSQL's name of its type, and the
    // index as PostgreSQL writes one.
    for (user, secret) in [("alice", ALICE_SECRET), ("carol", CAROL_SECRET)] {
        let (out, err) = psql(&d, user, secret, &["-c", "\\d orders"]);
        assert!(out.contains("Table \"main.orders\""), "{user}: {out}{err}");
        let rows: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells.len() >= 2 && cells[0] != "Column")
                    .then(|| (cells[0].into(), cells[1].into()))
            })
            .collect();
        let want: Vec<(String, String)> = columns["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c[0].as_str().unwrap().to_string(),
                    pg_name(c[1].as_str().unwrap()).1.to_string(),
                )
            })
            .collect();
        assert_eq!(rows, want, "{user}: {out}{err}");
        assert!(err.is_empty(), "{user}: {err}");
    }
    let (out, err) = psql(&d, "alice", ALICE_SECRET, &["-c", "\\d events"]);
    assert!(out.contains("Indexes:"), "{out}{err}");
    assert!(out.contains("\"events_by_kind\" art (kind)"), "{out}{err}");
    // A table carol may not read is described as one that does not exist.
    let (_, hidden) = psql(&d, "carol", CAROL_SECRET, &["-c", "\\d secret_stuff"]);
    let (_, missing) = psql(&d, "carol", CAROL_SECRET, &["-c", "\\d secret_stuffy"]);
    assert!(hidden.contains("Did not find any relation"), "{hidden}");
    assert_eq!(
        hidden.replace("secret_stuff", "<t>"),
        missing.replace("secret_stuffy", "<t>")
    );
    // SQLAlchemy 2's reflection: the tables each identity may read, their
    // columns with DuckDB's names and types in SQLAlchemy's terms.
    let v = run(
        &d,
        "",
        &format!(
            "PORT = {}\nUSERS = {:?}\n{}",
            d.port(),
            [("alice", ALICE_SECRET), ("carol", CAROL_SECRET)],
            r#"
import sqlalchemy as sa, warnings
out = {}
for user, secret in USERS:
    engine = sa.create_engine(f"postgresql+psycopg://{user}:{secret}@127.0.0.1:{PORT}/ops?sslmode=disable")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        i = sa.inspect(engine)
        tables = sorted(i.get_table_names())
        cols = {t: [[c["name"], type(c["type"]).__name__, c["nullable"]] for c in i.get_columns(t)] for t in tables if t in ("orders", "events")}
    out[user] = {"tables": tables, "columns": cols}
    engine.dispose()
done(**out)
"#
        ),
        &[],
    );
    assert_eq!(
        v["alice"]["tables"],
        serde_json::json!(["events", "orders", "secret_stuff"]),
        "{v}"
    );
    assert_eq!(v["carol"]["tables"], serde_json::json!(["orders"]), "{v}");
    for (user, tables) in [
        ("alice", vec!["orders", "events"]),
        ("carol", vec!["orders"]),
    ] {
        for t in tables {
            let want: Vec<Value> = columns[t]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| serde_json::json!([c[0], pg_name(c[1].as_str().unwrap()).2, true]))
                .collect();
            assert_eq!(v[user]["columns"][t], Value::Array(want), "{user} {t}: {v}");
        }
    }
}
