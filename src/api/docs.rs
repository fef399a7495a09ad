//! The OpenAPI document, generated from the handlers' annotations, and a
//! small self-contained docs page (no assets fetched at build or run time).

use axum::http::header;
use axum::response::{Html, IntoResponse};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{admin, catalog, error, health, metrics, queries, query, request, statements};

/// The OpenAPI document of the HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "duckgate",
        description = "An HTTP SQL gateway over an embedded DuckDB that keeps S3 STS credentials fresh.",
        license(name = "MIT")
    ),
    paths(
        query::query,
        query::query_by_url,
        query::query_by_url_head,
        queries::list,
        queries::show,
        queries::cancel,
        statements::submit,
        statements::list,
        statements::show,
        statements::result,
        statements::discard,
        health::healthz,
        health::readyz,
        metrics::metrics,
        admin::list,
        admin::rotate,
        catalog::list,
        catalog::table,
        openapi_json,
    ),
    components(schemas(
        request::QueryRequest,
        request::QueryParam,
        query::QueryResult,
        query::ColumnSchema,
        query::FormatSchema,
        error::Problem,
        health::HealthReport,
        health::PoolHealth,
        health::SecretHealth,
        admin::SecretsReport,
        admin::SecretInfo,
        queries::QueryInfo,
        queries::ProgressInfo,
        queries::QueryList,
        queries::Cancelled,
        statements::StatementStatus,
        statements::StatementList,
        statements::Discarded,
        catalog::CatalogList,
        catalog::DatabaseInfo,
        catalog::SchemaInfo,
        catalog::TableInfo,
        catalog::TableDetail,
        catalog::ColumnInfo,
        catalog::SnapshotInfo,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "query", description = "Run SQL"),
        (name = "queries", description = "Running queries: list and cancel (a query token: its own; the admin token: all)"),
        (name = "statements", description = "Async statements: submit, poll, page the spooled result in any format, cancel or discard (a query token: its own; the admin token: all)"),
        (name = "catalog", description = "Browse what clients can query: databases (the gateway's own and the operator-declared catalogs), schemas, tables, columns"),
        (name = "health", description = "Probes and metrics"),
        (name = "admin", description = "Credential operations (admin token)")
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The spec as pretty JSON (what `duckgate openapi` prints).
pub fn spec_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub async fn openapi_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], spec_json())
}

/// A plain HTML page listing every operation, rendered from the spec.
pub async fn docs_page() -> Html<String> {
    let doc = ApiDoc::openapi();
    let mut rows = String::new();
    for (path, item) in doc.paths.paths.iter() {
        let ops = [
            ("GET", item.get.as_ref()),
            ("POST", item.post.as_ref()),
            ("PUT", item.put.as_ref()),
            ("DELETE", item.delete.as_ref()),
        ];
        for (method, op) in ops {
            let Some(op) = op else { continue };
            let summary = op.summary.clone().unwrap_or_default();
            let description = op.description.clone().unwrap_or_default();
            let statuses = op
                .responses
                .responses
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            rows.push_str(&format!(
                "<tr><td><code>{method}</code></td><td><code>{}</code></td><td><b>{}</b><br>{}</td><td>{}</td></tr>\n",
                escape(path),
                escape(&summary),
                escape(&description).replace('\n', "<br>"),
                escape(&statuses)
            ));
        }
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>duckgate API</title>\
         <style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td{{vertical-align:top;padding:.4em;border-bottom:1px solid #ddd}}</style>\
         </head><body><h1>duckgate API {}</h1><p>Machine-readable: <a href=\"/openapi.json\">/openapi.json</a></p>\
         <table><tr><th>Method</th><th>Path</th><th>What it does</th><th>Statuses</th></tr>{rows}</table></body></html>",
        escape(&doc.info.version)
    ))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
