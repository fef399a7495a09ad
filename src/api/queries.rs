//! `GET /queries`, `GET /queries/{id}`, `DELETE /queries/{id}`: what runs
//! now, and cancelling it. A query token sees and cancels its own queries;
//! the admin token sees and cancels all. A query another token owns is
//! answered exactly like one that does not exist.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::AppState;
pub use crate::engine::listing::{ProgressInfo, QueryInfo};
use crate::engine::queries::Running;

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
#[utoipa::path(get, path = "/queries", operation_id = "list_queries", tag = "queries",
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
#[utoipa::path(get, path = "/queries/{id}", operation_id = "show_query", tag = "queries",
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
#[utoipa::path(delete, path = "/queries/{id}", operation_id = "cancel_query", tag = "queries",
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
