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
import json, os, subprocess, sys, tempfile
import duckdb

BASE, TOKEN, DOC = sys.argv[1], sys.argv[2], sys.argv[3]
bin_dir = os.path.dirname(sys.executable)
out_dir = tempfile.mkdtemp()
# ruff (a dependency of the generator) formats the generated code.
env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
gen = subprocess.run(
    [os.path.join(bin_dir, "openapi-python-client"), "generate", "--path", DOC,
     "--meta", "none", "--output-path", os.path.join(out_dir, "duckgate_client")],
    capture_output=True, text=True, env=env)
said = (gen.stdout + gen.stderr).splitlines()
warnings = [l for l in said if l.startswith("WARNING") or l.startswith("Unsupported") or "ruff" in l]
sys.path.insert(0, out_dir)

from duckgate_client import AuthenticatedClient
from duckgate_client.api.query import query
from duckgate_client.api.statements import submit, show, result, mint
from duckgate_client.models import Format, Problem, QueryRequest, QueryResult, StatementRequest

client = AuthenticatedClient(base_url=BASE, token=TOKEN, raise_on_unexpected_status=True)
ref = duckdb.connect()
out = {"generator": gen.returncode, "warnings": warnings}

# A query, read into the generated model, against DuckDB's own answer.
SQL = "SELECT i, i * 1.5::DOUBLE AS f, 'row ' || i AS s, i % 2 = 0 AS even, NULLIF(i, 3) AS n FROM range(5) t(i) ORDER BY i"
r = query.sync_detailed(client=client, body=QueryRequest(sql=SQL), format_=Format.JSON)
want = ref.sql(SQL)
out["query"] = {
    "status": r.status_code,
    "model": type(r.parsed).__name__,
    "rows_equal": isinstance(r.parsed, QueryResult) and r.parsed.rows == [list(row) for row in want.fetchall()],
    "names_equal": [c.name for c in r.parsed.columns] == want.columns,
    "types_equal": [c.type_ for c in r.parsed.columns] == [str(t) for t in want.types],
    "row_count": r.parsed.row_count,
    "truncated": r.parsed.truncated,
}

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

# A statement, then a page of it and a signed link to it.
PAGE = "SELECT i, 'x' || i AS s FROM range(100) t(i) ORDER BY i"
r = submit.sync_detailed(client=client, body=StatementRequest(sql=PAGE, wait_ms=10000), duckgate_query_id="gen-1")
out["statement"] = {"status": r.status_code, "model": type(r.parsed).__name__}
s = show.sync_detailed("gen-1", client=client)
out["statement"]["state"] = s.parsed.state if hasattr(s.parsed, "state") else repr(s.parsed)
page = result.sync_detailed("gen-1", client=client, format_=Format.JSON, offset=10, limit=5)
out["page"] = {
    "status": page.status_code,
    "model": type(page.parsed).__name__,
    "rows_equal": page.parsed.rows == [list(row) for row in ref.sql(PAGE + " LIMIT 5 OFFSET 10").fetchall()],
}
link = mint.sync_detailed("gen-1", client=client, format_=Format.CSV)
out["link"] = {"status": link.status_code, "model": type(link.parsed).__name__,
               "has_url": "/statements/gen-1/result" in getattr(link.parsed, "url", "")}
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
    let base = app.base.clone();
    let out = tokio::task::spawn_blocking(move || python(SCRIPT, &[&base, SECRET, doc]))
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
    assert_eq!(v["link"]["status"], 201, "{v:#}");
    assert_eq!(v["link"]["model"], "SignedLink", "{v:#}");
    assert_eq!(v["link"]["has_url"], true, "{v:#}");
    assert!(!app.log_text().contains(SECRET));
}
