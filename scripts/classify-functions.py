#!/usr/bin/env python3
"""Drafts src/engine/guard/functions.tsv, the guard's allow-list, from DuckDB itself.

Every function that the pinned DuckDB (with the extensions the gateway loads)
lists in duckdb_functions(), and every internal view, gets one line with a
verdict. The file is what the gateway enforces and what a reviewer reads; this
script only writes the first draft of new lines, by the rules below, so that a
DuckDB upgrade shows up as a diff to review. The coverage test
(`every_function_of_the_pinned_build_is_classified`) fails when the build has
a function the file does not name.

Verdicts:
  allow   scalar, aggregate, window or macro function clients may call
  table   table function clients may call (no file access)
  reader  table function whose first argument is a path: only literal paths
          the path policy admits
  refuse  never callable, with the reason in the last column
  view    an internal view clients may select from; `view-refuse` otherwise

Usage: classify-functions.py PYTHON_SITE_PACKAGES > src/engine/guard/functions.tsv
"""
import sys

import duckdb

# Table functions that neither touch files nor reveal the gateway's state.
TABLE = {
    "range", "generate_series", "unnest", "repeat", "repeat_row", "test_all_types",
    "test_vector_types", "json_each", "json_tree", "icu_calendar_names", "pg_timezone_names",
    "duckdb_columns", "duckdb_constraints", "duckdb_dependencies", "duckdb_functions",
    "duckdb_indexes", "duckdb_keywords", "duckdb_optimizers", "duckdb_schemas",
    "duckdb_sequences", "duckdb_tables", "duckdb_types", "duckdb_views", "summary",
    "pragma_table_info", "duckdb_coordinate_systems",
    # A declared DuckLake's snapshots and table sizes, by catalog name.
    "ducklake_snapshots", "ducklake_current_snapshot", "ducklake_last_committed_snapshot",
    "ducklake_table_info",
}
# Table functions that read the path given as their first argument.
READERS = {
    "read_parquet", "parquet_scan", "parquet_metadata", "parquet_schema",
    "parquet_file_metadata", "parquet_kv_metadata", "parquet_full_metadata",
    "parquet_bloom_probe", "read_csv", "read_csv_auto", "sniff_csv", "read_json",
    "read_json_auto", "read_json_objects", "read_json_objects_auto", "read_ndjson",
    "read_ndjson_auto", "read_ndjson_objects", "read_text", "read_blob", "glob",
    "read_avro",
}
# The scans attached tables bind to: admitted in plans, never called by name
# (ducklake_scan called by name fails inside DuckDB).
SCANS = {
    "ducklake_scan": "the scan of a DuckLake table; called by name it fails inside DuckDB",
    "iceberg_scan": "the scan of a declared Iceberg table; clients read it by name (see GET /catalog)",
    "delta_scan": "the scan of a declared Delta table; clients read it by name (see GET /catalog)",
}
# Scalar, aggregate and macro functions no client may call, and why.
REFUSED = {
    "current_setting": "reads settings, which may hold credentials",
    "getenv": "reads the process environment",
    "getvariable": "reads connection variables (state shared through the pool)",
    "setseed": "changes the pooled connection's random state",
    "nextval": "advances a sequence (a write)",
    "currval": "reads connection-local sequence state",
    "setval": "sets a sequence (a write)",
    "json_serialize_plan": "binds SQL the guard has not seen",
    "json_serialize_sql": "parses SQL the guard has not seen",
    "json_deserialize_sql": "turns data into SQL text the guard has not seen",
    "json_execute_serialized_sql": "runs SQL the guard has not seen",
    "write_log": "writes to the database's log",
    "parse_duckdb_log_message": "reads the database's log format",
    "json_execute_serialized_sql": "runs SQL the guard has not seen",
    "write_blob": "writes files (delta extension)",
    "get_delta_test_expression": "a test hook",
    "iceberg_verify_equality_deletes": "a test hook",
    "parse_delta_filter_logline": "reads the database's log format",
}
# Table functions that are refused, and why; any other table function is
# refused too ("not reviewed"), this only gives better reasons.
REFUSED_TABLE = {
    "duckdb_secrets": "reveals secrets", "which_secret": "reveals secrets",
    "duckdb_secret_types": "secrets belong to the gateway",
    "duckdb_settings": "reads settings, which may hold credentials",
    "duckdb_variables": "connection state", "duckdb_prepared_statements": "connection state",
    "duckdb_databases": "reveals the gateway's file paths",
    "duckdb_extensions": "reveals the gateway's file paths",
    "duckdb_memory": "the gateway's internals", "duckdb_temporary_files": "other clients' spill files",
    "duckdb_external_file_cache": "other clients' S3 locations",
    "duckdb_logs": "other clients' statements", "duckdb_logs_parsed": "other clients' statements",
    "duckdb_log_contexts": "other clients' statements",
    "enable_logging": "changes global state", "disable_logging": "changes global state",
    "truncate_duckdb_logs": "changes global state",
    "enable_profiling": "changes connection state", "disable_profiling": "changes connection state",
    "duckdb_profiling_settings": "connection state",
    "checkpoint": "a write", "force_checkpoint": "a write",
    "query": "runs SQL the guard has not seen", "query_table": "runs SQL the guard has not seen",
    "arrow_scan": "dereferences a pointer argument", "arrow_scan_dumb": "dereferences a pointer argument",
    "read_duckdb": "opens database files", "seq_scan": "internal",
    "duckdb_connection_count": "the gateway's internals",
    "duckdb_approx_database_count": "the gateway's internals",
    "duckdb_table_sample": "not reviewed",
}
# Internal views clients may not read, and why (others: their plans are
# checked like any query).
REFUSED_VIEWS = {
    "main.duckdb_databases": "reveals the gateway's file paths",
    "main.pragma_database_list": "reveals the gateway's file paths",
    "main.duckdb_logs": "other clients' statements",
    "pg_catalog.pg_settings": "reads settings, which may hold credentials",
    "pg_catalog.pg_prepared_statements": "connection state",
    "pg_catalog.pg_database": "reveals the gateway's file paths",
}


