//! Walks DuckDB's serialized parse trees (from `describe`) and bound plans
//! (from `json_serialize_plan`) and checks every function, table function,
//! table reference and path against the allow-list and the path rules.

use serde_json::{Map, Value};

use super::functions::{self, Verdict};
use super::paths::PathRules;

/// A refusal found in a tree: what was named, and why it is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// e.g. `function current_setting()`, `table duckdb_logs`, `path 's3://…'`.
    pub what: String,
    /// Why it is refused.
    pub reason: String,
}

fn refuse(what: String, reason: impl Into<String>) -> Finding {
    Finding {
        what,
        reason: reason.into(),
    }
}

const NOT_LISTED: &str = "not on the gateway's allow-list of functions";

/// Checks a parse tree: functions by name, table functions and their path
/// arguments, table references.
pub fn check_parse_tree(value: &Value, rules: &PathRules) -> Result<(), Finding> {
    match value {
        Value::Object(map) => check_parse_object(map, rules),
        Value::Array(items) => items.iter().try_for_each(|v| check_parse_tree(v, rules)),
        _ => Ok(()),
    }
}

fn check_parse_object(map: &Map<String, Value>, rules: &PathRules) -> Result<(), Finding> {
    let str_of = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("");
    if map.contains_key("class") {
        // A parsed expression.
        if matches!(str_of("class"), "FUNCTION" | "WINDOW") {
            scalar_call(str_of("function_name"), str_of("schema"), str_of("catalog"))?;
        }
    } else {
        match str_of("type") {
            "TABLE_FUNCTION" => {
                if let Some(Value::Object(function)) = map.get("function") {
                    table_call(function, rules)?;
                    // Arguments are expressions like any other.
                    if let Some(args) = function.get("children") {
                        check_parse_tree(args, rules)?;
                    }
                }
                for (k, v) in map {
                    if k != "function" {
                        check_parse_tree(v, rules)?;
                    }
                }
                return Ok(());
            }
            "BASE_TABLE" => table_ref(
                str_of("catalog_name"),
                str_of("schema_name"),
                str_of("table_name"),
                rules,
            )?,
            _ => {}
        }
    }
    map.values().try_for_each(|v| check_parse_tree(v, rules))
}

/// Whether a parse tree names an `s3://` URL (any string of the tree: DuckDB
/// has decoded the literals) or a table of one of `lakes`.
pub fn mentions_s3(value: &Value, lakes: &[String]) -> bool {
    match value {
        Value::String(s) => s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("s3://")),
        Value::Array(items) => items.iter().any(|v| mentions_s3(v, lakes)),
        Value::Object(map) => {
            let str_of = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("");
            let lake = |name: &str| lakes.iter().any(|l| l.eq_ignore_ascii_case(name));
            (str_of("type") == "BASE_TABLE"
                && (lake(str_of("catalog_name")) || lake(str_of("schema_name"))))
                || map.values().any(|v| mentions_s3(v, lakes))
        }
        _ => false,
    }
}

fn qualified(schema: &str, catalog: &str) -> bool {
    !(catalog.is_empty() && (schema.is_empty() || schema == "main"))
}

/// A scalar, aggregate or window call, judged by its name. DuckDB reads
/// `x.upper()` as `upper` qualified with `x`, and its binder makes it
/// `upper(x)` when `x` is a column (method-call syntax); a qualified name
/// that is a real catalog or schema resolves there. Either way the name
/// called is `name`, on the allow-list or not, and the bound plan shows
/// which function it became (a macro expanded, a method bound).
fn scalar_call(name: &str, _schema: &str, _catalog: &str) -> Result<(), Finding> {
    let what = format!("function {name}()");
    match functions::lookup(name) {
        Some(e) if matches!(e.verdict, Verdict::Allow | Verdict::Table) => Ok(()),
        Some(e) if e.verdict == Verdict::Refuse => Err(refuse(what, e.reason.clone())),
        Some(_) => Err(refuse(what, "callable only as a table function")),
        None => Err(refuse(what, NOT_LISTED)),
    }
}

