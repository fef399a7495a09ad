//! Byte settings: a count of bytes or a size with its unit, parsed in one place.

/// The one parser of byte settings: a count of bytes (`1048576`) or a
/// size with its unit (`1MB`, `512 MiB`, see [`byte_size`]), from `min` to
/// `max` bytes.
pub(super) fn bytes_between(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match byte_size(s) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => Err(format!("{n} bytes is not between {min} and {max}")),
        None => Err(format!(
            "`{s}` is not a byte size such as 1048576, 512MB, 4GB or 2GiB"
        )),
    }
}

/// Accepts DuckDB byte sizes such as `512MB`, `4GB`, `2GiB`, `80%`.
/// A byte size setting (`50MB`, `2GiB`) in bytes; `None` for percentages.
pub fn byte_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%' || c == ' ');
    let n: f64 = digits
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let unit = t[digits.len()..].trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * scale) as u64)
}

/// DuckDB's own byte settings (`DUCKGATE_MEMORY_LIMIT`,
/// `DUCKGATE_MAX_TEMP_DIRECTORY_SIZE`): a byte size [`byte_size`] reads,
/// or a percentage; kept as written, for DuckDB.
pub(super) fn parse_byte_size_setting(s: &str) -> Result<String, String> {
    let t = s.trim();
    let ok = match t.strip_suffix('%') {
        Some(n) => n.trim().parse::<f64>().is_ok_and(|n| n >= 0.0),
        None => byte_size(t).is_some(),
    };
    if ok
        && t.chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
    {
        Ok(t.to_string())
    } else {
        Err(format!(
            "`{s}` is not a byte size such as 512MB, 4GB or 2GiB"
        ))
    }
}
