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

/// libpq's connection-string keywords.
const DSN_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "dbname",
    "password",
    "passfile",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslpassword",
    "application_name",
    "options",
    "service",
    "connect_timeout",
    "target_session_attrs",
];

/// `message` without the connection strings an extension quotes in its
/// errors (the postgres scanner says "Unable to connect to Postgres at
/// dbname=lake host=... user=..."): they name the operator's database and
/// user to every token, and reach `/healthz`.
pub fn scrub_dsn(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut withheld = false;
    for piece in message.split_inclusive(char::is_whitespace) {
        let word = piece
            .trim()
            .trim_start_matches(['"', '\'', '(', '['])
            .to_ascii_lowercase();
        let dsn_part = word
            .split_once('=')
            .is_some_and(|(k, _)| DSN_KEYS.contains(&k))
            || word.starts_with("postgres://")
            || word.starts_with("postgresql://")
            || word.starts_with("ducklake:postgres:");
        if dsn_part {
            if !withheld {
                out.push_str("[connection string withheld] ");
                withheld = true;
            }
        } else {
            withheld = false;
            out.push_str(piece);
        }
    }
    // libpq's own "connection to server at \"host\" (addr), port N failed".
    let marker = "connection to server at ";
    while let Some(start) = out.find(marker) {
        let from = start + marker.len();
        let Some(len) = out[from..].find(" failed") else {
            break;
        };
        out.replace_range(start..from + len, "connection to the server");
    }
    out
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

    #[test]
    fn connection_strings_are_withheld() {
        let m = "Unable to connect to Postgres at \"dbname=lake host=10.0.0.7 port=5433 user=lakeadmin\": connection refused";
        let s = super::scrub_dsn(m);
        for leak in ["dbname", "lakeadmin", "10.0.0.7", "5433"] {
            assert!(!s.contains(leak), "{s}");
        }
        assert!(s.contains("connection refused"), "{s}");
        let s =
            super::scrub_dsn("x: connection to server at \"10.0.0.7\", port 5433 failed: refused");
        assert_eq!(s, "x: connection to the server failed: refused");
        let u = super::scrub_dsn("failed: postgresql://u:pw@db/lake refused");
        assert!(!u.contains("pw@db"), "{u}");
        assert_eq!(super::scrub_dsn("a = b and x=1"), "a = b and x=1");
    }
}
