//! The committed OpenAPI document is what the code generates, and the running
//! gateway serves it; the document says what the code does: result bodies
//! in file formats are bytes, `format` is the Format enum, every route lists
//! the catalogue's problems it can answer, every option listed is taken.

use crate::common;

use std::process::Command;

use duckgate::api::error::ERROR_HEADER;
use duckgate::encode::Format;
use duckgate::problems;
use serde_json::{json, Value};

#[test]
fn committed_spec_matches_the_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_duckgate"))
        .arg("openapi")
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed.trim() == generated.trim(),
        "openapi/openapi.json is stale; regenerate it with:\n  cargo run --release -- openapi > openapi/openapi.json"
    );
    let spec: serde_json::Value = serde_json::from_str(&generated).unwrap();
    for path in [
        "/query",
        "/healthz",
        "/readyz",
        "/metrics",
        "/admin/secrets",
        "/admin/secrets/rotate",
    ] {
        assert!(
            spec["paths"][path].is_object(),
            "{path} missing from the spec"
        );
    }
}

#[tokio::test]
async fn the_gateway_serves_its_spec_and_docs() {
    let g = common::Gateway::builder().spawn_app().await;
    let spec = g.get_json("/openapi.json").await;
    assert_eq!(spec["info"]["title"], "duckgate");
    let docs = g.get_text("/docs").await;
    assert!(docs.contains("/query") && docs.contains("/admin/secrets/rotate"));
}

/// The committed document.
fn spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every operation: (method, path, operation).
fn operations(spec: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            out.push((method.to_uppercase(), path.clone(), op.clone()));
        }
    }
    out
}

/// `content_type` without its parameters.
fn media(content_type: &str) -> &str {
    content_type.split(';').next().unwrap().trim()
}

#[test]
fn result_bodies_are_bytes_and_formats_the_format_enum() {
    let spec = spec();
    // A file format's body is bytes: `string`/`binary`, which generators
    // hand over as bytes (an array of int32 made them decode numbers).
    let binary: Vec<&str> = Format::ALL
        .iter()
        .filter(|f| !f.is_json())
        .map(|f| media(f.content_type()))
        .collect();
    let mut seen = 0;
    for (method, path, op) in operations(&spec) {
        for (status, response) in op["responses"].as_object().unwrap() {
            for (ct, content) in response["content"].as_object().into_iter().flatten() {
                if binary.contains(&media(ct)) {
                    seen += 1;
                    assert_eq!(
                        content["schema"],
                        json!({"type": "string", "format": "binary"}),
                        "{method} {path} {status} {ct}"
                    );
                }
            }
        }
        // `format`, wherever it is an option, is the Format enum.
        for p in op["parameters"].as_array().into_iter().flatten() {
            if p["name"] == "format" {
                assert_eq!(
                    p["schema"]["$ref"], "#/components/schemas/Format",
                    "{method} {path}: {p}"
                );
            }
        }
    }
    assert!(seen >= 12, "binary bodies found: {seen}");
    let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(
        spec["components"]["schemas"]["Format"]["enum"],
        json!(names)
    );
    for schema in ["QueryRequest", "StatementRequest"] {
        let format = &spec["components"]["schemas"][schema]["properties"]["format"];
        assert!(
            format.to_string().contains("#/components/schemas/Format"),
            "{schema}.format: {format}"
        );
    }
    // Where generated clients send their requests.
    let server = &spec["servers"][0];
    let url = server["url"]
        .as_str()
        .unwrap()
        .replace(
            "{scheme}",
            server["variables"]["scheme"]["default"].as_str().unwrap(),
        )
        .replace(
            "{address}",
            server["variables"]["address"]["default"].as_str().unwrap(),
        );
    assert_eq!(url, "http://localhost:8080");
}

