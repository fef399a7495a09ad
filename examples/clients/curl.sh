#!/usr/bin/env sh
# curl: a compressed CSV answer (gzip or zstd, as curl asks), and the exit
# status that tells a broken transfer (18) from a whole answer (0).
set -eu
: "${DUCKGATE_URL:=http://127.0.0.1:8080}"
auth=""
[ -n "${DUCKGATE_TOKEN:-}" ] && auth="authorization: Bearer ${DUCKGATE_TOKEN}"
curl -sS --fail-with-body --compressed ${auth:+-H "$auth"} \
    "${DUCKGATE_URL}/query?format=csv" --data-binary "${DUCKGATE_SQL:-SELECT * FROM range(10)}"
