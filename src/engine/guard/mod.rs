//! The statement guard: what a client's SQL is, read by DuckDB's own parser,
//! and whether the policy admits it. Nothing reaches `prepare` or `execute`
//! on a pooled connection before this has accepted it.
//!
//! One reading of the SQL, DuckDB's, in two layers:
//! 1. **Parse tree** ([`describe`], DuckDB's C++ parser through a shim; no
//!    side effects). It gives the statement count and type, the object of a
//!    CREATE/DROP/ALTER, and every expression and table reference, which are
//!    checked against the allow-list ([`functions`]) and the path rules
//!    ([`paths`]) before anything is bound. Where the tree cannot be read,
//!    the statement is refused.
//! 2. **Bound plan** (DuckDB's `json_serialize_plan`) for queries: views and
//!    macros expanded, so a view over a refused function is refused too.
//!    Binding may read files, which is why it comes after the paths passed.
//!
//! The first layer is the text's alone ([`Parsed`]): admission parses a new
//! text before it takes a connection, to know whether it reads S3
//! ([`Parsed::reads_s3`]), and the guard judges that same parse
//! ([`check_parsed`]) rather than parsing the text again.
//!
//! Allow, don't deny: statement kinds, functions, internal views and URL
//! forms not named as allowed are refused.

pub mod access;
pub mod describe;
pub mod functions;
pub mod paths;
pub mod tree;

mod judge;
mod plan;
mod write;

use judge::{judge, too_deep};
use plan::check_plan;
use write::check_write;

use crate::config::Policy;
use crate::engine::errors::{place, SqlPosition};
use crate::engine::ffi::RawConnection;
use describe::{DescribeError, Statement};
use paths::PathRules;

/// What the guard enforces.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Which statement kinds clients may run.
    pub policy: Policy,
    /// Where queries may read.
    pub paths: PathRules,
    /// Read-write: where client objects live.
    pub client_schema: Option<ClientSchema>,
    /// Read-write: the databases clients may change, the gateway's and the
    /// catalogs declared writable (never `system`, `temp` or a lake's
    /// metadata). Empty under read-only.
    pub writable: Vec<String>,
    /// The caller's grants, when its roles confine it ([`access`]); `None`:
    /// the caller may read and write whatever the policy admits.
    pub access: Option<std::sync::Arc<access::Access>>,
    /// Plans of what a confined caller reads through a row policy are
    /// shown (a test hook, `DUCKGATE_TEST_SHOW_CONFINED_PLANS`; always off
    /// in a release build): see [`access::Access::policy`].
    pub confined_plans: bool,
}

/// Under the read-write policy: the gateway's own database, whose `main`
/// schema holds the operator's objects, and the schema client objects are
/// created in (first on every pooled connection's search path).
#[derive(Debug, Clone)]
pub struct ClientSchema {
    /// DuckDB's name of the gateway's database (`memory`, or the file's).
    pub database: String,
    /// The clients' schema, e.g. `client`.
    pub schema: String,
    /// Every database's name (the gateway's, `system`, `temp`, declared
    /// catalogs): DuckDB reads a two-part name whose first part is one of
    /// them as catalog and object, not schema and object.
    pub databases: Vec<String>,
}

/// A statement the guard accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Human name of the statement kind, e.g. `SELECT`, `CREATE TABLE`.
    pub kind: String,
    /// Whether the statement only reads (queries may be retried).
    pub read_only: bool,
    /// For queries: the result as DuckDB's binder described it.
    pub result: Option<ResultShape>,
    /// What the bound plan reads and changes (views expanded), for the
    /// grants of each caller ([`access::Access::check`]): the verdict is
    /// the text's, the grants the caller's.
    pub objects: Vec<describe::PlanObject>,
    /// Table functions the plan scans that read no catalog table.
    pub sources: Vec<String>,
    /// Each of them with the paths it was bound to.
    pub reads: Vec<describe::SourceRead>,
    /// The statement is one `DESCRIBE`, `SHOW` or `SUMMARIZE`, whose
    /// objects are what the described query reads (DuckDB's binder keeps
    /// only a DESCRIBE's column list, so the shim plans its query too).
    pub described: bool,
}