#[test]
fn every_route_lists_the_problems_of_the_catalogue_it_can_answer() {
    let spec = spec();
    let catalogued: Vec<String> = problems::ALL.iter().map(|k| k.status.to_string()).collect();
    for (method, path, op) in operations(&spec) {
        let responses = op["responses"].as_object().unwrap();
        let what = format!("{method} {path}");
        // Every problem status listed is one of the catalogue's, and names
        // itself in `duckgate-error`.
        for (status, response) in responses {
            if response["content"]
                .get("application/problem+json")
                .is_some()
            {
                assert!(catalogued.contains(status), "{what} {status}");
                assert!(
                    response["headers"].get(ERROR_HEADER).is_some(),
                    "{what} {status}: no {ERROR_HEADER}"
                );
            }
        }
        // What the layers in front of every route answer: a handler that
        // failed, and the browser rules on all but the probes.
        assert!(responses.contains_key("500"), "{what}: 500");
        let probe = path == "/healthz" || path == "/readyz";
        if !probe {
            assert!(responses.contains_key("403"), "{what}: 403");
        }
    }
    // The routes that run a query answer every status of the catalogue's
    // query kinds (but the spool's own, which `/query` never reads).
    for (method, path) in [
        ("post", "/query"),
        ("get", "/query"),
        ("post", "/statements"),
    ] {
        let responses = spec["paths"][path][method]["responses"]
            .as_object()
            .unwrap();
        for k in problems::ALL.iter().filter(|k| k.outcome.is_some()) {
            if path == "/query" && k.slug == problems::kind::RESULT_MISSING.slug {
                continue;
            }
            assert!(
                responses.contains_key(&k.status.to_string()),
                "{method} {path} lists no {} ({})",
                k.status,
                k.slug
            );
        }
    }
    // A page: a Parquet page past a spool quota, a value past its limit.
    let page = spec["paths"]["/statements/{id}/result"]["get"]["responses"]
        .as_object()
        .unwrap();
    for status in [
        problems::kind::SPOOL_QUOTA_EXCEEDED.status,
        problems::kind::VALUE_TOO_LARGE.status,
    ] {
        assert!(page.contains_key(&status.to_string()), "page: {status}");
    }
    // `truncated` is a cut the client asked for, never a silent one.
    let truncated = spec["components"]["schemas"]["QueryResult"]["properties"]["truncated"]
        ["description"]
        .as_str()
        .unwrap();
    assert!(
        truncated.contains("max_rows")
            && truncated.contains("result-too-large")
            && !truncated.contains("byte limit"),
        "{truncated}"
    );
}

