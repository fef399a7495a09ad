//! PostgreSQL spellings DuckDB does not read, in the catalog queries psql,
//! drivers and BI tools send, rewritten to DuckDB's before the statement
//! runs (DuckDB's own `pg_catalog` answers the rest):
//!
//! - `OPERATOR(pg_catalog.~)` is `~`; `COLLATE pg_catalog.default` is the
//!   default collation; casts to `regtype`, `regclass` and the other
//!   object-name types read as text (`::regclass`, `CAST(x AS REGCLASS)`);
//! - catalog tables DuckDB lacks (`pg_policy`, `pg_inherits`,
//!   `pg_publication`, `pg_statistic_ext`, `pg_trigger`, `pg_roles`, ...)
//!   are empty tables of their columns, and those it has with columns
//!   missing (`pg_class.relforcerowsecurity`, `pg_index.indnullsnotdistinct`,
//!   `pg_collation.collnamespace`) gain them with PostgreSQL's defaults, so
//!   psql's `\d table` and SQLAlchemy's reflection bind;
//! - functions: `pg_get_userbyid` is the owner DuckDB's `pg_class` implies,
//!   `duckdb`; `to_regtype(name)` the oid `pg_type` has for the name;
//!   `format_type` names types as PostgreSQL does (`integer`, `character
//!   varying`, `timestamp with time zone`; DuckDB's own name where
//!   PostgreSQL has none); `pg_get_indexdef` DuckDB's index as PostgreSQL
//!   writes one (`... USING art (columns)`); `json_build_object` is
//!   `json_object`; `array_upper(a, 1)` is `len(a)`; `pg_get_expr` drops
//!   its pretty flag; `pg_get_serial_sequence`, `pg_relation_is_publishable`
//!   and `pg_get_statisticsobjdef_columns` have nothing to say (NULL,
//!   false); other functions named `pg_catalog.f` that DuckDB has outside
//!   its `pg_catalog` lose the prefix.
//!
//! The rewritten text is judged by the guard like any client's text: a
//! rewrite can only change what the client's own statement means, never
//! what it may read (the shims read DuckDB's `pg_catalog`, which the guard
//! filters by the identity's grants, or nothing).

use std::borrow::Cow;

use crate::pg::keys;

