//! What each statement text asks of the door: DuckDB's work, or a session
//! command the door answers itself.

use super::scan::{skip_blank, Scanner};
use super::setting;

/// What one statement text asks of the door.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// DuckDB's work: the statement as the client wrote it.
    Query(String),
    /// `BEGIN`, `START TRANSACTION`: a no-op (every statement commits on
    /// its own).
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK`, `ABORT`: a no-op; the tag to answer.
    End(&'static str),
    /// `SET name = value`, `SET name TO DEFAULT` (`None`), `RESET name`.
    Set(String, Option<String>),
    /// `RESET ALL`.
    ResetAll,
    /// `SHOW name` of a setting the door keeps.
    Show(String),
    /// Accepted and ignored; the tag to answer (`DISCARD ALL`, `SET
    /// TRANSACTION ...`, `DEALLOCATE`, `UNLISTEN`).
    Noop(&'static str),
    /// `COPY (query) TO STDOUT` or `COPY table TO STDOUT`.
    CopyOut(Copy),
    /// A one-column answer the door writes (`SELECT version()`).
    Fixed(&'static str, Answer),
    /// What the door does not do, and why.
    Unsupported(&'static str),
}

/// The door's own answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// `version()`: a PostgreSQL-style version text naming the gateway and
    /// DuckDB (drivers parse `PostgreSQL <n>.<m>` out of it).
    Version,
}

/// A `COPY ... TO STDOUT`.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    /// The query whose rows are copied.
    pub query: String,
    /// CSV (else PostgreSQL's text format).
    pub csv: bool,
    /// A header line (CSV).
    pub header: bool,
    /// The column separator.
    pub delimiter: char,
    /// The text of NULL.
    pub null: String,
}

/// The words of a statement's start, lower-cased, comments skipped.
fn words(sql: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = skip_blank(sql);
    while out.len() < n && !rest.is_empty() {
        let end = rest
            .find(|c: char| c.is_whitespace() || c == ';' || c == '(' || c == '=')
            .unwrap_or(rest.len());
        let end = if end == 0 {
            rest.chars().next().map_or(1, char::len_utf8)
        } else {
            end
        };
        out.push(rest[..end].to_ascii_lowercase());
        rest = skip_blank(&rest[end..]);
    }
    out
}
/// What `sql` (one statement) asks of the door.
pub fn classify(sql: &str) -> Command {
    let w = words(sql, 4);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    let text = sql.trim().trim_end_matches(';').trim();
    match w.as_slice() {
        ["begin", ..] | ["start", "transaction", ..] => Command::Begin,
        // Savepoints (pandas and SQLAlchemy open one per read) mark
        // nothing: every statement stands alone.
        ["savepoint", ..] => Command::Noop("SAVEPOINT"),
        ["release", ..] => Command::Noop("RELEASE"),
        ["rollback", "to", ..] | ["rollback", _, "to", ..] => Command::Noop("ROLLBACK"),
        ["commit", ..] | ["end", ..] => Command::End("COMMIT"),
        ["rollback", ..] | ["abort", ..] => Command::End("ROLLBACK"),
        ["discard", ..] => Command::Noop("DISCARD ALL"),
        ["deallocate", ..] => Command::Noop("DEALLOCATE"),
        ["unlisten", ..] => Command::Noop("UNLISTEN"),
        ["close", "all", ..] => Command::Noop("CLOSE CURSOR ALL"),
        ["set", "transaction", ..] | ["set", "session", "characteristics", ..] => {
            Command::Noop("SET")
        }
        ["set", ..] => match set_parts(text) {
            Some((name, value)) if setting(&name).is_some() => Command::Set(name, value),
            _ => Command::Query(sql.to_string()),
        },
        ["reset", "all", ..] => Command::ResetAll,
        ["reset", name, ..] if setting(name).is_some() => Command::Set(name.to_string(), None),
        ["show", "all", ..] => Command::Query(sql.to_string()),
        ["show", ..] => {
            let name = skip_blank(text)[4..].trim();
            if setting(name).is_some() {
                Command::Show(name.to_string())
            } else {
                Command::Query(sql.to_string())
            }
        }
        ["copy", ..] => copy(text),
        ["listen", ..] | ["notify", ..] => {
            Command::Unsupported("LISTEN and NOTIFY are not supported by the gateway")
        }
        ["select", ..] => match normalized(text).as_str() {
            "select version()" | "select pg_catalog.version()" | "select version() as version" => {
                Command::Fixed("version", Answer::Version)
            }
            _ => Command::Query(sql.to_string()),
        },
        _ => Command::Query(sql.to_string()),
    }
}

fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase()
}

