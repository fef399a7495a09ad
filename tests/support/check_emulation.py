#!/usr/bin/env python3
"""End-to-end check of tests/support/s3_sts_server.py without the gateway.

    eval "$(scripts/test-env)"
    "$DUCKGATE_TEST_PYTHON" tests/support/check_emulation.py

Starts the emulation, assumes the role with a 6 s session, reads S3 through Python
DuckDB 1.5.5 + the httpfs extension from $DUCKGATE_EXTENSION_DIR, waits past expiry,
and prints the exact DuckDB error texts that the gateway has to recognise. Exits
non-zero if any check fails; the last line is "N passed, N failed".
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import boto3
import duckdb
from botocore.config import Config
from botocore.exceptions import ClientError

HERE = Path(__file__).resolve().parent
CACHE = os.environ.get("DUCKGATE_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "duckgate"
)
EXT_DIR = os.environ.get("DUCKGATE_EXTENSION_DIR") or os.path.join(CACHE, "extensions")
SESSION_SECONDS = 6

results: list[tuple[str, bool]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    results.append((name, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)


def start_server() -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "s3_sts_server.py"), "--port", "0",
         "--seed-parquet", "10000", "--exit-with-stdin"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
    )
    config = None
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"server exited early with {proc.wait()}")
        if line.startswith("CONFIG "):
            config = json.loads(line[len("CONFIG "):])
        elif line.startswith("READY "):
            assert config is not None and int(line.split()[1]) == config["port"]
            return proc, config
    raise SystemExit("server not ready in 60 s")


def control(config: dict, method: str, what: str, body: bytes | None = None) -> dict:
    req = urllib.request.Request(f"{config['control_url']}/{what}", data=body, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def sts_client(config: dict):
    return boto3.client(
        "sts",
        endpoint_url=config["sts_endpoint"],
        region_name=config["region"],
        aws_access_key_id=config["access_key_id"],
        aws_secret_access_key=config["secret_access_key"],
        # botocore enforces DurationSeconds >= 900 client side; the Rust SDK does not.
        # One attempt, so an injected 503 shows up instead of being retried.
        config=Config(parameter_validation=False, retries={"max_attempts": 1, "mode": "standard"}),
    )


def assume(sts, config: dict, seconds: int = SESSION_SECONDS) -> dict:
    return sts.assume_role(
        RoleArn=config["role_arn"], RoleSessionName="check-emulation", DurationSeconds=seconds
    )["Credentials"]


def secret_sql(config: dict, key_id: str, secret: str, token: str | None, replace: bool = True) -> str:
    def q(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"

    token_part = f", SESSION_TOKEN {q(token)}" if token is not None else ""
    return (
        f"CREATE {'OR REPLACE ' if replace else ''}SECRET s3cred (TYPE s3, PROVIDER config, "
        f"KEY_ID {q(key_id)}, SECRET {q(secret)}{token_part}, REGION {q(config['region'])}, "
        f"ENDPOINT {q(config['endpoint'])}, URL_STYLE 'path', USE_SSL false)"
    )


def read_csv(con) -> list[tuple]:
    return con.execute(
        "SELECT * FROM read_csv('s3://duckgate-test/data/small.csv') ORDER BY id"
    ).fetchall()


def error_of(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we want the exact text
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> int:
    proc, config = start_server()
    try:
        run(config)
    finally:
        proc.send_signal(15)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
        check("server exits 0 on SIGTERM", code == 0, f"exit code {code}")
    passed = sum(ok for _, ok in results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def run(config: dict) -> None:
    print(f"CONFIG {json.dumps({k: v for k, v in config.items() if k != 'secret_access_key'})}")
    sts = sts_client(config)

    # Timing of AssumeRole (warm client, signed, IAM auth on).
    t0 = time.perf_counter()
    creds = assume(sts, config)
    first_ms = (time.perf_counter() - t0) * 1000
    samples = []
    for _ in range(20):
        t = time.perf_counter()
        assume(sts, config, 900)
        samples.append((time.perf_counter() - t) * 1000)
    print(f"AssumeRole timing: first {first_ms:.1f} ms; next 20: median "
          f"{statistics.median(samples):.1f} ms, max {max(samples):.1f} ms")
    creds = assume(sts, config)  # fresh 6 s session for the expiry test
    lifetime = (creds["Expiration"] - datetime.now(timezone.utc)).total_seconds()
    check("DurationSeconds=6 is honoured", 3 < lifetime <= SESSION_SECONDS + 1,
          f"expires in {lifetime:.1f} s, key {creds['AccessKeyId'][:4]}...")

    con = duckdb.connect()
    con.execute(f"SET extension_directory='{EXT_DIR}'")
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    con.execute("LOAD httpfs")
    print("duckdb", duckdb.__version__, con.execute(
        "SELECT extension_version, install_path FROM duckdb_extensions() WHERE extension_name='httpfs'"
    ).fetchone())
    con.execute(secret_sql(config, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"], replace=False))

    rows = read_csv(con)
    check("read small.csv with assumed-role credentials",
          rows == [(1, "alpha", 1.5), (2, "beta", 2.5), (3, "gamma", 3.5)], repr(rows))
    n = con.execute("SELECT count(*), sum(id), min(s) FROM 's3://duckgate-test/data/numbers.parquet'").fetchone()
    check("read numbers.parquet", n == (10000, 49995000, "row-0"), repr(n))

    wait = (creds["Expiration"] - datetime.now(timezone.utc)).total_seconds() + 1.0
    print(f"sleeping {wait:.1f} s past expiry ...", flush=True)
    time.sleep(max(0.0, wait))
    before = control(config, "GET", "stats")["s3_expired_rejections"]
    err = error_of(lambda: read_csv(con))
    print(f"EXPIRED-TOKEN ERROR (csv): {err}")
    check("expired session: DuckDB read fails", err is not None)
    err_pq = error_of(lambda: con.execute("SELECT count(*) FROM 's3://duckgate-test/data/numbers.parquet'").fetchall())
    print(f"EXPIRED-TOKEN ERROR (parquet): {err_pq}")
    after = control(config, "GET", "stats")["s3_expired_rejections"]
    check("emulation counted ExpiredToken rejections", after > before, f"{before} -> {after}")

    # The raw answer, as DuckDB saw it (DuckDB hides the body on HEAD).
    s3 = boto3.client("s3", endpoint_url=config["sts_endpoint"], region_name=config["region"],
                      aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                      aws_session_token=creds["SessionToken"], config=Config(retries={"max_attempts": 1}))
    try:
        s3.get_object(Bucket="duckgate-test", Key="data/small.csv")
        check("expired session: raw S3 answer is 400 ExpiredToken", False, "request succeeded")
    except ClientError as exc:
        meta = exc.response["ResponseMetadata"]["HTTPStatusCode"]
        code = exc.response["Error"]["Code"]
        check("expired session: raw S3 answer is 400 ExpiredToken", (meta, code) == (400, "ExpiredToken"),
              f"{meta} {code}: {exc.response['Error'].get('Message')}")

    fresh = assume(sts, config, 900)
    con.execute(secret_sql(config, fresh["AccessKeyId"], fresh["SecretAccessKey"], fresh["SessionToken"]))
    check("fresh AssumeRole + CREATE OR REPLACE SECRET works again", len(read_csv(con)) == 3)

    # Forced expiry via the control API (what the Rust tests can use instead of sleeping).
    got = control(config, "POST", f"expire?access_key_id={fresh['AccessKeyId']}")
    err2 = error_of(lambda: read_csv(con))
    check("POST /__control/expire expires that session at once", got == {"expired": 1} and err2 is not None, str(got))

    # Bad credentials with IAM auth on.
    ok = assume(sts, config, 900)
    con.execute(secret_sql(config, ok["AccessKeyId"], "wrong-secret", ok["SessionToken"]))
    err = error_of(lambda: read_csv(con))
    print(f"BAD-SIGNATURE ERROR: {err}")
    check("wrong secret (bad signature) is rejected", err is not None)
    con.execute(secret_sql(config, "ASIAUNKNOWNKEY000000", "whatever", "not-a-token"))
    err = error_of(lambda: read_csv(con))
    print(f"UNKNOWN-KEY ERROR: {err}")
    check("unknown access key is rejected", err is not None)
    con.execute(secret_sql(config, ok["AccessKeyId"], ok["SecretAccessKey"], "wrong-token"))
    err = error_of(lambda: read_csv(con))
    print(f"WRONG-TOKEN ERROR: {err}")
    check("wrong session token is rejected", err is not None)
    con.execute(secret_sql(config, config["access_key_id"], config["secret_access_key"], None))
    err = error_of(lambda: read_csv(con))
    print(f"BASE-USER (no s3 permission) ERROR: {err}")
    check("base user itself may not read S3 (only the role may)", err is not None)
    try:
        urllib.request.urlopen(f"{config['sts_endpoint']}/duckgate-test/data/small.csv", timeout=10)
        check("unsigned GET is rejected", False, "200")
    except urllib.error.HTTPError as exc:
        check("unsigned GET is rejected", exc.code == 403, f"HTTP {exc.code}")
    bad_sts = boto3.client("sts", endpoint_url=config["sts_endpoint"], region_name=config["region"],
                           aws_access_key_id=config["access_key_id"], aws_secret_access_key="nope",
                           config=Config(retries={"max_attempts": 1}))
    try:
        bad_sts.assume_role(RoleArn=config["role_arn"], RoleSessionName="bad-secret", DurationSeconds=900)
        check("AssumeRole with a wrong base secret is rejected", False)
    except ClientError as exc:
        check("AssumeRole with a wrong base secret is rejected", True,
              f"{exc.response['ResponseMetadata']['HTTPStatusCode']} {exc.response['Error']['Code']}")

    # STS fault injection.
    control(config, "POST", "sts?fail=1")
    try:
        assume(sts, config, 900)
        check("injected STS failure answers 503 ServiceUnavailable", False)
    except ClientError as exc:
        status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
        code = exc.response["Error"]["Code"]
        check("injected STS failure answers 503 ServiceUnavailable", (status, code) == (503, "ServiceUnavailable"),
              f"{status} {code}")
    control(config, "POST", "sts?fail=0")
    check("STS works again after fail=0", "AccessKeyId" in assume(sts, config, 900))

    # Seeding through the control API.
    control(config, "POST", "put?bucket=duckgate-other&key=seeded/x.csv", b"a,b\n1,2\n")
    good = assume(sts, config, 900)
    con.execute(secret_sql(config, good["AccessKeyId"], good["SecretAccessKey"], good["SessionToken"]))
    got = con.execute("SELECT * FROM 's3://duckgate-other/seeded/x.csv'").fetchall()
    check("POST /__control/put object is readable", got == [(1, 2)], repr(got))

    stats = control(config, "GET", "stats")
    print("stats", json.dumps(stats))
    check("stats count AssumeRole calls", stats["sts_assume_role_calls"] >= 25, str(stats["sts_assume_role_calls"]))


if __name__ == "__main__":
    sys.exit(main())
