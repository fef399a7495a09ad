//! DuckDB's own answers, in this process: the reference a test compares
//! the gateway's JSON with (the same crate and library the gateway links).

use serde_json::{json, Value};

/// DuckDB's rows for `sql` on `conn`, with `params` bound, as the
/// gateway's JSON answer writes them; or DuckDB's error.
pub fn rows_with(
    conn: &duckdb::Connection,
    sql: &str,
    params: &[&dyn duckdb::ToSql],
) -> Result<Value, String> {
    let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
    let mut rows = stmt.query(params).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| e.to_string())? {
        let n = row.as_ref().column_count();
        let mut values = Vec::new();
        for i in 0..n {
            values.push(json_of(sql, row.get(i).map_err(|e| e.to_string())?));
        }
        out.push(Value::Array(values));
    }
    Ok(Value::Array(out))
}

/// DuckDB's rows for `sql` on `conn`, as the gateway's JSON writes them.
pub fn rows(conn: &duckdb::Connection, sql: &str) -> Result<Value, String> {
    rows_with(conn, sql, &[])
}

/// DuckDB's rows for `sql` on a fresh in-memory database (local files
/// it names are read as they are); panics on DuckDB's error.
pub fn in_memory(sql: &str) -> Value {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    rows(&conn, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A DuckDB value as the gateway's JSON answer writes it.
fn json_of(sql: &str, v: duckdb::types::Value) -> Value {
    use duckdb::types::Value as V;
    match v {
        V::Null => Value::Null,
        V::Boolean(b) => json!(b),
        V::TinyInt(x) => json!(x),
        V::SmallInt(x) => json!(x),
        V::Int(x) => json!(x),
        V::BigInt(x) => json!(x),
        V::HugeInt(x) => json!(x as i64),
        V::UTinyInt(x) => json!(x),
        V::USmallInt(x) => json!(x),
        V::UInt(x) => json!(x),
        V::UBigInt(x) => json!(x),
        V::Float(x) => json!(x),
        V::Double(x) => json!(x),
        V::Decimal(d) => json!(d.to_string().parse::<f64>().unwrap()),
        V::Text(s) => json!(s),
        V::List(items) => Value::Array(items.into_iter().map(|i| json_of(sql, i)).collect()),
        other => panic!("{sql}: a type the reference does not render: {other:?}"),
    }
}