/// `SET [SESSION | LOCAL] name {= | TO} value` and `SET TIME ZONE value`:
/// the name and the value (`None`: `DEFAULT`).
fn set_parts(text: &str) -> Option<(String, Option<String>)> {
    let rest = skip_blank(text)[3..].trim_start();
    let lower = rest.to_ascii_lowercase();
    let rest = if lower.starts_with("session ") {
        rest[8..].trim_start()
    } else if lower.starts_with("local ") {
        rest[6..].trim_start()
    } else {
        rest
    };
    let lower = rest.to_ascii_lowercase();
    let (name, value) = if lower.starts_with("time zone") {
        ("TimeZone".to_string(), rest[9..].trim())
    } else {
        let end = rest.find(|c: char| c.is_whitespace() || c == '=')?;
        let name = rest[..end].trim_matches('"').to_string();
        let after = rest[end..].trim_start();
        let value = if let Some(v) = after.strip_prefix('=') {
            v
        } else if after.len() >= 2 && after[..2].eq_ignore_ascii_case("to") {
            &after[2..]
        } else {
            return None;
        };
        (name, value.trim())
    };
    if value.eq_ignore_ascii_case("default") || value.eq_ignore_ascii_case("local") {
        return Some((name, None));
    }
    // A list (`search_path = a, b`) is kept as written.
    Some((name, Some(value.to_string())))
}

/// `COPY (query) TO STDOUT [WITH] [(options) | CSV [HEADER]]` or
/// `COPY table [(columns)] TO STDOUT ...`.
fn copy(text: &str) -> Command {
    let (query, after) = match copy_source(text) {
        Ok(source) => source,
        Err(command) => return command,
    };
    let options = match stdout_options(text, after) {
        Ok(options) => options,
        Err(command) => return command,
    };
    match copy_with_options(query, options) {
        Ok(c) => Command::CopyOut(c),
        Err(why) => Command::Unsupported(why),
    }
}

/// The query a `COPY` copies (its own, or one reading the table it names)
/// and the text after it; else what the statement is instead.
fn copy_source(text: &str) -> Result<(String, &str), Command> {
    let rest = skip_blank(text)[4..].trim_start();
    if rest.starts_with('(') {
        return match matching_paren(rest) {
            Some(end) => Ok((rest[1..end].to_string(), rest[end + 1..].trim_start())),
            None => Err(Command::Query(text.to_string())),
        };
    }
    // A table name, possibly with a column list.
    let lower = rest.to_ascii_lowercase();
    let Some(to) = lower.find(" to ") else {
        return Err(if lower.contains(" from ") {
            Command::Unsupported("COPY ... FROM STDIN is not supported: the door only reads")
        } else {
            Command::Query(text.to_string())
        });
    };
    let target = rest[..to].trim();
    let (table, columns) = match target.find('(') {
        Some(p) => (
            target[..p].trim(),
            target[p + 1..].trim_end_matches(')').trim(),
        ),
        None => (target, "*"),
    };
    Ok((
        format!("SELECT {columns} FROM {table}"),
        rest[to..].trim_start(),
    ))
}

/// The options of `TO STDOUT` (`after` is the text after the source), in
/// the client's case for their quoted values; else what the statement is
/// instead.
fn stdout_options<'a>(text: &str, after: &'a str) -> Result<&'a str, Command> {
    let lower = after.to_ascii_lowercase();
    let Some(tail) = lower.strip_prefix("to") else {
        return Err(if lower.starts_with("from") {
            Command::Unsupported("COPY ... FROM STDIN is not supported: the door only reads")
        } else {
            Command::Query(text.to_string())
        });
    };
    let tail = tail.trim_start();
    let Some(options) = tail.strip_prefix("stdout") else {
        return Err(Command::Unsupported(
            "COPY to a file is not supported: copy TO STDOUT (psql's \\copy)",
        ));
    };
    Ok(after[after.len() - options.len()..].trim())
}

/// The copy of `query` with `options`: the format's delimiter and NULL
/// text unless the options name their own; else why it is not done.
fn copy_with_options(query: String, options: &str) -> Result<Copy, &'static str> {
    let mut c = Copy {
        query,
        csv: false,
        header: false,
        delimiter: '\t',
        null: "\\N".into(),
    };
    let (delimiter, null) = read_copy_options(&mut c, &copy_options(options))?;
    if c.csv {
        c.delimiter = ',';
        c.null = String::new();
    }
    if let Some(d) = delimiter {
        c.delimiter = d;
    }
    if let Some(n) = null {
        c.null = n;
    }
    Ok(c)
}

