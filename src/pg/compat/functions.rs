//! The functions the door rewrites: PostgreSQL's catalog functions DuckDB
//! lacks or spells otherwise, and `generate_series` named by its alias.

use crate::pg::keys;

use super::lex::{closing, split_args, word};
use super::{has_alias, rewrite_all};

/// The functions DuckDB has in its `pg_catalog` (`pg_catalog.f(...)` keeps
/// its prefix; any other loses it).
pub(super) const PG_FUNCTIONS: &[&str] = &[
    "col_description",
    "current_database",
    "current_query",
    "current_schema",
    "current_schemas",
    "format_pg_type",
    "format_type",
    "has_any_column_privilege",
    "has_column_privilege",
    "has_database_privilege",
    "has_foreign_data_wrapper_privilege",
    "has_function_privilege",
    "has_language_privilege",
    "has_schema_privilege",
    "has_sequence_privilege",
    "has_server_privilege",
    "has_table_privilege",
    "has_tablespace_privilege",
    "inet_client_addr",
    "inet_client_port",
    "inet_server_addr",
    "inet_server_port",
    "map_to_pg_oid",
    "obj_description",
    "pg_collation_is_visible",
    "pg_conf_load_time",
    "pg_conversion_is_visible",
    "pg_function_is_visible",
    "pg_get_constraintdef",
    "pg_get_expr",
    "pg_get_viewdef",
    "pg_has_role",
    "pg_is_other_temp_schema",
    "pg_my_temp_schema",
    "pg_opclass_is_visible",
    "pg_operator_is_visible",
    "pg_opfamily_is_visible",
    "pg_postmaster_start_time",
    "pg_size_pretty",
    "pg_sleep",
    "pg_table_is_visible",
    "pg_ts_config_is_visible",
    "pg_ts_dict_is_visible",
    "pg_ts_parser_is_visible",
    "pg_ts_template_is_visible",
    "pg_type_is_visible",
    "pg_typeof",
    "shobj_description",
    "unnest",
];

/// DuckDB's `format_type` names PostgreSQL spells otherwise.
const TYPE_NAMES: &[(&str, &str)] = &[
    ("int2", "smallint"),
    ("int4", "integer"),
    ("int8", "bigint"),
    ("float4", "real"),
    ("float8", "double precision"),
    ("bool", "boolean"),
    ("varchar", "character varying"),
    ("bpchar", "character"),
    ("timestamp", "timestamp without time zone"),
    ("timestamptz", "timestamp with time zone"),
    ("time", "time without time zone"),
    ("timetz", "time with time zone"),
];

/// PostgreSQL's names of the type oids `pg_attribute`'s shim gives.
const PG_TYPE_NAMES: &[(u32, &str)] = &[
    (16, "boolean"),
    (21, "smallint"),
    (23, "integer"),
    (20, "bigint"),
    (700, "real"),
    (701, "double precision"),
    (1043, "character varying"),
    (17, "bytea"),
    (1082, "date"),
    (1083, "time without time zone"),
    (1114, "timestamp without time zone"),
    (1184, "timestamp with time zone"),
    (1266, "time with time zone"),
    (1186, "interval"),
    (1560, "bit"),
    (2950, "uuid"),
];

/// `pg_catalog.generate_series(a, b) s`: PostgreSQL names the column by
/// the alias (`x[s]`), DuckDB the row; `generate_series(a, b) s(s)` names
/// both. The replacement and the length of `tail` it used.
pub(super) fn series(name: &str, tail: &str, keys: Option<&str>) -> Option<(String, usize)> {
    if !name.eq_ignore_ascii_case("generate_series") {
        return None;
    }
    let open = tail.find('(')?;
    let close = open + 1 + closing(&tail[open + 1..])?;
    let after = &tail[close + 1..];
    let t = after.trim_start();
    let alias = word(t);
    if t.len() == after.len() || alias.is_empty() || !has_alias(t) {
        return None;
    }
    if alias.eq_ignore_ascii_case("as") || t[alias.len()..].trim_start().starts_with('(') {
        return None;
    }
    let used = close + 1 + (after.len() - t.len()) + alias.len();
    Some((
        format!(
            "generate_series({}) {alias}({alias})",
            rewrite_all(&tail[open + 1..close], keys)
        ),
        used,
    ))
}

/// The functions [`function`] rewrites (their arguments are read only for
/// these).
const REWRITTEN: &[&str] = &[
    "json_build_object",
    "array_upper",
    "pg_get_indexdef",
    "pg_get_serial_sequence",
    "pg_get_statisticsobjdef_columns",
    "pg_relation_is_publishable",
    "pg_get_expr",
    "format_type",
    "to_regtype",
    "pg_get_userbyid",
    "pg_get_constraintdef",
    "_pg_expandarray",
    "pg_partition_ancestors",
    "pg_get_triggerdef",
];

