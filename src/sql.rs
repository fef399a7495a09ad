//! SQL text the gateway writes itself: quoting for DuckDB.

/// Quotes a value as an SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}
