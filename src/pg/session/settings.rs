//! The settings the door keeps for a session: their names, defaults and
//! checks, and those a client is told at startup.

/// A setting the door keeps.
pub struct Setting {
    /// Its name, as `SHOW` and `ParameterStatus` spell it.
    pub name: &'static str,
    /// Its value until a client sets one.
    pub default: &'static str,
    /// Whether a client may not set it.
    pub read_only: bool,
    /// Checks a value: the value kept, or why not.
    pub check: fn(&str) -> Result<String, &'static str>,
}

fn any(v: &str) -> Result<String, &'static str> {
    Ok(v.to_string())
}

fn utf8(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_uppercase().replace(['-', '_'], "").as_str() {
        "UTF8" | "UNICODE" => Ok("UTF8".into()),
        _ => Err("the gateway speaks UTF8 only"),
    }
}

fn iso(v: &str) -> Result<String, &'static str> {
    if v.to_ascii_uppercase().contains("ISO") {
        Ok(v.to_string())
    } else {
        Err("the gateway writes dates in ISO style only")
    }
}

fn utc(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_uppercase().as_str() {
        "UTC" | "GMT" | "ETC/UTC" | "ETC/GMT" | "Z" | "ZULU" | "UCT" | "+00" | "+00:00"
        | "00:00" | "0" => Ok(v.to_string()),
        _ => Err("the gateway writes times with zones in UTC only"),
    }
}

fn on(v: &str) -> Result<String, &'static str> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok("on".into()),
        _ => Err("only on is supported"),
    }
}

fn postgres_style(v: &str) -> Result<String, &'static str> {
    if v.eq_ignore_ascii_case("postgres") {
        Ok("postgres".into())
    } else {
        Err("only the postgres interval style is supported")
    }
}

fn hex(v: &str) -> Result<String, &'static str> {
    if v.eq_ignore_ascii_case("hex") {
        Ok("hex".into())
    } else {
        Err("only hex is supported")
    }
}

fn float_digits(v: &str) -> Result<String, &'static str> {
    match v.parse::<i32>() {
        Ok(n) if (-15..=3).contains(&n) => Ok(n.to_string()),
        _ => Err("an integer from -15 to 3"),
    }
}

fn timeout(v: &str) -> Result<String, &'static str> {
    duration_ms(v).map(|ms| ms.to_string())
}

/// A duration setting's milliseconds: `5000`, `5s`, `250ms`, `1min`, `1h`.
pub fn duration_ms(v: &str) -> Result<u64, &'static str> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n
        .parse()
        .map_err(|_| "a duration such as 5000, 5s or 1min")?;
    let per = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        "us" => 0.001,
        _ => return Err("a duration such as 5000, 5s or 1min"),
    };
    Ok((n * per).round() as u64)
}

const SETTINGS: &[Setting] = &[
    Setting {
        name: "client_encoding",
        default: "UTF8",
        read_only: false,
        check: utf8,
    },
    Setting {
        name: "DateStyle",
        default: "ISO, MDY",
        read_only: false,
        check: iso,
    },
    Setting {
        name: "TimeZone",
        default: "UTC",
        read_only: false,
        check: utc,
    },
    Setting {
        name: "IntervalStyle",
        default: "postgres",
        read_only: false,
        check: postgres_style,
    },
    Setting {
        name: "extra_float_digits",
        default: "1",
        read_only: false,
        check: float_digits,
    },
    Setting {
        name: "application_name",
        default: "",
        read_only: false,
        check: any,
    },
    Setting {
        name: "search_path",
        default: "main",
        read_only: false,
        check: any,
    },
    Setting {
        name: "statement_timeout",
        default: "0",
        read_only: false,
        check: timeout,
    },
    Setting {
        name: "standard_conforming_strings",
        default: "on",
        read_only: false,
        check: on,
    },
    Setting {
        name: "bytea_output",
        default: "hex",
        read_only: false,
        check: hex,
    },
    Setting {
        name: "transaction_isolation",
        default: "read committed",
        read_only: false,
        check: any,
    },
    Setting {
        name: "default_transaction_isolation",
        default: "read committed",
        read_only: false,
        check: any,
    },
    Setting {
        name: "lock_timeout",
        default: "0",
        read_only: false,
        check: any,
    },
    Setting {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        read_only: false,
        check: any,
    },
    Setting {
        name: "server_version",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "server_version_num",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "server_encoding",
        default: "UTF8",
        read_only: true,
        check: any,
    },
    Setting {
        name: "integer_datetimes",
        default: "on",
        read_only: true,
        check: any,
    },
    Setting {
        name: "is_superuser",
        default: "off",
        read_only: true,
        check: any,
    },
    Setting {
        name: "session_authorization",
        default: "",
        read_only: true,
        check: any,
    },
    Setting {
        name: "default_transaction_read_only",
        default: "",
        read_only: false,
        check: any,
    },
    Setting {
        name: "transaction_read_only",
        default: "",
        read_only: true,
        check: any,
    },
    // PostgreSQL's own (SQLAlchemy's reflection compares a table's access
    // method with it).
    Setting {
        name: "default_table_access_method",
        default: "heap",
        read_only: true,
        check: any,
    },
    Setting {
        name: "max_identifier_length",
        default: "63",
        read_only: true,
        check: any,
    },
    Setting {
        name: "lc_collate",
        default: "C",
        read_only: true,
        check: any,
    },
    Setting {
        name: "lc_ctype",
        default: "C",
        read_only: true,
        check: any,
    },
    Setting {
        name: "in_hot_standby",
        default: "off",
        read_only: true,
        check: any,
    },
];

/// The setting `name` names (any case; `SHOW transaction isolation level`
/// spells one with spaces).
pub fn setting(name: &str) -> Option<&'static Setting> {
    let name = name.trim().replace(' ', "_");
    let name = match name.to_ascii_lowercase().as_str() {
        "transaction_isolation_level" => "transaction_isolation".to_string(),
        "time_zone" => "timezone".to_string(),
        _ => name,
    };
    SETTINGS.iter().find(|s| s.name.eq_ignore_ascii_case(&name))
}

/// The settings a client is told at startup (`ParameterStatus`).
pub const REPORTED: &[&str] = &[
    "server_version",
    "server_encoding",
    "client_encoding",
    "application_name",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "integer_datetimes",
    "standard_conforming_strings",
    "is_superuser",
    "session_authorization",
    "default_transaction_read_only",
    "in_hot_standby",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_units() {
        assert_eq!(duration_ms("5000"), Ok(5000));
        assert_eq!(duration_ms("5s"), Ok(5000));
        assert_eq!(duration_ms("1min"), Ok(60000));
        assert!(duration_ms("soon").is_err());
    }
}