/// A call of a function the door rewrites: `name` followed by `tail`
/// (`(args) ...`); its replacement and the length of `tail` it used.
pub(super) fn function(name: &str, tail: &str, keys: Option<&str>) -> Option<(String, usize)> {
    let lower = name.to_ascii_lowercase();
    if !REWRITTEN.contains(&lower.as_str()) {
        return None;
    }
    let open = tail.find('(')?;
    let close = open + 1 + closing(&tail[open + 1..])?;
    let args: Vec<String> = split_args(&tail[open + 1..close])
        .into_iter()
        .map(|a| rewrite_all(a, keys))
        .collect();
    let (text, dropped) = replacement(&lower, &args, keys)?;
    Some((keep_parameters(text, &dropped, &args), close + 1))
}

/// What stands for the call of `lower` with `args` (rewritten), and the
/// arguments it no longer reads; `None` for a call left as it is.
fn replacement(lower: &str, args: &[String], keys: Option<&str>) -> Option<(String, Vec<usize>)> {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("NULL");
    Some(match lower {
        "json_build_object" => (format!("json_object({})", args.join(",")), vec![]),
        "array_upper" => (format!("len({})", arg(0)), vec![1]),
        "pg_get_indexdef" => indexdef(args, keys),
        // A key's definition, as PostgreSQL writes it (`PRIMARY KEY (id)`);
        // without the keys (not confined to them), DuckDB's own.
        "pg_get_constraintdef" => (keys::constraintdef(keys?, arg(0)), vec![1]),
        "_pg_expandarray" => (expandarray(arg(0)), vec![]),
        // A relation and the tables it is a partition of: DuckDB has no
        // partitions, so the relation alone (psql's `\d` "Referenced by").
        "pg_partition_ancestors" => (format!("unnest([({})::BIGINT])", arg(0)), vec![]),
        "pg_get_serial_sequence" | "pg_get_statisticsobjdef_columns" | "pg_get_triggerdef" => {
            ("NULL::VARCHAR".to_string(), (0..args.len()).collect())
        }
        "pg_relation_is_publishable" => ("false".to_string(), (0..args.len()).collect()),
        "pg_get_expr" => (
            format!("pg_catalog.pg_get_expr({},{})", arg(0), arg(1)),
            vec![2],
        ),
        "format_type" => (format_type(arg(0), arg(1)), vec![]),
        // The type's oid, or NULL (psycopg's type lookups, SQLAlchemy's
        // hstore check).
        "to_regtype" => (
            format!(
                "(SELECT min(oid) FROM pg_catalog.pg_type WHERE typname = ({}))",
                arg(0)
            ),
            vec![],
        ),
        "pg_get_userbyid" => ("'duckdb'".to_string(), vec![0]),
        _ => return None,
    })
}

/// `pg_get_indexdef(index [, column, pretty])`: DuckDB's index as
/// PostgreSQL writes one (else the keys' index of that oid); a column's
/// definition is NULL.
fn indexdef(args: &[String], keys: Option<&str>) -> (String, Vec<usize>) {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("NULL");
    if args.len() >= 2 && arg(1).trim() != "0" {
        return ("NULL::VARCHAR".to_string(), vec![0, 1, 2]);
    }
    let index = format!(
        "(SELECT 'CREATE ' || CASE WHEN is_unique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' || index_name || ' ON ' || schema_name || '.' || table_name || ' USING art (' || trim(expressions, '[]') || ')' FROM duckdb_indexes() WHERE index_oid = ({}))",
        arg(0)
    );
    let text = match keys {
        Some(k) => format!("coalesce({index}, {})", keys::indexdef(k, arg(0))),
        None => index,
    };
    (text, vec![1, 2])
}

/// `_pg_expandarray(a)`: PostgreSQL's `(i, n)` rows of an array's elements
/// and places (pgjdbc's `getPrimaryKeys`), a struct per element, unnested.
fn expandarray(a: &str) -> String {
    format!(
        "unnest(list_transform(generate_series(1, len({a})), lambda n: {{'x': ({a})[n], 'n': n}}))"
    )
}

/// `format_type(t, m)`: PostgreSQL's oids by PostgreSQL's names
/// (`pg_attribute`'s shim gives them), a numeric's typmod as PostgreSQL
/// encodes it; a type PostgreSQL has no oid for by DuckDB's id, as DuckDB
/// names it.
fn format_type(t: &str, m: &str) -> String {
    let mut case = format!("(CASE ({t})");
    for (oid, pg) in PG_TYPE_NAMES {
        case.push_str(&format!(" WHEN {oid} THEN '{pg}'"));
    }
    case.push_str(&format!(
        " WHEN 1700 THEN 'numeric' || CASE WHEN ({m}) > 4 THEN '(' || ((({m}) - 4) >> 16) || ',' || ((({m}) - 4) & 65535) || ')' ELSE '' END"
    ));
    let call = format!("pg_catalog.format_type({t},{m})");
    case.push_str(&format!(" ELSE (CASE {call}"));
    for (duck, pg) in TYPE_NAMES {
        case.push_str(&format!(" WHEN '{duck}' THEN '{pg}'"));
    }
    case.push_str(&format!(" ELSE {call} END) END)"));
    case
}