/// A query's result columns, and the query in DuckDB's own rendering (to
/// wrap it, e.g. so DuckDB renders CSV text itself).
#[derive(Debug, Clone)]
pub struct ResultShape {
    /// DuckDB's type of each column, e.g. `DECIMAL(18,3)`, `INTEGER[]`.
    pub types: Vec<String>,
    /// Each column's name.
    pub names: Vec<String>,
    /// The statement exactly as the client wrote it (DuckDB's span of it,
    /// without the semicolon).
    pub sql: Option<String>,
    /// Per column, DuckDB's rendering of values JSON cannot take from Arrow
    /// (an expression over `#i`), or empty (see `describe/types.cpp`'s `JsonExpr`).
    pub json_exprs: Vec<String>,
    /// Per column, where `json_exprs` leave DuckDB's JSON of a VARIANT.
    pub json_marks: Vec<Vec<crate::encode::Mark>>,
    /// Per column, the expression that makes what DuckDB's Arrow export has
    /// no type for exportable (a VARIANT as its JSON, a TYPE as its text),
    /// or empty (see `describe/types.cpp`'s `ArrowExpr`).
    pub arrow_exprs: Vec<String>,
    /// Per column, where `arrow_exprs` leave those values.
    pub arrow_marks: Vec<Vec<crate::encode::Mark>>,
}

/// Why the guard refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not SQL DuckDB can parse.
    Parse {
        /// DuckDB's message, its class first ("Parser Error: ...").
        message: String,
        /// Where DuckDB says it is in the client's SQL.
        at: Option<SqlPosition>,
    },
    /// Parsed, but binding failed (unknown table, wrong types, ...).
    Bind {
        /// DuckDB's message, its class first ("Binder Error: ...").
        message: String,
        /// Where DuckDB says it is in the client's SQL.
        at: Option<SqlPosition>,
    },
    /// Zero or several statements.
    StatementCount(usize),
    /// A kind, function, table or path the policy does not admit.
    Forbidden {
        /// What was refused: a statement kind, or a function, table or path.
        kind: String,
        /// Why the policy refuses it.
        reason: String,
    },
}

/// A refusal of the gateway's own about the SQL's shape (no place in it).
fn unparsable(message: impl Into<String>) -> Refusal {
    Refusal::Parse {
        message: message.into(),
        at: None,
    }
}

/// A bind-time refusal of the gateway's own (no place in the SQL).
fn unbindable(message: impl Into<String>) -> Refusal {
    Refusal::Bind {
        message: message.into(),
        at: None,
    }
}

fn forbid(kind: impl Into<String>, reason: impl Into<String>) -> Refusal {
    Refusal::Forbidden {
        kind: kind.into(),
        reason: reason.into(),
    }
}

const READ_ONLY: &str = "the read-only policy admits queries only";

/// DuckDB's parse of one text (its parser only: nothing bound, nothing read,
/// no I/O), the first layer of the guard's verdict. It does not depend on
/// the connection, the catalog or the caller, so one parse serves both
/// readers of a cold text: admission, which must know before a connection
/// is taken whether the text reads S3 ([`Parsed::reads_s3`], for the S3
/// share), and the guard on the pooled connection ([`check_parsed`]), which
/// judges the same parse and binds it. A cold text is thus parsed three
/// times in all (here, by the binder's `plan_names`, by `prepare`), not four
/// as when admission and the guard parsed it each on their own.
#[derive(Debug)]
pub struct Parsed {
    statements: Result<Vec<Statement>, DescribeError>,
}

/// DuckDB's parse of `sql` on `raw` (any connection of the database: the
/// parse reads no catalog).
pub fn parse(raw: &RawConnection, sql: &str) -> Parsed {
    Parsed {
        statements: describe::describe(raw, sql),
    }
}

