#!/usr/bin/env python3
"""Replay DuckDB's own type tests through duckgate's PostgreSQL door with psycopg 3.

The files, their setup (run through `POST /query`, as replay_types.py does) and
DuckDB's reference connection are replay_types.py's; this script only adds the
door: each `query` block is read by psycopg over the door twice, in the text
and the binary result formats, and every value is compared with what Python
DuckDB 1.5.5 returns for the same query, by the mapping of docs/postgres.md
"Types":

- values PostgreSQL has a type for (integers, DECIMAL and the integers beyond
  int8 as `numeric`, floats, text, bytea, dates, times, timestamps with and
  without a zone, intervals, booleans, UUIDs) are compared as the Python
  values psycopg and DuckDB's client make of them (FLOAT as float4: both
  rounded to single precision; intervals as timedeltas, a month as 30 days as
  both clients count it);
- one level of LIST of VARCHAR (and UUID, as text) travels as PostgreSQL's
  `text[]`, compared element by element;
- values PostgreSQL has no type for (other LISTs, ARRAY, STRUCT, MAP, UNION,
  ENUM, VARIANT, JSON) travel as `text` and are compared with DuckDB's own
  `CAST(value AS VARCHAR)`; BIGNUM as `numeric`;
- a value psycopg cannot hold as a Python object (a date beyond year 9999 or
  before year 1, `infinity`), and an INTERVAL whose time part is beyond
  Arrow's nanoseconds (the door reads DuckDB's Arrow export), are counted
  `unrepresentable`, not compared; what DuckDB's Arrow export loses is
  counted `lossy` where it differs: TIME WITH TIME ZONE's offset, a BIT
  (sent as DuckDB's blob, `bytea`), a UNION holding NULL (a NULL UNION).

Statuses as replay_types.py's (`same`, `both_fail`, `refused`, `wrong`,
`skipped`) plus `unrepresentable`.

Usage: replay_types_pg.py --base http://127.0.0.1:PORT --pg "host=... port=... user=... password=..."
         [--token T] [--report out.json] FILES_OR_DIRS...
"""

import argparse
import collections
import datetime
import decimal
import json
import os
import struct
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_types as rt  # noqa: E402

import duckdb  # noqa: E402
import psycopg  # noqa: E402
import psycopg.adapt  # noqa: E402

STATUSES = ("same", "both_fail", "refused", "unrepresentable", "lossy", "wrong", "skipped")

# DuckDB types the door writes as text (docs/postgres.md "Types").
TEXT_PREFIXES = ("STRUCT", "MAP", "UNION", "ENUM", "TIME WITH TIME ZONE", "BIT",
                 "VARIANT", "JSON")

# The reference connection of the file being replayed (replay_types.py makes
# one per file).
CURRENT = {}
_fresh = rt.fresh_connection


def fresh_connection(extension_dir):
    con = _fresh(extension_dir)
    con.execute("SET TimeZone = 'UTC'")
    CURRENT["con"] = con
    return con


rt.fresh_connection = fresh_connection


# Lists the door sends as PostgreSQL arrays (docs/postgres.md "Types"):
# compared element by element (a UUID's element as its text: the door's
# array is `text[]`).
ARRAYS = ("VARCHAR[]", "UUID[]")


def as_text(t):
    s = str(t)
    if s in ARRAYS:
        return False
    return s.endswith("]") or s.startswith(TEXT_PREFIXES)


def norm(v, t):
    """A value made comparable, by its DuckDB type `t`."""
    if v is None or isinstance(v, bool):
        return v
    s = str(t)
    if s in ARRAYS and isinstance(v, list):
        return ("list", tuple(None if x is None else ("t", str(x)) if s == "UUID[]" else norm(x, "VARCHAR")
                              for x in v))
    if s == "BIGNUM" and isinstance(v, str):  # DuckDB's client reads a BIGNUM as text
        return ("num", str(int(v)))
    if isinstance(v, float):
        if s == "FLOAT":
            v = struct.unpack("f", struct.pack("f", v))[0]
        return ("float", repr(v))
    if isinstance(v, (int, decimal.Decimal)):
        d = decimal.Decimal(v)
        if d.is_nan():
            return ("num", "NaN")
        return ("num", str(d.normalize()) if d != d.to_integral_value() else str(int(d)))
    if isinstance(v, datetime.datetime):
        return ("ts", v.astimezone(datetime.timezone.utc).isoformat() if v.tzinfo else v.isoformat())
    if isinstance(v, (datetime.date, datetime.time)):
        return ("t", v.isoformat())
    if isinstance(v, datetime.timedelta):
        return ("interval", v.days, v.seconds, v.microseconds)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(v).hex())
    if isinstance(v, uuid.UUID):
        return ("uuid", str(v))
    return ("t", str(v))


