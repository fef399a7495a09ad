#!/usr/bin/env python3
"""Writes an Iceberg table on the S3/STS emulation with pyiceberg (a SQLite
catalog in a temporary directory), and answers queries on it with Python
DuckDB 1.5.5 and its iceberg extension (tests/lake.rs).

    iceberg_writer.py CONFIG_JSON write|append FIRST COUNT
    iceberg_writer.py CONFIG_JSON answer SQL

`write`/`append` put rows with ids FIRST..FIRST+COUNT into the table whose
root is `table` (an s3:// URL), then point the root's
metadata/version-hint.text at the new metadata file: DuckDB reads a table
root without a catalog through that hint. `answer` prints SQL's rows as a
JSON array of arrays. CONFIG_JSON keys: ext_dir, table, catalog_dir, and the
emulation's region, endpoint, sts_endpoint, role_arn, access_key_id,
secret_access_key.
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
    ).assume_role(RoleArn=config["role_arn"], RoleSessionName="iceberg-writer")["Credentials"]
    if action in ("write", "append"):
        import pyarrow as pa
        from pyiceberg.catalog.sql import SqlCatalog

        root = config["table"].rstrip("/")
        catalog = SqlCatalog(
            "test",
            uri=f"sqlite:///{config['catalog_dir']}/catalog.db",
            warehouse=root.rsplit("/", 1)[0],
            **{
                "s3.endpoint": "http://" + config["endpoint"],
                "s3.access-key-id": creds["AccessKeyId"],
                "s3.secret-access-key": creds["SecretAccessKey"],
                "s3.session-token": creds["SessionToken"],
                "s3.region": config["region"],
                "s3.force-virtual-addressing": False,
            },
        )
        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        if action == "write":
            catalog.create_namespace("ns")
            table = catalog.create_table("ns.t", schema=schema, location=root)
        else:
            table = catalog.load_table("ns.t")
        first, count = int(sys.argv[3]), int(sys.argv[4])
        ids = list(range(first, first + count))
        table.append(pa.table({"id": pa.array(ids, pa.int64()),
                               "name": [f"row {i}" for i in ids]}, schema=schema))
        name = table.metadata_location.rsplit("/", 1)[1]
        boto3.client(
            "s3",
            endpoint_url="http://" + config["endpoint"],
            region_name=config["region"],
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
        ).put_object(
            Bucket=root[len("s3://"):].split("/", 1)[0],
            Key=root[len("s3://"):].split("/", 1)[1] + "/metadata/version-hint.text",
            Body=name[: -len(".metadata.json")].encode(),
        )
        print("[]")
        return 0
    import duckdb

    con = duckdb.connect(config={
        "extension_directory": config["ext_dir"],
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    con.execute("LOAD httpfs; LOAD avro; LOAD iceberg")
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
