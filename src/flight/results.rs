//! One statement through `POST /query`'s machinery, its answer as record
//! batches: a [`QueryJob`] in the Arrow IPC format, registered (listed,
//! cancellable, audited as `api=flight`), run with the credential retry,
//! and its IPC stream read back into batches.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamDecoder;
use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::Status;

use crate::api::auth::QueryAuth;
use crate::api::error::ApiError;
use crate::api::AppState;
use crate::credentials::retry::with_fresh_credentials;
use crate::encode::Format;
use crate::engine::execute::describe::{DescribeSlot, Described};
use crate::engine::execute::RunLimits;
use crate::engine::queries::{Outcome, Registration, Running};
use crate::engine::{execute, Param, QueryJob, QueryOutput};
use crate::flight::options::CallOptions;
use crate::flight::status;

/// A statement that ran: its schema known, its batches to come.
pub struct Started {
    /// The result's schema, as DuckDB's Arrow export gave it.
    pub schema: SchemaRef,
    /// The query's entry in the registry (for a cancel).
    pub running: Arc<Running>,
    /// The batches; an error ends them (a cap, the time limit, a cancel).
    pub batches: BoxStream<'static, Result<RecordBatch, Status>>,
}

/// Runs `sql` with `params` for `auth` as `POST /query` would with the
/// call's `options` (else the default time limit and row cap): returns once
/// DuckDB has produced the schema (and usually the first rows), or its
/// error.
pub async fn start(
    state: &AppState,
    auth: &QueryAuth,
    sql: String,
    params: Vec<Param>,
    options: CallOptions,
) -> Result<Started, Status> {
    let started = Instant::now();
    let limits = &state.config.limits;
    admit(limits, &sql)?;
    let reg = register(state, "flight", auth, &sql)?;
    let running = reg.running.clone();
    let id = running.id.clone();
    // A cut is clean only where the client asked for it (`max_rows`); the
    // server's caps fail the result rather than end it short.
    let (max_rows, rows_asked) = limits.rows(options.max_rows);
    let run_limits = RunLimits {
        started,
        timeout: Duration::from_millis(limits.query_timeout_ms(options.timeout_ms)),
        max_rows,
        rows_asked,
        stall_timeout: Duration::from_millis(limits.send_stall_timeout_ms),
        max_value_bytes: limits.max_value_bytes,
    };
    let job = QueryJob::query(
        sql,
        params,
        state.engine.rules_for(auth.access.clone()),
        run_limits,
        running.clone(),
        Format::Arrow,
        limits.max_result_bytes,
    );
    let output = match run(state, job).await {
        Ok(output) => output,
        Err(e) => {
            running.set_outcome(e.outcome());
            // Dropping the registration writes the audit line.
            drop(reg);
            return Err(status::of_api(&e, Some(&id)));
        }
    };
    let mut reader = Reader {
        body: output.body,
        decoder: StreamDecoder::new(),
        ready: VecDeque::new(),
        registration: Some(reg),
        id,
    };
    // Read until the schema is known: an empty result still has one.
    while reader.decoder.schema().is_none() {
        match reader.next_chunk().await {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(e),
        }
    }
    let schema = reader
        .decoder
        .schema()
        .unwrap_or_else(|| Arc::new(Schema::empty()));
    Ok(Started {
        schema,
        running,
        batches: futures::stream::unfold(reader, |mut r| async move {
            r.next_batch().await.map(|b| (b, r))
        })
        .boxed(),
    })
}

/// Describes `sql` for `auth` without running it: the guard and the
/// caller's grants as for [`start`], then DuckDB's prepare reports the
/// result's and the parameters' Arrow schemas. Listed, cancellable and
/// audited like a query (it binds the statement, which may read a file's
/// metadata), as `api=flight-describe`: ADBC prepares every statement it
/// executes, so each query through it is one description and one run.
pub async fn describe(
    state: &AppState,
    auth: &QueryAuth,
    sql: String,
    options: CallOptions,
) -> Result<Described, Status> {
    let started = Instant::now();
    let limits = &state.config.limits;
    admit(limits, &sql)?;
    let reg = register(state, "flight-describe", auth, &sql)?;
    let running = reg.running.clone();
    let id = running.id.clone();
    let out = DescribeSlot::default();
    let run_limits = RunLimits {
        started,
        timeout: Duration::from_millis(limits.query_timeout_ms(options.timeout_ms)),
        max_rows: limits.default_rows(),
        rows_asked: false,
        stall_timeout: Duration::from_millis(limits.send_stall_timeout_ms),
        max_value_bytes: limits.max_value_bytes,
    };
    let job = QueryJob::describe(
        sql,
        state.engine.rules_for(auth.access.clone()),
        run_limits,
        running.clone(),
        out.clone(),
    );
    let ended = match run(state, job).await {
        Ok(mut output) => {
            // The body is empty; its end is the worker's.
            let mut end = Ok(());
            while let Some(chunk) = output.body.next().await {
                if let Err(e) = chunk {
                    end = Err(status::of_body(&e, Some(&id)));
                    break;
                }
            }
            end
        }
        Err(e) => {
            running.set_outcome(e.outcome());
            drop(reg);
            return Err(status::of_api(&e, Some(&id)));
        }
    };
    running.set_outcome(Outcome {
        status: if ended.is_ok() { 200 } else { 500 },
        kind: if ended.is_ok() { "ok" } else { "failed" }.into(),
        error_class: None,
    });
    drop(reg);
    ended?;
    out.get().cloned().ok_or_else(|| {
        status::of_api(
            &ApiError::Internal("the statement was not described".into()),
            Some(&id),
        )
    })
}

