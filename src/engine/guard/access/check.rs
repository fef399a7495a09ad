//! A caller's grants checked on a verdict's objects: what it may not see
//! answered as missing, what it may see but not touch refused by name, and
//! DuckDB's hints dropped from a confined caller's errors.

use std::cell::LazyCell;

use super::super::describe::PlanObject;
use super::super::tree::{Named, NamedTable};
use super::super::{forbid, Accepted, Refusal};
use super::{Access, GENERATORS, LISTINGS};
use crate::engine::errors::place;

impl Access {
    /// Checks an accepted statement's plan against the grants. `named`
    /// gives the tables its text names (parsed again only when a refusal
    /// needs a place); `sql` is the client's text.
    pub fn check(
        &self,
        accepted: &Accepted,
        sql: &str,
        named: impl FnOnce() -> Named,
    ) -> Result<(), Refusal> {
        let named = LazyCell::new(named);
        // One DESCRIBE, SHOW or SUMMARIZE as the whole statement: the shim
        // planned what it describes. Another (one in a subquery) would be
        // answered from the whole catalog.
        let describes = named.describes;
        if describes > 1 || (describes == 1 && !accepted.described) {
            return Err(forbid(
                "DESCRIBE",
                "inside another statement DuckDB answers it from the whole catalog; send it \
                 alone (GET /catalog lists what this identity may read)",
            ));
        }
        for read in &accepted.reads {
            let f = read.function.as_str();
            if GENERATORS.contains(&f) || LISTINGS.contains(&f) || self.may_read_paths(read) {
                continue;
            }
            // A named source it may not see is as missing as a table.
            if let Some(t) = named.tables.iter().find(|t| {
                names(t, crate::config::sources::CATALOG, "main")
                    && self
                        .sources
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case(&t.name))
                    && !self.may_read(crate::config::sources::CATALOG, "main", &t.name)
            }) {
                return Err(missing_table(t, sql));
            }
            return Err(forbid(
                format!("function {f}()"),
                "this identity's roles grant catalog tables and named sources: other files, \
                 S3 paths and DuckDB's catalog functions but its listings are not granted \
                 (GET /catalog lists what it may read)",
            ));
        }
        // Views first: a view it may not read is missing, whatever it reads
        // (refused for a table the view reads, it would tell the view is
        // there).
        for o in accepted.objects.iter().filter(|o| o.action == "view") {
            self.check_object(o, sql, &named)?;
        }
        for o in accepted.objects.iter().filter(|o| o.action != "view") {
            self.check_object(o, sql, &named)?;
        }
        Ok(())
    }

    fn check_object<F: FnOnce() -> Named>(
        &self,
        o: &PlanObject,
        sql: &str,
        named: &LazyCell<Named, F>,
    ) -> Result<(), Refusal> {
        let full = format!("{}.{}.{}", o.catalog, o.schema, o.name);
        match o.action.as_str() {
            // A view is granted like a table: a view that reads nothing, or
            // only what the caller may read, is still the operator's (or
            // another tenant's) to grant. DuckDB's own views
            // (`information_schema`, `pg_catalog`) read its listings, which
            // show the caller its part of the catalog.
            "view" if o.catalog.eq_ignore_ascii_case("system") => Ok(()),
            "view" => {
                if self.may_read(&o.catalog, &o.schema, &o.name) {
                    Ok(())
                } else {
                    Err(self.missing(o, sql, named))
                }
            }
            "read" => {
                if !self.may_read(&o.catalog, &o.schema, &o.name) {
                    return Err(self.missing(o, sql, named));
                }
                if let Some(c) = o
                    .columns
                    .iter()
                    .find(|c| !self.may_read_column(&o.catalog, &o.schema, &o.name, c))
                {
                    return Err(forbid(
                        format!("column {c} of {full}"),
                        "this identity's roles grant reading only some columns of it \
                         (GET /catalog lists them)",
                    ));
                }
                Ok(())
            }
            "insert" | "update" | "delete" | "merge" | "create table" | "create view" => {
                if self.may_write(&o.catalog, &o.schema, &o.name) {
                    return Ok(());
                }
                let creates = o.action.starts_with("create");
                if !creates && !self.may_read(&o.catalog, &o.schema, &o.name) {
                    return Err(self.missing(o, sql, named));
                }
                Err(forbid(
                    format!("{} {full}", if creates { "schema" } else { "table" }),
                    format!(
                        "this identity's roles do not grant {}",
                        if creates {
                            "creating objects there"
                        } else {
                            "changing it"
                        }
                    ),
                ))
            }
            _ => Err(forbid(
                "DDL",
                "this identity's roles grant rows of tables and CREATE TABLE or VIEW, no \
                 other change to the catalog",
            )),
        }
    }

    /// The refusal for an object the caller may not see: DuckDB's own
    /// answer for a table that does not exist, at the place the text names
    /// it; read through a view or macro (not named in the text), a refusal
    /// that names neither the table nor the view.
    fn missing<F: FnOnce() -> Named>(
        &self,
        o: &PlanObject,
        sql: &str,
        named: &LazyCell<Named, F>,
    ) -> Refusal {
        let written = named
            .tables
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(&o.name) && names(t, &o.catalog, &o.schema));
        match written {
            Some(t) => missing_table(t, sql),
            None => forbid(
                "view",
                "it reads a table this identity's roles do not grant (views and macros read \
                 with the caller's grants)",
            ),
        }
    }

    /// A confined caller's view of a refusal before the plan: a text that
    /// names a table it cannot see is answered as if that table did not
    /// exist (whatever else is wrong with it), a name that exists nowhere
    /// gets DuckDB's plain answer (not the variants that tell whether its
    /// schema or catalog exists), and DuckDB's hints, which may name
    /// objects it cannot see, are dropped. `existing()` lists every table
    /// and view (catalog, schema, name), read once whatever the number of
    /// names the text holds.
    pub fn hide(
        &self,
        refusal: Refusal,
        sql: &str,
        named: impl FnOnce() -> Named,
        existing: impl FnOnce() -> Vec<(String, String, String)>,
    ) -> Refusal {
        // A parse error comes before the catalog, and so does a count of
        // statements; a bind error or a refusal of what binding found (a
        // macro's function) tells that the names bound.
        if !matches!(refusal, Refusal::Bind { .. } | Refusal::Forbidden { .. }) {
            return refusal;
        }
        let named = named();
        if named.tables.is_empty() {
            return without_hints_in(refusal);
        }
        let mut by_name: std::collections::HashMap<String, Vec<(String, String)>> =
            std::collections::HashMap::new();
        for (c, s, n) in existing() {
            by_name.entry(n.to_lowercase()).or_default().push((c, s));
        }
        let mut tables: Vec<&NamedTable> = named.tables.iter().collect();
        tables.sort_by_key(|t| t.at.unwrap_or(usize::MAX));
        for t in tables {
            let candidates: Vec<&(String, String)> = by_name
                .get(&t.name.to_lowercase())
                .into_iter()
                .flatten()
                .filter(|(c, s)| names(t, c, s))
                .collect();
            if candidates.is_empty() {
                let here = t.at.and_then(|p| place(sql, p));
                if let Refusal::Bind { message, at } = &refusal {
                    let about_it = here.is_some() && *at == here;
                    if about_it && message.contains("does not exist") {
                        return missing_table(t, sql);
                    }
                }
                continue;
            }
            if !candidates.iter().any(|(c, s)| self.may_read(c, s, &t.name)) {
                return missing_table(t, sql);
            }
        }
        without_hints_in(refusal)
    }
}

