#!/usr/bin/env python3
"""Writes a Delta table on the S3/STS emulation, and answers queries on it
with Python DuckDB 1.5.5 and its delta extension (tests/lake.rs).

    delta_writer.py CONFIG_JSON write|append FIRST COUNT
    delta_writer.py CONFIG_JSON answer SQL

`write`/`append` put rows with ids FIRST..FIRST+COUNT at `table` (an s3://
URL) with the `deltalake` package; `answer` prints SQL's rows as a JSON
array of arrays, with `delta_scan` reading through an S3 secret. CONFIG_JSON
keys: ext_dir, table, and the emulation's region, endpoint, sts_endpoint,
role_arn, access_key_id, secret_access_key.
"""

from __future__ import annotations

import json
import sys

import boto3


def q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main() -> int:
    config, action = json.loads(sys.argv[1]), sys.argv[2]
    creds = boto3.client(
        "sts",
        endpoint_url=config["sts_endpoint"],
        region_name=config["region"],
        aws_access_key_id=config["access_key_id"],
        aws_secret_access_key=config["secret_access_key"],
    ).assume_role(RoleArn=config["role_arn"], RoleSessionName="delta-writer")["Credentials"]
    if action in ("write", "append"):
        import deltalake
        import pyarrow as pa

        first, count = int(sys.argv[3]), int(sys.argv[4])
        ids = list(range(first, first + count))
        deltalake.write_deltalake(
            config["table"],
            pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row {i}" for i in ids]}),
            mode="overwrite" if action == "write" else "append",
            storage_options={
                "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                "AWS_SESSION_TOKEN": creds["SessionToken"],
                "AWS_REGION": config["region"],
                "AWS_ENDPOINT_URL": "http://" + config["endpoint"],
                "AWS_ALLOW_HTTP": "true",
                "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
                "AWS_FORCE_PATH_STYLE": "true",
            },
        )
        print("[]")
        return 0
    import duckdb

    con = duckdb.connect(config={
        "extension_directory": config["ext_dir"],
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    con.execute("LOAD httpfs; LOAD delta")
    con.execute(
        f"CREATE SECRET s3 (TYPE s3, KEY_ID {q(creds['AccessKeyId'])}, "
        f"SECRET {q(creds['SecretAccessKey'])}, SESSION_TOKEN {q(creds['SessionToken'])}, "
        f"REGION {q(config['region'])}, ENDPOINT {q(config['endpoint'])}, "
        "URL_STYLE 'path', USE_SSL false)"
    )
    rows = con.execute(sys.argv[3]).fetchall()
    print(json.dumps([list(r) for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