/// The SQL's size and presence, checked before anything else.
fn admit(limits: &crate::config::LimitsConfig, sql: &str) -> Result<(), Status> {
    if sql.len() as u64 > limits.max_sql_bytes {
        return Err(status::of_api(
            &ApiError::PayloadTooLarge {
                limit: limits.max_sql_bytes,
            },
            None,
        ));
    }
    if sql.trim().is_empty() {
        return Err(status::invalid("No SQL: the request holds no SQL text"));
    }
    Ok(())
}

/// The statement's entry in the registry of running queries, as `api`
/// (`flight`, or `flight-describe` for a description).
fn register(
    state: &AppState,
    api: &'static str,
    auth: &QueryAuth,
    sql: &str,
) -> Result<Registration, Status> {
    state
        .queries
        .register_as(
            api,
            None,
            auth.name.clone(),
            auth.roles.clone(),
            sql,
            state.health.epoch(),
        )
        .map_err(|e| status::of_api(&crate::api::request::id_error(e), None))
}

/// Runs `job` with the credential retry, by its deadline.
async fn run(state: &AppState, job: QueryJob) -> Result<QueryOutput, ApiError> {
    let deadline = job.started + job.timeout;
    let (pool, shutdown) = (&state.engine.pool, &state.shutdown);
    with_fresh_credentials(&state.rotator, &state.health, deadline, |retried| {
        let mut job = job.clone();
        job.retried = retried;
        execute::run(pool, job, shutdown.clone())
    })
    .await
    .map(|(output, _)| output)
    .map_err(ApiError::Query)
}

/// Reads the IPC body into batches and keeps the query registered until
/// the body ends (the audit line then) or the reader is dropped.
struct Reader {
    body: BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    decoder: StreamDecoder,
    ready: VecDeque<RecordBatch>,
    registration: Option<Registration>,
    id: String,
}

impl Reader {
    /// Decodes the next chunk of the body: `false` at its end.
    async fn next_chunk(&mut self) -> Result<bool, Status> {
        let Some(reg) = &self.registration else {
            return Ok(false);
        };
        match self.body.next().await {
            Some(Ok(chunk)) => {
                reg.running
                    .bytes
                    .fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let mut buffer = Buffer::from(chunk);
                while !buffer.is_empty() {
                    match self.decoder.decode(&mut buffer) {
                        Ok(Some(batch)) => self.ready.push_back(batch),
                        Ok(None) => {}
                        Err(e) => {
                            return Err(self.fail_internal(format!("reading DuckDB's Arrow: {e}")))
                        }
                    }
                }
                Ok(true)
            }
            Some(Err(e)) => {
                let status = status::of_body(&e, Some(&self.id));
                if let Some(r) = self.registration.take() {
                    r.running.set_outcome(Outcome {
                        status: 200,
                        kind: "failed-while-streaming".into(),
                        error_class: None,
                    });
                }
                Err(status)
            }
            None => {
                if let Some(r) = self.registration.take() {
                    r.running.set_outcome(Outcome {
                        status: 200,
                        kind: "ok".into(),
                        error_class: None,
                    });
                }
                Ok(false)
            }
        }
    }

    fn fail_internal(&mut self, cause: String) -> Status {
        if let Some(r) = self.registration.take() {
            r.running.set_outcome(Outcome {
                status: 500,
                kind: "internal".into(),
                error_class: None,
            });
        }
        status::of_api(&ApiError::Internal(cause), Some(&self.id))
    }

    /// The next batch, an error that ends the result, or `None` at its end.
    async fn next_batch(&mut self) -> Option<Result<RecordBatch, Status>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(Ok(b));
            }
            match self.next_chunk().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
