//! The statement guard: what a client's SQL is, by DuckDB's own parser, and
//! whether the policy admits it. Nothing reaches `prepare` or `execute` on a
//! pooled connection before this has accepted it.
//!
//! Two checks, both from DuckDB rather than from patterns:
//! 1. `duckdb_extract_statements` counts statements (so `SELECT 1; DROP SECRET s`
//!    is two and refused) and `duckdb_prepared_statement_type` gives the type.
//! 2. Types that are too coarse (CREATE SECRET and CREATE TABLE are both CREATE)
//!    are refined by the object keyword, read with a tokenizer that follows
//!    DuckDB's lexical rules for comments, strings and quoted identifiers,
//!    applied only to text the parser has already accepted as one statement.
//!    Functions that expose secrets or run dynamic SQL are found in the parse
//!    tree from DuckDB's `json_serialize_sql`.

use duckdb::ffi;

use crate::config::Policy;
use crate::engine::ffi::{Extracted, RawConnection};

/// A statement the guard accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Human name of the statement kind, e.g. `SELECT`, `CREATE TABLE`.
    pub kind: String,
    /// Whether the statement only reads (queries may be retried).
    pub read_only: bool,
}

/// Why the guard refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not SQL DuckDB can parse.
    Parse(String),
    /// Parsed, but binding failed (unknown table, wrong types, ...).
    Bind(String),
    /// Zero or several statements.
    StatementCount(usize),
    /// A kind the policy never admits.
    Forbidden { kind: String, reason: String },
}

/// Classifies `sql` and applies `policy`.
pub fn check(
    raw: &RawConnection,
    conn: &duckdb::Connection,
    sql: &str,
    policy: Policy,
) -> Result<Accepted, Refusal> {
    check_depth(raw, conn, sql, policy, 0)
}