class IntervalText(psycopg.adapt.Loader):
    """PostgreSQL's interval text (`1 year 2 mons 3 days 04:05:06.7`) as a
    timedelta counting a month as 30 days and a year as 12 months, as
    DuckDB's client and psycopg's binary loader count them (psycopg's text
    loader counts a year as 365 days)."""

    def load(self, data):
        toks, days, micros, i = bytes(data).decode().split(), 0, 0, 0
        while i < len(toks):
            t = toks[i]
            if ":" in t:
                neg = t.startswith("-")
                h, m, sec = t.lstrip("+-").split(":")
                us = (int(h) * 3600 + int(m) * 60) * 10**6 + int(decimal.Decimal(sec) * 10**6)
                micros += -us if neg else us
                i += 1
                continue
            n, unit = int(t), toks[i + 1]
            days += n * (360 if unit.startswith("year") else 30 if unit.startswith("mon") else 1)
            i += 2
        return datetime.timedelta(days=days, microseconds=micros)


class IntervalBinary(psycopg.adapt.Loader):
    """PostgreSQL's binary interval (microseconds, days, months) as a
    timedelta, a month as 30 days (psycopg's own loader counts 12 months as
    365 days)."""

    format = psycopg.pq.Format.BINARY

    def load(self, data):
        micros, days, months = struct.unpack(">qii", bytes(data))
        return datetime.timedelta(days=days + 30 * months, microseconds=micros)


def connect(dsn):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.adapters.register_loader("interval", IntervalText)
    conn.adapters.register_loader("interval", IntervalBinary)
    return conn


