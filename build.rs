//! Links DuckDB and compiles the C++ shims against the headers of the same
//! release: the guard's shim (`src/engine/guard/describe/`: the parse, the
//! plan's names, result types, catalog questions), so the statement guard
//! reads SQL with DuckDB's own C++ parser and binder; the errors shim
//! (`src/engine/errors.cpp`), which takes the place DuckDB gives an error back
//! into the client's text and renders DuckDB's excerpt there; the progress shim
//! (`src/engine/progress.cpp`), which reads a running query's progress from
//! its connection's context; the pipe shim (`src/engine/pipe.cpp`), a file
//! system through which DuckDB's own writers stream an answer; and the secret
//! shim (`src/engine/secrets.cpp`), which installs credentials through
//! DuckDB's secret manager without SQL text; the policy shim
//! (`src/engine/policy/`: the document, binding, scan filters, the rewrite
//! before DuckDB's optimizers, the check after them, the extension), which applies roles' row filters and column
//! masks to the plans DuckDB optimizes; and the priority shim
//! (`src/engine/priority.cpp`), DuckDB's wait for its own tasks made to
//! yield the core (the prebuilt library only).
//!
//! Two ways to get DuckDB:
//!
//! - **Prebuilt (default).** The official DuckDB 1.5.5 shared library, as the
//!   npm package `@duckdb/node-bindings-linux-x64@1.5.5-r.5` ships it (it
//!   exports DuckDB's C++ symbols, which the shims use). It is fetched once
//!   with `npm pack` into `DUCKDB_LIB_DIR` (set in `.cargo/config.toml`),
//!   checked against the pinned checksums below, and found at run time by
//!   rpath (that directory, then the binary's own directory). The C++ headers
//!   come from the DuckDB source that libduckdb-sys ships for the same
//!   release. `DUCKGATE_LIBDUCKDB_TGZ` names an already downloaded package
//!   tarball instead (air-gapped builds, the container image).
//! - **From source** (`--features bundled`): libduckdb-sys compiles DuckDB
//!   (18-42 minutes on two cores) and publishes its include directory.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use sha2::{Digest, Sha256, Sha512};

const SHIMS: [&str; 19] = [
    "src/engine/guard/describe/parse.cpp",
    "src/engine/guard/describe/plan.cpp",
    "src/engine/guard/describe/types.cpp",
    "src/engine/guard/describe/catalog.cpp",
    "src/engine/guard/describe/write.cpp",
    "src/engine/errors.cpp",
    "src/engine/memory.cpp",
    "src/engine/nesting.cpp",
    "src/engine/s3_paths.cpp",
    "src/engine/progress.cpp",
    "src/engine/pipe.cpp",
    "src/engine/secrets.cpp",
    "src/engine/policy/document.cpp",
    "src/engine/policy/bind.cpp",
    "src/engine/policy/scan.cpp",
    "src/engine/policy/rewrite.cpp",
    "src/engine/policy/check.cpp",
    "src/engine/policy/extension.cpp",
    "src/engine/priority.cpp",
];

/// The headers the shims share (each shim includes what it uses).
const SHIM_HEADERS: [&str; 5] = [
    "src/engine/shims.h",
    "src/engine/shim_context.hpp",
    "src/engine/shim_support.hpp",
    "src/engine/guard/describe/describe.hpp",
    "src/engine/policy/policy.hpp",
];

/// The npm package carrying the official build of this DuckDB release.
const NPM_PACKAGE: &str = "@duckdb/node-bindings-linux-x64@1.5.5-r.5";
/// npm's `dist.integrity` of that package's tarball.
const NPM_INTEGRITY: &str =
    "sha512-kCyq6BXhn6QXfwF8yVdVKriSSHP+rfVWcJ56cG8qZzlOZpxyvT5WGm6jMshxg4ditLlOsHsIN/D47RYrcjXuHQ==";
