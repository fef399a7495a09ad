// Shared request helpers for duckgate's k6 scripts (k6/smoke.js, k6/soak.js).
//
// Every helper tags its requests (`name`, and for queries `kind` = local|s3 and
// `format`), runs its checks, and feeds the custom metrics below, so scripts
// can put thresholds on tagged sub-metrics such as
// `http_req_duration{name:healthz}` or `http_req_duration{kind:s3}`.
//
// Configuration comes from the environment (k6 passes it as __ENV):
//   DUCKGATE_URL              gateway base URL (default http://127.0.0.1:8080)
//   DUCKGATE_QUERY_TOKEN      bearer token for /query (unset: anonymous)
//   DUCKGATE_ADMIN_TOKEN      bearer token for /admin/... (unset: no rotations)
//   DUCKGATE_S3_DATA          S3 prefix holding the test data, e.g.
//                             s3://duckgate-test/data (unset: no S3 queries)
//   DUCKGATE_S3_PARQUET_ROWS  rows of <prefix>/numbers.parquet (as seeded by
//                             tests/support/s3_sts_server.py --seed-parquet);
//                             unset or 0: no parquet queries, CSV only
//   DUCKGATE_QUERY_TIMEOUT    client-side timeout of one request (default 60s)
//   DUCKGATE_LAKE_TABLE       a DuckLake table the gateway serves, e.g.
//                             lake.main.events, with columns id BIGINT (0..n-1),
//                             name VARCHAR ('event ' || id) (unset: no lake queries)
//   DUCKGATE_LAKE_ROWS        its row count n

import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';

