//! Operator-declared catalogs: `[[attach]]` tables of the TOML file
//! (`--config`), each a lake the gateway attaches once at start through the
//! control connection, before the lockdown.

use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Deserialize;

use super::ConfigError;

/// What kind of catalog an `[[attach]]` table declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    /// A DuckLake: metadata in a database (`ducklake:postgres:...`), data
    /// files under `data_path`.
    DuckLake,
    /// One Iceberg table, `path` its root.
    Iceberg,
    /// One Delta table, `path` its root.
    Delta,
    /// A DuckDB database file.
    DuckDb,
    /// The operator's named sources (`[[source]]`), one view each.
    Sources,
}

impl CatalogKind {
    /// The name used in the configuration and in `GET /catalog`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogKind::DuckLake => "ducklake",
            CatalogKind::Iceberg => "iceberg",
            CatalogKind::Delta => "delta",
            CatalogKind::DuckDb => "duckdb",
            CatalogKind::Sources => "sources",
        }
    }

    /// The extensions that must load (from the extension directory) before
    /// a catalog of this kind can attach, in load order.
    pub fn extensions(self, spec: &AttachSpec) -> Vec<&'static str> {
        match self {
            CatalogKind::DuckLake => {
                let mut out = Vec::new();
                if spec.path.starts_with("ducklake:postgres:") {
                    out.push("postgres_scanner");
                }
                out.push("ducklake");
                out
            }
            CatalogKind::Iceberg => vec!["avro", "iceberg"],
            CatalogKind::Delta => vec!["delta"],
            CatalogKind::DuckDb | CatalogKind::Sources => vec![],
        }
    }
}

/// One declared catalog.
#[derive(Clone)]
pub struct AttachSpec {
    /// The name queries use: `lake.main.events`.
    pub name: String,
    /// What it is.
    pub kind: CatalogKind,
    /// DuckLake: the metadata connection (`ducklake:postgres:dbname=...`),
    /// never holding a password; Iceberg, Delta: the table root; DuckDB: the
    /// database file.
    pub path: String,
    /// DuckLake only: where its data files live.
    pub data_path: Option<String>,
    /// The file the catalog password is read from (DuckLake over
    /// PostgreSQL). The path may be logged; its content never is.
    pub password_file: Option<PathBuf>,
    /// Whether clients may only read (the default).
    pub read_only: bool,
    /// Sources only: the named sources.
    pub sources: Vec<super::sources::SourceSpec>,
}

impl std::fmt::Debug for AttachSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachSpec")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("data_path", &self.data_path)
            .field("password_file", &self.password_file)
            .field("read_only", &self.read_only)
            .field("sources", &self.sources)
            .finish()
    }
}

impl AttachSpec {
    /// Reads the catalog password from `password_file` (trailing newline
    /// dropped). The error names the file, never its content.
    pub fn password(&self) -> Result<Option<SecretString>, ConfigError> {
        let Some(file) = &self.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            ConfigError::new(
                "DUCKGATE_CONFIG",
                format!(
                    "catalog `{}`: `password_file` {}: cannot read: {}",
                    self.name,
                    file.display(),
                    e.kind()
                ),
            )
        })?;
        Ok(Some(SecretString::from(
            text.trim_end_matches(['\n', '\r']).to_string(),
        )))
    }

    /// Every S3 location the declaration names (the catalog's own stored
    /// data path is checked again once attached).
    pub fn s3_locations(&self) -> Vec<&str> {
        if self.kind == CatalogKind::Sources {
            return self.sources.iter().flat_map(|s| s.s3_paths()).collect();
        }
        let path = self.path.strip_prefix("ducklake:").unwrap_or(&self.path);
        [Some(path), self.data_path.as_deref()]
            .into_iter()
            .flatten()
            .filter(|p| p.starts_with("s3://"))
            .collect()
    }

    /// Local directories the catalog reads after the lockdown (data files
    /// of a DuckLake, the directory of a DuckDB file), which DuckDB's
    /// `allowed_directories` must name.
    pub fn local_dirs(&self) -> Vec<String> {
        if self.kind == CatalogKind::Sources {
            return self.sources.iter().flat_map(|s| s.local_dirs()).collect();
        }
        let mut out = Vec::new();
        let path = self.path.strip_prefix("ducklake:").unwrap_or(&self.path);
        for p in [Some(path), self.data_path.as_deref()]
            .into_iter()
            .flatten()
        {
            if !p.starts_with('/') {
                continue;
            }
            let dir = if p.ends_with('/') {
                p.to_string()
            } else {
                match self.kind {
                    CatalogKind::DuckLake if Some(p) == self.data_path.as_deref() => {
                        format!("{p}/")
                    }
                    // A file: its own path is enough.
                    CatalogKind::DuckLake | CatalogKind::DuckDb => p.to_string(),
                    CatalogKind::Iceberg | CatalogKind::Delta | CatalogKind::Sources => {
                        format!("{p}/")
                    }
                }
            };
            out.push(dir);
        }
        out
    }
}

