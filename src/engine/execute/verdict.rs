//! The guard's verdicts on a pooled connection: a text's verdict is
//! remembered per connection and catalog epoch, so a text this connection
//! judged before is neither parsed nor bound again; a new one is judged on
//! the parse admission made of it, when it made one.

use std::sync::Arc;

use crate::engine::guard;
use crate::engine::pool::{Pooled, Verdict};

use super::job::QueryJob;

/// The guard's verdict on `job`'s text on this connection: remembered, or
/// judged now (on `parsed`, the parse admission made of a new text, if it
/// made one: the parse reads no catalog, so any connection's serves).
pub(super) fn verdict(
    slot: &mut Pooled,
    job: &QueryJob,
    parsed: Option<guard::Parsed>,
    epoch: u64,
) -> Result<Arc<guard::Accepted>, guard::Refusal> {
    // A verdict is the text's under one policy: a write accepted for a
    // read-write request is judged again for a read-only one (a GET of the
    // same text, a request that asked for `read_only`), which refuses it.
    let policy = job.rules.policy;
    if let Some(v) = slot.verdict(&job.sql, epoch, policy) {
        return Ok(v.accepted.clone());
    }
    let parsed = parsed.unwrap_or_else(|| guard::parse(&slot.raw, &job.sql));
    match guard::check_parsed(&slot.raw, &job.sql, parsed, &job.rules) {
        Ok(a) => {
            let a = Arc::new(a);
            let verdict = Verdict {
                epoch,
                policy,
                accepted: a.clone(),
                quick: false,
                described: None,
            };
            slot.verdicts.insert(job.sql.clone(), verdict);
            Ok(a)
        }
        Err(r) => Err(match &job.rules.access {
            Some(access) => {
                // What a refusal may name is read from the whole catalog.
                let unconfined = slot.unconfined().map(|_| ());
                let slot: &crate::engine::pool::Slot = slot;
                access.hide(
                    r,
                    &job.sql,
                    || guard::named_tables(&slot.raw, &job.sql),
                    || match unconfined {
                        Ok(()) => tables_and_views(&slot.conn),
                        Err(e) => {
                            tracing::error!(error.cause = %e, "the catalog could not be read to hide a confined caller's error");
                            Vec::new()
                        }
                    },
                )
            }
            None => r,
        }),
    }
}

/// Whether the guard accepts a wrapper the gateway built (judged once per
/// text and catalog epoch, like any statement).
pub(super) fn judged(slot: &mut Pooled, sql: &str, rules: &guard::Rules, epoch: u64) -> bool {
    if slot.verdict(sql, epoch, rules.policy).is_some() {
        return true;
    }
    match guard::check(&slot.raw, sql, rules) {
        Ok(a) => {
            slot.verdicts.insert(
                sql.to_string(),
                Verdict {
                    epoch,
                    policy: rules.policy,
                    accepted: Arc::new(a),
                    quick: false,
                    described: None,
                },
            );
            true
        }
        Err(r) => {
            tracing::warn!(refusal = ?r, "the guard refused a wrapper; using the statement's own values");
            false
        }
    }
}

/// Every table and view (catalog, schema, name), by DuckDB's catalog
/// (read with no caller's row policy on `conn`); none if it cannot be read.
fn tables_and_views(conn: &crate::engine::ffi::Connection) -> Vec<(String, String, String)> {
    let rows = conn
        .prepare(
            "SELECT database_name, schema_name, table_name FROM duckdb_tables() \
             UNION ALL SELECT database_name, schema_name, view_name FROM duckdb_views() \
             WHERE NOT internal",
        )
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<duckdb::Result<Vec<(String, String, String)>>>()
        });
    rows.unwrap_or_else(|e| {
        tracing::error!(error.cause = %e, "the catalog could not be read to hide a confined caller's error");
        Vec::new()
    })
}
