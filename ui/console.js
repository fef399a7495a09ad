// The duckgate console: type SQL, run it as an async statement, watch its
// progress, cancel it, page its result into a virtual table, chart it,
// download it. Every request goes to this gateway's public API with the
// tab's token (see api.js): nothing here is more than curl could do.

import * as api from './api.js';
import { Editor, errorRange } from './editor.js';
import { Grid } from './grid.js';
import { chartable, draw } from './chart.js';

const $ = (id) => document.getElementById(id);
const HISTORY_KEY = 'duckgate.history';
const POLL_MS = 250;
const FIRST_PAGE = 1000;
const PAGE = 50000;
/** Rows kept in the page; beyond, the table says so and downloads have all. */
const MAX_ROWS_SHOWN = 1000000;
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

const ui = {
  editor: null,
  grid: null,
  run: null, // the statement being watched: {id, started, timer, cancelled}
  result: null, // {id, columns, rows}
};

function setStatus(state, text) {
  const s = $('status');
  s.dataset.state = state;
  s.textContent = text;
}

function fmtInt(n) {
  return Number(n).toLocaleString('en-US');
}

function fmtMs(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${((ms % 60000) / 1000).toFixed(0)} s`;
}

// ---------------------------------------------------------------- token

function showLogin(message) {
  const d = $('login');
  $('login-error').hidden = !message;
  $('login-error').textContent = message || '';
  $('token').value = '';
  if (!d.open) d.showModal();
  $('token').focus();
}

async function connect(token) {
  api.setToken(token);
  // A request that needs the token and changes nothing: a wrong token is
  // told here rather than at the first query.
  const r = await api.call('/queries');
  if (r.status === 401) {
    api.clearToken();
    const p = await api.problemOf(r);
    showLogin(`${p.doc.title}: ${p.doc.detail || ''}`);
    return false;
  }
  $('login').close();
  $('who').textContent = token ? 'token set' : 'anonymous';
  $('signout').hidden = false;
  loadCatalog();
  return true;
}

// ---------------------------------------------------------------- problems

function clearProblem() {
  $('problem').hidden = true;
  ui.editor.markError(null);
}

// A long error (DuckDB lists candidate functions, bindings, ...) shows its
// first line; the rest unfolds. The place DuckDB gives is marked in the SQL
// when the SQL is still the one that ran.
function showProblem(doc, status, sql) {
  $('problem').hidden = false;
  $('problem-title').textContent = doc.title || 'Error';
  $('problem-class').textContent = doc.error_class ? `${doc.error_class} Error` : '';
  $('problem-class').hidden = !doc.error_class;
  $('problem-status').textContent = status || doc.status ? `HTTP ${status || doc.status}` : '';
  const where = Number.isInteger(doc.line) ? `· line ${doc.line}, column ${doc.column}` : '';
  $('problem-where').textContent = where;
  $('problem-where').hidden = !where;
  const detail = doc.detail || '';
  const cut = detail.indexOf('\n');
  const rest = cut < 0 ? '' : detail.slice(cut + 1).replace(/^\n+/, '');
  $('problem-detail').textContent = cut < 0 ? detail : detail.slice(0, cut);
  $('problem-more').hidden = !rest;
  $('problem-more').open = false;
  $('problem-more-label').textContent = `${rest.split('\n').length} more line${rest.split('\n').length === 1 ? '' : 's'}`;
  $('problem-rest').textContent = rest;
  $('problem-excerpt').textContent = doc.excerpt || '';
  $('problem-excerpt').hidden = !doc.excerpt;
  $('problem-type').textContent = [doc.type, doc.statement_kind && `statement kind: ${doc.statement_kind}`, doc.query_id && `query id: ${doc.query_id}`]
    .filter(Boolean).join(' · ');
  const same = sql === undefined || sql === ui.editor.value;
  ui.editor.markError(same ? errorRange(ui.editor.value, doc) : null);
}

// ---------------------------------------------------------------- running

// A shared link's SQL runs only if it reads; one that writes (the gateway
// refuses it as such under `read_only`) runs after the user says so.
async function run(opts) {
  if (ui.run) return;
  const shared = opts !== null && typeof opts === 'object' && opts.shared === true;
  const sql = ui.editor.value;
  if (!sql.trim()) return;
  clearProblem();
  resetResult();
  const started = performance.now();
  const run = { id: null, started, sql, shared, done: false };
  ui.run = run;
  $('run').disabled = true;
  $('cancel').disabled = false;
  $('stmt-id').textContent = '';
  setStatus('submitting', 'Submitting…');
  run.timer = setInterval(() => tick(run), 100);
  let status;
  try {
    status = await api.submit(sql, undefined, shared);
  } catch (e) {
    finish(run, 'failed');
    if (shared && e instanceof api.Problem && writesRefused(e.doc)) {
      setStatus('idle', 'Shared statement not run');
      if (await confirmWrite(e.doc.statement_kind, sql)) runAgain();
      return;
    }
    if (e instanceof api.Problem) {
      showProblem(e.doc, e.status, sql);
      remember(run, 'failed', 0);
      if (e.status === 401) showLogin('The gateway refused the token.');
    } else {
      showProblem({ title: 'Network error', detail: String(e) });
    }
    return;
  }
  run.id = status.id;
  $('stmt-id').textContent = `statement ${status.id}`;
  $('stmt-id').title = 'Its id: GET /statements/{id}, DELETE /statements/{id}, GET /queries/{id}';
  await watch(run, status);
}

function tick(run) {
  if (run.done) return;
  const ms = performance.now() - run.started;
  const state = $('status').dataset.state;
  if (state === 'running' || state === 'queued' || state === 'submitting' || state === 'cancelling') {
    $('status').textContent = `${label(state)} · ${fmtMs(ms)}`;
  }
}

function label(state) {
  return { submitting: 'Submitting', queued: 'Queued', running: 'Running', cancelling: 'Cancelling' }[state] || state;
}

function showProgress(q) {
  $('progress').hidden = false;
  const p = q && q.progress;
  const pct = p && typeof p.percentage === 'number' ? p.percentage : null;
  $('progress-fill').style.width = pct === null ? '100%' : `${Math.max(0, Math.min(100, pct))}%`;
  $('progress-fill').classList.toggle('indeterminate', pct === null);
  const parts = [];
  if (pct !== null) parts.push(`${pct.toFixed(1)}%`);
  if (p) parts.push(`${fmtInt(p.rows_processed)} of ${fmtInt(p.total_rows)} rows processed`);
  if (q) parts.push(`${fmtInt(q.rows)} result rows`);
  if (q && q.state) parts.push(q.state);
  $('progress-text').textContent = parts.join(' · ');
}

async function watch(run, status) {
  while (!run.done) {
    if (TERMINAL.has(status.state)) break;
    setStatus(run.cancelRequested ? 'cancelling' : status.state, label(status.state));
    tick(run);
    // DuckDB's progress, as GET /queries lists it (404 once it stops).
    const [q, s] = await Promise.all([
      api.call(api.queryPath(run.id)).then((r) => (r.ok ? r.json() : null)).catch(() => null),
      api.getJson(api.statementPath(run.id)).catch((e) => e),
    ]);
    if (q) showProgress(q);
    else if (status.progress) showProgress({ progress: status.progress, rows: status.rows });
    if (s instanceof Error) {
      finish(run, 'failed');
      showProblem(s.doc || { title: String(s) }, s.status);
      return;
    }
    status = s;
    if (!TERMINAL.has(status.state)) await new Promise((r) => setTimeout(r, POLL_MS));
  }
  const elapsed = status.elapsed_ms;
  if (status.state === 'succeeded') {
    finish(run, 'succeeded', status);
    remember(run, 'succeeded', status.rows, elapsed);
    await loadResult(status);
  } else if (status.state === 'cancelled') {
    finish(run, 'cancelled', status);
    remember(run, 'cancelled', status.rows, elapsed);
    setStatus('cancelled', `Cancelled after ${fmtMs(elapsed)}`);
  } else if (run.shared && writesRefused(status.problem)) {
    // A shared link's statement that writes: refused as asked, not failed.
    finish(run, 'idle', status);
    setStatus('idle', 'Shared statement not run');
    if (await confirmWrite(status.problem.statement_kind, run.sql)) runAgain();
  } else {
    finish(run, status.state, status);
    remember(run, status.state, 0, elapsed);
    if (status.problem) showProblem(status.problem, status.problem.status, run.sql);
    setStatus('failed', `${status.problem ? status.problem.title : status.state} after ${fmtMs(elapsed)}`);
  }
}

function finish(run, state, status) {
  run.done = true;
  clearInterval(run.timer);
  if (ui.run === run) ui.run = null;
  $('run').disabled = false;
  $('cancel').disabled = true;
  $('progress').hidden = state !== 'cancelled';
  if (state === 'failed') setStatus('failed', 'Failed');
  if (state === 'succeeded' && status) {
    setStatus('succeeded', `${fmtInt(status.rows)} rows in ${fmtMs(status.elapsed_ms)}`);
  }
}

async function cancel() {
  const run = ui.run;
  if (!run || !run.id) return;
  run.cancelRequested = true;
  $('cancel').disabled = true;
  setStatus('cancelling', 'Cancelling…');
  // DELETE /queries/{id} interrupts it and keeps the statement, which
  // then reads `cancelled` (DELETE /statements/{id} would also discard it).
  const r = await api.call(api.queryPath(run.id), { method: 'DELETE' });
  if (!r.ok && r.status !== 404) {
    const p = await api.problemOf(r);
    showProblem(p.doc, p.status);
  }
}

// ---------------------------------------------------------------- results

function resetResult() {
  ui.result = null;
  $('tabs').hidden = true;
  $('table-pane').replaceChildren();
  $('chart-pane').hidden = true;
  $('progress').hidden = true;
  $('result-info').textContent = '';
  delete $('table-pane').dataset.loaded;
  $('downloads').replaceChildren();
  selectTab('table');
}

async function loadResult(status) {
  const columns = status.columns || [];
  const result = { id: status.id, columns, rows: [], total: status.rows, truncated: status.truncated };
  ui.result = result;
  $('tabs').hidden = false;
  ui.grid = new Grid($('table-pane'));
  ui.grid.setColumns(columns);
  renderDownloads(status.id);
  $('tabs').querySelector('[data-tab="chart"]').disabled = !chartable(columns);
  const want = Math.min(status.rows, MAX_ROWS_SHOWN);
  let offset = 0;
  let limit = FIRST_PAGE;
  const t0 = performance.now();
  while (offset < want && ui.result === result) {
    const n = Math.min(limit, want - offset);
    let page;
    try {
      page = await api.getJson(`${api.statementPath(status.id)}/result?format=json&offset=${offset}&limit=${n}`);
    } catch (e) {
      showProblem(e.doc || { title: String(e) }, e.status);
      break;
    }
    if (ui.result !== result) return;
    const rows = page.rows || [];
    for (const r of rows) result.rows.push(r);
    ui.grid.append(rows);
    offset += rows.length;
    info(result, offset < want);
    if (rows.length === 0) break;
    limit = PAGE;
  }
  result.loadMs = performance.now() - t0;
  info(result, false);
  if (ui.result !== result) return;
  ui.grid.flush();
  $('table-pane').dataset.loaded = String(result.rows.length);
  if (!$('chart-pane').hidden) redrawChart();
}

function info(result, loading) {
  let text = `${fmtInt(result.rows.length)} of ${fmtInt(result.total)} rows`;
  if (loading) text += ' (loading…)';
  else if (result.rows.length < result.total) text += ` shown (the first ${fmtInt(MAX_ROWS_SHOWN)}; downloads hold all)`;
  if (result.truncated) text += ' · cut by max_rows';
  $('result-info').textContent = text;
}

function renderDownloads(id) {
  const box = $('downloads');
  box.replaceChildren();
  for (const f of api.FORMATS) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'small';
    b.textContent = f.name;
    b.dataset.format = f.format;
    b.title = `GET /statements/${id}/result?format=${f.format}`;
    b.addEventListener('click', () => download(id, f, b));
    box.appendChild(b);
  }
}

async function download(id, f, button) {
  button.disabled = true;
  try {
    const r = await api.call(`${api.statementPath(id)}/result?format=${f.format}`);
    if (!r.ok) {
      const p = await api.problemOf(r);
      showProblem(p.doc, p.status);
      return;
    }
    const blob = new Blob([await r.arrayBuffer()], { type: f.type });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `duckgate-${id}.${f.ext}`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  } finally {
    button.disabled = false;
  }
}

function selectTab(name) {
  for (const t of document.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t.dataset.tab === name));
  $('table-pane').hidden = name !== 'table';
  $('chart-pane').hidden = name !== 'chart';
  if (name === 'chart') redrawChart();
  if (name === 'table' && ui.grid) ui.grid.schedule(true);
}

function redrawChart() {
  if (!ui.result) return;
  $('chart-note').textContent = draw($('chart'), ui.result.columns, ui.result.rows, $('chart-kind').value);
}

// ---------------------------------------------------------------- catalog

async function loadCatalog() {
  const box = $('catalog');
  box.replaceChildren(text('p', 'Loading…', 'muted'));
  try {
    const r = await api.call('/catalog');
    if (r.status === 404) {
      renderCatalog(await catalogFromInformationSchema(), false);
      return;
    }
    if (!r.ok) throw await api.problemOf(r);
    renderCatalog((await r.json()).databases, true);
  } catch (e) {
    box.replaceChildren(text('p', e.doc ? `${e.doc.title}: ${e.doc.detail || ''}` : String(e), 'error-text'));
  }
}

/** A gateway without /catalog: the same tree from information_schema. */
async function catalogFromInformationSchema() {
  const r = await api.call('/query', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      sql: `SELECT c.table_catalog, c.table_schema, c.table_name, t.table_type, c.column_name, c.data_type
            FROM information_schema.columns c JOIN information_schema.tables t
              USING (table_catalog, table_schema, table_name)
            WHERE c.table_catalog NOT IN ('system', 'temp')
            ORDER BY 1, 2, 3, c.ordinal_position`,
    }),
  });
  if (!r.ok) throw await api.problemOf(r);
  const dbs = new Map();
  for (const [db, schema, table, type, col, dtype] of (await r.json()).rows) {
    if (!dbs.has(db)) dbs.set(db, { name: db, kind: '', schemas: new Map() });
    const s = dbs.get(db).schemas;
    if (!s.has(schema)) s.set(schema, { name: schema, tables: new Map() });
    const t = s.get(schema).tables;
    if (!t.has(table)) t.set(table, { name: table, kind: type === 'VIEW' ? 'view' : 'table', columns: [] });
    t.get(table).columns.push({ name: col, type: dtype });
  }
  return [...dbs.values()].map((d) => ({
    ...d,
    schemas: [...d.schemas.values()].map((s) => ({ ...s, tables: [...s.tables.values()] })),
  }));
}

function text(tag, t, cls) {
  const e = document.createElement(tag);
  e.textContent = t;
  if (cls) e.className = cls;
  return e;
}

function quoteIdent(s) {
  return /^[a-z_][a-z0-9_]*$/.test(s) ? s : `"${s.replace(/"/g, '""')}"`;
}

