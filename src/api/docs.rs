//! The OpenAPI document, generated from the handlers' annotations, served at
//! `/openapi.json`; the docs page that renders it is in [`crate::api::ui`].

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{HeaderBuilder, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::encode::Format;
use crate::problems::kind;

use crate::api::{
    admin, catalog, error, health, links, metrics, queries, query, request, statements, ui, whoami,
};

/// The OpenAPI document of the HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "duckgate",
        description = "An HTTP SQL gateway over an embedded DuckDB that keeps S3 STS credentials fresh.",
        license(name = "MIT", identifier = "MIT")
    ),
    servers(
        (url = "{scheme}://{address}", description = "A duckgate gateway (`cargo run --release` serves http://localhost:8080)",
            variables(
                ("scheme" = (default = "http", enum_values("http", "https"), description = "https behind a TLS-terminating proxy")),
                ("address" = (default = "localhost:8080", description = "The gateway's host and port (DUCKGATE_LISTEN)"))
            ))
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
        catalog::functions,
        whoami::whoami,
        openapi_json,
        ui::console_page,
        ui::docs_page,
    ),
    components(schemas(
        request::QueryRequest,
        request::StatementRequest,
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
        crate::statements::State,
        links::SignedLink,
        catalog::CatalogList,
        catalog::DatabaseInfo,
        catalog::SchemaInfo,
        catalog::TableInfo,
        catalog::TableDetail,
        catalog::ColumnInfo,
        catalog::SnapshotInfo,
        catalog::FunctionList,
        catalog::FunctionInfo,
        whoami::Whoami,
    )),
    modifiers(&BearerAuth, &PerFormat, &Exact),
    tags(
        (name = "query", description = "Run SQL"),
        (name = "queries", description = "Running queries: list and cancel (a query token: its own; the admin token: all)"),
        (name = "statements", description = "Async statements: submit, poll, page the spooled result in any format, cancel or discard (a query token: its own; the admin token: all)"),
        (name = "catalog", description = "Browse what clients can query: databases (the gateway's own and the operator-declared catalogs), schemas, tables, columns"),
        (name = "identity", description = "Who the caller's credential makes it: name, roles, expiry"),
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

/// An operation per file format (`api/formats.rs`): `GET /query/{format}`
/// and `GET /statements/{id}/result/{format}`, listed as literal paths
/// (`/query/csv`, ...) so that each has one media type, bytes, and a
/// generated client hands back bytes rather than decoding the first media
/// type of the plain route (JSON). Each is the plain route's operation with
/// the format fixed: no `format` option, no 406, one media type.
struct PerFormat;

impl Modify for PerFormat {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let binary = || {
            RefOr::T(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
                    .into(),
            )
        };
        for (plain, id) in [
            ("/query", "query"),
            ("/statements/{id}/result", "statement_result"),
        ] {
            let Some(item) = openapi.paths.paths.get(plain).cloned() else {
                continue;
            };
            for format in crate::api::formats::file_formats() {
                let name = format.name();
                let ct = media_type(format.content_type());
                let one = |base: &Operation, method: &str, suffix: &str| {
                    let mut op = base.clone();
                    op.operation_id = Some(format!("{id}_{name}{suffix}"));
                    op.summary = Some(format!("`{method} {plain}` as {name}"));
                    op.description = Some(format!(
                        "What `{method} {plain}` answers with `format={name}`, as one media \
                         type (`{ct}`, bytes), so that a generated client returns the bytes. \
                         A `format` option other than `{name}` is 400 `format-conflict`."
                    ));
                    if let Some(params) = &mut op.parameters {
                        params.retain(|p| p.name != "format");
                    }
                    op.responses.responses.remove("406");
                    for response in op.responses.responses.values_mut() {
                        let RefOr::T(response) = response else {
                            continue;
                        };
                        if response.content.is_empty()
                            || response.content.contains_key("application/problem+json")
                        {
                            continue;
                        }
                        let mut content = utoipa::openapi::ContentBuilder::new().build();
                        content.schema = Some(binary());
                        response.content.clear();
                        response.content.insert(ct.to_string(), content);
                    }
                    op
                };
                let mut path = utoipa::openapi::PathItem::default();
                path.get = item.get.as_ref().map(|op| one(op, "GET", ""));
                // `HEAD /query` checks without running: its per-format twin too.
                path.head = item.head.as_ref().map(|op| one(op, "HEAD", "_head"));
                openapi.paths.paths.insert(format!("{plain}/{name}"), path);
            }
        }
    }
}

