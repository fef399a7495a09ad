//! DuckDB's names for the types of a result, where the binder did not
//! give them (statements other than queries): from DuckDB's logical type
//! where Arrow loses the distinction, else from the exported Arrow type.

use arrow::datatypes::DataType;

/// DuckDB's name for a result column's type: from DuckDB's logical type
/// where Arrow loses the distinction (UUID, JSON, HUGEINT, TIMESTAMPTZ, ...),
/// otherwise from the Arrow type it was exported as.
pub fn logical_type_name(lt: &duckdb::core::LogicalTypeHandle, dt: &DataType) -> String {
    use duckdb::core::LogicalTypeId as Id;
    if let Some(alias) = lt.get_alias() {
        return alias.to_ascii_uppercase();
    }
    match lt.try_id() {
        Ok(Id::Uuid) => "UUID".into(),
        Ok(Id::Hugeint) => "HUGEINT".into(),
        Ok(Id::UHugeint) => "UHUGEINT".into(),
        Ok(Id::TimestampTZ) => "TIMESTAMP WITH TIME ZONE".into(),
        Ok(Id::TimeTZ) => "TIME WITH TIME ZONE".into(),
        Ok(Id::Bit) => "BIT".into(),
        Ok(Id::Bignum) => "BIGNUM".into(),
        Ok(Id::Varchar) => "VARCHAR".into(),
        Ok(Id::Blob) => "BLOB".into(),
        Ok(Id::Decimal) => format!("DECIMAL({},{})", lt.decimal_width(), lt.decimal_scale()),
        _ => duckdb_type_name(dt),
    }
}

/// DuckDB's name for the type a column was exported as.
pub fn duckdb_type_name(dt: &DataType) -> String {
    use arrow::datatypes::TimeUnit;
    match dt {
        DataType::Null => "NULL".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "UTINYINT".into(),
        DataType::UInt16 => "USMALLINT".into(),
        DataType::UInt32 => "UINTEGER".into(),
        DataType::UInt64 => "UBIGINT".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            format!("DECIMAL({p},{s})")
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Timestamp(unit, tz) => {
            let base = match unit {
                TimeUnit::Second => "TIMESTAMP_S",
                TimeUnit::Millisecond => "TIMESTAMP_MS",
                TimeUnit::Microsecond => "TIMESTAMP",
                TimeUnit::Nanosecond => "TIMESTAMP_NS",
            };
            if tz.is_some() {
                "TIMESTAMP WITH TIME ZONE".into()
            } else {
                base.into()
            }
        }
        DataType::Duration(_) | DataType::Interval(_) => "INTERVAL".into(),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => {
            format!("{}[]", duckdb_type_name(f.data_type()))
        }
        DataType::FixedSizeList(f, n) => format!("{}[{n}]", duckdb_type_name(f.data_type())),
        DataType::Struct(fields) => format!(
            "STRUCT({})",
            fields
                .iter()
                .map(|f| format!(
                    "{} {}",
                    quote_ident(f.name()),
                    duckdb_type_name(f.data_type())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP({}, {})",
                duckdb_type_name(kv[0].data_type()),
                duckdb_type_name(kv[1].data_type())
            ),
            _ => "MAP".into(),
        },
        DataType::Union(fields, _) => format!(
            "UNION({})",
            fields
                .iter()
                .map(|(_, f)| format!(
                    "{} {}",
                    quote_ident(f.name()),
                    duckdb_type_name(f.data_type())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8) => {
            "ENUM".into()
        }
        DataType::Dictionary(_, v) => duckdb_type_name(v),
        DataType::RunEndEncoded(_, v) => duckdb_type_name(v.data_type()),
    }
}

fn quote_ident(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}