impl super::Config {
    /// The declared catalogs (`[[attach]]` in `--config`), checked against
    /// the configured secrets' scopes.
    pub fn catalogs(&self) -> Result<Vec<AttachSpec>, ConfigError> {
        let Some(path) = &self.s3.config_file else {
            return Ok(Vec::new());
        };
        let file = super::ConfigFile::read(path)?;
        catalogs_in(&file, &self.s3.secrets_in(Some(&file))?)
    }
}

/// The `[[attach]]` tables of `file`, checked against the S3 prefixes
/// `secrets` serve.
pub fn catalogs_in(
    file: &super::ConfigFile,
    secrets: &[super::s3::SecretSpec],
) -> Result<Vec<AttachSpec>, ConfigError> {
    let mut prefixes = Vec::new();
    for s in secrets {
        if s.scope.is_empty() {
            prefixes.push("s3://".to_string());
        } else {
            prefixes.extend(s.scope.iter().cloned());
        }
    }
    parse(file, &prefixes)
}

#[derive(Debug, Deserialize)]
struct FileConfig {
    #[serde(default, rename = "attach")]
    attach: Vec<FileAttach>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAttach {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    data_path: Option<String>,
    #[serde(default)]
    password_file: Option<PathBuf>,
    #[serde(default = "yes")]
    read_only: bool,
}

fn yes() -> bool {
    true
}

/// Whether `name` can name a catalog or a source unquoted: letters, digits
/// and `_`, not starting with a digit, at most 64.
pub(super) fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// Names a declared catalog may not take: DuckDB's own databases, and the
/// prefix DuckLake gives the metadata database it attaches beside a lake.
fn reserved(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    matches!(l.as_str(), "memory" | "system" | "temp" | "main") || l.starts_with("__")
}

/// Reads the `[[attach]]` tables of `path` and checks each against the S3
/// prefixes the configured secrets serve (`s3://` alone: any bucket).
pub fn load(path: &Path, s3_prefixes: &[String]) -> Result<Vec<AttachSpec>, ConfigError> {
    parse(&super::ConfigFile::read(path)?, s3_prefixes)
}

fn parse(
    config: &super::ConfigFile,
    s3_prefixes: &[String],
) -> Result<Vec<AttachSpec>, ConfigError> {
    let file: FileConfig = config.parse()?;
    let mut out: Vec<AttachSpec> = Vec::new();
    for f in file.attach {
        let spec = attach_spec(f, &out, s3_prefixes)?;
        out.push(spec);
    }
    if let Some(sources) = sources_catalog(config, s3_prefixes, &out)? {
        out.push(sources);
    }
    Ok(out)
}

/// One `[[attach]]` table checked (its name new and usable, its type
/// known, its fields those of its type, its S3 locations in a secret's
/// scope, its password readable) and made a spec.
fn attach_spec(
    f: FileAttach,
    declared: &[AttachSpec],
    s3_prefixes: &[String],
) -> Result<AttachSpec, ConfigError> {
    let err = |m: String| ConfigError::new("DUCKGATE_CONFIG", format!("catalog `{}`: {m}", f.name));
    if !plain_name(&f.name) || reserved(&f.name) {
        return Err(err(
            "not a usable catalog name (letters, digits and _, not starting with a digit \
             or __, not memory, system, temp or main)"
                .into(),
        ));
    }
    if declared
        .iter()
        .any(|o| o.name.eq_ignore_ascii_case(&f.name))
    {
        return Err(err("declared twice".into()));
    }
    let kind = match f.kind.as_str() {
        "ducklake" => CatalogKind::DuckLake,
        "iceberg" => CatalogKind::Iceberg,
        "delta" => CatalogKind::Delta,
        "duckdb" => CatalogKind::DuckDb,
        other => {
            return Err(err(format!(
                "unknown type `{other}` (ducklake, iceberg, delta, duckdb)"
            )))
        }
    };
    check_fields(&f, kind).map_err(err)?;
    let spec = AttachSpec {
        name: f.name.clone(),
        kind,
        path: f.path,
        data_path: f.data_path,
        password_file: f.password_file,
        read_only: f.read_only,
        sources: Vec::new(),
    };
    for location in spec.s3_locations() {
        check_in_scope(location, s3_prefixes).map_err(err)?;
    }
    spec.password()?;
    Ok(spec)
}

/// The fields an `[[attach]]` table of `kind` may and must have.
fn check_fields(f: &FileAttach, kind: CatalogKind) -> Result<(), String> {
    if kind == CatalogKind::DuckLake {
        if !f.path.starts_with("ducklake:") {
            return Err(
                "a DuckLake `path` starts with `ducklake:` (e.g. ducklake:postgres:dbname=lake host=...)".into(),
            );
        }
        // The password goes through a secret, so that no SQL text, error
        // message or duckdb_databases() row ever holds it.
        if f.path.to_ascii_lowercase().contains("password") {
            return Err("`path` may not hold a password: put it in `password_file`".into());
        }
        if f.data_path.is_none() {
            return Err("`data_path` is required for a DuckLake".into());
        }
    } else {
        if f.data_path.is_some() {
            return Err("`data_path` applies to type ducklake only".into());
        }
        if f.password_file.is_some() {
            return Err("`password_file` applies to type ducklake only".into());
        }
    }
    if matches!(kind, CatalogKind::Iceberg | CatalogKind::Delta) && !f.read_only {
        return Err("Iceberg and Delta tables are read-only through the gateway".into());
    }
    if f.password_file.is_some() && !f.path.starts_with("ducklake:postgres:") {
        return Err("`password_file` applies to a DuckLake whose metadata is in PostgreSQL".into());
    }
    Ok(())
}

/// The catalog of the named sources (`[[source]]`), when there are any and
/// no `[[attach]]` table took its name.
fn sources_catalog(
    config: &super::ConfigFile,
    s3_prefixes: &[String],
    declared: &[AttachSpec],
) -> Result<Option<AttachSpec>, ConfigError> {
    let sources = super::sources::sources_in(config, s3_prefixes)?;
    if sources.is_empty() {
        return Ok(None);
    }
    let name = super::sources::CATALOG;
    if declared.iter().any(|o| o.name.eq_ignore_ascii_case(name)) {
        return Err(ConfigError::new(
            "DUCKGATE_CONFIG",
            format!("catalog `{name}`: the name is the named sources' ([[source]])"),
        ));
    }
    Ok(Some(AttachSpec {
        name: name.to_string(),
        kind: CatalogKind::Sources,
        path: String::new(),
        data_path: None,
        password_file: None,
        read_only: true,
        sources,
    }))
}

/// Refuses an S3 location that no configured secret's scope holds: the
/// gateway would have no credentials for it, and clients could not be kept
/// out of what lies beside it.
pub fn check_in_scope(location: &str, s3_prefixes: &[String]) -> Result<(), String> {
    let dir = if location.ends_with('/') {
        location.to_string()
    } else {
        format!("{location}/")
    };
    let inside = s3_prefixes.iter().any(|p| {
        let p = if p.ends_with('/') || p == "s3://" {
            p.clone()
        } else {
            format!("{p}/")
        };
        dir.starts_with(&p)
    });
    let clean = !dir["s3://".len()..]
        .split('/')
        .any(|seg| seg == ".." || seg == ".")
        && !dir.contains(['%', '?', '#', '\\']);
    if inside && clean {
        Ok(())
    } else if s3_prefixes.is_empty() {
        Err(format!(
            "{location} is on S3, but no S3 secret is configured (a [[secret]] whose scope holds it)"
        ))
    } else {
        Err(format!(
            "{location} lies outside every configured secret's scope ({})",
            s3_prefixes.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("c.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_ducklake_inside_the_scope_loads_with_read_only_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "hunter2\n").unwrap();
        let path = write(
            dir.path(),
            &format!(
                "[[attach]]\nname = \"lake\"\ntype = \"ducklake\"\n\
                 path = \"ducklake:postgres:dbname=lake host=127.0.0.1\"\n\
                 data_path = \"s3://data/lake/\"\npassword_file = \"{}\"\n",
                pw.display()
            ),
        );
        let specs = load(&path, &["s3://data/".into()]).unwrap();
        assert_eq!(specs.len(), 1);
        assert!(specs[0].read_only);
        assert_eq!(specs[0].kind, CatalogKind::DuckLake);
        assert_eq!(
            secrecy::ExposeSecret::expose_secret(&specs[0].password().unwrap().unwrap()),
            "hunter2"
        );
        assert!(!format!("{:?}", specs[0]).contains("hunter2"));
    }

    #[test]
    fn locations_outside_every_scope_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "[[attach]]\nname = \"lake\"\ntype = \"ducklake\"\n\
             path = \"ducklake:postgres:dbname=lake\"\ndata_path = \"s3://other/lake/\"\n",
        );
        let e = load(&path, &["s3://data/".into()]).unwrap_err().to_string();
        assert!(
            e.contains("s3://other/lake/") && e.contains("`lake`"),
            "{e}"
        );
        for bad in [
            "s3://data/../other/",
            "s3://database/",
            "s3://data/x?s3_endpoint=evil",
        ] {
            assert!(
                check_in_scope(bad, &["s3://data/".into()]).is_err(),
                "{bad}"
            );
        }
        assert!(check_in_scope("s3://data/lake", &["s3://data".into()]).is_ok());
        assert!(check_in_scope("s3://any/lake", &["s3://".into()]).is_ok());
        assert!(check_in_scope("s3://any/lake", &[]).is_err());
    }

    #[test]
    fn bad_declarations_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (body, want) in [
            ("name = \"system\"\ntype = \"duckdb\"\npath = \"/x.db\"", "usable catalog name"),
            ("name = \"__ducklake_metadata_x\"\ntype = \"duckdb\"\npath = \"/x.db\"", "usable catalog name"),
            ("name = \"l\"\ntype = \"hudi\"\npath = \"/x\"", "unknown type"),
            ("name = \"l\"\ntype = \"ducklake\"\npath = \"postgres:dbname=x\"\ndata_path = \"/d/\"", "ducklake:"),
            ("name = \"l\"\ntype = \"ducklake\"\npath = \"ducklake:postgres:dbname=x password=p\"\ndata_path = \"/d/\"", "password_file"),
            ("name = \"l\"\ntype = \"ducklake\"\npath = \"ducklake:postgres:dbname=x\"", "data_path"),
            ("name = \"l\"\ntype = \"delta\"\npath = \"/t\"\ndata_path = \"/d/\"", "ducklake only"),
            ("name = \"l\"\ntype = \"delta\"\npath = \"/t\"\nwhat = 1", "unknown field"),
            ("name = \"l\"\ntype = \"iceberg\"\npath = \"/t\"\nread_only = false", "read-only"),
        ] {
            let path = write(dir.path(), &format!("[[attach]]\n{body}\n"));
            let e = load(&path, &[]).unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
    }
}