/// What the annotations cannot say, from the code's own facts: a result in
/// a file format (CSV, Arrow IPC, Parquet) is bytes (`type: string, format:
/// binary`; a generator then hands the client the bytes, not an array of
/// numbers); every operation can answer what the layers in front of every
/// route answer (403 from the browser rules, 500 from a handler that
/// failed); and every problem answer carries `duckgate-error`.
struct Exact;

impl Modify for Exact {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let binary: Vec<&str> = Format::ALL
            .iter()
            .filter(|f| !f.is_json())
            .map(|f| media_type(f.content_type()))
            .collect();
        for (path, item) in openapi.paths.paths.iter_mut() {
            let checked = !crate::api::site::UNCHECKED_PATHS.contains(&path.as_str());
            let acts = checked && crate::api::site::acts(path);
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.head,
                &mut item.patch,
                &mut item.options,
                &mut item.trace,
            ]
            .into_iter()
            .flatten()
            {
                bytes_are_binary(op, &binary);
                every_route_answers(op, checked, acts);
                name_problems(op);
            }
        }
    }
}

/// `content_type` without its parameters (`text/csv; charset=utf-8`).
fn media_type(content_type: &str) -> &str {
    content_type
        .split(';')
        .next()
        .unwrap_or(content_type)
        .trim()
}

fn bytes_are_binary(op: &mut Operation, binary: &[&str]) {
    let schema = || {
        RefOr::T(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
                .into(),
        )
    };
    for response in op.responses.responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        for (media, content) in response.content.iter_mut() {
            if binary.contains(&media_type(media)) {
                content.schema = Some(schema());
            }
        }
    }
}

/// The problem kinds the layers in front of every route answer: a handler
/// that failed (`CatchPanic`) and, but on the paths they never check
/// (`checked` false), the browser rules (`api/site.rs`): the Host, and for
/// routes that run or read statements (`acts`), where the request comes
/// from.
fn every_route_answers(op: &mut Operation, checked: bool, acts: bool) {
    let mut layered: Vec<(&crate::problems::Kind, &str)> = vec![(
        &kind::INTERNAL,
        "a fault of the gateway; the cause is in its log",
    )];
    if acts {
        layered.push((
            &kind::CROSS_SITE_REQUEST,
            "a web page of another site, on an anonymous gateway",
        ));
    }
    if checked {
        layered.push((
            &kind::HOST_NOT_ALLOWED,
            "a Host the gateway does not answer",
        ));
    }
    for (k, _) in &layered {
        let status = k.status.to_string();
        if op.responses.responses.contains_key(&status) {
            continue;
        }
        let slugs: Vec<String> = layered
            .iter()
            .filter(|(other, _)| other.status == k.status)
            .map(|(other, why)| format!("`{}` ({why})", other.slug))
            .collect();
        let response = ResponseBuilder::new()
            .description(slugs.join(", "))
            .content(
                "application/problem+json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                        "Problem",
                    ))))
                    .build(),
            )
            .build();
        op.responses.responses.insert(status, RefOr::T(response));
    }
}

/// Every problem answer names its title and detail in `duckgate-error`
/// (see [`crate::api::error::ERROR_HEADER`]).
fn name_problems(op: &mut Operation) {
    for response in op.responses.responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        if !response.content.contains_key("application/problem+json") {
            continue;
        }
        response.headers.insert(
            crate::api::error::ERROR_HEADER.to_string(),
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some(
                    "The problem's title and the first line of its detail, on one line of at \
                     most 300 bytes (`%` and non-ASCII characters percent-encoded as UTF-8)",
                ))
                .build(),
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