fn check_depth(
    raw: &RawConnection,
    conn: &duckdb::Connection,
    sql: &str,
    policy: Policy,
    depth: u8,
) -> Result<Accepted, Refusal> {
    let words = leading_words(sql, 8);
    // Kinds that are never admitted are refused before DuckDB parses the
    // text: its parser is not side-effect free for all of them. The PRAGMA
    // handler runs inside `duckdb_extract_statements` and rewrites query
    // pragmas into SELECTs (`PRAGMA show_tables` would be admitted as one),
    // IMPORT DATABASE reads the directory's SQL files while being parsed, and
    // COPY FROM DATABASE expands into several statements. Only ever a
    // refusal, and only for a text that holds one statement, so several
    // statements are still reported as such.
    if let Some(refusal) = forbidden_before_parsing(sql, &words) {
        return Err(refusal);
    }
    let statement_type = match raw.classify(sql) {
        Extracted::ParseError(msg) => return Err(Refusal::Parse(msg)),
        Extracted::Count(n) => return Err(Refusal::StatementCount(n)),
        Extracted::One(t) => Some(t),
        // A statement that does not bind may still be one we must name as
        // forbidden (DROP SECRET of a missing name, a forbidden function
        // that rejects its arguments, a write in the read-only policy to a
        // table that does not exist): classify by its words and functions.
        Extracted::BindError(msg) => {
            if let Some(refusal) = forbidden_by_words(&words) {
                return Err(refusal);
            }
            check_functions(conn, sql)?;
            if policy == Policy::ReadOnly {
                if let Some(kind) = write_kind_by_words(&words) {
                    return Err(Refusal::Forbidden {
                        kind,
                        reason: "the read-only policy admits queries only".into(),
                    });
                }
            }
            return Err(Refusal::Bind(msg));
        }
    };
    let t = statement_type.expect("set above");
    let base = type_name(t);
    let forbid = |kind: String, reason: &str| Refusal::Forbidden {
        kind,
        reason: reason.to_string(),
    };

    match t {
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SELECT => {
            check_functions(conn, sql)?;
            Ok(Accepted {
                kind: select_kind(&words),
                read_only: true,
            })
        }
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_EXPLAIN => {
            // EXPLAIN ANALYZE runs the statement it explains: judge that one.
            if depth > 0 {
                return Err(forbid("EXPLAIN".into(), "nested EXPLAIN is not supported"));
            }
            let inner = explained_statement(sql).ok_or_else(|| {
                forbid(
                    "EXPLAIN".into(),
                    "the explained statement could not be isolated",
                )
            })?;
            let accepted = check_depth(raw, conn, inner, policy, depth + 1)?;
            Ok(Accepted {
                kind: format!("EXPLAIN {}", accepted.kind),
                read_only: accepted.read_only,
            })
        }
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_INSERT
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_UPDATE
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DELETE
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_MERGE_INTO => {
            check_functions(conn, sql)?;
            match policy {
                Policy::ReadWrite => Ok(Accepted {
                    kind: base.to_string(),
                    read_only: false,
                }),
                Policy::ReadOnly => Err(forbid(
                    base.into(),
                    "the read-only policy admits queries only",
                )),
            }
        }
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CREATE
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CREATE_FUNC
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DROP
        | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_ALTER => {
            let verb = match t {
                ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DROP => "DROP",
                ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_ALTER => "ALTER",
                _ => "CREATE",
            };
            let Ok(object) = ddl_object_for(verb, &words) else {
                return Err(forbid(
                    verb.to_string(),
                    "the statement could not be classified",
                ));
            };
            let kind = match &object {
                Some(o) => format!("{verb} {o}"),
                None => verb.to_string(),
            };
            if object.as_deref() == Some("SECRET")
                || words.iter().any(|w| w == "SECRET") && object.is_none()
            {
                return Err(forbid(
                    kind,
                    "secrets belong to the gateway; clients may not create, replace or drop them",
                ));
            }
            let allowed_object = matches!(
                object.as_deref(),
                Some(
                    "TABLE"
                        | "VIEW"
                        | "SCHEMA"
                        | "MACRO"
                        | "FUNCTION"
                        | "SEQUENCE"
                        | "INDEX"
                        | "TYPE"
                )
            );
            if !allowed_object {
                return Err(forbid(kind, "only tables, views, schemas, macros, sequences, indexes and types may be changed"));
            }
            check_functions(conn, sql)?;
            match policy {
                Policy::ReadWrite => Ok(Accepted {
                    kind,
                    read_only: false,
                }),
                Policy::ReadOnly => Err(forbid(kind, "the read-only policy admits queries only")),
            }
        }
        _ => {
            let kind = forbidden_kind_name(t, &words);
            let reason = match t {
                ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_TRANSACTION => {
                    "each request is its own transaction"
                }
                ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CALL => {
                    "CALL is not available to clients; use SELECT * FROM function(...)"
                }
                _ => "this statement kind is never available to clients",
            };
            Err(forbid(kind, reason))
        }
    }
}

/// Functions no client may call: they reveal secrets or run SQL the guard has
/// not seen.
///
/// Besides the secret and dynamic-SQL functions, the table functions that
/// change the database's state: logging and profiling switch global or
/// per-connection settings although `lock_configuration` is on (logging to a
/// file outside the allowed directories makes every later query of every
/// connection fail; profiling with a `save_location` leaves its connection
/// answering every query with an internal error), `duckdb_logs` shows other
/// clients' statements, and `checkpoint` is CHECKPOINT.
/// `json_execute_serialized_sql` runs a serialized SELECT the guard never
/// saw, as `query` does.
const FORBIDDEN_FUNCTIONS: &[&str] = &[
    "duckdb_secrets",
    "which_secret",
    "query",
    "query_table",
    "getenv",
    "json_execute_serialized_sql",
    "enable_logging",
    "disable_logging",
    "truncate_duckdb_logs",
    "duckdb_logs",
    "duckdb_logs_parsed",
    "enable_profiling",
    "disable_profiling",
    "checkpoint",
    "force_checkpoint",
];

