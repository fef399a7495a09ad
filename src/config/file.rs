//! The TOML file named by `DUCKGATE_CONFIG` and the error that names a setting.

use std::path::PathBuf;

/// A configuration that cannot run: the message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct ConfigError {
    /// The setting at fault, by its environment variable.
    pub setting: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error about `setting`.
    pub fn new(setting: &'static str, message: impl Into<String>) -> Self {
        Self {
            setting,
            message: message.into(),
        }
    }
}

/// The TOML file named by `DUCKGATE_CONFIG`, read once.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    text: String,
}

impl ConfigFile {
    /// Reads `path`; the error names it.
    pub fn read(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                "DUCKGATE_CONFIG",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            text,
        })
    }

    /// The file as `T` (each part of the configuration reads its tables).
    /// An error names the file, then the line and column where the parser
    /// or the table's type stopped (from the toml crate's span), never the
    /// line's text, which may hold a value.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(&self.text).map_err(|e| {
            let at = e
                .span()
                .map(|span| {
                    let (line, column) = line_and_column(&self.text, span.start);
                    format!(", line {line}, column {column}")
                })
                .unwrap_or_default();
            ConfigError::new(
                "DUCKGATE_CONFIG",
                format!("{}{at}: {}", self.path.display(), e.message()),
            )
        })
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_toml_file_is_named_with_its_line_and_column() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Source {
            name: String,
            paths: Vec<String>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct File {
            source: Vec<Source>,
        }
        let file = |text: &str| ConfigFile {
            path: PathBuf::from("/etc/duckgate.toml"),
            text: text.to_string(),
        };
        // A value of the wrong type, on line 3 after a multi-byte name.
        let e = file("[[source]]\nname = \"événements\"\npaths = 5\n")
            .parse::<File>()
            .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_CONFIG");
        assert!(
            e.message
                .starts_with("/etc/duckgate.toml, line 3, column 9: "),
            "{e}"
        );
        // A syntax error: columns count characters, not bytes.
        let e = file("[[source]]\nname = \"é\" x\n")
            .parse::<File>()
            .unwrap_err();
        assert!(
            e.message
                .starts_with("/etc/duckgate.toml, line 2, column 12: "),
            "{e}"
        );
        assert_eq!(line_and_column("a\nbc", 4), (2, 3));
        assert_eq!(line_and_column("", 0), (1, 1));
    }
}