class Door:
    """The gateway's PostgreSQL door through psycopg 3."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.conn = connect(dsn)

    def read(self, q, binary):
        """("rows", rows, types) or ("error", sqlstate, message) or
        ("unrepresentable", message)."""
        if self.conn.closed:
            self.conn = connect(self.dsn)
        cur = self.conn.cursor(binary=binary)
        try:
            cur.execute(q)
            if cur.description is None:
                return ("rows", [], [])
            return ("rows", cur.fetchall(), [d.type_code for d in cur.description])
        except psycopg.DataError as e:
            if e.sqlstate is None:  # raised by psycopg's loaders, not the server
                return ("unrepresentable", str(e))
            return ("error", e.sqlstate, str(e))
        except psycopg.Error as e:
            return ("error", e.sqlstate, str(e))
        except (OverflowError, ValueError) as e:
            return ("unrepresentable", f"{type(e).__name__}: {e}")


def reference_rows(con, q):
    """DuckDB's answer: ("rows", rows, types), ("error", message) or
    ("unrepresentable", message)."""
    body = rt.strip_sql(q)
    try:
        parts = con.extract_statements(body)
        if len(parts) == 1:
            body = rt.strip_sql(parts[0].query)
    except duckdb.Error:
        pass
    try:
        rel = con.sql(body)
        if rel is None:
            return ("error", "no result")
        types = list(rel.types)
    except duckdb.Error as e:
        return ("error", f"{type(e).__name__}: {e}")
    aliases = ", ".join(f"__c{i}" for i in range(len(types)))
    exprs = ", ".join(f"CAST(__r.__c{i} AS VARCHAR)" if as_text(t) else f"__r.__c{i}"
                      for i, t in enumerate(types))
    try:
        rows = con.sql(f"SELECT {exprs} FROM ({body}\n) AS __r({aliases})").fetchall()
    except duckdb.Error as e:
        return ("error", f"{type(e).__name__}: {e}")
    except (OverflowError, ValueError) as e:
        return ("unrepresentable", f"{type(e).__name__}: {e}")
    return ("rows", rows, types)


def compare(got, want, ordered):
    types = want[2]
    g = [tuple(norm(v, t) for v, t in zip(r, types)) for r in got[1]]
    w = [tuple(norm(v, t) for v, t in zip(r, types)) for r in want[1]]
    if not ordered:
        g, w = sorted(g, key=repr), sorted(w, key=repr)
    if g == w:
        return rt.Outcome("same")
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b:
            return rt.Outcome("wrong", f"row {i}: door {rt.short(a, 200)} duckdb {rt.short(b, 200)}")
    return rt.Outcome("wrong", f"{len(g)} rows, duckdb {len(w)}")


def check_door(door, q, ref, tainted):
    con = CURRENT["con"]
    want = reference_rows(con, q)
    outcomes = []
    for binary in (False, True):
        got = door.read(q, binary)
        mode = "binary" if binary else "text"
        if got[0] == "error" and "nanosecond range" in got[2] and want[0] != "error":
            # The door reads DuckDB's Arrow export, which holds an
            # interval's time part in nanoseconds (docs/postgres.md).
            o = rt.Outcome("unrepresentable", f"{mode}: {rt.short(got[2], 160)}")
        elif got[0] == "error":
            if want[0] == "error":
                o = rt.Outcome("both_fail", f"duckdb: {rt.short(want[1], 120)} | door: {got[1]} {rt.short(got[2], 120)}")
            else:
                kind = "urn:duckgate:problem:statement-forbidden" if got[1] == "42501" else ""
                body = json.dumps({"type": kind, "detail": got[2]}).encode()
                status = 403 if got[1] == "42501" else 400
                ref_ok = rt.Ref()
                o = rt.gateway_failure(status, body, False, ref_ok, tainted)
        elif got[0] == "unrepresentable":
            o = rt.Outcome("unrepresentable", f"{mode}: {rt.short(got[1], 200)}")
        elif want[0] != "rows":
            if want[0] == "unrepresentable":
                o = rt.Outcome("unrepresentable", f"duckdb's client: {rt.short(want[1], 200)}")
            else:
                o = rt.Outcome("wrong", f"door answers, duckdb fails: {rt.short(want[1], 150)}")
        else:
            o = compare(got, want, rt.has_order_by(q))
            if o.status == "wrong":
                o.detail = f"{mode}: {o.detail}"
                # DuckDB's Arrow export of TIME WITH TIME ZONE carries no
                # offset (docs/postgres.md): documented, counted apart.
                if any(str(t) == "TIME WITH TIME ZONE" for t in want[2]):
                    o.status = "lossy"
                # A BIT arrives as DuckDB's blob (its Arrow export does not
                # mark it); a UNION holding NULL and a NULL UNION are one in
                # Arrow (unions carry no validity): documented.
                if any(str(t) == "BIT" for t in want[2]):
                    o.status = "lossy"
                door_part, _, duck_part = o.detail.partition(" duckdb ")
                if any(str(t).startswith("UNION") for t in want[2]) and (
                        ("null" in door_part and '"NULL"' in duck_part)
                        or ('"NULL"' in door_part and "null" in duck_part)):
                    o.status = "lossy"
        outcomes.append(o)
    rank = {s: i for i, s in enumerate(("same", "skipped", "both_fail", "refused", "unrepresentable", "lossy", "wrong"))}
    return max(outcomes, key=lambda o: rank[o.status])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the gateway's base URL (setup statements)")
    ap.add_argument("--token", help="bearer token for /query")
    ap.add_argument("--pg", required=True, help="a libpq connection string for the door")
    ap.add_argument("--report", help="write every non-`same` case here (JSON)")
    ap.add_argument("--extension-dir", default=os.environ.get("DUCKGATE_EXTENSION_DIR"))
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    gw = rt.Gateway(args.base, args.token)
    door = Door(args.pg)
    # The door stands where replay_types.py puts Flight SQL.
    rt.check_flight = lambda fl, q, ref, tainted: check_door(door, q, ref, tainted)
    rt.HAVE_ARROW = True
    # check_door takes DuckDB's answer itself.
    rt.reference = lambda con, q, tmpdir, want_arrow: rt.Ref()
    results, setup_issues = [], []
    rt.cleanup(gw)
    files = rt.test_files(args.paths)
    with tempfile.TemporaryDirectory() as tmpdir:
        for n, path in enumerate(files, 1):
            print(f"[{n}/{len(files)}] {path}", file=sys.stderr, flush=True)
            rt.replay_file(path, gw, ["flight"], tmpdir, args.extension_dir, results, setup_issues, door)
    for r in results:
        r["format"] = "pg"
    counts = collections.Counter(r["status"] for r in results)
    print(f"{len(files)} files, duckdb {duckdb.__version__}, psycopg {psycopg.__version__}")
    print(f"{'door':<11}{'queries':>8}" + "".join(f"{s:>16}" for s in STATUSES))
    print(f"{'pg':<11}{sum(counts.values()):>8}" + "".join(f"{counts[s]:>16}" for s in STATUSES))
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({"duckdb": duckdb.__version__, "files": len(files), "counts": dict(counts),
                       "cases": [r for r in results if r["status"] != "same"], "setup": setup_issues},
                      f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