/// `text`, still reading the parameters among the `dropped` arguments
/// (the client binds them: a statement must keep every `$n` it had).
fn keep_parameters(text: String, dropped: &[usize], args: &[String]) -> String {
    let kept: Vec<String> = dropped
        .iter()
        .filter_map(|&i| args.get(i))
        .filter(|a| a.contains('$') || a.contains('?'))
        .map(|a| format!("CAST(({a}) AS VARCHAR)"))
        .collect();
    if kept.is_empty() {
        text
    } else {
        format!(
            "coalesce({text}, CASE WHEN {} IS NULL THEN NULL END)",
            kept.join(" || ")
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::pg::compat::rewrite;

    #[test]
    fn functions_duckdb_lacks_are_rewritten_with_their_arguments() {
        assert_eq!(
            rewrite("SELECT json_build_object($2::VARCHAR, pg_catalog.array_upper(x::pg_catalog.int2[], 1))"),
            "SELECT json_object($2::VARCHAR, len(x::int2[]))"
        );
        assert_eq!(
            rewrite("CAST(CAST(pg_catalog.pg_get_serial_sequence(CAST(a AS REGCLASS), b) AS REGCLASS) AS OID)"),
            "CAST(CAST(NULL::VARCHAR AS VARCHAR) AS OID)"
        );
        assert_eq!(
            rewrite(
                "pg_catalog.pg_get_expr(d.adbin, d.adrelid, true), pg_catalog.string_agg(a, ', ')"
            ),
            "pg_catalog.pg_get_expr(d.adbin, d.adrelid), string_agg(a, ', ')"
        );
        let t = rewrite("pg_catalog.format_type(a.atttypid, a.atttypmod)");
        assert!(
            t.starts_with("(CASE (a.atttypid) WHEN 16 THEN 'boolean'"),
            "{t}"
        );
        assert!(
            t.contains(
                "(CASE pg_catalog.format_type(a.atttypid, a.atttypmod) WHEN 'int2' THEN 'smallint'"
            ),
            "{t}"
        );
        assert!(
            t.ends_with(" ELSE pg_catalog.format_type(a.atttypid, a.atttypmod) END) END)"),
            "{t}"
        );
        assert!(rewrite("pg_catalog.pg_get_indexdef(i.indexrelid, 0, true)")
            .contains("FROM duckdb_indexes() WHERE index_oid = (i.indexrelid)"));
        // Parameters of a dropped argument are still read.
        assert_eq!(
            rewrite("pg_catalog.pg_get_indexdef(idx.indexrelid, idx.ord + $2::INTEGER, $3)"),
            "coalesce(NULL::VARCHAR, CASE WHEN CAST(( idx.ord + $2::INTEGER) AS VARCHAR) || CAST(( $3) AS VARCHAR) IS NULL THEN NULL END)"
        );
        assert_eq!(
            rewrite("pg_catalog.pg_get_indexdef(i.indexrelid, 1, true)"),
            "NULL::VARCHAR"
        );
        // A catalog table's name cast to regclass is its oid.
        assert_eq!(
            rewrite("d.classoid = 'pg_class'::regclass AND x = 'pg_catalog.pg_type'::pg_catalog.regclass AND 'other'::regclass"),
            "d.classoid = 1259 AND x = 1247 AND 'other'::VARCHAR"
        );
        assert_eq!(
            rewrite("d.classoid = CAST($2 AS REGCLASS) AND CAST($3 AS REGTYPE)"),
            "d.classoid = (CASE regexp_replace(CAST($2 AS VARCHAR), '^pg_catalog[.]', '') WHEN 'pg_class' THEN 1259 WHEN 'pg_type' THEN 1247 WHEN 'pg_attribute' THEN 1249 WHEN 'pg_proc' THEN 1255 WHEN 'pg_namespace' THEN 2615 WHEN 'pg_constraint' THEN 2606 WHEN 'pg_index' THEN 2610 WHEN 'pg_description' THEN 2609 END) AND CAST($3 AS VARCHAR)"
        );
        // A series named by its alias is the column too.
        assert_eq!(
            rewrite("FROM pg_catalog.generate_series(0, pg_catalog.array_upper(p, 1)) s, x WHERE a = p[s]"),
            "FROM generate_series(0, len(p)) s(s), x WHERE a = p[s]"
        );
    }
}
