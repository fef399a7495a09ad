//! PostgreSQL spellings DuckDB does not read, in the catalog queries psql
//! and BI tools send, rewritten to DuckDB's before the statement runs:
//! `OPERATOR(pg_catalog.~)` is `~`, `COLLATE pg_catalog.default` is the
//! default collation, and `pg_catalog.pg_get_userbyid(oid)` (which DuckDB's
//! pg_catalog lacks) is the owner DuckDB's `pg_class` implies, `duckdb`;
//! `to_regtype(name)` is the oid `pg_type` has for the name; casts to
//! `regtype`, `regclass` and the other object-name types read as text.
//!
//! The rewritten text is judged by the guard like any client's text: a
//! rewrite can only change what the client's own statement means, never
//! what it may read.

use std::borrow::Cow;

/// `sql` with the PostgreSQL spellings DuckDB does not read replaced; the
/// text itself when it holds none (the common case costs one scan for
/// `pg_catalog`).
pub fn rewrite(sql: &str) -> Cow<'_, str> {
    if !contains_ignore_case(sql, "pg_catalog")
        && !contains_ignore_case(sql, "pg_get_userbyid")
        && !contains_ignore_case(sql, "to_regtype")
        && !contains_ignore_case(sql, "::reg")
    {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while !rest.is_empty() {
        // Quoted text and comments pass unchanged.
        let skip = quoted_len(rest);
        if skip > 0 {
            out.push_str(&rest[..skip]);
            rest = &rest[skip..];
            continue;
        }
        if let Some(n) = strip_ci(rest, "operator(pg_catalog.") {
            if let Some(close) = rest[n..].find(')') {
                out.push_str(rest[n..n + close].trim());
                rest = &rest[n + close + 1..];
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
            let word_end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let word = &after[..word_end];
            out.push_str("::");
            if ["regtype", "regclass", "regproc", "regnamespace", "regrole"]
                .iter()
                .any(|r| r.eq_ignore_ascii_case(word))
            {
                out.push_str("VARCHAR");
            } else {
                out.push_str(word);
            }
            rest = &after[word_end..];
            continue;
        }
        // `to_regtype(name)`: the type's oid, or NULL (psycopg's type
        // lookups, SQLAlchemy's hstore check).
        let regtype =
            strip_ci(rest, "pg_catalog.to_regtype(").or_else(|| strip_ci(rest, "to_regtype("));
        if let Some(n) = regtype {
            if let Some(close) = closing(&rest[n..]) {
                out.push_str("(SELECT min(oid) FROM pg_catalog.pg_type WHERE typname = (");
                out.push_str(&rest[n..n + close]);
                out.push_str("))");
                rest = &rest[n + close + 1..];
                continue;
            }
        }
        let userbyid = strip_ci(rest, "pg_catalog.pg_get_userbyid(")
            .or_else(|| strip_ci(rest, "pg_get_userbyid("));
        if let Some(n) = userbyid {
            if let Some(close) = closing(&rest[n..]) {
                out.push_str("'duckdb'");
                rest = &rest[n + close + 1..];
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
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
            rewrite("CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END FROM pg_catalog.pg_class"),
            "CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::VARCHAR::text END FROM pg_catalog.pg_class"
        );
    }
}
