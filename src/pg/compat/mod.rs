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

mod functions;
mod lex;
mod shims;
mod tools;

use std::borrow::Cow;

use crate::pg::keys;

use functions::{function, series, PG_FUNCTIONS};
use lex::{is_ident, mentions_any, quoted_len, strip_ci, word};
use shims::TABLES;
pub use tools::tools;

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
    if !mentions_any(
        sql,
        &[
            "pg_catalog",
            "pg_get_",
            "to_regtype",
            "::reg",
            "regclass",
            "json_build_object",
            "array_upper",
            "format_type",
            "_pg_expandarray",
        ],
    ) {
        return Cow::Borrowed(sql);
    }
    Cow::Owned(rewrite_all(sql, keys))
}

/// The rewrite of `sql`: each place is, in this order, a catalog table's
/// name cast to `regclass`, quoted text or a comment, `OPERATOR(...)`,
/// `COLLATE pg_catalog.default`, a cast, a word, or one character.
fn rewrite_all(sql: &str, keys: Option<&str>) -> String {
    let mut r = Rewriter {
        out: String::with_capacity(sql.len() + 64),
        rest: sql,
        after_name: false,
        keys,
    };
    while !r.rest.is_empty() {
        // Quoted text and comments pass unchanged.
        let skip = quoted_len(r.rest);
        let done = r.catalog_oid(skip)
            || r.quoted(skip)
            || r.operator()
            || r.collate()
            || r.cast()
            || r.bare_word();
        if !done {
            r.character();
        }
    }
    r.out
}

/// A rewrite under way. Each step reads the text at `rest`: when it is its
/// spelling, the step writes the replacement, moves `rest` past what it
/// read and says `true`; otherwise it changes nothing and says `false`.
struct Rewriter<'a> {
    /// The text written so far.
    out: String,
    /// The client's text not read yet.
    rest: &'a str,
    /// Whether the previous character continues a name (a word, a quoted
    /// name, a dot): a word starting here is then not a name of its own.
    after_name: bool,
    /// The keys relation ([`rewrite_with`]).
    keys: Option<&'a str>,
}

impl<'a> Rewriter<'a> {
    /// Goes on reading at `rest`, which the text written ends a name or not.
    fn advance(&mut self, rest: &'a str, after_name: bool) {
        self.rest = rest;
        self.after_name = after_name;
    }

    /// `'pg_class'::regclass` (the literal is `skip` long): the oid.
    fn catalog_oid(&mut self, skip: usize) -> bool {
        let Some((oid, used)) = catalog_oid(self.rest, skip) else {
            return false;
        };
        self.out.push_str(oid);
        self.advance(&self.rest[used..], true);
        true
    }

    /// Quoted text or a comment (`skip` long), unchanged.
    fn quoted(&mut self, skip: usize) -> bool {
        if skip == 0 {
            return false;
        }
        self.out.push_str(&self.rest[..skip]);
        self.advance(&self.rest[skip..], self.rest.starts_with('"'));
        true
    }

    /// `OPERATOR(pg_catalog.~)`: the operator.
    fn operator(&mut self) -> bool {
        let rest = self.rest;
        if let Some(n) = strip_ci(rest, "operator(pg_catalog.") {
            if let Some(close) = rest[n..].find(')') {
                self.out.push_str(rest[n..n + close].trim());
                self.advance(&rest[n + close + 1..], false);
                return true;
            }
        }
        false
    }

    /// `COLLATE pg_catalog.default`: nothing.
    fn collate(&mut self) -> bool {
        let Some(n) = strip_ci(self.rest, "collate pg_catalog.default") else {
            return false;
        };
        self.rest = &self.rest[n..];
        true
    }

    /// A cast: to PostgreSQL's object-name types DuckDB lacks, as text;
    /// `::pg_catalog.text` is `::text`.
    fn cast(&mut self) -> bool {
        let Some(n) = strip_ci(self.rest, "::") else {
            return false;
        };
        let after = &self.rest[n..];
        let after = strip_ci(after, "pg_catalog.").map_or(after, |m| &after[m..]);
        let w = word(after);
        // A column of the keys cast to `regclass` (psql's
        // `conrelid::pg_catalog.regclass`): the table's name.
        if let (Some(k), Some(start)) = (self.keys, trailing_name(&self.out)) {
            if w.eq_ignore_ascii_case("regclass") {
                let column = self.out.split_off(start);
                self.out.push_str(&keys::relname(k, &column));
                self.advance(&after[w.len()..], true);
                return true;
            }
        }
        self.out.push_str("::");
        if is_reg_type(w) {
            self.out.push_str("VARCHAR");
        } else {
            self.out.push_str(w);
        }
        self.advance(&after[w.len()..], true);
        true
    }

