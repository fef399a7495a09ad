#!/usr/bin/env python3
"""Local S3 + STS + IAM emulation for duckgate's tests, built on moto's server.

Run it with the test venv's Python (scripts/test-env prints DUCKGATE_TEST_PYTHON):

    $DUCKGATE_TEST_PYTHON tests/support/s3_sts_server.py --port 0 [--seed-parquet ROWS]

STDOUT PROTOCOL (exactly two lines, then nothing else is ever written to stdout):

    CONFIG {"access_key_id": "AKIA...", "secret_access_key": "...",
            "role_arn": "arn:aws:iam::123456789012:role/duckgate-reader",
            "region": "us-east-1", "endpoint": "127.0.0.1:<port>",
            "sts_endpoint": "http://127.0.0.1:<port>", "port": <port>,
            "account_id": "123456789012", "buckets": ["duckgate-test", "duckgate-other"],
            "control_url": "http://127.0.0.1:<port>/__control"}
    READY <port>

CONFIG is one line of JSON. READY is always the last line and is printed only once
the server accepts requests, IAM authentication is on, and the seed data is in place.
Everything else (logs) goes to stderr. Request logging is off unless --verbose: a
parent that pipes stderr and never reads it would otherwise block the server once
the pipe fills. Send stderr to a file or inherit it.

LIFECYCLE: exits 0 on SIGTERM or SIGINT. With --exit-with-stdin it also exits when
its stdin reaches EOF, so a test harness that dies (and so closes the pipe) does not
leave the server running: spawn it with stdin=piped and keep the handle.

WHAT IS EMULATED
- IAM user `duckgate` with one access key: the "base credentials". Its policy allows
  sts:AssumeRole on the role. The role `duckgate-reader` trusts exactly that user and
  allows s3:* on everything. Buckets `duckgate-test` and `duckgate-other`.
- IAM authentication is enforced for every request after bootstrap (SigV4 signatures
  are checked; unknown keys, wrong secrets and wrong session tokens are rejected, as
  moto does). Bootstrap runs over HTTP before auth is switched on (moto's
  settings.INITIAL_NO_AUTH_ACTION_COUNT is set to 0 afterwards, so no counting).
- STS AssumeRole accepts any DurationSeconds, including values below 900 (moto does
  not validate it; boto3 does, so pass Config(parameter_validation=False)).
- The rule moto lacks: an S3 request signed with an assumed-role session whose
  expiration has passed gets HTTP 400 with
  <Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message>..
  The session is found by the access key id (Authorization header or X-Amz-Credential
  query parameter) or by the session token (X-Amz-Security-Token header or query).
- The other rule moto lacks: a session policy passed to AssumeRole (or
  AssumeRoleWithWebIdentity) narrows the session as AWS does. An S3 request of a
  session with a policy is allowed only when the policy allows its action on its
  resource (Allow/Deny statements, `*`/`?` wildcards, the StringLike/StringEquals
  condition on s3:prefix); otherwise HTTP 403 AccessDenied. Actions: GET/HEAD of a
  key s3:GetObject; GET of a bucket s3:ListBucket (s3:prefix from the query); PUT
  and POST of a key s3:PutObject; DELETE of a key s3:DeleteObject (with uploadId
  s3:AbortMultipartUpload); POST ?delete s3:DeleteObject on every key listed;
  anything else s3:<Other>, which only an `s3:*` grant allows.
- small.csv is always seeded at s3://duckgate-test/data/small.csv:
      id,name,score / 1,alpha,1.5 / 2,beta,2.5 / 3,gamma,3.5
  --seed-parquet ROWS also seeds s3://duckgate-test/data/numbers.parquet with columns
  id BIGINT (0..ROWS-1), v DOUBLE (id * 0.5), s VARCHAR ('row-' || id).

CONTROL API (same port; `__control` cannot be an S3 bucket name, so no collision;
no signature needed; every answer is JSON):
  GET  /__control/stats              counters: sts_requests, sts_assume_role_calls,
                                     sts_injected_failures, s3_requests,
                                     s3_expired_rejections, s3_4xx, s3_5xx,
                                     assumed_sessions, sts_fail, sts_delay_ms
  POST /__control/sts?fail=1         every STS request answers 503 ServiceUnavailable
  POST /__control/sts?fail=0         back to normal
  POST /__control/sts?fail_session=S AssumeRole with RoleSessionName S answers 503
                                     (one tenant's role broken; fail=0 ends it too)
  POST /__control/sts?malformed=1    STS answers 200 with unusable credentials
                                     (key "AKIA", no token, expired in 1970)
  POST /__control/sts?delay_ms=N     every STS request is delayed N ms (0 = off)
  POST /__control/s3?delay_ms=N      every S3 request is delayed N ms before it is
                                     answered (a slow or stalled S3; 0 = off)
  POST /__control/s3?fail_status=N&match=S   every S3 request whose path holds S
                                     answers N (503 SlowDown, 500 InternalError,
                                     403 AccessDenied; 0 = off)
  POST /__control/put?bucket=B&key=K body = object bytes; puts it without signing
  GET  /__control/objects?bucket=B&prefix=P   the keys under P (unsigned)
  POST /__control/delete?bucket=B&key=K      removes one object (unsigned)
  POST /__control/expire             expire every assumed-role session now
  POST /__control/expire?access_key_id=ASIA...   expire that session only
  POST /__control/reset-stats        zero the counters
  GET  /__control/secrets            every secret key and session token issued to
                                     assumed-role sessions (for leak checks)
  GET  /__control/sessions           every assumed-role session: access_key_id,
                                     secret_access_key, session_token, policy (test
                                     only: what a leaked key could do)
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs

log = logging.getLogger("s3_sts_server")

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
USER_NAME = "duckgate"
ROLE_NAME = "duckgate-reader"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/{ROLE_NAME}"
USER_ARN = f"arn:aws:iam::{ACCOUNT_ID}:user/{USER_NAME}"
BUCKETS = ("duckgate-test", "duckgate-other")
SMALL_CSV = b"id,name,score\n1,alpha,1.5\n2,beta,2.5\n3,gamma,3.5\n"

CREDENTIAL_RE = re.compile(r"Credential=([^/,\s]+)/[^/]*/[^/]*/([^/]*)/")

StartResponse = Callable[..., Any]


class State:
    """Counters and switches shared by the middleware and the control API."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sts_fail = False
        # AssumeRole calls with this RoleSessionName fail (one tenant's
        # role broken); "" = off.
        self.sts_fail_session = ""
        self.sts_malformed = False
        self.sts_delay_ms = 0
        self.s3_delay_ms = 0
        # Requests whose path holds s3_fail_match answer s3_fail_status
        # (503 SlowDown, 500 InternalError, 403 AccessDenied); 0 = off.
        self.s3_fail_status = 0
        self.s3_fail_match = ""
        self.counters: dict[str, int] = {}
        self.rejected_keys: set[str] = set()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.counters = {
                "sts_requests": 0,
                "sts_assume_role_calls": 0,
                "sts_injected_failures": 0,
                "sts_malformed_answers": 0,
                "s3_requests": 0,
                "s3_expired_rejections": 0,
                "s3_4xx": 0,
                "s3_5xx": 0,
                "s3_session_policy_denials": 0,
            }

    def first_rejection(self, access_key_id: str) -> bool:
        with self.lock:
            if access_key_id in self.rejected_keys:
                return False
            self.rejected_keys.add(access_key_id)
            return True

    def bump(self, name: str) -> None:
        with self.lock:
            self.counters[name] += 1


