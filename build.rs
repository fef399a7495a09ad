//! Compiles the C++ shims against the DuckDB headers that libduckdb-sys
//! publishes (`DEP_DUCKDB_INCLUDE`): the guard's parse shim
//! (`src/engine/guard/describe.cpp`), so the statement guard reads SQL with
//! DuckDB's own C++ parser, and the progress shim (`src/engine/progress.cpp`),
//! which reads a running query's progress from its connection's context, and
//! the pipe shim (`src/engine/pipe.cpp`), a file system through which
//! DuckDB's own CSV writer streams a CSV answer.

use std::path::PathBuf;

fn main() {
    const SHIMS: [&str; 3] = [
        "src/engine/guard/describe.cpp",
        "src/engine/progress.cpp",
        "src/engine/pipe.cpp",
    ];
    for shim in SHIMS {
        println!("cargo:rerun-if-changed={shim}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let include = PathBuf::from(
        std::env::var("DEP_DUCKDB_INCLUDE")
            .expect("libduckdb-sys (feature `bundled`) publishes DuckDB's include directory"),
    );
    // .../duckdb/src/include -> .../duckdb
    let root = include
        .parent()
        .and_then(|p| p.parent())
        .expect("DuckDB's include directory lies two levels inside its source tree")
        .to_path_buf();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .files(SHIMS)
        .include(&include)
        .include(root.join("extension/json/include"))
        .include(root.join("third_party/yyjson/include"))
        .include(root.join("third_party/fmt/include"))
        .flag_if_supported("-std=c++17")
        .warnings(false)
        .flag_if_supported("-w");
    // Match libduckdb-sys: DuckDB's classes differ in layout between debug and
    // release builds, so the shim must see the same NDEBUG.
    let debug = std::env::var("DEBUG").is_ok_and(|v| v != "false" && v != "0");
    if !debug {
        build.define("NDEBUG", None);
    }
    build.compile("duckgate_describe");
}
