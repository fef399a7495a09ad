//! The client examples of `examples/clients/`, each run against the real
//! binary (with a token) and its frame compared with DuckDB in-process on
//! the same query: what a user copies is what is tested.

use crate::common;

use crate::common::Gateway;

const TOKEN: &str = "analyst:clients-token-6e1b";
const SECRET: &str = "clients-token-6e1b";

/// Imports each example, calls its `read()`, and compares the result with
/// `duckdb.sql(SQL)` in the same process (values as pandas frames; DuckDB's
/// dtypes where the format carries them, the reader's own where it parses
/// text).
const DRIVER: &str = r#"
import importlib, sys
import duckdb, pandas as pd
sys.path.insert(0, sys.argv[1])
import common
ref = duckdb.sql(common.SQL).df()

def same(name, got, text):
    if not isinstance(got, pd.DataFrame):
        got = got.to_pandas()
    assert list(got.columns) == list(ref.columns), (name, list(got.columns))
    assert len(got) == len(ref), (name, len(got), len(ref))
    want = ref.copy()
    if text:  # CSV/JSON text: compare as the reader parsed it
        got = got.astype(str)
        want = want.astype(str)
        for c in want.columns:
            got[c] = got[c].str.replace(r"\.0$", "", regex=True).replace({"nan": "None", "NaN": "None", "<NA>": "None", "null": "None", "NaT": "None"})
            want[c] = want[c].str.replace(r"\.0$", "", regex=True).replace({"nan": "None", "NaN": "None", "<NA>": "None", "NaT": "None"})
            got[c] = got[c].str.replace(" 00:00:00", "", regex=False)
            want[c] = want[c].str.replace(" 00:00:00", "", regex=False)
    else:
        got["d"] = pd.to_datetime(got["d"]); want["d"] = pd.to_datetime(want["d"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)
    print("same", name, len(got))

cases = [
    ("requests_json", True),
    ("pyarrow_stream", False),
    ("pandas_csv", True),
    ("pandas_parquet", False),
    ("duckdb_http", False),
]
try:
    import polars  # noqa: F401
    cases.append(("polars_signed", True))
    cases.append(("polars_arrow", False))
except ImportError:
    print("polars not installed: polars_signed not run")
for name, text in cases:
    same(name, importlib.import_module(name).read(), text)
"#;

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn every_client_example_reads_what_duckdb_answers() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .start();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clients");
    let out = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(DRIVER)
        .arg(&dir)
        .env("DUCKGATE_URL", &g.base)
        .env("DUCKGATE_TOKEN", SECRET)
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "requests_json",
        "pyarrow_stream",
        "pandas_csv",
        "pandas_parquet",
        "duckdb_http",
        "polars_signed",
        "polars_arrow",
    ] {
        assert!(stdout.contains(&format!("same {name} 50000")), "{stdout}");
    }
    // curl --compressed: the whole CSV, equal to the uncompressed answer.
    let curl = std::process::Command::new("sh")
        .arg(dir.join("curl.sh"))
        .env("DUCKGATE_URL", &g.base)
        .env("DUCKGATE_TOKEN", SECRET)
        .env(
            "DUCKGATE_SQL",
            "SELECT i, 'x' || i AS s FROM range(100000) t(i)",
        )
        .output()
        .expect("curl");
    assert!(
        curl.status.success(),
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );
    let want = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg("import duckdb,sys,tempfile,os\nd=tempfile.mkdtemp();p=os.path.join(d,'r.csv')\nduckdb.sql(\"COPY (SELECT i, 'x' || i AS s FROM range(100000) t(i)) TO '\"+p+\"' (FORMAT csv, HEADER)\")\nsys.stdout.buffer.write(open(p,'rb').read())")
        .output()
        .unwrap();
    assert_eq!(curl.stdout, want.stdout, "curl's CSV differs from DuckDB's");
    eprintln!("{stdout}");
}
