#!/usr/bin/env python3
"""A local OIDC issuer for duckgate's tests (tests/it/venv/oidc.rs): keys made
here at start, a discovery document and a JWKS served over HTTP on 127.0.0.1,
and tokens minted (with PyJWT) or forged on request.

    $DUCKGATE_TEST_PYTHON tests/support/oidc_issuer.py --port 0 --exit-with-stdin

STDOUT: one line, `READY <port>`, once it accepts requests; nothing else. The
issuer is `http://127.0.0.1:<port>`. Logs go to stderr (off unless --verbose).
With --exit-with-stdin it exits when its stdin reaches EOF (the test died).

SERVED
  GET /.well-known/openid-configuration   {"issuer": ..., "jwks_uri": <issuer>/jwks}
  GET /jwks                               the published keys' public JWKs
While "down", both answer 503.

CONTROL (JSON in, JSON out; no auth: loopback only)
  POST /control/key     {"name", "type": "RSA"|"EC", "kid"?}  makes a key (kid
                        defaults to its name), unpublished
  POST /control/publish {"names": [...]}   the keys the JWKS lists, in order
  POST /control/bulk    {"count": N}   makes N EC keys `bulk-<i>` and publishes
                        them after the keys already published (an issuer that
                        publishes thousands)
  POST /control/mint    {"key", "alg", "claims", "kid"?: str|null, "headers"?}
                        a token signed by the key (kid: the key's, unless given;
                        null leaves it out) -> {"token": ...}
  POST /control/forge   {"kind": "none"|"hs256-public", "key", "claims"}
                        a token with `alg: none` and no signature, or HS256 whose
                        HMAC secret is the key's public PEM -> {"token": ...}
  POST /control/down, /control/up
  GET  /control/stats   {"jwks_fetches", "discovery_fetches"}

Two keys exist and are published at start: `rsa-1` (RSA 2048) and `ec-1` (P-256).
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def int_b64(n: int, length: int = 0) -> str:
    length = length or (n.bit_length() + 7) // 8
    return b64url(n.to_bytes(length, "big"))


class Key:
    def __init__(self, name, kind, kid):
        self.name, self.kind, self.kid = name, kind, kid
        if kind == "RSA":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif kind == "EC":
            self.private = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(f"unknown key type {kind}")

    def jwk(self):
        pub = self.private.public_key().public_numbers()
        if self.kind == "RSA":
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                    "n": int_b64(pub.n), "e": int_b64(pub.e)}
        return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                "x": int_b64(pub.x, 32), "y": int_b64(pub.y, 32)}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class Issuer:
    def __init__(self):
        self.lock = threading.Lock()
        self.base = None
        self.keys = {}
        self.published = []
        self.down = False
        self.jwks_fetches = 0
        self.discovery_fetches = 0
        for name, kind in (("rsa-1", "RSA"), ("ec-1", "EC")):
            self.keys[name] = Key(name, kind, name)
        self.published = ["rsa-1", "ec-1"]


ISSUER = Issuer()


def forged(kind, key, claims):
    def part(obj):
        return b64url(json.dumps(obj, separators=(",", ":")).encode())
    if kind == "none":
        header = {"alg": "none", "typ": "JWT", "kid": key.kid}
        return f"{part(header)}.{part(claims)}."
    if kind == "hs256-public":
        # The classic confusion: a verifier that takes the algorithm from the
        # token would use the RSA public key's PEM as the HMAC secret.
        header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
        signing_input = f"{part(header)}.{part(claims)}".encode()
        sig = hmac.new(key.public_pem(), signing_input, hashlib.sha256).digest()
        return f"{signing_input.decode()}.{b64url(sig)}"
    raise ValueError(f"unknown forgery {kind}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if VERBOSE:
            sys.stderr.write("oidc-issuer: " + (fmt % args) + "\n")

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        it = ISSUER
        if self.path == "/.well-known/openid-configuration":
            with it.lock:
                it.discovery_fetches += 1
                down = it.down
            if down:
                return self.answer(503, {"error": "down"})
            return self.answer(200, {"issuer": it.base, "jwks_uri": it.base + "/jwks"})
        if self.path == "/jwks":
            with it.lock:
                it.jwks_fetches += 1
                down = it.down
                keys = [it.keys[n].jwk() for n in it.published]
            if down:
                return self.answer(503, {"error": "down"})
            return self.answer(200, {"keys": keys})
        if self.path == "/control/stats":
            with it.lock:
                return self.answer(200, {"jwks_fetches": it.jwks_fetches,
                                         "discovery_fetches": it.discovery_fetches})
        self.answer(404, {"error": "no such path"})

    def do_POST(self):
        it = ISSUER
        try:
            req = self.body()
            if self.path == "/control/key":
                key = Key(req["name"], req["type"], req.get("kid") or req["name"])
                with it.lock:
                    it.keys[key.name] = key
                return self.answer(200, {"kid": key.kid})
            if self.path == "/control/publish":
                with it.lock:
                    it.published = list(req["names"])
                return self.answer(200, {"published": it.published})
            if self.path == "/control/bulk":
                made = [Key(f"bulk-{i}", "EC", f"bulk-{i}") for i in range(int(req["count"]))]
                with it.lock:
                    for k in made:
                        it.keys[k.name] = k
                    it.published = it.published + [k.name for k in made]
                    n = len(it.published)
                return self.answer(200, {"published": n})
            if self.path == "/control/mint":
                key = it.keys[req["key"]]
                headers = dict(req.get("headers") or {})
                kid = req["kid"] if "kid" in req else key.kid
                if kid is not None:
                    headers["kid"] = kid
                token = jwt.encode(req["claims"], key.private, algorithm=req["alg"],
                                   headers=headers)
                return self.answer(200, {"token": token})
            if self.path == "/control/forge":
                return self.answer(200, {"token": forged(req["kind"], it.keys[req["key"]],
                                                         req["claims"])})
            if self.path in ("/control/down", "/control/up"):
                with it.lock:
                    it.down = self.path.endswith("down")
                return self.answer(200, {"down": it.down})
            self.answer(404, {"error": "no such path"})
        except Exception as e:  # the test reads the reason
            self.answer(400, {"error": repr(e)})


VERBOSE = False


def main():
    global VERBOSE
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--exit-with-stdin", action="store_true")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    VERBOSE = args.verbose
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    ISSUER.base = f"http://127.0.0.1:{port}"
    if args.exit_with_stdin:
        def watch():
            sys.stdin.read()
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    print(f"READY {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
