//! The HTTP API: one `router()` per concern, merged, with the tower layers
//! that bound and observe every request.

pub mod access;
pub mod admin;
pub mod auth;
pub mod catalog;
pub mod docs;
pub mod error;
pub mod formats;
pub mod health;
pub mod links;
pub mod metrics;
pub mod negotiate;
pub mod queries;
pub mod query;
pub mod repoll;
pub mod request;
pub mod server;
pub mod site;
pub mod statements;
pub mod transport;
pub mod ui;
pub mod whoami;

use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, Request};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::state::Health;

use self::error::ApiError;

pub use crate::core::state::{AppState, Shared};

/// New work (a query, a statement) while the gateway drains: 503
/// `shutting-down` with `Retry-After`, so the client sends it to another
/// replica; polls, pages and cancels of what runs are still served.
async fn refuse_while_draining(
    axum::extract::State(health): axum::extract::State<Arc<Health>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if health
        .shutting_down
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return ApiError::Query(crate::engine::QueryError::ShuttingDown).into_response();
    }
    next.run(request).await
}

/// The health probes, never compressed or limited; also served alone on
/// `DUCKGATE_PROBE_LISTEN` ([`probe_router`]).
fn probes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
}

/// The probe listener's routes: the probes and nothing else.
pub fn probe_router(state: AppState) -> Router {
    probes()
        .fallback(|| async {
            ApiError::NotFound("this address serves /healthz and /readyz only".into())
        })
        .with_state(state)
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    let limits = &state.config.limits;
    let replica = state.health.replica.clone();
    // Queries are bounded by the pool and their own deadline; this is the
    // backstop for everything else that could hang before the body starts.
    // Reading the request body counts in it: a body sent slowly ends at its
    // own limit (408, its permit released), never at this one (504).
    let query_backstop = Duration::from_millis(
        limits.body_read_timeout_ms
            + limits.max_query_timeout_ms
            + state.config.engine.acquire_timeout_ms
            + 5_000,
    );
    let shed = limits.max_concurrent_requests as usize;
    let min = state.config.server.compression_min_bytes;
    // Each group's layers are one stack, added once: every `Router::layer`
    // wraps each route in a boxed service of its own, cloned per request.
    //
    // At most `shed` requests of a group at once; more are shed at once
    // with 503 `overloaded` (each group has its own limit).
    let shed_beyond = |limit: usize| {
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                ApiError::Overloaded
            }))
            .load_shed()
            .concurrency_limit(limit)
    };
    let backstop = |limit: Duration| {
        TimeoutLayer::with_status_code(axum::http::StatusCode::GATEWAY_TIMEOUT, limit)
    };
    // Results: small streamed answers are read whole first (they then go
    // out uncompressed, with a length), every format is compressed by
    // Accept-Encoding.
    let settle = || transport::SettleSmallLayer { min_bytes: min };
    // Submissions wait up to `wait_ms` inside the handler: a limit of
    // their own, so waiting submissions never take `/query`'s slots.
    let submit_routes = Router::new()
        .route("/statements", post(statements::submit))
        .route_layer(axum::middleware::from_fn_with_state(
            state.health.clone(),
            refuse_while_draining,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(transport::compression(min))
                .layer(settle())
                .layer(backstop(
                    query_backstop
                        + Duration::from_millis(state.config.statements.max_statement_wait_ms),
                ))
                .layer(shed_beyond(shed)),
        );
    let query_routes = Router::new()
        .route(
            "/query",
            post(query::query)
                .get(query::query_by_url)
                .head(query::query_by_url_head),
        )
        .route(
            "/query/{format}",
            get(formats::query_as).head(formats::query_as_head),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.health.clone(),
            refuse_while_draining,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(transport::compression(min))
                .layer(settle())
                .layer(backstop(query_backstop))
                .layer(shed_beyond(shed)),
        );
    // Listing and cancelling: cheap, never queued behind queries.
    let queries_routes = Router::new()
        .route("/queries", get(queries::list))
        .route("/queries/{id}", get(queries::show).delete(queries::cancel))
        .route("/statements", get(statements::list))
        .route(
            "/statements/{id}",
            get(statements::show).delete(statements::discard),
        )
        .route("/statements/{id}/links", post(links::mint))
        // The guard's allow-list, from memory: no pooled connection.
        .route("/catalog/functions", get(catalog::functions))
        // The caller's identity: the credential check alone.
        .route("/whoami", get(whoami::whoami));
    // Browsing runs on a pooled connection: bounded like queries.
    let catalog_routes = Router::new()
        .route("/catalog", get(catalog::list))
        .route("/catalog/{database}/{schema}/{table}", get(catalog::table))
        .layer(
            ServiceBuilder::new()
                .layer(transport::compression(min))
                .layer(backstop(query_backstop))
                .layer(shed_beyond(shed)),
        );
    // Result pages stream from the spool: bounded like queries.
    let page_routes = Router::new()
        .route("/statements/{id}/result", get(statements::result))
        .route("/statements/{id}/result/{format}", get(formats::result_as))
        .layer(
            ServiceBuilder::new()
                .layer(transport::compression(min))
                .layer(settle())
                .layer(shed_beyond(shed)),
        );
    let admin_routes = Router::new()
        .route("/admin/secrets", get(admin::list))
        .route("/admin/secrets/rotate", post(admin::rotate))
        .route("/admin/reload", post(admin::reload))
        .route("/admin/pool", get(admin::pool))
        .layer(backstop(Duration::from_secs(60)));
    // Probes and docs: no limits that could queue them behind queries.
    // Health answers are never compressed (a probe must cost nothing, and
    // they are a few hundred bytes); /metrics and the docs are, when asked
    // (Prometheus asks for gzip, and the scrape grows with every route).
    let probe_routes = probes();
    let docs_routes = Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(docs::openapi_json))
        .merge(ui::docs_router())
        .merge(ui::console_router(state.config.server.ui));

    let site = site::SiteRules {
        // A reload never switches between anonymous and token access.
        anonymous: state.identities.directory().tokens.anonymous,
        allowed_hosts: state
            .config
            .server
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect(),
        listen_ip: Some(state.config.server.listen.ip()).filter(|ip| !ip.is_unspecified()),
        cors_origins: state.config.server.cors_origins.clone(),
    };
    let cors = transport::Cors::from_config(&state.config.server);

    let router = Router::new()
        .merge(query_routes)
        .merge(submit_routes)
        .merge(queries_routes.layer(transport::compression(min)))
        .merge(page_routes)
        .merge(catalog_routes)
        .merge(admin_routes)
        .merge(probe_routes)
        .merge(docs_routes.layer(transport::compression(min)))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            let mut response = (
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                [(header::CONTENT_TYPE, "application/problem+json")],
                r#"{"type":"urn:duckgate:problem:method-not-allowed","title":"Method not allowed","status":405,"detail":"this route does not accept that method"}"#,
            )
                .into_response();
            error::mark_problem(
                &mut response,
                "Method not allowed",
                "this route does not accept that method",
            );
            response
        })
        .layer(
            ServiceBuilder::new()
                .layer(site::SiteLayer::new(site))
                .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION]))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::WARN))
                        .make_span_with(move |req: &Request<_>| {
                        let id = req
                            .extensions()
                            .get::<RequestId>()
                            .and_then(|id| id.header_value().to_str().ok())
                            .unwrap_or("-");
                        let route = req
                            .extensions()
                            .get::<axum::extract::MatchedPath>()
                            .map(|p| p.as_str())
                            .unwrap_or(req.uri().path());
                        // The peer of the TCP connection (a proxy's
                        // address behind one).
                        let client = req
                            .extensions()
                            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                            .map(|c| c.0);
                        tracing::info_span!(
                            "request",
                            method = %req.method(),
                            route = %route,
                            request_id = %id,
                            replica = %replica,
                            client = client.map(tracing::field::display),
                            identity = tracing::field::Empty,
                            query_id = tracing::field::Empty,
                        )
                    })
                    // The access line is the access layer's, once the
                    // body is done (it counts the bytes).
                    .on_response(()),
                )
                // The access line: every route, one line, with the status,
                // the latency to the answer's head as a number and the body
                // bytes sent, in the span above (the identity is recorded
                // on it by the extractor that checked the token; never the
                // token itself).
                .layer(access::AccessLayer)
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(|_| {
                    ApiError::Internal("a handler panicked".into()).into_response()
                }))
                .layer(metrics::TrackLayer)
                // The query handler reads its body with its own limit.
                .layer(DefaultBodyLimit::disable()),
        )
        .with_state(state.clone());
    // Outermost: a preflight is answered before anything else looks at it.
    match cors {
        Some(cors) => router.layer(axum::middleware::from_fn_with_state(cors, transport::cors)),
        None => router,
    }
}
