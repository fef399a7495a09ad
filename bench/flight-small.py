"""Flight SQL's small-query cost against POST /query, on one gateway process
(issue 60): `SELECT 42` through ADBC's Flight SQL driver (which prepares every
statement: CreatePreparedStatement, GetFlightInfo, DoGet, ClosePreparedStatement)
and over HTTP/1.1 keep-alive (JSON), in interleaved halves, HTTP also at
Flight's pace (the client idle between queries); latency, the
gateway's CPU per query from /proc/<pid>/stat and the client's own (this
process, the driver's threads included). Bounded loops on loopback.

    bench/flight-small.py <duckgate binary> [queries]

Run with the test venv's Python (adbc_driver_flightsql). Prints one JSON line.
"""

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import adbc_driver_flightsql.dbapi as flight_sql
from adbc_driver_flightsql import DatabaseOptions

BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
TOKEN = "bench:flight-small-bench-token-1"
SECRET = TOKEN.split(":")[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


http_port, flight_port = free_port(), free_port()
data = tempfile.mkdtemp()
env = dict(os.environ)
env.update(
    DUCKGATE_LISTEN=f"127.0.0.1:{http_port}",
    DUCKGATE_FLIGHT_LISTEN=f"127.0.0.1:{flight_port}",
    DUCKGATE_QUERY_TOKENS=TOKEN,
    DUCKGATE_DATA_DIR=data,
    DUCKGATE_LOG_FORMAT="text",
    RUST_LOG="warn",
)
gw = subprocess.Popen([BIN], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", flight_port), timeout=1).close()
            socket.create_connection(("127.0.0.1", http_port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    headers = {"authorization": f"Bearer {SECRET}", "content-type": "text/plain"}
    http = http.client.HTTPConnection("127.0.0.1", http_port)

    def http_query(sql):
        http.request("POST", "/query", body=sql, headers={**headers, "accept": "application/json"})
        r = http.getresponse()
        body = r.read()
        assert r.status == 200, body[:200]
        return body

    conn = flight_sql.connect(
        f"grpc://127.0.0.1:{flight_port}",
        db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {SECRET}"},
        autocommit=True,
    )
    cur = conn.cursor()

    def flight_query(sql):
        cur.execute(sql)
        rows = cur.fetchall()
        assert rows == [(42,)], rows
        return rows

    def measure(run, sql, n, gap=0.0):
        for _ in range(50):
            run(sql)  # warm: the text is judged once, then runs inline
        lat = []
        cpu0, client0 = cpu_seconds(gw.pid), time.process_time()
        for _ in range(n):
            t = time.perf_counter()
            run(sql)
            lat.append(time.perf_counter() - t)
            if gap:
                time.sleep(gap)
        cpu = cpu_seconds(gw.pid) - cpu0
        # The client's own CPU (this process, the driver's threads included):
        # what of the latency is the client's.
        client = time.process_time() - client0
        lat.sort()
        return {
            "p50_us": round(statistics.median(lat) * 1e6),
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6),
            "cpu_us_per_query": round(cpu / n * 1e6),
            "client_cpu_us_per_query": round(client / n * 1e6),
        }

    out = {"queries": N}
    # ADBC's DB-API cursor prepares a text once and executes the prepared
    # statement again while the text is the same; a new text is prepared
    # (CreatePreparedStatement) before its execution. `fresh` gives every
    # query a text of its own (a comment), on both doors alike.
    counter = iter(range(10**9))
    for case in ("same", "fresh"):
        def text():
            return "SELECT 42" if case == "same" else f"SELECT 42 -- {next(counter)}"

        # Interleaved halves, so a slow moment of the machine falls on both.
        # `http_paced`: HTTP again with the client idle between queries
        # for as long as a Flight query outlasts an HTTP one (this half's
        # p50s), so the gateway sees queries at Flight's pace: a gateway
        # idle between queries wakes for each, which costs CPU whatever
        # the protocol (the control that separates pace from protocol).
        halves = {"flight_adbc": [], "http": [], "http_paced": []}
        for _ in range(2):
            halves["flight_adbc"].append(measure(lambda _: flight_query(text()), None, N // 2))
            halves["http"].append(measure(lambda _: http_query(text()), None, N // 2))
            gap = max(halves["flight_adbc"][-1]["p50_us"] - halves["http"][-1]["p50_us"], 0) / 1e6
            halves["http_paced"].append(measure(lambda _: http_query(text()), None, N // 2, gap))
        for k, v in halves.items():
            out[f"{case}_{k}"] = {m: round(sum(h[m] for h in v) / len(v)) for m in v[0]}
        out[f"{case}_cpu_ratio_flight_over_http"] = round(
            out[f"{case}_flight_adbc"]["cpu_us_per_query"]
            / max(out[f"{case}_http"]["cpu_us_per_query"], 1),
            2,
        )
    cur.close()
    conn.close()
    print(json.dumps(out))
finally:
    gw.terminate()
    gw.wait(timeout=30)
