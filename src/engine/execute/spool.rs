//! Keeping an async statement's result in its spool instead of sending it.

use arrow::array::RecordBatch;

use crate::engine::guard;
use crate::engine::pool::Pooled;
use crate::engine::sink::{self, BatchSink, ResultLayout};

use super::control::{cancel_error, QueryControl};
use super::error::{error_class, run_error, QueryError};
use super::job::QueryJob;
use super::sender::Sender;
use super::stream::{oversized_value, row_cap, within_row_limit};
use super::verdict::judged;
use super::worker::{column_types, execute_arrow};
use super::wrap::MAX_WRAPPER_BYTES;

/// The spool wrapper's layout and the marks of its rendered fields.
type Wrapping = (ResultLayout, Vec<Vec<crate::encode::Mark>>);

/// Runs one accepted statement into `sink` (an async statement's spool),
/// wrapped so that every format can be served from what is kept (see
/// `sink`). The answer is an empty body once the result is complete.
pub(super) fn spool_statement(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
    sink: &dyn BatchSink,
    epoch: u64,
) -> Result<(), QueryError> {
    let (mut stmt, layout) = match prepare_spooled(slot, accepted, job, control, epoch) {
        Ok(p) => p,
        Err(e) => return tx.fail(e),
    };
    match keep(&mut stmt, accepted, layout, job, control, sink) {
        Ok(truncated) => {
            if truncated {
                stmt.discard();
            }
            tx.start_empty(&accepted.kind, control);
            Ok(())
        }
        Err(e) => {
            stmt.discard();
            tx.fail(e)
        }
    }
}

/// Prepares the spool's wrapper of the statement (judged like any
/// statement), else the statement itself, whose own values are kept.
fn prepare_spooled<'a>(
    slot: &'a mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    control: &QueryControl,
    epoch: u64,
) -> Result<(duckdb::CachedStatement<'a>, Option<Wrapping>), QueryError> {
    let wrapped = sink::spool_sql(accepted).filter(|(sql, _, _)| {
        sql.len() <= MAX_WRAPPER_BYTES && judged(slot, sql, &job.rules, epoch)
    });
    let prepared = wrapped.and_then(|(sql, layout, marks)| match slot.conn.prepare_cached(&sql) {
        Ok(s) => {
            control.runs(super::worker::statement_sql(accepted).map(|s| (sql.as_str(), s)));
            Some((s, Some((layout, marks))))
        }
        Err(e) => {
            tracing::warn!(error_class = %error_class(&e), "spool wrapper did not prepare; keeping the statement's own values");
            None
        }
    });
    match prepared {
        Some(p) => Ok(p),
        None => {
            control.runs(None);
            match slot.conn.prepare_cached(&job.sql) {
                Ok(s) => Ok((s, None)),
                Err(e) => Err(run_error(&e, control, job)),
            }
        }
    }
}

/// Executes the statement and keeps its result in `sink`, begun with its
/// layout and finished with its row count; true when the row limit cut it.
fn keep(
    stmt: &mut duckdb::Statement<'_>,
    accepted: &guard::Accepted,
    layout: Option<Wrapping>,
    job: &QueryJob,
    control: &QueryControl,
    sink: &dyn BatchSink,
) -> Result<bool, QueryError> {
    execute_arrow(stmt, job, control)?;
    let schema = stmt.schema();
    let (layout, schema) = match layout {
        // The spool's file says which fields hold what DuckDB rendered
        // for want of an Arrow type: pages read it from there.
        Some((l, marks)) => (l, crate::encode::mark_schema(&schema, &marks)),
        None => (
            ResultLayout::plain(
                accepted.kind.clone(),
                schema.fields().iter().map(|f| f.name().clone()).collect(),
                column_types(stmt, accepted, &schema),
            ),
            schema,
        ),
    };
    sink.begin(&layout, &schema)?;
    let (rows, truncated) = keep_batches(stmt, layout.names.len(), job, control, sink)?;
    if let Some(err) = cancel_error(control, job) {
        return Err(err);
    }
    sink.finish(rows, truncated)?;
    Ok(truncated)
}

/// Steps through the executed statement's batches into `sink`, each
/// checked against the value and row limits and counted; the rows kept
/// and whether the row limit cut the result.
fn keep_batches(
    stmt: &mut duckdb::Statement<'_>,
    own_columns: usize,
    job: &QueryJob,
    control: &QueryControl,
    sink: &dyn BatchSink,
) -> Result<(u64, bool), QueryError> {
    let mut rows: u64 = 0;
    let mut truncated = false;
    loop {
        if control.reason().is_some() {
            break;
        }
        let batch = match stmt.step() {
            Ok(Some(sa)) => RecordBatch::from(&sa),
            Ok(None) => break,
            Err(e) => return Err(run_error(&e, control, job)),
        };
        if batch.num_rows() == 0 {
            continue;
        }
        // The result's own values, not the text twins kept beside them
        // (a blob's CSV text is up to four times its size).
        let own: Vec<usize> = (0..own_columns.min(batch.num_columns())).collect();
        let checked = batch
            .project(&own)
            .map_err(|e| QueryError::Internal(e.to_string()))?;
        if let Some(size) = oversized_value(&checked, job.max_value_bytes) {
            return Err(QueryError::ValueTooLarge {
                size,
                limit: job.max_value_bytes,
            });
        }
        let Some((part, cut)) = within_row_limit(batch, rows, job.max_rows) else {
            if !job.rows_asked {
                return Err(row_cap(job));
            }
            truncated = true;
            break;
        };
        if cut && !job.rows_asked {
            return Err(row_cap(job));
        }
        truncated = cut;
        let take = part.num_rows();
        sink.batch(&part)?;
        rows += take as u64;
        if let Some(t) = &job.tracker {
            t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
        }
        if truncated {
            break;
        }
    }
    Ok((rows, truncated))
}