/// SHA-256 of `package/libduckdb.so` inside it.
const LIB_SHA256: &str = "fc23f12e376c47be520f75221288281906e7942e8fd6f6ce4849198ba60d0405";
const LIB_NAME: &str = "libduckdb.so";
/// The libduckdb-sys release whose DuckDB source provides the headers.
const SYS_CRATE: &str = "libduckdb-sys-1.10505.0";

fn main() {
    for shim in SHIMS {
        println!("cargo:rerun-if-changed={shim}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    for header in SHIM_HEADERS {
        println!("cargo:rerun-if-changed={header}");
    }
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-env-changed=DUCKGATE_LIBDUCKDB_TGZ");

    let bundled = std::env::var_os("CARGO_FEATURE_BUNDLED").is_some();
    let root = if bundled {
        let include = PathBuf::from(
            std::env::var("DEP_DUCKDB_INCLUDE")
                .expect("libduckdb-sys (feature `bundled`) publishes DuckDB's include directory"),
        );
        // .../duckdb/src/include -> .../duckdb
        include
            .parent()
            .and_then(|p| p.parent())
            .expect("DuckDB's include directory lies two levels inside its source tree")
            .to_path_buf()
    } else {
        let lib_dir = PathBuf::from(std::env::var("DUCKDB_LIB_DIR").expect(
            "DUCKDB_LIB_DIR names where the prebuilt DuckDB goes (.cargo/config.toml sets it)",
        ));
        fs::create_dir_all(&lib_dir).expect("create DUCKDB_LIB_DIR");
        let lib_dir = lib_dir.canonicalize().expect("DUCKDB_LIB_DIR");
        ensure_library(&lib_dir);
        println!(
            "cargo:rerun-if-changed={}",
            lib_dir.join(LIB_NAME).display()
        );
        // Found at run time beside the binary (the image), else where it was
        // fetched (cargo run, the tests).
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
        // The depth guard on DuckDB's JSON structure extraction
        // (src/engine/nesting.cpp) takes the place of the library's own
        // function, whose every call (its recursive ones too) goes through
        // the library's PLT: the binary must export it.
        println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={EXTRACT_STRUCTURE}");
        ensure_headers(&lib_dir)
    };

    // One translation unit of all the shims: almost all of a shim's compile
    // time is parsing DuckDB's headers, so this parses them once instead of
    // once a file (36 -> 14 CPU-seconds of the first build).
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let unity = out.join("duckgate_shims.cpp");
    let includes: String = SHIMS
        .iter()
        .map(|shim| format!("#include \"{}\"\n", manifest.join(shim).display()))
        .collect();
    fs::write(&unity, includes).expect("write the shims' translation unit");

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(&unity)
        .include(root.join("src/include"))
        .include(root.join("extension/json/include"))
        .include(root.join("third_party/yyjson/include"))
        .include(root.join("third_party/fmt/include"))
        .flag_if_supported("-std=c++17")
        .warnings(false)
        .flag_if_supported("-w");
    // DuckDB's classes differ in layout between debug and release builds;
    // the official library and libduckdb-sys's release build are NDEBUG.
    let debug = std::env::var("DEBUG").is_ok_and(|v| v != "false" && v != "0");
    if !debug || !bundled {
        build.define("NDEBUG", None);
    }
    if !bundled {
        build.define("DUCKGATE_INTERPOSE_JSON_STRUCTURE", None);
        // A static DuckDB defines the C API's execute functions too: only
        // the shared library's can be taken over (src/engine/priority.cpp).
        build.define("DUCKGATE_INTERPOSE_EXECUTE", None);
    }
    build.compile("duckgate_shims");
}

/// `duckdb::JSONStructure::ExtractStructure(yyjson_val*, JSONStructureNode&,
/// bool)`, mangled: exported by the binary so that it interposes on the
/// library's (see `src/engine/nesting.cpp`).
const EXTRACT_STRUCTURE: &str =
    "_ZN6duckdb13JSONStructure16ExtractStructureEPN13duckdb_yyjson10yyjson_valERNS_17JSONStructureNodeEb";

/// Makes sure `lib_dir/libduckdb.so` is the pinned official build, fetching
/// it when it is missing or differs.
fn ensure_library(lib_dir: &Path) {
    let lib = lib_dir.join(LIB_NAME);
    let stamp = lib_dir.join(".libduckdb.sha256");
    let recorded = fs::read_to_string(&stamp).unwrap_or_default();
    let size_now = fs::metadata(&lib).map(|m| m.len()).ok();
    if let (Some(size), Some((sum, size_then))) = (size_now, recorded.trim().split_once(' ')) {
        if sum == LIB_SHA256 && size_then.parse() == Ok(size) {
            return;
        }
    }
    let work = lib_dir.join(".fetch");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).expect("create the fetch directory");
    let tgz = match std::env::var_os("DUCKGATE_LIBDUCKDB_TGZ") {
        Some(path) => PathBuf::from(path),
        None => {
            println!("cargo:warning=fetching the official DuckDB 1.5.5 library ({NPM_PACKAGE}) with npm pack");
            let out = Command::new("npm")
                .args(["pack", NPM_PACKAGE, "--silent", "--pack-destination"])
                .arg(&work)
                .output()
                .unwrap_or_else(|e| {
                    panic!("npm is needed to fetch the prebuilt DuckDB ({e}); build from source with `--features bundled`, or set DUCKGATE_LIBDUCKDB_TGZ")
                });
            assert!(
                out.status.success(),
                "npm pack {NPM_PACKAGE} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
            work.join(name.lines().last().unwrap_or_default())
        }
    };
    let mut bytes = Vec::new();
    fs::File::open(&tgz)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .unwrap_or_else(|e| panic!("read {}: {e}", tgz.display()));
    let integrity = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(&bytes))
    );
    assert_eq!(
        integrity,
        NPM_INTEGRITY,
        "{} is not the pinned {NPM_PACKAGE}",
        tgz.display()
    );
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(&work)
        .arg(format!("package/{LIB_NAME}"))
        .status()
        .expect("tar");
    assert!(status.success(), "extracting {LIB_NAME} failed");
    let extracted = work.join("package").join(LIB_NAME);
    let data = fs::read(&extracted).expect("read the extracted library");
    let sum = hex(&Sha256::digest(&data));
    assert_eq!(sum, LIB_SHA256, "{LIB_NAME} differs from the pinned build");
    fs::rename(&extracted, &lib).expect("move the library into place");
    fs::write(&stamp, format!("{sum} {}\n", data.len())).expect("write the stamp");
    let _ = fs::remove_dir_all(&work);
}

