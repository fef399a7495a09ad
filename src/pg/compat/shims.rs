//! The catalog tables DuckDB lacks, or lacks columns of, as queries of
//! their columns.

/// Catalog tables DuckDB lacks or lacks columns of: their name and the
/// query that stands for them.
pub(super) const TABLES: &[(&str, &str)] = &[
    (
        "pg_class",
        "SELECT *, false AS relforcerowsecurity FROM pg_catalog.pg_class",
    ),
    // PostgreSQL's type oids (DuckDB's view has DuckDB's type ids, which
    // join no `pg_type` row: pgjdbc's getColumns joins them) and type
    // modifiers (`numeric(p,s)` as PostgreSQL encodes it); a type
    // PostgreSQL has no oid for keeps DuckDB's id (see `format_type`).
    (
        "pg_attribute",
        "SELECT * REPLACE (CASE atttypid WHEN 10 THEN 16 WHEN 11 THEN 21 WHEN 12 THEN 21 WHEN 13 THEN 23 \
         WHEN 14 THEN 20 WHEN 15 THEN 1082 WHEN 16 THEN 1083 WHEN 17 THEN 1114 WHEN 18 THEN 1114 \
         WHEN 19 THEN 1114 WHEN 20 THEN 1114 WHEN 21 THEN 1700 WHEN 22 THEN 700 WHEN 23 THEN 701 \
         WHEN 25 THEN 1043 WHEN 26 THEN 17 WHEN 27 THEN 1186 WHEN 28 THEN 21 WHEN 29 THEN 23 \
         WHEN 30 THEN 20 WHEN 32 THEN 1184 WHEN 34 THEN 1266 WHEN 35 THEN 1083 WHEN 36 THEN 1560 \
         WHEN 54 THEN 2950 ELSE atttypid END AS atttypid, \
         CASE WHEN atttypmod > 0 THEN (((atttypmod // 1000) << 16) | (atttypmod % 1000)) + 4 ELSE atttypmod END AS atttypmod) \
         FROM pg_catalog.pg_attribute",
    ),
    (
        "pg_index",
        "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index",
    ),
    (
        "pg_collation",
        "SELECT *, NULL::BIGINT AS collnamespace, NULL::VARCHAR AS collprovider FROM pg_catalog.pg_collation",
    ),
    // DuckDB's, but for functions' comments (its view reads
    // duckdb_functions(), which a confined identity may not: pgjdbc's
    // getTables joins it), and `classoid` PostgreSQL's oid of `pg_class`
    // (or `pg_type`), which `'pg_class'::regclass` reads as.
    (
        "pg_description",
        "SELECT table_oid AS objoid, 1259 AS classoid, 0 AS objsubid, comment AS description FROM duckdb_tables() WHERE NOT internal \
         UNION ALL SELECT table_oid, 1259, column_index, comment FROM duckdb_columns() WHERE NOT internal \
         UNION ALL SELECT view_oid, 1259, 0, comment FROM duckdb_views() WHERE NOT internal \
         UNION ALL SELECT index_oid, 1259, 0, comment FROM duckdb_indexes() \
         UNION ALL SELECT sequence_oid, 1259, 0, comment FROM duckdb_sequences() \
         UNION ALL SELECT type_oid, 1247, 0, comment FROM duckdb_types() WHERE NOT internal",
    ),
    (
        "pg_policy",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS polname, NULL::BIGINT AS polrelid, NULL::VARCHAR AS polcmd, NULL::BOOLEAN AS polpermissive, NULL::BIGINT[] AS polroles, NULL::VARCHAR AS polqual, NULL::VARCHAR AS polwithcheck WHERE false",
    ),
    (
        "pg_statistic_ext",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS stxrelid, NULL::VARCHAR AS stxname, NULL::BIGINT AS stxnamespace, NULL::BIGINT AS stxowner, NULL::INTEGER AS stxstattarget, NULL::SMALLINT[] AS stxkeys, NULL::VARCHAR[] AS stxkind WHERE false",
    ),
    (
        "pg_publication",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS pubname, NULL::BIGINT AS pubowner, NULL::BOOLEAN AS puballtables, NULL::BOOLEAN AS pubinsert, NULL::BOOLEAN AS pubupdate, NULL::BOOLEAN AS pubdelete, NULL::BOOLEAN AS pubtruncate, NULL::BOOLEAN AS pubviaroot WHERE false",
    ),
    (
        "pg_publication_namespace",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS pnpubid, NULL::BIGINT AS pnnspid WHERE false",
    ),
    (
        "pg_publication_rel",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS prpubid, NULL::BIGINT AS prrelid, NULL::VARCHAR AS prqual, NULL::SMALLINT[] AS prattrs WHERE false",
    ),
    // PostgreSQL's settings a driver reads, as constants: pgjdbc's
    // `getImportedKeys` asks for `max_index_keys` (a key's most columns).
    // DuckDB's own view lists DuckDB's settings, which the guard refuses.
    (
        "pg_settings",
        "SELECT * FROM (VALUES ('max_index_keys', '32', NULL, 'Preset Options', 'Shows the maximum number of index keys.', 'internal', 'integer')) AS s(name, setting, unit, category, short_desc, context, vartype)",
    ),
    (
        "pg_inherits",
        "SELECT NULL::BIGINT AS inhrelid, NULL::BIGINT AS inhparent, NULL::INTEGER AS inhseqno, NULL::BOOLEAN AS inhdetachpending WHERE false",
    ),
    (
        "pg_trigger",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS tgrelid, NULL::BIGINT AS tgparentid, NULL::VARCHAR AS tgname, NULL::BIGINT AS tgfoid, NULL::SMALLINT AS tgtype, NULL::VARCHAR AS tgenabled, NULL::BOOLEAN AS tgisinternal, NULL::BIGINT AS tgconstrrelid, NULL::BIGINT AS tgconstrindid, NULL::BIGINT AS tgconstraint, NULL::BOOLEAN AS tgdeferrable, NULL::BOOLEAN AS tginitdeferred, NULL::SMALLINT AS tgnargs, NULL::VARCHAR AS tgqual WHERE false",
    ),
    (
        "pg_roles",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS rolname, NULL::BOOLEAN AS rolsuper, NULL::BOOLEAN AS rolinherit, NULL::BOOLEAN AS rolcreaterole, NULL::BOOLEAN AS rolcreatedb, NULL::BOOLEAN AS rolcanlogin, NULL::BOOLEAN AS rolreplication, NULL::INTEGER AS rolconnlimit, NULL::BOOLEAN AS rolbypassrls WHERE false",
    ),
    (
        "pg_opclass",
        "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS opcmethod, NULL::VARCHAR AS opcname, NULL::BIGINT AS opcnamespace, NULL::BIGINT AS opcfamily, NULL::BIGINT AS opcintype, NULL::BOOLEAN AS opcdefault WHERE false",
    ),
    (
        "pg_partitioned_table",
        "SELECT NULL::BIGINT AS partrelid, NULL::VARCHAR AS partstrat, NULL::SMALLINT AS partnatts WHERE false",
    ),
    // No PostgreSQL extensions (Grafana looks for TimescaleDB here).
    (
        "pg_extension",
        "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS extname, NULL::BIGINT AS extowner, NULL::BIGINT AS extnamespace, NULL::BOOLEAN AS extrelocatable, NULL::VARCHAR AS extversion, NULL::BIGINT[] AS extconfig, NULL::VARCHAR[] AS extcondition WHERE false",
    ),
    (
        "pg_foreign_table",
        "SELECT NULL::BIGINT AS ftrelid, NULL::BIGINT AS ftserver WHERE false",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::compat::rewrite;

    #[test]
    fn catalog_tables_duckdb_lacks_are_shims_under_their_names() {
        let shim = TABLES[0].1;
        // An alias is kept; without one the shim takes the table's name,
        // and a column qualified by schema and table names the shim.
        assert_eq!(
            rewrite("FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.x = tc.y)"),
            format!("FROM ({shim}) c LEFT JOIN ({shim}) tc ON (c.x = tc.y)")
        );
        assert_eq!(
            rewrite("SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class JOIN x"),
            format!("SELECT pg_class.relname FROM ({shim}) AS pg_class JOIN x")
        );
        assert_eq!(
            rewrite("FROM pg_catalog.pg_class AS k, pg_catalog.pg_inherits"),
            format!(
                "FROM ({shim}) AS k, ({}) AS pg_inherits",
                TABLES.iter().find(|t| t.0 == "pg_inherits").unwrap().1
            )
        );
        // Tables DuckDB has whole are its own.
        let q = "SELECT pg_catalog.pg_namespace.nspname FROM pg_catalog.pg_namespace";
        assert_eq!(rewrite(q), q);
    }
}
