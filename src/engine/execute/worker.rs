//! The blocking half: owns a pooled connection, asks the guard (verdicts
//! cached per connection and catalog epoch), prepares, binds, and hands the
//! statement to the writer its answer needs (CSV COPY, spool, or stream).

use std::sync::Arc;
use std::time::Instant;

use duckdb::types::Value;
use tokio::sync::mpsc;

use crate::encode::{self, Format};
use crate::engine::guard;
use crate::engine::pipe;
use crate::engine::pool::{Lease, Pooled};

use super::control::{cancel_error, stopped_error, QueryControl};
use super::csv_copy::copy_csv;
use super::error::{error_class, run_error, QueryError};
use super::job::{Param, QueryJob};
use super::parquet_copy::{copy_parquet, parquet_copy};
use super::sender::{Msg, Sender};
use super::spool::spool_statement;
use super::stream::stream_statement;
use super::verdict::{judged, verdict};
use super::wrap::{arrow_text_sql, csv_text_sql, json_text_sql, text_marks, MAX_WRAPPER_BYTES};

/// The blocking half. Owns the pooled connection until it returns.
/// `parsed`: DuckDB's parse of the job's text, when admission made one.
#[allow(clippy::too_many_arguments)]
pub(super) fn work(
    mut slot: Pooled,
    lease: Arc<Lease>,
    job: QueryJob,
    parsed: Option<guard::Parsed>,
    tx: mpsc::Sender<Msg>,
    control: Arc<QueryControl>,
    runtime: tokio::runtime::Handle,
    csv_copy: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    crate::engine::priority::lower_for_queries();
    // Its tasks may want DuckDB's background threads: they run before it
    // is planned (`engine::threads`).
    let _threads = lease.hold_threads();
    let started = Instant::now();
    slot.track_progress(true);
    let sender = Sender {
        tx,
        control: control.clone(),
        runtime,
        stall: job.stall_timeout,
        inline: None,
    };
    let outcome = work_inner(
        &mut slot,
        &job,
        parsed,
        &sender,
        &control,
        csv_copy.is_some(),
    );
    drop(csv_copy);
    mark_quick(&mut slot, &job, &outcome, &control, started.elapsed());
    finish(slot, &lease, &job, &outcome, sender, started);
}

/// Gives the connection back after a run, counting its outcome.
pub(super) fn finish(
    slot: Pooled,
    lease: &Lease,
    job: &QueryJob,
    outcome: &Result<(), QueryError>,
    sender: Sender,
    started: Instant,
) {
    if let Some(t) = &job.tracker {
        // The connection is about to serve someone else: its progress is
        // no longer this query's.
        t.connection.store(0, std::sync::atomic::Ordering::SeqCst);
    }
    // If the connection still holds a transaction (it should not), roll back
    // so the pool's recycle check does not have to discard it.
    if !slot.conn.is_autocommit() {
        let _ = slot.conn.execute_batch("ROLLBACK");
    }
    // Counted before the connection goes back, so whoever sees the pool
    // drained also sees the outcome.
    let label = match outcome {
        Ok(()) => "ok",
        Err(e) => e.outcome(),
    };
    let (queries, duration) = outcome_handles(label);
    queries.increment(1);
    duration.record(started.elapsed().as_secs_f64());
    sender.control.finish();
    drop(sender);
    lease.release(slot);
}

/// The query counter and duration histogram of an outcome, looked up by
/// label once per thread (a thread records into one recorder for its life).
fn outcome_handles(label: &'static str) -> (metrics::Counter, metrics::Histogram) {
    thread_local! {
        static HANDLES: std::cell::RefCell<Vec<(&'static str, metrics::Counter, metrics::Histogram)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    HANDLES.with_borrow_mut(|handles| {
        if let Some((_, c, h)) = handles.iter().find(|(l, _, _)| *l == label) {
            return (c.clone(), h.clone());
        }
        let c = metrics::counter!("duckgate_queries_total", "outcome" => label);
        let h = metrics::histogram!("duckgate_query_duration_seconds", "outcome" => label);
        handles.push((label, c.clone(), h.clone()));
        (c, h)
    })
}

