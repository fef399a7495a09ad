//! A prepared statement's describe (Flight SQL's `CreatePreparedStatement`,
//! which ADBC sends before every statement it runs) is remembered with the
//! text's verdict on its connection: the same text described again is not
//! planned again, and a change to the catalog makes the next describe plan
//! it anew.

use arrow::datatypes::DataType;
use arrow_flight::sql::client::FlightSqlServiceClient;
use tonic::transport::Channel;

use crate::common::{self, metric, Gateway};

async fn remembered(g: &common::App) -> f64 {
    metric(
        &g.get_text("/metrics").await,
        "duckgate_describes_remembered_total",
    )
}

async fn client(g: &common::App) -> FlightSqlServiceClient<Channel> {
    let uri = g.flight_uri().await.replace("grpc://", "http://");
    let channel = tonic::transport::Endpoint::from_shared(uri)
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

/// The columns a prepared `sql` describes (names and Arrow types).
async fn described(c: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Vec<(String, DataType)> {
    let prepared = c.prepare(sql.to_string(), None).await.unwrap();
    let schema = prepared.dataset_schema().unwrap().clone();
    prepared.close().await.unwrap();
    columns(&schema)
}

/// The columns of `sql`'s answer when it runs (the FlightInfo's schema).
async fn answered(c: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Vec<(String, DataType)> {
    let info = c.execute(sql.to_string(), None).await.unwrap();
    columns(&info.try_decode_schema().unwrap())
}

fn columns(schema: &arrow::datatypes::Schema) -> Vec<(String, DataType)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect()
}

/// DuckDB's own column names for `sql` after `setup`, in-process.
fn duckdb_names(setup: &str, sql: &str) -> Vec<String> {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(setup).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.execute([]).unwrap();
    stmt.column_names()
}

#[tokio::test]
async fn a_described_text_is_not_planned_again_until_the_catalog_changes() {
    // One connection: every describe meets what the last one left.
    let g = Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 1)
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .spawn_app()
        .await;
    let mut c = client(&g).await;
    let (create, alter) = (
        "CREATE TABLE t AS SELECT 1 AS a",
        "ALTER TABLE t ADD COLUMN b VARCHAR",
    );
    let sql = "SELECT * FROM t";
    g.query_ok(create).await;

    let before = remembered(&g).await;
    let first = described(&mut c, sql).await;
    assert_eq!(remembered(&g).await, before, "the first describe plans");
    let again = described(&mut c, sql).await;
    assert_eq!(again, first);
    assert_eq!(
        remembered(&g).await,
        before + 1.0,
        "the same text again is remembered"
    );
    assert_eq!(first, answered(&mut c, sql).await);

    // The catalog changed: planned anew, the new column in it.
    g.query_ok(alter).await;
    let changed = described(&mut c, sql).await;
    assert_eq!(
        remembered(&g).await,
        before + 1.0,
        "a describe after DDL plans"
    );
    let names: Vec<String> = changed.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, duckdb_names(&format!("{create}; {alter}"), sql));
    assert_eq!(changed, answered(&mut c, sql).await);
}
