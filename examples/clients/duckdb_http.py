"""DuckDB 1.5.5: read_csv / read_parquet of a gateway URL, the token in an
HTTP secret (httpfs sends it as a bearer header)."""

import os

import duckdb

from common import TOKEN, query_url


def connect():
    config = {"autoinstall_known_extensions": False}
    if os.environ.get("DUCKGATE_EXTENSION_DIR"):  # where httpfs is, offline
        config["extension_directory"] = os.environ["DUCKGATE_EXTENSION_DIR"]
    con = duckdb.connect(config=config)
    con.execute("LOAD httpfs")
    if TOKEN:
        quoted = TOKEN.replace("'", "''")
        con.execute(f"CREATE SECRET gateway (TYPE http, BEARER_TOKEN '{quoted}')")
    return con


def read(fmt="parquet"):
    con = connect()
    reader = "read_parquet" if fmt == "parquet" else "read_csv"
    return con.sql(f"SELECT * FROM {reader}($url)", params={"url": query_url(fmt)}).df()


if __name__ == "__main__":
    print(read())
