//! The gateway's problems as PostgreSQL `ErrorResponse`s: a SQLSTATE from
//! the problem's slug and DuckDB's error class, the message DuckDB gave
//! (its first line; the rest as the detail), and DuckDB's place in the SQL
//! as the `P` field (a 1-based character position), so psql draws its
//! caret under it.

use pgwire::error::{ErrorInfo, PgWireError};

use crate::pg::backend::Problem;

/// SQLSTATEs the door answers with.
pub mod code {
    /// `syntax_error`.
    pub const SYNTAX: &str = "42601";
    /// `undefined_table`.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// `undefined_column`.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// `undefined_function`.
    pub const UNDEFINED_FUNCTION: &str = "42883";
    /// `insufficient_privilege`.
    pub const PRIVILEGE: &str = "42501";
    /// `query_canceled`.
    pub const CANCELED: &str = "57014";
    /// `too_many_connections`.
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    /// `invalid_password`.
    pub const BAD_PASSWORD: &str = "28P01";
    /// `invalid_authorization_specification`.
    pub const BAD_AUTHORIZATION: &str = "28000";
    /// `feature_not_supported`.
    pub const NOT_SUPPORTED: &str = "0A000";
    /// `invalid_parameter_value`.
    pub const INVALID_PARAMETER: &str = "22023";
    /// `undefined_object` (an unknown setting).
    pub const UNDEFINED_OBJECT: &str = "42704";
    /// `program_limit_exceeded`.
    pub const LIMIT: &str = "54000";
    /// `protocol_violation`.
    pub const PROTOCOL: &str = "08P01";
    /// `idle_session_timeout`.
    pub const IDLE_TIMEOUT: &str = "57P05";
    /// `admin_shutdown`.
    pub const SHUTDOWN: &str = "57P01";
}

/// An error the client caused or may retry: `ERROR`.
pub fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

/// An error that ends the session: `FATAL`.
pub fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message.into(),
    )))
}

/// The SQLSTATE of a problem.
pub fn sqlstate(problem: &Problem) -> &'static str {
    let class = problem.error_class.as_deref().unwrap_or_default();
    let detail = problem.detail.as_str();
    match problem.slug() {
        "sql-error" | "no-statement" | "multiple-statements" => match class {
            "Parser" => code::SYNTAX,
            "Catalog" if detail.contains("Function") || detail.contains("function") => {
                code::UNDEFINED_FUNCTION
            }
            "Catalog" => code::UNDEFINED_TABLE,
            "Binder" if detail.contains("Referenced column") || detail.contains("column") => {
                code::UNDEFINED_COLUMN
            }
            "Binder" if detail.contains("function") => code::UNDEFINED_FUNCTION,
            "Binder" => "42804",
            "Conversion" | "Invalid Input" => "22P02",
            "Out of Range" => "22003",
            "Constraint" => "23000",
            "Not implemented" => code::NOT_SUPPORTED,
            _ => "42000",
        },
        "parameter-count" => code::PROTOCOL,
        "parameter-invalid" => "22P02",
        "statement-forbidden" | "storage-forbidden" => code::PRIVILEGE,
        "query-cancelled" | "client-stalled" | "query-timeout" => code::CANCELED,
        "interrupted" => code::CANCELED,
        "shutting-down" => code::SHUTDOWN,
        "value-too-large" | "result-too-large" | "payload-too-large" => code::LIMIT,
        "token-concurrency" | "role-concurrency" | "pool-exhausted" | "overloaded" => "53000",
        "out-of-memory" => "53200",
        "temp-space-exhausted" | "spool-full" | "spool-quota-exceeded" => "53100",
        "unauthorized" | "token-refused" => code::BAD_PASSWORD,
        "bad-request" => code::PROTOCOL,
        "credentials-expired" | "upstream-error" | "spool-unavailable" => "58030",
        _ => "XX000",
    }
}

/// The `ErrorResponse` of a statement's problem; `sql` is the text the
/// client sent (DuckDB's place in it becomes the position).
pub fn of_problem(problem: &Problem, sql: &str) -> PgWireError {
    let code = sqlstate(problem);
    // DuckDB's message: `Parser Error: syntax error at or near "x"`, lines
    // after the first (candidates, bindings) as the detail.
    let text = if problem.error_class.is_some() || problem.slug() == "sql-error" {
        problem.detail.clone()
    } else {
        format!("{}: {}", problem.title, problem.detail)
    };
    let (message, detail) = match text.split_once('\n') {
        Some((first, rest)) if !rest.trim().is_empty() => {
            (first.to_string(), Some(rest.trim().to_string()))
        }
        _ => (text.trim_end().to_string(), None),
    };
    let mut info = ErrorInfo::new("ERROR".into(), code.into(), message);
    info.detail = detail;
    if let Some(id) = &problem.query_id {
        info.hint = Some(format!("query id {id}"));
    }
    info.position = problem
        .offset
        .filter(|o| *o <= sql.len() && sql.is_char_boundary(*o))
        .map(|o| (sql[..o].chars().count() + 1).to_string());
    PgWireError::UserError(Box::new(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_from_one() {
        let mut p = crate::problems::Problem::with_slug(
            &crate::problems::kind::BAD_REQUEST,
            "sql-error",
            "SQL error",
            "x",
        );
        p.offset = Some(9);
        let PgWireError::UserError(info) = of_problem(&p, "SELECT é FROM") else {
            panic!()
        };
        // `é` is two bytes: byte 9 is the 9th character.
        assert_eq!(info.position.as_deref(), Some("9"));
    }
}
