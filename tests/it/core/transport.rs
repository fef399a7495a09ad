//! How answers travel: gzip and zstd by Accept-Encoding for the text formats
//! (errors still visible after decompression), never for the columnar ones
//! (Arrow compresses its own buffers when asked), small answers left alone,
//! and CORS only for the configured origins.

use crate::common;

use std::io::Read;

use crate::common::Gateway;
use futures::StreamExt as _;
use serde_json::{json, Value};

/// A result large enough to be compressed in every format.
const SQL: &str =
    "SELECT i, i / 4 AS x, 'row-' || i AS s, DATE '2024-01-01' + (i % 1000)::INT AS d FROM range(60000) t(i)";

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

fn unzstd(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::stream::decode_all(bytes)
}

/// The body with what a client compares: JSON without its timing.
fn comparable(format: &str, body: &[u8]) -> Vec<u8> {
    if format != "json" {
        return body.to_vec();
    }
    let mut v: Value = serde_json::from_slice(body).unwrap();
    v.as_object_mut().unwrap().remove("elapsed_ms");
    serde_json::to_vec(&v).unwrap()
}

async fn post(
    g: &common::Endpoint,
    body: Value,
    encoding: Option<&str>,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = g.client.post(g.url("/query")).json(&body);
    if let Some(e) = encoding {
        req = req.header("accept-encoding", e);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    (status, headers, r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn every_text_format_is_compressed_as_asked_and_decodes_to_the_same_answer() {
    let g = Gateway::builder().spawn_app().await;
    for format in ["json", "ndjson", "csv"] {
        let body = json!({"sql": SQL, "format": format});
        let (status, headers, plain) = post(&g, body.clone(), None).await;
        assert_eq!(status, 200, "{format}");
        assert!(!headers.contains_key("content-encoding"), "{format}");
        for (encoding, decode) in [
            ("gzip", gunzip as fn(&[u8]) -> std::io::Result<Vec<u8>>),
            ("zstd", unzstd),
        ] {
            let (status, headers, wire) = post(&g, body.clone(), Some(encoding)).await;
            assert_eq!(status, 200, "{format} {encoding}");
            assert_eq!(headers["content-encoding"], encoding, "{format}");
            assert!(
                headers["vary"]
                    .to_str()
                    .unwrap()
                    .to_ascii_lowercase()
                    .contains("accept-encoding"),
                "{format} {encoding}"
            );
            assert!(
                !headers.contains_key("content-length"),
                "{format} {encoding}: streamed"
            );
            let decoded = decode(&wire).unwrap();
            assert_eq!(
                comparable(format, &decoded),
                comparable(format, &plain),
                "{format} {encoding}: the decompressed answer is the answer"
            );
            assert!(
                wire.len() * 2 < plain.len(),
                "{format} {encoding}: {} bytes on the wire for {}",
                wire.len(),
                plain.len()
            );
        }
    }
    // A client's preference decides between the two.
    let (_, headers, _) = post(
        &g,
        json!({"sql": SQL, "format": "csv"}),
        Some("gzip;q=0.5, zstd"),
    )
    .await;
    assert_eq!(headers["content-encoding"], "zstd");
}

#[tokio::test]
async fn small_answers_and_probes_are_not_compressed() {
    let g = Gateway::builder().spawn_app().await;
    for format in ["json", "ndjson", "csv", "arrow"] {
        let (status, headers, body) = post(
            &g,
            json!({"sql": "SELECT 42 AS answer", "format": format}),
            Some("gzip, zstd"),
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            !headers.contains_key("content-encoding"),
            "{format}: a small answer goes out as it is"
        );
        assert_eq!(
            headers["content-length"].to_str().unwrap(),
            body.len().to_string(),
            "{format}: and with its length"
        );
    }
    // A problem document is small too.
    let (status, headers, _) = post(&g, json!({"sql": "SELEC 1"}), Some("gzip")).await;
    assert_eq!(status, 400);
    assert!(!headers.contains_key("content-encoding"));

    for path in ["/healthz", "/readyz"] {
        let r = g
            .client
            .get(g.url(path))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert!(!r.headers().contains_key("content-encoding"), "{path}");
    }
    // /metrics is compressed when the scraper asks (Prometheus does).
    let r = g
        .client
        .get(g.url("/metrics"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let text = String::from_utf8(gunzip(&r.bytes().await.unwrap()).unwrap()).unwrap();
    assert!(text.contains("duckgate_pool_size"));
}

/// Fails at row 800,000 of 1M: the body has begun when the error comes.
const FAILING: &str = "SELECT i, CASE WHEN i < 800000 THEN 'ok' ELSE error('boom at ' || i) END AS v FROM range(1000000) t(i)";

/// Reads a body until it ends or breaks: the bytes, and whether it broke.
async fn drain(r: reqwest::Response) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    let mut stream = r.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => bytes.extend_from_slice(&c),
            Err(_) => return (bytes, true),
        }
    }
    (bytes, false)
}

#[tokio::test]
async fn a_failure_mid_stream_survives_decompression() {
    let g = Gateway::builder()
        .env("DUCKGATE_THREADS", 1)
        .spawn_app()
        .await;
    // NDJSON: the error record is the last line the decompressor gives.
    for (encoding, decode) in [
        ("gzip", gunzip as fn(&[u8]) -> std::io::Result<Vec<u8>>),
        ("zstd", unzstd),
    ] {
        let r = g
            .client
            .post(g.url("/query"))
            .header("accept-encoding", encoding)
            .json(&json!({"sql": FAILING, "format": "ndjson", "max_rows": 100000000}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "the body had begun");
        assert_eq!(r.headers()["content-encoding"], encoding);
        let (wire, broke) = drain(r).await;
        // After its error record an NDJSON body aborts, so the failure is a
        // broken transfer whatever the encoding (the record may stay in the
        // compressor's buffer); what arrived does not decode as whole.
        assert!(broke, "{encoding}: a failed NDJSON answer arrived whole");
        assert!(
            decode(&wire).is_err(),
            "{encoding}: what arrived decodes as a complete stream"
        );
    }
    // CSV and JSON end in an abort: the transfer breaks, and what did
    // arrive does not decompress to a complete stream (no trailer).
    for format in ["csv", "json"] {
        for (encoding, decode) in [
            ("gzip", gunzip as fn(&[u8]) -> std::io::Result<Vec<u8>>),
            ("zstd", unzstd),
        ] {
            let r = g
                .client
                .post(g.url("/query"))
                .header("accept-encoding", encoding)
                .json(&json!({"sql": FAILING, "format": format, "max_rows": 100000000}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{format} {encoding}: the body had begun");
            assert_eq!(r.headers()["content-encoding"], encoding);
            let (wire, broke) = drain(r).await;
            assert!(broke, "{format} {encoding}: the transfer must break");
            assert!(
                decode(&wire).is_err(),
                "{format} {encoding}: a cut compressed stream must not decode as complete"
            );
        }
    }
}

/// The codec of every record batch message of an Arrow IPC stream (`None`
/// for a batch whose buffers are not compressed), read from the messages'
/// own headers.
fn batch_codecs(stream: &[u8]) -> Vec<Option<arrow::ipc::CompressionType>> {
    let mut codecs = Vec::new();
    let mut at = 0;
    while at + 8 <= stream.len() {
        let len = i32::from_le_bytes(stream[at + 4..at + 8].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let meta = &stream[at + 8..at + 8 + len];
        let message = arrow::ipc::root_as_message(meta).unwrap();
        if let Some(batch) = message.header_as_record_batch() {
            codecs.push(batch.compression().map(|c| c.codec()));
        }
        at += 8 + len + message.bodyLength() as usize;
    }
    codecs
}

fn read_arrow(stream: &[u8]) -> Vec<arrow::array::RecordBatch> {
    arrow::ipc::reader::StreamReader::try_new(stream, None)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Issue 60: Arrow and Parquet answers were gzipped whenever a client
/// offered gzip (requests and pandas always do), at twice the time. They go
/// out as the format wrote them, whatever Accept-Encoding offers; Arrow's own
/// buffer compression is there for a client that asks (`arrow_compression`).
#[tokio::test]
async fn columnar_answers_are_never_gzipped_and_arrow_compresses_its_own_buffers() {
    let g = Gateway::builder().spawn_app().await;
    for format in ["arrow", "parquet"] {
        let body = json!({"sql": SQL, "format": format});
        let (status, _, plain) = post(&g, body.clone(), None).await;
        assert_eq!(status, 200, "{format}");
        for offered in ["gzip", "zstd", "gzip, deflate, br, zstd"] {
            let (status, headers, wire) = post(&g, body.clone(), Some(offered)).await;
            assert_eq!(status, 200, "{format} {offered}");
            assert!(
                !headers.contains_key("content-encoding"),
                "{format}: offered {offered}, got {:?}",
                headers.get("content-encoding")
            );
            if format == "arrow" {
                assert_eq!(wire, plain, "arrow {offered}: the bytes as written");
            } else {
                assert!(wire.starts_with(b"PAR1") && wire.ends_with(b"PAR1"));
            }
        }
    }
    let plain = post(&g, json!({"sql": SQL, "format": "arrow"}), None)
        .await
        .2;
    assert!(batch_codecs(&plain).iter().all(Option::is_none));
    let expected = read_arrow(&plain);
    for (name, codec) in [
        ("zstd", arrow::ipc::CompressionType::ZSTD),
        ("lz4", arrow::ipc::CompressionType::LZ4_FRAME),
    ] {
        // In the body as in the query string, and whatever gzip offers.
        for body in [
            json!({"sql": SQL, "format": "arrow", "arrow_compression": name}),
            json!({"sql": SQL, "format": "arrow"}),
        ] {
            let by_body = body.get("arrow_compression").is_some();
            let mut req = g.client.post(g.url("/query")).json(&body);
            if !by_body {
                req = req.query(&[("arrow_compression", name)]);
            }
            let r = req.header("accept-encoding", "gzip").send().await.unwrap();
            assert_eq!(r.status(), 200, "{name}");
            assert!(!r.headers().contains_key("content-encoding"));
            let wire = r.bytes().await.unwrap();
            let codecs = batch_codecs(&wire);
            assert!(
                !codecs.is_empty() && codecs.iter().all(|c| *c == Some(codec)),
                "{name}: {codecs:?}"
            );
            // zstd halves it at least; LZ4 trades ratio for speed (DuckDB's
            // row numbers barely compress with it), so: smaller.
            let most = if name == "zstd" {
                plain.len() / 2
            } else {
                plain.len() - 1
            };
            assert!(
                wire.len() <= most,
                "{name}: {} bytes against {} plain",
                wire.len(),
                plain.len()
            );
            assert_eq!(read_arrow(&wire), expected, "{name}: the same batches");
        }
    }
    // GET /query takes it too.
    let r = g
        .client
        .get(g.url("/query/arrow"))
        .query(&[("sql", SQL), ("arrow_compression", "zstd")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let wire = r.bytes().await.unwrap();
    assert!(batch_codecs(&wire)
        .iter()
        .all(|c| *c == Some(arrow::ipc::CompressionType::ZSTD)));
    // A codec only Arrow carries, and only one it knows: 400, said why.
    for (body, says) in [
        (
            json!({"sql": SQL, "format": "csv", "arrow_compression": "zstd"}),
            "Arrow answers",
        ),
        (
            json!({"sql": SQL, "format": "arrow", "arrow_compression": "gzip"}),
            "zstd, lz4, none",
        ),
    ] {
        let (status, _, problem) = post(&g, body, None).await;
        let problem: Value = serde_json::from_slice(&problem).unwrap();
        assert_eq!(status, 400, "{problem}");
        assert_eq!(problem["type"], "urn:duckgate:problem:invalid-option");
        assert!(
            problem["detail"].as_str().unwrap().contains(says),
            "{problem}"
        );
    }
    // `none` is the default said aloud.
    let (status, _, wire) = post(
        &g,
        json!({"sql": SQL, "format": "arrow", "arrow_compression": "none"}),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(wire, plain);
    // Statements refuse it rather than ignore it.
    let r = g
        .client
        .post(g.url("/statements"))
        .json(&json!({"sql": SQL, "format": "arrow", "arrow_compression": "zstd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn statement_result_pages_are_compressed_too() {
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .client
        .post(g.url("/statements"))
        .json(&json!({"sql": SQL, "format": "csv", "wait_ms": 30000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "finished within wait_ms");
    let id = r.headers()["duckgate-query-id"]
        .to_str()
        .unwrap()
        .to_string();
    let page = format!("/statements/{id}/result?format=csv");
    let plain = g.client.get(g.url(&page)).send().await.unwrap();
    assert_eq!(plain.status(), 200);
    let plain = plain.bytes().await.unwrap();
    let r = g
        .client
        .get(g.url(&page))
        .header("accept-encoding", "zstd")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "zstd");
    let wire = r.bytes().await.unwrap();
    assert_eq!(unzstd(&wire).unwrap(), plain.to_vec());
    assert!(wire.len() * 2 < plain.len());
}

/// A preflight as a browser sends it before a POST with a token.
async fn preflight(g: &common::Endpoint, origin: &str) -> reqwest::Response {
    g.client
        .request(reqwest::Method::OPTIONS, g.url("/query"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, duckgate-query-id",
        )
        .send()
        .await
        .unwrap()
}

fn cors_headers(r: &reqwest::Response) -> Vec<String> {
    r.headers()
        .keys()
        .map(|k| k.as_str().to_string())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

#[tokio::test]
async fn cors_answers_allowed_origins_only() {
    let g = Gateway::builder()
        .env(
            "DUCKGATE_CORS_ORIGINS",
            "https://app.example.com,http://localhost:3000",
        )
        .spawn_app()
        .await;
    let r = preflight(&g, "https://app.example.com").await;
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "https://app.example.com");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["authorization", "content-type", "duckgate-query-id"] {
        assert!(allowed.contains(name), "{name} in {allowed}");
    }
    assert!(h["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert_eq!(h["access-control-max-age"], "600", "preflights are cached");

    // The request itself: the page may read the query id.
    let r = g
        .client
        .post(g.url("/query"))
        .header("origin", "http://localhost:3000")
        .json(&json!({"sql": "SELECT 1 AS one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "http://localhost:3000");
    let exposed = h["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "duckgate-query-id",
        "duckgate-statement",
        "duckgate-credential-epoch",
        "duckgate-total-rows",
    ] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }

    // Another origin gets nothing of CORS: its page cannot read answers,
    // and on this anonymous gateway its request does not run (site.rs).
    let r = preflight(&g, "https://evil.example").await;
    assert_eq!(cors_headers(&r), Vec::<String>::new());
    let r = g
        .client
        .post(g.url("/query"))
        .header("origin", "https://evil.example")
        .json(&json!({"sql": "SELECT 1 AS one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(cors_headers(&r), Vec::<String>::new());
}

#[tokio::test]
async fn cors_is_off_by_default() {
    let g = Gateway::builder().spawn_app().await;
    let r = preflight(&g, "https://app.example.com").await;
    assert_eq!(cors_headers(&r), Vec::<String>::new());
    assert_eq!(r.status(), 405, "no route answers OPTIONS");
    // With a token, another origin's request runs (its page could not add
    // the header without a preflight, which gets no CORS answer).
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "alice:alice-token-0123456789")
        .spawn_app()
        .await;
    let r = g
        .client
        .post(g.url("/query"))
        .header("origin", "https://app.example.com")
        .bearer_auth("alice-token-0123456789")
        .json(&json!({"sql": "SELECT 1 AS one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(cors_headers(&r), Vec::<String>::new());
}

/// `POST /query` with a CORS-simple body (no preflight) and `headers`.
async fn simple_post(g: &common::Endpoint, sql: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut r = g
        .client
        .post(g.url("/query"))
        .header("content-type", "text/plain")
        .body(sql.to_string());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn anonymous_gateways_refuse_other_sites_and_foreign_host_names() {
    // Issue 36: with no tokens, a page on another localhost port wrote a
    // table with a CORS-simple POST, and any Host was answered (what DNS
    // rebinding needs).
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .spawn_app()
        .await;
    let host = g.base.trim_start_matches("http://").to_string();
    let own = format!("http://{host}");
    let write = "CREATE TABLE pwned AS SELECT 1 AS x";
    for headers in [
        vec![
            ("origin", "http://localhost:3000"),
            ("sec-fetch-site", "same-site"),
        ],
        vec![
            ("origin", "https://attacker.example"),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![("origin", "https://attacker.example")],
        vec![("sec-fetch-site", "cross-site")],
        vec![("origin", "null")],
    ] {
        let (status, body) = simple_post(&g, write, &headers).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert_eq!(body["type"], "urn:duckgate:problem:cross-site-request");
    }
    // A cross-site GET of /query runs nothing either.
    let r = g
        .client
        .get(g.url("/query?sql=SELECT%201"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v = g
        .query_ok("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'pwned'")
        .await;
    assert_eq!(v["rows"], json!([[0]]), "a refused request wrote");
    // curl and programs (no Origin), the console (same origin), and a
    // top-level navigation to the console still work.
    assert_eq!(simple_post(&g, "SELECT 1", &[]).await.0, 200);
    let same = [("origin", own.as_str()), ("sec-fetch-site", "same-origin")];
    assert_eq!(simple_post(&g, "SELECT 1", &same).await.0, 200);
    let r = g
        .client
        .get(g.url("/ui"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // DNS rebinding: a name that is not loopback, the listen address or
    // listed is refused, whatever route.
    for bad in [
        "attacker.example",
        "localhost.attacker.example",
        "127.0.0.1.nip.io",
    ] {
        let (status, body) = simple_post(&g, "SELECT 1", &[("host", bad)]).await;
        assert_eq!(status, 403, "{bad}: {body}");
        assert_eq!(body["type"], "urn:duckgate:problem:host-not-allowed");
    }
    for good in ["localhost", "app.localhost", "127.0.0.1", "[::1]"] {
        let port = host.rsplit(':').next().unwrap();
        let h = format!("{good}:{port}");
        assert_eq!(
            simple_post(&g, "SELECT 1", &[("host", &h)]).await.0,
            200,
            "{h}"
        );
    }
    // The probes answer any Host (orchestrators probe by pod IP).
    let r = g
        .client
        .get(g.url("/healthz"))
        .header("host", "10.9.8.7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Listed names are answered; tokens turn the origin check off and,
    // with no list, the Host check too.
    let g = Gateway::builder()
        .env("DUCKGATE_ALLOWED_HOSTS", "duckgate.example.com")
        .spawn_app()
        .await;
    let (status, _) = simple_post(&g, "SELECT 1", &[("host", "duckgate.example.com")]).await;
    assert_eq!(status, 200);
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "alice:alice-token-0123456789")
        .spawn_app()
        .await;
    let auth = [
        ("host", "any.example"),
        ("authorization", "Bearer alice-token-0123456789"),
    ];
    assert_eq!(simple_post(&g, "SELECT 1", &auth).await.0, 200);
}
