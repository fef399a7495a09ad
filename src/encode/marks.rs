//! What a result's Arrow schema says about the values DuckDB's Arrow export
//! has no type for. DuckDB 1.5.5 exports neither a VARIANT nor a TYPE value
//! ("Unsupported Arrow type ..."), so the engine wraps the query and DuckDB
//! renders them (`describe/types.cpp`'s `ArrowExpr` and `JsonExpr`): a VARIANT as
//! DuckDB's JSON of it, a TYPE as DuckDB's text of the type. Those arrive as
//! strings; the fields that hold them are marked here, wherever they are in
//! a column's type, so that
//!
//! - an Arrow answer says what they are: `duckgate.duckdb_type` names the
//!   DuckDB type (`VARIANT`, `TYPE`), and a VARIANT's field is Arrow's
//!   canonical JSON extension type (`ARROW:extension:name` `arrow.json`), which
//!   pyarrow reads as `pa.json_()` and DuckDB reads back as its JSON type;
//! - the JSON encoder writes a VARIANT as the JSON value it is, not as a
//!   string holding JSON text.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, UnionFields};
use serde::{Deserialize, Serialize};

use super::DUCKDB_TYPE_KEY;

/// Arrow's field metadata key of an extension type's name.
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";

/// Arrow's field metadata key of an extension type's parameters.
pub const EXTENSION_METADATA_KEY: &str = "ARROW:extension:metadata";

/// Arrow's canonical extension type of JSON text.
pub const JSON_EXTENSION: &str = "arrow.json";

/// One value inside a column that DuckDB rendered for want of an Arrow type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Where it is in the column's type: child indexes, a list's or an
    /// array's element 0, a struct's field, a union's member and a map's key
    /// (0) or value (1) by position; empty for the column itself.
    pub path: Vec<usize>,
    /// The DuckDB type it held: `VARIANT` or `TYPE`.
    #[serde(rename = "type")]
    pub duckdb_type: String,
}

/// `schema` with the fields `marks` point at (per column) marked.
pub fn mark_schema(schema: &Schema, marks: &[Vec<Mark>]) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut field = f.as_ref().clone();
            for m in marks.get(i).map(Vec::as_slice).unwrap_or_default() {
                field = mark_field(&field, &m.path, &m.duckdb_type);
            }
            Arc::new(field)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `schema` with each column DuckDB types as UUID (`type_names`, by
/// position) marked `duckgate.duckdb_type` = `UUID`: DuckDB's Arrow export
/// carries a UUID as its text, which a reader (the PostgreSQL door, which
/// describes it as `uuid`) cannot otherwise tell from a VARCHAR. Only the
/// metadata differs: the batches still fit the schema.
pub fn mark_uuids(schema: &SchemaRef, type_names: &[String]) -> SchemaRef {
    if !type_names.iter().any(|t| t == "UUID") {
        return schema.clone();
    }
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .zip(type_names.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(f, t)| match t {
            Some(t) if t == "UUID" => {
                let mut metadata = f.metadata().clone();
                metadata.insert(DUCKDB_TYPE_KEY.to_string(), t.clone());
                Arc::new(f.as_ref().clone().with_metadata(metadata))
            }
            _ => f.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `marks` mark anything.
pub fn any(marks: &[Vec<Mark>]) -> bool {
    marks.iter().any(|m| !m.is_empty())
}

/// `field` with the field at `path` below it marked as holding `duckdb_type`.
/// A path that does not fit the field's type changes nothing.
fn mark_field(field: &Field, path: &[usize], duckdb_type: &str) -> Field {
    let Some((&first, rest)) = path.split_first() else {
        let mut metadata = field.metadata().clone();
        metadata.insert(DUCKDB_TYPE_KEY.to_string(), duckdb_type.to_string());
        if duckdb_type == "VARIANT"
            && matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        {
            metadata.insert(EXTENSION_NAME_KEY.to_string(), JSON_EXTENSION.to_string());
            metadata.insert(EXTENSION_METADATA_KEY.to_string(), String::new());
        }
        return field.clone().with_metadata(metadata);
    };
    let child = |f: &FieldRef| Arc::new(mark_field(f, rest, duckdb_type));
    let data_type = match field.data_type() {
        DataType::List(f) if first == 0 => DataType::List(child(f)),
        DataType::LargeList(f) if first == 0 => DataType::LargeList(child(f)),
        DataType::ListView(f) if first == 0 => DataType::ListView(child(f)),
        DataType::LargeListView(f) if first == 0 => DataType::LargeListView(child(f)),
        DataType::FixedSizeList(f, n) if first == 0 => DataType::FixedSizeList(child(f), *n),
        DataType::Struct(fields) if first < fields.len() => DataType::Struct(
            fields
                .iter()
                .enumerate()
                .map(|(i, f)| if i == first { child(f) } else { f.clone() })
                .collect::<Fields>(),
        ),
        DataType::Map(entries, sorted) if first < 2 => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let kv: Fields = kv
                    .iter()
                    .enumerate()
                    .map(|(i, f)| if i == first { child(f) } else { f.clone() })
                    .collect();
                DataType::Map(
                    Arc::new(
                        entries
                            .as_ref()
                            .clone()
                            .with_data_type(DataType::Struct(kv)),
                    ),
                    *sorted,
                )
            }
            _ => return field.clone(),
        },
        DataType::Union(fields, mode) if first < fields.len() => {
            let (ids, members): (Vec<i8>, Vec<FieldRef>) = fields
                .iter()
                .enumerate()
                .map(|(i, (id, f))| (id, if i == first { child(f) } else { f.clone() }))
                .unzip();
            match UnionFields::try_new(ids, members) {
                Ok(fields) => DataType::Union(fields, *mode),
                Err(_) => return field.clone(),
            }
        }
        _ => return field.clone(),
    };
    field.clone().with_data_type(data_type)
}

/// Whether `data_type` holds a field the JSON encoder writes as JSON text
/// (a marked VARIANT) anywhere below it.
pub(super) fn holds_variant(data_type: &DataType) -> bool {
    let marked = |f: &FieldRef| is_variant(f) || holds_variant(f.data_type());
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => marked(f),
        DataType::Struct(fields) => fields.iter().any(marked),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| marked(f)),
        _ => false,
    }
}

