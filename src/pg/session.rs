//! A connection's session: who it is, the settings drivers send (kept here,
//! never set on a pooled DuckDB connection), the statement running now (for
//! a cancel request), and what each statement text asks of the door:
//! DuckDB's work, or a session command the door answers itself (`SET`,
//! `SHOW`, `BEGIN`, `COMMIT`, `DISCARD`, `COPY ... TO STDOUT`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::pg::backend::{Identity, Running, Started};
use crate::pg::errors::{self, code};

/// One connection's session.
pub struct Session {
    /// Who runs the statements.
    pub identity: Identity,
    /// The settings a client set, by lower-case name.
    settings: Mutex<BTreeMap<String, String>>,
    /// The statement running now, for a cancel request.
    running: Mutex<Option<Arc<Running>>>,
    /// A statement started by a `Describe` of a portal (its columns are
    /// known only once it runs), kept for the `Execute` that follows: the
    /// portal's address and the started statement.
    pub pending: tokio::sync::Mutex<Option<(usize, Started)>>,
}

impl Session {
    /// A session for `identity`, with the settings the client's startup
    /// message carried (those the door keeps).
    pub fn new(identity: Identity, startup: &std::collections::HashMap<String, String>) -> Self {
        let session = Session {
            identity,
            settings: Mutex::new(BTreeMap::new()),
            running: Mutex::new(None),
            pending: tokio::sync::Mutex::new(None),
        };
        for (k, v) in startup {
            // A startup option the door does not keep is ignored, as a
            // server ignores options it cannot apply... except that a bad
            // value of one it keeps is refused at its first use.
            if setting(k).is_some() {
                let _ = session.set(k, Some(v));
            }
        }
        session
    }

    /// Sets (or with `None` resets) a setting the door keeps; an error for
    /// a value the door cannot honour.
    pub fn set(&self, name: &str, value: Option<&str>) -> Result<(), pgwire::error::PgWireError> {
        let Some(s) = setting(name) else {
            return Err(errors::error(
                code::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{name}\""),
            ));
        };
        let mut settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        match value {
            None => {
                settings.remove(s.name);
            }
            Some(v) => {
                let v = v.trim();
                let v = v
                    .strip_prefix('\'')
                    .and_then(|v| v.strip_suffix('\''))
                    .unwrap_or(v);
                if s.read_only {
                    return Err(errors::error(
                        "55P02",
                        format!("parameter \"{}\" cannot be changed", s.name),
                    ));
                }
                let v = (s.check)(v).map_err(|why| {
                    errors::error(
                        code::INVALID_PARAMETER,
                        format!("invalid value for parameter \"{}\": \"{v}\": {why}", s.name),
                    )
                })?;
                settings.insert(s.name.to_string(), v);
            }
        }
        Ok(())
    }

    /// A setting's value: the client's, else the door's default.
    pub fn get(&self, name: &str, defaults: &Defaults) -> Option<String> {
        let s = setting(name)?;
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            settings
                .get(s.name)
                .cloned()
                .unwrap_or_else(|| defaults.value(s.name, &self.identity)),
        )
    }

    /// Resets every setting.
    pub fn reset_all(&self) {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// `statement_timeout` in milliseconds (0: the gateway's default).
    pub fn statement_timeout_ms(&self) -> u64 {
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        settings
            .get("statement_timeout")
            .and_then(|v| duration_ms(v).ok())
            .unwrap_or(0)
    }

    /// Records the statement running now.
    pub fn running(&self, r: Option<Arc<Running>>) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = r;
    }

    /// The statement running now, if any.
    pub fn current(&self) -> Option<Arc<Running>> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What the door reports for settings no client set.
pub struct Defaults {
    /// `server_version`.
    pub server_version: String,
    /// `default_transaction_read_only`: `on` under the read-only policy.
    pub read_only: bool,
}

impl Defaults {
    fn value(&self, name: &str, identity: &Identity) -> String {
        match name {
            "server_version" => self.server_version.clone(),
            "server_version_num" => "160006".into(),
            "session_authorization" => identity.name.to_string(),
            "default_transaction_read_only" | "transaction_read_only" => {
                if self.read_only { "on" } else { "off" }.into()
            }
            _ => setting(name)
                .map(|s| s.default.to_string())
                .unwrap_or_default(),
        }
    }
}