/// Catalog tables DuckDB lacks or lacks columns of: their name and the
/// query that stands for them.
const TABLES: &[(&str, &str)] = &[
    (
        "pg_class",
        "SELECT *, false AS relforcerowsecurity FROM pg_catalog.pg_class",
    ),
    // PostgreSQL's type oids (DuckDB's view has DuckDB's type ids, which
    // join no `pg_type` row: pgjdbc's getColumns joins them) and type
    // modifiers (`numeric(p,s)` as PostgreSQL encodes it); a type
    // PostgreSQL has no oid for keeps DuckDB's id (see `format_type`).
    (
        "pg_attribute",
        "SELECT * REPLACE (CASE atttypid WHEN 10 THEN 16 WHEN 11 THEN 21 WHEN 12 THEN 21 WHEN 13 THEN 23 \
         WHEN 14 THEN 20 WHEN 15 THEN 1082 WHEN 16 THEN 1083 WHEN 17 THEN 1114 WHEN 18 THEN 1114 \
         WHEN 19 THEN 1114 WHEN 20 THEN 1114 WHEN 21 THEN 1700 WHEN 22 THEN 700 WHEN 23 THEN 701 \
         WHEN 25 THEN 1043 WHEN 26 THEN 17 WHEN 27 THEN 1186 WHEN 28 THEN 21 WHEN 29 THEN 23 \
         WHEN 30 THEN 20 WHEN 32 THEN 1184 WHEN 34 THEN 1266 WHEN 35 THEN 1083 WHEN 36 THEN 1560 \
         WHEN 54 THEN 2950 ELSE atttypid END AS atttypid, \
         CASE WHEN atttypmod > 0 THEN (((atttypmod // 1000) << 16) | (atttypmod % 1000)) + 4 ELSE atttypmod END AS atttypmod) \
         FROM pg_catalog.pg_attribute",
    ),
    (
        "pg_index",
        "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index",
    ),
    (
        "pg_collation",
        "SELECT *, NULL::BIGINT AS collnamespace, NULL::VARCHAR AS collprovider FROM pg_catalog.pg_collation",
    ),
    // DuckDB's, but for functions' comments (its view reads
    // duckdb_functions(), which a confined identity may not: pgjdbc's
    // getTables joins it), and `classoid` PostgreSQL's oid of `pg_class`
    // (or `pg_type`), which `'pg_class'::regclass` reads as.
    (
        "pg_description",
        "SELECT table_oid AS objoid, 1259 AS classoid, 0 AS objsubid, comment AS description FROM duckdb_tables() WHERE NOT internal \
         UNION ALL SELECT table_oid, 1259, column_index, comment FROM duckdb_columns() WHERE NOT internal \
         UNION ALL SELECT view_oid, 1259, 0, comment FROM duckdb_views() WHERE NOT internal \
         UNION ALL SELECT index_oid, 1259, 0, comment FROM duckdb_indexes() \
         UNION ALL SELECT sequence_oid, 1259, 0, comment FROM duckdb_sequences() \
         UNION ALL SELECT type_oid, 1247, 0, comment FROM duckdb_types() WHERE NOT internal",
    ),
    (
        "pg_policy",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS polname, NULL::BIGINT AS polrelid, NULL::VARCHAR AS polcmd, NULL::BOOLEAN AS polpermissive, NULL::BIGINT[] AS polroles, NULL::VARCHAR AS polqual, NULL::VARCHAR AS polwithcheck WHERE false",
    ),
    (
        "pg_statistic_ext",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS stxrelid, NULL::VARCHAR AS stxname, NULL::BIGINT AS stxnamespace, NULL::BIGINT AS stxowner, NULL::INTEGER AS stxstattarget, NULL::SMALLINT[] AS stxkeys, NULL::VARCHAR[] AS stxkind WHERE false",
    ),
    (
        "pg_publication",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS pubname, NULL::BIGINT AS pubowner, NULL::BOOLEAN AS puballtables, NULL::BOOLEAN AS pubinsert, NULL::BOOLEAN AS pubupdate, NULL::BOOLEAN AS pubdelete, NULL::BOOLEAN AS pubtruncate, NULL::BOOLEAN AS pubviaroot WHERE false",
    ),
    (
        "pg_publication_namespace",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS pnpubid, NULL::BIGINT AS pnnspid WHERE false",
    ),
    (
        "pg_publication_rel",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS prpubid, NULL::BIGINT AS prrelid, NULL::VARCHAR AS prqual, NULL::SMALLINT[] AS prattrs WHERE false",
    ),
    // PostgreSQL's settings a driver reads, as constants: pgjdbc's
    // `getImportedKeys` asks for `max_index_keys` (a key's most columns).
    // DuckDB's own view lists DuckDB's settings, which the guard refuses.
    (
        "pg_settings",
        "SELECT * FROM (VALUES ('max_index_keys', '32', NULL, 'Preset Options', 'Shows the maximum number of index keys.', 'internal', 'integer')) AS s(name, setting, unit, category, short_desc, context, vartype)",
    ),
    (
        "pg_inherits",
        "SELECT NULL::BIGINT AS inhrelid, NULL::BIGINT AS inhparent, NULL::INTEGER AS inhseqno, NULL::BOOLEAN AS inhdetachpending WHERE false",
    ),
    (
        "pg_trigger",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS tgrelid, NULL::BIGINT AS tgparentid, NULL::VARCHAR AS tgname, NULL::BIGINT AS tgfoid, NULL::SMALLINT AS tgtype, NULL::VARCHAR AS tgenabled, NULL::BOOLEAN AS tgisinternal, NULL::BIGINT AS tgconstrrelid, NULL::BIGINT AS tgconstrindid, NULL::BIGINT AS tgconstraint, NULL::BOOLEAN AS tgdeferrable, NULL::BOOLEAN AS tginitdeferred, NULL::SMALLINT AS tgnargs, NULL::VARCHAR AS tgqual WHERE false",
    ),
    (
        "pg_roles",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS rolname, NULL::BOOLEAN AS rolsuper, NULL::BOOLEAN AS rolinherit, NULL::BOOLEAN AS rolcreaterole, NULL::BOOLEAN AS rolcreatedb, NULL::BOOLEAN AS rolcanlogin, NULL::BOOLEAN AS rolreplication, NULL::INTEGER AS rolconnlimit, NULL::BOOLEAN AS rolbypassrls WHERE false",
    ),
    (
        "pg_opclass",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS opcmethod, NULL::VARCHAR AS opcname, NULL::BIGINT AS opcnamespace, NULL::BIGINT AS opcfamily, NULL::BIGINT AS opcintype, NULL::BOOLEAN AS opcdefault WHERE false",
    ),
    (
        "pg_partitioned_table",
        "SELECT NULL::BIGINT AS partrelid, NULL::VARCHAR AS partstrat, NULL::SMALLINT AS partnatts WHERE false",
    ),
    (
        "pg_foreign_table",
        "SELECT NULL::BIGINT AS ftrelid, NULL::BIGINT AS ftserver WHERE false",
    ),
];

