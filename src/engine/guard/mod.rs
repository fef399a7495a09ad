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
    let statements = parsed.statements.map_err(|e| match e {
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
    })?;
    let [statement] = statements.as_slice() else {
        return Err(Refusal::StatementCount(statements.len()));
    };
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
    let mut accepted = judge(statement, rules, 0)?;
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
    Ok(accepted)
}

/// What a write (or the write an EXPLAIN explains) names and where it
/// creates, before anything is bound; a view's query is bound on its own.
fn check_write(
    raw: &RawConnection,
    s: &Statement,
    kind: &str,
    rules: &Rules,
) -> Result<(), Refusal> {
    if s.kind == "SELECT" {
        return Ok(());
    }
    check_names(raw, s, kind, rules.client_schema.as_ref())?;
    if let Some(home) = &rules.client_schema {
        check_schema(raw, s, kind, home)?;
    }
    if s.kind == "CREATE" && s.object.as_deref() == Some("View") {
        let query = s
            .inner_sql
            .as_deref()
            .ok_or_else(|| forbid(kind, "the guard could not read the view's query"))?;
        // DuckDB's places in the view's query are not places in the client's text.
        check_plan(raw, query, rules).map_err(|r| in_kind(unplaced(r), kind))?;
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

/// A statement whose tree nests deeper than the guard reads (a client's
/// error, like DuckDB's own expression-depth limit).
fn too_deep(depth: usize) -> Refusal {
    unparsable(format!(
        "Parser Error: the statement nests {depth} levels deep as DuckDB reads it; the gateway \
         reads at most {} (split a long UNION into several statements)",
        describe::MAX_TREE_DEPTH
    ))
}

/// `refusal` without a place in the SQL.
fn unplaced(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::Parse { message, .. } => unparsable(message),
        Refusal::Bind { message, .. } => unbindable(message),
        other => other,
    }
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

/// A client object may not take a name of DuckDB's own (`duckdb_tables`,
/// `pg_tables`, the `json` type, ...) nor a database's (`lake`, `memory`,
/// a lake's metadata): it would change what that name means for every
/// other client (`lake.events` becomes ambiguous once a schema `lake`
/// exists).
fn check_names(
    raw: &RawConnection,
    s: &Statement,
    kind: &str,
    home: Option<&ClientSchema>,
) -> Result<(), Refusal> {
    let created = match s.kind.as_str() {
        "CREATE" => s.target.as_ref().map(|t| t.name.as_str()),
        _ => None,
    };
    for name in created.into_iter().chain(s.new_name.as_deref()) {
        if name.is_empty() {
            continue;
        }
        let databases = home.map(|h| h.databases.as_slice()).unwrap_or(&[]);
        let database = databases.iter().any(|d| d.eq_ignore_ascii_case(name))
            || ["memory", "system", "temp"]
                .iter()
                .any(|d| d.eq_ignore_ascii_case(name))
            || name
                .to_ascii_lowercase()
                .starts_with(crate::engine::catalogs::HIDDEN_PREFIX);
        if database {
            return Err(forbid(
                format!("name {name}"),
                format!(
                    "a database has that name; a client object of that name would make \
                     `{name}.x` ambiguous for every client (in {kind})"
                ),
            ));
        }
        let system = describe::system_name(raw, name).map_err(|e| {
            tracing::error!(error.cause = ?e, "the guard could not read DuckDB's catalog");
            forbid(kind, "the guard could not check the object's name")
        })?;
        if system {
            return Err(forbid(
                format!("name {name}"),
                format!(
                    "DuckDB has a function, view, type or schema of that name; a client object \
                     would change what it means for every client (in {kind})"
                ),
            ));
        }
    }
    Ok(())
}

/// Client objects live in the clients' schema; `main` of the gateway's
/// database is the operator's: clients may read and write its tables' rows,
/// but not create, alter or drop objects there, nor create a name that would
/// shadow one of them (unqualified names resolve in the clients' schema
/// first). The `temp` and `system` catalogs are nobody's to change; other
/// catalogs are operator-attached ones, whose own `read_only` decides.
fn check_schema(
    raw: &RawConnection,
    s: &Statement,
    kind: &str,
    home: &ClientSchema,
) -> Result<(), Refusal> {
    if !matches!(s.kind.as_str(), "CREATE" | "DROP" | "ALTER") {
        return Ok(());
    }
    let Some(target) = &s.target else {
        return Err(forbid(
            kind,
            "the guard could not read which object it changes",
        ));
    };
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    // `CREATE TABLE x.t`: DuckDB's binder takes `x` for a catalog when a
    // database has that name (in its default schema, `main`).
    let mut target = target.clone();
    if target.catalog.is_empty() && home.databases.iter().any(|d| is(d, &target.schema)) {
        target.catalog = std::mem::take(&mut target.schema);
        if s.object.as_deref() != Some("Schema") {
            target.schema = "main".into();
        }
    }
    if is(&target.catalog, "temp") || is(&target.catalog, "system") {
        return Err(forbid(
            kind,
            format!(
                "the {} catalog is not for client objects; they live in schema {}",
                target.catalog.to_ascii_lowercase(),
                home.schema
            ),
        ));
    }
    if target
        .catalog
        .to_ascii_lowercase()
        .starts_with(crate::engine::catalogs::HIDDEN_PREFIX)
    {
        return Err(forbid(
            kind,
            "a lake's metadata is the gateway's; change a lake through its own name",
        ));
    }
    if !target.catalog.is_empty() && !is(&target.catalog, &home.database) {
        return Ok(());
    }
    let operator_refusal = |what: String| {
        forbid(
            kind,
            format!(
                "{what}; schema main holds the operator's objects, client objects live in \
                 schema {}",
                home.schema
            ),
        )
    };
    if s.object.as_deref() == Some("Schema") {
        return if is(&target.name, "main") || is(&target.name, &home.schema) {
            Err(forbid(
                kind,
                format!("schema {} belongs to the gateway", target.name),
            ))
        } else {
            Ok(())
        };
    }
    if is(&target.schema, "main") {
        return Err(operator_refusal(format!(
            "{} is in schema main",
            target.name
        )));
    }
    if !target.schema.is_empty() && !is(&target.schema, &home.schema) {
        // A schema a client created: not on the search path, shadows nothing.
        return Ok(());
    }
    let has = |schema: &str, name: &str| {
        describe::schema_has(raw, schema, name).map_err(|e| {
            tracing::error!(error.cause = ?e, "the guard could not read DuckDB's catalog");
            forbid(kind, "the guard could not check where the object lives")
        })
    };
    let creates = s.kind == "CREATE" && s.on_table.is_none();
    // What the statement changes, as DuckDB resolves an unqualified name:
    // the clients' schema first, then main.
    let changed = s.on_table.as_deref().unwrap_or(&target.name);
    if !changed.is_empty() && has("main", changed)? {
        if creates {
            return Err(operator_refusal(format!(
                "main.{changed} exists and a client object of that name would shadow it for \
                 every client"
            )));
        }
        if target.schema.is_empty() && !has(&home.schema, changed)? {
            return Err(operator_refusal(format!("{changed} is main.{changed}")));
        }
    }
    if let Some(new_name) = s.new_name.as_deref().filter(|n| !n.is_empty()) {
        if has("main", new_name)? {
            return Err(operator_refusal(format!(
                "main.{new_name} exists and a client object of that name would shadow it for \
                 every client"
            )));
        }
    }
    Ok(())
}

/// The parse-tree layer.
fn judge(s: &Statement, rules: &Rules, depth: u8) -> Result<Accepted, Refusal> {
    let kind = kind_name(s);
    if s.unreadable {
        return Err(forbid(kind, "the guard cannot read every part of it"));
    }
    let check_parts = || {
        s.parts.iter().try_for_each(|p| {
            tree::check_parse_tree(p, &rules.paths).map_err(|f| {
                forbid(
                    f.what.clone(),
                    format!("{} (in {kind})", f.reason).replace(" (in SELECT)", ""),
                )
            })
        })
    };
    let writes = |kind: String| -> Result<Accepted, Refusal> {
        match rules.policy {
            Policy::ReadOnly => Err(forbid(kind, READ_ONLY)),
            Policy::ReadWrite => Ok(Accepted {
                kind,
                read_only: false,
                result: None,
                objects: Vec::new(),
                sources: Vec::new(),
                reads: Vec::new(),
                described: false,
            }),
        }
    };
    match s.kind.as_str() {
        "SELECT" => {
            check_parts()?;
            Ok(Accepted {
                kind,
                read_only: true,
                result: None,
                objects: Vec::new(),
                sources: Vec::new(),
                reads: Vec::new(),
                described: false,
            })
        }
        "EXPLAIN" => {
            let Some(inner) = s.inner.as_deref().filter(|_| depth == 0) else {
                return Err(forbid(kind, "only one EXPLAIN of one statement"));
            };
            let accepted = judge(inner, rules, depth + 1)?;
            Ok(Accepted {
                kind: format!("{kind} {}", accepted.kind),
                read_only: accepted.read_only,
                result: None,
                objects: Vec::new(),
                sources: Vec::new(),
                reads: Vec::new(),
                described: false,
            })
        }
        "INSERT" | "UPDATE" | "DELETE" => {
            if rules.policy == Policy::ReadOnly {
                return Err(forbid(kind, READ_ONLY));
            }
            check_parts()?;
            writes(kind)
        }
        "CREATE" | "DROP" | "ALTER" => {
            let object = s.object.as_deref().unwrap_or("");
            match object {
                "Secret" => return Err(forbid(
                    kind,
                    "secrets belong to the gateway; clients may not create, replace or drop them",
                )),
                "Macro Function" | "Table Macro Function" => {
                    return Err(forbid(
                        kind,
                        "macros would change what function names mean for every client",
                    ))
                }
                "Table" | "View" | "Schema" | "Sequence" | "Index" | "Type" => {}
                _ => {
                    return Err(forbid(
                        kind,
                        "only tables, views, schemas, sequences, indexes and types may be changed",
                    ))
                }
            }
            if s.temporary {
                return Err(forbid(
                    kind,
                    "temporary objects live on one pooled connection, which the next request \
                     may not get; create a regular object instead",
                ));
            }
            if rules.policy == Policy::ReadOnly {
                return Err(forbid(kind, READ_ONLY));
            }
            check_parts()?;
            writes(kind)
        }
        _ => Err(forbid(kind, refusal_reason(&s.kind))),
    }
}

fn refusal_reason(kind: &str) -> &'static str {
    match kind {
        "TRANSACTION" => "each request is its own transaction",
        "CALL" => "CALL is not available to clients; use SELECT * FROM function(...)",
        "MULTI" => {
            "DuckDB expands this into several statements (a PIVOT without an IN list \
             creates a type first); list the pivot values with IN (...)"
        }
        _ => "this statement kind is never available to clients",
    }
}

/// A human name for the statement, e.g. `CREATE TABLE`, `DESCRIBE`.
fn kind_name(s: &Statement) -> String {
    match s.kind.as_str() {
        "CREATE" | "DROP" | "ALTER" => match s.object.as_deref() {
            Some("Macro Function" | "Table Macro Function") => format!("{} MACRO", s.kind),
            Some(o) if !o.is_empty() => {
                let temp = if s.temporary { "TEMP " } else { "" };
                format!("{} {temp}{}", s.kind, o.to_ascii_uppercase())
            }
            _ => s.kind.clone(),
        },
        "SELECT" => select_kind(s),
        "EXPLAIN" if s.analyze => "EXPLAIN ANALYZE".into(),
        _ if s.verb.is_some() => s.verb.clone().unwrap_or_default(),
        "VARIABLE_SET" => "SET VARIABLE".into(),
        "COPY_DATABASE" => "COPY DATABASE".into(),
        "EXPORT" => "EXPORT DATABASE".into(),
        "CREATE_FUNC" => "CREATE FUNCTION".into(),
        "UPDATE_EXTENSIONS" => "UPDATE EXTENSIONS".into(),
        "MERGE_INTO" => "MERGE INTO".into(),
        other => other.to_string(),
    }
}

/// DESCRIBE, SHOW and SUMMARIZE are SELECTs over a show reference.
fn select_kind(s: &Statement) -> String {
    let show = s
        .parts
        .first()
        .and_then(|p| p.pointer("/node/from_table"))
        .filter(|t| t.get("type").and_then(|v| v.as_str()) == Some("SHOW_REF"))
        .and_then(|t| t.get("show_type"))
        .and_then(|v| v.as_str());
    match show {
        Some("SUMMARY") => "SUMMARIZE".into(),
        Some("DESCRIBE") => "DESCRIBE".into(),
        Some(other) => other.to_string(),
        None => "SELECT".into(),
    }
}

/// The plan layer: DuckDB binds the statement (views and macros expanded)
/// and the guard checks what it would scan and call, and which databases it
/// would read and change. A bind error is the client's.
fn check_plan(
    raw: &RawConnection,
    sql: &str,
    rules: &Rules,
) -> Result<describe::PlanNames, Refusal> {
    let plan = describe::plan_names(raw, sql).map_err(|e| match e {
        DescribeError::Nul => unparsable("the SQL text contains a NUL byte"),
        DescribeError::TooDeep(depth) => too_deep(depth),
        other => {
            tracing::error!(error.cause = ?other, "the guard's plan shim answered unreadably");
            forbid("SELECT", "the guard could not read its plan")
        }
    })?;
    if let Some(message) = plan.error {
        let class = plan.error_type.unwrap_or_else(|| "Binder".into());
        return Err(Refusal::Bind {
            message: format!("{class} Error: {message}"),
            at: plan.position.and_then(|p| place(sql, p)),
        });
    }
    if plan.unreadable {
        return Err(forbid("SELECT", "the guard could not read its whole plan"));
    }
    tree::check_plan_names(&plan.functions, &plan.tables).map_err(|f| forbid(f.what, f.reason))?;
    check_databases(&plan, rules)?;
    Ok(plan)
}

/// Every database the plan changes is one clients may change, and none it
/// reads is a lake's metadata. By DuckDB's own account of the statement, so
/// whatever form a write takes (an INSERT's target, a DROP, an EXPLAIN
/// ANALYZE of either, a sequence's `nextval`), its database is judged.
fn check_databases(plan: &describe::PlanNames, rules: &Rules) -> Result<(), Refusal> {
    let hidden = |name: &str| {
        name.to_ascii_lowercase()
            .starts_with(crate::engine::catalogs::HIDDEN_PREFIX)
    };
    if let Some(name) = plan.read.iter().find(|d| hidden(d)) {
        return Err(forbid(
            format!("database {name}"),
            "a lake's metadata is the gateway's; read a lake's tables by their names",
        ));
    }
    for name in &plan.modified {
        let writable = rules.policy == Policy::ReadWrite
            && rules.writable.iter().any(|w| w.eq_ignore_ascii_case(name));
        if !writable {
            let reason = match rules.policy {
                Policy::ReadOnly => READ_ONLY.to_string(),
                Policy::ReadWrite if hidden(name) => {
                    "a lake's metadata is the gateway's; change a lake through its own name".into()
                }
                Policy::ReadWrite => "clients may change the gateway's database and the catalogs \
                                      declared writable, nothing else"
                    .into(),
            };
            return Err(forbid(format!("database {name}"), reason));
        }
    }
    Ok(())
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
