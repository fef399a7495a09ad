//! Why a statement request fails, typed: the statement domain returns these
//! and [`Error::problem`] is the one place they become problem documents
//! (of [`crate::problems`]'s catalogue). No HTTP types.

use crate::engine::queries::IdError;
use crate::engine::QueryError;
use crate::problems::{kind, Problem};

/// Every way a statement request can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query id is malformed, or a running query of the owner has it.
    #[error("{0}")]
    QueryId(#[from] IdError),
    /// The owner keeps a statement with this id (here or on a replica).
    #[error("a statement with id {0} is kept")]
    StatementIdTaken(String),
    /// As many statements as `setting` allows are kept.
    #[error("too many statements")]
    TooMany {
        /// The number of statements that may be kept.
        limit: usize,
        /// The setting that sets `limit`.
        setting: &'static str,
    },
    /// No statement with this id is the caller's to see.
    #[error("no statement with id {0}")]
    NotFound(String),
    /// Several tokens have a statement with this id (the admin's view).
    #[error("{tokens} tokens have a statement with id {id}")]
    Ambiguous {
        /// The id.
        id: String,
        /// How many tokens use it.
        tokens: usize,
    },
    /// Its result was asked for while it still runs.
    #[error("statement {0} still runs")]
    Running(String),
    /// Its result was removed: it finished longer ago than the TTL.
    #[error("statement {0} expired")]
    Expired(String),
    /// Its replica stopped before it finished: the state it was last
    /// published in (`running` for a row the sweep marked lost).
    #[error("statement {id} was lost")]
    Lost {
        /// The id.
        id: String,
        /// The state it was in.
        was: super::State,
    },
    /// It failed and has no result; `problem` is its failure's document.
    #[error("statement {id} failed")]
    Failed {
        /// The id.
        id: String,
        /// Its failure, as its status document shows it.
        problem: serde_json::Value,
    },
    /// A page in Arrow of an INTERVAL Arrow cannot hold (its column).
    #[error("an interval Arrow cannot hold in {0}")]
    ArrowInterval(String),
    /// A page in Parquet of a value Parquet cannot hold.
    #[error("{0}")]
    FormatUnavailable(String),
    /// The query failed, or ended the statement.
    #[error("query failed")]
    Query(#[from] QueryError),
    /// The shared state (PostgreSQL) could not be reached: logged, never sent.
    #[error("shared state unavailable: {0}")]
    SharedState(String),
    /// A fault of the gateway: logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
    /// The SQL text is longer than `DUCKGATE_MAX_SQL_BYTES`.
    #[error("the SQL text exceeds {limit} bytes")]
    SqlTooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The request holds no SQL text.
    #[error("no SQL")]
    NoSql,
}

impl Error {
    /// The problem document a client gets for this error.
    pub fn problem(&self) -> Problem {
        match self {
            Error::QueryId(e @ IdError::Taken(_)) => Problem::with_slug(
                &kind::QUERY_ID_TAKEN,
                "query-id-taken",
                "Query id in use",
                e.to_string(),
            ),
            Error::QueryId(e @ IdError::Invalid) => Problem::with_slug(
                &kind::BAD_REQUEST,
                "invalid-query-id",
                "Invalid query id",
                e.to_string(),
            ),
            Error::StatementIdTaken(id) => Problem::with_slug(
                &kind::QUERY_ID_TAKEN,
                "query-id-taken",
                "Statement id in use",
                format!("a statement with id {id} is kept; DELETE it or choose another id"),
            ),
            Error::TooMany { limit, setting } => Problem::new(
                &kind::TOO_MANY_STATEMENTS,
                format!("at most {limit} statements are kept ({setting}) and that many are; DELETE finished ones or retry once some expire"),
            ),
            Error::NotFound(id) => Problem::new(
                &kind::NOT_FOUND,
                format!("no statement with id {id} is yours to see"),
            ),
            Error::Ambiguous { id, tokens } => Problem::new(
                &kind::AMBIGUOUS_ID,
                format!("{tokens} tokens have a statement with id {id}; ask with the owner's token"),
            ),
            Error::Running(id) => Problem::new(
                &kind::STATEMENT_RUNNING,
                format!("statement {id} has not finished; poll GET /statements/{id} until its state is succeeded"),
            ),
            Error::Expired(id) => Problem::new(
                &kind::STATEMENT_EXPIRED,
                format!("statement {id} finished longer ago than DUCKGATE_STATEMENT_TTL_MS; its result was removed"),
            ),
            Error::Lost { id, was } => Problem::new(
                &kind::STATEMENT_LOST,
                format!("statement {id} was {} on a replica that stopped before it finished; its state is lost and it has no result: submit it again", was.as_str()),
            ),
            Error::Failed { id, problem } => Problem::new(
                &kind::STATEMENT_FAILED,
                format!(
                    "statement {id} failed and has no result: {} ({}): {}",
                    problem["title"].as_str().unwrap_or("error"),
                    problem["status"],
                    problem["detail"].as_str().unwrap_or("")
                ),
            ),
            Error::ArrowInterval(column) => Problem::with_slug(
                &kind::BAD_REQUEST,
                "sql-error",
                "SQL error",
                crate::engine::sink::arrow_interval_refusal(column),
            ),
            Error::FormatUnavailable(message) => Problem::with_slug(
                &kind::BAD_REQUEST,
                "format-unavailable",
                "No answer in this format",
                format!("this result cannot be written as Parquet: {message}"),
            ),
            Error::Query(e) => crate::problems::of_query(e),
            Error::SharedState(_) => Problem::shared_state_unavailable(),
            Error::Internal(_) => Problem::internal(),
            Error::SqlTooLarge { limit } => Problem::new(
                &kind::PAYLOAD_TOO_LARGE,
                format!("the request body or SQL text exceeds the limit of {limit} bytes"),
            ),
            Error::NoSql => Problem::with_slug(
                &kind::BAD_REQUEST,
                "empty-sql",
                "No SQL",
                "the request holds no SQL text",
            ),
        }
    }

    /// How a query refused with this error ended, for its audit line.
    pub fn outcome(&self) -> crate::engine::queries::Outcome {
        let p = self.problem();
        crate::engine::queries::Outcome {
            status: p.status,
            kind: p.slug().to_string(),
            error_class: p.error_class,
        }
    }
}
