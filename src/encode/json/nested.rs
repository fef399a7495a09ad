//! Nested values as JSON: unnamed structs as arrays, repeated field names by
//! DuckDB's column rule, unions as their value, maps as objects.

use arrow::array::{Array, AsArray, UnionArray};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, Encoder, EncoderOptions, NullableEncoder};

use crate::encode::{dedup_names, marks};

/// The encoder of an unnamed or repeated-names struct, a union or a map,
/// for [`super::JsonRules`].
pub(super) fn nested_encoder<'a>(
    data_type: &'a DataType,
    array: &'a dyn Array,
    options: &'a EncoderOptions,
) -> Result<Option<Box<dyn Encoder + 'a>>, ArrowError> {
    let enc: Box<dyn Encoder + 'a> = match data_type {
        // An unnamed struct (`row(1, 'x')`, DuckDB writes `(1, x)`) is a
        // JSON array; repeated field names get DuckDB's column rule.
        DataType::Struct(fields)
            if !fields.is_empty()
                && (fields.iter().all(|f| f.name().is_empty())
                    || dedup_names(fields.iter().map(|f| f.name().as_str()))
                        .iter()
                        .zip(fields.iter())
                        .any(|(d, f)| d != f.name())) =>
        {
            let keys = (!fields.iter().all(|f| f.name().is_empty()))
                .then(|| dedup_names(fields.iter().map(|f| f.name().as_str())));
            let children = fields
                .iter()
                .zip(array.as_struct().columns())
                .map(|(f, c)| make_encoder(f, c.as_ref(), options))
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(StructEncoder { keys, children })
        }
        DataType::Union(fields, _) => {
            let union = array
                .as_any()
                .downcast_ref::<UnionArray>()
                .expect("union type");
            let mut children = Vec::new();
            for (type_id, child_field) in fields.iter() {
                let child = union.child(type_id);
                children.push((type_id, make_encoder(child_field, child.as_ref(), options)?));
            }
            Box::new(UnionEncoder { union, children })
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Ok(None);
            };
            if matches!(
                kv[0].data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) && !marks::holds_variant(data_type)
            {
                return Ok(None);
            }
            let map = array.as_map();
            let keys = arrow::util::display::ArrayFormatter::try_new(
                map.keys().as_ref(),
                &arrow::util::display::FormatOptions::default(),
            )?;
            let values = make_encoder(&kv[1], map.values().as_ref(), options)?;
            Box::new(MapEncoder { map, keys, values })
        }
        _ => return Ok(None),
    };
    Ok(Some(enc))
}

/// A struct whose field names cannot be JSON keys as they are: an array of
/// its values (`keys` is `None`) or an object with deduplicated keys.
pub(super) struct StructEncoder<'a> {
    pub(super) keys: Option<Vec<String>>,
    pub(super) children: Vec<NullableEncoder<'a>>,
}

impl Encoder for StructEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.push(if self.keys.is_some() { b'{' } else { b'[' });
        for (n, child) in self.children.iter_mut().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            if let Some(keys) = &self.keys {
                serde_json::to_writer(&mut *out, &keys[n]).expect("writing to a Vec");
                out.push(b':');
            }
            if child.is_null(idx) {
                out.extend_from_slice(b"null");
            } else {
                child.encode(idx, out);
            }
        }
        out.push(if self.keys.is_some() { b'}' } else { b']' });
    }
}

/// A list whose elements the gateway encodes with their own field (see
/// `marks`): `bounds` gives a row's range of values.
pub(super) struct ListEncoder<'a> {
    pub(super) bounds: Box<dyn Fn(usize) -> (usize, usize) + 'a>,
    pub(super) values: NullableEncoder<'a>,
}

impl Encoder for ListEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let (start, end) = (self.bounds)(idx);
        out.push(b'[');
        for i in start..end {
            if i > start {
                out.push(b',');
            }
            if self.values.is_null(i) {
                out.extend_from_slice(b"null");
            } else {
                self.values.encode(i, out);
            }
        }
        out.push(b']');
    }
}

struct UnionEncoder<'a> {
    union: &'a UnionArray,
    children: Vec<(i8, NullableEncoder<'a>)>,
}

impl Encoder for UnionEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let type_id = self.union.type_id(idx);
        let offset = self.union.value_offset(idx);
        match self.children.iter_mut().find(|(t, _)| *t == type_id) {
            Some((_, enc)) if !enc.is_null(offset) => enc.encode(offset, out),
            _ => out.extend_from_slice(b"null"),
        }
    }
}

struct MapEncoder<'a> {
    map: &'a arrow::array::MapArray,
    keys: arrow::util::display::ArrayFormatter<'a>,
    values: NullableEncoder<'a>,
}

impl Encoder for MapEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let offsets = self.map.value_offsets();
        let (start, end) = (offsets[idx] as usize, offsets[idx + 1] as usize);
        out.push(b'{');
        for (n, i) in (start..end).enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let key = self.keys.value(i).to_string();
            serde_json::to_writer(&mut *out, &key).expect("writing to a Vec");
            out.push(b':');
            if self.values.is_null(i) {
                out.extend_from_slice(b"null");
            } else {
                self.values.encode(i, out);
            }
        }
        out.push(b'}');
    }
}
