//! A client generated from `openapi/openapi.json` by a generator from PyPI
//! (`openapi-python-client`, pinned in scripts/requirements-test.txt), used
//! as a developer would: proof that the committed document is usable as it
//! is, not only valid. The client is strict (`raise_on_unexpected_status`),
//! so every status the gateway answers here must be one the document lists
//! for the route, with the body it documents. Values are compared with
//! Python DuckDB's own for the same SQL.

use serde_json::Value;

use crate::common::{python, Gateway};

const TOKEN: &str = "analyst:openapi-client-5b1e";
const SECRET: &str = "openapi-client-5b1e";

const SCRIPT: &str = r#"
import json, os, subprocess, sys, tempfile, urllib.parse
import duckdb

BASE, TOKEN, DOC, CONFIG = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
bin_dir = os.path.dirname(sys.executable)
out_dir = tempfile.mkdtemp()
# ruff (a dependency of the generator) formats the generated code.
env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
gen = subprocess.run(
    [os.path.join(bin_dir, "openapi-python-client"), "generate", "--path", DOC,
     "--config", CONFIG, "--meta", "none",
     "--output-path", os.path.join(out_dir, "duckgate_client")],
    capture_output=True, text=True, env=env)
said = (gen.stdout + gen.stderr).splitlines()
warnings = [l for l in said if l.startswith("WARNING") or l.startswith("Unsupported") or "ruff" in l]
sys.path.insert(0, out_dir)

from duckgate_client import AuthenticatedClient, Client
from duckgate_client.api.query import query, query_csv, query_parquet, query_arrow, query_ndjson
from duckgate_client.api.statements import (
    submit_statement, show_statement, statement_result, statement_result_parquet, mint_link)
from duckgate_client.models import Format, Problem, QueryRequest, QueryResult, StatementRequest
from duckgate_client.types import File

client = AuthenticatedClient(base_url=BASE, token=TOKEN, raise_on_unexpected_status=True)
ref = duckdb.connect()
out = {"generator": gen.returncode, "warnings": warnings}

def rows_of(data, reader):
    # A file answer read back by DuckDB's own reader.
    path = os.path.join(out_dir, "answer")
    with open(path, "wb") as f:
        f.write(data)
    return ref.sql(f"SELECT * FROM {reader}('{path}')").fetchall()

# A query, read into the generated model, against DuckDB's own answer.
SQL = "SELECT i, i * 1.5::DOUBLE AS f, 'row ' || i AS s, i % 2 = 0 AS even, NULLIF(i, 3) AS n FROM range(5) t(i) ORDER BY i"
r = query.sync_detailed(client=client, body=QueryRequest(sql=SQL), format_=Format.JSON)
want = ref.sql(SQL)
want_rows = want.fetchall()
out["query"] = {
    "status": r.status_code,
    "model": type(r.parsed).__name__,
    "rows_equal": isinstance(r.parsed, QueryResult) and r.parsed.rows == [list(row) for row in want_rows],
    "names_equal": [c.name for c in r.parsed.columns] == want.columns,
    "types_equal": [c.type_ for c in r.parsed.columns] == [str(t) for t in want.types],
    "row_count": r.parsed.row_count,
    "truncated": r.parsed.truncated,
}

# The same query in each file format, by its own operation: bytes.
files = {}
for name, op in [("csv", query_csv), ("parquet", query_parquet), ("arrow", query_arrow), ("ndjson", query_ndjson)]:
    r = op.sync_detailed(client=client, sql=SQL)
    files[name] = {"status": r.status_code, "model": type(r.parsed).__name__,
                   "content_type": r.headers.get("content-type")}
    if isinstance(r.parsed, File):
        data = r.parsed.payload.read()
        if name == "csv":
            files[name]["rows_equal"] = rows_of(data, "read_csv") == want_rows
        elif name == "parquet":
            files[name]["rows_equal"] = rows_of(data, "read_parquet") == want_rows
        elif name == "arrow":
            import pyarrow as pa
            files[name]["rows_equal"] = pa.ipc.open_stream(data).read_all().to_pylist() == ref.sql(SQL).fetch_arrow_table().to_pylist()
        else:
            files[name]["rows_equal"] = [list(json.loads(l).values()) for l in data.splitlines()] == [list(r) for r in want_rows]
out["files"] = files