function renderCatalog(databases, detailRoute) {
  const box = $('catalog');
  box.replaceChildren();
  let tables = 0;
  for (const db of databases) {
    const dd = document.createElement('details');
    dd.open = true;
    const sum = text('summary', db.name);
    if (db.kind) sum.appendChild(text('span', ` ${db.kind}${db.read_only ? ', read-only' : ''}`, 'muted'));
    dd.appendChild(sum);
    for (const schema of db.schemas) {
      const sd = document.createElement('details');
      sd.open = schema.tables.length > 0 && schema.tables.length < 50;
      sd.appendChild(text('summary', `${schema.name} (${schema.tables.length})`));
      for (const t of schema.tables) {
        tables++;
        const td = document.createElement('details');
        td.className = 'table-node';
        const ts = text('summary', t.name);
        ts.title = 'Click: columns · double-click: insert the name';
        if (t.kind === 'view') ts.appendChild(text('span', ' view', 'muted'));
        td.appendChild(ts);
        const qualified = [db.name, schema.name, t.name].map(quoteIdent).join('.');
        ts.addEventListener('dblclick', (e) => { e.preventDefault(); ui.editor.insert(qualified); });
        td.addEventListener('toggle', async () => {
          if (!td.open || td.dataset.loaded) return;
          td.dataset.loaded = '1';
          let cols = t.columns;
          if (!cols && detailRoute) {
            try {
              const path = ['/catalog', db.name, schema.name, t.name].map((x, i) => (i ? encodeURIComponent(x) : x)).join('/');
              cols = (await api.getJson(path)).columns;
            } catch (e) {
              td.appendChild(text('div', e.doc ? e.doc.title : String(e), 'error-text'));
              return;
            }
          }
          const ul = document.createElement('ul');
          for (const c of cols || []) {
            const li = text('li', c.name);
            li.appendChild(text('span', ` ${c.type}`, 'muted mono'));
            li.addEventListener('dblclick', () => ui.editor.insert(quoteIdent(c.name)));
            ul.appendChild(li);
          }
          td.appendChild(ul);
        });
        sd.appendChild(td);
      }
      dd.appendChild(sd);
    }
    box.appendChild(dd);
  }
  if (tables === 0) box.appendChild(text('p', 'No tables yet.', 'muted'));
}