/// Finds forbidden functions in the statement's parse tree. The parse tree is
/// only consulted when the text could name one (a cheap substring test), so
/// ordinary queries pay nothing.
fn check_functions(conn: &duckdb::Connection, sql: &str) -> Result<(), Refusal> {
    let lower = sql.to_ascii_lowercase();
    let suspicious: Vec<&str> = FORBIDDEN_FUNCTIONS
        .iter()
        .copied()
        .filter(|f| lower.contains(f))
        .collect();
    if suspicious.is_empty() {
        return Ok(());
    }
    let names = function_names(conn, sql);
    for f in FORBIDDEN_FUNCTIONS {
        let hit = match &names {
            Some(names) => names.iter().any(|n| n.eq_ignore_ascii_case(f)),
            // No parse tree (not a plain SELECT): refuse if the name appears
            // followed by a parenthesis in the tokens.
            None => called_by_tokens(sql, f),
        };
        if hit {
            return Err(Refusal::Forbidden {
                kind: format!("function {f}()"),
                reason: "this function reveals secrets or runs SQL the guard has not checked"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Every function and table-function name in a statement's parse tree, from
/// DuckDB's own `json_serialize_sql` (a pure parser call: the statement is
/// passed as a string parameter, never run). `None` when DuckDB cannot
/// serialize it.
fn function_names(conn: &duckdb::Connection, sql: &str) -> Option<Vec<String>> {
    let json: String = conn
        .query_row("SELECT json_serialize_sql(?::VARCHAR)", [sql], |r| r.get(0))
        .ok()?;
    let value: serde_json::Value = serde_json::from_str(&json).ok()?;
    if value
        .get("error")
        .and_then(|e| e.as_bool())
        .unwrap_or(false)
    {
        return None;
    }
    let mut out = Vec::new();
    collect_function_names(&value, &mut out);
    Some(out)
}

fn collect_function_names(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                if k == "function_name" {
                    if let Some(s) = child.as_str() {
                        out.push(s.to_string());
                    }
                }
                collect_function_names(child, out);
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|c| collect_function_names(c, out))
        }
        _ => {}
    }
}

fn called_by_tokens(sql: &str, name: &str) -> bool {
    let toks = tokens(sql, usize::MAX);
    toks.windows(2).any(|w| {
        matches!(&w[0], Token::Word(s) | Token::Quoted(s) if s.eq_ignore_ascii_case(name))
            && w[1] == Token::Punct('(')
    })
}

/// Refuses, before DuckDB parses anything, a text that is one statement (by
/// the tokenizer) whose words make it a kind no policy admits, or an EXPLAIN
/// of one.
fn forbidden_before_parsing(sql: &str, words: &[String]) -> Option<Refusal> {
    if statement_count_by_tokens(sql) != 1 {
        return None;
    }
    if let Some(refusal) = forbidden_by_words(words) {
        return Some(refusal);
    }
    if words.first().map(String::as_str) == Some("EXPLAIN") {
        return forbidden_by_words(&leading_words(explained_statement(sql)?, 8));
    }
    None
}

/// Statements in the text by the tokenizer: pieces between top-level
/// semicolons that hold any token.
fn statement_count_by_tokens(sql: &str) -> usize {
    let mut count = 0;
    let mut in_statement = false;
    for token in tokens(sql, usize::MAX) {
        if token == Token::Punct(';') {
            in_statement = false;
        } else if !in_statement {
            in_statement = true;
            count += 1;
        }
    }
    count
}

/// Names the kind of a statement that failed to bind if its words make it one
/// we refuse anyway, so a refusal does not depend on the object existing.
fn forbidden_by_words(words: &[String]) -> Option<Refusal> {
    let first = words.first()?.as_str();
    let second = words.get(1).map(String::as_str);
    let kind = match first {
        "CREATE" | "DROP" | "ALTER" if ddl_object(words).as_deref() == Some("SECRET") => {
            format!("{first} SECRET")
        }
        "UPDATE" if second == Some("EXTENSIONS") => "UPDATE EXTENSIONS".to_string(),
        "FORCE" if second == Some("CHECKPOINT") => "CHECKPOINT".to_string(),
        "FORCE" => "INSTALL".to_string(),
        "EXPORT" => "EXPORT DATABASE".to_string(),
        "IMPORT" => "IMPORT DATABASE".to_string(),
        "BEGIN" | "COMMIT" | "ROLLBACK" | "ABORT" | "START" | "END" => "TRANSACTION".to_string(),
        "SET" | "RESET" | "PRAGMA" | "ATTACH" | "DETACH" | "USE" | "INSTALL" | "LOAD" | "COPY"
        | "CHECKPOINT" | "VACUUM" | "CALL" | "PREPARE" | "EXECUTE" | "DEALLOCATE" => {
            first.to_string()
        }
        _ => return None,
    };
    Some(Refusal::Forbidden {
        kind,
        reason: "this statement kind is never available to clients".into(),
    })
}

/// The kind of a write, by its first words, for statements that did not
/// bind (a write to a table that does not exist is still a write).
fn write_kind_by_words(words: &[String]) -> Option<String> {
    let first = words.first()?.as_str();
    match first {
        "INSERT" | "UPDATE" | "DELETE" => Some(first.to_string()),
        "MERGE" => Some("MERGE INTO".to_string()),
        "TRUNCATE" => Some("DELETE".to_string()),
        "CREATE" | "DROP" | "ALTER" => Some(match ddl_object(words) {
            Some(object) => format!("{first} {object}"),
            None => first.to_string(),
        }),
        _ => None,
    }
}

fn type_name(t: ffi::duckdb_statement_type) -> &'static str {
    match t {
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SELECT => "SELECT",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_INSERT => "INSERT",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_UPDATE => "UPDATE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_EXPLAIN => "EXPLAIN",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DELETE => "DELETE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_PREPARE => "PREPARE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CREATE => "CREATE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_EXECUTE => "EXECUTE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_ALTER => "ALTER",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_TRANSACTION => "TRANSACTION",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_COPY => "COPY",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_ANALYZE => "ANALYZE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_VARIABLE_SET => "SET VARIABLE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CREATE_FUNC => "CREATE FUNCTION",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DROP => "DROP",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_EXPORT => "EXPORT DATABASE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_PRAGMA => "PRAGMA",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_VACUUM => "VACUUM",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_CALL => "CALL",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SET => "SET",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_LOAD => "LOAD",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_RELATION => "RELATION",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_EXTENSION => "EXTENSION",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_LOGICAL_PLAN => "LOGICAL PLAN",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_ATTACH => "ATTACH",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_DETACH => "DETACH",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_MULTI => "MULTI",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_COPY_DATABASE => "COPY DATABASE",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_UPDATE_EXTENSIONS => "UPDATE EXTENSIONS",
        ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_MERGE_INTO => "MERGE INTO",
        _ => "UNKNOWN",
    }
}

/// A more telling name for refused statements whose type is shared by several
/// spellings (SET and RESET, CHECKPOINT as a PRAGMA, INSTALL and LOAD, ...).
fn forbidden_kind_name(t: ffi::duckdb_statement_type, words: &[String]) -> String {
    let first = words.first().map(String::as_str).unwrap_or("");
    match (t, first) {
        (ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SET, "RESET") => "RESET".into(),
        (ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SET, "USE") => "USE".into(),
        (ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_LOAD, "INSTALL" | "FORCE") => {
            "INSTALL".into()
        }
        (
            ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_PRAGMA
            | ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_VACUUM,
            "CHECKPOINT" | "FORCE",
        ) => "CHECKPOINT".into(),
        (ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_COPY, "IMPORT") => {
            "IMPORT DATABASE".into()
        }
        (ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_PRAGMA, "IMPORT") => {
            "IMPORT DATABASE".into()
        }
        _ => type_name(t).to_string(),
    }
}

fn select_kind(words: &[String]) -> String {
    match words.first().map(String::as_str) {
        Some(
            w @ ("WITH" | "VALUES" | "FROM" | "DESCRIBE" | "SHOW" | "SUMMARIZE" | "PIVOT"
            | "UNPIVOT" | "TABLE"),
        ) => w.to_string(),
        _ => "SELECT".to_string(),
    }
}

/// The object keyword of a statement DuckDB typed as `verb` (CREATE, DROP,
/// ALTER). The words must start with that verb: if they do not, they are
/// not the statement's words (the tokenizer and DuckDB disagree), and
/// nothing may be admitted on them.
fn ddl_object_for(verb: &str, words: &[String]) -> Result<Option<String>, ()> {
    if words.first().map(String::as_str) != Some(verb) {
        return Err(());
    }
    Ok(ddl_object(words))
}

/// The object keyword of CREATE/DROP/ALTER: skips OR REPLACE, TEMP/TEMPORARY,
/// PERSISTENT, UNIQUE, IF [NOT] EXISTS and storage names.
fn ddl_object(words: &[String]) -> Option<String> {
    for w in words.iter().skip(1).map(String::as_str) {
        match w {
            "OR" | "REPLACE" | "TEMP" | "TEMPORARY" | "PERSISTENT" | "UNIQUE" | "IF" | "NOT"
            | "EXISTS" => continue,
            "MACRO" | "FUNCTION" => return Some("MACRO".into()),
            "TABLE" | "VIEW" | "SCHEMA" | "SEQUENCE" | "INDEX" | "TYPE" | "SECRET" | "DATABASE"
            | "CATALOG" => return Some(w.to_string()),
            other => return Some(other.to_string()),
        }
    }
    None
}

/// The text of the statement an EXPLAIN explains: after `EXPLAIN`, an optional
/// `ANALYZE`/`ANALYSE` and an optional parenthesised option list.
fn explained_statement(sql: &str) -> Option<&str> {
    let spans = token_spans(sql);
    let mut i = 0;
    let is_word = |i: usize, w: &str| matches!(spans.get(i), Some((Token::Word(s), _)) if s == w);
    if !is_word(i, "EXPLAIN") {
        return None;
    }
    i += 1;
    if is_word(i, "ANALYZE") || is_word(i, "ANALYSE") {
        i += 1;
    }
    if matches!(spans.get(i), Some((Token::Punct('('), _))) {
        let mut depth = 0usize;
        while let Some((tok, _)) = spans.get(i) {
            match tok {
                Token::Punct('(') => depth += 1,
                Token::Punct(')') => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    let (_, start) = spans.get(i)?;
    Some(&sql[*start..])
}

/// A lexical token, following DuckDB's (PostgreSQL's) rules.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An unquoted word, upper-cased.
    Word(String),
    /// A double-quoted identifier, as written.
    Quoted(String),
    /// A string literal (contents dropped).
    Str,
    /// A number.
    Number,
    /// Any other character.
    Punct(char),
}

/// The first `n` unquoted words of the text, upper-cased; quoted identifiers,
/// strings and comments never count as words.
pub fn leading_words(sql: &str, n: usize) -> Vec<String> {
    tokens(sql, n)
        .into_iter()
        .take_while(|t| matches!(t, Token::Word(_)))
        .filter_map(|t| match t {
            Token::Word(w) => Some(w),
            _ => None,
        })
        .collect()
}

fn tokens(sql: &str, limit: usize) -> Vec<Token> {
    token_spans(sql)
        .into_iter()
        .take(limit)
        .map(|(t, _)| t)
        .collect()
}

/// The length of the Unicode blank at the start of `bytes`, if any: the
/// characters DuckDB's parser replaces with a space outside strings, quoted
/// identifiers and `--` comments before it lexes (NBSP, U+2000 to U+200B,
/// U+202F, U+205F, U+2060, U+3000, U+FEFF). To DuckDB `CREATE<NBSP>SECRET`
/// is two words, so it must be to the guard.
fn unicode_blank_len(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [0xC2, 0xA0, ..] => Some(2),
        [0xE2, 0x80, 0x80..=0x8B, ..] | [0xE2, 0x80, 0xAF, ..] | [0xE2, 0x81, 0x9F | 0xA0, ..] => {
            Some(3)
        }
        [0xE3, 0x80, 0x80, ..] | [0xEF, 0xBB, 0xBF, ..] => Some(3),
        _ => None,
    }
}

fn token_spans(sql: &str) -> Vec<(Token, usize)> {
    let bytes = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if let Some(len) = unicode_blank_len(&bytes[i..]) {
            i += len;
        } else if c == b'-' && bytes.get(i + 1) == Some(&b'-') {
            // As in DuckDB's lexer, a carriage return ends the comment too.
            while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                i += 1;
            }
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            // Block comments nest, as in PostgreSQL.
            let mut depth = 1;
            i += 2;
            while i < bytes.len() && depth > 0 {
                if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
        } else if c == b'\'' || ((c == b'e' || c == b'E') && bytes.get(i + 1) == Some(&b'\'')) {
            let escapes = c != b'\'';
            i += if escapes { 2 } else { 1 };
            while i < bytes.len() {
                if escapes && bytes[i] == b'\\' {
                    i += 2;
                } else if bytes[i] == b'\'' {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                    } else {
                        i += 1;
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push((Token::Str, i));
        } else if c == b'"' {
            let start = i;
            i += 1;
            let mut ident = String::new();
            while i < bytes.len() {
                if bytes[i] == b'"' {
                    if bytes.get(i + 1) == Some(&b'"') {
                        ident.push('"');
                        i += 2;
                    } else {
                        i += 1;
                        break;
                    }
                } else {
                    let ch = sql[i..].chars().next().expect("in bounds");
                    ident.push(ch);
                    i += ch.len_utf8();
                }
            }
            out.push((Token::Quoted(ident), start));
        } else if c == b'$' {
            // Dollar-quoted string: $tag$ ... $tag$, with DuckDB's tag rule
            // (a letter, `_` or non-ASCII byte, then those or digits; `$1`
            // is a parameter, not the start of a tag).
            let start = i;
            let tag_end = sql[i + 1..].find('$').map(|p| i + 1 + p);
            let tag_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
            match tag_end {
                Some(end)
                    if bytes[i + 1..end].iter().all(|&b| tag_byte(b))
                        && !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) =>
                {
                    let tag = &sql[i..=end];
                    match sql[end + 1..].find(tag) {
                        Some(close) => i = end + 1 + close + tag.len(),
                        None => i = bytes.len(),
                    }
                    out.push((Token::Str, start));
                }
                _ => {
                    out.push((Token::Punct('$'), start));
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.' || bytes[i] == b'_')
            {
                i += 1;
            }
            out.push((Token::Number, start));
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || bytes[i] == b'_'
                    || bytes[i] == b'$'
                    || bytes[i] >= 0x80)
                && unicode_blank_len(&bytes[i..]).is_none()
            {
                i += 1;
            }
            out.push((Token::Word(sql[start..i].to_ascii_uppercase()), start));
        } else {
            let ch = sql[i..].chars().next().expect("in bounds");
            out.push((Token::Punct(ch), i));
            i += ch.len_utf8();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_skip_comments_and_case() {
        assert_eq!(
            leading_words(
                "/* x */ create\n\t-- c\n or   REPLACE persistent SECRET s",
                8
            ),
            vec!["CREATE", "OR", "REPLACE", "PERSISTENT", "SECRET", "S"]
        );
        assert_eq!(
            leading_words("/* /* nested */ still */ drop secret x", 3),
            vec!["DROP", "SECRET", "X"]
        );
        assert_eq!(
            leading_words("CREATE TABLE \"secret\" (a int)", 8),
            vec!["CREATE", "TABLE"]
        );
    }

    #[test]
    fn ddl_objects() {
        let w = |s: &str| leading_words(s, 8);
        assert_eq!(
            ddl_object(&w("CREATE OR REPLACE TEMPORARY SECRET s")).as_deref(),
            Some("SECRET")
        );
        assert_eq!(
            ddl_object(&w("DROP SECRET IF EXISTS s")).as_deref(),
            Some("SECRET")
        );
        assert_eq!(
            ddl_object(&w("CREATE UNIQUE INDEX i ON t(a)")).as_deref(),
            Some("INDEX")
        );
        assert_eq!(
            ddl_object(&w("CREATE TABLE IF NOT EXISTS t(a int)")).as_deref(),
            Some("TABLE")
        );
        assert_eq!(
            ddl_object(&w("create macro m(a) as a")).as_deref(),
            Some("MACRO")
        );
    }

    #[test]
    fn explain_inner() {
        assert_eq!(
            explained_statement("EXPLAIN ANALYZE SELECT 1"),
            Some("SELECT 1")
        );
        assert_eq!(
            explained_statement("explain (format json) select 1"),
            Some("select 1")
        );
        assert_eq!(explained_statement("SELECT 1"), None);
    }

    /// The guard on an in-memory database (no extensions), after `setup`.
    fn verdict(policy: Policy, setup: &str, sql: &str) -> Result<Accepted, Refusal> {
        let db = crate::engine::ffi::RawDatabase::open(None, &[]).unwrap();
        let conn = db.connect().unwrap();
        if !setup.is_empty() {
            conn.execute_batch(setup).unwrap();
        }
        let raw = db.connect_raw().unwrap();
        check(&raw, &conn, sql, policy)
    }

    fn refused_as(policy: Policy, setup: &str, sql: &str) -> String {
        match verdict(policy, setup, sql) {
            Err(Refusal::Forbidden { kind, .. }) => kind,
            other => format!("not forbidden: {other:?}"),
        }
    }

    #[test]
    fn carriage_return_ends_line_comments() {
        // DuckDB reads `CREATE SECRET view (...)`: the comment ends at `\r`.
        let sql = "CREATE -- x\rSECRET view (TYPE s3) /*\n VIEW */";
        assert_eq!(leading_words(sql, 3), vec!["CREATE", "SECRET", "VIEW"]);
        assert!(called_by_tokens(
            "INSERT INTO t SELECT 1, 'x' --\rFROM duckdb_secrets()",
            "duckdb_secrets"
        ));
        let explained =
            explained_statement("EXPLAIN ANALYZE -- x\rCOPY (SELECT 1) TO 'f' /*\n SELECT 1 --*/");
        assert!(
            explained.is_some_and(|s| s.starts_with("COPY")),
            "{explained:?}"
        );
        let t = "CREATE TABLE t (a INTEGER, s VARCHAR)";
        assert_eq!(
            refused_as(
                Policy::ReadWrite,
                t,
                "INSERT INTO t SELECT 1, name --\rFROM duckdb_secrets()"
            ),
            "function duckdb_secrets()"
        );
        assert_eq!(refused_as(Policy::ReadWrite, "", sql), "CREATE SECRET");
    }

    #[test]
    fn unicode_blanks_separate_words() {
        for blank in [
            "\u{a0}", "\u{2000}", "\u{2003}", "\u{200a}", "\u{200b}", "\u{202f}", "\u{205f}",
            "\u{2060}", "\u{3000}", "\u{feff}",
        ] {
            let sql = format!("CREATE{blank}SECRET view (TYPE s3)");
            assert_eq!(
                leading_words(&sql, 3),
                vec!["CREATE", "SECRET", "VIEW"],
                "{blank:?}"
            );
            assert_eq!(
                refused_as(Policy::ReadWrite, "", &sql),
                "CREATE SECRET",
                "{blank:?}"
            );
        }
        // Other non-ASCII text stays inside words, strings and identifiers.
        assert_eq!(
            leading_words("SELECT sécret\u{1680}x", 4),
            vec!["SELECT", "SéCRET\u{1680}X"]
        );
        assert!(verdict(Policy::ReadOnly, "", "SELECT\u{a0}42\u{3000}AS\u{2003}x").is_ok());
        assert!(verdict(Policy::ReadOnly, "", "SELECT '\u{a0}' AS \"\u{a0}\"").is_ok());
    }

    #[test]
    fn dollar_quotes_follow_duckdb() {
        // `$1` is a parameter to DuckDB, so `$1a$` starts no string.
        let sql = "INSERT INTO t SELECT $1a$, name FROM duckdb_secrets() --$1a$";
        assert!(called_by_tokens(sql, "duckdb_secrets"));
        let t = "CREATE TABLE t (a INTEGER, s VARCHAR)";
        assert_eq!(
            refused_as(Policy::ReadWrite, t, sql),
            "function duckdb_secrets()"
        );
        // Non-ASCII tags are tags to DuckDB.
        assert!(!called_by_tokens(
            "SELECT $→$ duckdb_secrets() $→$",
            "duckdb_secrets"
        ));
        assert!(verdict(
            Policy::ReadOnly,
            "",
            "SELECT $→$duckdb_secrets()$→$ AS s, $$x$$ AS y"
        )
        .is_ok());
    }

    #[test]
    fn ddl_words_must_start_with_the_verb() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ddl_object_for("CREATE", &w(&["CREATE", "VIEW", "V"])),
            Ok(Some("VIEW".into()))
        );
        assert_eq!(
            ddl_object_for("CREATE", &w(&["CREATE\u{85}SECRET", "VIEW"])),
            Err(())
        );
        assert_eq!(ddl_object_for("DROP", &w(&["DEALLOCATE", "P"])), Err(()));
    }

    #[test]
    fn never_admitted_kinds_are_refused_before_parsing() {
        let ro = |sql: &str| refused_as(Policy::ReadOnly, "", sql);
        // The PRAGMA handler would turn these into SELECTs.
        assert_eq!(ro("PRAGMA show_tables"), "PRAGMA");
        assert_eq!(ro("pragma version"), "PRAGMA");
        assert_eq!(ro("PRAGMA threads=1"), "PRAGMA");
        // Parsing IMPORT reads files; COPY FROM DATABASE is four statements.
        assert_eq!(
            ro("IMPORT DATABASE '/nonexistent-duckgate-dir'"),
            "IMPORT DATABASE"
        );
        assert_eq!(ro("COPY FROM DATABASE memory TO memory"), "COPY");
        assert_eq!(
            ro("EXPORT DATABASE '/nonexistent-duckgate-dir'"),
            "EXPORT DATABASE"
        );
        // DuckDB types CHECKPOINT as CALL.
        assert_eq!(ro("CHECKPOINT"), "CHECKPOINT");
        assert_eq!(ro("FORCE CHECKPOINT"), "CHECKPOINT");
        assert_eq!(ro("FORCE INSTALL httpfs"), "INSTALL");
        assert_eq!(ro("BEGIN"), "TRANSACTION");
        // Not valid SQL to DuckDB, still named for what it tries.
        assert_eq!(ro("EXPLAIN ANALYZE DROP SECRET s"), "DROP SECRET");
        // Several statements stay several statements.
        assert_eq!(
            verdict(Policy::ReadOnly, "", "SELECT 1; PRAGMA show_tables").unwrap_err(),
            Refusal::StatementCount(2)
        );
        assert_eq!(
            verdict(Policy::ReadOnly, "", "DROP SECRET s; SELECT 1").unwrap_err(),
            Refusal::StatementCount(2)
        );
        assert_eq!(
            statement_count_by_tokens("SELECT ';'; -- ;\n SELECT 2;;"),
            2
        );
        assert_eq!(statement_count_by_tokens("SELECT 1;"), 1);
    }

    #[test]
    fn state_changing_table_functions_are_forbidden() {
        let ro = |sql: &str| refused_as(Policy::ReadOnly, "", sql);
        assert_eq!(
            ro("SELECT * FROM enable_logging()"),
            "function enable_logging()"
        );
        assert_eq!(
            ro("FROM enable_profiling(save_location := '/tmp/p.json')"),
            "function enable_profiling()"
        );
        assert_eq!(ro("SELECT * FROM checkpoint()"), "function checkpoint()");
        assert_eq!(ro("SELECT * FROM duckdb_logs()"), "function duckdb_logs()");
        assert_eq!(
            ro("SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT * FROM duckdb_secrets()'))"),
            "function json_execute_serialized_sql()"
        );
        assert!(verdict(
            Policy::ReadOnly,
            "",
            "SELECT 'checkpoint()' AS s, 1 AS enable_logging"
        )
        .is_ok());
    }

    #[test]
    fn unbound_statements_are_still_named() {
        let ro = |sql: &str| refused_as(Policy::ReadOnly, "", sql);
        assert_eq!(ro("SELECT getenv('HOME')"), "function getenv()");
        assert_eq!(
            ro("SELECT * FROM query_table('no_such_table')"),
            "function query_table()"
        );
        assert_eq!(ro("INSERT INTO no_such_table VALUES (1)"), "INSERT");
        assert_eq!(ro("UPDATE no_such_table SET a = 1"), "UPDATE");
        assert_eq!(ro("DELETE FROM no_such_table"), "DELETE");
        // read-write: a plain binder error, as before.
        assert!(matches!(
            verdict(
                Policy::ReadWrite,
                "",
                "INSERT INTO no_such_table VALUES (1)"
            ),
            Err(Refusal::Bind(_))
        ));
    }

    #[test]
    fn strings_do_not_leak_words() {
        assert!(!called_by_tokens(
            "SELECT 'duckdb_secrets()' AS x",
            "duckdb_secrets"
        ));
        assert!(called_by_tokens(
            "SELECT * FROM \"duckdb_secrets\" ()",
            "duckdb_secrets"
        ));
    }
}
