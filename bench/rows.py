"""The suite's Markdown rows for the benchmarks that are Python scripts
(bench/flight-small.py, bench/pg-door.py, bench/tiles.py), from the one JSON
line each prints on stdin; bench/run appends them to examples/bench's table.

    bench/flight-small.py BIN 2000 | python bench/rows.py flight-small

Columns as examples/bench's: # | benchmark | gateway | reference | ratio | goal | met,
where ratio is the reference's cost over the gateway's (1.0: no overhead).
"""

import json
import sys


def row(n, name, gateway, reference, ratio, goal, met):
    print(f"| {n} | {name} | {gateway} | {reference} | {ratio:.2f} | {goal} | {'met' if met else '**missed**'} |")


def flight_small(d):
    for case, what in (("same", "one text repeated"), ("fresh", "a new text each time")):
        f, h = d[f"{case}_flight_adbc"], d[f"{case}_http"]
        r = h["cpu_us_per_query"] / max(f["cpu_us_per_query"], 1)
        row(
            15,
            f"Flight SQL small query (ADBC, `SELECT 42`, {what}): gateway CPU per query",
            f"{f['cpu_us_per_query']} µs, p50 {f['p50_us']} µs, client CPU {f['client_cpu_us_per_query']} µs "
            f"({d['queries']} queries)",
            f"`POST /query` JSON: {h['cpu_us_per_query']} µs, p50 {h['p50_us']} µs, "
            f"client CPU {h['client_cpu_us_per_query']} µs"
            + (
                f"; at Flight's pace (idle {f['p50_us'] - h['p50_us']} µs between queries): "
                f"{p['cpu_us_per_query']} µs, {p['cpu_us_per_query'] / max(f['cpu_us_per_query'], 1):.2f} of Flight's"
                if (p := d.get(f"{case}_http_paced"))
                else ""
            ),
            r,
            "≥ 1.0",
            r >= 1.0,
        )


def pg_door(d):
    p, h = d["select42_pg"], d["select42_http"]
    r = h["cpu_us_per_query"] / max(p["cpu_us_per_query"], 1)
    row(
        16,
        "PostgreSQL door small query (psycopg, `SELECT 42`): gateway CPU per query",
        f"{p['cpu_us_per_query']} µs, p50 {p['p50_us']} µs ({d['queries']} queries)",
        f"`POST /query` JSON: {h['cpu_us_per_query']} µs, p50 {h['p50_us']} µs",
        r,
        "≥ 1.0",
        r >= 1.0,
    )
    # The door's cost is the gateway's CPU (a client reading one message per
    # row sets the wall time): its text rows against /query's CSV of the same
    # rows, its binary rows against /query's Arrow.
    label = next(k for k in d if k.startswith("arrow_http_"))[len("arrow_http_"):]
    for key, what, base, base_what in (
        ("copy_", "COPY TO STDOUT (text)", "csv_http_", "CSV"),
        ("copy_csv_", "COPY TO STDOUT (CSV)", "csv_http_", "CSV"),
        ("psycopg_binary_fetch_", "psycopg binary fetch", "arrow_http_", "Arrow"),
    ):
        v, b = d.get(key + label), d.get(base + label)
        if not v or not b:
            continue
        r = b["gateway_cpu_s"] / max(v["gateway_cpu_s"], 1e-9)
        row(
            16,
            f"PostgreSQL door, {label} rows by {what}: gateway CPU",
            f"{v['gateway_cpu_s']:.2f} s CPU, {v['seconds']:.2f} s",
            f"{base_what} over `POST /query`: {b['gateway_cpu_s']:.2f} s CPU, {b['seconds']:.2f} s",
            r,
            "≥ 1.0",
            r >= 1.0,
        )


def tiles(d):
    r = d["two_tokens_8_s"] / d["one_token_8_s"]
    row(
        17,
        "eight dashboard tiles at once on a pool of two: one token against two tokens",
        f"one token {d['one_token_8_s']:.2f} s ({d['one_token_over_serial']:.2f}x serial)",
        f"two tokens {d['two_tokens_8_s']:.2f} s ({d['two_tokens_over_serial']:.2f}x serial); "
        f"one tile {d['one_tile_s']:.2f} s",
        r,
        "≥ 0.9",
        r >= 0.9,
    )


if __name__ == "__main__":
    kind = sys.argv[1]
    data = json.loads(sys.stdin.read().strip().splitlines()[-1])
    {"flight-small": flight_small, "pg-door": pg_door, "tiles": tiles}[kind](data)
