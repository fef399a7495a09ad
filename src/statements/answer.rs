//! Answering about a kept statement, local or another replica's, along one
//! path: finding the caller's statement, its status, its result (a local
//! spool file or a copy of another replica's from the S3 spool), the list,
//! and discarding. The HTTP layer renders what these return.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::QueryError;

use super::replication;
use super::shared::Row;
use super::spool::SpoolResult;
use super::status::{
    remote_status, status_json, status_of, Discarded, StatementList, StatementStatus,
};
use super::{Context, Error, State, Statement, Statements};

/// A statement a request names: kept here, or (shared state) by another
/// replica.
pub enum Found {
    /// Kept by this replica: answered from its live state.
    Local(Arc<Statement>),
    /// Kept by another replica: answered from its row in the shared state.
    Remote(Row),
}

impl Found {
    /// The statement's instance (see [`StatementStatus::instance`]).
    pub fn instance(&self) -> String {
        match self {
            Found::Local(s) => s.running.instance.clone(),
            Found::Remote(row) => row.status["instance"].as_str().unwrap_or("").to_string(),
        }
    }

    /// The statement's owner (token name) and id.
    pub fn owner_and_id(&self) -> (Arc<str>, String) {
        match self {
            Found::Local(s) => (s.running.owner.clone(), s.running.id.clone()),
            Found::Remote(row) => (row.token.as_str().into(), row.id.clone()),
        }
    }
}

/// What the headers of a statement answer name.
pub struct Ident {
    /// The statement's id.
    pub id: String,
    /// The credential epoch it started under.
    pub epoch: u64,
    /// Whether it ran again after a credential refresh.
    pub retried: bool,
}

impl Ident {
    /// Of a local statement.
    pub fn of(statements: &Statements, statement: &Statement) -> Self {
        Ident {
            id: statement.running.id.clone(),
            epoch: statement.running.epoch,
            retried: statement.snapshot(statements.settings.ttl).retried,
        }
    }

    /// Of another replica's statement, from its status document.
    pub fn of_status(status: &serde_json::Value) -> Self {
        Ident {
            id: status["id"].as_str().unwrap_or_default().to_string(),
            epoch: status["credential_epoch"].as_u64().unwrap_or(0),
            retried: status["retried"].as_bool().unwrap_or(false),
        }
    }
}

/// A statement's status document: a local one's typed, another replica's
/// as it published it.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Status {
    /// Read now from this replica's statement.
    Local(Box<StatementStatus>),
    /// Read from the shared state.
    Remote(serde_json::Value),
}

/// The statements a caller may see, oldest first.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Listing {
    /// This replica's (no shared state).
    Local(StatementList),
    /// Every replica's, from the shared rows; this replica's own live.
    Shared {
        /// Their status documents.
        statements: Vec<serde_json::Value>,
    },
}

/// The caller's statement with this id (`owner`: `None` for the admin, who
/// sees any owner's, if one). With shared state, the shared rows decide (a
/// statement deleted through another replica is gone here too), and one
/// this replica keeps is answered from its own, live, state.
pub async fn find(ctx: &Context, owner: Option<&str>, id: &str) -> Result<Found, Error> {
    let Some(shared) = &ctx.statements.shared else {
        return find_here(&ctx.statements, owner, id).map(Found::Local);
    };
    let mut rows = shared.find(owner, id).await.map_err(Error::SharedState)?;
    match rows.len() {
        0 => Err(Error::NotFound(id.to_string())),
        1 => {
            let row = rows.remove(0);
            // A row of this replica taken for lost (it stalled past the
            // staleness) answers as the other replicas do.
            if row.replica == shared.replica && row.state != State::Lost {
                if let Some(s) = ctx.statements.find(Some(&row.token), id).pop() {
                    return Ok(Found::Local(s));
                }
            }
            Ok(Found::Remote(row))
        }
        tokens => Err(Error::Ambiguous {
            id: id.to_string(),
            tokens,
        }),
    }
}

/// The caller's statement with this id, in this process alone.
fn find_here(
    statements: &Statements,
    owner: Option<&str>,
    id: &str,
) -> Result<Arc<Statement>, Error> {
    let mut found = statements.find(owner, id);
    match found.len() {
        0 => Err(Error::NotFound(id.to_string())),
        1 => Ok(found.remove(0)),
        tokens => Err(Error::Ambiguous {
            id: id.to_string(),
            tokens,
        }),
    }
}

/// Why another replica's statement has no state: its replica stopped.
fn lost(row: &Row) -> Error {
    metrics::counter!("duckgate_statement_lost_answers_total").increment(1);
    Error::Lost {
        id: row.id.clone(),
        was: match row.state {
            State::Lost => State::Running,
            other => other,
        },
    }
}

/// The statements the caller may see (`owner`; every owner's for `None`).
pub async fn list(ctx: &Context, owner: Option<&str>) -> Result<Listing, Error> {
    let local = ctx.statements.list(owner);
    let Some(shared) = &ctx.statements.shared else {
        let statements = local
            .iter()
            .map(|s| status_of(&ctx.statements, ctx.db(), s))
            .collect();
        return Ok(Listing::Local(StatementList { statements }));
    };
    let rows = shared.list(owner).await.map_err(Error::SharedState)?;
    let mut statements: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let here = (row.replica == shared.replica)
                .then(|| {
                    local
                        .iter()
                        .find(|s| *s.running.owner == *row.token && s.running.id == row.id)
                })
                .flatten();
            match here {
                Some(s) => status_json(&ctx.statements, ctx.db(), s),
                None => remote_status(row),
            }
        })
        .collect();
    statements.sort_by_key(|s| s["submitted_at_ms"].as_u64().unwrap_or(0));
    Ok(Listing::Shared { statements })
}

