// The workspace kept across reloads: the editor's text and every result tab
// (its SQL, state, problem, chart axes and result), in the browser's local
// storage under a hash of the identity's name, as the history is. Bounded:
// the whole document at most BUDGET characters, a tab's rows at most its
// share of it; a result too large to keep whole keeps its first rows and
// says so (the console offers to load the rest from the gateway, or to run
// the SQL again once the gateway no longer holds it).

import { sha256hex } from './sha256.js';

const PREFIX = 'duckgate.workspace.';
/** Characters of the stored document (local storage holds about 5M per site). */
export const BUDGET = 1000000;
/** At most this much of BUDGET for one tab's rows. */
export const TAB_BUDGET = 250000;
/** The editor's text kept (a longer one keeps its start, and says so). */
export const EDITOR_MAX = 200000;

/**
 * The storage key of an identity's workspace: a hash of its name (what
 * `GET /whoami` answers); of the token where the gateway has no /whoami.
 */
export function workspaceKey(token, who) {
  const of = who ? 'identity\n' + who.name : 'token\n' + (token || '');
  return PREFIX + sha256hex('duckgate console workspace\n' + of).slice(0, 32);
}

/** A problem document cut to what a tab shows again. */
function keptProblem(p) {
  const doc = { ...p.doc };
  if (typeof doc.detail === 'string' && doc.detail.length > 8000) doc.detail = doc.detail.slice(0, 8000);
  return { doc, status: p.status, sql: typeof p.sql === 'string' ? p.sql.slice(0, EDITOR_MAX) : p.sql };
}

/**
 * The rows of `result` that fit in `budget` characters, as JSON text, and
 * how many; remembered on the result (its rows do not change once loaded).
 */
function keptRows(result, budget) {
  const memo = result.storedRows;
  if (memo && memo.budget === budget && memo.held === result.rows.length) return memo;
  const parts = [];
  let used = 2;
  for (const row of result.rows) {
    const s = JSON.stringify(row);
    if (used + s.length + 1 > budget) break;
    used += s.length + 1;
    parts.push(s);
  }
  result.storedRows = { budget, held: result.rows.length, count: parts.length, json: '[' + parts.join(',') + ']' };
  return result.storedRows;
}

/** One tab as stored text; `budget`: characters for its rows. */
function tabText(tab, budget) {
  const t = { n: tab.n, sql: tab.sql.slice(0, EDITOR_MAX), state: tab.state, id: tab.id || null, view: tab.view || 'table' };
  if (tab.problem) t.problem = keptProblem(tab.problem);
  const r = tab.result;
  if (!r) return JSON.stringify(t);
  const meta = { id: r.id, columns: r.columns, total: r.total, truncated: !!r.truncated, chart: r.chart || null, expires_at_ms: r.expiresAt || null };
  const rows = budget > 0 ? keptRows(r, budget) : { json: '[]' };
  return JSON.stringify(t).slice(0, -1) + ',"result":' + JSON.stringify(meta).slice(0, -1) + ',"rows":' + rows.json + '}}';
}

/**
 * Stores the workspace (`editor`: its text; `tabs`, `active`, `seq`: the
 * console's); a document past the storage's quota is stored without rows.
 */
export function save(key, editor, tabs, active, seq) {
  if (!key) return;
  const cut = editor.length > EDITOR_MAX;
  const share = Math.min(TAB_BUDGET, Math.floor((BUDGET - Math.min(editor.length, EDITOR_MAX)) / Math.max(1, tabs.length)) - 2000);
  const doc = (budget) => '{"v":1,"saved_at":' + Date.now()
    + ',"editor":' + JSON.stringify(editor.slice(0, EDITOR_MAX)) + ',"editor_cut":' + cut
    + ',"active":' + (active ? active.n : 'null') + ',"seq":' + seq
    + ',"tabs":[' + tabs.map((t) => tabText(t, budget)).join(',') + ']}';
  try {
    localStorage.setItem(key, doc(Math.max(0, share)));
  } catch (_) {
    try {
      localStorage.setItem(key, doc(0));
    } catch (_e) {
      // Refused altogether: the last stored workspace stays.
    }
  }
}

/** The stored workspace of `key`, or null. */
export function load(key) {
  if (!key) return null;
  try {
    const doc = JSON.parse(localStorage.getItem(key));
    return doc && doc.v === 1 && Array.isArray(doc.tabs) ? doc : null;
  } catch (_) {
    return null;
  }
}

/** Moves the workspace of `from` (filed under a token's hash) to `to`, where `to` has none. */
export function adopt(from, to) {
  if (from === to || localStorage.getItem(to) !== null) return;
  const doc = localStorage.getItem(from);
  if (doc === null) return;
  try {
    localStorage.setItem(to, doc);
    localStorage.removeItem(from);
  } catch (_) {
    // Refused: it stays where it was.
  }
}