/// DuckDB's C++ headers of the same release, from the source tarball that
/// libduckdb-sys ships; returns the source root they are unpacked under.
fn ensure_headers(lib_dir: &Path) -> PathBuf {
    let root = lib_dir.join("duckdb");
    let stamp = lib_dir.join(".headers");
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == SYS_CRATE) {
        return root;
    }
    let tarball = find_sys_tarball().unwrap_or_else(|| {
        panic!(
            "DuckDB's source tarball of {SYS_CRATE} was not found in cargo's registry (CARGO_HOME)"
        )
    });
    let _ = fs::remove_dir_all(&root);
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(lib_dir)
        .args([
            "duckdb/src/include",
            "duckdb/extension/json/include",
            "duckdb/third_party/yyjson/include",
            "duckdb/third_party/fmt/include",
        ])
        .status()
        .expect("tar");
    assert!(status.success(), "extracting DuckDB's headers failed");
    fs::write(&stamp, format!("{SYS_CRATE}\n")).expect("write the stamp");
    root
}

fn find_sys_tarball() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let src = home.join("registry").join("src");
    fs::read_dir(src)
        .ok()?
        .flatten()
        .map(|index| index.path().join(SYS_CRATE).join("duckdb.tar.gz"))
        .find(|p| p.is_file())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
