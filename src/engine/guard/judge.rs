//! The parse-tree layer: what kind of statement it is and whether the
//! policy admits that kind, judged on every statement it nests.

use super::describe::Statement;
use super::*;

/// A statement whose tree nests deeper than the guard reads (a client's
/// error, like DuckDB's own expression-depth limit).
pub(super) fn too_deep(depth: usize) -> Refusal {
    unparsable(format!(
        "Parser Error: the statement nests {depth} levels deep as DuckDB reads it; the gateway \
         reads at most {} (split a long UNION into several statements)",
        describe::MAX_TREE_DEPTH
    ))
}

/// The parse-tree layer.
pub(super) fn judge(s: &Statement, rules: &Rules, depth: u8) -> Result<Accepted, Refusal> {
    let kind = kind_name(s);
    if s.unreadable {
        return Err(forbid(kind, "the guard cannot read every part of it"));
    }
    match s.kind.as_str() {
        "SELECT" => {
            check_parts(s, rules, &kind)?;
            Ok(judged(kind, true))
        }
        "EXPLAIN" => {
            let Some(inner) = s.inner.as_deref().filter(|_| depth == 0) else {
                return Err(forbid(kind, "only one EXPLAIN of one statement"));
            };
            let accepted = judge(inner, rules, depth + 1)?;
            Ok(judged(
                format!("{kind} {}", accepted.kind),
                accepted.read_only,
            ))
        }
        "INSERT" | "UPDATE" | "DELETE" => {
            if rules.policy == Policy::ReadOnly {
                return Err(forbid(kind, READ_ONLY));
            }
            check_parts(s, rules, &kind)?;
            writes(kind, rules)
        }
        "CREATE" | "DROP" | "ALTER" => {
            check_object(s, &kind)?;
            if rules.policy == Policy::ReadOnly {
                return Err(forbid(kind, READ_ONLY));
            }
            check_parts(s, rules, &kind)?;
            writes(kind, rules)
        }
        _ => Err(forbid(kind, refusal_reason(&s.kind))),
    }
}

/// A statement of `kind` accepted by its kind alone: nothing of its result
/// or sources known yet.
fn judged(kind: String, read_only: bool) -> Accepted {
    Accepted {
        kind,
        read_only,
        result: None,
        objects: Vec::new(),
        sources: Vec::new(),
        reads: Vec::new(),
        described: false,
    }
}

/// A write of `kind`, accepted where the policy allows writes.
fn writes(kind: String, rules: &Rules) -> Result<Accepted, Refusal> {
    match rules.policy {
        Policy::ReadOnly => Err(forbid(kind, READ_ONLY)),
        Policy::ReadWrite => Ok(judged(kind, false)),
    }
}

/// Every part of the statement's parse tree checked against the path rules.
fn check_parts(s: &Statement, rules: &Rules, kind: &str) -> Result<(), Refusal> {
    s.parts.iter().try_for_each(|p| {
        tree::check_parse_tree(p, &rules.paths).map_err(|f| {
            forbid(
                f.what.clone(),
                format!("{} (in {kind})", f.reason).replace(" (in SELECT)", ""),
            )
        })
    })
}

/// The kinds of object a client may create, alter or drop (tables, views,
/// schemas, sequences, indexes and types), never temporary ones.
fn check_object(s: &Statement, kind: &str) -> Result<(), Refusal> {
    let object = s.object.as_deref().unwrap_or("");
    match object {
        "Secret" => {
            return Err(forbid(
                kind,
                "secrets belong to the gateway; clients may not create, replace or drop them",
            ))
        }
        "Macro Function" | "Table Macro Function" => {
            return Err(forbid(
                kind,
                "macros would change what function names mean for every client",
            ))
        }
        "Table" | "View" | "Schema" | "Sequence" | "Index" | "Type" => {}
        _ => {
            return Err(forbid(
                kind,
                "only tables, views, schemas, sequences, indexes and types may be changed",
            ))
        }
    }
    if s.temporary {
        return Err(forbid(
            kind,
            "temporary objects live on one pooled connection, which the next request \
             may not get; create a regular object instead",
        ));
    }
    Ok(())
}

fn refusal_reason(kind: &str) -> &'static str {
    match kind {
        "TRANSACTION" => "each request is its own transaction",
        "CALL" => "CALL is not available to clients; use SELECT * FROM function(...)",
        "MULTI" => {
            "DuckDB expands this into several statements (a PIVOT without an IN list \
             creates a type first); list the pivot values with IN (...)"
        }
        _ => "this statement kind is never available to clients",
    }
}

/// A human name for the statement, e.g. `CREATE TABLE`, `DESCRIBE`.
fn kind_name(s: &Statement) -> String {
    match s.kind.as_str() {
        "CREATE" | "DROP" | "ALTER" => match s.object.as_deref() {
            Some("Macro Function" | "Table Macro Function") => format!("{} MACRO", s.kind),
            Some(o) if !o.is_empty() => {
                let temp = if s.temporary { "TEMP " } else { "" };
                format!("{} {temp}{}", s.kind, o.to_ascii_uppercase())
            }
            _ => s.kind.clone(),
        },
        "SELECT" => select_kind(s),
        "EXPLAIN" if s.analyze => "EXPLAIN ANALYZE".into(),
        _ if s.verb.is_some() => s.verb.clone().unwrap_or_default(),
        "VARIABLE_SET" => "SET VARIABLE".into(),
        "COPY_DATABASE" => "COPY DATABASE".into(),
        "EXPORT" => "EXPORT DATABASE".into(),
        "CREATE_FUNC" => "CREATE FUNCTION".into(),
        "UPDATE_EXTENSIONS" => "UPDATE EXTENSIONS".into(),
        "MERGE_INTO" => "MERGE INTO".into(),
        other => other.to_string(),
    }
}

/// DESCRIBE, SHOW and SUMMARIZE are SELECTs over a show reference.
fn select_kind(s: &Statement) -> String {
    let show = s
        .parts
        .first()
        .and_then(|p| p.pointer("/node/from_table"))
        .filter(|t| t.get("type").and_then(|v| v.as_str()) == Some("SHOW_REF"))
        .and_then(|t| t.get("show_type"))
        .and_then(|v| v.as_str());
    match show {
        Some("SUMMARY") => "SUMMARIZE".into(),
        Some("DESCRIBE") => "DESCRIBE".into(),
        Some(other) => other.to_string(),
        None => "SELECT".into(),
    }
}
