#!/usr/bin/env python3
"""Replay DuckDB's own sqllogictest type tests through duckgate, in every format.

What it checks: for each `query` block of the given `.test` files (DuckDB's
`test/sql/types/**`, vendored in tests/data/duckdb-types/), the gateway's answer
in JSON, NDJSON, CSV (and Arrow when pyarrow is installed) is compared with
what DuckDB itself holds for the same query, live, in the Python duckdb of the
test venv (it must be the gateway's DuckDB version). The expected results
written in the test files are ignored: DuckDB is the reference, never values
typed by hand.

- CSV: the gateway's bytes must equal DuckDB's `COPY (q) TO ... (FORMAT csv,
  HEADER)` bytes (rows compared as a multiset when the query has no ORDER BY).
- JSON / NDJSON: every cell is compared with DuckDB's value under the
  conventions of docs/api.md "JSON values": integers as numbers up to 2^53, beyond
  as strings; DECIMAL exact; NaN/Infinity as strings; DATE/TIME/TIMESTAMP as
  ISO 8601 (fraction digits and `+00` vs `+00:00` are not significant),
  `infinity`/`-infinity` as DuckDB writes them; UUID, ENUM as text; BLOB as
  base64; LIST/ARRAY as arrays; STRUCT as objects (all names empty: an array;
  repeated names renamed a, a_1, A_2); MAP as an object keyed by the key's
  DuckDB text; UNION as its value; INTERVAL, TIMETZ, BIT as DuckDB's VARCHAR
  text; BIGNUM as a number up to 2^53, beyond as DuckDB's text. The reference
  cell is taken from DuckDB with every lossy leaf cast to VARCHAR inside DuckDB
  (nested values are rebuilt with list_transform/struct_pack), so Python's
  conversions never stand between DuckDB and the comparison.
  JSON `columns` must carry DuckDB's names and type strings (type mismatches
  are counted separately); NDJSON keys must be the names DuckDB's COPY writes.
- Arrow: the IPC table must equal `con.sql(q).arrow()` (schema and values);
  where DuckDB's export has no Arrow type (VARIANT, TYPE) DuckDB's own
  rendering under docs/api.md's mapping (`CAST(v AS JSON)`, `CAST(t AS
  VARCHAR)`), and every VARIANT field must be Arrow's `arrow.json`.
  VARIANT in JSON: the JSON value of DuckDB's `CAST(v AS JSON)`.
- Parquet: the body, read back by DuckDB, must equal (names, types, values)
  the file DuckDB writes with `COPY (q) TO ... (FORMAT parquet)`.
- Flight SQL (`--flight grpc://HOST:PORT`): the table ADBC's Flight SQL
  driver reads from the gateway's Flight listener must equal
  `con.sql(q).arrow()`, as Arrow over HTTP must.

Each answer is classified `same`, `both_fail` (DuckDB errors, the gateway
answers 4xx or ends its stream with the documented error), `refused` (the
gateway's policy refuses the statement, or a setup statement it needs, while
DuckDB succeeds) or `wrong` (anything else). Blocks the harness cannot replay
soundly are `skipped` with a reason.

Setup (`statement ok`) runs on a fresh in-memory Python connection per file and
through the gateway; `statement error` blocks are skipped (they change no
state). `foreach`/`loop` are expanded textually as DuckDB's runner does (type
classes such as `<integral>` included). `load` of a database file and its
`restart`s go on in memory; other `restart`s, `require`s a plain run does not
meet, and settings that change results stop the file at that point
(tests/data/duckdb-types/README.md). After each file every object it left in
the gateway's database is dropped.

Usage: replay_types.py --base http://127.0.0.1:PORT [--token T] [--flight grpc://HOST:PORT]
         [--formats json,ndjson,csv,arrow,parquet,flight] [--report out.json] [--shard I/N]
         FILES_OR_DIRS...
Always exits 0; the caller decides what the counts mean.
"""

import argparse
import base64
import collections
import csv
import http.client
import io
import json
import math
import os
import re
import struct
import sys
import tempfile
import urllib.parse
from decimal import Decimal

import duckdb

try:  # optional
    import pyarrow  # noqa: F401
    import pyarrow.ipc

    HAVE_ARROW = True
except ImportError:
    HAVE_ARROW = False

MAX_SAFE = 1 << 53
STATUSES = ("same", "both_fail", "refused", "wrong", "skipped")

# Settings that do not change results: replayed on neither side.
BENIGN_SETTING = re.compile(
    r"^\s*(pragma\s+(enable_verification|disable_verification|verify_external|"
    r"verify_fetch_row|enable_profiling|disable_profiling|threads\s*=.*|"
    r"wal_autocheckpoint.*|disable_checkpoint_on_shutdown)|"
    r"set\s+(threads\s*(=|to).*|timezone\s*(=|to)\s*'utc'|checkpoint_threshold.*|"
    # Storage layout, the optimizer's choices, ICU's default calendar and
    # DuckDB's default order: not what an answer holds.
    r"(geometry|variant)_minimum_shredding_size\s*(=|to).*|disabled_optimizers\s*(=|to).*|"
    r"calendar\s*(=|to)\s*'gregorian'|preserve_insertion_order\s*(=|to)\s*true)|"
    r"pragma\s+preserve_insertion_order\s*=\s*true)\s*;?\s*$",
    re.I | re.S,
)
SETTING = re.compile(r"^\s*(pragma|set|reset)\b", re.I)
FILE_PATHS = re.compile(r"__TEST_DIR__|\{TEMP_DIR\}|\{DATA_DIR\}|'data/|\"data/", re.I)
ALLOWED_REQUIRES = {"icu", "json", "parquet"}
# Conditions of DuckDB's test runner that a plain run (no forced storage, no
# reloads, no alternative verification, glibc, the standard vector size of
# 2048) meets: the file runs as it would in DuckDB's own CI.
MET_REQUIRES = {"noforcestorage", "no_force_storage", "skip_reload", "no_alternative_verify", "notmusl"}
STANDARD_VECTOR_SIZE = 2048


# --------------------------------------------------------------------------
# sqllogictest parsing


class Record:
    def __init__(self, kind, line, sql="", expect="ok", sortmode="", reason=""):
        self.kind = kind  # statement | query | stop
        self.line = line
        self.sql = sql
        self.expect = expect  # ok | error | maybe (statements)
        self.sortmode = sortmode  # rowsort | valuesort | nosort | ''
        self.reason = reason


SIGNED = ["tinyint", "smallint", "integer", "bigint", "hugeint"]
UNSIGNED = ["utinyint", "usmallint", "uinteger", "ubigint", "uhugeint"]
COMPRESSIONS = ["none", "uncompressed", "rle", "bitpacking", "dictionary", "fsst", "dict_fsst", "alp", "alprd"]


def foreach_values(token, values):
    """`values` with a `foreach` token added, DuckDB's runner's way
    (`ForEachTokenReplace` in test/sqlite/sqllogic_test_runner.cpp): a type
    class (`<integral>`, `<numeric>`, ...) adds its types, `!x` removes x."""
    low = token.strip().lower()
    if low.startswith("!") and low[1:] in values:
        return [v for v in values if v != low[1:]]
    is_all = low == "<alltypes>"
    is_numeric = is_all or low == "<numeric>"
    is_integral = is_numeric or low == "<integral>"
    added = []
    if is_integral or low == "<signed>":
        added += SIGNED
    if is_integral or low == "<unsigned>":
        added += UNSIGNED
    if is_numeric:
        added += ["float", "double"]
    if is_all:
        added += ["bool", "interval", "varchar"]
    if low == "<compression>":
        added += COMPRESSIONS
    if low.startswith("<") and not added:
        raise ValueError(f"foreach over an unknown class {token}")
    return values + (added or [token])


