"""pandas: read_csv of a GET /query URL (storage_options become headers)."""

import pandas as pd

from common import headers, query_url


def read():
    return pd.read_csv(query_url("csv"), storage_options=headers() or None, parse_dates=["d"])


if __name__ == "__main__":
    print(read())