/// The status of a found statement, and what its answer's headers name.
pub async fn status(ctx: &Context, found: Found) -> Result<(Status, Ident), Error> {
    match found {
        Found::Local(s) => {
            let status = status_of(&ctx.statements, ctx.db(), &s);
            end_published(ctx, &s, status.state).await?;
            if status.state.finished() && status.state != State::Succeeded {
                // No result to page: the status is what it ended with.
                s.collected.store(true, Ordering::SeqCst);
            }
            Ok((
                Status::Local(Box::new(status)),
                Ident::of(&ctx.statements, &s),
            ))
        }
        Found::Remote(row) if row.lost() => Err(lost(&row)),
        Found::Remote(row) => {
            let status = remote_status(&row);
            let ident = Ident::of_status(&status);
            Ok((Status::Remote(status), ident))
        }
    }
}

/// The result of a found statement that succeeded, local or another
/// replica's (copied from the S3 spool once), and what its answer's
/// headers name; else why there is none.
pub async fn result(ctx: &Context, found: Found) -> Result<(Ident, Arc<SpoolResult>), Error> {
    let row = match found {
        Found::Local(s) => return local_result(ctx, &s).await,
        Found::Remote(row) => row,
    };
    let id = &row.id;
    if row.lost() {
        return Err(lost(&row));
    }
    match row.state {
        State::Queued | State::Running => Err(Error::Running(id.clone())),
        State::Succeeded if !row.expired && row.result.is_some() => {
            let result = replication::copy_of(ctx, &row).await?;
            Ok((Ident::of_status(&row.status), result))
        }
        State::Succeeded | State::Expired => Err(Error::Expired(id.clone())),
        State::Cancelled => Err(QueryError::CancelledByRequest.into()),
        State::Failed | State::Lost => Err(Error::Failed {
            id: id.clone(),
            problem: row.status["problem"].clone(),
        }),
    }
}

/// A local statement's result.
async fn local_result(
    ctx: &Context,
    s: &Arc<Statement>,
) -> Result<(Ident, Arc<SpoolResult>), Error> {
    let id = &s.running.id;
    let snap = s.snapshot(ctx.statements.settings.ttl);
    end_published(ctx, s, snap.state).await?;
    let result = match (snap.state, snap.result, snap.error) {
        (State::Succeeded, Some(r), _) => r,
        (State::Queued | State::Running, _, _) => return Err(Error::Running(id.clone())),
        (State::Expired | State::Lost, _, _) | (State::Succeeded, None, _) => {
            return Err(Error::Expired(id.clone()))
        }
        (_, _, Some(QueryError::CancelledByRequest)) => {
            return Err(QueryError::CancelledByRequest.into())
        }
        (_, _, Some(e)) => {
            return Err(Error::Failed {
                id: id.clone(),
                problem: crate::problems::json_for_stream(&e),
            })
        }
        (_, _, None) => {
            return Err(Error::Internal(
                "a failed statement without an error".into(),
            ))
        }
    };
    s.collected.store(true, Ordering::SeqCst);
    Ok((Ident::of(&ctx.statements, s), result))
}

/// Cancels a found statement that is queued or running, or discards a
/// finished one and its result: either way it is forgotten at once. With
/// shared state its row goes first: a statement of another replica is
/// stopped by its owner, which sees its row gone (within a second).
pub async fn discard(ctx: &Context, found: Found, id: String) -> Result<Discarded, Error> {
    let url = match (&ctx.statements.shared, &found) {
        (Some(shared), Found::Local(s)) => shared
            .forget(&s.running.owner, &id)
            .await
            .map_err(Error::SharedState)?,
        (Some(shared), Found::Remote(row)) => shared
            .forget(&row.token, &id)
            .await
            .map_err(Error::SharedState)?,
        (None, _) => None,
    };
    if let Some(url) = url {
        replication::remove_result(ctx, &url).await;
    }
    let s = match found {
        Found::Local(s) => s,
        Found::Remote(row) => {
            let before = row.answered_state();
            return Ok(Discarded {
                id,
                state: before,
                cancelled: !before.finished(),
            });
        }
    };
    let before = s.snapshot(ctx.statements.settings.ttl).state;
    let cancelled = !before.finished();
    if cancelled {
        ctx.queries.cancel(&s.running);
    }
    ctx.statements.discard(&s);
    Ok(Discarded {
        id,
        state: before,
        cancelled,
    })
}

/// With shared state, a local statement's end is in it before an answer
/// shows the statement finished (`answered`, the state the answer was made
/// of): the client's next request may land on another replica, which must
/// not answer that it still runs (a page there was 409 `statement-running`
/// for the few milliseconds the end took to publish, seen by
/// `k6/run-soak --replicas 3`). Usually a no-op: the statement's own task
/// publishes its end at once.
pub async fn end_published(ctx: &Context, s: &Statement, answered: State) -> Result<(), Error> {
    let Some(shared) = &ctx.statements.shared else {
        return Ok(());
    };
    if matches!(answered, State::Queued | State::Running) || !s.claimed.load(Ordering::SeqCst) {
        return Ok(());
    }
    // The final state is set just before `done` fires, with no await
    // between: publish only once it did (the published status is final then).
    if tokio::time::timeout(Duration::from_secs(1), s.done.cancelled())
        .await
        .is_err()
    {
        return Ok(());
    }
    replication::publish(ctx, shared, s)
        .await
        .map_err(Error::SharedState)
}