fn table_call(function: &Map<String, Value>, rules: &PathRules) -> Result<(), Finding> {
    let s = |k: &str| function.get(k).and_then(Value::as_str).unwrap_or("");
    let name = s("function_name");
    let what = format!("function {name}()");
    if qualified(s("schema"), s("catalog")) {
        return Err(refuse(
            what,
            "functions may not be qualified with a catalog or schema",
        ));
    }
    let verdict = functions::lookup(name).map(|e| (e.verdict, e.reason.clone()));
    match verdict {
        Some((Verdict::Table, _)) => Ok(()),
        Some((Verdict::Reader, _)) => reader_arguments(name, function, rules),
        Some((Verdict::Refuse | Verdict::Scan, reason)) => Err(refuse(what, reason)),
        Some(_) => Err(refuse(what, "not a table function clients may call")),
        None => Err(refuse(what, NOT_LISTED)),
    }
}

/// Reader options that leave state on the connection.
const CONNECTION_STATE_OPTIONS: &[&str] = &[
    "store_rejects",
    "rejects_table",
    "rejects_scan",
    "rejects_limit",
];

/// A reader's positional argument must be one literal path or a literal list
/// of them; named options follow. Computed paths are refused: the guard
/// checks exactly the text DuckDB will open.
fn reader_arguments(
    name: &str,
    function: &Map<String, Value>,
    rules: &PathRules,
) -> Result<(), Finding> {
    let what = format!("function {name}()");
    let children = function
        .get("children")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let positional: Vec<&Value> = children
        .iter()
        .filter(|c| option_name(c).is_none())
        .collect();
    // Options that make a reader create TEMP tables on the pooled connection
    // (CSV rejects), which the next request, of any token, would see.
    for c in children {
        let option = option_name(c).unwrap_or("");
        if CONNECTION_STATE_OPTIONS.contains(&option.to_ascii_lowercase().as_str()) {
            return Err(refuse(
                format!("option {option} of {name}()"),
                "it creates temporary tables on a pooled connection, which other requests would see",
            ));
        }
    }
    let [first] = positional.as_slice() else {
        return Err(refuse(
            what,
            "a reader takes exactly one path or list of paths, then named options",
        ));
    };
    let paths = literal_paths(first).ok_or_else(|| {
        refuse(
            what.clone(),
            "paths must be string literals (or a list of them), not computed",
        )
    })?;
    for p in paths {
        rules
            .check(p)
            .map_err(|reason| refuse(format!("path '{p}'"), reason))?;
    }
    Ok(())
}

/// The name of a table function's named argument, as DuckDB's binder reads
/// one (`Binder::BindTableFunctionParameters`): `name := value` (DuckDB
/// gives the value the alias `name`) or `name = value` (a comparison whose
/// left side is an unqualified column name). `None`: a positional argument.
fn option_name(argument: &Value) -> Option<&str> {
    fn s<'a>(v: &'a Value, k: &str) -> &'a str {
        v.get(k).and_then(Value::as_str).unwrap_or("")
    }
    if s(argument, "type") == "COMPARE_EQUAL" {
        let left = argument.get("left")?;
        if s(left, "class") != "COLUMN_REF" {
            return None;
        }
        return match left
            .get("column_names")
            .and_then(Value::as_array)?
            .as_slice()
        {
            [name] => name.as_str(),
            _ => None,
        };
    }
    Some(s(argument, "alias")).filter(|a| !a.is_empty())
}

