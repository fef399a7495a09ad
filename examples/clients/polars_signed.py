"""polars: read_csv of a signed result URL (polars sends no header).

The statement is submitted with the token; its owner mints a URL that needs
no header until it expires (POST /statements/{id}/links)."""

import uuid

import polars as pl
import requests

from common import BASE, SQL, headers


def signed_url(fmt="csv", expires_in_s=300):
    sid = f"example-{uuid.uuid4()}"
    r = requests.post(
        f"{BASE}/statements",
        json={"sql": SQL, "wait_ms": 60000},
        headers={**headers(), "duckgate-query-id": sid},
        timeout=90,
    )
    r.raise_for_status()
    r = requests.post(
        f"{BASE}/statements/{sid}/links",
        params={"format": fmt, "expires_in_s": expires_in_s},
        headers=headers(),
        timeout=30,
    )
    r.raise_for_status()
    return r.json()["url"]


def read():
    return pl.read_csv(signed_url(), try_parse_dates=True)


if __name__ == "__main__":
    print(read())
