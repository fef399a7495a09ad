//! The OpenAPI document, generated from the handlers' annotations, served at
//! `/openapi.json`; the docs page that renders it is in [`crate::api::ui`].

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{
    admin, catalog, error, health, links, metrics, queries, query, request, statements, ui,
};

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
        links::mint,
        health::healthz,
        health::readyz,
        metrics::metrics,
        admin::list,
        admin::rotate,
        admin::reload,
        admin::pool,
        catalog::list,
        catalog::table,
        openapi_json,
        ui::console_page,
        ui::docs_page,
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
        health::AuditHealth,
        health::DependencyHealth,
        admin::SecretsReport,
        admin::ReplicaAnswer,
        admin::ReloadReport,
        admin::SecretInfo,
        admin::CatalogInfo,
        admin::SnapshotInfo,
        queries::QueryInfo,
        queries::ProgressInfo,
        queries::QueryList,
        queries::Cancelled,
        statements::StatementStatus,
        statements::StatementList,
        statements::Discarded,
        links::SignedLink,
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
        (name = "admin", description = "Credential operations (admin token)"),
        (name = "console", description = "The browser console and these docs: static pages embedded in the binary that call this API with the user's token")
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A query token, the admin token (`/admin/...`), or, with \
                         DUCKGATE_OIDC_ISSUER set, a JWT of that issuer (queries, statements \
                         and `/queries`, as the identity `oidc:<name claim>`). A refused JWT \
                         is 401 with a problem whose slug says why: `token-expired`, \
                         `token-wrong-audience`, ...",
                    ))
                    .build(),
            ),
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