/// Whether `field`, or a field anywhere in its type, is marked as holding
/// `duckdb_type` (`VARIANT`, `TYPE`).
pub fn field_holds(field: &Field, duckdb_type: &str) -> bool {
    fn below(data_type: &DataType, t: &str) -> bool {
        match data_type {
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => field_holds(f, t),
            DataType::Struct(fields) => fields.iter().any(|f| field_holds(f, t)),
            DataType::Union(fields, _) => fields.iter().any(|(_, f)| field_holds(f, t)),
            _ => false,
        }
    }
    field.metadata().get(DUCKDB_TYPE_KEY).map(String::as_str) == Some(duckdb_type)
        || below(field.data_type(), duckdb_type)
}

/// Whether `field` holds DuckDB's JSON of a VARIANT.
pub(super) fn is_variant(field: &Field) -> bool {
    field.metadata().get(DUCKDB_TYPE_KEY).map(String::as_str) == Some("VARIANT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(path: &[usize], t: &str) -> Mark {
        Mark {
            path: path.to_vec(),
            duckdb_type: t.into(),
        }
    }

    /// A VARIANT in a struct in a list, and a TYPE as a map's value.
    #[test]
    fn marks_reach_nested_fields() {
        let inner = Field::new("v", DataType::Utf8, true);
        let item = Field::new_struct(
            "item",
            vec![Field::new("a", DataType::Int32, true), inner],
            true,
        );
        let list = Field::new_list("l", item, true);
        let map = Field::new_map(
            "m",
            "entries",
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, true),
            false,
            true,
        );
        let schema = Schema::new(vec![list, map]);
        let marked = mark_schema(
            &schema,
            &[vec![mark(&[0, 1], "VARIANT")], vec![mark(&[1], "TYPE")]],
        );
        let DataType::List(item) = marked.field(0).data_type() else {
            panic!("a list")
        };
        let DataType::Struct(fields) = item.data_type() else {
            panic!("a struct")
        };
        assert!(is_variant(&fields[1]));
        assert_eq!(
            fields[1]
                .metadata()
                .get(EXTENSION_NAME_KEY)
                .map(String::as_str),
            Some(JSON_EXTENSION)
        );
        assert!(fields[0].metadata().is_empty());
        assert!(holds_variant(marked.field(0).data_type()));
        // The types are the same but for metadata: the batches DuckDB
        // exports still fit the schema.
        assert!(marked
            .field(0)
            .data_type()
            .equals_datatype(schema.field(0).data_type()));
        let DataType::Map(entries, _) = marked.field(1).data_type() else {
            panic!("a map")
        };
        let DataType::Struct(kv) = entries.data_type() else {
            panic!("entries")
        };
        assert_eq!(
            kv[1].metadata().get(DUCKDB_TYPE_KEY).map(String::as_str),
            Some("TYPE")
        );
        assert!(kv[1].metadata().get(EXTENSION_NAME_KEY).is_none());
        assert!(!holds_variant(marked.field(1).data_type()));
    }
}
