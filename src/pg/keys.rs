//! Primary keys, unique constraints and foreign keys as PostgreSQL's
//! catalog shows them, for psql's `\d table`, SQLAlchemy's
//! `get_pk_constraint` and `get_foreign_keys`, and pgjdbc's
//! `getPrimaryKeys` (DBeaver's navigator).
//!
//! DuckDB's own `pg_constraint` reads `duckdb_constraints()`, which the
//! guard refuses a confined identity, names a key by its text and numbers
//! its columns from 0 where `pg_attribute` counts from 1; its `pg_index`
//! lists only what `CREATE INDEX` made. So the door reads the keys itself
//! ([`crate::pg::backend::keys`]: DuckDB's `duckdb_constraints()` confined
//! to the tables and columns the identity may read, as every listing is)
//! and writes them into the statement as a relation of literals
//! ([`relation`]), which these shims read:
//!
//! - `pg_constraint`: one row per key (`contype` `p`, `u`, `f` or `c`, `conkey`
//!   the columns' `attnum`s, `conindid` its index, or for a foreign key the
//!   referenced key's; `confrelid` and `confkey` what a foreign key
//!   references, which must be as readable as the key itself);
//! - `pg_class`: `relhastriggers` true for both tables of a foreign key
//!   (PostgreSQL's foreign keys are triggers; psql's `\d` lists them only
//!   then), `relchecks` the table's CHECK constraints;
//! - `pg_index` and `pg_class`: DuckDB's, and one index per primary key or
//!   unique constraint (`relkind` `i`, named as DuckDB names the
//!   constraint, `indisprimary`, `indisunique`, `indkey`);
//! - `pg_get_constraintdef(oid)` and `pg_get_indexdef(oid)` of a key (a
//!   foreign key's or CHECK constraint's definition is DuckDB's own text
//!   of it).
//!
//! A key's oid is DuckDB's (`table_oid * 1000000 + constraint_index`), its
//! index's that plus [`INDEX_OFFSET`]: above every oid DuckDB hands out.

use std::borrow::Cow;

use crate::pg::backend::Key;

/// What a key's index oid adds to the key's.
const INDEX_OFFSET: i64 = 500_000;

/// The columns of [`relation`], in order.
const COLUMNS: &str = "table_oid, schema_oid, idx, contype, conname, attnums, cols, schema_name, \
     table_name, context, confrelid, confidx, confkey";

/// Whether `sql` reads what the keys complete (the keys are read for it).
pub fn needed(sql: &str) -> bool {
    [
        "pg_constraint",
        "pg_index",
        "pg_get_constraintdef",
        "relhastriggers",
    ]
    .iter()
    .any(|w| {
        sql.as_bytes()
            .windows(w.len())
            .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
    })
}

fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The keys as a relation of literals (`SELECT ...`), typed when empty.
pub fn relation(keys: &[Key]) -> String {
    if keys.is_empty() {
        return "SELECT NULL::BIGINT AS table_oid, NULL::BIGINT AS schema_oid, NULL::BIGINT AS idx, \
                NULL::VARCHAR AS contype, NULL::VARCHAR AS conname, NULL::INTEGER[] AS attnums, \
                NULL::VARCHAR[] AS cols, NULL::VARCHAR AS schema_name, NULL::VARCHAR AS table_name, \
                NULL::VARCHAR AS context, NULL::BIGINT AS confrelid, NULL::BIGINT AS confidx, \
                NULL::INTEGER[] AS confkey WHERE false"
            .to_string();
    }
    let rows: Vec<String> = keys
        .iter()
        .map(|k| {
            let attnums: Vec<String> = k.attnums.iter().map(|n| n.to_string()).collect();
            let cols: Vec<String> = k.columns.iter().map(|c| literal(c)).collect();
            let (confrelid, confidx, confkey) = match &k.references {
                Some(r) => {
                    let at: Vec<String> = r.attnums.iter().map(|n| n.to_string()).collect();
                    (
                        r.table_oid.to_string(),
                        r.key_index.to_string(),
                        format!("[{}]", at.join(", ")),
                    )
                }
                None => ("NULL".into(), "NULL".into(), "NULL".into()),
            };
            format!(
                "({}::BIGINT, {}::BIGINT, {}::BIGINT, '{}', {}, [{}]::INTEGER[], [{}]::VARCHAR[], {}, {}, \
                 {}, {confrelid}::BIGINT, {confidx}::BIGINT, {confkey}::INTEGER[])",
                k.table_oid,
                k.schema_oid,
                k.index,
                k.contype,
                literal(&k.name),
                attnums.join(", "),
                cols.join(", "),
                literal(&k.schema),
                literal(&k.table),
                literal(&k.text),
            )
        })
        .collect();
    format!("SELECT * FROM (VALUES {}) AS k({COLUMNS})", rows.join(", "))
}