/// A setting the door keeps.
pub struct Setting {
    /// Its name, as `SHOW` and `ParameterStatus` spell it.
    pub name: &'static str,
    /// Its value until a client sets one.
    pub default: &'static str,
    /// Whether a client may not set it.
    pub read_only: bool,
    /// Checks a value: the value kept, or why not.
    pub check: fn(&str) -> Result<String, &'static str>,
}

fn any(v: &str) -> Result<String, &'static str> {
    Ok(v.to_string())
}

fn utf8(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_uppercase().replace(['-', '_'], "").as_str() {
        "UTF8" | "UNICODE" => Ok("UTF8".into()),
        _ => Err("the gateway speaks UTF8 only"),
    }
}

fn iso(v: &str) -> Result<String, &'static str> {
    if v.to_ascii_uppercase().contains("ISO") {
        Ok(v.to_string())
    } else {
        Err("the gateway writes dates in ISO style only")
    }
}

fn utc(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_uppercase().as_str() {
        "UTC" | "GMT" | "ETC/UTC" | "ETC/GMT" | "Z" | "ZULU" | "UCT" | "+00" | "+00:00"
        | "00:00" | "0" => Ok(v.to_string()),
        _ => Err("the gateway writes times with zones in UTC only"),
    }
}

fn on(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok("on".into()),
        _ => Err("only on is supported"),
    }
}

fn postgres_style(v: &str) -> Result<String, &'static str> {
    if v.eq_ignore_ascii_case("postgres") {
        Ok("postgres".into())
    } else {
        Err("only the postgres interval style is supported")
    }
}

fn hex(v: &str) -> Result<String, &'static str> {
    if v.eq_ignore_ascii_case("hex") {
        Ok("hex".into())
    } else {
        Err("only hex is supported")
    }
}

fn float_digits(v: &str) -> Result<String, &'static str> {
    match v.parse::<i32>() {
        Ok(n) if (-15..=3).contains(&n) => Ok(n.to_string()),
        _ => Err("an integer from -15 to 3"),
    }
}

fn timeout(v: &str) -> Result<String, &'static str> {
    duration_ms(v).map(|ms| ms.to_string())
}

/// A duration setting's milliseconds: `5000`, `5s`, `250ms`, `1min`, `1h`.
pub fn duration_ms(v: &str) -> Result<u64, &'static str> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n
        .parse()
        .map_err(|_| "a duration such as 5000, 5s or 1min")?;
    let per = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        "us" => 0.001,
        _ => return Err("a duration such as 5000, 5s or 1min"),
    };
    Ok((n * per).round() as u64)
}

const SETTINGS: &[Setting] = &[
    Setting {
        name: "client_encoding",
        default: "UTF8",
        read_only: false,
        check: utf8,
    },
    Setting {
        name: "DateStyle",
        default: "ISO, MDY",
        read_only: false,
        check: iso,
    },
    Setting {
        name: "TimeZone",
        default: "UTC",
        read_only: false,
        check: utc,
    },
    Setting {
        name: "IntervalStyle",
        default: "postgres",
        read_only: false,
        check: postgres_style,
    },
    Setting {
        name: "extra_float_digits",
        default: "1",
        read_only: false,
        check: float_digits,
    },
    Setting {
        name: "application_name",
        default: "",
        read_only: false,
        check: any,
    },
    Setting {
        name: "search_path",
        default: "main",
        read_only: false,
        check: any,
    },
    Setting {
        name: "statement_timeout",
        default: "0",
        read_only: false,
        check: timeout,
    },
    Setting {
        name: "standard_conforming_strings",
        default: "on",
        read_only: false,
        check: on,
    },
    Setting {
        name: "bytea_output",
        default: "hex",
        read_only: false,
        check: hex,
    },
    Setting {
        name: "transaction_isolation",
        default: "read committed",
        read_only: false,
        check: any,
    },
    Setting {
        name: "default_transaction_isolation",
        default: "read committed",
        read_only: false,
        check: any,
    },
    Setting {
        name: "lock_timeout",
        default: "0",
        read_only: false,
        check: any,
    },
    Setting {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        read_only: false,
        check: any,
    },
    Setting {
        name: "server_version",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "server_version_num",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "server_encoding",
        default: "UTF8",
        read_only: true,
        check: any,
    },
    Setting {
        name: "integer_datetimes",
        default: "on",
        read_only: true,
        check: any,
    },
    Setting {
        name: "is_superuser",
        default: "off",
        read_only: true,
        check: any,
    },
    Setting {
        name: "session_authorization",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "default_transaction_read_only",
        default: "",
        read_only: false,
        check: any,
    },
    Setting {
        name: "transaction_read_only",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "max_identifier_length",
        default: "63",
        read_only: true,
        check: any,
    },
    Setting {
        name: "lc_collate",
        default: "C",
        read_only: true,
        check: any,
    },
    Setting {
        name: "lc_ctype",
        default: "C",
        read_only: true,
        check: any,
    },
    Setting {
        name: "in_hot_standby",
        default: "off",
        read_only: true,
        check: any,
    },
];

