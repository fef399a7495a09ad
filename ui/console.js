// The duckgate console: type SQL (with names completed from the catalog
// and the functions the guard allows), run it as an async statement, watch
// its progress, cancel it, page its result into a virtual table in one of
// several result tabs, open a cell, chart it, profile its columns, download
// it. The editor's text and the tabs are kept in the browser per identity
// (workspace.js) and come back after a reload. Every request goes to this
// gateway's public API with the tab's token (see api.js): nothing here is
// more than curl could do.

import * as api from './api.js';
import { Editor, errorRange } from './editor.js';
import { Grid, cellText, displayText } from './grid.js';
import { chartable, draw, hit, numericColumns, COLORS } from './chart.js';
import { sha256hex } from './sha256.js';
import { fmtCount } from './numbers.js';
import { profile, renderProfile } from './profile.js';
import { tabTitle } from './titles.js';
import * as workspace from './workspace.js';

const $ = (id) => document.getElementById(id);
/** History lives in local storage under this prefix and a hash of the token. */
const HISTORY_PREFIX = 'duckgate.history.';
const HISTORY_MAX = 200;
const POLL_MS = 250;
const FIRST_PAGE = 1000;
const PAGE = 50000;
/** Rows kept in the page; beyond, the table says so and downloads have all. */
const MAX_ROWS_SHOWN = 1000000;
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

const ui = {
  editor: null,
  grid: null,
  run: null, // the statement being watched: {id, started, timer, cancelled, tab}
  tabs: [], // result tabs: {n, sql, state, id, view, result, problem}
  active: null, // the tab shown
  tabSeq: 0,
  gridFor: null, // the result the grid shows
  catalog: [], // GET /catalog's databases
  columns: new Map(), // 'db\0schema\0table' -> [{name, type}] or a Promise
  functions: [], // GET /catalog/functions
  historyKey: null,
  workspaceKey: null, // where this identity's workspace is kept
  who: null, // GET /whoami's answer for the token
  reauth: null, // {promise, resolve}: a refused session waits for a new token
  chartLayout: null,
};

function setStatus(state, text) {
  const s = $('status');
  s.dataset.state = state;
  s.textContent = text;
}

const fmtInt = fmtCount;