/// Runs one job on its connection: judged, granted, its row policy
/// installed, then described, spooled or written in the format it asked.
pub(super) fn work_inner(
    slot: &mut Pooled,
    job: &QueryJob,
    parsed: Option<guard::Parsed>,
    tx: &Sender,
    control: &QueryControl,
    csv_copy: bool,
) -> Result<(), QueryError> {
    use std::sync::atomic::Ordering::SeqCst;
    let epoch = current_epoch(slot);
    let accepted = match verdict(slot, job, parsed, epoch) {
        Ok(a) => a,
        Err(r) => return tx.fail(QueryError::Refused(r)),
    };
    if let Err(e) = grant_and_install_policy(slot, job, &accepted) {
        return tx.fail(e);
    }
    if let Some(t) = &job.tracker {
        let _ = t.kind.set(accepted.kind.clone());
        t.advance(crate::engine::queries::QueryState::Running);
    }
    // Described, not run: nothing executes, the catalog stays as it is.
    if let Some(out) = &job.describe {
        return describe_job(slot, &accepted, job, tx, control, out, epoch);
    }
    // A statement that may change the catalog makes every verdict older
    // than it stale, whatever its outcome: the epoch moves when it starts
    // (so nothing judged while it runs is kept) and when it is over.
    let _epoch = (!accepted.read_only).then(|| {
        slot.catalog_epoch.fetch_add(1, SeqCst);
        BumpOnDrop(slot.catalog_epoch.clone())
    });
    if let Err(r) = control.start() {
        let _ = r;
        return tx.fail(stopped_error(control, job));
    }
    if let Some(t) = &job.tracker {
        t.connection.store(slot.connection_id + 1, SeqCst);
    }
    if let Some(sink) = &job.sink {
        return spool_statement(slot, &accepted, job, tx, control, sink.as_ref(), epoch);
    }
    if job.format == Format::Parquet {
        return write_parquet(slot, &accepted, job, tx, control);
    }
    if job.format == Format::Csv && csv_copy {
        if let Some(done) = try_csv_copy(slot, &accepted, job, tx, control) {
            return done;
        }
    }
    write_stream(slot, &accepted, job, tx, control, epoch)
}

/// The connection's catalog epoch, its cache of prepared statements
/// flushed if the catalog moved since they were prepared.
fn current_epoch(slot: &mut Pooled) -> u64 {
    // A verdict depends only on the text and the policy, so a text this
    // connection has accepted before is not parsed and bound a second time.
    use std::sync::atomic::Ordering::SeqCst;
    let epoch = slot.catalog_epoch.load(SeqCst);
    if slot.prepared_epoch != epoch {
        slot.conn.flush_prepared_statement_cache();
        slot.prepared_epoch = epoch;
    }
    epoch
}

/// The caller's grants checked against the accepted text (counted), then
/// its row filters and masks installed on the connection.
fn grant_and_install_policy(
    slot: &mut Pooled,
    job: &QueryJob,
    accepted: &guard::Accepted,
) -> Result<(), QueryError> {
    // The verdict is the text's; the grants are the caller's.
    if let Some(access) = &job.rules.access {
        let decision = access.check(accepted, &job.sql, || {
            guard::named_tables(&slot.raw, &job.sql)
        });
        metrics::counter!(
            "duckgate_grant_decisions_total",
            "role" => access.label(),
            "decision" => if decision.is_ok() { "allowed" } else { "refused" }
        )
        .increment(1);
        decision.map_err(QueryError::Refused)?;
    }
    // Row filters and masks: installed on the connection before anything
    // is prepared on it (DuckDB's optimizer applies them, `engine::policy`).
    let policy = match &job.rules.access {
        Some(access) => access
            .policy(accepted, job.rules.confined_plans)
            .map_err(QueryError::Refused)?,
        None => None,
    };
    if let Err(e) = slot.use_policy(policy) {
        tracing::error!(error.cause = %e, "a row policy could not be installed");
        return Err(QueryError::Internal(format!("row policy: {e}")));
    }
    Ok(())
}

/// Describes the job's answer without running it: the schema an Arrow
/// answer has, of its wrapper where DuckDB renders what its Arrow export
/// has no type for. Remembered with the text's verdict (current: `verdict`
/// has just judged it or found it current), so a text described here
/// before is not planned again.
fn describe_job(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
    out: &super::describe::DescribeSlot,
    epoch: u64,
) -> Result<(), QueryError> {
    if let Some(d) = slot
        .verdict(&job.sql, epoch, job.rules.policy)
        .and_then(|v| v.described.clone())
    {
        metrics::counter!("duckgate_describes_remembered_total").increment(1);
        return super::describe::answer(d, accepted, tx, control, out);
    }
    let wrapper = arrow_text_sql(accepted)
        .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES && judged(slot, sql, &job.rules, epoch));
    let marks = if wrapper.is_some() {
        text_marks(accepted, Format::Arrow)
    } else {
        Vec::new()
    };
    let sql = wrapper.as_deref().unwrap_or(&job.sql);
    match super::describe::described(&slot.raw, accepted, sql, &marks) {
        Ok(d) => {
            if let Some(v) = slot.verdicts.get_mut(&job.sql) {
                if v.epoch == epoch && v.policy == job.rules.policy {
                    v.described = Some(d.clone());
                }
            }
            super::describe::answer(d, accepted, tx, control, out)
        }
        Err(e) => tx.fail(e),
    }
}