# A problem, read into the generated Problem model, against DuckDB's error.
BAD = "SELECT channel, count(*)\nFROM range(3) t(channel)\nGROUPBY channel"
r = query.sync_detailed(client=client, body=QueryRequest(sql=BAD))
try:
    ref.sql(BAD)
    duck = None
except duckdb.Error as e:
    duck = str(e)
p = r.parsed
out["problem"] = {
    "status": r.status_code,
    "model": type(p).__name__,
    "type": p.type_, "title": p.title, "line": p.line, "column": p.column,
    "detail_in_duckdb": p.detail in duck,
    "excerpt_in_duckdb": p.excerpt in duck,
    "duckdb": duck,
}

# A wrong token: 401, a Problem too.
stranger = AuthenticatedClient(base_url=BASE, token="not-a-token", raise_on_unexpected_status=True)
r = query.sync_detailed(client=stranger, body=QueryRequest(sql="SELECT 1"))
out["unauthorized"] = {"status": r.status_code, "model": type(r.parsed).__name__}

# A statement, then its pages (JSON into the model, Parquet as bytes) and a
# signed link to its Parquet pages, read without the token.
PAGE = "SELECT i, 'x' || i AS s FROM range(100) t(i) ORDER BY i"
r = submit_statement.sync_detailed(client=client, body=StatementRequest(sql=PAGE, wait_ms=10000), duckgate_query_id="gen-1")
out["statement"] = {"status": r.status_code, "model": type(r.parsed).__name__}
s = show_statement.sync_detailed("gen-1", client=client)
out["statement"]["state"] = s.parsed.state if hasattr(s.parsed, "state") else repr(s.parsed)
page = statement_result.sync_detailed("gen-1", client=client, format_=Format.JSON, offset=10, limit=5)
want_page = ref.sql(PAGE + " LIMIT 5 OFFSET 10").fetchall()
out["page"] = {
    "status": page.status_code,
    "model": type(page.parsed).__name__,
    "rows_equal": page.parsed.rows == [list(row) for row in want_page],
}
page = statement_result_parquet.sync_detailed("gen-1", client=client, offset=10, limit=5)
out["parquet_page"] = {
    "status": page.status_code,
    "model": type(page.parsed).__name__,
    "rows_equal": isinstance(page.parsed, File) and rows_of(page.parsed.payload.read(), "read_parquet") == want_page,
}
link = mint_link.sync_detailed("gen-1", client=client, format_=Format.PARQUET)
out["link"] = {"status": link.status_code, "model": type(link.parsed).__name__,
               "has_url": "/statements/gen-1/result" in getattr(link.parsed, "url", "")}
signed = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link.parsed.url).query))
anonymous = Client(base_url=BASE, raise_on_unexpected_status=True)
page = statement_result_parquet.sync_detailed(
    "gen-1", client=anonymous, expires=signed["expires"], owner=signed["owner"],
    instance=signed["instance"], sig=signed["sig"])
