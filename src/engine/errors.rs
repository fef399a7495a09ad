//! DuckDB's error texts, read the one way every layer needs, and where an
//! error about a client's SQL points in that SQL (through `errors.cpp`:
//! DuckDB's own reading of the text and its own excerpt).

use std::ffi::{c_char, CStr, CString};

extern "C" {
    fn duckgate_error_place(
        sql: *const c_char,
        position: u64,
        offset: *mut u64,
        excerpt: *mut *mut c_char,
    ) -> i32;
    fn duckgate_excerpt_position(
        sql: *const c_char,
        excerpt: *const c_char,
        max_line: u64,
        position: *mut u64,
    ) -> i32;
    fn duckgate_errors_free(text: *mut c_char);
}

/// Where DuckDB's error points in the SQL the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlPosition {
    /// Byte offset into the client's SQL.
    pub offset: usize,
    /// Line, from 1, as DuckDB counts lines (`\n`, `\r\n` or a lone `\r`).
    pub line: usize,
    /// Column, from 1, in characters (Unicode scalar values) of that line.
    pub column: usize,
    /// DuckDB's excerpt of the client's SQL there: `LINE n: ...` and a
    /// caret line under the place; `None` where DuckDB renders none (a
    /// place at the very end of the text).
    pub excerpt: Option<String>,
}