def _assumed_roles() -> list[Any]:
    from moto.sts.models import sts_backends

    roles: list[Any] = []
    for _account, by_partition in list(sts_backends.items()):
        for _partition, backend in list(by_partition.items()):
            roles.extend(backend.assumed_roles)
    return roles


def _find_session(access_key_id: str | None, token: str | None) -> Any | None:
    for role in _assumed_roles():
        if access_key_id and role.access_key_id == access_key_id:
            return role
        if token and role.session_token == token:
            return role
    return None


def _utcnow():
    from moto.core.utils import utcnow

    return utcnow()  # naive UTC, the same clock moto's AssumedRole.expiration uses


def _xml(status: str, body: str, start_response: StartResponse) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [("Content-Type", "application/xml"), ("Content-Length", str(len(data)))],
    )
    return [data]


def _json(status: str, obj: Any, start_response: StartResponse) -> list[bytes]:
    data = (json.dumps(obj) + "\n").encode()
    start_response(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]


def _read_body(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    # Hand the same bytes on to moto.
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return body


WEB_IDENTITY_LOCK = threading.Lock()


def _iam_pattern(pattern: str) -> "re.Pattern[str]":
    """An IAM wildcard (`*` any run, `?` one character) as a regex."""
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
        re.DOTALL,
    )