out["signed_page"] = {
    "status": page.status_code,
    "model": type(page.parsed).__name__,
    "rows_equal": isinstance(page.parsed, File) and rows_of(page.parsed.payload.read(), "read_parquet") == ref.sql(PAGE).fetchall(),
}
print(json.dumps(out, default=str))
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, openapi-python-client); scripts/test installs it"]
async fn a_client_generated_from_the_document_runs_queries_and_reads_problems() {
    let app = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .spawn_app()
        .await;
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/openapi/openapi-python-client.yaml"
    );
    let base = app.base.clone();
    let out = tokio::task::spawn_blocking(move || python(SCRIPT, &[&base, SECRET, doc, config]))
        .await
        .unwrap();
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["generator"], 0, "{v:#}");
    // The generator reads every route; the only parts it skips are the
    // bodies it has no model for: SQL sent as text/plain or application/sql
    // (the JSON body of the same routes is generated).
    let warnings = v["warnings"].as_array().unwrap();
    for w in warnings {
        let w = w.as_str().unwrap();
        assert!(
            w.starts_with("WARNING parsing POST /query")
                || w.starts_with("WARNING parsing POST /statements")
                || w == "Unsupported content type text/plain"
                || w == "Unsupported content type application/sql",
            "{w}: {warnings:#?}"
        );
    }
    let q = &v["query"];
    assert_eq!(q["status"], 200, "{q:#}");
    assert_eq!(q["model"], "QueryResult", "{q:#}");
    for k in ["rows_equal", "names_equal", "types_equal"] {
        assert_eq!(q[k], true, "{k}: {q:#}");
    }
    assert_eq!(
        (q["row_count"].as_u64(), &q["truncated"]),
        (Some(5), &Value::Bool(false))
    );
    // Each file format by its own operation: bytes, the rows DuckDB's.
    for name in ["csv", "parquet", "arrow", "ndjson"] {
        let f = &v["files"][name];
        assert_eq!(f["status"], 200, "{name}: {f:#}");
        assert_eq!(f["model"], "File", "{name}: {f:#}");
        assert_eq!(f["rows_equal"], true, "{name}: {f:#}");
    }
    let p = &v["problem"];
    assert_eq!(p["status"], 400, "{p:#}");
    assert_eq!(p["model"], "Problem", "{p:#}");
    assert_eq!(p["type"], "urn:duckgate:problem:sql-error", "{p:#}");
    assert_eq!(p["line"], 3, "{p:#}");
    assert_eq!(p["detail_in_duckdb"], true, "{p:#}");
    assert_eq!(p["excerpt_in_duckdb"], true, "{p:#}");
    assert_eq!(v["unauthorized"]["status"], 401, "{v:#}");
    assert_eq!(v["unauthorized"]["model"], "Problem", "{v:#}");
    assert_eq!(v["statement"]["status"], 200, "{v:#}");
    assert_eq!(v["statement"]["model"], "QueryResult", "{v:#}");
    assert_eq!(v["statement"]["state"], "succeeded", "{v:#}");
    assert_eq!(v["page"]["model"], "QueryResult", "{v:#}");
    assert_eq!(v["page"]["rows_equal"], true, "{v:#}");
    for page in ["parquet_page", "signed_page"] {
        assert_eq!(v[page]["status"], 200, "{page}: {v:#}");
        assert_eq!(v[page]["model"], "File", "{page}: {v:#}");
        assert_eq!(v[page]["rows_equal"], true, "{page}: {v:#}");
    }
    assert_eq!(v["link"]["status"], 201, "{v:#}");
    assert_eq!(v["link"]["model"], "SignedLink", "{v:#}");
    assert_eq!(v["link"]["has_url"], true, "{v:#}");
    assert!(!app.log_text().contains(SECRET));
}

/// The document as two validators read it: openapi-spec-validator (the
/// OpenAPI 3.1 schema and its rules, unique operationIds among them) and
/// openapi-generator's own validation, which refuses to generate from a
/// document it finds invalid.
#[test]
#[ignore = "tier venv: needs the test venv (openapi-spec-validator) and the openapi-generator jar; scripts/test installs them"]
fn the_document_passes_openapi_spec_validator_and_openapi_generator() {
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let out = python(
        r#"
import json, sys
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename
spec, _ = read_from_filename(sys.argv[1])
try:
    validate(spec)
    print(json.dumps({"errors": None}))
except Exception as e:
    print(json.dumps({"errors": str(e)}))
"#,
        &[doc],
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["errors"], Value::Null, "openapi-spec-validator: {v:#}");
    let out = std::process::Command::new("java")
        .args(["-jar", &openapi_generator(), "validate", "-i", doc])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "openapi-generator validate: {said}");
    assert!(said.contains("No validation issues detected"), "{said}");
}

/// The openapi-generator CLI jar (`scripts/test-env` fetches it).
fn openapi_generator() -> String {
    std::env::var("DUCKGATE_TEST_OPENAPI_GENERATOR").unwrap_or_else(|_| {
        panic!("DUCKGATE_TEST_OPENAPI_GENERATOR is not set: run the suite with scripts/test (scripts/test-env fetches the jar)")
    })
}

/// A client of the second generator, openapi-generator's `python`, used as
/// its README shows: a JSON query into its model, the file formats as
/// bytes by their own operations, a statement and its pages, a signed link.
const OAG_SCRIPT: &str = r#"
import json, os, subprocess, sys, tempfile, urllib.parse
import duckdb

BASE, TOKEN, DOC, JAR = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
out_dir = tempfile.mkdtemp()
gen = subprocess.run(
    ["java", "-jar", JAR, "generate", "-i", DOC, "-g", "python", "-o", out_dir,
     "--package-name", "duckgate_oag",
     "--global-property", "apiTests=false,modelTests=false,apiDocs=false,modelDocs=false"],
    capture_output=True, text=True)
