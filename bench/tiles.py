"""Eight dashboard tiles on a pool of two (issue 60): eight equal queries sent at
once by one token, and the same eight split between two tokens, against the
serial time of one, on one gateway with two query tokens configured
(`DUCKGATE_POOL_SIZE=2`). Fair shares that conserve work run one token's eight
two at a time (about half their serial time); a fixed per-token share runs
them one at a time (about their serial time). Bounded, on loopback.

    bench/tiles.py <duckgate binary> [rows per tile]

Run with any Python 3. Prints one JSON line.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1]
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 30_000_000
TOKENS = {"alice": "alice-tiles-bench-token-01", "bob": "bob-tiles-bench-token-0002"}
SQL = f"SELECT sum(hash(i)) AS h FROM range({ROWS}) t(i)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
env = dict(os.environ)
env.update(
    DUCKGATE_LISTEN=f"127.0.0.1:{port}",
    DUCKGATE_QUERY_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
    DUCKGATE_POOL_SIZE="2",
    # One DuckDB thread per query, so two tiles at once can use two cores.
    DUCKGATE_THREADS=os.environ.get("TILES_THREADS", "1"),
    DUCKGATE_ACQUIRE_TIMEOUT_MS="120000",
    DUCKGATE_QUERY_TIMEOUT_MS="120000",
    DUCKGATE_DATA_DIR=tempfile.mkdtemp(),
    RUST_LOG="warn",
)
gw = subprocess.Popen([BIN], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def query(token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request(
        "POST",
        "/query",
        body=SQL,
        headers={"authorization": f"Bearer {token}", "content-type": "text/plain"},
    )
    r = c.getresponse()
    body = r.read()
    assert r.status == 200, (r.status, body[:300])


def at_once(tokens):
    threads = [threading.Thread(target=query, args=(t,)) for t in tokens]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    query(TOKENS["alice"])  # warm
    one = []
    for _ in range(3):
        t0 = time.perf_counter()
        query(TOKENS["alice"])
        one.append(time.perf_counter() - t0)
    single = sorted(one)[1]
    serial = 8 * single
    alone = at_once([TOKENS["alice"]] * 8)
    split = at_once([TOKENS["alice"]] * 4 + [TOKENS["bob"]] * 4)
    print(
        json.dumps(
            {
                "one_tile_s": round(single, 3),
                "serial_8_s": round(serial, 3),
                "one_token_8_s": round(alone, 3),
                "one_token_over_serial": round(alone / serial, 2),
                "two_tokens_8_s": round(split, 3),
                "two_tokens_over_serial": round(split / serial, 2),
            }
        )
    )
finally:
    gw.terminate()
    gw.wait(timeout=30)
