"""Progress lines for k6/run-soak: one line every --every seconds while k6 runs.

    progress.py BASE[,BASE...] CONTROL_URL EVERY_SECS

Reads what the gateway itself counts (GET /metrics: duckgate_http_requests_total
and the duckgate_http_request_duration_seconds histogram; GET /healthz: the
credential epoch and status) and the S3 emulation's ExpiredToken rejections
(GET CONTROL_URL/stats), and prints on stderr:

    run-soak: progress 1m30s: 12,345 requests (+4,101, 136.7/s), 0 failed (5xx),
    p99 8.4 ms, credential epoch 3 (ok), 0 expired-token reads

With several BASEs (k6/run-soak --replicas: each replica's own address, not
the balancer's), requests, 5xx and the histogram are summed over all of them
(the balancer's health checks included) and the credential epoch is given for
each, in order:

    ..., p99 9.1 ms, credential epochs r1 4 (ok), r2 3 (ok), r3 4 (ok), 0 expired-token reads

Counts are since the first poll (the start of the run); p99 is over every
request since then, from the histogram's buckets (the upper bound of the bucket
that holds the 99th percentile). Runs until killed; a poll that fails prints
why and the next one tries again.
"""

import json
import re
import sys
import time
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def scrape(base):
    """(requests, 5xx, {le: cumulative count}) summed over every route."""
    requests = failed = 0.0
    buckets = {}
    for line in get(f"{base}/metrics").splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "duckgate_http_requests_total":
            requests += value
            if re.search(r'status="5\d\d"', labels):
                failed += value
        elif name == "duckgate_http_request_duration_seconds_bucket":
            le = re.search(r'le="([^"]+)"', labels)
            if le:
                bound = float("inf") if le.group(1) == "+Inf" else float(le.group(1))
                buckets[bound] = buckets.get(bound, 0.0) + value
    return requests, failed, buckets


def quantile(now, first, q):
    """Upper bound (s) of the bucket holding quantile q of what arrived since `first`."""
    diff = sorted((le, now.get(le, 0.0) - first.get(le, 0.0)) for le in now)
    if not diff or diff[-1][1] <= 0:
        return None
    total = diff[-1][1]
    for le, count in diff:
        if count >= q * total:
            return le
    return None


def clock(secs):
    secs = int(secs)
    return f"{secs // 60}m{secs % 60:02d}s" if secs >= 60 else f"{secs}s"


def epochs(healths):
    if len(healths) == 1:
        h = healths[0]
        return f"credential epoch {h.get('credential_epoch')} ({h.get('status')})"
    return "credential epochs " + ", ".join(
        f"r{i} {h.get('credential_epoch')} ({h.get('status')})" for i, h in enumerate(healths, 1))


def main():
    bases, control, every = sys.argv[1].split(","), sys.argv[2], float(sys.argv[3])
    start = time.monotonic()
    first = last = None
    while True:
        try:
            requests = failed = 0.0
            buckets = {}
            healths = []
            for base in bases:
                r, f, b = scrape(base)
                requests += r
                failed += f
                for le, n in b.items():
                    buckets[le] = buckets.get(le, 0.0) + n
                healths.append(json.loads(get(f"{base}/healthz")))
            stats = json.loads(get(f"{control}/stats"))
            expired = stats.get("s3_expired_rejections", 0)
            now = time.monotonic()
            if first is None:
                first = last = (now, requests, failed, buckets, expired)
            else:
                t0, r0, f0, b0, e0 = first
                tl, rl = last[0], last[1]
                p99 = quantile(buckets, b0, 0.99)
                p99_text = "-" if p99 is None else (
                    "> largest bucket" if p99 == float("inf") else f"{p99 * 1000:.1f} ms")
                print(
                    f"run-soak: progress {clock(now - start)}: {requests - r0:,.0f} requests "
                    f"(+{requests - rl:,.0f}, {(requests - rl) / max(now - tl, 1e-9):.1f}/s), "
                    f"{failed - f0:,.0f} failed (5xx), p99 {p99_text}, "
                    f"{epochs(healths)}, "
                    f"{expired - e0} expired-token reads",
                    file=sys.stderr,
                    flush=True,
                )
                last = (now, requests, failed, buckets, expired)
        except Exception as e:  # noqa: BLE001 - a progress line is best effort
            print(f"run-soak: progress {clock(time.monotonic() - start)}: poll failed: {e}",
                  file=sys.stderr, flush=True)
        time.sleep(every)


if __name__ == "__main__":
    main()
