//! DuckDB's error texts, read the one way every layer needs.

/// A DuckDB error message as its class and the rest: DuckDB prefixes
/// messages with their class ("Catalog Error: ..."); `Unknown` otherwise.
pub fn split_class(text: &str) -> (String, String) {
    // Some paths (DuckDB's Arrow export through its C API) hand over the
    // error serialized as JSON: {"exception_type": ..., "exception_message": ...}.
    if text.starts_with('{') {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(text) {
            let field = |k: &str| map.get(k).and_then(serde_json::Value::as_str);
            if let (Some(class), Some(message)) =
                (field("exception_type"), field("exception_message"))
            {
                return (class.trim().to_string(), message.trim().to_string());
            }
        }
    }
    if let Some((head, rest)) = text.split_once(" Error: ") {
        if !head.is_empty()
            && head.len() < 40
            && head.chars().all(|c| c.is_ascii_alphabetic() || c == ' ')
        {
            return (head.trim().to_string(), rest.trim().to_string());
        }
    }
    ("Unknown".to_string(), text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes() {
        let (c, m) = split_class("Catalog Error: Table with name nope does not exist!");
        assert_eq!(c, "Catalog");
        assert!(m.starts_with("Table with name"));
        let (c, _) = split_class("Parser Error: syntax error at or near \"SELEC\"");
        assert_eq!(c, "Parser");
        let (c, m) = split_class(
            r#"{"exception_type":"Not implemented","exception_message":"Unsupported Arrow type TYPE"}"#,
        );
        assert_eq!(
            (c.as_str(), m.as_str()),
            ("Not implemented", "Unsupported Arrow type TYPE")
        );
        let (c, _) = split_class("something odd");
        assert_eq!(c, "Unknown");
    }
}
