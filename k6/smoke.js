// duckgate smoke test: a short mixed run against a running gateway.
//
//   k6 run k6/smoke.js                                   # http://127.0.0.1:8080
//   DUCKGATE_URL=http://127.0.0.1:9000 \
//   DUCKGATE_S3_DATA=s3://duckgate-test/data DUCKGATE_S3_PARQUET_ROWS=1000000 \
//   DUCKGATE_ADMIN_TOKEN=... k6 run k6/smoke.js
//
// One VU walks every format, the error path, /healthz, /readyz and /metrics
// (and, when configured, S3 queries and one admin rotation); a second scenario
// adds light concurrent query load for SMOKE_DURATION (default 20s).
// Environment: see k6/lib/duckgate.js; SMOKE_DURATION, SMOKE_VUS (default 2).

import { group, sleep } from 'k6';
import {
  ADMIN_ENABLED,
  FORMATS,
  S3_ENABLED,
  adminSecrets,
  healthz,
  localQuery,
  metrics,
  mixedStatement,
  query,
  readyz,
  rotate,
  s3Query,
} from './lib/duckgate.js';

const DURATION = __ENV.SMOKE_DURATION || '20s';
const VUS = parseInt(__ENV.SMOKE_VUS || '2', 10);

const thresholds = {
  http_req_failed: ['rate<0.01'],
  checks: ['rate>0.99'],
  'http_req_duration{name:healthz}': ['p(99)<25'],
  'http_req_duration{kind:local}': ['p(95)<250'],
  local_query_failed: ['rate<0.01'],
  statement_failed: ['rate==0'],
  statements: ['count>0'],
};
if (S3_ENABLED) {
  thresholds.s3_query_failed = ['rate==0'];
  thresholds.s3_queries = ['count>0'];
  thresholds['http_req_duration{kind:s3}'] = ['p(95)<1000'];
}

export const options = {
  scenarios: {
    walk: { executor: 'shared-iterations', exec: 'walk', vus: 1, iterations: 1, maxDuration: '2m' },
    mixed: {
      executor: 'constant-vus',
      exec: 'mixed',
      vus: VUS,
      duration: DURATION,
    },
  },
  thresholds,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(95)', 'p(99)', 'count'],
};

export function walk() {
  group('formats', () => {
    for (const format of FORMATS) {
      query("SELECT 42 AS answer, 'duck' AS name", { format, rows: 1 });
      localQuery(format);
    }
  });
  group('errors', () => {
    query('SELECT * FROM no_such_table', { expect: 400 });
    query('SELECT 1; SELECT 2', { expect: 400 });
    query('CREATE TABLE t (x INTEGER)', { expect: 403 });
  });
  group('statements', () => {
    mixedStatement('local');
    if (S3_ENABLED) mixedStatement('s3', 500);
  });
  group('probes', () => {
    healthz();
    readyz();
    metrics();
  });
  if (S3_ENABLED) {
    group('s3', () => {
      s3Query('csv');
      s3Query();
    });
  }
  if (ADMIN_ENABLED) {
    group('admin', () => {
      adminSecrets();
      rotate();
      if (S3_ENABLED) s3Query('csv'); // on the new credentials
    });
  }
}

export function mixed() {
  const r = Math.random();
  if (S3_ENABLED && r < 0.2) s3Query();
  else if (r < 0.3) healthz();
  else localQuery();
  sleep(0.1);
}