/// COPY's option words read into `c`'s format and header; the delimiter
/// and NULL text they name. An option the door does not do: why.
fn read_copy_options(
    c: &mut Copy,
    tokens: &[String],
) -> Result<(Option<char>, Option<String>), &'static str> {
    let mut delimiter = None;
    let mut null = None;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].to_ascii_lowercase();
        let next = tokens.get(i + 1).cloned();
        match t.as_str() {
            "with" => {}
            "csv" => c.csv = true,
            "binary" => return Err("COPY in the binary format is not supported: use text or CSV"),
            "header" => {
                if next.as_deref().is_some_and(|n| {
                    matches!(
                        n.to_ascii_lowercase().as_str(),
                        "true" | "on" | "1" | "false" | "off" | "0"
                    )
                }) {
                    c.header = matches!(
                        next.as_deref().map(str::to_ascii_lowercase).as_deref(),
                        Some("true" | "on" | "1")
                    );
                    i += 1;
                } else {
                    c.header = true;
                }
            }
            "format" => {
                match next.as_deref().map(str::to_ascii_lowercase).as_deref() {
                    Some("csv") => c.csv = true,
                    Some("text") => c.csv = false,
                    Some("binary") => {
                        return Err("COPY in the binary format is not supported: use text or CSV")
                    }
                    _ => return Err("COPY's FORMAT must be text or csv"),
                }
                i += 1;
            }
            "delimiter" => {
                delimiter = next.and_then(|d| d.chars().next());
                i += 1;
            }
            "null" => {
                null = next;
                i += 1;
            }
            "quote" | "escape" | "force_quote" | "encoding" => {
                return Err(
                    "COPY's QUOTE, ESCAPE, FORCE_QUOTE and ENCODING options are not supported",
                );
            }
            _ => return Err("an unknown COPY option"),
        }
        i += 1;
    }
    Ok((delimiter, null))
}

/// COPY's option words: parentheses and commas dropped, quoted values
/// unquoted.
fn copy_options(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == '(' || c == ')' || c == ',' || c == ';' {
            chars.next();
        } else if c == '\'' {
            chars.next();
            let mut v = String::new();
            while let Some(ch) = chars.next() {
                if ch == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                        v.push('\'');
                    } else {
                        break;
                    }
                } else {
                    v.push(ch);
                }
            }
            out.push(v);
        } else {
            let mut v = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == '(' || ch == ')' || ch == ',' || ch == ';' {
                    break;
                }
                v.push(ch);
                chars.next();
            }
            out.push(v);
        }
    }
    out
}

/// The index of the parenthesis that closes the one `s` starts with,
/// skipping quoted text and comments.
fn matching_paren(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut it = Scanner::new(s);
    while let Some((i, c)) = it.next_code() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_commands_are_the_doors() {
        assert_eq!(classify("BEGIN"), Command::Begin);
        assert_eq!(classify("begin read only"), Command::Begin);
        assert_eq!(classify("COMMIT;"), Command::End("COMMIT"));
        assert_eq!(classify("SAVEPOINT \"_pg3_1\""), Command::Noop("SAVEPOINT"));
        assert_eq!(
            classify("ROLLBACK TO SAVEPOINT x"),
            Command::Noop("ROLLBACK")
        );
        assert_eq!(classify("rollback"), Command::End("ROLLBACK"));
        assert_eq!(
            classify("SET extra_float_digits = 3"),
            Command::Set("extra_float_digits".into(), Some("3".into()))
        );
        assert_eq!(
            classify("set application_name to 'x y'"),
            Command::Set("application_name".into(), Some("'x y'".into()))
        );
        assert_eq!(
            classify("SET TIME ZONE 'UTC'"),
            Command::Set("TimeZone".into(), Some("'UTC'".into()))
        );
        assert_eq!(
            classify("SET threads = 1"),
            Command::Query("SET threads = 1".into())
        );
        assert_eq!(
            classify("show transaction isolation level"),
            Command::Show("transaction isolation level".into())
        );
        assert_eq!(
            classify("SHOW TABLES"),
            Command::Query("SHOW TABLES".into())
        );
        assert_eq!(
            classify("select pg_catalog.version()"),
            Command::Fixed("version", Answer::Version)
        );
    }

    #[test]
    fn copy_to_stdout_reads_its_query_and_options() {
        let Command::CopyOut(c) = classify("COPY ( select 1, ')' ) TO STDOUT with csv header")
        else {
            panic!()
        };
        assert_eq!(c.query, " select 1, ')' ");
        assert!(c.csv && c.header);
        assert_eq!(c.delimiter, ',');
        let Command::CopyOut(c) =
            classify("COPY t (a, b) TO STDOUT (FORMAT csv, DELIMITER ';', NULL 'x')")
        else {
            panic!()
        };
        assert_eq!(c.query, "SELECT a, b FROM t");
        assert_eq!((c.delimiter, c.null.as_str()), (';', "x"));
        let Command::CopyOut(c) = classify("copy t to stdout") else {
            panic!()
        };
        assert!(!c.csv);
        assert_eq!(c.null, "\\N");
        assert!(matches!(
            classify("COPY t FROM STDIN"),
            Command::Unsupported(_)
        ));
    }
}
