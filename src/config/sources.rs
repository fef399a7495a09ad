//! Named sources: `[[source]]` tables of the TOML file. The operator names
//! files, globs and S3 prefixes with their reader options; the gateway
//! makes each a view `sources.main.<name>` (one read-only catalog,
//! `sources`, listed by `GET /catalog` like any other), so clients query
//! them by name and neither their SQL nor a shared link carries a server
//! path. Roles grant them like tables (`read = ["sources.main.events"]`):
//! a confined caller's plan may read a file or S3 path only where a source
//! it is granted names exactly that path
//! ([`crate::engine::guard::access`]).
//!
//! ```toml
//! [[source]]
//! name = "events"
//! paths = ["s3://bucket/events/*/*.parquet"]
//! hive_partitioning = true
//! [source.options]
//! union_by_name = true
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use crate::sql::sql_string;

/// The catalog the sources' views live in.
pub const CATALOG: &str = "sources";

/// How a source's files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// `read_parquet`.
    Parquet,
    /// `read_csv`.
    Csv,
    /// `read_json`.
    Json,
}

impl SourceFormat {
    /// DuckDB's reader of this format.
    pub fn reader(self) -> &'static str {
        match self {
            SourceFormat::Parquet => "read_parquet",
            SourceFormat::Csv => "read_csv",
            SourceFormat::Json => "read_json",
        }
    }

    /// The format a path's extension names, if it names one.
    fn of_path(path: &str) -> Option<Self> {
        let p = path.to_ascii_lowercase();
        let p = p
            .strip_suffix(".gz")
            .or_else(|| p.strip_suffix(".zst"))
            .unwrap_or(&p);
        if p.ends_with(".parquet") {
            Some(SourceFormat::Parquet)
        } else if p.ends_with(".csv") || p.ends_with(".tsv") {
            Some(SourceFormat::Csv)
        } else if p.ends_with(".json") || p.ends_with(".ndjson") || p.ends_with(".jsonl") {
            Some(SourceFormat::Json)
        } else {
            None
        }
    }
}

/// One named source.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSpec {
    /// The name clients query (`sources.<name>`).
    pub name: String,
    /// Its files: paths, globs, S3 URLs, as DuckDB's reader takes them.
    pub paths: Vec<String>,
    /// How they are read.
    pub format: SourceFormat,
    /// Whether `key=value` directories become columns.
    pub hive_partitioning: bool,
    /// The reader's other named parameters, each value a SQL literal.
    pub options: Vec<(String, String)>,
}

impl SourceSpec {
    /// The view's query.
    pub fn select(&self) -> String {
        let paths: Vec<String> = self.paths.iter().map(|p| sql_string(p)).collect();
        let mut args = vec![format!("[{}]", paths.join(", "))];
        if self.hive_partitioning {
            args.push("hive_partitioning = true".into());
        }
        args.extend(self.options.iter().map(|(k, v)| format!("{k} = {v}")));
        format!(
            "SELECT * FROM {}({})",
            self.format.reader(),
            args.join(", ")
        )
    }

    /// Its S3 locations.
    pub fn s3_paths(&self) -> impl Iterator<Item = &str> {
        self.paths
            .iter()
            .map(String::as_str)
            .filter(|p| p.starts_with("s3://"))
    }

    /// The local directories its files are in (up to the first glob
    /// character), which DuckDB's `allowed_directories` must name.
    pub fn local_dirs(&self) -> Vec<String> {
        self.paths
            .iter()
            .filter(|p| p.starts_with('/'))
            .map(|p| {
                let fixed = p.split(['*', '?', '[', '{']).next().unwrap_or(p);
                match fixed.rfind('/') {
                    Some(i) => fixed[..=i].to_string(),
                    None => "/".to_string(),
                }
            })
            .collect()
    }
}

#[derive(Debug, Deserialize)]
struct FileConfig {
    #[serde(default, rename = "source")]
    sources: Vec<FileSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSource {
    name: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    hive_partitioning: bool,
    #[serde(default)]
    options: BTreeMap<String, toml::Value>,
}

/// Reader options a source may not set: they would read outside its
/// paths or change what the gateway's guard relies on.
const REFUSED_OPTIONS: &[&str] = &["filename", "files_to_sniff"];

/// The `[[source]]` tables of `file`, each S3 path checked against the
/// prefixes the secrets serve.
pub fn sources_in(
    file: &super::ConfigFile,
    s3_prefixes: &[String],
) -> Result<Vec<SourceSpec>, ConfigError> {
    let parsed: FileConfig = file.parse()?;
    let mut out: Vec<SourceSpec> = Vec::new();
    for f in parsed.sources {
        let err =
            |m: String| ConfigError::new("DUCKGATE_CONFIG", format!("source `{}`: {m}", f.name));
        if !super::attach::plain_name(&f.name) {
            return Err(err(
                "not a usable name (letters, digits and _, not starting with a digit)".into(),
            ));
        }
        if out.iter().any(|o| o.name.eq_ignore_ascii_case(&f.name)) {
            return Err(err("declared twice".into()));
        }
        let mut paths = f.paths;
        paths.extend(f.path);
        if paths.is_empty() {
            return Err(err("`path` or `paths` names its files".into()));
        }
        for p in &paths {
            if p.starts_with("s3://") {
                super::attach::check_in_scope(p, s3_prefixes).map_err(err)?;
            } else if !p.starts_with('/') || p.split('/').any(|seg| seg == "..") {
                return Err(err(format!(
                    "`{p}`: a path is absolute (or an s3:// URL) and holds no `..`"
                )));
            }
        }
        let format = match f.format.as_deref() {
            Some("parquet") => SourceFormat::Parquet,
            Some("csv") => SourceFormat::Csv,
            Some("json") => SourceFormat::Json,
            Some(other) => {
                return Err(err(format!(
                    "unknown format `{other}` (parquet, csv, json)"
                )))
            }
            None => SourceFormat::of_path(&paths[0]).ok_or_else(|| {
                err("`format` (parquet, csv, json): the path's extension names none".into())
            })?,
        };
        let mut options = Vec::new();
        for (key, value) in f.options {
            let plain = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !plain || REFUSED_OPTIONS.contains(&key.as_str()) || key == "hive_partitioning" {
                return Err(err(format!("option `{key}` is not one a source may set")));
            }
            let literal = match value {
                toml::Value::String(s) => sql_string(&s),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(x) if x.is_finite() => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => return Err(err(format!("option `{key}`: a string, number or boolean"))),
            };
            options.push((key, literal));
        }
        out.push(SourceSpec {
            name: f.name,
            paths,
            format,
            hive_partitioning: f.hive_partitioning,
            options,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_a_reader_over_its_paths() {
        let s = SourceSpec {
            name: "events".into(),
            paths: vec!["/data/a'b/*.parquet".into()],
            format: SourceFormat::Parquet,
            hive_partitioning: true,
            options: vec![("union_by_name".into(), "true".into())],
        };
        assert_eq!(
            s.select(),
            "SELECT * FROM read_parquet(['/data/a''b/*.parquet'], hive_partitioning = true, \
             union_by_name = true)"
        );
        assert_eq!(s.local_dirs(), ["/data/a'b/"]);
        assert_eq!(
            SourceFormat::of_path("s3://b/x.csv.gz"),
            Some(SourceFormat::Csv)
        );
    }
}
