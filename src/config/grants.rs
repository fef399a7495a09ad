//! Grants as the operator declares them in `[[role]]` tables: patterns
//! naming catalog objects, the columns a table is narrowed to, row filters,
//! masks and a role's caps. Read and checked for form here; what they mean
//! for a statement (the plan's checks, the catalog listings' filters, the
//! policy document) is [`crate::engine::guard::access`]'s.

/// One part of a [`Pattern`]: a name (compared as DuckDB compares
/// identifiers, ASCII case-insensitively) or `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Any,
    Name(String),
}

impl Part {
    fn matches(&self, name: &str) -> bool {
        match self {
            Part::Any => true,
            Part::Name(n) => n.eq_ignore_ascii_case(name),
        }
    }
}

/// `catalog.schema.table`, each part a name or `*`; a part may be quoted
/// (`"my.db"`) to hold a dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub(crate) parts: [Part; 3],
    text: String,
}

impl Pattern {
    /// Reads `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut current = String::new();
        let (mut quoted, mut was_quoted) = (false, false);
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' if quoted && chars.peek() == Some(&'"') => {
                    current.push('"');
                    chars.next();
                }
                '"' => {
                    quoted = !quoted;
                    was_quoted = true;
                }
                '.' if !quoted => {
                    parts.push(Self::part(&current, was_quoted)?);
                    current.clear();
                    was_quoted = false;
                }
                c => current.push(c),
            }
        }
        if quoted {
            return Err(format!("'{text}' has an unclosed quote"));
        }
        parts.push(Self::part(&current, was_quoted)?);
        let parts: [Part; 3] = parts
            .try_into()
            .map_err(|_| format!("'{text}' is not catalog.schema.table (each part a name or *)"))?;
        Ok(Self {
            parts,
            text: text.to_string(),
        })
    }

    fn part(text: &str, quoted: bool) -> Result<Part, String> {
        match (text, quoted) {
            ("", _) => Err("a pattern has an empty part".into()),
            ("*", false) => Ok(Part::Any),
            (name, _) => Ok(Part::Name(name.to_string())),
        }
    }

    /// Whether it names `catalog.schema.name`.
    pub fn matches(&self, catalog: &str, schema: &str, name: &str) -> bool {
        let [c, s, n] = &self.parts;
        c.matches(catalog) && s.matches(schema) && n.matches(name)
    }

    /// Whether it names some schema `catalog.schema` (a table part `*`).
    pub fn covers_schema(&self, catalog: &str, schema: &str) -> bool {
        let [c, s, n] = &self.parts;
        c.matches(catalog) && s.matches(schema) && *n == Part::Any
    }

    /// The pattern as the operator wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// A table narrowed to some of its columns.
#[derive(Debug, Clone)]
pub struct ColumnGrant {
    /// The table (a pattern, usually one exact table).
    pub table: Pattern,
    /// The columns the caller may read; the others are refused.
    pub columns: Vec<String>,
}

/// What one role grants.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// What it may read.
    pub read: Vec<Pattern>,
    /// What it may change (rows of tables; new tables and views where the
    /// pattern's table part is `*`); what it may change it may read too (an
    /// UPDATE's WHERE reads, and a table it created is its own).
    pub write: Vec<Pattern>,
    /// Tables it may read only some columns of.
    pub columns: Vec<ColumnGrant>,
    /// Tables whose rows it reads through a filter.
    pub rows: Vec<RowFilter>,
    /// Tables some of whose columns it reads masked.
    pub masks: Vec<ColumnMasks>,
    /// Caps on what one of its statements may take.
    pub limits: RoleLimits,
    /// Whether its members may read any file or S3 path the gateway's path
    /// guard allows, not only the named sources it grants.
    pub raw_paths: bool,
}

/// A role's caps on one statement, below the gateway's own (`[role.limits]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleLimits {
    /// Rows of one result; past them it fails, as past `DUCKGATE_MAX_ROWS`.
    pub max_rows: Option<u64>,
    /// Encoded bytes of one `/query` answer.
    pub max_result_bytes: Option<u64>,
    /// How long one statement may run.
    pub max_query_timeout_ms: Option<u64>,
    /// Statements the role's members run at once, all of them together
    /// (queries, async statements, Flight SQL); more wait their turn
    /// within the acquire timeout, then are refused (429).
    pub queries_at_once: Option<u64>,
    /// Bytes the spooled results of the role's members' statements (and
    /// their Parquet pages) take, all of them together.
    pub spool_bytes: Option<u64>,
}

/// A role's row filter on a table: operator SQL over the table's row, where
/// `claim('name')` stands for the caller's claim of that name.
#[derive(Debug, Clone)]
pub struct RowFilter {
    /// The table (a pattern).
    pub table: Pattern,
    /// The filter: a boolean expression.
    pub filter: String,
}

/// A role's masks of a table's columns: what is read in their place
/// (operator SQL over the table's row, cast to the column's type).
#[derive(Debug, Clone)]
pub struct ColumnMasks {
    /// The table (a pattern).
    pub table: Pattern,
    /// Column and mask.
    pub masks: Vec<(String, String)>,
}