/// The shim of catalog table `name` where the keys complete it (`keys`:
/// the [`relation`]); `None` for the other tables, or without keys.
pub fn table(name: &str, keys: Option<&str>) -> Option<Cow<'static, str>> {
    let k = keys?;
    let lower = name.to_ascii_lowercase();
    Some(Cow::Owned(match lower.as_str() {
        "pg_constraint" => format!(
            "SELECT table_oid * 1000000 + idx AS oid, conname, schema_oid AS connamespace, contype, \
             false AS condeferrable, false AS condeferred, true AS convalidated, table_oid AS conrelid, \
             0 AS contypid, CASE contype WHEN 'f' THEN confrelid * 1000000 + confidx + {INDEX_OFFSET} \
             WHEN 'c' THEN 0 ELSE table_oid * 1000000 + idx + {INDEX_OFFSET} END AS conindid, \
             0 AS conparentid, \
             coalesce(confrelid, 0) AS confrelid, \
             CASE WHEN contype = 'f' THEN 'a' ELSE ' ' END AS confupdtype, \
             CASE WHEN contype = 'f' THEN 'a' ELSE ' ' END AS confdeltype, \
             CASE WHEN contype = 'f' THEN 's' ELSE ' ' END AS confmatchtype, \
             true AS conislocal, 0 AS coninhcount, false AS connoinherit, \
             attnums AS conkey, confkey, NULL::BIGINT[] AS conpfeqop, \
             NULL::BIGINT[] AS conppeqop, NULL::BIGINT[] AS conffeqop, NULL::BIGINT[] AS conexclop, \
             NULL::VARCHAR AS conbin FROM ({k})"
        ),
        "pg_index" => format!(
            "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index UNION ALL BY NAME \
             SELECT table_oid * 1000000 + idx + {INDEX_OFFSET} AS indexrelid, table_oid AS indrelid, \
             len(attnums)::INTEGER AS indnatts, len(attnums)::INTEGER AS indnkeyatts, true AS indisunique, \
             contype = 'p' AS indisprimary, false AS indisexclusion, true AS indimmediate, \
             false AS indisclustered, true AS indisvalid, false AS indcheckxmin, true AS indisready, \
             true AS indislive, false AS indisreplident, attnums AS indkey, false AS indnullsnotdistinct \
             FROM ({k}) WHERE contype IN ('p', 'u')"
        ),
        "pg_class" => format!(
            "SELECT * REPLACE (relhastriggers OR oid IN (SELECT table_oid FROM ({k}) WHERE contype = 'f' \
             UNION ALL SELECT confrelid FROM ({k}) WHERE contype = 'f') AS relhastriggers, \
             (SELECT count(*) FROM ({k}) AS c WHERE c.contype = 'c' AND c.table_oid = oid)::SMALLINT \
             AS relchecks), \
             false AS relforcerowsecurity FROM pg_catalog.pg_class UNION ALL BY NAME \
             SELECT table_oid * 1000000 + idx + {INDEX_OFFSET} AS oid, conname AS relname, \
             schema_oid AS relnamespace, 0 AS reltype, 0 AS reloftype, 0 AS relowner, 0 AS relam, \
             0 AS relfilenode, 0 AS reltablespace, 0 AS relpages, 0 AS reltuples, false AS relhasindex, \
             false AS relisshared, 'p' AS relpersistence, 'i' AS relkind, len(attnums) AS relnatts, \
             0 AS relchecks, false AS relhasrules, false AS relhastriggers, false AS relhassubclass, \
             false AS relrowsecurity, false AS relforcerowsecurity, true AS relispopulated, \
             false AS relispartition FROM ({k}) WHERE contype IN ('p', 'u')"
        ),
        _ => return None,
    }))
}

/// `pg_get_indexdef(oid)` of a key's index (NULL for another oid).
pub fn indexdef(keys: &str, oid: &str) -> String {
    format!(
        "(SELECT 'CREATE UNIQUE INDEX ' || conname || ' ON ' || schema_name || '.' || table_name || \
         ' USING art (' || array_to_string(cols, ', ') || ')' FROM ({keys}) \
         WHERE contype IN ('p', 'u') AND table_oid * 1000000 + idx + {INDEX_OFFSET} = ({oid}))"
    )
}

/// `expr::regclass` of a table's oid the keys name (psql's
/// `conrelid::pg_catalog.regclass`): its name; another oid as text.
pub fn relname(keys: &str, expr: &str) -> String {
    format!(
        "coalesce((SELECT table_name FROM ({keys}) WHERE table_oid = ({expr}) LIMIT 1), \
         CAST(({expr}) AS VARCHAR))"
    )
}

/// `pg_get_constraintdef(oid)` of a key (NULL for another oid).
pub fn constraintdef(keys: &str, oid: &str) -> String {
    format!(
        "(SELECT CASE WHEN contype IN ('f', 'c') THEN context ELSE \
         CASE contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END || ' (' || \
         array_to_string(cols, ', ') || ')' END FROM ({keys}) WHERE table_oid * 1000000 + idx = ({oid}))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(primary: bool, name: &str, columns: &[&str]) -> Key {
        Key {
            database: "ops".into(),
            schema: "main".into(),
            table: "t'x".into(),
            table_oid: 7,
            schema_oid: 3,
            index: 0,
            contype: if primary { 'p' } else { 'u' },
            name: name.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            attnums: (1..=columns.len() as i64).collect(),
            text: String::new(),
            references: None,
        }
    }

    #[test]
    fn keys_are_literals_quoted_and_typed() {
        let r = relation(&[key(true, "t_pkey", &["a", "b'c"])]);
        assert!(
            r.contains(
                "'p', 't_pkey', [1, 2]::INTEGER[], ['a', 'b''c']::VARCHAR[], 'main', 't''x'"
            ),
            "{r}"
        );
        assert!(relation(&[]).ends_with("WHERE false"));
        assert!(needed("LEFT JOIN pg_catalog.PG_CONSTRAINT con"));
        assert!(!needed("SELECT relname FROM pg_catalog.pg_class"));
        assert!(needed("SELECT c.relhastriggers FROM pg_catalog.pg_class c"));
        assert!(table("pg_attribute", Some("x")).is_none());
        assert!(table("pg_constraint", None).is_none());
    }
}