/// Writes a Parquet answer with DuckDB's own COPY writer, streamed (see
/// `parquet_copy`): there is no other way to it, so a statement DuckDB
/// cannot COPY (one that returns no rows) has no Parquet answer.
fn write_parquet(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let copy = accepted
        .result
        .as_ref()
        .and_then(|r| r.sql.as_deref())
        .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES)
        .and_then(|sql| parquet_copy(sql, job));
    let Some((copy, fail_past)) = copy else {
        return tx.fail(QueryError::FormatUnavailable(format!(
            "a {} statement has no result DuckDB can write as Parquet; ask for json, ndjson, csv or arrow",
            accepted.kind
        )));
    };
    let (token, connection_id) = (slot.pipe_token, slot.connection_id);
    control.runs(statement_sql(accepted).map(|s| (copy.as_str(), s)));
    match slot.conn.prepare_cached(&copy) {
        Ok(mut stmt) => copy_parquet(
            &mut stmt,
            token,
            connection_id,
            &accepted.kind,
            fail_past,
            job,
            tx,
            control,
        ),
        Err(e) => tx.fail(run_error(&e, control, job)),
    }
}

/// Writes a CSV answer with DuckDB's own COPY writer, streamed (see
/// `pipe`), when DuckDB can COPY the query. `None`: it cannot (or the COPY
/// did not prepare), and the Arrow path serves (the same bytes, written
/// from DuckDB's casts).
fn try_csv_copy(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Option<Result<(), QueryError>> {
    let copy = accepted
        .result
        .as_ref()
        .and_then(|r| r.sql.as_deref())
        .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES)
        .and_then(|sql| {
            // Parsed once per text and connection, like verdicts.
            if !slot.copies.contains_key(sql) {
                slot.copies
                    .insert(sql.to_string(), pipe::copy_sql(sql, pipe::CopyFormat::Csv));
            }
            slot.copies.get(sql).cloned().flatten()
        });
    let (token, connection_id) = (slot.pipe_token, slot.connection_id);
    let copy = copy?;
    control.runs(statement_sql(accepted).map(|s| (copy.as_str(), s)));
    match slot.conn.prepare_cached(&copy) {
        Ok(mut stmt) => Some(copy_csv(
            &mut stmt,
            token,
            connection_id,
            accepted,
            job,
            tx,
            control,
        )),
        Err(e) => {
            if let Some(err) = cancel_error(control, job) {
                return Some(tx.fail(err));
            }
            tracing::warn!(error_class = %error_class(&e), "the CSV COPY did not prepare; using Arrow values");
            None
        }
    }
}

/// Writes the answer from Arrow batches: of DuckDB's text rendering of the
/// query where the format has one that prepares, else of the query itself.
fn write_stream(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
    epoch: u64,
) -> Result<(), QueryError> {
    // Prepared statements are cached per connection (DuckDB rebinds them
    // when the catalog changes); one whose result was not read to the end is
    // discarded rather than kept with its pending result.
    // CSV is DuckDB's own text: the query wrapped so DuckDB casts every
    // column to VARCHAR, as its COPY ... (FORMAT csv) writer does. Should
    // DuckDB's rendering of the query not prepare, the Arrow path serves.
    // JSON and NDJSON likewise let DuckDB render the few values Arrow
    // cannot carry faithfully (intervals, TIMETZ, BIT, BIGNUM, map keys).
    let text_sql = match job.format {
        Format::Csv => csv_text_sql(accepted),
        Format::Json | Format::Ndjson => json_text_sql(accepted),
        Format::Arrow => arrow_text_sql(accepted),
        Format::Parquet => None,
    }
    .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES);
    // What runs is what the guard judged: the wrapper too (once per text
    // and catalog epoch, like any statement).
    let text_sql = text_sql.filter(|sql| judged(slot, sql, &job.rules, epoch));
    let wrapped = text_sql
        .as_deref()
        .and_then(|sql| match slot.conn.prepare_cached(sql) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error_class = %error_class(&e), "text wrapper did not prepare; using Arrow values");
                None
            }
        });
    let csv_names = wrapped
        .as_ref()
        .filter(|_| job.format == Format::Csv)
        .and_then(|_| accepted.result.as_ref().map(|r| r.names.clone()));
    let marks = if wrapped.is_some() {
        text_marks(accepted, job.format)
    } else {
        Vec::new()
    };
    let mut stmt = match wrapped {
        Some(s) => {
            let text = text_sql.as_deref().unwrap_or_default();
            control.runs(statement_sql(accepted).map(|s| (text, s)));
            s
        }
        None => {
            control.runs(None);
            match slot.conn.prepare_cached(&job.sql) {
                Ok(s) => s,
                Err(e) => return tx.fail(run_error(&e, control, job)),
            }
        }
    };
    match stream_statement(&mut stmt, accepted, csv_names, &marks, job, tx, control) {
        Ok(true) => Ok(()),
        Ok(false) => {
            stmt.discard();
            Ok(())
        }
        Err(e) => {
            stmt.discard();
            Err(e)
        }
    }
}