impl Parsed {
    /// Whether the text reads S3: an `s3://` URL anywhere in the tree
    /// (reader paths, replacement scans), or a table of one of `lakes`
    /// (operator catalogs, whose data are on S3). Unparsable SQL is not: the
    /// guard refuses it. A view over S3 data is seen only by binding, which
    /// may itself read S3: it counts as local work.
    pub fn reads_s3(&self, lakes: &[String]) -> bool {
        fn statement(s: &Statement, lakes: &[String]) -> bool {
            s.parts.iter().any(|p| tree::mentions_s3(p, lakes))
                || s.inner.as_deref().is_some_and(|i| statement(i, lakes))
        }
        self.statements
            .as_ref()
            .is_ok_and(|all| all.iter().any(|s| statement(s, lakes)))
    }
}

/// Classifies `sql` and applies `rules`. `raw` is the parser twin of the
/// pooled connection the statement will run on (same database and catalog).
pub fn check(raw: &RawConnection, sql: &str, rules: &Rules) -> Result<Accepted, Refusal> {
    check_parsed(raw, sql, parse(raw, sql), rules)
}

/// [`check`] of a text already parsed (by [`parse`], on any connection of
/// the database): the parse is judged, then bound on `raw`.
pub fn check_parsed(
    raw: &RawConnection,
    sql: &str,
    parsed: Parsed,
    rules: &Rules,
) -> Result<Accepted, Refusal> {
    let statements = parsed_statements(parsed, sql)?;
    let [statement] = statements.as_slice() else {
        return Err(Refusal::StatementCount(statements.len()));
    };
    check_binder_cost(statement)?;
    let mut accepted = judge(statement, rules, 0)?;
    bind_and_check(raw, sql, statement, rules, &mut accepted)?;
    Ok(accepted)
}

/// The parse's statements, or why the text has none the guard can read.
fn parsed_statements(parsed: Parsed, sql: &str) -> Result<Vec<Statement>, Refusal> {
    parsed.statements.map_err(|e| match e {
        DescribeError::Parse { message, position } => Refusal::Parse {
            message,
            at: position.and_then(|p| place(sql, p)),
        },
        DescribeError::Nul => unparsable("the SQL text contains a NUL byte"),
        DescribeError::TooDeep(depth) => too_deep(depth),
        DescribeError::Internal(msg) => {
            tracing::error!(error.cause = %msg, "the guard's parse shim answered unreadably");
            forbid("statement", "the guard could not read it")
        }
    })
}

/// Refuses, before DuckDB binds it, a statement whose binding would cost
/// more time or memory than the gateway admits (nested subqueries, long
/// chains of set operations).
fn check_binder_cost(statement: &Statement) -> Result<(), Refusal> {
    let cost = statement_cost(statement);
    if cost > MAX_SUBQUERY_COST {
        return Err(unbindable(format!(
            "Binder Error: the statement nests scalar or EXISTS subqueries too deeply: DuckDB's \
             binder takes time exponential in their nesting (about {:.0} s for this one, which \
             no interrupt stops); the gateway admits about {:.1} s of it. Use a join or a CTE",
            cost * 1e-7,
            MAX_SUBQUERY_COST * 1e-7
        )));
    }
    let chain = statement_set_operations(statement);
    if chain > MAX_SET_OPERATIONS {
        return Err(unbindable(format!(
            "Binder Error: the statement holds {chain} set operations (UNION, EXCEPT, \
             INTERSECT); DuckDB's binder holds memory quadratic in their number, outside the \
             gateway's memory ceiling, and the gateway admits {MAX_SET_OPERATIONS}. Split it"
        )));
    }
    Ok(())
}

