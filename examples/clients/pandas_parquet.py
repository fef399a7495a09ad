"""pandas: read_parquet of a GET /query URL; the file is DuckDB's own COPY."""

import pandas as pd

from common import headers, query_url


def read():
    return pd.read_parquet(query_url("parquet"), storage_options=headers() or None)


if __name__ == "__main__":
    print(read())