/// `position`, a byte offset into the text DuckDB's parser read for `sql`
/// (Unicode blanks replaced by spaces), as a place in `sql` itself, with
/// DuckDB's excerpt of `sql` there.
pub fn place(sql: &str, position: usize) -> Option<SqlPosition> {
    let c_sql = CString::new(sql).ok()?;
    let mut offset = 0u64;
    let mut excerpt: *mut c_char = std::ptr::null_mut();
    // SAFETY: `c_sql` is NUL-terminated and outlives the call; the shim
    // writes the two out-parameters, which live on this frame, and catches
    // every C++ exception.
    let found =
        unsafe { duckgate_error_place(c_sql.as_ptr(), position as u64, &mut offset, &mut excerpt) };
    let text = (!excerpt.is_null()).then(|| {
        // SAFETY: non-null, NUL-terminated, malloc'd by the shim; copied
        // before it is freed exactly once.
        let text = unsafe { CStr::from_ptr(excerpt) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above; not used afterwards.
        unsafe { duckgate_errors_free(excerpt) };
        text
    });
    if found != 1 {
        return None;
    }
    let offset = usize::try_from(offset).ok()?;
    let (line, column) = line_and_column(sql, offset)?;
    Some(SqlPosition {
        offset,
        line,
        column,
        excerpt: text,
    })
}

/// The line and column (both from 1, the column in characters) of byte
/// `offset` of `text`, lines counted as DuckDB's excerpt counts them
/// (`QueryErrorContext::Format`): a `\n`, or a `\r` not followed by `\n`
/// before the offset, starts a new line.
pub fn line_and_column(text: &str, offset: usize) -> Option<(usize, usize)> {
    if offset > text.len() || !text.is_char_boundary(offset) {
        return None;
    }
    let bytes = text.as_bytes();
    let (mut line, mut start) = (1, 0);
    for i in 0..offset {
        let newline = match bytes[i] {
            b'\n' => true,
            b'\r' => i + 1 >= offset || bytes[i + 1] != b'\n',
            _ => false,
        };
        if newline {
            line += 1;
            start = i + 1;
        }
    }
    Some((line, text[start..offset].chars().count() + 1))
}

/// DuckDB's message without the excerpt DuckDB appends to errors that reach
/// its C API (`\n\nLINE n: ...\n    ^`), and that excerpt. The excerpt is
/// of the text DuckDB ran, which may be a wrapper of the client's statement:
/// see [`excerpt_position`].
pub fn split_excerpt(message: &str) -> (&str, Option<&str>) {
    let Some(at) = message.rfind("\n\nLINE ") else {
        return (message, None);
    };
    let excerpt = &message[at + 2..];
    let well_formed = excerpt.split_once('\n').is_some_and(|(shown, caret)| {
        let digits = shown["LINE ".len()..]
            .split_once(": ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        digits && caret.ends_with('^') && caret[..caret.len() - 1].bytes().all(|b| b == b' ')
    });
    if well_formed {
        (&message[..at], Some(excerpt))
    } else {
        (message, None)
    }
}

/// The longest line an excerpt is searched in (the search renders DuckDB's
/// excerpt once per candidate byte, each time over the whole line).
const MAX_EXCERPT_LINE: u64 = 64 * 1024;

/// The byte offset into DuckDB's reading of `sql` for which DuckDB renders
/// `excerpt` (one [`split_excerpt`] took from its message about `sql`).
pub fn excerpt_position(sql: &str, excerpt: &str) -> Option<usize> {
    let (c_sql, c_excerpt) = (CString::new(sql).ok()?, CString::new(excerpt).ok()?);
    let mut position = 0u64;
    // SAFETY: two NUL-terminated strings that outlive the call; the shim
    // writes the out-parameter, which lives on this frame, and catches every
    // C++ exception.
    let found = unsafe {
        duckgate_excerpt_position(
            c_sql.as_ptr(),
            c_excerpt.as_ptr(),
            MAX_EXCERPT_LINE,
            &mut position,
        )
    };
    (found == 1)
        .then(|| usize::try_from(position).ok())
        .flatten()
}

/// `excerpt` (DuckDB's, of a text that holds a statement from its line
/// `first_line` on) as DuckDB would render it of the statement alone: the
/// same place, its line counted from the statement's first. `None` when the
/// excerpt's line is before the statement's.
pub fn shift_excerpt(excerpt: &str, first_line: usize) -> Option<String> {
    let rest = excerpt.strip_prefix("LINE ")?;
    let (n, rest) = rest.split_once(": ")?;
    let line: usize = n.parse().ok()?;
    let own = line.checked_sub(first_line - 1).filter(|l| *l >= 1)?;
    let (shown, caret) = rest.split_once('\n')?;
    let (was, now) = (format!("LINE {line}: "), format!("LINE {own}: "));
    let spaces = (caret.len() - 1).checked_sub(was.len())? + now.len();
    Some(format!("{now}{shown}\n{}^", " ".repeat(spaces)))
}

/// A DuckDB error message as its class and the rest: DuckDB prefixes
/// messages with their class ("Catalog Error: ..."); `Unknown` otherwise.
pub fn split_class(text: &str) -> (String, String) {
    // Some paths (DuckDB's Arrow export through its C API) hand over the
    // error serialized as JSON: {"exception_type": ..., "exception_message": ...}.
    if text.starts_with('{') {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(text) {
            let field = |k: &str| map.get(k).and_then(serde_json::Value::as_str);
            if let (Some(class), Some(message)) =
                (field("exception_type"), field("exception_message"))
            {
                return (class.trim().to_string(), message.trim().to_string());
            }
        }
    }
    if let Some((head, rest)) = text.split_once(" Error: ") {
        if !head.is_empty()
            && head.len() < 40
            && head.chars().all(|c| c.is_ascii_alphabetic() || c == ' ')
        {
            return (head.trim().to_string(), rest.trim().to_string());
        }
    }
    ("Unknown".to_string(), text.trim().to_string())
}

/// The `position` of a DuckDB error handed over in its JSON form (see
/// [`split_class`]): a byte offset into DuckDB's reading of the text it ran.
pub fn json_position(text: &str) -> Option<usize> {
    if !text.starts_with('{') {
        return None;
    }
    let serde_json::Value::Object(map) = serde_json::from_str(text).ok()? else {
        return None;
    };
    match map.get("position")? {
        serde_json::Value::String(s) => s.parse().ok(),
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    }
}

/// libpq's connection-string keywords.
const DSN_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "dbname",
    "password",
    "passfile",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslpassword",
    "application_name",
    "options",
    "service",
    "connect_timeout",
    "target_session_attrs",
];

/// `message` without the connection strings an extension quotes in its
/// errors (the postgres scanner says "Unable to connect to Postgres at
/// dbname=lake host=... user=..."): they name the operator's database and
/// user to every token, and reach `/healthz`.
pub fn scrub_dsn(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut withheld = false;
    for piece in message.split_inclusive(char::is_whitespace) {
        let word = piece
            .trim()
            .trim_start_matches(['"', '\'', '(', '['])
            .to_ascii_lowercase();
        let dsn_part = word
            .split_once('=')
            .is_some_and(|(k, _)| DSN_KEYS.contains(&k))
            || word.starts_with("postgres://")
            || word.starts_with("postgresql://")
            || word.starts_with("ducklake:postgres:");
        if dsn_part {
            if !withheld {
                out.push_str("[connection string withheld] ");
                withheld = true;
            }
        } else {
            withheld = false;
            out.push_str(piece);
        }
    }
    // libpq's own "connection to server at \"host\" (addr), port N failed".
    let marker = "connection to server at ";
    while let Some(start) = out.find(marker) {
        let from = start + marker.len();
        let Some(len) = out[from..].find(" failed") else {
            break;
        };
        out.replace_range(start..from + len, "connection to the server");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes() {
        let (c, m) = split_class("Catalog Error: Table with name nope does not exist!");
        assert_eq!(c, "Catalog");
        assert!(m.starts_with("Table with name"));
        let (c, _) = split_class("Parser Error: syntax error at or near \"SELEC\"");
        assert_eq!(c, "Parser");
        let (c, m) = split_class(
            r#"{"exception_type":"Not implemented","exception_message":"Unsupported Arrow type TYPE"}"#,
        );
        assert_eq!(
            (c.as_str(), m.as_str()),
            ("Not implemented", "Unsupported Arrow type TYPE")
        );
        let (c, _) = split_class("something odd");
        assert_eq!(c, "Unknown");
    }

    /// DuckDB's message for `sql`, run in-process.
    fn duckdb_error(sql: &str) -> String {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let run = || -> duckdb::Result<()> {
            let mut stmt = conn.prepare(sql)?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        };
        match run() {
            Err(duckdb::Error::DuckDBFailure(_, Some(m))) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn excerpts_are_read_back_to_duckdbs_place() {
        let long = format!(
            "SELECT {}, 'x'::INTEGER AS bad, {}",
            (0..40)
                .map(|i| format!("{i} AS c{i}"))
                .collect::<Vec<_>>()
                .join(", "),
            (40..80)
                .map(|i| format!("{i} AS c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for sql in [
            "SELECT 1,\n  'x'::INTEGER".to_string(),
            "SELECT '日本語', 'x'::INTEGER".to_string(),
            "SELECT 1,\r\n'x'::INTEGER".to_string(),
            long,
        ] {
            let message = duckdb_error(&sql);
            let (text, excerpt) = split_excerpt(&message);
            let excerpt = excerpt.unwrap_or_else(|| panic!("{message}"));
            assert!(
                text.starts_with("Conversion Error: Could not convert"),
                "{text}"
            );
            let at = excerpt_position(&sql, excerpt).unwrap_or_else(|| panic!("{excerpt}"));
            assert!(sql[at..].starts_with("::INTEGER"), "{sql:?} at {at}");
            // DuckDB renders the same excerpt of the client's text there.
            let placed = place(&sql, at).unwrap();
            assert_eq!(placed.excerpt.as_deref(), Some(excerpt));
            assert_eq!(placed.offset, at);
        }
        assert_eq!(split_excerpt("no excerpt\n\nLINE x: y\n ^").1, None);
    }

    #[test]
    fn an_excerpt_of_a_wrapper_is_shifted_to_the_statement() {
        assert_eq!(
            shift_excerpt("LINE 10: abc\n          ^", 2).as_deref(),
            Some("LINE 9: abc\n         ^")
        );
        assert_eq!(shift_excerpt("LINE 1: SELECT x\n        ^", 2), None);
    }

    #[test]
    fn lines_and_columns_count_as_duckdb_does() {
        assert_eq!(line_and_column("a\nbc", 3), Some((2, 2)));
        assert_eq!(line_and_column("a\r\nbc", 4), Some((2, 2)));
        assert_eq!(line_and_column("a\rbc", 3), Some((2, 2)));
        assert_eq!(line_and_column("é x", 3), Some((1, 3)));
        assert_eq!(line_and_column("é x", 1), None);
        assert_eq!(
            json_position(r#"{"exception_type":"Conversion","position":"62"}"#),
            Some(62)
        );
        assert_eq!(json_position("Conversion Error: x"), None);
    }

    #[test]
    fn connection_strings_are_withheld() {
        let m = "Unable to connect to Postgres at \"dbname=lake host=10.0.0.7 port=5433 user=lakeadmin\": connection refused";
        let s = super::scrub_dsn(m);
        for leak in ["dbname", "lakeadmin", "10.0.0.7", "5433"] {
            assert!(!s.contains(leak), "{s}");
        }
        assert!(s.contains("connection refused"), "{s}");
        let s =
            super::scrub_dsn("x: connection to server at \"10.0.0.7\", port 5433 failed: refused");
        assert_eq!(s, "x: connection to the server failed: refused");
        let u = super::scrub_dsn("failed: postgresql://u:pw@db/lake refused");
        assert!(!u.contains("pw@db"), "{u}");
        assert_eq!(super::scrub_dsn("a = b and x=1"), "a = b and x=1");
    }
}