/// Binds the statement on `raw` and checks its plan (and a write's names
/// and schema), recording in `accepted` what it reads and returns.
fn bind_and_check(
    raw: &RawConnection,
    sql: &str,
    statement: &Statement,
    rules: &Rules,
    accepted: &mut Accepted,
) -> Result<(), Refusal> {
    match statement.kind.as_str() {
        "SELECT" => {
            let plan = check_plan(raw, sql, rules)?;
            (accepted.objects, accepted.sources, accepted.reads) =
                (plan.objects, plan.sources, plan.reads);
            accepted.described = plan.described.is_some();
            accepted.result = Some(ResultShape {
                types: plan.types,
                names: plan.names,
                json_exprs: plan.json_exprs,
                json_marks: plan.json_marks,
                arrow_exprs: plan.arrow_exprs,
                arrow_marks: plan.arrow_marks,
                sql: statement.sql.clone(),
            });
        }
        "EXPLAIN" => {
            // EXPLAIN ANALYZE runs what it explains: the explained statement
            // is judged as if it were sent alone (its names and where it
            // creates), and DuckDB binds the whole EXPLAIN, so the plan check
            // sees what the inner statement calls, scans and changes.
            let inner = statement.inner.as_deref().ok_or_else(|| {
                forbid(
                    "EXPLAIN",
                    "the guard could not read the explained statement",
                )
            })?;
            check_write(raw, inner, &accepted.kind, rules)?;
            let plan = check_plan(raw, sql, rules).map_err(|r| in_kind(r, &accepted.kind))?;
            (accepted.objects, accepted.sources, accepted.reads) =
                (plan.objects, plan.sources, plan.reads);
        }
        _ => {
            // Writes too: DuckDB binds the whole statement (the query of a
            // CREATE TABLE AS, INSERT ... SELECT, CREATE TYPE ... AS ENUM
            // (query), an UPDATE's expressions), views and macros expanded,
            // and the guard checks every function and table function the
            // plan calls and every database it changes.
            check_write(raw, statement, &accepted.kind, rules)?;
            let plan = check_plan(raw, sql, rules).map_err(|r| in_kind(r, &accepted.kind))?;
            (accepted.objects, accepted.sources, accepted.reads) =
                (plan.objects, plan.sources, plan.reads);
        }
    }
    Ok(())
}

/// The tables `sql` names as the client wrote them (CTE names included),
/// by DuckDB's parse alone; nothing if it does not parse.
pub fn named_tables(raw: &RawConnection, sql: &str) -> tree::Named {
    fn statement(s: &Statement, out: &mut tree::Named) {
        s.parts.iter().for_each(|p| tree::named_tables(p, out));
        if let Some(t) = &s.target {
            out.tables.push(tree::NamedTable {
                catalog: t.catalog.clone(),
                schema: t.schema.clone(),
                name: t.name.clone(),
                at: None,
            });
        }
        if let Some(inner) = s.inner.as_deref() {
            statement(inner, out);
        }
    }
    let mut out = tree::Named::default();
    if let Ok(all) = describe::describe(raw, sql) {
        all.iter().for_each(|s| statement(s, &mut out));
    }
    out
}

/// The most [`tree::subquery_cost`] the guard admits: 2^24 units, about
/// 1.7 s of DuckDB's binder on the machine it was measured on (23 nested
/// scalar subqueries in a chain pass, 24 do not).
const MAX_SUBQUERY_COST: f64 = (1u64 << 24) as f64;

/// The most set operations a statement may hold ([`tree::set_operations`]):
/// about 340 MB and 0.9 s of DuckDB's binder.
const MAX_SET_OPERATIONS: usize = 4_000;

fn statement_set_operations(s: &Statement) -> usize {
    s.parts.iter().map(tree::set_operations).sum::<usize>()
        + s.inner
            .as_deref()
            .map(statement_set_operations)
            .unwrap_or(0)
}

fn statement_cost(s: &Statement) -> f64 {
    s.parts.iter().map(tree::subquery_cost).sum::<f64>()
        + s.inner.as_deref().map(statement_cost).unwrap_or(0.0)
}

/// Names the statement kind in a plan refusal of a write.
fn in_kind(refusal: Refusal, kind: &str) -> Refusal {
    match refusal {
        Refusal::Forbidden { kind: what, reason } if what == "SELECT" => Refusal::Forbidden {
            kind: kind.to_string(),
            reason,
        },
        Refusal::Forbidden { kind: what, reason } => Refusal::Forbidden {
            kind: what,
            reason: format!("{reason} (in {kind})"),
        },
        other => other,
    }
}

/// `rules` with the read-only policy, whatever the configured one.
pub fn read_only(rules: std::sync::Arc<Rules>) -> std::sync::Arc<Rules> {
    if rules.policy == crate::config::Policy::ReadOnly {
        return rules;
    }
    let mut rules = (*rules).clone();
    rules.policy = crate::config::Policy::ReadOnly;
    std::sync::Arc::new(rules)
}

#[cfg(test)]
mod tests;
