//! The paths a DuckLake's metadata stores for its schemas, tables and
//! files, resolved against its data path and checked inside the scope the
//! gateway may read, before the lake is attached.

use crate::config::attach::check_in_scope;

/// A path a DuckLake's metadata records for one of its tables, or for one
/// of that table's data or delete files, with what each part is relative to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredPath {
    /// `schema.table`.
    pub table: String,
    /// The schema's path; `true` when relative to the lake's data path.
    pub schema_path: (String, bool),
    /// The table's path; `true` when relative to the schema's.
    pub table_path: (String, bool),
    /// A file's path; `true` when relative to the table's. `None`: the
    /// table itself.
    pub file: Option<(String, bool)>,
}

/// Joins a relative DuckLake path onto the directory it is relative to.
fn join(base: &str, relative: &str) -> String {
    if base.is_empty() || base.ends_with('/') {
        format!("{base}{relative}")
    } else {
        format!("{base}/{relative}")
    }
}

fn resolve(base: &str, (path, relative): &(String, bool)) -> String {
    if *relative {
        join(base, path)
    } else {
        path.clone()
    }
}

/// The paths of a lake's tables, and of those of its files that could lie
/// outside their table's directory: absolute ones, and relative ones with
/// a `..` segment, a scheme or characters [`check_in_scope`] refuses. A
/// plain relative file name stays inside its table's directory, which is
/// checked itself, so a lake of a million files sends back few rows.
/// Every version of every table counts, not only the current snapshot's:
/// time travel reads the older ones.
pub(super) fn stored_paths(
    conn: &crate::engine::ffi::Connection,
    metadata: &str,
) -> duckdb::Result<Vec<StoredPath>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT DISTINCT s.schema_name, t.table_name, \
             coalesce(s.path, ''), coalesce(s.path_is_relative, true), \
             coalesce(t.path, ''), coalesce(t.path_is_relative, true), \
             f.path, coalesce(f.path_is_relative, true) \
         FROM {metadata}.ducklake_table t \
         JOIN {metadata}.ducklake_schema s ON s.schema_id = t.schema_id \
         LEFT JOIN (SELECT table_id, path, path_is_relative FROM {metadata}.ducklake_data_file \
                    UNION ALL \
                    SELECT table_id, path, path_is_relative FROM {metadata}.ducklake_delete_file) f \
           ON f.table_id = t.table_id \
          AND (NOT coalesce(f.path_is_relative, true) \
               OR regexp_matches(f.path, '(^|/)\\.\\.?(/|$)|[?#\\\\]|^[A-Za-z0-9+.-]+:'))"
    ))?;
    let rows = stmt.query_map([], |r| {
        let file: Option<String> = r.get(6)?;
        Ok(StoredPath {
            table: format!("{}.{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?),
            schema_path: (r.get(2)?, r.get(3)?),
            table_path: (r.get(4)?, r.get(5)?),
            file: match file {
                Some(f) => Some((f, r.get(7)?)),
                None => None,
            },
        })
    })?;
    rows.collect()
}

/// Whether the gateway may read `path`: on S3 inside a secret's scope, or
/// on local disk inside a directory (or file) a declared catalog names.
fn within_reach(path: &str, s3_prefixes: &[String], local_dirs: &[String]) -> Result<(), String> {
    if path.starts_with("s3://") {
        return check_in_scope(path, s3_prefixes);
    }
    let local = path.starts_with('/')
        && !path.split('/').any(|seg| seg == ".." || seg == ".")
        && local_dirs
            .iter()
            .any(|d| path == d || (d.ends_with('/') && path.starts_with(d.as_str())));
    if local {
        Ok(())
    } else if path.starts_with('/') {
        Err(format!(
            "{path} lies outside every local directory of a declared catalog"
        ))
    } else {
        Err(format!(
            "{path} is neither on S3 inside a configured secret's scope ({}) nor an absolute \
             local path",
            s3_prefixes.join(", ")
        ))
    }
}

/// Checks every path of `paths`, resolved against the lake's `data_path`:
/// the error names each table and file outside the gateway's reach (the
/// first five, and how many more).
pub(super) fn check_stored_paths(
    data_path: &str,
    paths: &[StoredPath],
    s3_prefixes: &[String],
    local_dirs: &[String],
) -> Result<(), String> {
    let mut refused: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let table_dir = resolve(&resolve(data_path, &p.schema_path), &p.table_path);
        let (what, path) = match &p.file {
            None => ("its path", table_dir),
            Some(file) => ("file", resolve(&table_dir, file)),
        };
        if !seen.insert((p.table.clone(), path.clone())) {
            continue;
        }
        if let Err(why) = within_reach(&path, s3_prefixes, local_dirs) {
            refused.push(format!("table {}: {what} {why}", p.table));
        }
    }
    match refused.len() {
        0 => Ok(()),
        n => {
            let mut message = refused[..n.min(5)].join("; ");
            if n > 5 {
                message.push_str(&format!("; and {} more", n - 5));
            }
            Err(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(schema: (&str, bool), table: (&str, bool), file: Option<(&str, bool)>) -> StoredPath {
        StoredPath {
            table: "main.t".into(),
            schema_path: (schema.0.into(), schema.1),
            table_path: (table.0.into(), table.1),
            file: file.map(|(f, r)| (f.into(), r)),
        }
    }

    /// [`check_stored_paths`] of a lake at `s3://data/lake/` that may read
    /// that prefix and `/srv/lake/`.
    fn ok(p: &[StoredPath]) -> Result<(), String> {
        let scope = vec!["s3://data/lake/".to_string()];
        let local = vec!["/srv/lake/".to_string()];
        check_stored_paths("s3://data/lake/", p, &scope, &local)
    }

    #[test]
    fn stored_paths_resolve_against_the_data_path_and_stay_in_scope() {
        assert_eq!(ok(&[table(("main/", true), ("t/", true), None)]), Ok(()));
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("f.parquet", true))
            )]),
            Ok(())
        );
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("s3://data/lake/x/f.parquet", false))
            )]),
            Ok(())
        );
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("/srv/lake/f.parquet", false))
            )]),
            Ok(())
        );
    }

    #[test]
    fn a_stored_path_out_of_scope_is_named_with_its_table() {
        for (bad, names) in [
            (
                table(("s3://other/", false), ("t/", true), None),
                "s3://other/t/",
            ),
            (
                table(("main/", true), ("s3://data/elsewhere/", false), None),
                "s3://data/elsewhere/",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("s3://other/f.parquet", false)),
                ),
                "s3://other/f.parquet",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("../../../x/f.parquet", true)),
                ),
                "s3://data/lake/main/t/../../../x/f.parquet",
            ),
            (
                table(("main/", true), ("t/", true), Some(("/etc/passwd", false))),
                "/etc/passwd",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("gs://b/f.parquet", false)),
                ),
                "gs://b/f.parquet",
            ),
        ] {
            let e = ok(std::slice::from_ref(&bad)).unwrap_err();
            assert!(
                e.contains("table main.t") && e.contains(names),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn many_stored_paths_out_of_scope_are_named_five_and_counted() {
        let many: Vec<StoredPath> = (0..8)
            .map(|i| {
                let f = format!("s3://other/{i}.parquet");
                table(("main/", true), ("t/", true), Some((f.as_str(), false)))
            })
            .collect();
        let e = ok(&many).unwrap_err();
        assert!(e.contains("and 3 more") && !e.contains("5.parquet"), "{e}");
    }
}
