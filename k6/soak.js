// duckgate soak test: a long mixed run that crosses STS credential expiries.
//
// Usually started by k6/run-soak, which brings up the S3/STS emulation and
// the gateway first. By hand, against a running gateway:
//
//   DUCKGATE_URL=http://127.0.0.1:8080 DUCKGATE_ADMIN_TOKEN=... \
//   DUCKGATE_S3_DATA=s3://duckgate-test/data DUCKGATE_S3_PARQUET_ROWS=1000000 \
//   SOAK_DURATION=20m k6 run k6/soak.js
//
// Scenarios (all open-model, constant arrival rate, so a slow gateway shows as
// latency and dropped iterations rather than as a quietly lower load):
//   local    SOAK_LOCAL_RATE local queries/s (default 10), every format
//   s3       SOAK_S3_RATE S3 queries/s (default 2): read_csv / read_parquet of
//            DUCKGATE_S3_DATA, content verified (only when DUCKGATE_S3_DATA is set)
//   lake     SOAK_LAKE_RATE DuckLake queries/s (default 2) of
//            DUCKGATE_LAKE_TABLE (DUCKGATE_LAKE_ROWS rows), content verified
//            (only when DUCKGATE_LAKE_TABLE is set: k6/run-soak --lake)
//   healthz  one GET /healthz per second, as an orchestrator's probe would
//   metrics  one GET /metrics every 15 s, as a Prometheus scrape would
//   statements one async statement every SOAK_STATEMENT_EVERY (default 5s):
//            submitted, polled, paged in a random format, deleted; with S3,
//            every other one reads S3 and holds SOAK_STATEMENT_HOLD_MS
//            (default 3000), so some span a rotation
//   rotate   one POST /admin/secrets/rotate every SOAK_ROTATE_EVERY (default
//            10m), from SOAK_ROTATE_START (default 30s; only with an admin token)
//
// SOAK_MODE=capacity replaces them all with one closed loop of SOAK_CAPACITY_VUS
// (default 4) virtual users running the local and S3 queries in the ratio
// SOAK_LOCAL_RATE:SOAK_S3_RATE for SOAK_DURATION, no thresholds: k6/run-soak
// --load measures capacity with it, then sets the rates to a share of it.
//
// Thresholds (any crossed makes k6 exit 99):
//   http_req_failed            < 0.1 %
//   s3_query_failed            == 0   (and s3_queries > 0 when S3 is configured)
//   lake_query_failed          == 0   (and lake_queries > 0 with a lake)
//   statement_failed           == 0   (and statements > 0)
//   healthz p99                < SOAK_HEALTHZ_P99_MS (default 25 ms)
//   query p95                  < SOAK_QUERY_P95_MS (default 250 ms), every query
//   local query p95            < SOAK_LOCAL_P95_MS (default 50 ms)
//   checks                     > 99.9 %

import {
  ADMIN_ENABLED,
  LAKE_ENABLED,
  S3_ENABLED,
  healthz,
  lakeQuery,
  localQuery,
  metrics,
  mixedStatement,
  parseDuration,
  rotate,
  s3Query,
} from './lib/duckgate.js';

const DURATION = __ENV.SOAK_DURATION || '20m';
const LOCAL_RATE = parseInt(__ENV.SOAK_LOCAL_RATE || '10', 10);
const S3_RATE = parseInt(__ENV.SOAK_S3_RATE || '2', 10);
const LAKE_RATE = parseInt(__ENV.SOAK_LAKE_RATE || '2', 10);
const ROTATE_EVERY = __ENV.SOAK_ROTATE_EVERY || '10m';
const ROTATE_START = __ENV.SOAK_ROTATE_START || '30s';
const STATEMENT_EVERY = __ENV.SOAK_STATEMENT_EVERY || '5s';
const STATEMENT_HOLD_MS = parseInt(__ENV.SOAK_STATEMENT_HOLD_MS || '3000', 10);
const QUERY_P95_MS = parseInt(__ENV.SOAK_QUERY_P95_MS || '250', 10);
const LOCAL_P95_MS = parseInt(__ENV.SOAK_LOCAL_P95_MS || '50', 10);
const HEALTHZ_P99_MS = parseInt(__ENV.SOAK_HEALTHZ_P99_MS || '25', 10);

const totalSecs = parseDuration(DURATION);
// SOAK_MODE=capacity: no soak, a closed-loop measurement of the mix (k6/run-soak --load).
const CAPACITY = __ENV.SOAK_MODE === 'capacity';

