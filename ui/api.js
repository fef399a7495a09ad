// Requests to the gateway: every one is a request curl could make, with the
// tab's token in the Authorization header (never in a URL, never a cookie).

const TOKEN_KEY = 'duckgate.token';

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** A problem document (RFC 9457) as an Error. */
export class Problem extends Error {
  constructor(doc, status) {
    super(doc.title || `HTTP ${status}`);
    this.doc = doc;
    this.status = status;
  }
}

function headers(extra) {
  const h = new Headers(extra || {});
  const t = getToken();
  if (t) h.set('Authorization', 'Bearer ' + t);
  return h;
}

/** fetch() with the token; `init.headers` are added. */
export async function call(path, init = {}) {
  const r = await fetch(path, { ...init, headers: headers(init.headers), cache: 'no-store', credentials: 'omit' });
  return r;
}

/** The problem document of a failed answer (or one made up from its status). */
export async function problemOf(r) {
  const text = await r.text();
  try {
    const doc = JSON.parse(text);
    if (doc && typeof doc === 'object' && doc.title) return new Problem(doc, r.status);
  } catch (_) { /* not JSON */ }
  return new Problem({ title: `HTTP ${r.status} ${r.statusText}`, status: r.status, detail: text.slice(0, 2000) }, r.status);
}

/** GET a JSON document; a failure throws its Problem. */
export async function getJson(path, init = {}) {
  const r = await call(path, init);
  if (!r.ok) throw await problemOf(r);
  return r.json();
}

/** Submit SQL as an async statement; answers its status document. */
/** Submits `sql` as a statement; `readOnly`: the gateway refuses it if it writes. */
export async function submit(sql, signal, readOnly = false) {
  const body = { sql, wait_ms: 0 };
  if (readOnly) body.read_only = true;
  const r = await call('/statements', {
    method: 'POST',
    signal,
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body),
  });
  const id = r.headers.get('duckgate-query-id');
  if (r.status === 200) {
    // Done before the answer left: the body is the whole result, which we
    // page instead (one parse of a large result is what we avoid).
    if (r.body) r.body.cancel().catch(() => {});
    return getJson('/statements/' + encodeURIComponent(id));
  }
  if (r.status === 202) return r.json();
  const p = await problemOf(r);
  p.queryId = id || p.doc.query_id;
  throw p;
}

export const statementPath = (id) => '/statements/' + encodeURIComponent(id);
export const queryPath = (id) => '/queries/' + encodeURIComponent(id);

/** Formats the gateway speaks: name, query value, file extension. */
export const FORMATS = [
  { name: 'CSV', format: 'csv', ext: 'csv', type: 'text/csv' },
  { name: 'JSON', format: 'json', ext: 'json', type: 'application/json' },
  { name: 'NDJSON', format: 'ndjson', ext: 'ndjson', type: 'application/x-ndjson' },
  { name: 'Arrow', format: 'arrow', ext: 'arrow', type: 'application/vnd.apache.arrow.stream' },
  { name: 'Parquet', format: 'parquet', ext: 'parquet', type: 'application/vnd.apache.parquet' },
];
