//! The spellings of BI tools' schema queries DuckDB does not read.
//! Grafana's PostgreSQL data source lists tables and their columns with
//! `quote_ident`, `parse_ident` and the schemas of
//! `current_setting('search_path')` (split by a `FROM generate_series(...)
//! AS i, string_to_array(...) s`), and its settings page reads
//! `current_setting('server_version_num')` and looks for TimescaleDB in
//! `pg_extension`. Rewritten before [`super::rewrite`], so the guard judges
//! the result as any client's text:
//!
//! - `current_setting('name')` of a setting the session answers itself
//!   (those `SHOW` answers: `search_path`, `server_version_num`, ...) is
//!   the session's value as a literal; any other name stays a call, which
//!   the guard refuses (DuckDB's settings may hold credentials);
//! - `quote_ident(x)` is `x` quoted as PostgreSQL quotes a name: when it is
//!   not lower-case letters, digits and underscores, or is a keyword other
//!   than an unreserved one (DuckDB's keywords, of PostgreSQL's grammar);
//! - `parse_ident(x)` is the list of a dotted name's parts, a quoted part
//!   unquoted and the others in lower case;
//! - `array_lower(a, 1)` is 1 for a non-empty list, else NULL;
//! - a FROM clause holding `string_to_array(...) alias` (a function
//!   called for its one row, which DuckDB refuses): that item is a subquery
//!   of its row, and each `generate_series(...) alias` beside it names its
//!   column by its alias, as PostgreSQL names a function's column (DuckDB
//!   names the alias the row). Only such a clause, which DuckDB cannot run
//!   as written, is changed;
//! - `CAST('pg_catalog.pg_constraint' AS REGCLASS)` (SQLAlchemy's cast of
//!   a name psycopg2 writes into the text) is `'...'::regclass`, which
//!   [`super::rewrite`] makes the catalog table's oid;
//! - `FROM pg_extension` is PostgreSQL's `pg_catalog.pg_extension`, an
//!   empty table (the shim of [`super::shims`]).

use std::borrow::Cow;

use super::lex::{
    closing, contains_ignore_case, is_ident, mentions_any, quoted_len, split_args, word,
};

/// `sql` with the tools' spellings rewritten; `setting` is the session's
/// value of a setting it answers. The text itself when it holds none.
pub fn tools<'a>(sql: &'a str, setting: &dyn Fn(&str) -> Option<String>) -> Cow<'a, str> {
    if !mentions_any(
        sql,
        &[
            "current_setting",
            "quote_ident",
            "parse_ident",
            "array_lower",
            "string_to_array",
            "pg_extension",
            "regclass",
        ],
    ) {
        return Cow::Borrowed(sql);
    }
    let mut text = calls(sql, setting);
    if contains_ignore_case(&text, "string_to_array") {
        text = from_items(&text);
    }
    if text == sql {
        Cow::Borrowed(sql)
    } else {
        Cow::Owned(text)
    }
}

/// The calls of `sql` rewritten (their arguments too), and a bare
/// `pg_extension` after FROM or JOIN qualified.
fn calls(sql: &str, setting: &dyn Fn(&str) -> Option<String>) -> String {
    each_word(sql, |w, rest, out| {
        let after = &rest[w.len()..];
        let (name, tail) = match after.strip_prefix('.') {
            Some(t) if w.eq_ignore_ascii_case("pg_catalog") => (word(t), &t[word(t).len()..]),
            _ => (w, after),
        };
        if let Some((text, used)) = call(name, tail, setting) {
            out.push_str(&text);
            (&tail[used..], true)
        } else if w.eq_ignore_ascii_case("pg_extension") && follows_from(out) {
            out.push_str("pg_catalog.pg_extension");
            (after, true)
        } else {
            out.push_str(w);
            (after, true)
        }
    })
}