def expand_loops(lines):
    """Expand foreach/loop blocks textually (`${var}` substitution), as
    DuckDB's runner does. Returns (line_number, text) pairs."""
    numbered = list(enumerate(lines, 1))

    def expand(items):
        out, i = [], 0
        while i < len(items):
            no, text = items[i]
            w = text.split()
            if w and w[0] in ("foreach", "loop", "concurrentforeach", "concurrentloop"):
                depth, j = 1, i + 1
                while j < len(items):
                    ww = items[j][1].split()
                    if ww and ww[0] in ("foreach", "loop", "concurrentforeach", "concurrentloop"):
                        depth += 1
                    elif ww and ww[0] == "endloop":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                body = expand(items[i + 1 : j])
                var = w[1]
                if w[0].endswith("foreach"):
                    values = []
                    for v in w[2:]:
                        values = foreach_values(v, values)
                else:
                    values = [str(k) for k in range(int(w[2]), int(w[3]))]
                for v in values:
                    for bno, btext in body:
                        out.append((bno, btext.replace("${" + var + "}", v)))
                i = j + 1
            else:
                out.append((no, text))
                i += 1
        return out

    return expand(numbered)


def parse_test(path):
    with open(path, encoding="utf-8") as f:
        raw = f.read().split("\n")
    try:
        lines = expand_loops(raw)
    except ValueError as e:
        return [Record("stop", 1, reason=f"cannot expand loop: {e}")]
    records, i, skip_next, skip_mode = [], 0, False, False
    loaded = persistent = False
    n = len(lines)

    def block(start):
        sql, j = [], start
        while j < n and lines[j][1].strip() and lines[j][1].strip() != "----":
            sql.append(lines[j][1])
            j += 1
        if j < n and lines[j][1].strip() == "----":
            j += 1
            while j < n and lines[j][1].strip():
                j += 1
        return "\n".join(sql), j

    while i < n:
        no, text = lines[i]
        w = text.split()
        if not w or w[0].startswith("#"):
            i += 1
            continue
        head = w[0]
        if head in ("statement", "query"):
            sql, j = block(i + 1)
            skip = skip_next or skip_mode
            skip_next = False
            if not skip:
                if head == "statement":
                    records.append(Record("statement", no, sql, expect=w[1] if len(w) > 1 else "ok"))
                else:
                    sortmode = next((x for x in w[2:] if x in ("rowsort", "valuesort", "nosort")), "")
                    records.append(Record("query", no, sql, sortmode=sortmode))
            i = j
            continue
        if head == "skipif":
            skip_next = len(w) > 1 and w[1] == "duckdb"
        elif head == "onlyif":
            skip_next = len(w) > 1 and w[1] != "duckdb"
        elif head == "mode":
            if len(w) > 1 and w[1] == "skip":
                skip_mode = True
            elif len(w) > 1 and w[1] == "unskip":
                skip_mode = False
        elif head == "require":
            what = " ".join(w[1:])
            met = what in ALLOWED_REQUIRES or what in MET_REQUIRES
            if len(w) == 3 and w[1] == "vector_size" and w[2].isdigit():
                met = int(w[2]) <= STANDARD_VECTOR_SIZE
            if not met:
                records.append(Record("stop", no, reason="require " + what))
                return records
        elif head == "load" and not loaded:
            # The database the file works in: the gateway has one, and the
            # reference connection stays in memory (storage does not change
            # answers). A `restart` of a database file keeps its data, as
            # both sides do by going on; of `:memory:` it empties it.
            loaded, persistent = True, len(w) > 1 and w[1] != ":memory:"
        elif head == "restart" and persistent:
            pass
        elif head in ("load", "restart", "reconnect", "halt", "require-env", "unzip", "endloop"):
            records.append(Record("stop", no, reason=head))
            return records
        # other directives (hash-threshold, tags, test-env, set seed ...) are ignored
        i += 1
    return records


# --------------------------------------------------------------------------
# The gateway


class Gateway:
    def __init__(self, base, token=None, timeout=120):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.conn = None

    def post(self, sql, fmt):
        """Returns (status, content_type, body_bytes, cut) where cut says the
        body ended before the transfer was complete."""
        body = json.dumps({"sql": sql, "format": fmt, "max_rows": 100_000_000})
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = "Bearer " + self.token
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.request("POST", self.prefix + "/query", body, headers)
                r = self.conn.getresponse()
                cut = False
                try:
                    data = r.read()
                except http.client.IncompleteRead as e:
                    data, cut = e.partial, True
                    self.conn.close()
                    self.conn = None
                if r.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, r.getheader("content-type", ""), data, cut
            except (http.client.HTTPException, ConnectionError, OSError) as e:
                if self.conn:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    return 0, "", str(e).encode(), True
        raise AssertionError("unreachable")

    def rows(self, sql):
        st, _, data, _ = self.post(sql, "json")
        if st != 200:
            raise RuntimeError(f"{st}: {data[:300]!r}")
        return json.loads(data)["rows"]


def problem(data):
    try:
        p = json.loads(data)
        return p if isinstance(p, dict) else {}
    except ValueError:
        return {}


def is_policy_refusal(status, data):
    p = problem(data)
    text = " ".join(str(p.get(k, "")) for k in ("type", "title")).lower()
    return status == 403 and ("forbidden" in text or "not allowed" in text or "refus" in text)


def qident(name):
    return '"' + name.replace('"', '""') + '"'


def cleanup(gw):
    """Drop every object left in the gateway's database (views, tables,
    sequences, types, then non-default schemas)."""
    listings = [
        ("VIEW", "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary"),
        ("TABLE", "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary"),
        ("SEQUENCE", "SELECT schema_name, sequence_name FROM duckdb_sequences() WHERE NOT temporary"),
        ("TYPE", "SELECT schema_name, type_name FROM duckdb_types() WHERE NOT internal AND database_name = current_database()"),
        ("SCHEMA", "SELECT NULL, schema_name FROM duckdb_schemas() WHERE NOT internal AND database_name = current_database() "
                   "AND schema_name NOT IN ('main', 'client', 'pg_catalog', 'information_schema')"),
    ]
    left = []
    for _ in range(3):
        left = []
        for kind, q in listings:
            try:
                objs = gw.rows(q)
            except Exception as e:  # noqa: BLE001
                left.append(f"list {kind}: {e}")
                continue
            for schema, name in objs:
                target = (qident(schema) + "." if schema else "") + qident(name)
                st, _, data, _ = gw.post(f"DROP {kind} IF EXISTS {target} CASCADE", "json")
                if st != 200:
                    left.append(f"DROP {kind} {target}: {st} {data[:120]!r}")
        if not left:
            return []
    return left


# --------------------------------------------------------------------------
# DuckDB, the reference

LEAF_NATIVE = {"varchar", "blob", "boolean", "float", "double", "null"}


def tid(t):
    return t.id.lower()


def members(t):
    """(name, type) of a STRUCT / UNION type (without the union's tag)."""
    ch = list(t.children)
    return ch[1:] if tid(t) == "union" else ch


def norm_expr(e, t, depth=0):
    """SQL that rebuilds `e` of type `t` with every lossy leaf as DuckDB's
    VARCHAR text, so Python fetches it without conversion."""
    k = tid(t)
    x = f"__x{depth}"
    if k in ("list", "array"):
        return f"list_transform({e}, lambda {x}: {norm_expr(x, t.children[0][1], depth + 1)})"
    if k == "struct":
        fields = ", ".join(
            f"f{i} := {norm_expr(f'struct_extract_at({e}, {i})', ft, depth + 1)}"
            for i, (_, ft) in enumerate(t.children, 1)
        )
        return f"CASE WHEN ({e}) IS NULL THEN NULL ELSE struct_pack({fields}) END"
    if k == "map":
        vt = t.children[1][1]
        return (
            f"list_transform(map_entries({e}), lambda {x}: struct_pack(k := CAST({x}.key AS VARCHAR), "
            f"v := {norm_expr(x + '.value', vt, depth + 1)}))"
        )
    if k == "union":
        fields = ", ".join(
            f"m{i} := {norm_expr(f'union_extract({e}, ' + sqlstr(name) + ')', mt, depth + 1)}"
            for i, (name, mt) in enumerate(members(t), 1)
        )
        return f"CASE WHEN ({e}) IS NULL THEN NULL ELSE struct_pack(tag := CAST(union_tag({e}) AS VARCHAR), {fields}) END"
    if k == "variant":
        # DuckDB's JSON of the value: the gateway's JSON answers carry it.
        return f"CAST({e} AS JSON)"
    if k == "timestamp with time zone":
        # The instant DuckDB holds, as its text in UTC (the harness's time
        # zone). ICU's text of it is a millisecond off at the very end of
        # the range (294247-01-10 04:00:54.776806+00 for the microsecond
        # count of ...54.775806, which DuckDB's own test_all_types.test_slow
        # expects): DuckDB's text without ICU, from the microsecond count.
        return (f"CASE WHEN isinf({e}) THEN CAST({e} AS VARCHAR) "
                f"ELSE CAST(make_timestamp(epoch_us({e})) AS VARCHAR) || '+00' END")
    if k in LEAF_NATIVE:
        return e
    return f"CAST({e} AS VARCHAR)"