/// DuckDB's answer for a table that does not exist (its message for
/// `SELECT * FROM x` when no `x` exists, with its hints dropped).
fn missing_table(t: &NamedTable, sql: &str) -> Refusal {
    Refusal::Bind {
        message: format!("Catalog Error: Table with name {} does not exist!", t.name),
        at: t.at.and_then(|p| place(sql, p)),
    }
}

/// `refusal` without DuckDB's hints in its message.
fn without_hints_in(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::Bind { message, at } => Refusal::Bind {
            message: without_hints(&message),
            at,
        },
        other => other,
    }
}

/// `message` without DuckDB's hints, which name catalog objects.
fn without_hints(message: &str) -> String {
    message
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("Did you mean") || l.starts_with("Candidate"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `t`, as written, may name an object of `catalog.schema` (the
/// parts it leaves out DuckDB fills from its search path; `a.b` is a
/// schema and a name, or a catalog and a name).
fn names(t: &NamedTable, catalog: &str, schema: &str) -> bool {
    (t.catalog.is_empty() || t.catalog.eq_ignore_ascii_case(catalog))
        && (t.schema.is_empty()
            || t.schema.eq_ignore_ascii_case(schema)
            || (t.catalog.is_empty() && t.schema.eq_ignore_ascii_case(catalog)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_are_dropped() {
        assert_eq!(
            without_hints("Catalog Error: Table with name x does not exist!\nDid you mean \"y\"?"),
            "Catalog Error: Table with name x does not exist!"
        );
        assert_eq!(
            without_hints("Binder Error: Referenced column \"x\" not found in FROM clause!\nCandidate bindings: \"a\""),
            "Binder Error: Referenced column \"x\" not found in FROM clause!"
        );
    }
}
