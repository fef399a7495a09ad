//! VARIANT values as JSON: DuckDB's JSON of the value itself, and the lists
//! and structs that hold them.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, FieldRef};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, Encoder, EncoderOptions};

use super::nested::{ListEncoder, StructEncoder};
use crate::encode::{dedup_names, marks};

/// The encoder of a VARIANT (DuckDB's JSON of it) or of a list or
/// struct that holds one, for [`super::JsonRules`].
pub(super) fn variant_encoder<'a>(
    field: &'a FieldRef,
    data_type: &'a DataType,
    array: &'a dyn Array,
    options: &'a EncoderOptions,
) -> Result<Option<Box<dyn Encoder + 'a>>, ArrowError> {
    let enc: Box<dyn Encoder + 'a> = match data_type {
        // A VARIANT, as DuckDB's JSON of it: the JSON value itself.
        DataType::Utf8 if marks::is_variant(field) => {
            let a = array.as_string::<i32>();
            Box::new(VariantJson(move |i| a.value(i)))
        }
        DataType::LargeUtf8 if marks::is_variant(field) => {
            let a = array.as_string::<i64>();
            Box::new(VariantJson(move |i| a.value(i)))
        }
        DataType::Utf8View if marks::is_variant(field) => {
            let a = array.as_string_view();
            Box::new(VariantJson(move |i| a.value(i)))
        }
        // Lists of VARIANTs (at any depth): the elements get their own
        // field, which says so.
        DataType::List(child) if marks::holds_variant(data_type) => {
            let a = array.as_list::<i32>();
            let values = make_encoder(child, a.values().as_ref(), options)?;
            let offsets = a.value_offsets();
            Box::new(ListEncoder {
                bounds: Box::new(move |i| (offsets[i] as usize, offsets[i + 1] as usize)),
                values,
            })
        }
        DataType::LargeList(child) if marks::holds_variant(data_type) => {
            let a = array.as_list::<i64>();
            let values = make_encoder(child, a.values().as_ref(), options)?;
            let offsets = a.value_offsets();
            Box::new(ListEncoder {
                bounds: Box::new(move |i| (offsets[i] as usize, offsets[i + 1] as usize)),
                values,
            })
        }
        DataType::FixedSizeList(child, size) if marks::holds_variant(data_type) => {
            let a = array.as_fixed_size_list();
            let values = make_encoder(child, a.values().as_ref(), options)?;
            let size = *size as usize;
            Box::new(ListEncoder {
                bounds: Box::new(move |i| (i * size, (i + 1) * size)),
                values,
            })
        }
        DataType::Struct(fields)
            if marks::holds_variant(data_type)
                && !fields.is_empty()
                && !fields.iter().all(|f| f.name().is_empty()) =>
        {
            let keys = Some(dedup_names(fields.iter().map(|f| f.name().as_str())));
            let children = fields
                .iter()
                .zip(array.as_struct().columns())
                .map(|(f, c)| make_encoder(f, c.as_ref(), options))
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(StructEncoder { keys, children })
        }
        _ => return Ok(None),
    };
    Ok(Some(enc))
}

/// A VARIANT as DuckDB's JSON of it (`CAST(v AS JSON)`), written as the JSON
/// value it is, under the rules of every other value: DuckDB writes NaN and
/// the infinities as bare `NaN`, `Infinity`, `-Infinity` (not JSON): they
/// become strings; an integer beyond 2^53 becomes a string, as a BIGINT's
/// does. Numbers with a fraction or an exponent (DOUBLE, FLOAT, DECIMAL: a
/// VARIANT's JSON does not say which) stay as DuckDB writes them.
struct VariantJson<F>(F);
impl<'b, F: Fn(usize) -> &'b str> Encoder for VariantJson<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        write_variant_json(out, (self.0)(idx));
    }
}

/// Copies DuckDB's JSON text `text` into `out` under the rules of
/// [`VariantJson`]. Strings are copied as they are (DuckDB escapes them).
fn write_variant_json(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // A string, escapes included, to its closing quote.
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                out.extend_from_slice(&bytes[start..i]);
            }
            b'N' | b'I' | b'-' if !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let word = match bytes[i] {
                    b'N' => "NaN",
                    b'I' => "Infinity",
                    _ => "-Infinity",
                };
                serde_json::to_writer(&mut *out, word).expect("writing to a Vec");
                i += word.len();
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let token = &text[start..i];
                let digits = token.strip_prefix('-').unwrap_or(token);
                let beyond = digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits.len() > 16 || (digits.len() == 16 && digits > "9007199254740992"));
                if beyond {
                    serde_json::to_writer(&mut *out, token).expect("writing to a Vec");
                } else {
                    out.extend_from_slice(token.as_bytes());
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DuckDB's JSON of a VARIANT as the answer carries it; the texts are
    /// DuckDB 1.5.5's `CAST(v AS JSON)` of such values.
    #[test]
    fn variant_json_is_json() {
        let cases = [
            ("42", "42"),
            ("null", "null"),
            ("\"x\"", "\"x\""),
            (
                "{\"k\":NaN,\"i\":Infinity,\"j\":-Infinity}",
                "{\"k\":\"NaN\",\"i\":\"Infinity\",\"j\":\"-Infinity\"}",
            ),
            (
                "[9007199254740992,9007199254740993,-9007199254740993]",
                "[9007199254740992,\"9007199254740993\",\"-9007199254740993\"]",
            ),
            (
                "340282366920938463463374607431768211455",
                "\"340282366920938463463374607431768211455\"",
            ),
            (
                "[1e300,0.10000000149011612,100000000000000000000.0,-0.0]",
                "[1e300,0.10000000149011612,100000000000000000000.0,-0.0]",
            ),
            (
                "{\"NaN \\\" Infinity\":\"-1\"}",
                "{\"NaN \\\" Infinity\":\"-1\"}",
            ),
            ("{\"a\":[1,2],\"b\":\"x\"}", "{\"a\":[1,2],\"b\":\"x\"}"),
        ];
        for (duckdb, want) in cases {
            let mut out = Vec::new();
            write_variant_json(&mut out, duckdb);
            let got = String::from_utf8(out).unwrap();
            assert_eq!(got, want, "{duckdb}");
            serde_json::from_str::<serde_json::Value>(&got).expect("valid JSON");
        }
    }
}