def _listify(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [] if v is None else [v]


def policy_allows(policy: str, action: str, resource: str, context: dict[str, str]) -> bool:
    """AWS's evaluation of one identity policy, for the subset duckgate uses:
    an explicit Deny wins, else some Allow must match action, resource and
    every condition."""
    doc = json.loads(policy)
    allowed = False
    for st in _listify(doc.get("Statement")):
        if not any(_iam_pattern(a.lower()).fullmatch(action.lower()) for a in _listify(st.get("Action"))):
            continue
        if not any(_iam_pattern(r).fullmatch(resource) for r in _listify(st.get("Resource"))):
            continue
        ok = True
        for op, conds in (st.get("Condition") or {}).items():
            for key, wanted in conds.items():
                have = context.get(key)
                if have is None:
                    ok = False
                elif op == "StringLike":
                    ok = ok and any(_iam_pattern(w).fullmatch(have) for w in _listify(wanted))
                elif op == "StringEquals":
                    ok = ok and have in _listify(wanted)
                else:  # an operator this emulation does not know never matches
                    ok = False
        if not ok:
            continue
        if st.get("Effect") == "Deny":
            return False
        allowed = allowed or st.get("Effect") == "Allow"
    return allowed


def s3_requests_of(environ: dict[str, Any], query: dict[str, list[str]]) -> list[tuple[str, str, dict[str, str]]]:
    """The (action, resource, context) an S3 request needs, path-style."""
    method = environ.get("REQUEST_METHOD", "GET")
    path = environ.get("PATH_INFO", "/").lstrip("/")
    bucket, _, key = path.partition("/")
    if not bucket:
        return [("s3:ListAllMyBuckets", "arn:aws:s3:::*", {})]
    if not key:
        if method in ("GET", "HEAD") and not ({"uploads", "location", "policy", "acl"} & query.keys()):
            prefix = (query.get("prefix") or [""])[0]
            return [("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": prefix})]
        if method == "POST" and "delete" in query:
            body = _read_body(environ).decode("utf-8", "replace")
            keys = re.findall(r"<Key>(.*?)</Key>", body, re.DOTALL) or [""]
            return [("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{k}", {}) for k in keys]
        return [(f"s3:Bucket{method.title()}", f"arn:aws:s3:::{bucket}", {})]
    resource = f"arn:aws:s3:::{bucket}/{key}"
    if method in ("GET", "HEAD"):
        return [("s3:GetObject", resource, {})]
    if method in ("PUT", "POST"):
        return [("s3:PutObject", resource, {})]
    if method == "DELETE":
        return [("s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject", resource, {})]
    return [(f"s3:Object{method.title()}", resource, {})]