export const BASE_URL = (__ENV.DUCKGATE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
export const QUERY_TOKEN = __ENV.DUCKGATE_QUERY_TOKEN || '';
export const ADMIN_TOKEN = __ENV.DUCKGATE_ADMIN_TOKEN || '';
export const S3_DATA = (__ENV.DUCKGATE_S3_DATA || '').replace(/\/+$/, '');
export const S3_PARQUET_ROWS = parseInt(__ENV.DUCKGATE_S3_PARQUET_ROWS || '0', 10) || 0;
export const S3_ENABLED = S3_DATA !== '';
export const ADMIN_ENABLED = ADMIN_TOKEN !== '';
export const LAKE_TABLE = __ENV.DUCKGATE_LAKE_TABLE || '';
export const LAKE_ROWS = parseInt(__ENV.DUCKGATE_LAKE_ROWS || '0', 10) || 0;
export const LAKE_ENABLED = LAKE_TABLE !== '';
const REQUEST_TIMEOUT = __ENV.DUCKGATE_QUERY_TIMEOUT || '60s';

// ---- custom metrics --------------------------------------------------------

/** Every S3 query; with `s3_query_failed` the basis of "zero failed S3 queries". */
export const s3Queries = new Counter('s3_queries');
/** S3 queries that did not answer 200 with the expected content. */
export const s3QueryFailures = new Counter('s3_query_failures');
/** 1 per failed S3 query, 0 per good one. */
export const s3QueryFailed = new Rate('s3_query_failed');
/** Queries the gateway retried after a credential refresh (header duckgate-retried). */
export const queriesRetried = new Counter('queries_retried');
/** Every DuckLake query. */
export const lakeQueries = new Counter('lake_queries');
/** DuckLake queries that did not answer 200 with the expected content. */
export const lakeQueryFailures = new Counter('lake_query_failures');
/** 1 per failed DuckLake query, 0 per good one. */
export const lakeQueryFailed = new Rate('lake_query_failed');
/** Local (non-S3) queries that did not answer as expected. */
export const localQueryFailed = new Rate('local_query_failed');
/** The credential epoch each query ran under (header duckgate-credential-epoch). */
export const credentialEpoch = new Trend('credential_epoch');
/** 1 per /healthz answer that is not 200 with status "ok" and live credentials. */
export const healthzNotOk = new Rate('healthz_not_ok');
/** Successful POST /admin/secrets/rotate calls. */
export const adminRotations = new Counter('admin_rotations');
/** Async statements submitted (POST /statements). */
export const statements = new Counter('statements');
/** 1 per statement that did not succeed with the expected rows, 0 per good one. */
export const statementFailed = new Rate('statement_failed');
/** Submit to last page, per statement (ms). */
export const statementDuration = new Trend('statement_duration', true);

// ---- formats ---------------------------------------------------------------

export const FORMATS = ['json', 'ndjson', 'csv', 'arrow'];

const CONTENT_TYPES = {
  json: 'application/json',
  ndjson: 'application/x-ndjson',
  csv: 'text/csv',
  arrow: 'application/vnd.apache.arrow.stream',
};

function header(res, name) {
  const want = name.toLowerCase();
  for (const k of Object.keys(res.headers || {})) {
    if (k.toLowerCase() === want) return res.headers[k];
  }
  return undefined;
}

function bearer(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/**
 * Rows of a 200 answer in `format`, as arrays of values (json), objects
 * (ndjson), or arrays of strings (csv, header dropped). `null` for arrow (only
 * its framing is checked) and for a body that does not parse.
 */
export function rowsOf(res, format) {
  try {
    if (format === 'json') return JSON.parse(res.body).rows;
    if (format === 'ndjson') {
      const lines = String(res.body).split('\n').filter((l) => l !== '');
      const objs = lines.map((l) => JSON.parse(l));
      // A mid-stream error ends an NDJSON body with {"error": {...}}.
      if (objs.some((o) => o && o.error !== undefined)) return null;
      return objs;
    }
    if (format === 'csv') {
      const lines = String(res.body).split(/\r?\n/).filter((l) => l !== '');
      return lines.slice(1).map((l) => l.split(','));
    }
  } catch (_) {
    return null;
  }
  return null;
}

/** Arrow IPC stream: starts with the 0xFFFFFFFF continuation marker. */
function looksLikeArrowStream(res) {
  const body = res.body;
  if (!body || typeof body === 'string' || body.byteLength < 8) return false;
  const head = new Uint8Array(body, 0, 4);
  return head[0] === 0xff && head[1] === 0xff && head[2] === 0xff && head[3] === 0xff;
}

/**
 * POST /query.
 *
 * opts:
 *   format   json (default) | ndjson | csv | arrow
 *   params   positional parameters
 *   kind     'local' (default) or 's3': picks the metrics it feeds
 *   expect   expected HTTP status (default 200); other statuses than 2xx are
 *            then not counted in http_req_failed
 *   rows     expected row count (checked for json/ndjson/csv)
 *   verify   function(rows, res) -> bool, an extra content check on 200s
 *   tags     extra tags
 *
 * Returns { res, ok, rows }.
 */
export function query(sql, opts = {}) {
  const format = opts.format || 'json';
  const kind = opts.kind || 'local';
  const expect = opts.expect || 200;
  const tags = Object.assign({ name: 'query', kind, format }, opts.tags || {});
  const body = { sql, format };
  if (opts.params) body.params = opts.params;
  if (opts.timeout_ms) body.timeout_ms = opts.timeout_ms;
  if (opts.max_rows) body.max_rows = opts.max_rows;
  const params = {
    headers: Object.assign({ 'Content-Type': 'application/json' }, bearer(QUERY_TOKEN)),
    tags,
    timeout: REQUEST_TIMEOUT,
  };
  if (format === 'arrow') params.responseType = 'binary';
  if (expect !== 200) params.responseCallback = http.expectedStatuses(expect);

  const res = http.post(`${BASE_URL}/query`, JSON.stringify(body), params);

  let rows = null;
  let ok;
  if (expect === 200) {
    const ctype = header(res, 'content-type') || '';
    const epoch = parseInt(header(res, 'duckgate-credential-epoch') || '', 10);
    rows = res.status === 200 ? rowsOf(res, format) : null;
    const checks = {
      [`${kind} query: status 200`]: (r) => r.status === 200,
      [`${kind} query: content type ${format}`]: () => ctype.startsWith(CONTENT_TYPES[format]),
      [`${kind} query: credential epoch header`]: () => Number.isInteger(epoch),
      [`${kind} query: body parses`]: (r) =>
        format === 'arrow' ? looksLikeArrowStream(r) : rows !== null,
    };
    if (opts.rows !== undefined && format !== 'arrow') {
      checks[`${kind} query: row count`] = () => rows !== null && rows.length === opts.rows;
    }
    if (opts.verify) {
      checks[`${kind} query: content`] = (r) => {
        try {
          return Boolean(opts.verify(rows, r));
        } catch (_) {
          return false;
        }
      };
    }
    ok = check(res, checks, tags);
    if (Number.isInteger(epoch)) credentialEpoch.add(epoch, { kind });
    if (header(res, 'duckgate-retried')) queriesRetried.add(1, { kind });
  } else {
    ok = check(res, { [`${kind} query: status ${expect}`]: (r) => r.status === expect }, tags);
  }

  if (kind === 's3') {
    s3Queries.add(1);
    s3QueryFailed.add(!ok);
    if (!ok) {
      s3QueryFailures.add(1);
      console.error(`S3 query failed: status ${res.status} ${res.error || ''} ${String(res.body).slice(0, 300)}`);
    }
  } else if (kind === 'lake') {
    lakeQueries.add(1);
    lakeQueryFailed.add(!ok);
    if (!ok) {
      lakeQueryFailures.add(1);
      console.error(`lake query failed: status ${res.status} ${res.error || ''} ${String(res.body).slice(0, 300)}`);
    }
  } else {
    localQueryFailed.add(!ok);
  }
  return { res, ok, rows };
}

// ---- the query mixes both scripts use --------------------------------------

function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

/** One local query (no S3) in `format`, a random shape from a small mix. */
export function localQuery(format) {
  const f = format || pick(FORMATS);
  const n = 1 + Math.floor(Math.random() * 1000);
  const shapes = [
    () =>
      query('SELECT $1::INTEGER * 2 AS doubled', {
        format: f,
        params: [21],
        rows: 1,
        verify: (rows) => f === 'arrow' || String(f === 'ndjson' ? rows[0].doubled : rows[0][0]) === '42',
      }),
    () =>
      query(`SELECT i, i * 2 AS d, 'r' || i AS s FROM range(${n}) t(i)`, {
        format: f,
        rows: n,
      }),
    () =>
      query('SELECT count(*) AS n, sum(i) AS total FROM range(200000) t(i)', {
        format: f,
        rows: 1,
        verify: (rows) =>
          f === 'arrow' ||
          String(f === 'ndjson' ? rows[0].n : rows[0][0]) === '200000',
      }),
  ];
  return pick(shapes)();
}

/** Expected sum(v) of numbers.parquet: v = id * 0.5 for id in 0..rows-1. */
function parquetTotal(rows) {
  return (rows * (rows - 1)) / 4;
}

/**
 * One S3 query: read_csv of <S3_DATA>/small.csv, or (when the parquet row
 * count is known) an aggregate or a point range over <S3_DATA>/numbers.parquet.
 * Content is verified, so a query that answers 200 with wrong data fails too.
 */
export function s3Query(which) {
  const csv = `${S3_DATA}/small.csv`;
  const parquet = `${S3_DATA}/numbers.parquet`;
  const shapes = {
    csv: () =>
      query(`SELECT id, name, score FROM read_csv('${csv}') ORDER BY id`, {
        kind: 's3',
        rows: 3,
        verify: (rows) => rows[1][1] === 'beta' && Number(rows[2][2]) === 3.5,
      }),
    csv_ndjson: () =>
      query(`SELECT * FROM read_csv('${csv}') ORDER BY id`, {
        kind: 's3',
        format: 'ndjson',
        rows: 3,
        verify: (rows) => rows[0].name === 'alpha',
      }),
    parquet_agg: () =>
      query(`SELECT count(*) AS n, sum(v) AS total FROM read_parquet('${parquet}')`, {
        kind: 's3',
        rows: 1,
        verify: (rows) =>
          Number(rows[0][0]) === S3_PARQUET_ROWS &&
          Number(rows[0][1]) === parquetTotal(S3_PARQUET_ROWS),
      }),
    parquet_range: () => {
      const lo = Math.floor(Math.random() * Math.max(1, S3_PARQUET_ROWS - 10));
      return query(
        `SELECT id, s FROM read_parquet('${parquet}') WHERE id BETWEEN $1 AND $2 ORDER BY id`,
        {
          kind: 's3',
          params: [lo, lo + 9],
          rows: Math.min(10, S3_PARQUET_ROWS - lo),
          verify: (rows) => rows.every((r) => r[1] === `row-${r[0]}`),
        },
      );
    },
    parquet_csv: () =>
      query(`SELECT s, v FROM read_parquet('${parquet}') WHERE id < 100 ORDER BY id`, {
        kind: 's3',
        format: 'csv',
        rows: Math.min(100, S3_PARQUET_ROWS),
        verify: (rows) => rows[0][0] === 'row-0',
      }),
  };
  const names = S3_PARQUET_ROWS > 0 ? Object.keys(shapes) : ['csv', 'csv_ndjson'];
  return shapes[which || pick(names)]();
}

/**
 * One query of the DuckLake table LAKE_TABLE (LAKE_ROWS rows, id 0..n-1,
 * name 'event ' || id): a whole-table aggregate, a point range, or a
 * column slice as Arrow. Its data files are on S3, so each read that misses
 * DuckDB's caches needs live credentials; content is verified.
 */
export function lakeQuery(which) {
  const n = LAKE_ROWS;
  const shapes = {
    aggregate: () =>
      query(`SELECT count(*) AS n, sum(id) AS s, min(name) AS first FROM ${LAKE_TABLE}`, {
        kind: 'lake',
        rows: 1,
        verify: (rows) =>
          Number(rows[0][0]) === n && Number(rows[0][1]) === (n * (n - 1)) / 2 && rows[0][2] === 'event 0',
      }),
    range: () => {
      const lo = Math.floor(Math.random() * Math.max(1, n - 10));
      return query(`SELECT id, name FROM ${LAKE_TABLE} WHERE id BETWEEN $1 AND $2 ORDER BY id`, {
        kind: 'lake',
        params: [lo, lo + 9],
        rows: Math.min(10, n - lo),
        verify: (rows) => rows.every((r) => r[1] === `event ${r[0]}`),
      });
    },
    arrow: () =>
      query(`SELECT id FROM ${LAKE_TABLE} WHERE id % 100 = 0`, { kind: 'lake', format: 'arrow' }),
  };
  return shapes[which || pick(Object.keys(shapes))]();
}

// ---- async statements ------------------------------------------------------

/**
 * One async statement: POST /statements (wait_ms, default 0), poll
 * GET /statements/{id} until it finishes, page its result in `format` with
 * `pageRows` rows per page following Link rel="next", check the rows, then
 * DELETE it (its spool file goes at once).
 *
 * opts: format (json), params, kind (local|s3), rows (expected total),
 *       pageRows (default 1000), wait_ms (default 0), verify(rows) -> bool
 * Returns true when it succeeded with the expected rows.
 */
export function statement(sql, opts = {}) {
  const format = opts.format || 'json';
  const kind = opts.kind || 'local';
  const pageRows = opts.pageRows || 1000;
  const headers = Object.assign({ 'Content-Type': 'application/json' }, bearer(QUERY_TOKEN));
  const body = { sql, format, wait_ms: opts.wait_ms || 0 };
  if (opts.params) body.params = opts.params;
  const started = Date.now();
  statements.add(1, { kind });
  const submitted = http.post(`${BASE_URL}/statements`, JSON.stringify(body), {
    headers,
    tags: { name: 'statement_submit', kind },
    timeout: REQUEST_TIMEOUT,
    responseType: format === 'arrow' ? 'binary' : 'text',
  });
  const id = header(submitted, 'duckgate-query-id');
  let ok = check(submitted, {
    [`${kind} statement: submitted (200 or 202)`]: (r) => r.status === 200 || r.status === 202,
  });
  const fail = (why) => {
    statementFailed.add(1, { kind });
    console.error(`${kind} statement ${id} failed: ${why}`);
    if (id) http.del(`${BASE_URL}/statements/${id}`, null, { headers, tags: { name: 'statement_delete', kind } });
    return false;
  };
  if (!ok || !id) return fail(`submit answered ${submitted.status} ${String(submitted.body).slice(0, 300)}`);
  if (submitted.status === 202) {
    const until = Date.now() + parseDuration(REQUEST_TIMEOUT) * 1000;
    let state = 'queued';
    let status = null;
    while (state === 'queued' || state === 'running') {
      if (Date.now() > until) return fail(`still ${state} after ${REQUEST_TIMEOUT}`);
      sleep(0.2);
      const r = http.get(`${BASE_URL}/statements/${id}`, { headers, tags: { name: 'statement_poll', kind } });
      if (r.status !== 200) return fail(`poll answered ${r.status}`);
      status = JSON.parse(r.body);
      state = status.state;
    }
    if (state !== 'succeeded') return fail(`ended ${state}: ${JSON.stringify(status.problem || {})}`);
  }
  // Page the result (the 200 answer of a quick one is its first page too).
  let rows = [];
  let next = `/statements/${id}/result?format=${format}&offset=0&limit=${pageRows}`;
  let pages = 0;
  while (next) {
    const r = http.get(`${BASE_URL}${next}`, {
      headers,
      tags: { name: 'statement_result', kind, format },
      timeout: REQUEST_TIMEOUT,
      responseType: format === 'arrow' ? 'binary' : 'text',
    });
    if (r.status !== 200) return fail(`page ${next} answered ${r.status}`);
    pages += 1;
    if (format === 'arrow') {
      if (!looksLikeArrowStream(r)) return fail('a page is not an Arrow stream');
    } else {
      const page = rowsOf(r, format);
      if (page === null) return fail(`page ${next} does not parse`);
      rows = rows.concat(page);
    }
    const link = header(r, 'link');
    next = link ? link.slice(link.indexOf('<') + 1, link.indexOf('>')) : null;
    if (pages > 10000) return fail('pages never end');
  }
  ok = check(rows, {
    [`${kind} statement: row count`]: (all) =>
      format === 'arrow' || opts.rows === undefined || all.length === opts.rows,
    [`${kind} statement: content`]: (all) => format === 'arrow' || !opts.verify || Boolean(opts.verify(all)),
  });
  http.del(`${BASE_URL}/statements/${id}`, null, { headers, tags: { name: 'statement_delete', kind } });
  statementDuration.add(Date.now() - started, { kind });
  if (!ok) return fail(`${rows.length} rows, expected ${opts.rows}`);
  statementFailed.add(0, { kind });
  return true;
}

/**
 * A statement mix: local (a few thousand rows, paged) or, with S3, an S3
 * read that also sleeps `holdMs`, so some statements span a rotation.
 */
export function mixedStatement(kind, holdMs) {
  const format = pick(FORMATS);
  if (kind === 's3') {
    const csv = `${S3_DATA}/small.csv`;
    return statement(
      `SELECT id, name, score, slept FROM read_csv('${csv}'), (SELECT sleep_ms(${holdMs || 0}) IS NULL AS slept) ORDER BY id`,
      { kind: 's3', format, rows: 3, pageRows: 2, verify: (rows) => rows.length === 3 },
    );
  }
  const n = 1000 + Math.floor(Math.random() * 4000);
  return statement(`SELECT i, i * 0.5 AS half, 'r' || i AS s FROM range(${n}) t(i)`, {
    format,
    rows: n,
    pageRows: 1500,
  });
}

// ---- probes, metrics, admin ------------------------------------------------

/**
 * GET /healthz: 200, status "ok", a pool, and no secret past its expiry.
 * Returns the parsed report (or null).
 */
export function healthz() {
  const tags = { name: 'healthz' };
  const res = http.get(`${BASE_URL}/healthz`, { tags, timeout: '10s' });
  let report = null;
  try {
    report = JSON.parse(res.body);
  } catch (_) {
    report = null;
  }
  const ok = check(
    res,
    {
      'healthz: status 200': (r) => r.status === 200,
      'healthz: status ok': () => report !== null && report.status === 'ok',
      'healthz: pool reported': () => report !== null && report.pool && report.pool.size > 0,
      'healthz: credentials live': () =>
        report !== null &&
        (report.secrets || []).every((s) => s.seconds_to_expiry === null || s.seconds_to_expiry > 0),
    },
    tags,
  );
  healthzNotOk.add(!ok);
  return report;
}

/** GET /readyz: 200 when ready. */
export function readyz() {
  const tags = { name: 'readyz' };
  const res = http.get(`${BASE_URL}/readyz`, { tags, timeout: '10s' });
  check(res, { 'readyz: status 200': (r) => r.status === 200 }, tags);
  return res;
}

/**
 * GET /metrics: Prometheus text with the gateway's request counter.
 * Returns the body (or '').
 */
export function metrics() {
  const tags = { name: 'metrics' };
  const res = http.get(`${BASE_URL}/metrics`, { tags, timeout: '10s' });
  check(
    res,
    {
      'metrics: status 200': (r) => r.status === 200,
      'metrics: prometheus text': (r) =>
        String(header(r, 'content-type') || '').startsWith('text/plain') &&
        String(r.body).includes('duckgate_http_requests_total'),
    },
    tags,
  );
  return res.status === 200 ? String(res.body) : '';
}

/**
 * Sum of the samples of `name` in Prometheus text whose labels include every
 * `key="value"` of `labels`.
 */
export function promSum(text, name, labels = {}) {
  let total = 0;
  for (const line of String(text).split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m || m[1] !== name) continue;
    const l = m[2] || '';
    if (Object.keys(labels).every((k) => l.includes(`${k}="${labels[k]}"`))) {
      total += Number(m[3]);
    }
  }
  return total;
}

/**
 * POST /admin/secrets/rotate: 200 with no per-secret errors.
 * Returns the report (or null). Needs DUCKGATE_ADMIN_TOKEN.
 */
export function rotate() {
  const tags = { name: 'admin_rotate' };
  const res = http.post(`${BASE_URL}/admin/secrets/rotate`, null, {
    headers: bearer(ADMIN_TOKEN),
    tags,
    timeout: '60s',
  });
  let report = null;
  try {
    report = JSON.parse(res.body);
  } catch (_) {
    report = null;
  }
  const ok = check(
    res,
    {
      'rotate: status 200': (r) => r.status === 200,
      'rotate: no errors': () => report !== null && !(report.errors && report.errors.length),
    },
    tags,
  );
  if (ok) adminRotations.add(1);
  return report;
}

/** GET /admin/secrets. Returns the report (or null). */
export function adminSecrets() {
  const tags = { name: 'admin_secrets' };
  const res = http.get(`${BASE_URL}/admin/secrets`, {
    headers: bearer(ADMIN_TOKEN),
    tags,
    timeout: '10s',
  });
  check(res, { 'admin secrets: status 200': (r) => r.status === 200 }, tags);
  try {
    return JSON.parse(res.body);
  } catch (_) {
    return null;
  }
}

/** Total rotations of every secret, from GET /admin/secrets (null if unknown). */
export function totalRotations(report) {
  if (!report || !report.secrets) return null;
  return report.secrets.reduce((n, s) => n + (s.rotations || 0), 0);
}

/** "90s", "20m", "1h30m", "1500ms" -> seconds. */
export function parseDuration(text) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  let matched = '';
  let m;
  while ((m = re.exec(text)) !== null) {
    total += Number(m[1]) * unit[m[2]];
    matched += m[0];
  }
  if (matched !== text || total <= 0) throw new Error(`not a duration: ${text}`);
  return total;
}