// ---------------------------------------------------------------- history

function pastRuns() {
  try {
    return JSON.parse(sessionStorage.getItem(HISTORY_KEY)) || [];
  } catch (_) {
    return [];
  }
}

function remember(run, state, rows, elapsed) {
  const h = pastRuns();
  h.unshift({ sql: run.sql, id: run.id, state, rows, elapsed_ms: elapsed, at: Date.now() });
  sessionStorage.setItem(HISTORY_KEY, JSON.stringify(h.slice(0, 100)));
  renderHistory();
}

function renderHistory() {
  const ol = $('history');
  ol.replaceChildren();
  for (const item of pastRuns()) {
    const li = document.createElement('li');
    li.dataset.state = item.state;
    li.appendChild(text('div', item.sql.length > 160 ? item.sql.slice(0, 160) + '…' : item.sql, 'mono'));
    const meta = [new Date(item.at).toLocaleTimeString(), item.state];
    if (item.state === 'succeeded') meta.push(`${fmtInt(item.rows)} rows`);
    if (typeof item.elapsed_ms === 'number') meta.push(fmtMs(item.elapsed_ms));
    li.appendChild(text('div', meta.join(' · '), 'muted'));
    li.title = 'Click: put this SQL in the editor';
    li.addEventListener('click', () => { ui.editor.value = item.sql; });
    ol.appendChild(li);
  }
}