/// `sql` copied outside quoted text and outside the words that follow a
/// name; at each other word, `at_word(word, the text from it, out)` writes
/// what the word stands for and returns the text after what it used and
/// whether that ended a name.
fn each_word<'a>(
    sql: &'a str,
    mut at_word: impl FnMut(&'a str, &'a str, &mut String) -> (&'a str, bool),
) -> String {
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    let mut after_name = false;
    while let Some(c) = rest.chars().next() {
        let skip = quoted_len(rest);
        if skip > 0 {
            out.push_str(&rest[..skip]);
            after_name = rest.starts_with('"');
            rest = &rest[skip..];
            continue;
        }
        if after_name || !(c.is_ascii_alphabetic() || c == '_') {
            out.push(c);
            after_name = is_ident(c) || c == '.' || c == '"';
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let w = word(rest);
        (rest, after_name) = at_word(w, rest, &mut out);
    }
    out
}

/// Whether `out` ends with FROM or JOIN (a table's name comes next).
fn follows_from(out: &str) -> bool {
    let t = out.trim_end();
    let start = t.rfind(|c: char| !is_ident(c)).map_or(0, |i| i + 1);
    let last = &t[start..];
    last.eq_ignore_ascii_case("from") || last.eq_ignore_ascii_case("join")
}

/// A call of `name` (`tail` is `(args) ...`): its replacement and the
/// length of `tail` it used; `None` for a call left as it is.
fn call(
    name: &str,
    tail: &str,
    setting: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, usize)> {
    let lower = name.to_ascii_lowercase();
    if ![
        "current_setting",
        "quote_ident",
        "parse_ident",
        "array_lower",
        "cast",
    ]
    .contains(&lower.as_str())
    {
        return None;
    }
    let open = tail.len() - tail.trim_start().len();
    if !tail[open..].starts_with('(') {
        return None;
    }
    let close = open + 1 + closing(&tail[open + 1..])?;
    if lower == "cast" {
        return Some((regclass_literal(&tail[open + 1..close])?, close + 1));
    }
    let args: Vec<String> = split_args(&tail[open + 1..close])
        .into_iter()
        .map(|a| calls(a, setting).trim().to_string())
        .collect();
    let text = match (lower.as_str(), args.as_slice()) {
        ("current_setting", [n]) => literal(&setting(&unquote(n)?)?),
        // A subquery of the argument's value, so the text of `x` (maybe
        // a call rewritten here) is there once.
        ("quote_ident", [x]) => format!(
            "(SELECT CASE WHEN regexp_matches(quote_ident_arg, '^[a-z_][a-z0-9_]*$') \
             AND NOT list_contains([{KEYWORDS}], quote_ident_arg) \
             THEN quote_ident_arg ELSE '\"' || replace(quote_ident_arg, '\"', '\"\"') || '\"' END \
             FROM (SELECT ({x}) AS quote_ident_arg))"
        ),
        ("parse_ident", [x, ..]) => format!(
            "list_transform(regexp_extract_all(({x}), '\"(?:[^\"]|\"\")*\"|[^.\"]+'), \
             lambda ident_part: CASE WHEN ident_part[1] = '\"' THEN replace(ident_part[2:-2], '\"\"', '\"') \
             ELSE lower(trim(ident_part)) END)"
        ),
        ("array_lower", [a, d]) => format!("(CASE WHEN ({d}) = 1 AND len({a}) > 0 THEN 1 END)"),
        _ => return None,
    };
    Some((text, close + 1))
}

/// `'name' AS REGCLASS` (the inside of a `CAST`, as psycopg2 writes a
/// parameter SQLAlchemy casts): PostgreSQL's other spelling,
/// `'name'::regclass`, which [`super::rewrite`] makes a catalog table's
/// oid.
fn regclass_literal(inside: &str) -> Option<String> {
    let t = inside.trim();
    let n = quoted_len(t);
    if n < 2 || !t.starts_with('\'') {
        return None;
    }
    let rest = t[n..].trim_start();
    let rest = rest
        .get(..2)
        .filter(|a| a.eq_ignore_ascii_case("as"))
        .map(|_| rest[2..].trim_start())?;
    let rest = match rest.get(..11) {
        Some(p) if p.eq_ignore_ascii_case("pg_catalog.") => &rest[11..],
        _ => rest,
    };
    rest.eq_ignore_ascii_case("regclass")
        .then(|| format!("{}::regclass", &t[..n]))
}

/// DuckDB's keywords other than its unreserved ones (those
/// `duckdb_keywords()` lists; a confined identity may not read that
/// function), which `quote_ident` quotes as PostgreSQL quotes its own.
const KEYWORDS: &str = concat!(
    "'all','analyse','analyze','and','anti','any','array','as','asc','asof','asymmetric',",
    "'at','authorization','between','bigint','binary','bit','boolean','both','by','case',",
    "'cast','char','character','check','coalesce','collate','collation','column','columns',",
    "'concurrently','constraint','create','cross','dec','decimal','default','deferrable',",
    "'desc','describe','distinct','do','else','end','except','exists','extract','false',",
    "'fetch','float','for','foreign','freeze','from','full','generated','glob','group',",
    "'grouping','grouping_id','having','ilike','in','initially','inner','inout','int',",
    "'integer','intersect','interval','into','is','isnull','join','lambda','lateral',",
    "'leading','left','like','limit','map','national','natural','nchar','none','not',",
    "'notnull','null','nullif','numeric','offset','on','only','or','order','out','outer',",
    "'overlaps','overlay','pivot','pivot_longer','pivot_wider','placing','position',",
    "'positional','precision','primary','qualify','real','references','returning','right',",
    "'row','select','semi','setof','show','similar','smallint','some','struct','substring',",
    "'summarize','symmetric','table','tablesample','then','time','timestamp','to','trailing',",
    "'treat','trim','true','try_cast','union','unique','unpack','unpivot','using','values',",
    "'varchar','variadic','verbose','when','where','window','with','xmlattributes',",
    "'xmlconcat','xmlelement','xmlexists','xmlforest','xmlnamespaces','xmlparse','xmlpi',",
    "'xmlroot','xmlserialize','xmltable'",
);

/// The text of a string literal (`'search_path'`), or `None`.
fn unquote(arg: &str) -> Option<String> {
    let inner = arg.strip_prefix('\'')?.strip_suffix('\'')?;
    (quoted_len(arg) == arg.len()).then(|| inner.replace("''", "'"))
}

/// `value` as a string literal.
fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Words that end a FROM clause.
const CLAUSE_END: &[&str] = &[
    "where",
    "group",
    "having",
    "order",
    "limit",
    "offset",
    "union",
    "except",
    "intersect",
    "window",
    "qualify",
    "returning",
    "fetch",
];

/// `sql` with each FROM clause holding `string_to_array(...)` as an item
/// rewritten (see the module's documentation).
fn from_items(sql: &str) -> String {
    each_word(sql, |w, rest, out| {
        out.push_str(w);
        let rest = &rest[w.len()..];
        if !w.eq_ignore_ascii_case("from") {
            return (rest, true);
        }
        let end = clause_end(rest);
        out.push_str(&from_clause(&rest[..end]));
        (&rest[end..], false)
    })
}

/// Where the FROM clause `s` starts ends: a clause's word, a `;` or a
/// parenthesis closing one opened before it, outside quotes and
/// parentheses.
fn clause_end(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        let skip = quoted_len(&s[i..]);
        if skip > 0 {
            i += skip;
            continue;
        }
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' if depth == 0 => return i,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return i,
            c if depth == 0 && (c.is_ascii_alphabetic() || c == b'_') => {
                let w = word(&s[i..]);
                let starts = i == 0 || !(is_ident(b[i - 1] as char) || b[i - 1] == b'.');
                if starts && CLAUSE_END.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                    return i;
                }
                i += w.len();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// A FROM clause's items: rewritten when one is `string_to_array(...)`,
/// else each as [`from_items`] rewrites it (a subquery's own clauses).
fn from_clause(clause: &str) -> String {
    let items = split_args(clause);
    if items.is_empty() {
        return clause.to_string();
    }
    let calls: Vec<Option<(&str, &str, &str)>> = items.iter().map(|i| function_item(i)).collect();
    if !calls
        .iter()
        .flatten()
        .any(|(f, _, _)| f.eq_ignore_ascii_case("string_to_array"))
    {
        return items
            .iter()
            .map(|i| from_items(i))
            .collect::<Vec<_>>()
            .join(",");
    }
    items
        .iter()
        .zip(calls)
        .map(|(item, call)| {
            let Some((f, args, alias)) = call else {
                return from_items(item);
            };
            let lead = &item[..item.len() - item.trim_start().len()];
            let args = from_items(args);
            if f.eq_ignore_ascii_case("string_to_array") {
                let alias = if alias.is_empty() { f } else { alias };
                format!("{lead}(SELECT string_to_array({args}) AS {alias}) AS {alias} ")
            } else if alias.is_empty() {
                item.to_string()
            } else {
                format!("{lead}generate_series({args}) AS {alias}({alias}) ")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// An item `[pg_catalog.]f(args) [AS] [alias]` of `string_to_array` or
/// `generate_series`: the function's name, its arguments' text and the
/// alias (empty when none); `None` for any other item.
fn function_item(item: &str) -> Option<(&str, &str, &str)> {
    let t = item.trim();
    let t = match t.get(..11) {
        Some(p) if p.eq_ignore_ascii_case("pg_catalog.") => &t[11..],
        _ => t,
    };
    let f = word(t);
    if !["string_to_array", "generate_series"]
        .iter()
        .any(|n| n.eq_ignore_ascii_case(f))
    {
        return None;
    }
    let after = t[f.len()..].trim_start();
    let inner = after.strip_prefix('(')?;
    let close = closing(inner)?;
    let mut rest = inner[close + 1..].trim();
    if word(rest).eq_ignore_ascii_case("as") {
        rest = rest[2..].trim_start();
    }
    let alias = word(rest);
    (alias.len() == rest.len()).then_some((f, &inner[..close], alias))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(name: &str) -> Option<String> {
        match name {
            "search_path" => Some("main, \"it's\"".into()),
            "server_version_num" => Some("160006".into()),
            _ => None,
        }
    }

    fn rewrite(sql: &str) -> String {
        tools(sql, &session).into_owned()
    }

    #[test]
    fn settings_the_session_answers_are_literals_others_stay_calls() {
        assert_eq!(
            rewrite("SELECT current_setting('server_version_num')::int/100 as version"),
            "SELECT '160006'::int/100 as version"
        );
        assert_eq!(
            rewrite("SELECT pg_catalog.current_setting( 'search_path' )"),
            "SELECT 'main, \"it''s\"'"
        );
        // DuckDB's settings stay calls, for the guard to refuse.
        for q in [
            "SELECT current_setting('s3_secret_access_key')",
            "SELECT current_setting(name) FROM t",
            "SELECT current_setting('search_path' || '')",
            "SELECT 'current_setting(''search_path'')'",
        ] {
            assert_eq!(rewrite(q), q);
            assert!(matches!(tools(q, &session), Cow::Borrowed(_)));
        }
    }

    #[test]
    fn quote_ident_parse_ident_and_array_lower_are_duckdb_expressions() {
        let q = rewrite("SELECT quote_ident(table_name) FROM information_schema.tables");
        assert!(
            q.starts_with(
                "SELECT (SELECT CASE WHEN regexp_matches(quote_ident_arg, '^[a-z_][a-z0-9_]*$')"
            ),
            "{q}"
        );
        assert!(
            q.ends_with(
                "FROM (SELECT (table_name) AS quote_ident_arg)) FROM information_schema.tables"
            ),
            "{q}"
        );
        assert!(q.contains("NOT list_contains(['all','analyse',"), "{q}");
        let q = rewrite("(parse_ident('sales.orders'))[1]");
        assert!(
            q.starts_with("(list_transform(regexp_extract_all(('sales.orders'),"),
            "{q}"
        );
        assert_eq!(
            rewrite("array_lower(string_to_array(x, ','), 1)"),
            "(CASE WHEN (1) = 1 AND len(string_to_array(x, ',')) > 0 THEN 1 END)"
        );
        // Nested calls are rewritten inside out; other text is left alone.
        let q = rewrite("quote_ident(quote_ident(a)), x.quote_ident(b), \"quote_ident\"(c)");
        assert_eq!(q.matches("regexp_matches").count(), 2, "{q}");
        assert_eq!(q.matches("(SELECT (a) AS").count(), 1, "{q}");
        assert!(q.ends_with(", x.quote_ident(b), \"quote_ident\"(c)"), "{q}");
    }

    #[test]
    fn a_function_called_in_from_for_its_row_is_a_subquery() {
        assert_eq!(
            rewrite(
                "SELECT s[i] FROM generate_series(1, 2) as i, string_to_array('a,b', ',') s WHERE true"
            ),
            "SELECT s[i] FROM generate_series(1, 2) AS i(i) , (SELECT string_to_array('a,b', ',') AS s) AS s WHERE true"
        );
        // Nested in a subquery, and without an alias.
        assert_eq!(
            rewrite("SELECT x IN (SELECT 1 FROM string_to_array('a', ','))"),
            "SELECT x IN (SELECT 1 FROM (SELECT string_to_array('a', ',') AS string_to_array) AS string_to_array )"
        );
        // DuckDB's own spellings are DuckDB's: a series alone, a
        // string_to_array in the select list.
        for q in [
            "SELECT i FROM generate_series(1, 2) AS i",
            "SELECT string_to_array('a,b', ',') s FROM t, u",
        ] {
            assert_eq!(rewrite(q), q);
        }
    }

    #[test]
    fn a_name_cast_to_regclass_in_the_text_is_the_catalogs_oid() {
        let q =
            "d.classoid = CAST('pg_catalog.pg_constraint' AS REGCLASS) AND CAST($1 AS REGCLASS)";
        assert_eq!(
            rewrite(q),
            "d.classoid = 'pg_catalog.pg_constraint'::regclass AND CAST($1 AS REGCLASS)"
        );
        assert_eq!(
            super::super::rewrite(&rewrite(
                "d.classoid = CAST('pg_catalog.pg_constraint' AS REGCLASS)"
            )),
            "d.classoid = 2606"
        );
        let q = "CAST('x' AS VARCHAR), CAST('a' || 'b' AS REGCLASS)";
        assert_eq!(rewrite(q), q);
    }

    #[test]
    fn the_keywords_quote_ident_quotes_are_duckdbs() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let want: String = conn
            .query_row(
                "SELECT string_agg(concat(chr(39), keyword_name, chr(39)), ',' ORDER BY keyword_name) \
                 FROM duckdb_keywords() WHERE keyword_category <> 'unreserved'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(KEYWORDS, want);
    }

    #[test]
    fn pg_extension_is_the_catalogs() {
        assert_eq!(
            rewrite("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"),
            "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'timescaledb'"
        );
        let q = "SELECT pg_extension FROM t";
        assert_eq!(rewrite(q), q);
    }
}
