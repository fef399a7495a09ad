//! DuckDB's error texts, read the one way every layer needs.

/// A DuckDB error message as its class and the rest: DuckDB prefixes
/// messages with their class ("Catalog Error: ..."); `Unknown` otherwise.
pub fn split_class(text: &str) -> (String, String) {
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
        let (c, _) = split_class("something odd");
        assert_eq!(c, "Unknown");
    }
}