class Middleware:
    """Wraps moto's WSGI app: control API, STS fault injection, ExpiredToken."""

    def __init__(self, app: Callable, state: State) -> None:
        self.app = app
        self.state = state

    def __call__(self, environ: dict[str, Any], start_response: StartResponse):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/__control/"):
            return self.control(path[len("/__control/") :], environ, start_response)

        query = parse_qs(environ.get("QUERY_STRING", ""))
        auth = environ.get("HTTP_AUTHORIZATION", "")
        match = CREDENTIAL_RE.search(auth)
        if match:
            access_key_id, service = match.group(1), match.group(2)
        else:
            cred = (query.get("X-Amz-Credential") or [""])[0].split("/")
            access_key_id = cred[0] or None
            service = cred[3] if len(cred) > 3 else ""

        if service == "sts" or (not service and self._looks_like_sts(environ, query)):
            return self.sts(environ, start_response, query)
        if service in ("s3", ""):
            return self.s3(environ, start_response, query, access_key_id)
        return self.app(environ, start_response)  # iam etc.

    @staticmethod
    def _looks_like_sts(environ: dict[str, Any], query: dict[str, list[str]]) -> bool:
        if "Action" in query:
            return True
        ctype = environ.get("CONTENT_TYPE", "")
        return (
            environ.get("REQUEST_METHOD") == "POST"
            and environ.get("PATH_INFO", "/") == "/"
            and ctype.startswith("application/x-www-form-urlencoded")
        )

    def sts(self, environ, start_response, query):
        body = _read_body(environ)
        action = (query.get("Action") or [""])[0]
        if not action:
            action = (parse_qs(body.decode("utf-8", "replace")).get("Action") or [""])[0]
        self.state.bump("sts_requests")
        if action == "AssumeRole":
            self.state.bump("sts_assume_role_calls")
        if self.state.sts_delay_ms > 0:
            time.sleep(self.state.sts_delay_ms / 1000.0)
        session = (query.get("RoleSessionName") or [""])[0] or (
            parse_qs(body.decode("utf-8", "replace")).get("RoleSessionName") or [""]
        )[0]
        failing = self.state.sts_fail_session
        if self.state.sts_fail or (failing and session == failing):
            self.state.bump("sts_injected_failures")
            return _xml(
                "503 Service Unavailable",
                '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                "<Error><Type>Receiver</Type><Code>ServiceUnavailable</Code>"
                "<Message>Service is unable to handle request.</Message></Error>"
                f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>",
                start_response,
            )
        if self.state.sts_malformed and action == "AssumeRole":
            self.state.bump("sts_malformed_answers")
            return _xml(
                "200 OK",
                '<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                "<AssumeRoleResult><Credentials><AccessKeyId>AKIA</AccessKeyId>"
                "<SecretAccessKey>x</SecretAccessKey><SessionToken></SessionToken>"
                "<Expiration>1970-01-01T00:00:00Z</Expiration></Credentials>"
                "<AssumedRoleUser><AssumedRoleId>AROA:x</AssumedRoleId>"
                "<Arn>arn:aws:sts::123456789012:assumed-role/x/x</Arn></AssumedRoleUser>"
                "</AssumeRoleResult>"
                f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
                "</AssumeRoleResponse>",
                start_response,
            )
        if action == "AssumeRoleWithWebIdentity":
            # AWS does not sign this call (the web identity token is the
            # credential); moto would still demand a signature with auth on.
            from moto import settings

            with WEB_IDENTITY_LOCK:
                settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
                try:
                    return list(self.app(environ, start_response))
                finally:
                    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        return self.app(environ, start_response)

    def s3(self, environ, start_response, query, access_key_id):
        self.state.bump("s3_requests")
        if self.state.s3_delay_ms > 0:
            time.sleep(self.state.s3_delay_ms / 1000.0)
        fail = self.state.s3_fail_status
        if fail and self.state.s3_fail_match in environ.get("PATH_INFO", ""):
            _read_body(environ)
            self.state.bump("s3_5xx" if fail >= 500 else "s3_4xx")
            code, status = {
                503: ("SlowDown", "503 Service Unavailable"),
                500: ("InternalError", "500 Internal Server Error"),
                403: ("AccessDenied", "403 Forbidden"),
            }[fail]
            rid = uuid.uuid4().hex[:16].upper()
            return _xml(
                status,
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>injected</Message>"
                f"<RequestId>{rid}</RequestId></Error>",
                start_response,
            )
        token = environ.get("HTTP_X_AMZ_SECURITY_TOKEN") or (
            query.get("X-Amz-Security-Token") or [None]
        )[0]
        if access_key_id or token:
            session = _find_session(access_key_id, token)
            if session is not None and session.expiration <= _utcnow():
                self.state.bump("s3_expired_rejections")
                if self.state.first_rejection(session.access_key_id):
                    log.info(
                        "ExpiredToken for %s (expired %s UTC); logged once per session",
                        session.access_key_id,
                        session.expiration.isoformat(timespec="seconds"),
                    )
                rid = uuid.uuid4().hex[:16].upper()
                return _xml(
                    "400 Bad Request",
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    "<Error><Code>ExpiredToken</Code>"
                    "<Message>The provided token has expired.</Message>"
                    f"<Token-0>{token or ''}</Token-0>"
                    f"<RequestId>{rid}</RequestId><HostId>{rid}</HostId></Error>",
                    start_response,
                )
            policy = getattr(session, "policy", None) if session is not None else None
            if policy:
                for action, resource, context in s3_requests_of(environ, query):
                    if not policy_allows(policy, action, resource, context):
                        self.state.bump("s3_session_policy_denials")
                        rid = uuid.uuid4().hex[:16].upper()
                        return _xml(
                            "403 Forbidden",
                            '<?xml version="1.0" encoding="UTF-8"?>\n'
                            "<Error><Code>AccessDenied</Code>"
                            f"<Message>{action} on {resource} is not allowed by the session policy</Message>"
                            f"<RequestId>{rid}</RequestId><HostId>{rid}</HostId></Error>",
                            start_response,
                        )

        def counting_start_response(status: str, headers, exc_info=None):
            code = status[:1]
            if code == "4":
                self.state.bump("s3_4xx")
            elif code == "5":
                self.state.bump("s3_5xx")
            return start_response(status, headers, exc_info)

        return self.app(environ, counting_start_response)

    def control(self, what: str, environ, start_response) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            if what == "stats" and method == "GET":
                with self.state.lock:
                    stats: dict[str, Any] = dict(self.state.counters)
                stats["assumed_sessions"] = len(_assumed_roles())
                stats["sts_fail"] = self.state.sts_fail
                stats["sts_delay_ms"] = self.state.sts_delay_ms
                return _json("200 OK", stats, start_response)
            if what == "sts" and method == "POST":
                if "fail" in query:
                    self.state.sts_fail = query["fail"] not in ("0", "false", "")
                    if not self.state.sts_fail:
                        self.state.sts_fail_session = ""
                if "fail_session" in query:
                    self.state.sts_fail_session = query["fail_session"]
                if "delay_ms" in query:
                    self.state.sts_delay_ms = max(0, int(query["delay_ms"]))
                if "malformed" in query:
                    self.state.sts_malformed = query["malformed"] not in ("0", "false", "")
                log.info(
                    "control: sts fail=%s delay_ms=%s",
                    self.state.sts_fail,
                    self.state.sts_delay_ms,
                )
                return _json(
                    "200 OK",
                    {"sts_fail": self.state.sts_fail, "sts_delay_ms": self.state.sts_delay_ms},
                    start_response,
                )
            if what == "s3" and method == "POST":
                if "delay_ms" in query:
                    self.state.s3_delay_ms = max(0, int(query["delay_ms"]))
                if "fail_status" in query:
                    self.state.s3_fail_status = int(query["fail_status"])
                    self.state.s3_fail_match = query.get("match", "")
                log.info(
                    "control: s3 delay_ms=%s fail_status=%s match=%r",
                    self.state.s3_delay_ms,
                    self.state.s3_fail_status,
                    self.state.s3_fail_match,
                )
                return _json(
                    "200 OK",
                    {"s3_delay_ms": self.state.s3_delay_ms, "s3_fail_status": self.state.s3_fail_status},
                    start_response,
                )
            if what == "put" and method == "POST":
                bucket, key = query.get("bucket"), query.get("key")
                if not bucket or not key:
                    return _json("400 Bad Request", {"error": "bucket and key are required"}, start_response)
                body = _read_body(environ)
                put_object(bucket, key, body)
                return _json("200 OK", {"bucket": bucket, "key": key, "size": len(body)}, start_response)
            if what == "objects" and method == "GET":
                keys = list_objects(query.get("bucket", ""), query.get("prefix", ""))
                return _json("200 OK", {"keys": keys}, start_response)
            if what == "delete" and method == "POST":
                bucket, key = query.get("bucket"), query.get("key")
                if not bucket or not key:
                    return _json("400 Bad Request", {"error": "bucket and key are required"}, start_response)
                delete_object(bucket, key)
                return _json("200 OK", {"bucket": bucket, "key": key}, start_response)
            if what == "expire" and method == "POST":
                wanted = query.get("access_key_id")
                # A second in the past, so "expiration <= now" holds at once.
                past = _utcnow().replace(microsecond=0) - __import__("datetime").timedelta(seconds=1)
                n = 0
                for role in _assumed_roles():
                    if wanted is None or role.access_key_id == wanted:
                        role.expiration = past
                        n += 1
                log.info("control: expired %d session(s)", n)
                return _json("200 OK", {"expired": n}, start_response)
            if what == "secrets" and method == "GET":
                # Test-only: every credential value ever issued, so tests can
                # prove none of them reached a response or a log line.
                values = [
                    v
                    for role in _assumed_roles()
                    for v in (role.secret_access_key, role.session_token)
                    if v
                ]
                key_ids = [role.access_key_id for role in _assumed_roles()]
                return _json("200 OK", {"values": values, "key_ids": key_ids}, start_response)
            if what == "sessions" and method == "GET":
                sessions = [
                    {
                        "access_key_id": role.access_key_id,
                        "secret_access_key": role.secret_access_key,
                        "session_token": role.session_token,
                        "policy": getattr(role, "policy", None),
                    }
                    for role in _assumed_roles()
                ]
                return _json("200 OK", {"sessions": sessions}, start_response)
            if what == "reset-stats" and method == "POST":
                self.state.reset()
                return _json("200 OK", {"reset": True}, start_response)
        except Exception as exc:  # a bad control call must not kill the server
            log.exception("control %s failed", what)
            return _json("500 Internal Server Error", {"error": str(exc)}, start_response)
        return _json("404 Not Found", {"error": f"no control endpoint {method} {what}"}, start_response)


