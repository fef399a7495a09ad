"""Python requests: POST /query, the JSON answer, into a pandas frame."""

import pandas as pd
import requests

from common import BASE, SQL, headers


def read():
    r = requests.post(f"{BASE}/query", json={"sql": SQL}, headers=headers(), timeout=60)
    if r.status_code != 200:  # a problem document: type, title, detail
        raise RuntimeError(r.json())
    body = r.json()
    return pd.DataFrame(body["rows"], columns=[c["name"] for c in body["columns"]])


if __name__ == "__main__":
    print(read())