    /// A word that is not part of a name before it: `AS` of a cast, a
    /// qualified name, a function's call, or the word itself.
    fn bare_word(&mut self) -> bool {
        let c = self.rest.chars().next().unwrap_or(' ');
        if self.after_name || !(c.is_ascii_alphabetic() || c == '_') {
            return false;
        }
        let w = word(self.rest);
        let after = &self.rest[w.len()..];
        if self.cast_as(w, after)
            || self.expandarray(w, after)
            || self.pg_catalog(w, after)
            || self.call(w, after)
        {
            return true;
        }
        self.out.push_str(w);
        self.advance(after, true);
        true
    }

    /// `CAST(x AS REGCLASS)`, `w` the `AS`: as text.
    fn cast_as(&mut self, w: &str, after: &'a str) -> bool {
        if !w.eq_ignore_ascii_case("as") {
            return false;
        }
        let t = after.trim_start();
        let target = word(t);
        if target.is_empty()
            || !is_reg_type(target)
            || !t[target.len()..].trim_start().starts_with(')')
        {
            return false;
        }
        // `CAST($1 AS REGCLASS)`: a name bound as a parameter, made an oid
        // (SQLAlchemy compares `pg_description.classoid` with one).
        if let Some(param) = cast_parameter(&self.out) {
            if target.eq_ignore_ascii_case("regclass") {
                self.out.truncate(self.out.len() - param.len());
                self.out.push_str(&regclass_oid(&param));
                self.advance(&t[target.len()..].trim_start()[1..], true);
                return true;
            }
        }
        self.out.push_str(w);
        self.out.push_str(&after[..after.len() - t.len()]);
        self.out.push_str("VARCHAR");
        self.advance(&t[target.len()..], true);
        true
    }

    /// `information_schema._pg_expandarray(...)`, `w` the schema: its
    /// rewrite.
    fn expandarray(&mut self, w: &str, after: &'a str) -> bool {
        if !w.eq_ignore_ascii_case("information_schema") || !after.starts_with('.') {
            return false;
        }
        let name = word(&after[1..]);
        let tail = &after[1 + name.len()..];
        if name.eq_ignore_ascii_case("_pg_expandarray") {
            if let Some((text, used)) = function(name, tail, self.keys) {
                self.out.push_str(&text);
                self.advance(&tail[used..], false);
                return true;
            }
        }
        false
    }

    /// `pg_catalog.name`, `w` the schema: a call or a table the door
    /// rewrites, else the name as written.
    fn pg_catalog(&mut self, w: &str, after: &'a str) -> bool {
        if !w.eq_ignore_ascii_case("pg_catalog") || !after.starts_with('.') {
            return false;
        }
        let name = word(&after[1..]);
        let tail = &after[1 + name.len()..];
        if !name.is_empty() {
            if tail.trim_start().starts_with('(') {
                if self.pg_catalog_call(name, tail) {
                    return true;
                }
            } else if self.pg_catalog_table(name, tail) {
                return true;
            }
        }
        self.out.push_str(&self.rest[..w.len() + 1 + name.len()]);
        self.advance(tail, true);
        true
    }

    /// `pg_catalog.name(...)`: a series named by its alias, a function the
    /// door rewrites, or one DuckDB has outside its `pg_catalog`.
    fn pg_catalog_call(&mut self, name: &str, tail: &'a str) -> bool {
        if let Some((text, used)) = series(name, tail, self.keys) {
            self.out.push_str(&text);
            self.advance(&tail[used..], true);
            return true;
        }
        if let Some((text, used)) = function(name, tail, self.keys) {
            self.out.push_str(&text);
            self.advance(&tail[used..], false);
            return true;
        }
        if !PG_FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(name)) {
            self.out.push_str(name);
            self.advance(tail, true);
            return true;
        }
        false
    }

    /// `pg_catalog.name` of a table the door stands in for: its shim.
    fn pg_catalog_table(&mut self, name: &str, tail: &'a str) -> bool {
        let Some(shim) = keys::table(name, self.keys).or_else(|| {
            TABLES
                .iter()
                .find(|(t, _)| t.eq_ignore_ascii_case(name))
                .map(|(_, shim)| Cow::Borrowed(*shim))
        }) else {
            return false;
        };
        if tail.starts_with('.') {
            // A column's qualifier: the shim's alias.
            self.out.push_str(name);
        } else {
            self.out.push('(');
            self.out.push_str(&shim);
            self.out.push(')');
            if !has_alias(tail) {
                self.out.push_str(" AS ");
                self.out.push_str(name);
            }
        }
        self.advance(tail, true);
        true
    }

    /// `w(...)` of a function the door rewrites.
    fn call(&mut self, w: &str, after: &'a str) -> bool {
        if !after.trim_start().starts_with('(') {
            return false;
        }
        let Some((text, used)) = function(w, after, self.keys) else {
            return false;
        };
        self.out.push_str(&text);
        self.advance(&after[used..], false);
        true
    }

    /// One character, unchanged.
    fn character(&mut self) {
        let c = self.rest.chars().next().unwrap_or(' ');
        self.out.push(c);
        self.advance(
            &self.rest[c.len_utf8()..],
            is_ident(c) || c == '.' || c == '"',
        );
    }
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
}
