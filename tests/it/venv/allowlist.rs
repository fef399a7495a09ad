//! The guard's allow-list covers the pinned DuckDB: every function (with the
//! extensions the gateway loads) and every internal view is classified on
//! purpose in `src/engine/guard/functions.tsv`. When a DuckDB upgrade brings a
//! function nobody classified, this fails (and the gateway refuses it).

use crate::common;

use std::collections::BTreeSet;

use duckgate::engine::guard::functions;

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn every_function_of_the_pinned_build_is_classified() {
    let ext_dir = common::extension_dir();
    let config = duckdb::Config::default()
        .with("extension_directory", &ext_dir)
        .unwrap()
        .with("autoinstall_known_extensions", "false")
        .unwrap();
    let conn = duckdb::Connection::open_in_memory_with_flags(config).unwrap();
    // The lake extensions load only when a catalog needs them, but each
    // function they bring must be classified before one does.
    conn.execute_batch(
        "LOAD httpfs; LOAD icu; LOAD postgres_scanner; LOAD ducklake; LOAD avro; \
         LOAD iceberg; LOAD delta",
    )
    .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT DISTINCT function_name FROM duckdb_functions() \
             UNION ALL SELECT schema_name || '.' || view_name FROM duckdb_views() WHERE internal",
        )
        .unwrap();
    let names: BTreeSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|n| n.unwrap().to_ascii_lowercase())
        .collect();
    assert!(names.len() > 900, "{}", names.len());
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| functions::lookup(n).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "functions of the pinned DuckDB that functions.tsv does not classify \
         (run scripts/classify-functions.py and review): {missing:?}"
    );
    // And the other way: nothing in the file is a typo. The official
    // prebuilt library (the default build) has the autocomplete extension
    // built in; DuckDB built from source (`--features bundled`) has not.
    const PREBUILT_ONLY: [&str; 4] = [
        "check_peg_parser",
        "disable_peg_parser",
        "enable_peg_parser",
        "sql_auto_complete",
    ];
    let stale: Vec<&String> = functions::all()
        .keys()
        .filter(|k| !names.contains(k.as_str()))
        .filter(|k| !(cfg!(feature = "bundled") && PREBUILT_ONLY.contains(&k.as_str())))
        .collect();
    assert!(
        stale.is_empty(),
        "functions.tsv names what the build lacks: {stale:?}"
    );
}
