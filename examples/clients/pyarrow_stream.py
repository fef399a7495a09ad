"""pyarrow: the Arrow IPC stream, read as it arrives."""

import pyarrow.ipc
import requests

from common import BASE, SQL, headers


def read():
    with requests.post(
        f"{BASE}/query?format=arrow", data=SQL, headers=headers(), stream=True, timeout=60
    ) as r:
        r.raise_for_status()
        r.raw.decode_content = True
        # A body the gateway aborts is an error here, never a short table.
        return pyarrow.ipc.open_stream(r.raw).read_all()


if __name__ == "__main__":
    print(read())