/// The functions DuckDB has in its `pg_catalog` (`pg_catalog.f(...)` keeps
/// its prefix; any other loses it).
const PG_FUNCTIONS: &[&str] = &[
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

/// Words after a table's name that are not its alias.
const NOT_ALIAS: &[&str] = &[
    "where",
    "join",
    "left",
    "right",
    "inner",
    "outer",
    "full",
    "cross",
    "natural",
    "on",
    "using",
    "group",
    "order",
    "having",
    "limit",
    "offset",
    "union",
    "except",
    "intersect",
    "window",
    "qualify",
    "lateral",
    "tablesample",
    "fetch",
    "for",
    "positional",
    "anti",
    "semi",
    "asof",
];

/// `sql` with the PostgreSQL spellings DuckDB does not read replaced; the
/// text itself when it holds none (the common case costs a few scans).
pub fn rewrite(sql: &str) -> Cow<'_, str> {
    rewrite_with(sql, None)
}

/// [`rewrite`] with `keys`, the relation of the primary keys and unique
/// constraints the identity may see ([`keys::relation`]), standing in
/// `pg_constraint` and completing `pg_index` and `pg_class` (a statement
/// that names them: see [`keys::needed`]).
pub fn rewrite_with<'a>(sql: &'a str, keys: Option<&str>) -> Cow<'a, str> {
    if ![
        "pg_catalog",
        "pg_get_",
        "to_regtype",
        "::reg",
        "regclass",
        "json_build_object",
        "array_upper",
        "format_type",
        "_pg_expandarray",
    ]
    .iter()
    .any(|w| contains_ignore_case(sql, w))
    {
        return Cow::Borrowed(sql);
    }
    Cow::Owned(rewrite_all(sql, keys))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier `s` starts with (empty when none).