def sqlstr(s):
    return "'" + s.replace("'", "''") + "'"


def arrow_mapped_type(t):
    """The SQL type of DuckDB's values of `t` as the gateway's Arrow answers
    carry them (docs/api.md "Arrow"): DuckDB 1.5.5's Arrow export has no type
    for VARIANT or TYPE, so a VARIANT is its JSON (`CAST(v AS JSON)`), a TYPE
    its VARCHAR text, wherever they are in `t`. None when `t` has neither."""
    k = tid(t)
    if k == "variant":
        return "JSON"
    if k == "type":
        return "VARCHAR"
    if k in ("list", "array"):
        inner = arrow_mapped_type(t.children[0][1])
        if inner is None:
            return None
        return f"{inner}[]" if k == "list" else f"{inner}[{t.children[1][1]}]"
    if k in ("struct", "union", "map"):
        fields = members(t)
        mapped = [arrow_mapped_type(ft) for _, ft in fields]
        if all(m is None for m in mapped):
            return None
        parts = [m or str(ft) for m, (_, ft) in zip(mapped, fields)]
        if k == "map":
            return f"MAP({parts[0]}, {parts[1]})"
        return ("STRUCT(" if k == "struct" else "UNION(") + ", ".join(
            f"{qident(name)} {part}" for (name, _), part in zip(fields, parts)) + ")"
    return None


def variant_paths(t, path=()):
    """Where `t` holds VARIANT values: paths of child positions (a list's or
    an array's element 0, a struct's field, a union's member and a map's key
    0 or value 1 by position), as the gateway marks them."""
    k = tid(t)
    if k == "variant":
        return [path]
    if k in ("list", "array"):
        return variant_paths(t.children[0][1], path + (0,))
    if k in ("struct", "union", "map"):
        return [p for i, (_, ft) in enumerate(members(t)) for p in variant_paths(ft, path + (i,))]
    return []


def dedup_names(names):
    """DuckDB's rule for repeated names (as COPY writes them): a, a, A ->
    a, a_1, A_2."""
    out, counts, used = [], collections.Counter(), set()
    for n in names:
        low = n.lower()
        if low in used:
            k = counts[low]
            while True:
                k += 1
                cand = f"{n}_{k}"
                if cand.lower() not in used:
                    break
            counts[low] = k
            n = cand
            low = n.lower()
        used.add(low)
        out.append(n)
    return out


class Ref:
    """DuckDB's answer to one query."""

    def __init__(self):
        self.error = None
        self.columns = []
        self.types = []
        self.rows = None  # normalized rows, or None when not available
        self.rows_error = None
        self.csv = None  # bytes of COPY
        self.csv_error = None
        self.arrow = None
        self.parquet = None  # path of DuckDB's own Parquet file of the query
        self.parquet_error = None
        self.arrow_error = None
        self.interval_overflow = False


def strip_sql(q):
    """The statement without its final `;` and trailing line comments, so it
    can be wrapped as a subquery."""
    q = q.strip()
    while True:
        stripped = re.sub(r"(;|\n\s*--[^\n]*|;\s*--[^\n]*)\s*$", "", q).strip()
        if stripped == q:
            return q
        q = stripped


def reference(con, q, tmpdir, want_arrow):
    ref = Ref()
    body = strip_sql(q)
    try:  # DuckDB's own cut of the statement (drops trailing comments)
        parts = con.extract_statements(body)
        if len(parts) == 1:
            body = strip_sql(parts[0].query)
    except duckdb.Error:
        pass
    try:
        rel = con.sql(body)
        if rel is None:
            ref.error = "no result"
            return ref
        ref.columns = list(rel.columns)
        ref.types = list(rel.types)
    except duckdb.Error as e:
        ref.error = f"{type(e).__name__}: {e}"
        return ref
    aliases = ", ".join(f"__c{i}" for i in range(len(ref.columns)))
    exprs = ", ".join(norm_expr(f"__r.__c{i}", t) for i, t in enumerate(ref.types))
    try:
        ref.rows = con.sql(f"SELECT {exprs} FROM ({body}\n) AS __r({aliases})").fetchall()
    except duckdb.Error as e:
        ref.rows_error = f"{type(e).__name__}: {e}"
    path = os.path.join(tmpdir, "ref.csv")
    # COPY takes a query; DESCRIBE, SUMMARIZE, SHOW ... only as a subquery.
    for copy_of in (body, f"SELECT * FROM ({body}\n)"):
        try:
            con.execute(f"COPY ({copy_of}\n) TO '{path}' (FORMAT csv, HEADER)")
            with open(path, "rb") as f:
                ref.csv, ref.csv_error = f.read(), None
            break
        except duckdb.Error as e:
            ref.csv_error = ref.csv_error or f"{type(e).__name__}: {e}"
    reference.n = getattr(reference, "n", 0) + 1
    ppath = os.path.join(tmpdir, f"ref-{reference.n}.parquet")
    for copy_of in (body, f"SELECT * FROM ({body}\n)"):
        try:
            con.execute(f"COPY ({copy_of}\n) TO '{ppath}' (FORMAT parquet)")
            ref.parquet, ref.parquet_error = ppath, None
            break
        except duckdb.Error as e:
            ref.parquet_error = ref.parquet_error or f"{type(e).__name__}: {e}"
    if want_arrow:
        # What DuckDB's export has no Arrow type for (VARIANT, TYPE) is
        # mapped as documented, by DuckDB itself.
        mapped = [arrow_mapped_type(t) for t in ref.types]
        arrow_sql = body
        if any(m is not None for m in mapped):
            cols = ", ".join(
                f"__r.__c{i}" if m is None else f"CAST(__r.__c{i} AS {m})"
                for i, m in enumerate(mapped)
            )
            arrow_sql = f"SELECT {cols} FROM ({body}\n) AS __r({aliases})"
        try:
            ref.arrow = con.sql(arrow_sql).arrow()
            if hasattr(ref.arrow, "read_all"):
                ref.arrow = ref.arrow.read_all()
            if arrow_sql is not body:
                ref.arrow = ref.arrow.rename_columns(ref.columns)
        except (duckdb.Error, OSError, pyarrow.ArrowException) as e:
            # DuckDB's export has no Arrow type for the value (pyarrow
            # raises DuckDB's "Unsupported Arrow type" as an OSError).
            ref.arrow, ref.arrow_error = None, f"{type(e).__name__}: {e}"
        # Does any INTERVAL column hold a time part beyond Arrow's
        # nanoseconds (DuckDB's own check of its own values)?
        checks = [
            f"bool_or(abs(datepart('hour', __r.__c{i})::HUGEINT * 3600000000 + datepart('minute', __r.__c{i}) * 60000000"
            f" + datepart('microseconds', __r.__c{i})) > 9223372036854775)"
            for i, t in enumerate(ref.types)
            if str(t) == "INTERVAL"
        ]
        if checks:
            try:
                row = con.sql(f"SELECT {', '.join(checks)} FROM ({body}\n) AS __r({aliases})").fetchone()
                ref.interval_overflow = any(bool(v) for v in row)
            except duckdb.Error:
                pass
    return ref


