//! `GET /queries`, `GET /queries/{id}`, `DELETE /queries/{id}`: what runs
//! now, and cancelling it. A query token sees and cancels its own queries;
//! the admin token sees and cancels all. A query another token owns is
//! answered exactly like one that does not exist.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::AppState;
use crate::engine::queries::{QueryState, Running};

/// A running query.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QueryInfo {
    /// The query id (`duckgate-query-id`).
    pub id: String,
    /// The name of the token that started it, or of the OIDC identity
    /// (`oidc:<name>`).
    pub token: String,
    /// The roles of the identity that started it (an OIDC identity's roles
    /// claim; empty for query tokens).
    pub roles: Vec<String>,
    /// How it came: `query` (`POST /query`) or `statement` (`POST /statements`).
    pub api: String,
    /// The statement kind, once the guard has read it.
    pub kind: Option<String>,
    /// The SQL, cut to `DUCKGATE_LISTED_SQL_BYTES`.
    pub sql: String,
    /// Whether `sql` was cut.
    pub sql_truncated: bool,
    /// `queued` (waiting for a connection or the guard), `running` or
    /// `streaming`.
    #[schema(value_type = String)]
    pub state: QueryState,
    /// When it started, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// Milliseconds since it started.
    pub elapsed_ms: f64,
    /// Result rows produced so far.
    pub rows: u64,
    /// Body bytes sent so far.
    pub bytes: u64,
    /// The credential epoch it started under.
    pub credential_epoch: u64,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// DuckDB's own progress of the query while it executes on its
    /// connection (absent while queued, and once its connection let go).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressInfo>,
}

/// DuckDB's own progress of a query (its progress bar's numbers).
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
pub struct ProgressInfo {
    /// Percentage done (0-100); absent while DuckDB cannot tell (it knows
    /// once every pipeline of the plan reports progress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentage: Option<f64>,
    /// Rows (for some sources, bytes) processed so far.
    pub rows_processed: u64,
    /// Rows (or bytes) to process in all, as DuckDB estimates them.
    pub total_rows: u64,
}

impl From<crate::engine::progress::Progress> for ProgressInfo {
    fn from(p: crate::engine::progress::Progress) -> Self {
        ProgressInfo {
            percentage: p.percentage,
            rows_processed: p.rows_processed,
            total_rows: p.total_rows,
        }
    }
}

impl QueryInfo {
    /// `r` as listed, with its progress read from `db`.
    pub fn of(r: &Running, db: &crate::engine::ffi::RawDatabase) -> Self {
        let connection = r.connection.load(Ordering::SeqCst);
        QueryInfo {
            progress: connection
                .checked_sub(1)
                .and_then(|id| crate::engine::progress::read(db, id))
                .map(ProgressInfo::from),
            id: r.id.clone(),
            token: r.owner.to_string(),
            roles: r.roles.iter().map(|x| x.to_string()).collect(),
            api: r.api.to_string(),
            kind: r.kind.get().cloned(),
            sql: r.sql.clone(),
            sql_truncated: r.sql.len() < r.sql_len,
            state: r.state(),
            started_at_ms: r
                .started_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            elapsed_ms: crate::engine::queries::elapsed_ms(r.started.elapsed()),
            rows: r.rows.load(Ordering::Relaxed),
            bytes: r.bytes.load(Ordering::Relaxed),
            credential_epoch: r.epoch,
            cancel_requested: r.cancel.is_cancelled(),
        }
    }
}

/// The queries running now.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QueryList {
    /// The queries the caller may see.
    pub queries: Vec<QueryInfo>,
}

/// What a cancel request did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Cancelled {
    /// The query's id.
    pub id: String,
    /// Always true: the query was asked to stop.
    pub cancelled: bool,
    /// Whether it had let go of its connection when this answer was sent
    /// (the gateway waits up to two seconds for that).
    pub ended: bool,
}

/// Lists the running queries the caller may see (its own; all for admin).
#[utoipa::path(get, path = "/queries", tag = "queries",
    responses(
        (status = 200, description = "The running queries, oldest first", body = QueryList),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let queries: Vec<QueryInfo> = state
        .queries
        .list()
        .iter()
        .filter(|r| caller.may_see(&r.owner))
        .map(|r| QueryInfo::of(r, &state.engine.db))
        .collect();
    if state.statements.shared.is_none() {
        return Ok(Json(QueryList { queries }).into_response());
    }
    // Every live replica's, as each published them (at most half a second
    // old), with this replica's own now.
    let mut all: Vec<serde_json::Value> = queries
        .iter()
        .filter_map(|q| serde_json::to_value(q).ok())
        .collect();
    all.extend(
        elsewhere(&state, &caller, None)
            .await?
            .into_iter()
            .map(|(_, q)| q),
    );
    all.sort_by_key(|q| q["started_at_ms"].as_u64().unwrap_or(0));
    Ok(Json(serde_json::json!({ "queries": all })).into_response())
}

