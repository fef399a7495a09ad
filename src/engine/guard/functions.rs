//! The allow-list: every function and internal view of the pinned DuckDB,
//! each allowed or refused on purpose (`functions.tsv`, drafted by
//! `scripts/classify-functions.py` and reviewed by hand). A name the file does
//! not hold is refused, so a function that a new DuckDB release adds stays
//! unusable until someone classifies it.

use std::collections::HashMap;
use std::sync::OnceLock;

/// What clients may do with a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A scalar, aggregate, window or macro function clients may call.
    Allow,
    /// A table function clients may call (and, where DuckDB also has a
    /// scalar of that name, the scalar).
    Table,
    /// A table function that reads the path in its first argument.
    Reader,
    /// Never callable.
    Refuse,
    /// The scan an attached table binds to (a DuckLake table, a declared
    /// Iceberg or Delta table): admitted in bound plans, never callable by
    /// name.
    Scan,
    /// An internal view clients may read.
    View,
    /// An internal view clients may not read.
    ViewRefuse,
}

/// One classified name.
#[derive(Debug, Clone)]
pub struct Entry {
    /// DuckDB's function types for the name, e.g. `scalar,table`.
    pub kinds: String,
    /// What clients may do with the name.
    pub verdict: Verdict,
    /// Why it is refused (empty for allowed names).
    pub reason: String,
}

/// The allow-list file, as compiled in.
pub const SOURCE: &str = include_str!("functions.tsv");

/// Every classified name (function names as DuckDB lists them; internal views
/// as `schema.view`), lower-case.
pub fn all() -> &'static HashMap<String, Entry> {
    static LIST: OnceLock<HashMap<String, Entry>> = OnceLock::new();
    LIST.get_or_init(|| parse(SOURCE))
}

fn parse(source: &str) -> HashMap<String, Entry> {
    let mut out = HashMap::new();
    for line in source.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut cols = line.split('\t');
        let (Some(name), Some(kinds), Some(verdict)) = (cols.next(), cols.next(), cols.next())
        else {
            panic!("functions.tsv: malformed line {line:?}");
        };
        let verdict = match verdict {
            "allow" => Verdict::Allow,
            "table" => Verdict::Table,
            "reader" => Verdict::Reader,
            "refuse" => Verdict::Refuse,
            "scan" => Verdict::Scan,
            "view" => Verdict::View,
            "view-refuse" => Verdict::ViewRefuse,
            other => panic!("functions.tsv: unknown verdict {other:?} for {name}"),
        };
        out.insert(
            name.to_ascii_lowercase(),
            Entry {
                kinds: kinds.to_string(),
                verdict,
                reason: cols.next().unwrap_or("").to_string(),
            },
        );
    }
    out
}

/// The verdict for a name, `None` when the file does not name it.
pub fn lookup(name: &str) -> Option<&'static Entry> {
    all().get(&name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_and_holds_both_verdicts() {
        let list = all();
        assert!(list.len() > 900, "{}", list.len());
        assert_eq!(lookup("upper").unwrap().verdict, Verdict::Allow);
        assert_eq!(lookup("read_parquet").unwrap().verdict, Verdict::Reader);
        assert_eq!(lookup("duckdb_secrets").unwrap().verdict, Verdict::Refuse);
        assert_eq!(lookup("current_setting").unwrap().verdict, Verdict::Refuse);
        assert_eq!(
            lookup("pg_catalog.pg_settings").unwrap().verdict,
            Verdict::ViewRefuse
        );
        assert!(lookup("no_such_function_anywhere").is_none());
    }
}