# --------------------------------------------------------------------------
# Comparing one JSON value with DuckDB's


class Obj(list):
    """A JSON object as its ordered (key, value) pairs (repeated keys kept)."""


def load_json(text):
    return json.loads(text, parse_float=Decimal, object_pairs_hook=Obj)


INTS = {"tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint",
        "uinteger", "ubigint", "uhugeint", "bignum", "varint"}
DATE_RE = re.compile(r"^(\d+)-(\d\d)-(\d\d)( \(BC\))?$")
TS_RE = re.compile(r"^(\d+)-(\d\d)-(\d\d)( \(BC\))? (\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-]\d\d(?::?\d\d)?(?::?\d\d)?)?$")
ISO_TS_RE = re.compile(r"^([+-]?\d{4,})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d(?::?\d\d)?(?::?\d\d)?)?)?$")
TIME_RE = re.compile(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")


def offset_seconds(s):
    if not s or s == "Z":
        return 0
    sign = -1 if s[0] == "-" else 1
    digits = s[1:].replace(":", "")
    h, m, sec = int(digits[0:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
    return sign * (h * 3600 + m * 60 + sec)


def frac(s):
    return (s or "").rstrip("0")


def canon_duckdb_temporal(text):
    """DuckDB's text of a DATE / TIMESTAMP* value as a comparable tuple."""
    if text in ("infinity", "-infinity"):
        return text
    m = DATE_RE.match(text)
    if m:
        y = int(m.group(1))
        return (1 - y if m.group(4) else y, int(m.group(2)), int(m.group(3)))
    m = TS_RE.match(text)
    if m:
        y = int(m.group(1))
        y = 1 - y if m.group(4) else y
        return (y, int(m.group(2)), int(m.group(3)), int(m.group(5)), int(m.group(6)),
                int(m.group(7)), frac(m.group(8)), offset_seconds(m.group(9)))
    return ("?", text)


def canon_iso_temporal(text, with_time):
    if text in ("infinity", "-infinity"):
        return text
    m = ISO_TS_RE.match(text)
    if not m:
        return ("?", text)
    d = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if not with_time:
        return d if m.group(4) is None else ("?", text)
    if m.group(4) is None:
        return ("?", text)
    return d + (int(m.group(4)), int(m.group(5)), int(m.group(6)), frac(m.group(7)), offset_seconds(m.group(8)))


def canon_time(text):
    m = TIME_RE.match(text)
    if not m:
        return ("?", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), frac(m.group(4)))


def short(v, n=120):
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= n else s[: n - 3] + "..."


def float_bits(v, single):
    return struct.pack("<f" if single else "<d", v)


def match(t, ref, got, path="$"):
    """None when the gateway's JSON value `got` is DuckDB's value `ref`
    (normalized, see norm_expr) of type `t`; otherwise what differs."""
    def differ(want):
        return f"{path}: duckdb {short(want)} gateway {short(got)} ({t})"

    k = tid(t)
    if k == "union" and ref is not None:
        for i, (name, mt) in enumerate(members(t), 1):
            if name == ref["tag"]:
                return match(mt, ref[f"m{i}"], got, f"{path}<{name}>")
        return differ(ref)
    if ref is None:
        return None if got is None else differ(None)
    if k == "variant":  # its JSON may be `null` (a VARIANT holding null)
        want = variant_json(ref)
        return None if same_json(want, got) else differ(want)
    if got is None:
        return differ(ref)
    if k in ("list", "array"):
        if not isinstance(got, list) or len(got) != len(ref):
            return differ(ref)
        ct = t.children[0][1]
        for i, (r, g) in enumerate(zip(ref, got)):
            d = match(ct, r, g, f"{path}[{i}]")
            if d:
                return d
        return None
    if k == "struct":
        fields = list(t.children)
        values = [ref[f"f{i}"] for i in range(1, len(fields) + 1)]
        if all(name == "" for name, _ in fields):
            if not isinstance(got, list) or isinstance(got, Obj) or len(got) != len(values):
                return differ(values) + " (unnamed struct: a JSON array)"
            pairs = list(zip(range(len(values)), got))
        else:
            want_keys = dedup_names([name for name, _ in fields])
            if not isinstance(got, Obj) or [kk for kk, _ in got] != want_keys:
                return f"{path}: keys duckdb {want_keys} gateway {short([kk for kk, _ in got] if isinstance(got, Obj) else got)}"
            pairs = list(zip(want_keys, [v for _, v in got]))
        for (key, g), r, (_, ft) in zip(pairs, values, fields):
            d = match(ft, r, g, f"{path}.{key}")
            if d:
                return d
        return None
    if k == "map":
        want_keys = [e["k"] for e in ref]
        if not isinstance(got, Obj) or [kk for kk, _ in got] != want_keys:
            return f"{path}: map keys duckdb {short(want_keys)} gateway {short(got)}"
        vt = t.children[1][1]
        for (kk, g), e in zip(got, ref):
            d = match(vt, e["v"], g, f"{path}[{kk!r}]")
            if d:
                return d
        return None
    if k in INTS:
        v = int(ref)
        # Inside a nested value a UHUGEINT or BIGNUM is always DuckDB's text.
        nested = k in ("uhugeint", "bignum", "varint") and not re.fullmatch(r"col\d+", path)
        want = v if abs(v) <= MAX_SAFE and not nested else str(v)
        ok = type(got) is type(want) and got == want
        return None if ok else differ(want)
    if k == "decimal":
        v = Decimal(ref)
        scale = t.children[1][1]
        unscaled = abs(int(v.scaleb(scale)))
        if isinstance(got, bool) or not isinstance(got, (int, Decimal, str)):
            return differ(ref)
        try:
            g = Decimal(got) if not isinstance(got, Decimal) else got
        except ArithmeticError:
            return differ(ref)
        if g != v:
            return differ(ref)
        if isinstance(got, str) and unscaled <= MAX_SAFE:
            return differ(ref) + " (a string, expected a number)"
        if not isinstance(got, str) and unscaled > MAX_SAFE:
            return differ(ref) + " (a number beyond 2^53, expected a string)"
        return None
    if k in ("float", "double"):
        single = k == "float"
        specials = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if math.isnan(ref) or math.isinf(ref):
            want = "NaN" if math.isnan(ref) else ("Infinity" if ref > 0 else "-Infinity")
            return None if got == want else differ(want)
        if isinstance(got, bool) or not isinstance(got, (int, Decimal)):
            return differ(ref) if got not in specials else differ(ref)
        try:
            ok = float_bits(float(got), single) == float_bits(ref, single)
        except (OverflowError, struct.error):
            ok = False
        return None if ok else differ(ref)
    if k == "boolean":
        return None if got is ref else differ(ref)
    if k == "varchar":
        return None if got == ref else differ(ref)
    if k == "blob":
        want = base64.b64encode(ref).decode()
        return None if got == want else differ(want)
    if k == "date":
        if not isinstance(got, str):
            return differ(ref)
        return None if canon_iso_temporal(got, False) == canon_duckdb_temporal(ref) else differ(ref)
    if k.startswith("timestamp"):
        if not isinstance(got, str):
            return differ(ref)
        return None if canon_iso_temporal(got, True) == canon_duckdb_temporal(ref) else differ(ref)
    if k in ("time", "time_ns"):
        if not isinstance(got, str):
            return differ(ref)
        return None if canon_time(got) == canon_time(ref) else differ(ref)
    # INTERVAL, TIME WITH TIME ZONE, BIT, UUID, ENUM and anything else:
    # DuckDB's own text.
    return None if got == ref else differ(ref)


def variant_json(text):
    """DuckDB's JSON of a VARIANT (`CAST(v AS JSON)`) as the gateway's JSON
    answers carry it (docs/api.md "JSON values"): NaN and the infinities,
    which DuckDB writes bare, as strings; integers beyond 2^53 as strings."""
    def integer(x):
        v = int(x)
        return v if abs(v) <= MAX_SAFE else x

    return json.loads(text, parse_float=Decimal, parse_int=integer, parse_constant=str,
                      object_pairs_hook=Obj)


def same_json(want, got):
    """Structural equality of two loaded JSON values (object keys in order,
    booleans apart from numbers)."""
    if isinstance(want, Obj) or isinstance(got, Obj):
        return (isinstance(want, Obj) and isinstance(got, Obj) and len(want) == len(got)
                and all(a[0] == b[0] and same_json(a[1], b[1]) for a, b in zip(want, got)))
    if isinstance(want, list) or isinstance(got, list):
        return (isinstance(want, list) and isinstance(got, list) and len(want) == len(got)
                and all(same_json(a, b) for a, b in zip(want, got)))
    if isinstance(want, bool) or isinstance(got, bool) or want is None or got is None:
        return want is got
    return type(want) is type(got) and want == got or (
        isinstance(want, (int, Decimal)) and isinstance(got, (int, Decimal)) and Decimal(want) == Decimal(got))


def row_key(row):
    return json.dumps(row, sort_keys=False, default=str)


def compare_rows(types, ref_rows, got_rows, ordered):
    """None when equal; else a description of the first difference."""
    if len(ref_rows) != len(got_rows):
        return f"row count duckdb {len(ref_rows)} gateway {len(got_rows)}"

    def row_diff(r, g):
        if not isinstance(g, list) or len(g) != len(r):
            return f"row shape {short(g)}"
        for i, (t, rv, gv) in enumerate(zip(types, r, g)):
            d = match(t, rv, gv, f"col{i + 1}")
            if d:
                return d
        return None

    if ordered:
        for n, (r, g) in enumerate(zip(ref_rows, got_rows)):
            d = row_diff(r, g)
            if d:
                return f"row {n}: {d}"
        return None
    # Multiset: pair each gateway row with an equal DuckDB row, looked for
    # among the rows whose integers, strings and booleans are the same.
    def key(row, gateway):
        out = []
        for t, v in zip(types, row if isinstance(row, (list, tuple)) else []):
            k = tid(t)
            if k not in INTS and k not in ("varchar", "boolean"):
                out.append("*")
            elif v is None:
                out.append(None)
            elif k in INTS and not isinstance(v, (bool, float, Decimal)):
                try:
                    out.append(int(v))
                except (TypeError, ValueError):
                    out.append("?")
            elif k in ("varchar", "boolean"):
                out.append(v)
            else:
                out.append("*")
        return tuple(out)

    buckets = collections.defaultdict(list)
    for idx, r in enumerate(ref_rows):
        buckets[key(r, False)].append(idx)
    for n, g in enumerate(got_rows):
        candidates = buckets.get(key(g, True), [])
        hit = next((i for i, idx in enumerate(candidates) if row_diff(ref_rows[idx], g) is None), None)
        if hit is None:
            # Explain against the DuckDB row at the same position.
            first = row_diff(ref_rows[n], g) if n < len(ref_rows) else "extra row"
            return f"row {n} (unordered, no equal DuckDB row): {first}"
        candidates.pop(hit)
    return None


def has_order_by(sql):
    """Whether the statement orders its rows: an ORDER BY outside any
    parentheses (one in a window or a subquery does not order the result)."""
    text = re.sub(r"'(?:[^']|'')*'", "''", sql)
    while True:
        flat = re.sub(r"\([^()]*\)", " ", text)
        if flat == text:
            break
        text = flat
    return re.search(r"\border\s+by\b", text, re.I) is not None


# --------------------------------------------------------------------------
# One query, one format


class Outcome:
    def __init__(self, status, detail=""):
        self.status = status
        self.detail = detail


def gateway_failure(status, data, cut, ref, tainted):
    """Classify a gateway answer that is not a complete 200."""
    p = problem(data)
    what = f"{status} {p.get('type', '')} {short(p.get('detail', data[:200].decode('utf-8', 'replace')), 200)}"
    if ref.error is not None:
        if 400 <= status < 500:
            return Outcome("both_fail", f"duckdb: {short(ref.error, 150)} | gateway: {what}")
        return Outcome("wrong", f"duckdb fails ({short(ref.error, 100)}) and gateway {what}")
    if is_policy_refusal(status, data):
        return Outcome("refused", f"gateway refused: {what}")
    if status == 400 and ".client." in str(p.get("detail", "")) and "does not exist" in str(p.get("detail", "")):
        # Clients' objects live in schema `client` (docs/security.md): a
        # name the file qualifies with `main.` is not theirs.
        return Outcome("refused", f"client schema: {what}")
    if tainted and 400 <= status < 500:
        return Outcome("refused", f"after refused setup ({short(tainted, 80)}): {what}")
    if cut:
        return Outcome("wrong", f"cut body after {len(data)} bytes: {short(data[-200:].decode('utf-8', 'replace'))}")
    return Outcome("wrong", f"gateway error, duckdb succeeds: {what}")


def after_taint(outcome, tainted):
    """A difference after a setup statement the policy refused is the
    refusal's consequence, not a fidelity defect."""
    if tainted and outcome.status == "wrong":
        return Outcome("refused", f"after refused setup ({short(tainted, 80)}): {outcome.detail}")
    return outcome


def check_json(gw, q, ref, tainted, type_mismatch):
    status, ctype, data, cut = gw.post(q, "json")
    if status != 200 or cut:
        return gateway_failure(status, data, cut, ref, tainted)
    if ref.error is not None:
        return Outcome("wrong", f"gateway answers 200, duckdb fails: {short(ref.error, 150)}")
    try:
        doc = load_json(data)
        doc = dict(doc)
    except ValueError as e:
        return Outcome("wrong", f"invalid JSON ({e}): {short(data[-200:].decode('utf-8', 'replace'))}")
    cols = [dict(c) for c in doc.get("columns", [])]
    names = [c.get("name") for c in cols]
    types = [c.get("type") for c in cols]
    want_types = [str(t) for t in ref.types]
    if types != want_types:
        type_mismatch.append({"duckdb": want_types, "gateway": types})
    if names != ref.columns:
        return Outcome("wrong", f"column names duckdb {ref.columns} gateway {names}")
    if doc.get("truncated"):
        return Outcome("wrong", "truncated")
    if ref.rows is None:
        return Outcome("skipped", f"no normalized reference: {ref.rows_error}")
    rows = doc.get("rows", [])
    if doc.get("row_count") != len(rows):
        return Outcome("wrong", f"row_count {doc.get('row_count')} but {len(rows)} rows")
    d = compare_rows(ref.types, ref.rows, rows, has_order_by(q))
    return Outcome("wrong", d) if d else Outcome("same")


def check_ndjson(gw, q, ref, tainted):
    status, ctype, data, cut = gw.post(q, "ndjson")
    if status != 200 or cut:
        return gateway_failure(status, data, cut, ref, tainted)
    text = data.decode("utf-8", "replace")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    objs = []
    for ln in lines:
        try:
            objs.append(load_json(ln))
        except ValueError as e:
            return Outcome("wrong", f"invalid NDJSON line ({e}): {short(ln)}")
    if objs and isinstance(objs[-1], Obj) and [k for k, _ in objs[-1]] == ["error"]:
        err = dict(objs[-1])["error"]
        if ref.error is not None:
            return Outcome("both_fail", f"late error record: {short(json.dumps(err, default=str), 150)}")
        return Outcome("wrong", f"error record, duckdb succeeds: {short(json.dumps(err, default=str), 200)}")
    if ref.error is not None:
        return Outcome("wrong", f"gateway answers 200, duckdb fails: {short(ref.error, 150)}")
    if ref.rows is None:
        return Outcome("skipped", f"no normalized reference: {ref.rows_error}")
    if ref.csv is not None:
        header = next(csv.reader(io.StringIO(ref.csv.decode("utf-8", "replace"))), [])
    else:
        header = dedup_names(ref.columns)
    rows = []
    for o in objs:
        if not isinstance(o, Obj) or [k for k, _ in o] != header:
            return Outcome("wrong", f"keys duckdb {short(header)} gateway {short([k for k, _ in o] if isinstance(o, Obj) else o)}")
        rows.append([v for _, v in o])
    d = compare_rows(ref.types, ref.rows, rows, has_order_by(q))
    return Outcome("wrong", d) if d else Outcome("same")


def check_csv(gw, q, ref, tainted):
    status, ctype, data, cut = gw.post(q, "csv")
    if status != 200 or cut:
        return gateway_failure(status, data, cut, ref, tainted)
    if ref.error is not None:
        return Outcome("wrong", f"gateway answers 200, duckdb fails: {short(ref.error, 150)}")
    if ref.csv is None:
        return Outcome("skipped", f"no COPY reference: {short(ref.csv_error or '', 150)}")
    if data == ref.csv:
        return Outcome("same")
    want, got = ref.csv.split(b"\n"), data.split(b"\n")
    if not has_order_by(q) and want[:1] == got[:1] and sorted(want) == sorted(got):
        return Outcome("same")
    for n, (a, b) in enumerate(zip(want, got)):
        if a != b:
            return Outcome("wrong", f"line {n + 1}: duckdb {short(a.decode('utf-8', 'replace'))!r} gateway {short(b.decode('utf-8', 'replace'))!r}")
    return Outcome("wrong", f"length duckdb {len(ref.csv)} bytes gateway {len(data)} bytes")


def check_parquet(gw, q, ref, tainted, con, tmpdir):
    """The gateway's Parquet body, read back by DuckDB, against the file
    DuckDB writes in-process for the same query: the same column names,
    types and values."""
    status, ctype, data, cut = gw.post(q, "parquet")
    if status != 200 or cut:
        if 400 <= status < 500 and not cut and ref.error is None and ref.parquet is None:
            # DuckDB's own COPY fails too (a value Parquet cannot hold).
            return Outcome("both_fail", f"duckdb COPY: {short(ref.parquet_error or '', 100)} | gateway: {status} "
                                        f"{short(problem(data).get('detail', ''), 100)}")
        return gateway_failure(status, data, cut, ref, tainted)
    if ref.error is not None:
        return Outcome("wrong", f"gateway answers 200, duckdb fails: {short(ref.error, 150)}")
    if ref.parquet is None:
        return Outcome("wrong", f"gateway answers 200, duckdb's COPY fails: {short(ref.parquet_error or '', 150)}")
    # A new name each time: DuckDB caches what it read of a file by path,
    # and a rewrite of the same size within a second looks unchanged.
    check_parquet.n = getattr(check_parquet, "n", 0) + 1
    path = os.path.join(tmpdir, f"got-{check_parquet.n}.parquet")
    with open(path, "wb") as f:
        f.write(data)

    def read(p):
        rel = con.sql(f"SELECT * FROM read_parquet({sqlstr(p)})")
        schema = list(zip(rel.columns, map(str, rel.types)))
        # Values as DuckDB's own text: Python cannot hold every value
        # (intervals, infinite dates), and DuckDB is the authority; where
        # DuckDB cannot cast what it read back (unions), Python's values.
        try:
            rows = con.sql(f"SELECT COLUMNS(*)::VARCHAR FROM read_parquet({sqlstr(p)})").fetchall()
        except duckdb.Error:
            rows = rel.fetchall()
        return schema, [repr(r) for r in rows]

    try:
        want_schema, want_rows = read(ref.parquet)
    except (duckdb.Error, OverflowError, ValueError) as e:
        return Outcome("skipped", f"DuckDB cannot read its own Parquet back: {short(str(e), 100)}")
    try:
        got_schema, got_rows = read(path)
    except (duckdb.Error, OverflowError, ValueError) as e:
        return Outcome("wrong", f"unreadable Parquet body: {short(str(e), 150)}")
    if got_schema != want_schema:
        return Outcome("wrong", f"schema duckdb {short(want_schema)} gateway {short(got_schema)}")
    if not has_order_by(q):
        got_rows, want_rows = sorted(got_rows), sorted(want_rows)
    if got_rows == want_rows:
        return Outcome("same")
    for n, (a, b) in enumerate(zip(want_rows, got_rows)):
        if a != b:
            return Outcome("wrong", f"row {n + 1}: duckdb {short(a)} gateway {short(b)}")
    return Outcome("wrong", f"rows duckdb {len(want_rows)} gateway {len(got_rows)}")


def arrow_as_documented(table, types):
    """DuckDB's Arrow export with the gateway's documented exception:
    UHUGEINT columns (DuckDB exports the bits as a signed decimal128) as
    decimal256(39, 0) holding the unsigned value."""
    import decimal

    for i, t in enumerate(types):
        if str(t) != "UHUGEINT" or not pyarrow.types.is_decimal128(table.schema.field(i).type):
            continue
        values = [
            None if v is None else decimal.Decimal(int(v) + (1 << 128 if v < 0 else 0))
            for v in table.column(i).to_pylist()
        ]
        field = table.schema.field(i).with_type(pyarrow.decimal256(39, 0))
        table = table.set_column(i, field, pyarrow.array(values, type=pyarrow.decimal256(39, 0)))
    return table


def check_arrow(gw, q, ref, tainted):
    status, ctype, data, cut = gw.post(q, "arrow")
    if status == 400 and ref.interval_overflow and b"nanosecond range" in data:
        # Documented: Arrow's INTERVAL cannot hold it; the gateway says so.
        return Outcome("same")
    if status != 200 or cut:
        return gateway_failure(status, data, cut, ref, tainted)
    try:
        got = pyarrow.ipc.open_stream(data).read_all()
    except Exception as e:  # noqa: BLE001
        return Outcome("wrong", f"unreadable IPC stream: {e}")
    return compare_arrow(q, got, ref)


def compare_arrow(q, got, ref):
    """An Arrow answer the gateway gave (200) against DuckDB's own."""
    if ref.interval_overflow:
        return Outcome("wrong", "an INTERVAL beyond Arrow's range arrived as Arrow")
    if ref.error is not None:
        return Outcome("wrong", f"gateway answers 200, duckdb fails: {short(ref.error, 150)}")
    if ref.arrow is None:
        return Outcome("skipped", f"no Arrow reference: {short(ref.arrow_error or '', 150)}")
    want = arrow_as_documented(ref.arrow, ref.types)
    for i, t in enumerate(ref.types):
        for path in variant_paths(t):
            if i >= len(got.schema) or not is_json_extension(got.schema.field(i).type, path):
                return Outcome("wrong", f"column {i + 1}: a VARIANT at {list(path)} is not arrow.json in "
                                        f"{short(str(got.schema.field(i).type) if i < len(got.schema) else '')}")
    got = plain_storage(got)
    if not got.schema.equals(want.schema):
        differ = [(w, g) for w, g in zip(want.schema, got.schema) if not w.equals(g)]
        w, g = differ[0] if differ and len(want.schema) == len(got.schema) else (want.schema, got.schema)
        return Outcome("wrong", f"schema duckdb {short(str(w), 300)} gateway {short(str(g), 300)}")
    # Rows by repr: NaN equals NaN, as DuckDB's values do.
    if has_order_by(q):
        same = arrow_rows(got) == arrow_rows(want)
    else:
        same = sorted(arrow_rows(got)) == sorted(arrow_rows(want))
    if not same and re.match(r"\s*explain\b", q, re.I) and ".client." in str(got.to_pylist()):
        # The plan names the tables where they are: clients' objects live in
        # schema `client` (docs/security.md), DuckDB's in `main`.
        return Outcome("refused", "client schema: the plan names schema client, DuckDB's main")
    return Outcome("same") if same else Outcome("wrong", "values differ")


class Flight:
    """The gateway's Flight SQL listener through ADBC's Flight SQL driver."""

    # gRPC status names in the driver's messages, as the HTTP status the
    # same problem answers (docs/flight.md "Errors").
    CODES = {"InvalidArgument": 400, "INVALID_ARGUMENT": 400, "PermissionDenied": 403,
             "PERMISSION_DENIED": 403, "ResourceExhausted": 413, "RESOURCE_EXHAUSTED": 413,
             "Unauthenticated": 401, "UNAUTHENTICATED": 401, "FailedPrecondition": 400,
             "FAILED_PRECONDITION": 400, "DeadlineExceeded": 504, "DEADLINE_EXCEEDED": 504}

    def __init__(self, uri, token=None):
        import adbc_driver_flightsql as af
        import adbc_driver_flightsql.dbapi as fs

        kw = {}
        if token:
            kw[af.DatabaseOptions.AUTHORIZATION_HEADER.value] = "Bearer " + token
        self.conn = fs.connect(uri, db_kwargs=kw, autocommit=True)

    def read(self, q):
        """(table, None) or (None, (http-like status, message))."""
        cur = self.conn.cursor()
        try:
            cur.execute(q)
            return cur.fetch_arrow_table(), None
        except Exception as e:  # noqa: BLE001  (the driver's errors, by gRPC code)
            text = str(e)
            status = next((v for k, v in self.CODES.items() if k in text), 500)
            return None, (status, text)
        finally:
            try:
                cur.close()
            except Exception:  # noqa: BLE001
                pass


def check_flight(fl, q, ref, tainted):
    got, err = fl.read(q)
    if err is not None:
        status, text = err
        if status == 400 and ref.interval_overflow and "nanosecond range" in text:
            return Outcome("same")
        body = json.dumps({"type": "urn:duckgate:problem:statement-forbidden" if status == 403 else "",
                           "detail": text}).encode()
        return gateway_failure(status, body, False, ref, tainted)
    return compare_arrow(q, got, ref)


def child_types(t):
    """The child types of an Arrow type, in the order `variant_paths` counts."""
    if pyarrow.types.is_map(t):
        return [t.key_type, t.item_type]
    if isinstance(t, (pyarrow.ListType, pyarrow.LargeListType, pyarrow.FixedSizeListType)):
        return [t.value_type]
    if pyarrow.types.is_struct(t) or pyarrow.types.is_union(t):
        return [t.field(i).type for i in range(t.num_fields)]
    return []


def is_json_extension(t, path):
    """Whether the type at `path` below `t` is Arrow's canonical JSON
    extension type (`arrow.json`)."""
    for i in path:
        children = child_types(t)
        if i >= len(children):
            return False
        t = children[i]
    return isinstance(t, pyarrow.BaseExtensionType) and t.extension_name == "arrow.json"


def plain_storage(table):
    """`table` with extension types as their storage (the gateway's
    `arrow.json` VARIANTs as the strings DuckDB's JSON export gives)."""
    def plain(t):
        if isinstance(t, pyarrow.BaseExtensionType) and t.extension_name == "arrow.json":
            return plain(t.storage_type)
        if pyarrow.types.is_map(t):
            return pyarrow.map_(pyarrow.field(t.key_field.name, plain(t.key_type), t.key_field.nullable),
                                pyarrow.field(t.item_field.name, plain(t.item_type), t.item_field.nullable),
                                t.keys_sorted)
        if isinstance(t, pyarrow.ListType):
            return pyarrow.list_(t.value_field.with_type(plain(t.value_type)))
        if isinstance(t, pyarrow.LargeListType):
            return pyarrow.large_list(t.value_field.with_type(plain(t.value_type)))
        if isinstance(t, pyarrow.FixedSizeListType):
            return pyarrow.list_(t.value_field.with_type(plain(t.value_type)), t.list_size)
        if pyarrow.types.is_struct(t):
            return pyarrow.struct([t.field(i).with_type(plain(t.field(i).type)) for i in range(t.num_fields)])
        return t

    fields = [f.with_type(plain(f.type)) for f in table.schema]
    if all(f.type == g.type for f, g in zip(fields, table.schema)):
        return table
    columns = []
    for f, col in zip(fields, table.columns):
        if f.type == col.type:
            columns.append(col)
            continue
        columns.append(pyarrow.chunked_array([plain_array(c, f.type) for c in col.chunks], type=f.type))
    return pyarrow.table(columns, schema=pyarrow.schema(fields, metadata=table.schema.metadata))


def plain_array(arr, t):
    """`arr` as type `t` (its type with extension types as their storage)."""
    if isinstance(arr.type, pyarrow.BaseExtensionType) and arr.type.extension_name == "arrow.json":
        arr = arr.storage
    if arr.type == t:
        return arr
    if pyarrow.types.is_struct(arr.type):
        fields = [arr.field(i) for i in range(arr.type.num_fields)]
        plain_fields = [plain_array(c, t.field(i).type) for i, c in enumerate(fields)]
        return pyarrow.StructArray.from_arrays(plain_fields, fields=list(t), mask=arr.is_null() if arr.null_count else None)
    if pyarrow.types.is_map(arr.type):
        keys = plain_array(arr.keys, t.key_type)
        items = plain_array(arr.items, t.item_type)
        return pyarrow.MapArray.from_arrays(arr.offsets, keys, items, type=t, mask=arr.is_null() if arr.null_count else None)
    if isinstance(arr.type, pyarrow.FixedSizeListType):
        return pyarrow.FixedSizeListArray.from_arrays(plain_array(arr.values, t.value_type), type=t,
                                                     mask=arr.is_null() if arr.null_count else None)
    if isinstance(arr.type, (pyarrow.ListType, pyarrow.LargeListType)):
        cls = pyarrow.ListArray if isinstance(arr.type, pyarrow.ListType) else pyarrow.LargeListArray
        return cls.from_arrays(arr.offsets, plain_array(arr.values, t.value_type), type=t,
                               mask=arr.is_null() if arr.null_count else None)
    return arr.cast(t)


def arrow_rows(table):
    """Each row as the repr of its Python values. A column Python cannot
    hold (DuckDB's infinite dates) is compared by Arrow's own rendering."""
    table = table.combine_chunks()
    columns = []
    for col in table.columns:
        try:
            columns.append(col.to_pylist())
        except (OverflowError, ValueError):
            # Arrow's own (C++) rendering of each value.
            columns.append([str(col.slice(i, 1)) for i in range(len(col))])
    return [repr(row) for row in zip(*columns)] if columns else []


# --------------------------------------------------------------------------
# Files


def test_files(args):
    out = []
    for p in args:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out += [os.path.join(root, f) for f in files if f.endswith((".test", ".test_slow"))]
        else:
            out.append(p)
    return sorted(out)


def statements(con, sql):
    """The statements of a block, as texts the gateway takes one at a time."""
    try:
        parts = con.extract_statements(sql)
    except duckdb.Error:
        return [sql]
    if len(parts) <= 1:
        return [sql]
    return [p.query for p in parts]


def fresh_connection(extension_dir):
    con = duckdb.connect(config={"allow_unsigned_extensions": "false"})
    con.execute("SET TimeZone = 'UTC'")
    if extension_dir:
        con.execute(f"SET extension_directory = {sqlstr(extension_dir)}")
    return con


TXN_BEGIN = re.compile(r"^\s*(begin|start\s+transaction)\b", re.I)
TXN_END = re.compile(r"^\s*(commit|end|rollback|abort)\b", re.I)


def transactions(records):
    """The gateway runs every request in its own transaction and refuses
    BEGIN/COMMIT/ROLLBACK. Marks each record inside an explicit transaction
    with how that transaction ends ('commit' or 'rollback')."""
    mark, i = {}, 0
    while i < len(records):
        r = records[i]
        if r.kind == "statement" and TXN_BEGIN.match(r.sql):
            j = i + 1
            while j < len(records) and not (records[j].kind == "statement" and TXN_END.match(records[j].sql)):
                j += 1
            end = records[j].sql if j < len(records) else "rollback"
            how = "commit" if re.match(r"^\s*(commit|end)\b", end, re.I) else "rollback"
            for k in range(i + 1, j):
                mark[id(records[k])] = how
            i = j
        i += 1
    return mark


def run_on_both(con, gw, part):
    """Run a setup statement in DuckDB and through the gateway."""
    try:
        con.execute(part)
        py_err = None
    except duckdb.Error as e:
        py_err = str(e)
    st, _, data, _ = gw.post(part, "json")
    return py_err, st, data


def replay_file(path, gw, formats, tmpdir, extension_dir, results, setup_issues, fl=None):
    rel = os.path.relpath(path)
    con = fresh_connection(extension_dir)
    tainted = None  # the first setup statement the gateway's policy refused
    records = parse_test(path)
    in_txn = transactions(records)
    for rec in records:
        def emit(fmt, outcome, q=None):
            results.append({"file": rel, "line": rec.line, "query": short(q or rec.sql, 400),
                            "format": fmt, "status": outcome.status, "detail": outcome.detail})

        def note(issue):
            setup_issues.append({"file": rel, "line": rec.line, "issue": issue})

        if rec.kind == "stop":
            note(f"replay stops here: {rec.reason}")
            break
        sql = rec.sql
        txn = in_txn.get(id(rec))
        if FILE_PATHS.search(sql):
            if rec.kind == "query":
                for f in formats:
                    emit(f, Outcome("skipped", "reads or writes test files"))
            continue
        if SETTING.match(sql):
            if BENIGN_SETTING.match(sql):
                continue
            note(f"replay stops at a setting: {short(sql)}")
            break
        if rec.kind == "statement":
            if rec.expect == "error":
                continue
            if TXN_BEGIN.match(sql) or TXN_END.match(sql):
                try:  # DuckDB only: the gateway has no explicit transactions
                    con.execute(sql)
                except duckdb.Error:
                    pass
                continue
            for part in statements(con, sql):
                if txn == "rollback":  # its effects vanish: DuckDB only
                    try:
                        con.execute(part)
                    except duckdb.Error:
                        pass
                    continue
                py_err, st, data = run_on_both(con, gw, part)
                if py_err is None and st != 200:
                    if is_policy_refusal(st, data):
                        tainted = tainted or part
                    note(f"setup ok in duckdb, gateway {st}: {short(part)} -> "
                         f"{short(problem(data).get('detail', data[:150].decode('utf-8', 'replace')), 200)}")
                elif py_err is not None and st == 200:
                    note(f"setup fails in duckdb ({short(py_err)}) but not in the gateway: {short(part)}")
            continue
        if txn == "rollback":
            for f in formats:
                emit(f, Outcome("skipped", "inside a transaction that rolls back (the gateway has none)"))
            continue
        # query block: earlier statements of a multi-statement block are setup
        parts = statements(con, sql)
        for part in parts[:-1]:
            run_on_both(con, gw, part)
        q = parts[-1]
        try:
            kinds = [s.type for s in con.extract_statements(q)]
        except duckdb.Error:
            kinds = []
        if kinds and kinds[0] in (duckdb.StatementType.INSERT, duckdb.StatementType.UPDATE,
                                  duckdb.StatementType.DELETE, duckdb.StatementType.CREATE):
            # Replaying a data change once per format would change the data:
            # run it once on each side and compare its JSON answer only.
            try:
                want, py_err = [list(r) for r in con.execute(q).fetchall()], None
            except duckdb.Error as e:
                want, py_err = None, str(e)
            st, _, data, cut = gw.post(q, "json")
            if st != 200 or cut:
                ref = Ref()
                ref.error = py_err
                o = gateway_failure(st, data, cut, ref, tainted)
            elif py_err is not None:
                o = Outcome("wrong", f"gateway answers 200, duckdb fails: {short(py_err, 150)}")
            else:
                got = json.loads(data).get("rows")
                o = Outcome("same") if got == want else Outcome("wrong", f"duckdb {short(want)} gateway {short(got)}")
            for f in formats:
                emit(f, after_taint(o, tainted) if f == "json" else
                     Outcome("skipped", f"data change ({kinds[0].name}) compared in JSON only"), q)
            continue
        ref = reference(con, q, tmpdir, ("arrow" in formats or "flight" in formats) and HAVE_ARROW)
        type_mismatch = []
        for f in formats:
            if f == "json":
                o = check_json(gw, q, ref, tainted, type_mismatch)
            elif f == "ndjson":
                o = check_ndjson(gw, q, ref, tainted)
            elif f == "csv":
                o = check_csv(gw, q, ref, tainted)
            elif f == "arrow":
                o = check_arrow(gw, q, ref, tainted) if HAVE_ARROW else Outcome("skipped", "pyarrow not installed")
            elif f == "parquet":
                o = check_parquet(gw, q, ref, tainted, con, tmpdir)
            elif f == "flight":
                o = check_flight(fl, q, ref, tainted) if fl and HAVE_ARROW else Outcome("skipped", "no --flight")
            else:
                o = Outcome("skipped", f"unknown format {f}")
            emit(f, after_taint(o, tainted), q)
        if type_mismatch:
            emit("json-types", after_taint(Outcome("wrong", f"types duckdb {type_mismatch[0]['duckdb']} "
                                                   f"gateway {type_mismatch[0]['gateway']}"), tainted), q)
    con.close()
    left = cleanup(gw)
    if left:
        setup_issues.append({"file": rel, "line": 0, "issue": "cleanup left: " + "; ".join(left)[:500]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="gateway base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--token", help="bearer token for /query")
    ap.add_argument("--formats", default="json,ndjson,csv,arrow,parquet")
    ap.add_argument("--flight", help="the gateway's Flight SQL listener, e.g. grpc://127.0.0.1:31337; "
                    "adds the format `flight`")
    ap.add_argument("--report", help="write every non-`same` case here (JSON)")
    ap.add_argument("--extension-dir", default=os.environ.get("DUCKGATE_EXTENSION_DIR"),
                    help="DuckDB extension directory for the reference connection")
    ap.add_argument("--shard", default="0/1",
                    help="I/N: replay every N-th file from the I-th (0-based), so N gateways share the files")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    gw = Gateway(args.base, args.token)
    fl = Flight(args.flight, args.token) if args.flight else None
    if fl and "flight" not in formats:
        formats.append("flight")
    results, setup_issues = [], []
    left = cleanup(gw)
    if left:
        setup_issues.append({"file": "", "line": 0, "issue": "initial cleanup left: " + "; ".join(left)[:500]})
    shard, shards = (int(x) for x in args.shard.split("/"))
    files = test_files(args.paths)[shard::shards]
    with tempfile.TemporaryDirectory() as tmpdir:
        for n, path in enumerate(files, 1):
            print(f"[{n}/{len(files)}] {path}", file=sys.stderr, flush=True)
            replay_file(path, gw, formats, tmpdir, args.extension_dir, results, setup_issues, fl)

    counts = collections.defaultdict(collections.Counter)
    for r in results:
        counts[r["format"]][r["status"]] += 1
    print(f"{len(files)} files, duckdb {duckdb.__version__}, arrow {'compared' if HAVE_ARROW else 'not compared (no pyarrow)'}")
    print(f"{'format':<11}{'queries':>8}" + "".join(f"{s:>10}" for s in STATUSES))
    for f in formats + (["json-types"] if "json" in formats else []):
        c = counts.get(f, collections.Counter())
        total = sum(c.values()) if f != "json-types" else sum(counts["json"].values())
        if f == "json-types":
            c = collections.Counter({"wrong": c["wrong"], "same": total - c["wrong"]})
        print(f"{f:<11}{total:>8}" + "".join(f"{c[s]:>10}" for s in STATUSES))
    print(f"setup notes: {len(setup_issues)}")
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({
                "duckdb": duckdb.__version__,
                "files": len(files),
                "counts": {f: dict(c) for f, c in counts.items()},
                "cases": [r for r in results if r["status"] != "same"],
                "setup": setup_issues,
            }, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
