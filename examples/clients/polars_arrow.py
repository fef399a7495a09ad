"""polars: read_ipc_stream of a signed Arrow result URL.

An Arrow answer is an Arrow IPC *stream*: polars reads it with
read_ipc_stream (read_ipc expects the IPC *file* format and fails with
NegativeFooterLength). The URL is minted as in polars_signed.py."""

import polars as pl

from polars_signed import signed_url


def read():
    return pl.read_ipc_stream(signed_url("arrow"))


if __name__ == "__main__":
    print(read())
