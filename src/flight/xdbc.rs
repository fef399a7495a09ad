//! `GetXdbcTypeInfo`: DuckDB's types as Flight SQL describes them to JDBC and
//! ODBC clients (the JDBC driver's `DatabaseMetaData.getTypeInfo()`, a BI
//! tool's type list). One row per DuckDB logical type (the names of
//! `SELECT DISTINCT logical_type FROM duckdb_types()` but `NULL` and `TYPE`,
//! which no column holds), plus `JSON`; each with the JDBC type it reads as.
//! Parameterized types say their parameters in `create_params` (`DECIMAL`'s
//! precision and scale); nested ones (`LIST`, `STRUCT`, ...) are
//! `XdbcUnknownType`: JDBC has no type for them.

use std::sync::OnceLock;

use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{Nullable, Searchable, XdbcDataType, XdbcDatetimeSubcode};

use XdbcDataType as X;

/// (DuckDB type name, the JDBC type it reads as, column size).
const TYPES: &[(&str, XdbcDataType, Option<i32>)] = &[
    ("BOOLEAN", X::XdbcBit, Some(1)),
    ("TINYINT", X::XdbcTinyint, Some(3)),
    ("SMALLINT", X::XdbcSmallint, Some(5)),
    ("INTEGER", X::XdbcInteger, Some(10)),
    ("BIGINT", X::XdbcBigint, Some(19)),
    ("HUGEINT", X::XdbcNumeric, Some(39)),
    ("UTINYINT", X::XdbcSmallint, Some(3)),
    ("USMALLINT", X::XdbcInteger, Some(5)),
    ("UINTEGER", X::XdbcBigint, Some(10)),
    ("UBIGINT", X::XdbcNumeric, Some(20)),
    ("UHUGEINT", X::XdbcNumeric, Some(39)),
    ("BIGNUM", X::XdbcNumeric, None),
    ("FLOAT", X::XdbcReal, Some(24)),
    ("DOUBLE", X::XdbcDouble, Some(53)),
    ("DECIMAL", X::XdbcDecimal, Some(38)),
    ("VARCHAR", X::XdbcVarchar, None),
    ("JSON", X::XdbcVarchar, None),
    ("UUID", X::XdbcChar, Some(36)),
    ("ENUM", X::XdbcVarchar, None),
    ("BLOB", X::XdbcVarbinary, None),
    ("BIT", X::XdbcVarchar, None),
    ("GEOMETRY", X::XdbcVarbinary, None),
    ("DATE", X::XdbcDate, Some(10)),
    ("TIME", X::XdbcTime, Some(15)),
    ("TIME_NS", X::XdbcTime, Some(18)),
    ("TIME WITH TIME ZONE", X::XdbcTime, Some(21)),
    ("TIMESTAMP", X::XdbcTimestamp, Some(26)),
    ("TIMESTAMP_S", X::XdbcTimestamp, Some(19)),
    ("TIMESTAMP_MS", X::XdbcTimestamp, Some(23)),
    ("TIMESTAMP_NS", X::XdbcTimestamp, Some(29)),
    ("TIMESTAMP WITH TIME ZONE", X::XdbcTimestamp, Some(32)),
    ("INTERVAL", X::XdbcInterval, None),
    ("VARIANT", X::XdbcUnknownType, None),
    ("LIST", X::XdbcUnknownType, None),
    ("ARRAY", X::XdbcUnknownType, None),
    ("STRUCT", X::XdbcUnknownType, None),
    ("MAP", X::XdbcUnknownType, None),
    ("UNION", X::XdbcUnknownType, None),
];

/// The answer's rows, built once.
pub fn type_info() -> &'static XdbcTypeInfoData {
    static DATA: OnceLock<XdbcTypeInfoData> = OnceLock::new();
    DATA.get_or_init(|| {
        let mut b = XdbcTypeInfoDataBuilder::new();
        for &(name, data_type, column_size) in TYPES {
            let quoted = matches!(
                data_type,
                X::XdbcVarchar
                    | X::XdbcChar
                    | X::XdbcVarbinary
                    | X::XdbcDate
                    | X::XdbcTime
                    | X::XdbcTimestamp
                    | X::XdbcInterval
            );
            let numeric = matches!(
                data_type,
                X::XdbcTinyint
                    | X::XdbcSmallint
                    | X::XdbcInteger
                    | X::XdbcBigint
                    | X::XdbcNumeric
                    | X::XdbcDecimal
                    | X::XdbcReal
                    | X::XdbcDouble
            );
            let datetime = matches!(data_type, X::XdbcDate | X::XdbcTime | X::XdbcTimestamp);
            b.append(XdbcTypeInfo {
                type_name: name.to_string(),
                data_type,
                column_size,
                literal_prefix: quoted.then(|| "'".to_string()),
                literal_suffix: quoted.then(|| "'".to_string()),
                create_params: (name == "DECIMAL")
                    .then(|| vec!["precision".to_string(), "scale".to_string()]),
                nullable: Nullable::NullabilityNullable,
                case_sensitive: matches!(data_type, X::XdbcVarchar | X::XdbcChar),
                searchable: if data_type == X::XdbcUnknownType {
                    Searchable::None
                } else {
                    Searchable::Full
                },
                unsigned_attribute: numeric.then(|| name.starts_with('U')),
                fixed_prec_scale: name == "DECIMAL",
                auto_increment: numeric.then_some(false),
                local_type_name: Some(name.to_string()),
                minimum_scale: (name == "DECIMAL").then_some(0),
                maximum_scale: (name == "DECIMAL").then_some(38),
                sql_data_type: if datetime { X::XdbcDatetime } else { data_type },
                // ODBC's SQL_CODE_DATE is 1, which the generated enum names
                // by its first alias, `XdbcSubcodeYear`.
                datetime_subcode: match (data_type, name.contains("TIME ZONE")) {
                    (X::XdbcDate, _) => Some(XdbcDatetimeSubcode::XdbcSubcodeYear),
                    (X::XdbcTime, false) => Some(XdbcDatetimeSubcode::XdbcSubcodeTime),
                    (X::XdbcTime, true) => Some(XdbcDatetimeSubcode::XdbcSubcodeTimeWithTimezone),
                    (X::XdbcTimestamp, false) => Some(XdbcDatetimeSubcode::XdbcSubcodeTimestamp),
                    (X::XdbcTimestamp, true) => {
                        Some(XdbcDatetimeSubcode::XdbcSubcodeTimestampWithTimezone)
                    }
                    _ => None,
                },
                num_prec_radix: numeric.then_some(10),
                interval_precision: None,
            });
        }
        b.build().expect("the type table is well formed")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every DuckDB logical type a column can hold is listed, by DuckDB's
    /// own account of its types (the library in-process).
    #[test]
    fn every_duckdb_type_is_listed() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT DISTINCT logical_type FROM duckdb_types() \
                 WHERE database_name = 'system' AND logical_type NOT IN ('NULL', 'TYPE') \
                 ORDER BY 1",
            )
            .unwrap();
        let duckdb: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut listed: Vec<String> = TYPES
            .iter()
            .map(|t| t.0.to_string())
            .filter(|n| n != "JSON")
            .collect();
        listed.sort();
        assert_eq!(listed, duckdb);
        let batch = type_info().record_batch(None).unwrap();
        assert_eq!(batch.num_rows(), TYPES.len());
        // Filtered by JDBC type, as a client asks for one.
        let ints = type_info().record_batch(X::XdbcInteger as i32).unwrap();
        assert_eq!(ints.num_rows(), 2);
    }
}
