//! Which files and objects a query may name. Paths reach DuckDB only as
//! literals the guard has read (never computed), and each literal must be an
//! S3 object inside the configured scope or a file inside the declared
//! readable directory. Everything else (other URL schemes, relative paths,
//! `..`, percent-encoding, URL query strings) is refused, so what the guard
//! checks is exactly what httpfs will request.

/// Where queries may read.
#[derive(Debug, Clone, Default)]
pub struct PathRules {
    /// Absolute readable directory, ending in `/`; `None`: no local files.
    pub files_dir: Option<String>,
    /// S3 prefixes (`s3://bucket/` or `s3://bucket/dir/`); empty: any bucket.
    pub s3_scope: Vec<String>,
    /// Whether S3 paths are allowed at all (an S3 secret is configured).
    pub s3: bool,
    /// S3 prefixes inside the scope that no query may read: the S3 spool,
    /// which holds every token's results.
    pub s3_refused: Vec<String>,
    /// Refusals name no server path (the readable directory, the S3 scope,
    /// the spool): set for a caller its roles confine, who is told where
    /// it may read by `GET /catalog`, not by the gateway's layout.
    pub redacted: bool,
}

impl PathRules {
    /// Refuses `path` unless it is one the rules admit, with the reason.
    pub fn check(&self, path: &str) -> Result<(), String> {
        if let Some(c) = path
            .chars()
            .find(|c| c.is_control() || matches!(*c, '\\' | '%' | '?' | '#'))
        {
            return Err(format!(
                "paths may not contain {c:?} (no escapes, encodings or URL query strings)"
            ));
        }
        if let Some(rest) = path.strip_prefix("s3://") {
            return self.check_s3(path, rest);
        }
        if has_scheme(path) {
            return Err("only s3:// URLs and files in the readable directory may be read".into());
        }
        let Some(dir) = &self.files_dir else {
            return Err("local files are not readable through this gateway".into());
        };
        if !path.starts_with('/') {
            return Err(if self.redacted {
                "local paths must be absolute and inside the gateway's readable directory".into()
            } else {
                format!("local paths must be absolute and inside the readable directory {dir}")
            });
        }
        check_segments(path.trim_start_matches('/'))?;
        if !path.starts_with(dir.as_str()) {
            return Err(if self.redacted {
                "only files inside the gateway's readable directory are readable".into()
            } else {
                format!("only files inside {dir} are readable")
            });
        }
        Ok(())
    }

    fn check_s3(&self, path: &str, rest: &str) -> Result<(), String> {
        if !self.s3 {
            return Err("S3 is not configured on this gateway".into());
        }
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && !bucket.contains("..");
        if !bucket_ok {
            return Err(format!("{bucket:?} is not an S3 bucket name"));
        }
        if !key.is_empty() {
            check_segments(key)?;
        }
        // A glob reaches whatever its literal head covers.
        let head = &path[..path.find(['*', '[', '{']).unwrap_or(path.len())];
        let globbed = head.len() < path.len();
        if let Some(p) = self
            .s3_refused
            .iter()
            .find(|p| head.starts_with(p.as_str()) || (globbed && p.starts_with(head)))
        {
            return Err(if self.redacted {
                "the gateway's spooled results are not readable by queries".into()
            } else {
                format!("{p} holds the gateway's spooled results: not readable by queries")
            });
        }
        if !self.s3_scope.is_empty() && !self.s3_scope.iter().any(|p| path.starts_with(p.as_str()))
        {
            return Err(if self.redacted {
                "outside the gateway's S3 scope".into()
            } else {
                format!(
                    "outside the gateway's S3 scope ({})",
                    self.s3_scope.join(", ")
                )
            });
        }
        Ok(())
    }
}

/// `scheme:` at the start, as in `http://`, `file:`, `gcs://`, `md:`.
fn has_scheme(path: &str) -> bool {
    match path.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// No empty, `.` or `..` segments: what is checked is what is opened.
fn check_segments(path: &str) -> Result<(), String> {
    let segments: Vec<&str> = path.split('/').collect();
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        if *s == "." || *s == ".." {
            return Err("paths may not contain `.` or `..` segments".into());
        }
        if s.is_empty() && !last {
            return Err("paths may not contain empty segments (`//`)".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> PathRules {
        PathRules {
            files_dir: Some("/srv/files/".into()),
            s3_scope: vec!["s3://data/".into()],
            s3: true,
            s3_refused: vec!["s3://data/spool/".into()],
            redacted: false,
        }
    }

    #[test]
    fn refuses_the_spool() {
        let r = rules();
        assert!(r.check("s3://data/spool/x/1.arrow").is_err());
        assert!(r.check("s3://data/*/x/1.arrow").is_err());
        assert!(r.check("s3://data/sp*").is_err());
        assert!(r.check("s3://data/spoolish.csv").is_ok());
        assert!(r.check("s3://data/other/*.csv").is_ok());
    }

    #[test]
    fn admits_scoped_s3_and_readable_files() {
        let r = rules();
        assert_eq!(r.check("s3://data/t.parquet"), Ok(()));
        assert_eq!(r.check("s3://data/year=2024/*.parquet"), Ok(()));
        assert_eq!(r.check("/srv/files/a.csv"), Ok(()));
    }

    #[test]
    fn refuses_everything_else() {
        let r = rules();
        for bad in [
            "s3://data/t.parquet?s3_endpoint=127.0.0.1:47001",
            "s3://data/../other/t.parquet",
            "s3://data/%2e%2e/other/t.parquet",
            "s3://data/a/./b",
            "s3://data//b",
            "s3://other/t.parquet",
            "s3://u@127.0.0.1/x",
            "s3://dataX/t.parquet",
            "S3://data/t.parquet",
            "s3a://data/t.parquet",
            "http://127.0.0.1/x",
            "https://example.com/x.csv",
            "file:///etc/passwd",
            "/etc/passwd",
            "/srv/files/../secrets/x",
            "/srv/filesX/a.csv",
            "a.csv",
            "~/x.csv",
            "s3://data/t.parquet#frag",
            "s3://data/a\\b",
            "s3://data/a\nb",
        ] {
            assert!(r.check(bad).is_err(), "{bad} was admitted");
        }
    }

    #[test]
    fn no_s3_without_a_secret() {
        let r = PathRules {
            s3: false,
            ..rules()
        };
        assert!(r.check("s3://data/t.parquet").is_err());
    }

    /// A confined caller's refusals name neither the readable directory,
    /// the S3 scope nor the spool: the same checks, without the layout.
    #[test]
    fn a_confined_callers_refusals_name_no_server_path() {
        let open = rules();
        let redacted = PathRules {
            redacted: true,
            s3_scope: vec!["s3://data/tenant-a/".into(), "s3://data/spool/".into()],
            ..rules()
        };
        for bad in [
            "/etc/passwd",
            "relative.csv",
            "s3://data/spool/x",
            "s3://other/x",
        ] {
            let shown = PathRules {
                s3_scope: redacted.s3_scope.clone(),
                ..open.clone()
            }
            .check(bad)
            .unwrap_err();
            let hidden = redacted.check(bad).unwrap_err();
            for layout in ["/srv/files", "tenant-a", "s3://data/spool"] {
                assert!(!hidden.contains(layout), "{bad}: {hidden}");
            }
            assert!(
                ["/srv/files", "tenant-a", "s3://data/spool"]
                    .iter()
                    .any(|l| shown.contains(l)),
                "the control names the layout for {bad}: {shown}"
            );
        }
    }
}