def list_objects(bucket: str, prefix: str) -> list[str]:
    from moto.s3.models import s3_backends

    b = s3_backends[ACCOUNT_ID]["aws"].get_bucket(bucket)
    return sorted(k for k in b.keys.keys() if k.startswith(prefix))


def delete_object(bucket: str, key: str) -> None:
    from moto.s3.models import s3_backends

    s3_backends[ACCOUNT_ID]["aws"].delete_object(bucket, key)


def put_object(bucket: str, key: str, body: bytes) -> None:
    from moto.s3.models import s3_backends

    s3_backends[ACCOUNT_ID]["aws"].put_object(bucket, key, body)


def bootstrap(endpoint: str, seed_parquet_rows: int) -> dict[str, str]:
    """Creates the user, role and buckets over HTTP while auth is still off."""
    import boto3

    anon = dict(
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    iam = boto3.client("iam", **anon)
    iam.create_user(UserName=USER_NAME)
    key = iam.create_access_key(UserName=USER_NAME)["AccessKey"]
    iam.put_user_policy(
        UserName=USER_NAME,
        PolicyName="assume-duckgate-reader",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": ROLE_ARN},
                    {"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"},
                ],
            }
        ),
    )
    iam.create_role(
        RoleName=ROLE_NAME,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"AWS": USER_ARN}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
        MaxSessionDuration=43200,
    )
    iam.put_role_policy(
        RoleName=ROLE_NAME,
        PolicyName="s3-all",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
            }
        ),
    )
    s3 = boto3.client("s3", **anon)
    for bucket in BUCKETS:
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket="duckgate-test", Key="data/small.csv", Body=SMALL_CSV)
    if seed_parquet_rows > 0:
        s3.put_object(
            Bucket="duckgate-test",
            Key="data/numbers.parquet",
            Body=make_numbers_parquet(seed_parquet_rows),
        )
    return {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}


