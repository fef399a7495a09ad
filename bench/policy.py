"""The cost of a row policy (issue 39), as a ratio to the same query without one.

    bench/policy [--rows N] [--runs R]

Run by `bench/policy` (which finds the gateway binary and the test venv's
Python). One gateway over a database of N rows (default 10M) made by DuckDB;
`alice` holds a role whose row filter passes every row (`tenant >= 0`: the
filter's whole cost, nothing saved by reading fewer rows), `bob` holds no
role. Each query runs R times for each, alternating, after a warm-up; the
figure is the median wall-clock time of a request. Prints one Markdown table.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import duckdb

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
CAROL = "carol-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, token, sql):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/query",
        data=json.dumps({"sql": sql}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        body = json.loads(r.read())
    return time.perf_counter() - started, body["rows"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="duckgate-policy-bench-")
    db = os.path.join(work, "ops.duckdb")
    con = duckdb.connect(db)
    con.execute(
        f"CREATE TABLE t AS SELECT i AS id, i % 100 AS tenant, i * 3 % 1000 AS amount "
        f"FROM range({args.rows}) r(i)"
    )
    con.close()
    config = os.path.join(work, "roles.toml")
    with open(config, "w") as f:
        f.write(
            '[[role]]\nname = "tenants"\nmembers = ["alice"]\nread = ["ops.main.t"]\n'
            '[role.rows]\n"ops.main.t" = "tenant >= 0"\n'
            '[[role]]\nname = "one_tenant"\nmembers = ["carol"]\nread = ["ops.main.t"]\n'
            '[role.rows]\n"ops.main.t" = "tenant = 7"\n'
        )
    port = free_port()
    env = dict(os.environ)
    env.update(
        DUCKGATE_LISTEN=f"127.0.0.1:{port}",
        DUCKGATE_DATABASE=db,
        DUCKGATE_CONFIG=config,
        DUCKGATE_QUERY_TOKENS=f"alice:{ALICE},bob:{BOB},carol:{CAROL}",
        DUCKGATE_LOG="warn",
    )
    gw = subprocess.Popen([args.gateway], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                post(port, BOB, "SELECT 1")
                break
            except OSError:
                time.sleep(0.1)
        rows = [["| benchmark | with the policy | without | ratio | goal |"], ["|---|---|---|---|---|"]]
        cases = [
            (f"scan of {args.rows:,} rows", ALICE, "SELECT sum(amount), count(*) FROM t",
             "SELECT sum(amount), count(*) FROM t", "≤ 1.1"),
            ("point query", ALICE, "SELECT amount FROM t WHERE id = 4242",
             "SELECT amount FROM t WHERE id = 4242", "(reported)"),
            # One tenant's 1%: the policy against the unconfined query that
            # asks for the same rows itself (DuckDB pushes its filter into the scan).
            ("one tenant's 1% of the rows, against WHERE tenant = 7", CAROL,
             "SELECT sum(amount), count(*) FROM t",
             "SELECT sum(amount), count(*) FROM t WHERE tenant = 7", "(reported)"),
        ]
        for name, confined, sql, plain, goal in cases:
            times = {confined: [], BOB: []}
            answers = {}
            for i in range(args.runs + 2):
                for token in (confined, BOB) if i % 2 == 0 else (BOB, confined):
                    took, answer = post(port, token, sql if token == confined else plain)
                    answers[token] = answer
                    if i >= 2:
                        times[token].append(took)
            assert answers[confined] == answers[BOB], (sql, answers)
            a, b = statistics.median(times[confined]), statistics.median(times[BOB])
            rows.append([f"| policy: {name} | {a * 1000:.2f} ms | {b * 1000:.2f} ms | {a / b:.2f} | {goal} |"])
        print("\n".join(r[0] for r in rows))
    finally:
        gw.terminate()
        gw.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