// ---------------------------------------------------------------- sharing

/** `run` by its module-level name (inside `run`, `run` is the run itself). */
function runAgain() {
  return run();
}

/** Whether a problem is the refusal of a write under `read_only`. */
function writesRefused(doc) {
  return doc && doc.type === 'urn:duckgate:problem:statement-forbidden'
    && typeof doc.detail === 'string' && doc.detail.includes('read-only policy');
}

/** Asks whether to run a shared statement of `kind` that writes. */
function confirmWrite(kind, sql) {
  const d = $('confirm-write');
  $('confirm-write-kind').textContent = kind || 'statement';
  $('confirm-write-sql').textContent = sql;
  d.returnValue = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'run'), { once: true });
    d.showModal();
    $('confirm-write-cancel').focus();
  });
}

function sqlFromHash() {
  const h = location.hash.replace(/^#/, '');
  for (const part of h.split('&')) {
    if (part.startsWith('sql=')) {
      try {
        return decodeURIComponent(part.slice(4).replace(/\+/g, '%20'));
      } catch (_) {
        return null;
      }
    }
  }
  return null;
}

async function share() {
  const url = `${location.origin}/ui#sql=${encodeURIComponent(ui.editor.value)}`;
  window.history.replaceState(null, '', url);
  try {
    await navigator.clipboard.writeText(url);
    setStatus($('status').dataset.state, 'Link copied');
  } catch (_) {
    setStatus($('status').dataset.state, 'Link in the address bar');
  }
}

// ---------------------------------------------------------------- start

async function start() {
  ui.editor = new Editor($('sql'), $('editor-highlight'), run);
  $('run').addEventListener('click', run);
  $('cancel').addEventListener('click', cancel);
  $('share').addEventListener('click', share);
  $('catalog-refresh').addEventListener('click', loadCatalog);
  $('history-clear').addEventListener('click', () => { sessionStorage.removeItem(HISTORY_KEY); renderHistory(); });
  $('chart-kind').addEventListener('change', redrawChart);
  for (const t of document.querySelectorAll('.tab')) t.addEventListener('click', () => selectTab(t.dataset.tab));
  $('signout').addEventListener('click', () => { api.clearToken(); showLogin(); });
  $('login').addEventListener('cancel', (e) => e.preventDefault());
  $('login-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    if (await connect($('token').value.trim())) runShared();
  });
  window.addEventListener('hashchange', () => {
    const sql = sqlFromHash();
    if (sql !== null) { ui.editor.value = sql; run({ shared: true }); }
  });
  renderHistory();
  fetch('/healthz', { cache: 'no-store' }).then((r) => r.json()).then((h) => {
    $('server-version').textContent = h.version ? `v${h.version}` : '';
  }).catch(() => {});

  const shared = sqlFromHash();
  if (shared !== null) ui.editor.value = shared;
  const token = api.getToken();
  if (token === null) showLogin();
  else if (await connect(token)) runShared();
}

function runShared() {
  if (sqlFromHash() !== null && !ui.run && !ui.sharedRan) {
    ui.sharedRan = true;
    run({ shared: true });
  }
}

start();