def make_numbers_parquet(rows: int) -> bytes:
    import duckdb

    with tempfile.TemporaryDirectory(prefix="duckgate-seed-") as tmp:
        path = os.path.join(tmp, "numbers.parquet")
        con = duckdb.connect()
        con.execute(
            f"""COPY (SELECT i::BIGINT AS id, i * 0.5 AS v, 'row-' || i AS s
                      FROM range({int(rows)}) t(i))
                TO '{path}' (FORMAT parquet)"""
        )
        con.close()
        with open(path, "rb") as f:
            data = f.read()
    log.info("seeded numbers.parquet: %d rows, %d bytes", rows, len(data))
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--seed-parquet", type=int, default=0, metavar="ROWS",
                        help="also upload s3://duckgate-test/data/numbers.parquet with ROWS rows")
    parser.add_argument("--exit-with-stdin", action="store_true",
                        help="exit when stdin reaches EOF (the parent went away)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args()

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="s3_sts_server %(asctime)s %(levelname)s %(message)s",
    )
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    # Auth stays off during bootstrap; switched on below before READY.
    from moto import settings
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")

    class Handler(MotoRequestHandler):
        def log_request(self, *a: Any, **kw: Any) -> None:
            if args.verbose:
                super().log_request(*a, **kw)

    state = State()
    app = Middleware(DomainDispatcherApplication(create_backend_app), state)
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=Handler)
    server.daemon_threads = True
    port = server.server_port
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()

    endpoint = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    creds = bootstrap(endpoint, args.seed_parquet)
    # From here on every action is authenticated (moto compares its action counter
    # against this threshold at each request).
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    state.reset()
    log.info("bootstrap done in %.2fs; IAM auth on", time.monotonic() - started)

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.exit_with_stdin:
        def watch_stdin() -> None:
            try:
                # os.read, not sys.stdin: a daemon thread blocked inside the buffered
                # reader makes the interpreter abort at exit.
                while os.read(0, 65536):
                    pass
            except OSError:
                pass
            finally:
                log.info("stdin closed: shutting down")
                stop.set()

        threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()

    config = {
        **creds,
        "role_arn": ROLE_ARN,
        "region": REGION,
        "endpoint": f"127.0.0.1:{port}",
        "sts_endpoint": endpoint,
        "port": port,
        "account_id": ACCOUNT_ID,
        "buckets": list(BUCKETS),
        "control_url": f"{endpoint}/__control",
    }
    sys.stdout.write("CONFIG " + json.dumps(config) + "\n")
    sys.stdout.write(f"READY {port}\n")
    sys.stdout.flush()

    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
