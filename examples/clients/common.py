"""What every example shares: where the gateway is, its token, and a query."""

import os
import urllib.parse

BASE = os.environ.get("DUCKGATE_URL", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("DUCKGATE_TOKEN", "")

# Typed columns, NULLs and more rows than one batch.
SQL = os.environ.get(
    "DUCKGATE_SQL",
    "SELECT i, i / 4 AS x, 'row ' || i AS s, DATE '2024-01-01' + (i % 400)::INT AS d, "
    "CASE WHEN i % 7 = 0 THEN NULL ELSE i % 13 END AS maybe FROM range(50000) t(i) ORDER BY i",
)


def headers():
    return {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}


def query_url(fmt, sql=SQL):
    """A GET /query URL for `sql` in format `fmt`."""
    return f"{BASE}/query?" + urllib.parse.urlencode({"sql": sql, "format": fmt})
