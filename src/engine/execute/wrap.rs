//! Wrappers around the client's statement that let DuckDB render the values
//! a format takes as DuckDB's text (CSV casts, JSON renderings, Arrow's
//! interval range check). Every wrapper is judged by the guard before it runs.

use crate::encode::{Format, Mark};
use crate::engine::guard;
use crate::engine::sink;

/// The longest text wrapper the gateway builds (nested types can make the
/// rendering expressions grow); beyond it, Arrow's values serve.
pub(super) const MAX_WRAPPER_BYTES: usize = 256 * 1024;

/// The client's statement wrapped as `SELECT <expr AS name>, ... FROM
/// (<statement>)`: `expr(i, type)` gives column `i`'s expression over its
/// position `#i` (`None`: the column as it is), so repeated names do no
/// harm. `None` when there is no statement text to wrap, or when no column
/// changes and `always` is false.
pub(super) fn wrap_columns(
    accepted: &guard::Accepted,
    always: bool,
    expr: impl Fn(usize, &str) -> Option<String>,
) -> Option<String> {
    let result = accepted.result.as_ref()?;
    let inner = result.sql.as_deref()?;
    if result.names.is_empty() || result.types.len() != result.names.len() {
        return None;
    }
    let exprs: Vec<Option<String>> = result
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| expr(i, t))
        .collect();
    // Most results need no wrapper: nothing more is built for them.
    if !always && exprs.iter().all(Option::is_none) {
        return None;
    }
    let columns: Vec<String> = exprs
        .into_iter()
        .zip(&result.names)
        .enumerate()
        .map(|(i, (e, name))| {
            let e = e.unwrap_or_else(|| format!("#{}", i + 1));
            format!("{e} AS \"{}\"", name.replace('"', "\"\""))
        })
        .collect();
    Some(format!(
        "SELECT {} FROM (\n{inner}\n) AS duckgate_wrapped",
        columns.join(", ")
    ))
}

/// CSV: DuckDB renders every column as its VARCHAR text (what its COPY ...
/// (FORMAT csv) writer writes). Integers, booleans and VARCHAR read the same
/// in Arrow as in DuckDB's text: those pass through uncast (casting costs
/// DuckDB and the export). Always wrapped: the CSV writer expects it.
pub(super) fn csv_text_sql(accepted: &guard::Accepted) -> Option<String> {
    wrap_columns(accepted, true, |i, t| {
        sink::csv_needs_cast(t).then(|| format!("CAST(#{} AS VARCHAR)", i + 1))
    })
}

/// JSON and NDJSON: DuckDB renders, as its own text, the values of the
/// columns whose JSON Arrow cannot carry (see `ResultShape::json_exprs`).
pub(super) fn json_text_sql(accepted: &guard::Accepted) -> Option<String> {
    let exprs = &accepted.result.as_ref()?.json_exprs;
    wrap_columns(accepted, false, |i, _| {
        exprs.get(i).filter(|e| !e.is_empty()).cloned()
    })
}

/// Arrow: DuckDB renders what its Arrow export has no type for (a VARIANT
/// as its JSON, a TYPE as its text: see `ResultShape::arrow_exprs`). And
/// Arrow's INTERVAL (month, day, nanosecond) cannot hold DuckDB's
/// microseconds beyond ±2^63 ns (about 292 years of hours), and DuckDB's
/// export wraps such values silently: for a query with INTERVAL columns the
/// Arrow answer is wrapped so that such a value fails the query with a
/// message that says so, instead of arriving wrong.
pub(super) fn arrow_text_sql(accepted: &guard::Accepted) -> Option<String> {
    let result = accepted.result.as_ref()?;
    let (names, exprs) = (&result.names, &result.arrow_exprs);
    wrap_columns(accepted, false, |i, t| {
        if let Some(e) = exprs.get(i).filter(|e| !e.is_empty()) {
            return Some(e.clone());
        }
        (t == "INTERVAL").then(|| {
            let c = format!("#{}", i + 1);
            let message = sink::arrow_interval_refusal(&names[i]).replace('\'', "''");
            format!(
                "CASE WHEN {} THEN {c} ELSE error('{message}') END",
                sink::interval_fits_arrow(&c)
            )
        })
    })
}

/// Where the wrapper of `format` (`json_text_sql`, `arrow_text_sql`) leaves
/// values DuckDB rendered for want of an Arrow type, per column (see
/// [`crate::encode::marks`]); nothing for the other formats.
pub(super) fn text_marks(accepted: &guard::Accepted, format: Format) -> Vec<Vec<Mark>> {
    let Some(result) = accepted.result.as_ref() else {
        return Vec::new();
    };
    match format {
        Format::Json | Format::Ndjson => result.json_marks.clone(),
        Format::Arrow => result.arrow_marks.clone(),
        Format::Csv | Format::Parquet => Vec::new(),
    }
}