/// The setting `name` names (any case; `SHOW transaction isolation level`
/// spells one with spaces).
pub fn setting(name: &str) -> Option<&'static Setting> {
    let name = name.trim().replace(' ', "_");
    let name = match name.to_ascii_lowercase().as_str() {
        "transaction_isolation_level" => "transaction_isolation".to_string(),
        "time_zone" => "timezone".to_string(),
        _ => name,
    };
    SETTINGS.iter().find(|s| s.name.eq_ignore_ascii_case(&name))
}

/// The settings a client is told at startup (`ParameterStatus`).
pub const REPORTED: &[&str] = &[
    "server_version",
    "server_encoding",
    "client_encoding",
    "application_name",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "integer_datetimes",
    "standard_conforming_strings",
    "is_superuser",
    "session_authorization",
    "default_transaction_read_only",
    "in_hot_standby",
];

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

/// `sql` from its first character that is not a blank or in a comment.
fn skip_blank(sql: &str) -> &str {
    let mut s = sql;
    loop {
        let t = s.trim_start();
        if let Some(r) = t.strip_prefix("--") {
            s = r.find('\n').map_or("", |i| &r[i + 1..]);
        } else if let Some(r) = t.strip_prefix("/*") {
            s = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            return t;
        }
    }
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
    let rest = skip_blank(text)[4..].trim_start();
    let (query, after) = if rest.starts_with('(') {
        match matching_paren(rest) {
            Some(end) => (rest[1..end].to_string(), rest[end + 1..].trim_start()),
            None => return Command::Query(text.to_string()),
        }
    } else {
        // A table name, possibly with a column list.
        let lower = rest.to_ascii_lowercase();
        let Some(to) = lower.find(" to ") else {
            return if lower.contains(" from ") {
                Command::Unsupported("COPY ... FROM STDIN is not supported: the door only reads")
            } else {
                Command::Query(text.to_string())
            };
        };
        let target = rest[..to].trim();
        let (table, columns) = match target.find('(') {
            Some(p) => (
                target[..p].trim(),
                target[p + 1..].trim_end_matches(')').trim(),
            ),
            None => (target, "*"),
        };
        (
            format!("SELECT {columns} FROM {table}"),
            rest[to..].trim_start(),
        )
    };
    let lower = after.to_ascii_lowercase();
    let Some(tail) = lower.strip_prefix("to") else {
        return if lower.starts_with("from") {
            Command::Unsupported("COPY ... FROM STDIN is not supported: the door only reads")
        } else {
            Command::Query(text.to_string())
        };
    };
    let tail = tail.trim_start();
    let Some(options) = tail.strip_prefix("stdout") else {
        return Command::Unsupported(
            "COPY to a file is not supported: copy TO STDOUT (psql's \\copy)",
        );
    };
    // Options keep the client's case for their quoted values.
    let options_raw = after[after.len() - options.len()..].trim();
    let mut c = Copy {
        query,
        csv: false,
        header: false,
        delimiter: '\t',
        null: "\\N".into(),
    };
    let mut delimiter = None;
    let mut null = None;
    let tokens = copy_options(options_raw);
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].to_ascii_lowercase();
        let next = tokens.get(i + 1).cloned();
        match t.as_str() {
            "with" => {}
            "csv" => c.csv = true,
            "binary" => {
                return Command::Unsupported(
                    "COPY in the binary format is not supported: use text or CSV",
                )
            }
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
                        return Command::Unsupported(
                            "COPY in the binary format is not supported: use text or CSV",
                        )
                    }
                    _ => return Command::Unsupported("COPY's FORMAT must be text or csv"),
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
                return Command::Unsupported(
                    "COPY's QUOTE, ESCAPE, FORCE_QUOTE and ENCODING options are not supported",
                );
            }
            _ => return Command::Unsupported("an unknown COPY option"),
        }
        i += 1;
    }
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
    Command::CopyOut(c)
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

