//! The checks of a write (or the write an EXPLAIN explains): the names it
//! gives client objects and the schema they live in.

use super::describe::Statement;
use super::*;

/// What a write (or the write an EXPLAIN explains) names and where it
/// creates, before anything is bound; a view's query is bound on its own.
pub(super) fn check_write(
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

/// `refusal` without a place in the SQL.
fn unplaced(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::Parse { message, .. } => unparsable(message),
        Refusal::Bind { message, .. } => unbindable(message),
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
    let target = resolved_target(target, s, home);
    if !in_home_database(&target, kind, home)? {
        return Ok(());
    }
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
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
        return Err(operator_refusal(
            kind,
            home,
            format!("{} is in schema main", target.name),
        ));
    }
    if !target.schema.is_empty() && !is(&target.schema, &home.schema) {
        // A schema a client created: not on the search path, shadows nothing.
        return Ok(());
    }
    check_shadowing(raw, s, kind, home, &target)
}

/// The object's name as DuckDB's binder reads it: in `CREATE TABLE x.t`,
/// `x` is a catalog when a database has that name (in its default schema,
/// `main`).
fn resolved_target(
    target: &super::describe::Target,
    s: &Statement,
    home: &ClientSchema,
) -> super::describe::Target {
    let mut target = target.clone();
    if target.catalog.is_empty()
        && home
            .databases
            .iter()
            .any(|d| d.eq_ignore_ascii_case(&target.schema))
    {
        target.catalog = std::mem::take(&mut target.schema);
        if s.object.as_deref() != Some("Schema") {
            target.schema = "main".into();
        }
    }
    target
}

/// Whether the object is in the gateway's database (where the clients'
/// schema is); the `temp` and `system` catalogs and a lake's metadata are
/// refused, another attached catalog is its own `read_only`'s to decide.
fn in_home_database(
    target: &super::describe::Target,
    kind: &str,
    home: &ClientSchema,
) -> Result<bool, Refusal> {
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
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
    Ok(target.catalog.is_empty() || is(&target.catalog, &home.database))
}

/// The refusal of a change to the operator's schema `main`, saying `what`.
fn operator_refusal(kind: &str, home: &ClientSchema, what: String) -> Refusal {
    forbid(
        kind,
        format!(
            "{what}; schema main holds the operator's objects, client objects live in \
             schema {}",
            home.schema
        ),
    )
}

/// Refuses a client object that would shadow one of `main`'s, or a change
/// that an unqualified name would make to `main`'s (DuckDB resolves it in
/// the clients' schema first, then main), or a rename to one of its names.
fn check_shadowing(
    raw: &RawConnection,
    s: &Statement,
    kind: &str,
    home: &ClientSchema,
    target: &super::describe::Target,
) -> Result<(), Refusal> {
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
            return Err(operator_refusal(
                kind,
                home,
                format!(
                    "main.{changed} exists and a client object of that name would shadow it for \
                     every client"
                ),
            ));
        }
        if target.schema.is_empty() && !has(&home.schema, changed)? {
            return Err(operator_refusal(
                kind,
                home,
                format!("{changed} is main.{changed}"),
            ));
        }
    }
    if let Some(new_name) = s.new_name.as_deref().filter(|n| !n.is_empty()) {
        if has("main", new_name)? {
            return Err(operator_refusal(
                kind,
                home,
                format!(
                    "main.{new_name} exists and a client object of that name would shadow it for \
                     every client"
                ),
            ));
        }
    }
    Ok(())
}