fn literal_paths(v: &Value) -> Option<Vec<&str>> {
    let class = v.get("class").and_then(Value::as_str)?;
    match class {
        "CONSTANT" => {
            let value = v.get("value")?;
            let id = value.pointer("/type/id").and_then(Value::as_str)?;
            if id == "VARCHAR" && !value.get("is_null")?.as_bool()? {
                Some(vec![value.get("value")?.as_str()?])
            } else {
                None
            }
        }
        "FUNCTION" if v.get("function_name").and_then(Value::as_str) == Some("list_value") => {
            let mut out = Vec::new();
            for c in v.get("children")?.as_array()? {
                out.extend(literal_paths(c)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Schemas that hold DuckDB's internal views.
const INTERNAL_SCHEMAS: &[&str] = &["information_schema", "pg_catalog"];

fn table_ref(catalog: &str, schema: &str, name: &str, rules: &PathRules) -> Result<(), Finding> {
    let lower_catalog = catalog.to_ascii_lowercase();
    if matches!(lower_catalog.as_str(), "system" | "temp") {
        return Err(refuse(
            format!("table {catalog}.{schema}.{name}"),
            "DuckDB's internal catalogs are not readable",
        ));
    }
    // DuckLake attaches its metadata database beside each lake under this
    // prefix; `x.y` may name a catalog in the schema's place.
    if [catalog, schema].iter().any(|p| {
        p.to_ascii_lowercase()
            .starts_with(crate::engine::catalogs::HIDDEN_PREFIX)
    }) {
        return Err(refuse(
            format!("table {catalog}.{schema}.{name}"),
            "a lake's metadata is the gateway's; read its tables by their names",
        ));
    }
    // A name DuckDB will treat as a file (a replacement scan): a path.
    if catalog.is_empty() && schema.is_empty() && name.contains(['/', ':', '.', '~']) {
        return rules
            .check(name)
            .map_err(|reason| refuse(format!("path '{name}'"), reason));
    }
    // Qualified names too: DuckDB joins `"/dir/x".csv` into the path
    // `/dir/x.csv` (ReplacementScan::GetFullPath) when no such table exists.
    if !catalog.is_empty() || !schema.is_empty() {
        let full = [catalog, schema, name]
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(".");
        let file_like = name.rsplit('.').next().is_some_and(|ext| {
            matches!(
                ext.to_ascii_lowercase().as_str(),
                "csv"
                    | "tsv"
                    | "txt"
                    | "parquet"
                    | "json"
                    | "jsonl"
                    | "ndjson"
                    | "gz"
                    | "zst"
                    | "arrow"
                    | "ipc"
                    | "feather"
                    | "xlsx"
                    | "duckdb"
                    | "db"
            )
        });
        if file_like || full.contains(['/', ':', '~', '\\']) {
            return rules
                .check(&full)
                .map_err(|reason| refuse(format!("path '{full}'"), reason));
        }
    }
    let schema_l = if schema.is_empty() {
        "main".to_string()
    } else {
        schema.to_ascii_lowercase()
    };
    let key = format!("{schema_l}.{}", name.to_ascii_lowercase());
    match functions::lookup(&key).map(|e| (e.verdict, e.reason.clone())) {
        Some((Verdict::View, _)) => Ok(()),
        Some((_, reason)) => Err(refuse(format!("view {key}"), reason)),
        None if INTERNAL_SCHEMAS.contains(&schema_l.as_str()) => Err(refuse(
            format!("view {key}"),
            "not on the gateway's allow-list of internal views",
        )),
        None => Ok(()),
    }
}

/// Checks what a bound plan calls (`functions`) and scans (`tables`): every
/// one must be allowed. Table scans are `seq_scan`.
pub fn check_plan_names(functions: &[String], tables: &[String]) -> Result<(), Finding> {
    for name in tables {
        if name == "seq_scan" {
            continue;
        }
        match functions::lookup(name).map(|e| e.verdict) {
            Some(Verdict::Table | Verdict::Reader | Verdict::Scan) => {}
            _ => {
                return Err(refuse(
                    format!("function {name}()"),
                    "the query reads a table function that is not allowed",
                ))
            }
        }
    }
    for name in functions {
        match functions::lookup(name).map(|e| e.verdict) {
            Some(Verdict::Allow | Verdict::Table) => {}
            _ => {
                return Err(refuse(
                    format!("function {name}()"),
                    "the query calls a function that is not allowed",
                ))
            }
        }
    }
    Ok(())
}

/// DuckDB's binder takes time exponential in the nesting of scalar and
/// EXISTS subqueries: each level binds the one inside it twice over
/// (measured on DuckDB 1.5.5 itself, `PREPARE` of `SELECT (SELECT ... 1)`:
/// 20 levels 0.2 s, 25 levels 6.7 s, 30 levels minutes, uninterruptible).
/// The cost of a tree is the sum over such subqueries of 2^(their nesting
/// depth), which matched DuckDB's time to within 20% for chains and for
/// complete binary trees of them (about 0.1 µs a unit on this machine).
/// Other subqueries (`IN`, `FROM`) and CTEs nest at linear cost.
pub fn subquery_cost(value: &Value) -> f64 {
    fn walk(value: &Value, depth: i32) -> f64 {
        match value {
            Value::Object(map) => {
                let nested = map.get("class").and_then(Value::as_str) == Some("SUBQUERY")
                    && matches!(
                        map.get("subquery_type").and_then(Value::as_str),
                        Some("SCALAR" | "EXISTS" | "NOT_EXISTS")
                    );
                let depth = depth + i32::from(nested);
                let own = if nested { 2f64.powi(depth) } else { 0.0 };
                own + map.values().map(|v| walk(v, depth)).sum::<f64>()
            }
            Value::Array(items) => items.iter().map(|v| walk(v, depth)).sum(),
            _ => 0.0,
        }
    }
    walk(value, 0)
}

/// How many set operations a tree holds (`a UNION ALL b UNION ALL c` is
/// two; DuckDB's parser balances the chain, so it is wide, not deep).
/// DuckDB's binder holds memory quadratic in their number: measured on the
/// gateway, a chain of 2,000 terms peaked at 138 MB, 6,000 at 703 MB,
/// 13,000 (256 KB of SQL) at 2.9 GB, none of it DuckDB's buffer pool, so
/// the memory ceiling does not see it.
pub fn set_operations(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.get("type").and_then(Value::as_str) == Some("SET_OPERATION_NODE"))
                + map.values().map(set_operations).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(set_operations).sum(),
        _ => 0,
    }
}

/// A table a parse tree names (`FROM x`, `INSERT INTO x`), as the client
/// wrote it, where DuckDB read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedTable {
    /// The catalog part, or empty.
    pub catalog: String,
    /// The schema part, or empty.
    pub schema: String,
    /// The name.
    pub name: String,
    /// DuckDB's byte offset of the reference in its reading of the text.
    pub at: Option<usize>,
}

/// What a parse tree names as tables, and whether it describes one
/// (`DESCRIBE x`, `SHOW x`: DuckDB answers those from the catalog, with no
/// scan in the plan).
#[derive(Debug, Clone, Default)]
pub struct Named {
    /// Every base-table reference (CTE names too: the parse cannot tell).
    pub tables: Vec<NamedTable>,
    /// How many `DESCRIBE`, `SHOW` or `SUMMARIZE` it holds.
    pub describes: usize,
}

/// Collects what `value` (a parse tree) names into `out`.
pub fn named_tables(value: &Value, out: &mut Named) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| named_tables(v, out)),
        Value::Object(map) => {
            let str_of = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("");
            if !map.contains_key("class") {
                match str_of("type") {
                    "BASE_TABLE" => out.tables.push(NamedTable {
                        catalog: str_of("catalog_name").to_string(),
                        schema: str_of("schema_name").to_string(),
                        name: str_of("table_name").to_string(),
                        at: map
                            .get("query_location")
                            .and_then(Value::as_u64)
                            .and_then(|p| usize::try_from(p).ok()),
                    }),
                    "SHOW_REF" => out.describes += 1,
                    _ => {}
                }
            }
            map.values().for_each(|v| named_tables(v, out));
        }
        _ => {}
    }
}