function fmtMs(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${((ms % 60000) / 1000).toFixed(0)} s`;
}

// ---------------------------------------------------------------- token

/** Opens the token dialog with `message` (`slug`: the problem's, if any). */
function showLogin(message, slug) {
  const d = $('login');
  $('login-error').hidden = !message;
  $('login-error').textContent = message || '';
  if (slug) $('login-error').dataset.slug = slug;
  else delete $('login-error').dataset.slug;
  $('token').value = '';
  if (!d.open) d.showModal();
  $('token').focus();
}

/** The slug of a problem document (`token-expired`, ...). */
const slugOf = (doc) => String((doc && doc.type) || '').split(':').pop();

/**
 * What the dialog says of a refused token. `session`: the token this tab
 * was using (so its expiry, from /whoami, is known), not one just typed.
 */
function refusalText(p, session) {
  if (slugOf(p.doc) === 'token-expired') {
    const exp = session && ui.who && ui.who.expires_at_ms;
    const at = exp ? ` at ${new Date(exp).toLocaleTimeString()}` : '';
    return session
      ? `Your token expired${at}. Paste a new one to carry on: your tabs and the editor stay as they are.`
      : 'This token has expired (its exp claim is past). Get a new one from your identity provider.';
  }
  if (session) return `The gateway refused the token: ${p.doc.title}${p.doc.detail ? ` (${p.doc.detail})` : ''}.`;
  return `${p.doc.title}: ${p.doc.detail || ''}`;
}

/**
 * The session's token was refused (401, e.g. an expired JWT): the dialog
 * says why, and the caller may wait for the token given next.
 */
function sessionRefused(p) {
  showLogin(refusalText(p, true), slugOf(p.doc));
  if (!ui.reauth) {
    let resolve;
    const promise = new Promise((r) => { resolve = r; });
    ui.reauth = { promise, resolve };
  }
  return ui.reauth.promise;
}

async function connect(token) {
  api.setToken(token);
  // Who the token is (a wrong or expired one is told here rather than at
  // the first query). A gateway without /whoami: the token checked with a
  // request that changes nothing.
  let who = null;
  let r = await api.call('/whoami');
  if (r.status === 404) r = await api.call('/queries');
  else if (r.ok) who = await r.json();
  if (r.status === 401) {
    api.clearToken();
    const p = await api.problemOf(r);
    showLogin(refusalText(p, false), slugOf(p.doc));
    return false;
  }
  $('login').close();
  const sameIdentity = ui.who && who && ui.who.name === who.name;
  ui.who = who;
  renderWho(token);
  $('signout').hidden = false;
  ui.historyKey = historyKey(token, who);
  if (who) {
    // A history filed under the token's hash (before /whoami) moves to
    // the identity's.
    const old = historyKey(token, null);
    if (localStorage.getItem(ui.historyKey) === null && localStorage.getItem(old) !== null) {
      localStorage.setItem(ui.historyKey, localStorage.getItem(old));
      localStorage.removeItem(old);
    }
  }
  const key = workspace.workspaceKey(token, who);
  if (who) workspace.adopt(workspace.workspaceKey(token, null), key);
  // The same identity again (a new token after one expired): the page's
  // tabs are the newest; another identity: its own workspace.
  if (!(sameIdentity && ui.workspaceKey === key)) {
    const switching = ui.workspaceKey !== null;
    ui.workspaceKey = key;
    restoreWorkspace(switching);
  }
  renderHistory();
  loadCatalog();
  loadFunctions();
  if (ui.reauth) {
    const { resolve } = ui.reauth;
    ui.reauth = null;
    resolve();
  }
  return true;
}

/** The header: the identity's name, roles and (a JWT's) expiry. */
function renderWho(token) {
  const box = $('who');
  box.replaceChildren();
  if (!ui.who) {
    box.textContent = token ? 'token set' : 'anonymous';
    box.title = '';
    return;
  }
  const w = ui.who;
  box.appendChild(text('span', w.name, 'who-name'));
  for (const role of w.roles) box.appendChild(text('span', role, 'who-role'));
  if (w.expires_at_ms) {
    box.appendChild(text('span', `expires ${new Date(w.expires_at_ms).toLocaleTimeString()}`, 'who-exp'));
  }
  const kinds = { token: 'a query token', oidc: 'a JWT of the OIDC issuer', anonymous: 'no token (an anonymous gateway)' };
  box.title = [`Signed in as ${w.name} with ${kinds[w.kind] || w.kind}`,
    w.roles.length ? `roles: ${w.roles.join(', ')}` : 'no roles',
    w.confined ? 'confined to what the roles grant' : 'not confined by roles'].join('\n');
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
  const o = opts !== null && typeof opts === 'object' ? opts : {};
  const shared = o.shared === true;
  const inNewTab = o.newTab === true;
  // `o.tab`, `o.sql`: a tab's own SQL run again into it (a restored tab).
  const sql = typeof o.sql === 'string' ? o.sql : ui.editor.value;
  if (!sql.trim()) return;
  if (ui.editor.completer) ui.editor.completer.close();
  const tab = o.tab && ui.tabs.includes(o.tab) ? o.tab : inNewTab || !ui.active ? addTab() : ui.active;
  tab.sql = sql;
  tab.state = 'running';
  tab.id = null;
  tab.result = null;
  tab.problem = null;
  activate(tab);
  const started = performance.now();
  const run = { id: null, started, sql, shared, done: false, tab };
  ui.run = run;
  renderTabs();
  $('run').disabled = true;
  $('run-new').disabled = true;
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
      runProblem(run, e.doc, e.status, sql);
      remember(run, 'failed', 0);
      if (e.status === 401) sessionRefused(e);
    } else {
      runProblem(run, { title: 'Network error', detail: String(e) });
    }
    return;
  }
  run.id = status.id;
  tab.id = status.id;
  saveSoon();
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

// DuckDB gives a percentage only where it can estimate the work (a scan
// of a table); elsewhere (a recursive CTE, a remote read) it has none, or
// 0% with nothing processed that never moves (its estimate of another
// operator): a spinner says "working" instead of a bar that sits at 0%.
function showProgress(q) {
  $('progress').hidden = false;
  const p = q && q.progress;
  let pct = p && typeof p.percentage === 'number' ? p.percentage : null;
  if (pct === 0 && !(p.rows_processed > 0)) pct = null;
  $('progress-track').hidden = pct === null;
  $('progress-spinner').hidden = pct !== null;
  $('progress-fill').style.width = pct === null ? '0%' : `${Math.max(0, Math.min(100, pct))}%`;
  const parts = [];
  if (pct !== null) parts.push(`${pct.toFixed(1)}%`);
  else parts.push('progress unknown');
  if (p && p.rows_processed > 0) {
    parts.push(p.total_rows > 0 ? `${fmtInt(p.rows_processed)} of ${fmtInt(p.total_rows)} rows processed` : `${fmtInt(p.rows_processed)} rows processed`);
  }
  if (q) parts.push(`${fmtInt(q.rows)} result rows`);
  if (q && q.state) parts.push(q.state);
  $('progress-text').textContent = parts.join(' · ');
}

async function watch(run, status) {
  while (!run.done) {
    if (TERMINAL.has(status.state)) break;
    setStatus(run.cancelRequested ? 'cancelling' : status.state, label(status.state));
    tick(run);
    // The statement's status carries DuckDB's progress while it runs (as
    // GET /queries/{id} does, which answers 404 once the query stops).
    showProgress(status);
    const s = await api.getJson(api.statementPath(run.id)).catch((e) => e);
    if (s instanceof api.Problem && s.status === 401) {
      // The token ran out mid-statement: the statement goes on; watch it
      // again with the token given next.
      await sessionRefused(s);
      continue;
    }
    if (s instanceof Error) {
      finish(run, 'failed');
      runProblem(run, s.doc || { title: String(s) }, s.status);
      return;
    }
    status = s;
    if (!TERMINAL.has(status.state)) await new Promise((r) => setTimeout(r, POLL_MS));
  }
  const elapsed = status.elapsed_ms;
  if (status.state === 'succeeded') {
    finish(run, 'succeeded', status);
    if (!run.reattached) remember(run, 'succeeded', status.rows, elapsed);
    await loadResult(status, run.tab);
  } else if (status.state === 'cancelled') {
    finish(run, 'cancelled', status);
    if (!run.reattached) remember(run, 'cancelled', status.rows, elapsed);
    setStatus('cancelled', `Cancelled after ${fmtMs(elapsed)}`);
  } else if (run.shared && writesRefused(status.problem)) {
    // A shared link's statement that writes: refused as asked, not failed.
    finish(run, 'idle', status);
    setStatus('idle', 'Shared statement not run');
    if (await confirmWrite(status.problem.statement_kind, run.sql)) runAgain();
  } else {
    if (status.problem) run.tab.problem = { doc: status.problem, status: status.problem.status, sql: run.sql };
    finish(run, status.state, status);
    if (!run.reattached) remember(run, status.state, 0, elapsed);
    if (status.problem) runProblem(run, status.problem, status.problem.status, run.sql);
    setStatus('failed', `${status.problem ? status.problem.title : status.state} after ${fmtMs(elapsed)}`);
  }
}

function finish(run, state, status) {
  run.done = true;
  clearInterval(run.timer);
  if (ui.run === run) ui.run = null;
  if (run.tab) {
    run.tab.state = state === 'idle' ? 'empty' : state;
    renderTabs();
    saveSoon();
  }
  $('run').disabled = false;
  $('run-new').disabled = false;
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

// ---------------------------------------------------------------- result tabs

/** A problem of `run`, kept with its tab (shown again when the tab is). */
function runProblem(run, doc, status, sql) {
  if (run.tab) run.tab.problem = { doc, status, sql };
  if (!run.tab || ui.active === run.tab) showProblem(doc, status, sql);
  renderTabs();
  saveSoon();
}

function addTab() {
  const tab = { n: ++ui.tabSeq, sql: '', state: 'empty', id: null, view: 'table', result: null, problem: null };
  ui.tabs.push(tab);
  return tab;
}

function closeTab(tab) {
  if (ui.run && ui.run.tab === tab) return;
  const i = ui.tabs.indexOf(tab);
  if (i < 0) return;
  ui.tabs.splice(i, 1);
  if (ui.active === tab) {
    const next = ui.tabs[Math.min(i, ui.tabs.length - 1)] || null;
    ui.active = null;
    if (next) activate(next);
    else resetResult();
  }
  renderTabs();
  saveSoon();
}

function renderTabs() {
  const strip = $('result-tabs');
  strip.replaceChildren();
  strip.hidden = ui.tabs.length === 0;
  for (const tab of ui.tabs) {
    const box = document.createElement('span');
    box.className = 'rtab';
    box.dataset.n = String(tab.n);
    box.dataset.state = tab.state;
    box.setAttribute('aria-selected', String(tab === ui.active));
    const name = document.createElement('button');
    name.type = 'button';
    name.className = 'rtab-name';
    name.setAttribute('role', 'tab');
    name.textContent = `${tab.n} · ${tabTitle(tab)}`;
    name.dataset.title = tabTitle(tab);
    name.title = tab.sql;
    name.addEventListener('click', () => activate(tab));
    const close = document.createElement('button');
    close.type = 'button';
    close.className = 'rtab-close';
    close.textContent = '×';
    close.title = 'Close this result';
    close.setAttribute('aria-label', `Close result ${tab.n}`);
    close.disabled = !!(ui.run && ui.run.tab === tab);
    close.addEventListener('click', () => closeTab(tab));
    box.append(name, close);
    strip.appendChild(box);
  }
}

/** Shows `tab`: its result (table, chart, profile, downloads) or its problem. */
function activate(tab) {
  ui.active = tab;
  renderTabs();
  resetResult();
  clearProblem();
  closeCell();
  if (tab.problem) showProblem(tab.problem.doc, tab.problem.status, tab.problem.sql);
  if (tab.result) showResult(tab.result);
  renderRestored(tab);
  if (tab.result && tab.view && tab.view !== 'table') selectTab(tab.view);
  saveSoon();
}

// ---------------------------------------------------------------- results

function resetResult() {
  ui.grid = null;
  ui.gridFor = null;
  $('tabs').hidden = true;
  $('table-pane').replaceChildren();
  $('chart-pane').hidden = true;
  $('profile-pane').hidden = true;
  $('profile-pane').replaceChildren();
  $('restored').hidden = true;
  if (!ui.run) $('progress').hidden = true;
  $('result-info').textContent = '';
  delete $('table-pane').dataset.loaded;
  $('downloads').replaceChildren();
  closeCell();
  selectTab('table', true);
}

function showResult(result) {
  $('tabs').hidden = false;
  ui.grid = new Grid($('table-pane'), (r, c) => openCell(result, r, c));
  ui.gridFor = result;
  ui.grid.setColumns(result.columns);
  ui.grid.append(result.rows);
  renderDownloads(result);
  $('tabs').querySelector('[data-tab="chart"]').disabled = !chartable(result.columns);
  renderAxes(result);
  info(result, !result.complete);
  if (result.complete) {
    ui.grid.flush();
    $('table-pane').dataset.loaded = String(result.rows.length);
  }
}

async function loadResult(status, tab) {
  const columns = status.columns || [];
  const result = {
    id: status.id, columns, rows: [], total: status.rows, truncated: status.truncated, complete: false,
    chart: tab.result && tab.result.id === status.id ? tab.result.chart : null, expiresAt: status.expires_at_ms || null,
  };
  tab.result = result;
  tab.problem = null;
  const shown = () => tab.result === result && ui.gridFor === result;
  if (ui.active === tab) {
    clearProblem();
    showResult(result);
    renderRestored(tab);
    renderTabs();
  }
  const want = Math.min(status.rows, MAX_ROWS_SHOWN);
  let offset = 0;
  let limit = FIRST_PAGE;
  const t0 = performance.now();
  while (offset < want && tab.result === result) {
    const n = Math.min(limit, want - offset);
    let page;
    try {
      page = await api.getJson(`${api.statementPath(status.id)}/result?format=json&offset=${offset}&limit=${n}`);
    } catch (e) {
      if (e instanceof api.Problem && e.status === 401) {
        await sessionRefused(e);
        continue;
      }
      tab.problem = { doc: e.doc || { title: String(e) }, status: e.status };
      if (ui.active === tab) showProblem(tab.problem.doc, tab.problem.status);
      break;
    }
    if (tab.result !== result) return;
    const rows = page.rows || [];
    for (const r of rows) result.rows.push(r);
    if (shown()) {
      ui.grid.append(rows);
      info(result, offset + rows.length < want);
    }
    offset += rows.length;
    if (rows.length === 0) break;
    limit = PAGE;
  }
  result.loadMs = performance.now() - t0;
  result.complete = true;
  saveSoon();
  if (!shown()) return;
  info(result, false);
  ui.grid.flush();
  $('table-pane').dataset.loaded = String(result.rows.length);
  if (!$('chart-pane').hidden) redrawChart();
  if (!$('profile-pane').hidden) showProfile();
}

function info(result, loading) {
  let text = `${fmtInt(result.rows.length)} of ${fmtInt(result.total)} rows`;
  if (loading) text += ' (loading…)';
  else if (result.restored) text += ' · restored from this browser';
  else if (result.rows.length < result.total) text += ` shown (the first ${fmtInt(MAX_ROWS_SHOWN)}; downloads hold all)`;
  if (result.truncated) text += ' · cut by max_rows';
  $('result-info').textContent = text;
}

/** Whether the gateway still holds `result` (a restored one's statement may be gone). */
const held = (result) => !result.expiresAt || Date.now() < result.expiresAt;

function renderDownloads(result) {
  const { id } = result;
  const box = $('downloads');
  box.replaceChildren();
  for (const f of api.FORMATS) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'small';
    b.textContent = f.name;
    b.dataset.format = f.format;
    b.title = `GET /statements/${id}/result?format=${f.format}`;
    if (!held(result)) {
      b.disabled = true;
      b.title = 'The gateway no longer holds this result: run the SQL again to download it';
    }
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

/** Shows the table, chart or profile of the result (`quiet`: not the user's choice). */
function selectTab(name, quiet) {
  for (const t of document.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t.dataset.tab === name));
  $('table-pane').hidden = name !== 'table';
  $('chart-pane').hidden = name !== 'chart';
  $('profile-pane').hidden = name !== 'profile';
  if (name === 'chart') redrawChart();
  if (name === 'profile') showProfile();
  if (name === 'table' && ui.grid) ui.grid.schedule(true);
  if (!quiet && ui.active && ui.active.view !== name) {
    ui.active.view = name;
    saveSoon();
  }
}

// ---------------------------------------------------------------- profile

/** The profile of the result shown, computed once per rows held. */
function showProfile() {
  const result = ui.gridFor;
  if (!result) return;
  if (!result.profile || result.profile.rows !== result.rows.length) {
    const t0 = performance.now();
    result.profile = { rows: result.rows.length, columns: profile(result), ms: performance.now() - t0 };
  }
  renderProfile($('profile-pane'), result, result.profile.columns);
  $('profile-pane').dataset.rows = String(result.profile.rows);
  $('profile-pane').dataset.ms = String(Math.round(result.profile.ms));
}

// ---------------------------------------------------------------- restored tabs

/**
 * A restored tab's marker: what was kept of its result, and how to have
 * the rest (from the gateway while it holds the statement, else by
 * running the SQL again); a statement the page was watching when it
 * closed and that the gateway no longer lists.
 */
function renderRestored(tab) {
  const box = $('restored');
  const r = tab.result;
  const partial = r && r.restored && r.rows.length < r.total;
  const interrupted = tab.state === 'interrupted';
  box.hidden = !(partial || interrupted);
  if (box.hidden) return;
  const button = $('restored-load');
  if (interrupted) {
    $('restored-text').textContent = 'This statement was running when the page closed, and the gateway no longer holds it.';
    button.textContent = 'Run again';
    button.dataset.action = 'run';
  } else if (held(r) && !r.gone) {
    $('restored-text').textContent = `Restored from this browser: the first ${fmtInt(r.rows.length)} of ${fmtInt(r.total)} rows (a large result is not kept whole).`;
    button.textContent = 'Load all rows';
    button.dataset.action = 'load';
  } else {
    $('restored-text').textContent = `Restored from this browser: the first ${fmtInt(r.rows.length)} of ${fmtInt(r.total)} rows. The gateway no longer holds this result.`;
    button.textContent = 'Run again';
    button.dataset.action = 'run';
  }
  button.disabled = !!ui.run;
}

/** The restored marker's button: the rest of the rows, or the SQL run again. */
async function loadRestored() {
  const tab = ui.active;
  if (!tab || ui.run) return;
  if ($('restored-load').dataset.action === 'run') {
    run({ tab, sql: tab.sql });
    return;
  }
  const status = await statementOf(tab.result.id);
  if (status && status.state === 'succeeded') {
    await loadResult(status, tab);
  } else {
    tab.result.gone = true;
    renderRestored(tab);
  }
}

/**
 * The caller's statement `id` as GET /statements lists it, or null (the
 * list, not GET /statements/{id}: a statement gone is no 404 in the log).
 */
async function statementOf(id) {
  try {
    const list = await api.getJson('/statements');
    return (list.statements || []).find((x) => x.id === id) || null;
  } catch (_) {
    return null;
  }
}

/** A tab restored while its statement ran: watched again, or marked interrupted. */
async function reattach(tab) {
  const status = tab.id ? await statementOf(tab.id) : null;
  if (!ui.tabs.includes(tab) || ui.run) return;
  if (!status) {
    tab.state = 'interrupted';
    renderTabs();
    if (ui.active === tab) renderRestored(tab);
    saveSoon();
    return;
  }
  const r = { id: status.id, started: performance.now() - (status.elapsed_ms || 0), sql: tab.sql, done: false, tab, reattached: true };
  ui.run = r;
  tab.state = 'running';
  renderTabs();
  $('run').disabled = true;
  $('run-new').disabled = true;
  $('cancel').disabled = false;
  $('stmt-id').textContent = `statement ${status.id}`;
  r.timer = setInterval(() => tick(r), 100);
  await watch(r, status);
}

// ---------------------------------------------------------------- chart

/** The x and y pickers for `result` (its chart's axes kept with it). */
function renderAxes(result) {
  if (!result.chart) {
    const spec = chartable(result.columns);
    result.chart = spec ? { category: spec.category, series: spec.series } : { category: 0, series: [] };
  }
  const x = $('chart-x');
  x.replaceChildren();
  result.columns.forEach((c, i) => {
    const o = document.createElement('option');
    o.value = String(i);
    o.textContent = c.name;
    x.appendChild(o);
  });
  x.value = String(result.chart.category);
  const ys = $('chart-y');
  ys.replaceChildren();
  for (const i of numericColumns(result.columns)) {
    if (i === result.chart.category) continue;
    const label = document.createElement('label');
    label.className = 'chart-y-choice';
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.value = String(i);
    box.checked = result.chart.series.includes(i);
    box.addEventListener('change', () => {
      const on = [...ys.querySelectorAll('input:checked')].map((b) => Number(b.value));
      result.chart.series = on;
      redrawChart();
    });
    label.append(box, document.createTextNode(' ' + result.columns[i].name));
    ys.appendChild(label);
  }
}

function chosenAxes() {
  const result = ui.gridFor;
  if (!result) return;
  const category = Number($('chart-x').value);
  result.chart = { category, series: result.chart.series.filter((i) => i !== category) };
  renderAxes(result);
  redrawChart();
}

function redrawChart() {
  const result = ui.gridFor;
  if (!result) return;
  $('chart-tip').hidden = true;
  const { note, layout } = draw($('chart'), result.columns, result.rows, $('chart-kind').value, result.chart);
  ui.chartLayout = layout;
  // Where the bands are, for whoever points at them (the browser test).
  if (layout) {
    const { left, top, width, height, band, count } = layout;
    $('chart').dataset.layout = JSON.stringify({ left, top, width, height, band, count });
  } else {
    delete $('chart').dataset.layout;
  }
  $('chart-note').textContent = note;
}

/** The tooltip: the x value and each series' value of the row under the pointer. */
function chartTip(e) {
  const tip = $('chart-tip');
  const result = ui.gridFor;
  const layout = ui.chartLayout;
  const canvas = $('chart');
  const r = canvas.getBoundingClientRect();
  const px = e.clientX - r.left;
  const py = e.clientY - r.top;
  const i = result ? hit(layout, px, py) : -1;
  if (i < 0) {
    tip.hidden = true;
    return;
  }
  const row = result.rows[i];
  const { category, series } = layout.spec;
  tip.replaceChildren();
  tip.dataset.row = String(i);
  const head = document.createElement('div');
  head.className = 'tip-x';
  const xText = displayText(row[category], result.columns[category].type);
  head.textContent = xText === null ? 'NULL' : xText;
  tip.appendChild(head);
  series.forEach((s, si) => {
    const line = document.createElement('div');
    line.className = 'tip-row';
    line.dataset.col = result.columns[s].name;
    const sw = document.createElement('span');
    sw.className = 'tip-swatch';
    sw.style.background = COLORS[si % COLORS.length];
    const name = document.createElement('span');
    name.className = 'tip-name';
    name.textContent = result.columns[s].name;
    const value = document.createElement('span');
    value.className = 'tip-value';
    const t = displayText(row[s], result.columns[s].type);
    value.textContent = t === null ? 'NULL' : t;
    line.append(sw, name, value);
    tip.appendChild(line);
  });
  tip.hidden = false;
  const box = canvas.parentNode.getBoundingClientRect();
  const left = e.clientX - box.left + 14;
  tip.style.left = Math.min(left, box.width - tip.offsetWidth - 4) + 'px';
  tip.style.top = (e.clientY - box.top + 14) + 'px';
}

// ---------------------------------------------------------------- cell viewer

/** Opens row `r`, column `c` of `result` in the cell panel. */
function openCell(result, r, c) {
  const col = result.columns[c];
  const v = result.rows[r] ? result.rows[r][c] : undefined;
  let text;
  let note = '';
  if (v === null || v === undefined) {
    text = 'NULL';
    note = 'NULL';
  } else if (typeof v === 'object') {
    text = JSON.stringify(v, null, 2);
    note = 'pretty-printed JSON';
  } else if (typeof v === 'string' && (/^JSON$/i.test(col.type) || /^\s*[[{]/.test(v))) {
    try {
      text = JSON.stringify(JSON.parse(v), null, 2);
      note = 'pretty-printed JSON';
    } catch (_) {
      text = v;
    }
  } else {
    text = cellText(v, col.type);
  }
  $('cell-viewer').hidden = false;
  $('cell-viewer').dataset.row = String(r);
  $('cell-viewer').dataset.col = String(c);
  $('cell-title').textContent = `${col.name} · row ${fmtInt(r + 1)}`;
  $('cell-type').textContent = col.type;
  $('cell-note').textContent = [note, `${fmtInt(text.length)} characters`].filter(Boolean).join(' · ');
  $('cell-text').textContent = text;
  $('cell-text').classList.toggle('cell-text-null', v === null || v === undefined);
}

function closeCell() {
  $('cell-viewer').hidden = true;
}

async function copyCell() {
  const text = $('cell-text').textContent;
  try {
    await navigator.clipboard.writeText(text);
    $('cell-note').textContent = 'Copied to the clipboard';
  } catch (_) {
    // No clipboard access (a plain-HTTP page, a denied permission): the
    // text is selected for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents($('cell-text'));
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    $('cell-note').textContent = document.execCommand('copy') ? 'Copied to the clipboard' : 'Selected: press Ctrl+C to copy';
  }
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
    ui.catalogRoute = true;
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
  ui.catalogRoute = false;
  const dbs = new Map();
  for (const [db, schema, table, type, col, dtype] of (await r.json()).rows) {
    if (!dbs.has(db)) dbs.set(db, { name: db, kind: db === 'memory' ? 'gateway' : '', schemas: new Map() });
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

/** What a database is, in words (GET /catalog's `kind`). */
const KIND_LABEL = {
  gateway: "the gateway's own database",
  ducklake: 'DuckLake lake',
  iceberg: 'Iceberg table',
  delta: 'Delta table',
  duckdb: 'DuckDB file',
  sources: 'named sources (files and S3 prefixes)',
};

function plural(n, one, many) {
  return `${fmtInt(n)} ${n === 1 ? one : many}`;
}

// The gateway's own database first, then the lakes and catalogs the
// operator attached, each labelled with what it is; a schema says how many
// tables it holds in words ("main · 3 tables"), not a bare "(3)".
function renderCatalog(databases, detailRoute) {
  ui.catalog = databases;
  ui.columns.clear();
  const box = $('catalog');
  box.replaceChildren();
  let tables = 0;
  const own = databases.filter((d) => d.kind === 'gateway' || d.kind === '');
  const lakes = databases.filter((d) => !(d.kind === 'gateway' || d.kind === ''));
  const groups = [['Gateway database', own, 'catalog-own'], ['Lakes and attached catalogs', lakes, 'catalog-lakes']];
  for (const [heading, dbs, id] of groups) {
    const group = document.createElement('div');
    group.className = 'catalog-group';
    group.id = id;
    group.appendChild(text('h4', heading, 'catalog-heading'));
    if (dbs.length === 0) {
      group.appendChild(text('p', id === 'catalog-lakes' ? 'None attached (see [[attach]] in the configuration).' : 'None visible.', 'muted small-note'));
    }
    for (const db of dbs) tables += renderDatabase(group, db, detailRoute);
    box.appendChild(group);
  }
  if (tables === 0) box.appendChild(text('p', 'No tables yet.', 'muted'));
}

/** One database's branch of the tree; answers how many tables it shows. */
function renderDatabase(box, db, detailRoute) {
  let tables = 0;
  const dd = document.createElement('details');
  dd.open = true;
  dd.className = 'db-node';
  dd.dataset.db = db.name;
  dd.dataset.kind = db.kind || '';
  const sum = document.createElement('summary');
  sum.appendChild(text('span', db.name, 'db-name mono'));
  const what = [KIND_LABEL[db.kind] || db.kind, db.read_only ? 'read-only' : null].filter(Boolean).join(', ');
  if (what) sum.appendChild(text('span', what, 'db-kind'));
  sum.title = `${db.name}: ${what || 'database'}. Its tables are named ${quoteIdent(db.name)}.<schema>.<table>`;
  dd.appendChild(sum);
  for (const schema of db.schemas) {
    const sd = document.createElement('details');
    sd.className = 'schema-node';
    sd.dataset.schema = schema.name;
    sd.open = schema.tables.length > 0 && schema.tables.length < 50;
    const ss = document.createElement('summary');
    ss.appendChild(text('span', schema.name, 'schema-name'));
    ss.appendChild(text('span', ` · ${schema.tables.length === 0 ? 'no tables' : plural(schema.tables.length, 'table', 'tables')}`, 'muted'));
    ss.title = `schema ${db.name}.${schema.name}`;
    sd.appendChild(ss);
    for (const t of schema.tables) {
      tables++;
      const td = document.createElement('details');
      td.className = 'table-node';
      td.dataset.table = t.name;
      const ts = text('summary', t.name);
      ts.title = 'Click: columns · double-click: insert the name';
      if (t.kind === 'view') ts.appendChild(text('span', ' view', 'muted'));
      td.appendChild(ts);
      const qualified = [db.name, schema.name, t.name].map(quoteIdent).join('.');
      ts.addEventListener('dblclick', (e) => { e.preventDefault(); ui.editor.insert(qualified); });
      td.addEventListener('toggle', async () => {
        if (!td.open || td.dataset.loaded) return;
        td.dataset.loaded = '1';
        let cols;
        try {
          cols = t.columns || (detailRoute ? await columnsOf(db.name, schema.name, t.name) : []);
        } catch (e) {
          td.appendChild(text('div', e.doc ? e.doc.title : String(e), 'error-text'));
          return;
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
  return tables;
}

/** A table's columns, from GET /catalog/{db}/{schema}/{table} once. */
function columnsOf(db, schema, table) {
  const key = [db, schema, table].join('\0');
  const have = ui.columns.get(key);
  if (have) return Promise.resolve(have);
  const found = findTable(db, schema, table);
  if (found && found.columns) return Promise.resolve(found.columns);
  const path = '/catalog/' + [db, schema, table].map(encodeURIComponent).join('/');
  const p = api.getJson(path).then((d) => {
    ui.columns.set(key, d.columns);
    return d.columns;
  }, (e) => {
    ui.columns.delete(key);
    throw e;
  });
  ui.columns.set(key, p);
  return p;
}

function findTable(db, schema, table) {
  const d = ui.catalog.find((x) => x.name === db);
  const s = d && d.schemas.find((x) => x.name === schema);
  return s && s.tables.find((x) => x.name === table);
}

// ---------------------------------------------------------------- autocompletion

async function loadFunctions() {
  try {
    ui.functions = (await api.getJson('/catalog/functions')).functions || [];
  } catch (_) {
    // A gateway without the route: no function names offered.
    ui.functions = [];
  }
}

const same = (a, b) => a.toLowerCase() === b.toLowerCase();
/** The database unqualified names resolve in. */
const defaultDb = () => ui.catalog.find((d) => d.kind === 'gateway') || ui.catalog[0];

/** Every table as {db, schema, table}. */
function allTables() {
  const out = [];
  for (const d of ui.catalog) for (const s of d.schemas) for (const t of s.tables) out.push({ db: d.name, schema: s.name, table: t.name, kind: t.kind });
  return out;
}

/**
 * The columns of `t` as candidates; null while they load (the list is
 * offered again once they are in).
 */
function columnCandidates(t) {
  const key = [t.db, t.schema, t.table].join('\0');
  const have = ui.columns.get(key);
  if (Array.isArray(have)) {
    return have.map((c) => ({ label: c.name, insert: quoteIdent(c.name), kind: 'column', detail: `${c.type} · ${t.table}` }));
  }
  const found = findTable(t.db, t.schema, t.table);
  if (found && found.columns) {
    ui.columns.set(key, found.columns);
    return columnCandidates(t);
  }
  if (!have && ui.catalogRoute) {
    columnsOf(t.db, t.schema, t.table).then(() => {
      if (document.activeElement === $('sql')) ui.editor.completer.update(false);
    }, () => {});
  }
  return null;
}

/**
 * Whether `t` is found by its bare name: the gateway's search path is
 * `client,main` of its own database (`main` alone under the read-only
 * policy), so a table there needs no qualification unless `client` holds
 * one of the same name first.
 */
function resolvesUnqualified(t, tables) {
  const home = defaultDb();
  if (!home || t.db !== home.name) return false;
  if (t.schema === 'client') return true;
  return t.schema === 'main'
    && !tables.some((x) => x.db === home.name && x.schema === 'client' && same(x.table, t.table));
}

/** Candidates for a dotted path whose last part is being typed. */
function completions(parts, sql) {
  const path = parts.slice(0, -1);
  const out = [];
  const home = defaultDb();
  const tables = allTables();
  const tableItem = (t, qualify) => ({
    label: t.table,
    insert: qualify ? [t.db, t.schema, t.table].map(quoteIdent).join('.') : quoteIdent(t.table),
    kind: t.kind === 'view' ? 'view' : 'table',
    detail: `${t.kind === 'view' ? 'view' : 'table'} · ${t.db}.${t.schema}`,
  });
  if (path.length === 0) {
    // Tables (qualified where the default database and schema would not
    // find them), the columns of the tables the SQL names, databases,
    // then functions.
    const named = new Set((sql.match(/[A-Za-z_][A-Za-z0-9_$]*/g) || []).map((w) => w.toLowerCase()));
    for (const t of tables) out.push(tableItem(t, !resolvesUnqualified(t, tables)));
    let loading = 0;
    for (const t of tables) {
      if (!named.has(t.table.toLowerCase()) || loading > 8) continue;
      const cols = columnCandidates(t);
      if (cols) out.push(...cols);
      else loading++;
    }
    for (const d of ui.catalog) out.push({ label: d.name, insert: quoteIdent(d.name), kind: 'database', detail: KIND_LABEL[d.kind] || 'database' });
    for (const f of ui.functions) {
      const table = f.kinds.length === 1 && f.kinds[0] === 'table';
      out.push({ label: f.name, insert: f.name + '(', kind: 'function', detail: f.kinds.join(', ') + (table ? ' function' : '') });
    }
  } else if (path.length === 1) {
    const [a] = path;
    const db = ui.catalog.find((d) => same(d.name, a));
    if (db) for (const s of db.schemas) out.push({ label: s.name, insert: quoteIdent(s.name), kind: 'schema', detail: `schema · ${db.name}` });
    if (home) {
      const s = home.schemas.find((x) => same(x.name, a));
      if (s) for (const t of s.tables) out.push(tableItem({ db: home.name, schema: s.name, table: t.name, kind: t.kind }, false));
    }
    for (const t of tables.filter((x) => same(x.table, a))) out.push(...(columnCandidates(t) || []));
  } else if (path.length === 2) {
    const [a, b] = path;
    const db = ui.catalog.find((d) => same(d.name, a));
    const s = db && db.schemas.find((x) => same(x.name, b));
    if (s) for (const t of s.tables) out.push(tableItem({ db: db.name, schema: s.name, table: t.name, kind: t.kind }, false));
    if (home) {
      for (const t of tables.filter((x) => x.db === home.name && same(x.schema, a) && same(x.table, b))) out.push(...(columnCandidates(t) || []));
    }
  } else if (path.length === 3) {
    const [a, b, c] = path;
    for (const t of tables.filter((x) => same(x.db, a) && same(x.schema, b) && same(x.table, c))) out.push(...(columnCandidates(t) || []));
  }
  // One entry per label and kind (a name in two schemas shows twice,
  // with its place).
  const seen = new Set();
  return out.filter((c) => {
    const k = `${c.kind}\0${c.label}\0${c.detail}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

// ---------------------------------------------------------------- history

/**
 * The local-storage key of this identity's history: a hash of its name
 * (`GET /whoami`), so two identities on one browser keep two histories and
 * a JWT renewed keeps its own; of the token on a gateway without /whoami.
 * The token itself is never stored.
 */
function historyKey(token, who) {
  const of = who ? 'identity\n' + who.name : token || '';
  return HISTORY_PREFIX + sha256hex('duckgate console history\n' + of).slice(0, 32);
}

function pastRuns() {
  if (!ui.historyKey) return [];
  try {
    return JSON.parse(localStorage.getItem(ui.historyKey)) || [];
  } catch (_) {
    return [];
  }
}

function remember(run, state, rows, elapsed) {
  if (!ui.historyKey) return;
  const h = pastRuns();
  h.unshift({ sql: run.sql, id: run.id, state, rows, elapsed_ms: elapsed, at: Date.now() });
  try {
    localStorage.setItem(ui.historyKey, JSON.stringify(h.slice(0, HISTORY_MAX)));
  } catch (_) {
    // Storage full or refused: the history is what it was.
  }
  renderHistory();
}

function renderHistory() {
  const ol = $('history');
  ol.replaceChildren();
  for (const item of pastRuns()) {
    const li = document.createElement('li');
    li.dataset.state = item.state;
    li.appendChild(text('div', item.sql.length > 160 ? item.sql.slice(0, 160) + '…' : item.sql, 'mono'));
    const at = new Date(item.at);
    const today = at.toDateString() === new Date().toDateString();
    const meta = [today ? at.toLocaleTimeString() : at.toLocaleString(), item.state];
    if (item.state === 'succeeded') meta.push(`${fmtInt(item.rows)} rows`);
    if (typeof item.elapsed_ms === 'number') meta.push(fmtMs(item.elapsed_ms));
    li.appendChild(text('div', meta.join(' · '), 'muted'));
    li.title = 'Click: put this SQL in the editor';
    li.addEventListener('click', () => { ui.editor.value = item.sql; saveSoon(); });
    ol.appendChild(li);
  }
}

// ---------------------------------------------------------------- workspace

/** Stores the workspace soon (once for a burst of changes). */
function saveSoon() {
  if (!ui.workspaceKey || ui.restoring) return;
  clearTimeout(ui.saveTimer);
  ui.saveTimer = setTimeout(saveNow, 300);
}

function saveNow() {
  clearTimeout(ui.saveTimer);
  if (!ui.workspaceKey || ui.restoring) return;
  workspace.save(ui.workspaceKey, ui.editor.value, ui.tabs, ui.active, ui.tabSeq);
}

/**
 * Puts this identity's stored workspace on the page (tabs, editor);
 * `switching` from another identity's, whose text the editor does not keep.
 */
function restoreWorkspace(switching) {
  const doc = workspace.load(ui.workspaceKey);
  if (!doc && switching && sqlFromHash() === null) ui.editor.value = '';
  ui.restoring = true;
  try {
    ui.tabs = ui.tabs.filter((t) => ui.run && ui.run.tab === t);
    ui.active = null;
    ui.tabSeq = ui.tabs.reduce((m, t) => Math.max(m, t.n), 0);
    resetResult();
    clearProblem();
    if (doc) {
      // A shared link's SQL is what the editor shows; else the stored text.
      if (typeof doc.editor === 'string' && sqlFromHash() === null) ui.editor.value = doc.editor;
      if (doc.editor_cut) setStatus('idle', 'The editor held more than the browser keeps: its start was restored');
      for (const t of doc.tabs) {
        if (ui.tabs.some((x) => x.n === t.n)) continue;
        const tab = { n: t.n, sql: t.sql || '', state: t.state || 'empty', id: t.id || null, view: t.view || 'table', result: null, problem: t.problem || null };
        if (t.result) {
          tab.result = {
            id: t.result.id, columns: t.result.columns || [], rows: t.result.rows || [], total: t.result.total,
            truncated: t.result.truncated, chart: t.result.chart, expiresAt: t.result.expires_at_ms,
            complete: true, restored: true,
          };
        }
        ui.tabs.push(tab);
      }
      ui.tabs.sort((a, b) => a.n - b.n);
      ui.tabSeq = Math.max(ui.tabSeq, doc.seq || 0, ...ui.tabs.map((t) => t.n));
    }
    const active = ui.tabs.find((t) => doc && t.n === doc.active) || ui.tabs[ui.tabs.length - 1];
    if (active) activate(active);
    renderTabs();
  } finally {
    ui.restoring = false;
  }
  if (ui.active && ui.active.result) $('table-pane').dataset.loaded = String(ui.active.result.rows.length);
  for (const tab of ui.tabs) if (tab.state === 'running' && !(ui.run && ui.run.tab === tab)) reattach(tab);
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
  ui.editor = new Editor($('sql'), $('editor-highlight'), (newTab) => run({ newTab }), completions);
  $('run').addEventListener('click', () => run());
  $('run-new').addEventListener('click', () => run({ newTab: true }));
  $('cancel').addEventListener('click', cancel);
  $('share').addEventListener('click', share);
  $('catalog-refresh').addEventListener('click', () => { loadCatalog(); loadFunctions(); });
  $('history-clear').addEventListener('click', () => {
    if (ui.historyKey) localStorage.removeItem(ui.historyKey);
    renderHistory();
  });
  $('chart-kind').addEventListener('change', redrawChart);
  $('chart-x').addEventListener('change', chosenAxes);
  $('chart').addEventListener('mousemove', chartTip);
  $('chart').addEventListener('mouseleave', () => { $('chart-tip').hidden = true; });
  $('cell-close').addEventListener('click', closeCell);
  $('restored-load').addEventListener('click', loadRestored);
  $('sql').addEventListener('input', saveSoon);
  // Leaving or reloading: what is on the page is stored now.
  window.addEventListener('pagehide', saveNow);
  $('cell-copy').addEventListener('click', copyCell);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !$('cell-viewer').hidden && document.activeElement !== $('sql')) closeCell();
  });
  for (const t of document.querySelectorAll('.tab')) t.addEventListener('click', () => selectTab(t.dataset.tab));
  $('signout').addEventListener('click', () => {
    saveNow();
    api.clearToken();
    ui.historyKey = null;
    renderHistory();
    showLogin();
  });
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