/// The client's statement as DuckDB's reading of it spans it (what the
/// gateway's wrappers hold).
pub(super) fn statement_sql(accepted: &guard::Accepted) -> Option<&str> {
    accepted.result.as_ref().and_then(|r| r.sql.as_deref())
}

/// Remembers whether `job`'s text may run inline next time on this
/// connection (see `inline`): it succeeded within [`QUICK`] and its answer
/// was at most [`INLINE_BYTES`](super::sender::INLINE_BYTES).
pub(super) fn mark_quick(
    slot: &mut Pooled,
    job: &QueryJob,
    outcome: &Result<(), QueryError>,
    control: &QueryControl,
    took: std::time::Duration,
) {
    // A description's time says nothing of the statement's.
    if job.describe.is_some() {
        return;
    }
    let quick = outcome.is_ok()
        && took <= QUICK
        && control.sent.load(std::sync::atomic::Ordering::Relaxed) <= super::sender::INLINE_BYTES;
    if let Some(v) = slot.verdicts.get_mut(&job.sql) {
        v.quick = quick;
    }
}

/// A statement whose last run took at most this long may run inline.
pub(super) const QUICK: std::time::Duration = std::time::Duration::from_millis(2);

/// The job's parameters as DuckDB values, once their count is right.
pub(super) fn param_values(
    stmt: &duckdb::Statement<'_>,
    job: &QueryJob,
) -> Result<Vec<Value>, QueryError> {
    let expected = stmt.parameter_count();
    if expected != job.params.len() {
        return Err(QueryError::ParamCount {
            expected,
            got: job.params.len(),
        });
    }
    Ok(job.params.iter().map(Param::to_value).collect())
}

/// Why binding `values` or executing failed: the cancellation, if there was
/// one, else the parameter or DuckDB's error.
pub(super) fn execution_error(
    e: &duckdb::Error,
    values: &[Value],
    control: &QueryControl,
    job: &QueryJob,
) -> QueryError {
    cancel_error(control, job).unwrap_or_else(|| match e {
        duckdb::Error::ToSqlConversionFailure(inner) => QueryError::Param {
            // The first value that does not convert (1-based, as `$n`).
            index: values
                .iter()
                .position(|v| duckdb::ToSql::to_sql(v).is_err())
                .map_or(1, |i| i + 1),
            message: inner.to_string(),
        },
        _ => run_error(e, control, job),
    })
}

/// Binds the parameters and executes, ready to step through Arrow batches.
pub(super) fn execute_arrow(
    stmt: &mut duckdb::Statement<'_>,
    job: &QueryJob,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let values = param_values(stmt, job)?;
    stmt.stream_arrow(duckdb::params_from_iter(values.iter()))
        .map(|_| ())
        .map_err(|e| execution_error(&e, &values, control, job))
}

/// DuckDB's own type names of an executed statement's columns, where the
/// binder gave them (the guard asked), else derived from the exported type.
pub(super) fn column_types(
    stmt: &duckdb::Statement<'_>,
    accepted: &guard::Accepted,
    schema: &arrow::datatypes::Schema,
) -> Vec<String> {
    let described = accepted
        .result
        .as_ref()
        .filter(|r| r.types.len() == schema.fields().len());
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match described.map(|r| r.types[i].as_str()) {
            Some(t) if t != "UNKNOWN" => t.to_string(),
            _ => encode::logical_type_name(&stmt.column_logical_type(i), f.data_type()),
        })
        .collect()
}

/// Bumps the catalog epoch when the statement that may have changed the
/// catalog is over.
pub(super) struct BumpOnDrop(Arc<std::sync::atomic::AtomicU64>);

impl Drop for BumpOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