out = {"generator": gen.returncode}
if gen.returncode != 0:
    out["said"] = (gen.stdout + gen.stderr)[-4000:]
    print(json.dumps(out)); sys.exit(0)
sys.path.insert(0, out_dir)
import duckgate_oag as oag

ref = duckdb.connect()
client = oag.ApiClient(oag.Configuration(host=BASE, access_token=TOKEN))
queries, statements = oag.QueryApi(client), oag.StatementsApi(client)

def rows_of(data, reader):
    path = os.path.join(out_dir, "answer")
    with open(path, "wb") as f:
        f.write(data)
    return ref.sql(f"SELECT * FROM {reader}('{path}')").fetchall()

SQL = "SELECT i, i * 1.5::DOUBLE AS f, 'row ' || i AS s, NULLIF(i, 3) AS n FROM range(5) t(i) ORDER BY i"
want = ref.sql(SQL).fetchall()
r = queries.query(query_request=oag.QueryRequest(sql=SQL))
out["query"] = {"model": type(r).__name__, "rows_equal": [list(x) for x in r.rows] == [list(x) for x in want]}
csv = queries.query_csv(sql=SQL)
out["csv"] = {"type": type(csv).__name__, "rows_equal": rows_of(bytes(csv), "read_csv") == want}
pq = queries.query_parquet(sql=SQL)
out["parquet"] = {"type": type(pq).__name__, "rows_equal": rows_of(bytes(pq), "read_parquet") == want}
try:
    queries.query(query_request=oag.QueryRequest(sql="SELECT nope"))
    out["problem"] = None
except oag.ApiException as e:
    out["problem"] = {"status": e.status, "type": json.loads(e.body)["type"]}

PAGE = "SELECT i, 'x' || i AS s FROM range(100) t(i) ORDER BY i"
r = statements.submit_statement(statement_request=oag.StatementRequest(sql=PAGE, wait_ms=10000), duckgate_query_id="oag-1")
out["statement"] = {"model": type(r).__name__}
out["state"] = statements.show_statement("oag-1").state
page = statements.statement_result("oag-1", offset=10, limit=5)
want_page = ref.sql(PAGE + " LIMIT 5 OFFSET 10").fetchall()
out["page"] = {"model": type(page).__name__, "rows_equal": [list(x) for x in page.rows] == [list(x) for x in want_page]}
page = statements.statement_result_parquet("oag-1", offset=10, limit=5)
out["parquet_page"] = {"type": type(page).__name__, "rows_equal": rows_of(bytes(page), "read_parquet") == want_page}
link = statements.mint_link("oag-1", format=oag.Format.CSV)
signed = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link.url).query))
anonymous = oag.StatementsApi(oag.ApiClient(oag.Configuration(host=BASE)))
page = anonymous.statement_result_csv("oag-1", expires=signed["expires"], owner=signed["owner"],
                                      instance=signed["instance"], sig=signed["sig"])
out["signed_page"] = {"type": type(page).__name__, "rows_equal": rows_of(bytes(page), "read_csv") == ref.sql(PAGE).fetchall()}
print(json.dumps(out, default=str))
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB) and the openapi-generator jar with Java 17; scripts/test installs them"]
async fn openapi_generators_python_client_reads_every_format() {
    let app = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .spawn_app()
        .await;
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let base = app.base.clone();
    let jar = openapi_generator();
    let out = tokio::task::spawn_blocking(move || python(OAG_SCRIPT, &[&base, SECRET, doc, &jar]))
        .await
        .unwrap();
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["generator"], 0, "{v:#}");
    assert_eq!(v["query"]["model"], "QueryResult", "{v:#}");
    assert_eq!(v["page"]["model"], "QueryResult", "{v:#}");
    for k in [
        "query",
        "csv",
        "parquet",
        "page",
        "parquet_page",
        "signed_page",
    ] {
        assert_eq!(v[k]["rows_equal"], true, "{k}: {v:#}");
    }
    for k in ["csv", "parquet", "parquet_page", "signed_page"] {
        assert_eq!(v[k]["type"], "bytes", "{k}: {v:#}");
    }
    assert_eq!(v["problem"]["status"], 400, "{v:#}");
    assert_eq!(
        v["problem"]["type"], "urn:duckgate:problem:sql-error",
        "{v:#}"
    );
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert!(!app.log_text().contains(SECRET));
}
