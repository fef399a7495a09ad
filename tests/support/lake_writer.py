#!/usr/bin/env python3
"""A DuckLake writer and reference reader outside the gateway (tests/lake.rs).

    lake_writer.py CONFIG_JSON SQL [SQL ...]
    lake_writer.py CONFIG_JSON --repeat EVERY_S FOR_S SQL

Attaches the DuckLake that CONFIG_JSON describes as `lake` (read-write) with
Python DuckDB 1.5.5 and the extensions from `ext_dir`, with S3 credentials of
an assumed-role session on the S3/STS emulation, runs each SQL in order, and
prints the last one's rows as one JSON array of arrays: the reference answer
the gateway's must equal. CONFIG_JSON keys: ext_dir, metadata (the
`ducklake:postgres:...` path without password, or `ducklake:FILE` for
metadata in a DuckDB file), password (absent for a DuckDB file), data_path, and the
emulation's region, endpoint, sts_endpoint, role_arn, access_key_id,
secret_access_key. With --repeat, runs SQL (a commit) every EVERY_S seconds
for FOR_S seconds and prints how many times it ran.
"""

from __future__ import annotations

import json
import sys
import time

import boto3
import duckdb


def q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main() -> int:
    config = json.loads(sys.argv[1])
    statements = sys.argv[2:]
    creds = boto3.client(
        "sts",
        endpoint_url=config["sts_endpoint"],
        region_name=config["region"],
        aws_access_key_id=config["access_key_id"],
        aws_secret_access_key=config["secret_access_key"],
    ).assume_role(RoleArn=config["role_arn"], RoleSessionName="lake-writer")["Credentials"]
    con = duckdb.connect(config={
        "extension_directory": config["ext_dir"],
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    for ext in ("httpfs", "postgres_scanner", "ducklake"):
        con.execute(f"LOAD {ext}")
    con.execute(
        f"CREATE SECRET s3 (TYPE s3, KEY_ID {q(creds['AccessKeyId'])}, "
        f"SECRET {q(creds['SecretAccessKey'])}, SESSION_TOKEN {q(creds['SessionToken'])}, "
        f"REGION {q(config['region'])}, ENDPOINT {q(config['endpoint'])}, "
        "URL_STYLE 'path', USE_SSL false)"
    )
    meta_secret = ""
    if config.get("password") is not None:
        con.execute(f"CREATE SECRET pg (TYPE postgres, PASSWORD {q(config['password'])})")
        meta_secret = ", META_SECRET 'pg'"
    con.execute(
        f"ATTACH {q(config['metadata'])} AS lake "
        f"(DATA_PATH {q(config['data_path'])}{meta_secret})"
    )
    if statements[0] == "--repeat":
        every, duration, sql = float(statements[1]), float(statements[2]), statements[3]
        until, n = time.monotonic() + duration, 0
        while time.monotonic() < until:
            con.execute(sql)
            n += 1
            time.sleep(every)
        print(json.dumps([[n]]))
        return 0
    rows = []
    for sql in statements:
        rows = con.execute(sql).fetchall()
    print(json.dumps([list(r) for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