fn word(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

fn rewrite_all(sql: &str, keys: Option<&str>) -> String {
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    // Whether the previous character continues a name (a word, a quoted
    // name, a dot): a word starting here is then not a name of its own.
    let mut after_name = false;
    while !rest.is_empty() {
        // Quoted text and comments pass unchanged.
        let skip = quoted_len(rest);
        if let Some((oid, used)) = catalog_oid(rest, skip) {
            out.push_str(oid);
            rest = &rest[used..];
            after_name = true;
            continue;
        }
        if skip > 0 {
            out.push_str(&rest[..skip]);
            after_name = rest.starts_with('"');
            rest = &rest[skip..];
            continue;
        }
        if let Some(n) = strip_ci(rest, "operator(pg_catalog.") {
            if let Some(close) = rest[n..].find(')') {
                out.push_str(rest[n..n + close].trim());
                rest = &rest[n + close + 1..];
                after_name = false;
                continue;
            }
        }
        if let Some(n) = strip_ci(rest, "collate pg_catalog.default") {
            rest = &rest[n..];
            continue;
        }
        // Casts to PostgreSQL's object-name types DuckDB lacks read as
        // text; `::pg_catalog.text` is `::text`.
        if let Some(n) = strip_ci(rest, "::") {
            let after = &rest[n..];
            let after = strip_ci(after, "pg_catalog.").map_or(after, |m| &after[m..]);
            let w = word(after);
            // A column of the keys cast to `regclass` (psql's
            // `conrelid::pg_catalog.regclass`): the table's name.
            if let (Some(k), Some(start)) = (keys, trailing_name(&out)) {
                if w.eq_ignore_ascii_case("regclass") {
                    let column = out.split_off(start);
                    out.push_str(&keys::relname(k, &column));
                    rest = &after[w.len()..];
                    after_name = true;
                    continue;
                }
            }
            out.push_str("::");
            if is_reg_type(w) {
                out.push_str("VARCHAR");
            } else {
                out.push_str(w);
            }
            rest = &after[w.len()..];
            after_name = true;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if !after_name && (c.is_ascii_alphabetic() || c == '_') {
            let w = word(rest);
            let after = &rest[w.len()..];
            // `CAST(x AS REGCLASS)`: as text.
            if w.eq_ignore_ascii_case("as") {
                let t = after.trim_start();
                let target = word(t);
                if !target.is_empty()
                    && is_reg_type(target)
                    && t[target.len()..].trim_start().starts_with(')')
                {
                    // `CAST($1 AS REGCLASS)`: a name bound as a parameter,
                    // made an oid (SQLAlchemy compares
                    // `pg_description.classoid` with one).
                    if let Some(param) = cast_parameter(&out) {
                        if target.eq_ignore_ascii_case("regclass") {
                            out.truncate(out.len() - param.len());
                            out.push_str(&regclass_oid(&param));
                            rest = &t[target.len()..].trim_start()[1..];
                            after_name = true;
                            continue;
                        }
                    }
                    out.push_str(w);
                    out.push_str(&after[..after.len() - t.len()]);
                    out.push_str("VARCHAR");
                    rest = &t[target.len()..];
                    after_name = true;
                    continue;
                }
            }
            if w.eq_ignore_ascii_case("information_schema") && after.starts_with('.') {
                let name = word(&after[1..]);
                let tail = &after[1 + name.len()..];
                if name.eq_ignore_ascii_case("_pg_expandarray") {
                    if let Some((text, used)) = function(name, tail, keys) {
                        out.push_str(&text);
                        rest = &tail[used..];
                        after_name = false;
                        continue;
                    }
                }
            }
            if w.eq_ignore_ascii_case("pg_catalog") && after.starts_with('.') {
                let name = word(&after[1..]);
                let tail = &after[1 + name.len()..];
                if !name.is_empty() {
                    if tail.trim_start().starts_with('(') {
                        if let Some((text, used)) = series(name, tail, keys) {
                            out.push_str(&text);
                            rest = &tail[used..];
                            after_name = true;
                            continue;
                        }
                        if let Some((text, used)) = function(name, tail, keys) {
                            out.push_str(&text);
                            rest = &tail[used..];
                            after_name = false;
                            continue;
                        }
                        if !PG_FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(name)) {
                            out.push_str(name);
                            rest = tail;
                            after_name = true;
                            continue;
                        }
                    } else if let Some(shim) = keys::table(name, keys).or_else(|| {
                        TABLES
                            .iter()
                            .find(|(t, _)| t.eq_ignore_ascii_case(name))
                            .map(|(_, shim)| Cow::Borrowed(*shim))
                    }) {
                        if tail.starts_with('.') {
                            // A column's qualifier: the shim's alias.
                            out.push_str(name);
                        } else {
                            out.push('(');
                            out.push_str(&shim);
                            out.push(')');
                            if !has_alias(tail) {
                                out.push_str(" AS ");
                                out.push_str(name);
                            }
                        }
                        rest = tail;
                        after_name = true;
                        continue;
                    }
                }
                out.push_str(&rest[..w.len() + 1 + name.len()]);
                rest = tail;
                after_name = true;
                continue;
            }
            if after.trim_start().starts_with('(') {
                if let Some((text, used)) = function(w, after, keys) {
                    out.push_str(&text);
                    rest = &after[used..];
                    after_name = false;
                    continue;
                }
            }
            out.push_str(w);
            rest = after;
            after_name = true;
            continue;
        }
        out.push(c);
        after_name = is_ident(c) || c == '.' || c == '"';
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// PostgreSQL's oids of its catalog tables, for `'pg_class'::regclass`.
const CATALOG_OIDS: &[(&str, &str)] = &[
    ("pg_class", "1259"),
    ("pg_type", "1247"),
    ("pg_attribute", "1249"),
    ("pg_proc", "1255"),
    ("pg_namespace", "2615"),
    ("pg_constraint", "2606"),
    ("pg_index", "2610"),
    ("pg_description", "2609"),
];

/// `'pg_class'::regclass` (a catalog table's name as a literal cast to
/// `regclass`, as pgjdbc compares `pg_description.classoid`): the table's
/// oid, and the length of `s` it used; `skip` is the literal's length. An
/// oid written as a literal (`'16385'::regclass`, as psql's `\d` writes
/// the table it describes) is that number.
fn catalog_oid(s: &str, skip: usize) -> Option<(&str, usize)> {
    if !s.starts_with('\'') || skip < 2 {
        return None;
    }
    let name = &s[1..skip - 1];
    let oid = if !name.is_empty() && name.len() <= 10 && name.bytes().all(|b| b.is_ascii_digit()) {
        name
    } else {
        let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
        CATALOG_OIDS.iter().find(|(t, _)| *t == name)?.1
    };
    let after = &s[skip..];
    let n = strip_ci(after, "::")?;
    let rest = &after[n..];
    let rest = strip_ci(rest, "pg_catalog.").map_or(rest, |m| &rest[m..]);
    let w = word(rest);
    if !w.eq_ignore_ascii_case("regclass") {
        return None;
    }
    Some((oid, s.len() - rest.len() + w.len()))
}

/// The `CAST($n ` that `out` ends with (the parameter's cast so far), or
/// `None`.
fn cast_parameter(out: &str) -> Option<String> {
    let open = out.rfind('(')?;
    let inner = out[open + 1..].trim();
    let head = out[..open].trim_end();
    let param = inner.strip_prefix('$')?;
    if param.is_empty() || !param.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if head.len() < 4 || !head[head.len() - 4..].eq_ignore_ascii_case("cast") {
        return None;
    }
    Some(out[head.len() - 4..].to_string())
}

/// A catalog table's name (`pg_catalog.pg_constraint`) bound as `$n` and
/// cast to `regclass`: its oid, NULL for another name. `cast` is the text
/// `CAST($n ` stood in.
fn regclass_oid(cast: &str) -> String {
    let param = cast[cast.find('(').unwrap_or(0) + 1..].trim();
    let mut case = format!("(CASE regexp_replace(CAST({param} AS VARCHAR), '^pg_catalog[.]', '')");
    for (name, oid) in CATALOG_OIDS {
        case.push_str(&format!(" WHEN '{name}' THEN {oid}"));
    }
    case.push_str(" END)");
    case
}

/// Where the name `out` ends with (`conrelid`, `c.conrelid`) starts.
fn trailing_name(out: &str) -> Option<usize> {
    let bytes = out.as_bytes();
    let mut start = out.len();
    while start > 0 && (is_ident(bytes[start - 1] as char) || bytes[start - 1] == b'.') {
        start -= 1;
    }
    let name = &out[start..];
    let first = name.chars().next()?;
    (first.is_ascii_alphabetic() || first == '_').then_some(start)
}

fn is_reg_type(w: &str) -> bool {
    ["regtype", "regclass", "regproc", "regnamespace", "regrole"]
        .iter()
        .any(|r| r.eq_ignore_ascii_case(w))
}

/// Whether the text after a table's name gives it an alias.
fn has_alias(tail: &str) -> bool {
    let t = tail.trim_start();
    if t.starts_with('"') {
        return true;
    }
    let w = word(t);
    !w.is_empty() && !NOT_ALIAS.iter().any(|k| k.eq_ignore_ascii_case(w))
}

/// `pg_catalog.generate_series(a, b) s`: PostgreSQL names the column by
/// the alias (`x[s]`), DuckDB the row; `generate_series(a, b) s(s)` names
/// both. The replacement and the length of `tail` it used.
fn series(name: &str, tail: &str, keys: Option<&str>) -> Option<(String, usize)> {
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

/// A call of a function the door rewrites: `name` followed by `tail`
/// (`(args) ...`); its replacement and the length of `tail` it used.
fn function(name: &str, tail: &str, keys: Option<&str>) -> Option<(String, usize)> {
    let lower = name.to_ascii_lowercase();
    if ![
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
    ]
    .contains(&lower.as_str())
    {
        return None;
    }
    let open = tail.find('(')?;
    let close = open + 1 + closing(&tail[open + 1..])?;
    let args: Vec<String> = split_args(&tail[open + 1..close])
        .into_iter()
        .map(|a| rewrite_all(a, keys))
        .collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("NULL");
    // What stands for the call, and the arguments it no longer reads (a
    // parameter among them must still be there: the client binds it).
    let (text, dropped): (String, Vec<usize>) = match lower.as_str() {
        "json_build_object" => (format!("json_object({})", args.join(",")), vec![]),
        "array_upper" => (format!("len({})", arg(0)), vec![1]),
        "pg_get_indexdef" => {
            if args.len() >= 2 && arg(1).trim() != "0" {
                ("NULL::VARCHAR".to_string(), vec![0, 1, 2])
            } else {
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
        }
        // A key's definition, as PostgreSQL writes it (`PRIMARY KEY (id)`);
        // without the keys (not confined to them), DuckDB's own.
        "pg_get_constraintdef" => match keys {
            Some(k) => (keys::constraintdef(k, arg(0)), vec![1]),
            None => return None,
        },
        // PostgreSQL's `(i, n)` rows of an array's elements and places
        // (pgjdbc's `getPrimaryKeys`): a struct per element, unnested.
        "_pg_expandarray" => {
            let a = arg(0);
            (
                format!("unnest(list_transform(generate_series(1, len({a})), lambda n: {{'x': ({a})[n], 'n': n}}))"),
                vec![],
            )
        }
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
        // PostgreSQL's oids by PostgreSQL's names (`pg_attribute`'s shim
        // gives them), a numeric's typmod as PostgreSQL encodes it; a type
        // PostgreSQL has no oid for by DuckDB's id, as DuckDB names it.
        "format_type" => {
            let (t, m) = (arg(0), arg(1));
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
            (case, vec![])
        }
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
    };
    let kept: Vec<String> = dropped
        .iter()
        .filter_map(|&i| args.get(i))
        .filter(|a| a.contains('$') || a.contains('?'))
        .map(|a| format!("CAST(({a}) AS VARCHAR)"))
        .collect();
    let text = if kept.is_empty() {
        text
    } else {
        format!(
            "coalesce({text}, CASE WHEN {} IS NULL THEN NULL END)",
            kept.join(" || ")
        )
    };
    Some((text, close + 1))
}

/// A call's arguments: `s` split at the commas outside parentheses,
/// brackets, quotes and comments.
fn split_args(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut i) = (0usize, 0usize, 0usize);
    let b = s.as_bytes();
    while i < b.len() {
        let skip = quoted_len(&s[i..]);
        if skip > 0 {
            i += skip;
            continue;
        }
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if !s[start..].trim().is_empty() || !out.is_empty() {
        out.push(&s[start..]);
    }
    out
}

fn contains_ignore_case(s: &str, needle: &str) -> bool {
    s.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The length of `prefix` when `s` starts with it in any case, at a word
/// boundary.
fn strip_ci(s: &str, prefix: &str) -> Option<usize> {
    let head = s.as_bytes().get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix.as_bytes())
        .then_some(prefix.len())
}

/// The index in `s` of the parenthesis closing one already open.
fn closing(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    let mut i = 0;
    while i < s.len() {
        let skip = quoted_len(&s[i..]);
        if skip > 0 {
            i += skip;
            continue;
        }
        match s.as_bytes()[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The length of the quoted string, quoted identifier or comment `s`
/// starts with; 0 when it starts with code.
fn quoted_len(s: &str) -> usize {
    let b = s.as_bytes();
    match b.first() {
        Some(&q @ (b'\'' | b'"')) => {
            let mut i = 1;
            while i < b.len() {
                if b[i] == q {
                    if b.get(i + 1) == Some(&q) {
                        i += 2;
                        continue;
                    }
                    return i + 1;
                }
                i += 1;
            }
            b.len()
        }
        Some(b'-') if b.get(1) == Some(&b'-') => s.find('\n').map_or(s.len(), |n| n + 1),
        Some(b'/') if b.get(1) == Some(&b'*') => s[2..].find("*/").map_or(s.len(), |n| n + 4),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psqls_spellings_become_duckdbs() {
        assert_eq!(
            rewrite(
                "WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default AND x"
            ),
            "WHERE c.relname ~ '^(t)$'  AND x"
        );
        assert_eq!(
            rewrite("select pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\""),
            "select 'duckdb' as \"Owner\""
        );
        // Quoted text is left alone.
        let q = "select 'OPERATOR(pg_catalog.~)', \"pg_catalog\"";
        assert_eq!(rewrite(q), q);
        assert!(matches!(rewrite("select 1"), Cow::Borrowed(_)));
        assert_eq!(
            rewrite("WHERE t.oid = to_regtype($1)"),
            "WHERE t.oid = (SELECT min(oid) FROM pg_catalog.pg_type WHERE typname = ($1))"
        );
        assert_eq!(
            rewrite("CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END FROM pg_catalog.pg_type"),
            "CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::VARCHAR::text END FROM pg_catalog.pg_type"
        );
    }

    #[test]
    fn catalog_tables_duckdb_lacks_are_shims_under_their_names() {
        let shim = TABLES[0].1;
        // An alias is kept; without one the shim takes the table's name,
        // and a column qualified by schema and table names the shim.
        assert_eq!(
            rewrite("FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.x = tc.y)"),
            format!("FROM ({shim}) c LEFT JOIN ({shim}) tc ON (c.x = tc.y)")
        );
        assert_eq!(
            rewrite("SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class JOIN x"),
            format!("SELECT pg_class.relname FROM ({shim}) AS pg_class JOIN x")
        );
        assert_eq!(
            rewrite("FROM pg_catalog.pg_class AS k, pg_catalog.pg_inherits"),
            format!(
                "FROM ({shim}) AS k, ({}) AS pg_inherits",
                TABLES.iter().find(|t| t.0 == "pg_inherits").unwrap().1
            )
        );
        // Tables DuckDB has whole are its own.
        let q = "SELECT pg_catalog.pg_namespace.nspname FROM pg_catalog.pg_namespace";
        assert_eq!(rewrite(q), q);
    }

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