def main() -> None:
    site = sys.argv[1]
    con = duckdb.connect()
    for ext in ("httpfs", "icu", "postgres_scanner", "ducklake", "avro", "iceberg", "delta"):
        con.execute(f"LOAD '{site}/duckdb_extension_{ext}/extensions/v1.5.5/{ext}.duckdb_extension'")
    rows = con.execute(
        "SELECT function_name, list(DISTINCT function_type ORDER BY function_type) "
        "FROM duckdb_functions() WHERE function_name NOT IN ('pandas_scan', 'python_map_function') "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    print("# The statement guard's allow-list: every function and internal view of the")
    print("# pinned DuckDB (v1.5.5 with httpfs, icu and the lake extensions:")
    print("# ducklake, postgres_scanner, iceberg, avro, delta). Drafted by")
    print("# scripts/classify-functions.py, reviewed by hand. Anything not named here is")
    print("# refused. Columns: name, DuckDB's function types, verdict, reason.")
    for name, types in rows:
        kinds = ",".join(types)
        tabular = any(t in ("table", "table_macro") for t in types)
        if types == ["pragma"]:
            verdict, why = "refuse", "PRAGMA statements are never available"
        elif name in SCANS:
            verdict, why = "scan", SCANS[name]
        elif name in READERS:
            verdict, why = "reader", "reads only literal paths the path policy admits"
        elif name in TABLE:
            verdict, why = "table", ""
        elif name in REFUSED:
            verdict, why = "refuse", REFUSED[name]
        elif tabular and all(t in ("table", "table_macro", "pragma") for t in types):
            verdict, why = "refuse", REFUSED_TABLE.get(name, "not reviewed")
        elif tabular:
            # Also an aggregate or scalar (histogram): callable as that only.
            verdict, why = "allow", "as a scalar or aggregate only"
        elif name in REFUSED:
            verdict, why = "refuse", REFUSED[name]
        else:
            verdict, why = "allow", ""
        print(f"{name}\t{kinds}\t{verdict}\t{why}")
    views = con.execute(
        "SELECT schema_name || '.' || view_name FROM duckdb_views() WHERE internal ORDER BY 1"
    ).fetchall()
    for (view,) in views:
        if view in REFUSED_VIEWS:
            print(f"{view}\tview\tview-refuse\t{REFUSED_VIEWS[view]}")
        else:
            print(f"{view}\tview\tview\t")


if __name__ == "__main__":
    main()
