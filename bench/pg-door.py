"""The PostgreSQL door against POST /query, on one gateway process: `SELECT 42`
latency and the gateway's CPU per query (psycopg, one connection, text; HTTP/1.1
keep-alive, JSON), then a large result (`rows`, default 1M; the issue's figure is 10M)
by COPY TO STDOUT (text and CSV) against CSV over HTTP, the same rows as text, and by a
psycopg binary fetch (streamed, bounded memory) against Arrow over HTTP (read in chunks),
each with the gateway's CPU. Bounded loops on loopback.

    bench/pg-door.py <duckgate binary> [queries] [rows]

Run with the test venv's Python (psycopg). Prints one JSON line.
"""

import http.client
import http.client as http_client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg

BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
ROWS = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
TOKEN = "bench:pg-door-bench-token-1"
SECRET = TOKEN.split(":")[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


http_port, pg_port = free_port(), free_port()
data = tempfile.mkdtemp()
env = dict(os.environ)
env.update(
    DUCKGATE_LISTEN=f"127.0.0.1:{http_port}",
    DUCKGATE_PG_LISTEN=f"127.0.0.1:{pg_port}",
    DUCKGATE_QUERY_TOKENS=TOKEN,
    DUCKGATE_DATA_DIR=data,
    DUCKGATE_MAX_ROWS=str(ROWS * 2),
    DUCKGATE_LOG_FORMAT="text",
    RUST_LOG="warn",
)
gw = subprocess.Popen([BIN], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", pg_port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    headers = {"authorization": f"Bearer {SECRET}", "content-type": "text/plain"}
    http = http.client.HTTPConnection("127.0.0.1", http_port)

    def http_query(sql, accept="application/json"):
        http.request("POST", "/query", body=sql, headers={**headers, "accept": accept})
        r = http.getresponse()
        body = r.read()
        assert r.status == 200, body[:200]
        return body

    def http_bytes(sql, accept):
        """The answer's size, read in chunks (a large one is never held), on
        a connection of its own (the keep-alive one may have idled out)."""
        conn = http_client.HTTPConnection("127.0.0.1", http_port)
        conn.request("POST", "/query", body=sql, headers={**headers, "accept": accept})
        r = conn.getresponse()
        assert r.status == 200, r.read(200)
        n = 0
        while chunk := r.read(1 << 20):
            n += len(chunk)
        return n

    pg = psycopg.connect(
        f"host=127.0.0.1 port={pg_port} user=bench password={SECRET} dbname=x sslmode=disable",
        autocommit=True,
    )

    def pg_query(sql):
        return pg.execute(sql).fetchall()

    def measure(run, sql, n):
        for _ in range(50):
            run(sql)  # warm: the text is judged once, then runs inline
        lat = []
        cpu0 = cpu_seconds(gw.pid)
        for _ in range(n):
            t = time.perf_counter()
            run(sql)
            lat.append(time.perf_counter() - t)
        cpu = cpu_seconds(gw.pid) - cpu0
        lat.sort()
        return {
            "p50_us": round(statistics.median(lat) * 1e6),
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6),
            "cpu_us_per_query": round(cpu / n * 1e6),
        }

    out = {"queries": N}
    # Interleaved halves, so a slow moment of the machine falls on both.
    halves = {"pg": [], "http": []}
    for _ in range(2):
        halves["pg"].append(measure(pg_query, "SELECT 42", N // 2))
        halves["http"].append(measure(http_query, "SELECT 42", N // 2))
    for k, v in halves.items():
        out[f"select42_{k}"] = {m: round(sum(h[m] for h in v) / len(v)) for m in v[0]}

    big = f"SELECT i, i * 2 AS j, 'row ' || i AS s FROM range({ROWS}) t(i)"
    label = f"{ROWS // 1_000_000}m" if ROWS >= 1_000_000 else str(ROWS)

    def timed(name, count, what):
        cpu0, t = cpu_seconds(gw.pid), time.perf_counter()
        n = what()
        out[f"{name}_{label}"] = {
            "seconds": round(time.perf_counter() - t, 3),
            count: n,
            "gateway_cpu_s": round(cpu_seconds(gw.pid) - cpu0, 3),
        }

    def copy(options):
        def read():
            copied = 0
            with pg.cursor().copy(f"COPY ({big}) TO STDOUT {options}") as c:
                for chunk in c:
                    copied += len(chunk)
            return copied

        return read

    # The door's text rows against /query's (CSV: the same rows as text),
    # its binary rows against Arrow.
    timed("copy", "bytes", copy(""))
    timed("copy_csv", "bytes", copy("WITH (FORMAT csv)"))
    timed("csv_http", "bytes", lambda: http_bytes(big, "text/csv"))
    timed("arrow_http", "bytes", lambda: http_bytes(big, "application/vnd.apache.arrow.stream"))
    timed(
        "psycopg_binary_fetch",
        "rows",
        lambda: sum(1 for _ in pg.cursor(binary=True).stream(big, size=10_000)),
    )
    print(json.dumps(out))
finally:
    gw.terminate()
    gw.wait(timeout=30)