/// A value the schema admits, for a request: for a reference to an
/// enumeration, `none` where it has one (an option off takes any format),
/// else its first value.
fn example(schema: &Value) -> Value {
    let text = schema.to_string();
    if text.contains("#/components/schemas/Format") {
        return json!("csv");
    }
    if let Some(at) = text.find("#/components/schemas/") {
        let name: String = text[at + 21..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let target = &spec()["components"]["schemas"][&name];
        if let Some(values) = target["enum"].as_array() {
            if let Some(v) = values
                .iter()
                .find(|v| **v == "none")
                .or_else(|| values.iter().find(|v| !v.is_null()))
            {
                return v.clone();
            }
        }
    }
    let types = schema["type"].to_string();
    if types.contains("integer") {
        json!(schema["minimum"].as_i64().unwrap_or(1).max(1) * 1000)
    } else if types.contains("boolean") {
        json!(true)
    } else if types.contains("array") {
        json!([])
    } else {
        json!("SELECT 1 AS a")
    }
}

#[tokio::test]
async fn every_option_listed_is_one_the_route_takes_and_401_is_listed_where_answered() {
    let spec = spec();
    let g = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "analyst:openapi-token-42aa")
        .env("DUCKGATE_ADMIN_TOKEN", "openapi-admin-token-77b1")
        .env("DUCKGATE_DEFAULT_MAX_ROWS", 3)
        .spawn_app()
        .await;
    let token = "openapi-token-42aa";
    // Each query option, and each field of the JSON body, the document
    // lists for a route that runs SQL, is one it takes (`wait_ms` on
    // `POST /query` is refused there: 400 `invalid-option`).
    for (method, path, body_schema) in [
        ("post", "/query", "QueryRequest"),
        ("get", "/query", ""),
        ("post", "/statements", "StatementRequest"),
    ] {
        let op = &spec["paths"][path][method];
        for p in op["parameters"].as_array().unwrap() {
            if p["in"] != "query" || p["name"] == "sql" {
                continue;
            }
            let name = p["name"].as_str().unwrap();
            let value = example(&p["schema"]);
            let value = value
                .as_str()
                .map(str::to_string)
                .unwrap_or(value.to_string());
            let mut url = reqwest::Url::parse(&g.url(path)).unwrap();
            url.query_pairs_mut().append_pair(name, &value);
            let request = if method == "get" {
                url.query_pairs_mut().append_pair("sql", "SELECT 1 AS a");
                g.client.get(url)
            } else {
                g.client.post(url).body("SELECT 1 AS a")
            };
            let r = request.bearer_auth(token).send().await.unwrap();
            let status = r.status();
            let text = r.text().await.unwrap();
            assert!(
                status.is_success(),
                "{method} {path} ?{name}={value}: {status} {text}"
            );
        }
        if body_schema.is_empty() {
            continue;
        }
        let properties = spec["components"]["schemas"][body_schema]["properties"]
            .as_object()
            .unwrap();
        for (name, schema) in properties {
            if name == "sql" {
                continue;
            }
            let body = json!({"sql": "SELECT 1 AS a", name: example(schema)});
            let r = g
                .client
                .post(g.url(path))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            let text = r.text().await.unwrap();
            assert!(
                status.is_success(),
                "{method} {path} {body}: {status} {text}"
            );
        }
    }
    // Without a token, every operation that answers 401 lists it.
    for (method, path, op) in operations(&spec) {
        let url = g.url(&path.replace(['{', '}'], ""));
        let request = g
            .client
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
        let status = request.send().await.unwrap().status().as_u16();
        if status == 401 {
            assert!(
                op["responses"].get("401").is_some(),
                "{method} {path} answers 401 but does not list it"
            );
        }
    }
    // `truncated`: true where the client's max_rows cut the rows, and the
    // gateway's own cap fails instead.
    let query = |body: Value| {
        g.client
            .post(g.url("/query"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let v: Value = query(json!({"sql": "SELECT * FROM range(5)", "max_rows": 2}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (v["row_count"].as_u64(), v["truncated"].as_bool()),
        (Some(2), Some(true))
    );
    let r = query(json!({"sql": "SELECT * FROM range(5)"}))
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        422,
        "the gateway's cap of 3 rows is no silent cut"
    );
}

#[test]
fn operation_ids_are_unique_and_file_formats_have_an_operation_each() {
    let spec = spec();
    let mut seen = std::collections::BTreeMap::new();
    for (method, path, op) in operations(&spec) {
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
            .to_string();
        if let Some(other) = seen.insert(id.clone(), format!("{method} {path}")) {
            panic!("operationId {id} is both {other} and {method} {path}");
        }
    }
    // Each file format has an operation of its own on the two routes that
    // answer results, with that one media type, as bytes: a generated
    // client hands back bytes instead of decoding the plain route's first
    // media type (JSON).
    for format in Format::ALL.iter().filter(|f| **f != Format::Json) {
        for (plain, id) in [
            ("/query", "query"),
            ("/statements/{id}/result", "statement_result"),
        ] {
            let path = format!("{plain}/{}", format.name());
            let op = &spec["paths"][&path]["get"];
            assert_eq!(
                op["operationId"],
                format!("{id}_{}", format.name()),
                "{path}"
            );
            for (status, response) in op["responses"].as_object().unwrap() {
                if !status.starts_with('2') {
                    continue;
                }
                assert_eq!(
                    response["content"],
                    json!({media(format.content_type()): {"schema": {"type": "string", "format": "binary"}}}),
                    "{path} {status}"
                );
            }
            let params = op["parameters"].as_array().unwrap();
            assert!(!params.iter().any(|p| p["name"] == "format"), "{path}");
        }
        // `HEAD /query`'s twin: checks without running.
        let head = &spec["paths"][format!("/query/{}", format.name())]["head"];
        assert_eq!(head["operationId"], format!("query_{}_head", format.name()));
    }
}

/// What a CSV answer's `content-type` is.
fn a_csv_content_type() -> &'static str {
    Format::Csv.content_type()
}

#[tokio::test]
async fn a_route_per_format_answers_what_the_format_option_does() {
    let g = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "analyst:per-format-31c7")
        .spawn_app()
        .await;
    let token = "per-format-31c7";
    let sql = "SELECT i, 'v' || i AS s, i / 3 AS d FROM range(7) t(i) ORDER BY i";
    let get = |url: String| g.client.get(url).bearer_auth(token).send();
    // The statement whose pages are compared.
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(token)
        .header("duckgate-query-id", "per-format")
        .json(&json!({"sql": sql, "wait_ms": 10000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for format in Format::ALL.iter().filter(|f| **f != Format::Json) {
        let name = format.name();
        let mut plain = reqwest::Url::parse(&g.url("/query")).unwrap();
        plain
            .query_pairs_mut()
            .append_pair("sql", sql)
            .append_pair("format", name);
        let mut fixed = reqwest::Url::parse(&g.url(&format!("/query/{name}"))).unwrap();
        fixed.query_pairs_mut().append_pair("sql", sql);
        let a = get(plain.to_string()).await.unwrap();
        let b = get(fixed.to_string()).await.unwrap();
        assert_eq!(b.status(), 200, "/query/{name}");
        assert_eq!(
            b.headers()["content-type"],
            a.headers()["content-type"],
            "/query/{name}"
        );
        assert_eq!(
            b.bytes().await.unwrap(),
            a.bytes().await.unwrap(),
            "/query/{name}"
        );
        // A page of the statement, the same way.
        let a = get(g.url(&format!(
            "/statements/per-format/result?format={name}&offset=2&limit=3"
        )))
        .await
        .unwrap();
        let b = get(g.url(&format!(
            "/statements/per-format/result/{name}?offset=2&limit=3"
        )))
        .await
        .unwrap();
        assert_eq!(b.status(), 200, "result/{name}");
        assert_eq!(b.headers()["content-type"], a.headers()["content-type"]);
        assert_eq!(b.bytes().await.unwrap(), a.bytes().await.unwrap());
    }
    // The path fixes the format: another one in the options is refused,
    // the same one taken, JSON has no route of its own.
    let r = get(g.url("/query/csv?sql=SELECT%201&format=parquet"))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["type"], "urn:duckgate:problem:format-conflict", "{p}");
    let r = get(g.url("/query/csv?sql=SELECT%201&format=csv"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for path in [
        "/query/json?sql=SELECT%201",
        "/statements/per-format/result/json",
    ] {
        assert_eq!(get(g.url(path)).await.unwrap().status(), 404, "{path}");
    }
    // HEAD checks the request without running it, as `HEAD /query` does:
    // a statement that fails when it runs is 200 to HEAD, 400 to GET.
    let failing = "/query/csv?sql=SELECT%20error('boom')";
    let head = g
        .client
        .head(g.url(failing))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-type"], a_csv_content_type());
    assert_eq!(get(g.url(failing)).await.unwrap().status(), 400);
    // Without a token: 401, as on the plain routes.
    let r = g
        .client
        .get(g.url("/query/csv?sql=SELECT%201"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A signed link holds on the per-format route of its statement, and
    // nowhere else.
    let link: Value = g
        .client
        .post(g.url("/statements/per-format/links"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let path = link["path"].as_str().unwrap();
    let (base, query) = path.split_once('?').unwrap();
    let signed = g
        .client
        .get(g.url(&format!("{base}/csv?{query}")))
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 200);
    let want = get(g.url("/statements/per-format/result?format=csv"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(signed.bytes().await.unwrap(), want);
    let forged = g
        .client
        .get(g.url(&format!("/query/csv?sql=SELECT%201&{query}")))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
}