function rateScenario(exec, rate, timeUnit, vus, maxVUs, extra = {}) {
  return Object.assign(
    {
      executor: 'constant-arrival-rate',
      exec,
      rate,
      timeUnit,
      duration: DURATION,
      preAllocatedVUs: vus,
      maxVUs,
      gracefulStop: '30s',
    },
    extra,
  );
}

// VUs for a rate: start with enough for ~50 ms answers, grow to hold it
// while answers take up to ~200 ms.
const vusFor = (rate) => Math.max(2, Math.ceil(rate / 20));
const maxVusFor = (rate) => Math.max(6, Math.ceil(rate / 5));

const scenarios = CAPACITY
  ? {
      // Closed loop, as fast as answers come: what the gateway can do with
      // the soak's mix of local and S3 queries (SOAK_LOCAL_RATE:SOAK_S3_RATE).
      capacity: {
        executor: 'constant-vus',
        exec: 'mix',
        vus: parseInt(__ENV.SOAK_CAPACITY_VUS || '4', 10),
        duration: DURATION,
      },
    }
  : {
      local: rateScenario('local', LOCAL_RATE, '1s', vusFor(LOCAL_RATE), maxVusFor(LOCAL_RATE)),
      healthz: rateScenario('probe', 1, '1s', 1, 2),
      metrics: rateScenario('scrape', 1, '15s', 1, 1),
      statements: rateScenario('statement', 1, STATEMENT_EVERY, 1, 4),
    };
if (S3_ENABLED && !CAPACITY) {
  scenarios.s3 = rateScenario('s3', S3_RATE, '1s', vusFor(S3_RATE), maxVusFor(S3_RATE));
}
if (LAKE_ENABLED && !CAPACITY) {
  scenarios.lake = rateScenario('lake', LAKE_RATE, '1s', 2, 6);
}
if (ADMIN_ENABLED && !CAPACITY) {
  const start = Math.min(parseDuration(ROTATE_START), totalSecs / 4);
  scenarios.rotate = rateScenario('rotation', 1, ROTATE_EVERY, 1, 1, {
    startTime: `${Math.round(start)}s`,
    duration: `${Math.max(1, Math.round(totalSecs - start))}s`,
  });
}

const thresholds = {
  http_req_failed: ['rate<0.001'],
  checks: ['rate>0.999'],
  'http_req_duration{name:healthz}': [`p(99)<${HEALTHZ_P99_MS}`],
  'http_req_duration{name:query}': [`p(95)<${QUERY_P95_MS}`],
  'http_req_duration{kind:local}': [`p(95)<${LOCAL_P95_MS}`],
  local_query_failed: ['rate<0.001'],
  statement_failed: ['rate==0'],
  statements: ['count>0'],
  healthz_not_ok: ['rate<0.001'],
  // Sub-metrics the summary should show even without a threshold of their own.
  'http_req_duration{name:metrics}': ['max>=0'],
};
if (S3_ENABLED) {
  thresholds.s3_query_failed = ['rate==0'];
  thresholds.s3_query_failures = ['count==0'];
  thresholds.s3_queries = ['count>0'];
  thresholds['http_req_duration{kind:s3}'] = [`p(95)<${QUERY_P95_MS}`];
}
if (LAKE_ENABLED) {
  thresholds.lake_query_failed = ['rate==0'];
  thresholds.lake_query_failures = ['count==0'];
  thresholds.lake_queries = ['count>0'];
  thresholds['http_req_duration{kind:lake}'] = [`p(95)<${QUERY_P95_MS}`];
}
if (ADMIN_ENABLED) thresholds['http_req_duration{name:admin_rotate}'] = ['max>=0'];

export const options = {
  scenarios,
  thresholds: CAPACITY ? {} : thresholds,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'count'],
};

export function local() {
  localQuery();
}

export function mix() {
  const s3Share = S3_ENABLED ? S3_RATE / (LOCAL_RATE + S3_RATE) : 0;
  if (Math.random() < s3Share) {
    s3Query();
  } else {
    localQuery();
  }
}

let statementCount = 0;

export function statement() {
  statementCount += 1;
  const kind = S3_ENABLED && statementCount % 2 === 0 ? 's3' : 'local';
  mixedStatement(kind, STATEMENT_HOLD_MS);
}

export function s3() {
  s3Query();
}

export function lake() {
  lakeQuery();
}

export function probe() {
  healthz();
}

export function scrape() {
  metrics();
}

export function rotation() {
  rotate();
}
