//! The values of parameters a client binds, for DuckDB.

use pgwire::api::Type;

use crate::pg::backend::Param;

use super::text::{date_text, time_text, timestamp_text};
use super::{PG_EPOCH_DAYS, PG_EPOCH_MICROS};

/// The value a client bound for a parameter, for DuckDB: by the type the
/// client declared for it or the statement was described with (`ty`), in
/// the format it was sent in. Text goes to DuckDB as text, which DuckDB
/// casts to the parameter's type as it does any VARCHAR; numbers, booleans
/// and bytes keep their own types.
pub fn param(value: Option<&[u8]>, ty: Option<&Type>, binary: bool) -> Result<Param, String> {
    let Some(v) = value else {
        return Ok(Param::Null);
    };
    let ty = ty.unwrap_or(&Type::UNKNOWN);
    if binary {
        binary_param(v, ty)
    } else {
        text_param(v, ty)
    }
}

/// A parameter sent as text: numbers and booleans parsed, bytes decoded,
/// the rest text.
fn text_param(v: &[u8], ty: &Type) -> Result<Param, String> {
    let s = std::str::from_utf8(v).map_err(|_| "a text parameter is not UTF-8".to_string())?;
    Ok(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 => s
            .trim()
            .parse::<i64>()
            .map(Param::Int)
            .map_err(|_| format!("invalid input syntax for type {}: \"{s}\"", ty.name()))?,
        Type::FLOAT4 | Type::FLOAT8 => Param::Float(
            float_text(s)
                .ok_or_else(|| format!("invalid input syntax for type {}: \"{s}\"", ty.name()))?,
        ),
        Type::BOOL => Param::Bool(
            bool_text(s)
                .ok_or_else(|| format!("invalid input syntax for type boolean: \"{s}\""))?,
        ),
        Type::BYTEA => Param::Blob(bytea_from_text(s)?),
        _ => Param::Text(s.to_string()),
    })
}

/// A parameter sent in PostgreSQL's binary format of `ty`: numbers,
/// booleans and bytes as themselves, other types as DuckDB's text of them.
fn binary_param(v: &[u8], ty: &Type) -> Result<Param, String> {
    let fixed = |n: usize| -> Result<&[u8], String> {
        if v.len() == n {
            Ok(v)
        } else {
            Err(format!(
                "a binary {} parameter of {} bytes",
                ty.name(),
                v.len()
            ))
        }
    };
    Ok(match *ty {
        Type::BOOL => Param::Bool(fixed(1)?[0] != 0),
        Type::INT2 => {
            Param::Int(i16::from_be_bytes(fixed(2)?.try_into().unwrap_or_default()).into())
        }
        Type::INT4 => {
            Param::Int(i32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::INT8 => Param::Int(i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default())),
        Type::OID => {
            Param::Int(u32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::FLOAT4 => {
            Param::Float(f32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::FLOAT8 => Param::Float(f64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default())),
        Type::BYTEA => Param::Blob(v.to_vec()),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            Param::Text(
                String::from_utf8(v.to_vec())
                    .map_err(|_| "a text parameter is not UTF-8".to_string())?,
            )
        }
        Type::UUID => Param::Text(
            uuid::Uuid::from_slice(v)
                .map_err(|_| "a binary uuid parameter is not 16 bytes".to_string())?
                .to_string(),
        ),
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default());
            let mut s = String::new();
            date_text(&mut s, i64::from(days) + PG_EPOCH_DAYS).map_err(|e| e.to_string())?;
            Param::Text(s)
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default());
            let mut s = String::new();
            timestamp_text(&mut s, micros.saturating_add(PG_EPOCH_MICROS))
                .map_err(|e| e.to_string())?;
            if *ty == Type::TIMESTAMPTZ {
                s.push_str("+00");
            }
            Param::Text(s)
        }
        Type::TIME => {
            let micros = i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default());
            let mut s = String::new();
            time_text(&mut s, micros).map_err(|e| e.to_string())?;
            Param::Text(s)
        }
        Type::NUMERIC => Param::Text(numeric_from_binary(v)?),
        _ => {
            return Err(format!(
                "a binary parameter of type {} is not supported: send it as text",
                ty.name()
            ))
        }
    })
}

fn float_text(s: &str) -> Option<f64> {
    match s.trim().to_ascii_lowercase().as_str() {
        "infinity" | "inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

fn bool_text(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "yes" | "y" | "on" | "1" => Some(true),
        "f" | "false" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn bytea_from_text(s: &str) -> Result<Vec<u8>, String> {
    let Some(hex) = s.strip_prefix("\\x") else {
        return Ok(s.as_bytes().to_vec());
    };
    let bytes = hex.as_bytes();
    if bytes.len() % 2 != 0 {
        return Err("invalid hexadecimal data: odd number of digits".into());
    }
    bytes
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid hexadecimal digit".to_string())
        })
        .collect()
}

/// The decimal text of PostgreSQL's binary `numeric`.
pub(super) fn numeric_from_binary(v: &[u8]) -> Result<String, String> {
    let bad = || "a binary numeric parameter is malformed".to_string();
    let word = |at: usize| -> Result<i16, String> {
        v.get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(bad)
    };
    let (n, weight, sign, dscale) = (word(0)?, word(2)?, word(4)? as u16, word(6)?);
    if sign == 0xC000 {
        return Ok("NaN".into());
    }
    let digits: Result<Vec<i16>, String> =
        (0..n.max(0) as usize).map(|k| word(8 + 2 * k)).collect();
    let digits = digits?;
    let mut int = String::new();
    for k in 0..=weight.max(-1) {
        let d = digits.get(k as usize).copied().unwrap_or(0);
        if int.is_empty() {
            int.push_str(&d.to_string());
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let first_frac = (weight + 1).max(0) as usize;
    let leading_zero_groups = (-(weight + 1)).max(0) as usize;
    for _ in 0..leading_zero_groups {
        frac.push_str("0000");
    }
    for d in digits.iter().skip(first_frac) {
        frac.push_str(&format!("{d:04}"));
    }
    let dscale = dscale.max(0) as usize;
    while frac.len() < dscale {
        frac.push('0');
    }
    frac.truncate(dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}
