//! The committed OpenAPI document is what the code generates, and the running
//! gateway serves it.

use crate::common;

use std::process::Command;

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