/// Walks SQL text yielding the characters outside quotes and comments.
struct Scanner<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn new(s: &'a str) -> Self {
        Scanner { s, at: 0 }
    }

    fn next_code(&mut self) -> Option<(usize, char)> {
        loop {
            let rest = &self.s[self.at..];
            let c = rest.chars().next()?;
            let i = self.at;
            if rest.starts_with("--") {
                self.at += rest.find('\n').map_or(rest.len(), |n| n + 1);
            } else if let Some(body) = rest.strip_prefix("/*") {
                self.at += body.find("*/").map_or(rest.len(), |n| n + 4);
            } else if c == '\'' || c == '"' {
                let mut j = 1;
                loop {
                    match rest[j..].find(c) {
                        None => {
                            j = rest.len();
                            break;
                        }
                        Some(n) => {
                            j += n + 1;
                            // A doubled quote stays inside.
                            if rest[j..].starts_with(c) {
                                j += 1;
                            } else {
                                break;
                            }
                        }
                    }
                }
                self.at += j;
            } else if c == '$' {
                // `$tag$ ... $tag$` (not `$1`).
                let tag_end = rest[1..]
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                    .map(|n| n + 1);
                match tag_end {
                    Some(e)
                        if rest[e..].starts_with('$')
                            && !rest[1..e].starts_with(|ch: char| ch.is_ascii_digit()) =>
                    {
                        let tag = &rest[..=e];
                        self.at += rest[tag.len()..]
                            .find(tag)
                            .map_or(rest.len(), |n| tag.len() + n + tag.len());
                    }
                    _ => {
                        self.at += 1;
                        return Some((i, c));
                    }
                }
            } else {
                self.at += c.len_utf8();
                return Some((i, c));
            }
        }
    }
}

/// A simple query's statements: `sql` split at the semicolons outside
/// quotes and comments, blank pieces dropped. (DuckDB's parser judges each
/// piece; a piece cut wrongly fails to parse, it cannot pass the guard.)
pub fn split(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = Scanner::new(sql);
    while let Some((i, c)) = it.next_code() {
        if c == ';' {
            let piece = &sql[start..i];
            if !skip_blank(piece).is_empty() {
                out.push(piece);
            }
            start = i + 1;
        }
    }
    let piece = &sql[start..];
    if !skip_blank(piece).is_empty() {
        out.push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        assert_eq!(
            split("select ';' ; select 2 -- a;b\n; /* ; */ select $$;$$;"),
            vec!["select ';' ", " select 2 -- a;b\n", " /* ; */ select $$;$$"]
        );
        assert_eq!(split(" ; ;"), Vec::<&str>::new());
        assert_eq!(split("select $1; select 2"), vec!["select $1", " select 2"]);
    }

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

    #[test]
    fn durations_read_with_units() {
        assert_eq!(duration_ms("5000"), Ok(5000));
        assert_eq!(duration_ms("5s"), Ok(5000));
        assert_eq!(duration_ms("1min"), Ok(60000));
        assert!(duration_ms("soon").is_err());
    }
}
