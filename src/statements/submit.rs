//! Submitting a statement: registered among the running queries, its id
//! reserved and (with replicas) claimed in the shared state, admitted
//! within the bounds of [`super::Settings`], started in the background on
//! the statements' share of the pool, and waited for up to `wait_ms`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::queries::{Registration, Running};
use crate::engine::sink::BatchSink;
use crate::engine::QueryJob;

use super::answer::end_published;
use super::spool::{Payer, SpoolResult};
use super::status::status_json;
use super::{replication, AdmitError, Context, Error, State, Statement};

/// A statement as its client asked for it, its options not yet clamped
/// (its job is built by the core: `crate::core::Core::submit`).
pub struct Submission {
    /// Its id: the client's or the door's; made when absent.
    pub id: Option<String>,
    /// Whether the client chose the id (it is then reserved on every replica).
    pub client_chose_id: bool,
    /// The token (or identity) submitting it.
    pub owner: Arc<str>,
    /// Its roles.
    pub roles: Vec<Arc<str>>,
    /// One SQL statement (for its registration).
    pub sql: String,
    /// The time limit asked for (clamped to the statements' maximum).
    pub timeout_ms: Option<u64>,
    /// How long to wait for its end (default 10 s, clamped).
    pub wait_ms: Option<u64>,
    /// The role whose spool quota its result counts against, if any.
    pub role_spool_quota: Option<crate::engine::guard::access::RoleQuota>,
}

/// What a submission came to within its wait.
pub enum Submitted {
    /// It succeeded: its result, to answer with at once.
    Finished(Arc<Statement>, Arc<SpoolResult>),
    /// It still runs: the client polls it.
    Running(Arc<Statement>),
}

/// Submits one statement and waits up to its `wait_ms` for it; `job`
/// builds its job from its clamped time limit, its entry among the running
/// queries and the spool writer its result goes to. A statement that failed
/// or was cancelled within the wait is its error.
pub async fn submit(
    ctx: &Context,
    s: Submission,
    job: impl FnOnce(Duration, Arc<Running>, Arc<dyn BatchSink>) -> QueryJob,
) -> Result<Submitted, Error> {
    let settings = &ctx.statements.settings;
    let max_timeout = settings.max_timeout;
    let timeout = s
        .timeout_ms
        .map_or(max_timeout, |t| Duration::from_millis(t).min(max_timeout));
    let wait = Duration::from_millis(s.wait_ms.unwrap_or(10_000)).min(settings.max_wait);

    let epoch = ctx.runner.health.epoch();
    let mut registration = ctx.queries.register_as(
        "statement",
        s.id.as_deref(),
        s.owner.clone(),
        s.roles.clone(),
        &s.sql,
        epoch,
    )?;
    let statement = match admit(ctx, &mut registration, s.client_chose_id, timeout).await {
        Ok(statement) => statement,
        Err(e) => {
            // Its audit line says why it never ran.
            registration.running.set_outcome(e.outcome());
            return Err(e);
        }
    };
    let writer = ctx.statements.writer(Payer {
        owner: s.owner.clone(),
        role: s.role_spool_quota,
    });
    let tracker = registration.running.clone();
    let spool: Arc<dyn BatchSink> = writer.clone();
    let job = job(timeout, tracker, spool);
    ctx.statements.start(
        statement.clone(),
        job,
        writer,
        registration,
        ctx.runner.clone(),
    );
    if let Some(shared) = ctx.statements.shared.clone() {
        // Its end is published at once (the replication loop would within
        // half a second).
        let (ctx, statement) = (ctx.clone(), statement.clone());
        tokio::spawn(async move {
            statement.done.cancelled().await;
            if let Err(e) = replication::publish(&ctx, &shared, &statement).await {
                tracing::warn!(error.cause = %e, "publishing a statement's end failed; retried");
            }
        });
    }

    tokio::select! {
        _ = statement.done.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
    let snap = statement.snapshot(settings.ttl);
    end_published(ctx, &statement, snap.state).await?;
    match (snap.state, snap.result, snap.error) {
        (State::Succeeded, Some(result), _) => Ok(Submitted::Finished(statement, result)),
        (State::Failed | State::Cancelled, _, Some(e)) => Err(Error::Query(e)),
        _ => Ok(Submitted::Running(statement)),
    }
}

/// Admits a registered statement: its id reserved on every replica (when
/// the client chose it), kept here within the bounds, and claimed in the
/// shared state (the id must be free on every replica: the shared state
/// decides).
async fn admit(
    ctx: &Context,
    registration: &mut Registration,
    client_chose_id: bool,
    timeout: Duration,
) -> Result<Arc<Statement>, Error> {
    replication::reserve_id(ctx, registration, client_chose_id).await?;
    let statement = ctx
        .statements
        .admit(registration.running.clone(), timeout)
        .map_err(|e| match e {
            AdmitError::Taken(id) => Error::StatementIdTaken(id),
            AdmitError::TooMany(limit) => Error::TooMany {
                limit,
                setting: "DUCKGATE_MAX_STATEMENTS",
            },
            AdmitError::TooManyForToken(limit) => Error::TooMany {
                limit,
                setting: "DUCKGATE_MAX_STATEMENTS_PER_TOKEN",
            },
        })?;
    let Some(shared) = &ctx.statements.shared else {
        return Ok(statement);
    };
    let status = status_json(&ctx.statements, ctx.db(), &statement).to_string();
    let claimed = shared
        .claim(&statement.running.owner, &statement.running.id, &status)
        .await;
    match claimed {
        Ok(true) => {
            statement.claimed.store(true, Ordering::SeqCst);
            Ok(statement)
        }
        Ok(false) => {
            ctx.statements.discard(&statement);
            Err(Error::StatementIdTaken(statement.running.id.clone()))
        }
        Err(e) => {
            ctx.statements.discard(&statement);
            Err(Error::SharedState(e))
        }
    }
}