/// The queries other live replicas run that the caller may see (with this
/// id, if one is given): (replica, query).
async fn elsewhere(
    state: &AppState,
    caller: &Caller,
    id: Option<&str>,
) -> Result<Vec<(String, serde_json::Value)>, ApiError> {
    let Some(shared) = &state.statements.shared else {
        return Ok(Vec::new());
    };
    let lists = shared
        .others_queries()
        .await
        .map_err(ApiError::SharedState)?;
    let mut out = Vec::new();
    for (replica, list) in lists {
        let Ok(serde_json::Value::Array(queries)) = serde_json::from_str(&list) else {
            continue;
        };
        for q in queries {
            let token = q["token"].as_str().unwrap_or_default();
            if caller.may_see(token) && id.is_none_or(|id| q["id"].as_str() == Some(id)) {
                out.push((replica.clone(), q));
            }
        }
    }
    Ok(out)
}

/// The caller's running queries with this id (the admin's: every owner's).
fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Vec<std::sync::Arc<Running>>, ApiError> {
    let owner = caller.owner();
    let found = state.queries.find(owner, id);
    if found.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no running query with id {id} is yours to see"
        )));
    }
    Ok(found)
}

/// One running query.
#[utoipa::path(get, path = "/queries/{id}", tag = "queries",
    params(("id" = String, Path, description = "The query id")),
    responses(
        (status = 200, description = "The query", body = QueryInfo),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not running, or not the caller's", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match visible(&state, &caller, &id) {
        Ok(found) => Ok(Json(QueryInfo::of(&found[0], &state.engine.db)).into_response()),
        Err(e) => match elsewhere(&state, &caller, Some(&id)).await?.pop() {
            Some((_, q)) => Ok(Json(q).into_response()),
            None => Err(e),
        },
    }
}

/// Cancels a running query (the admin: every running query with that id):
/// it is interrupted (again and again until
/// DuckDB stops), its connection goes back to the pool, and its own client
/// gets the problem `query-cancelled` (409), or the end of its stream.
#[utoipa::path(delete, path = "/queries/{id}", tag = "queries",
    params(("id" = String, Path, description = "The query id")),
    responses(
        (status = 200, description = "Asked to stop; `ended` says whether it has", body = Cancelled),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not running, or not the caller's", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Cancelled>, ApiError> {
    let found = match visible(&state, &caller, &id) {
        Ok(found) => found,
        Err(e) => {
            let remote = elsewhere(&state, &caller, Some(&id)).await?;
            if remote.is_empty() {
                return Err(e);
            }
            return cancel_elsewhere(&state, &caller, id, remote).await;
        }
    };
    let who = match &caller {
        Caller::Admin => "admin".to_string(),
        Caller::Owner(auth) => auth.name.to_string(),
    };
    for r in &found {
        tracing::info!(query_id = %r.id, owner = %r.owner, by = %who, "cancel requested");
        state.queries.cancel(r);
    }
    // Wait (bounded) for the queries to leave: their connections are free.
    let until = Instant::now() + Duration::from_secs(2);
    let mut ended = false;
    while Instant::now() < until {
        if !found.iter().any(|r| state.queries.contains(r)) {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Json(Cancelled {
        id,
        cancelled: true,
        ended,
    }))
}

/// Cancels queries other replicas run: the cancel is recorded in the shared
/// state for each owner, which honours it within a second; waits (bounded)
/// until they are gone from the owners' lists.
async fn cancel_elsewhere(
    state: &AppState,
    caller: &Caller,
    id: String,
    found: Vec<(String, serde_json::Value)>,
) -> Result<Json<Cancelled>, ApiError> {
    let Some(shared) = &state.statements.shared else {
        return Err(ApiError::Internal("no shared state".into()));
    };
    for (replica, q) in &found {
        let token = q["token"].as_str().unwrap_or_default();
        tracing::info!(query_id = %id, owner = %token, replica = %replica, "cancel requested on another replica");
        shared
            .request_cancel(replica, token, &id)
            .await
            .map_err(ApiError::SharedState)?;
    }
    let until = Instant::now() + Duration::from_secs(3);
    let mut ended = false;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = elsewhere(state, caller, Some(&id)).await?;
        if !now.iter().any(|(r, q)| {
            found
                .iter()
                .any(|(fr, fq)| fr == r && fq["token"] == q["token"])
        }) {
            ended = true;
            break;
        }
    }
    Ok(Json(Cancelled {
        id,
        cancelled: true,
        ended,
    }))
}
