// A per-column profile of the result the page holds, as DuckDB's own UI
// offers one: each column's type, NULLs, distinct values, min and max, and a
// small histogram (equal-width bins over [min, max] for numbers, the most
// frequent values for the rest). Computed here from the rows already paged
// in, so it costs the gateway nothing; a result held in part says so.
//
// The bins follow DuckDB's `histogram(x, boundaries)`: a value counts in the
// first bin whose upper boundary is >= it, so the page's counts can be
// checked with DuckDB over the same boundaries.

import { cellText, isNumericType } from './grid.js';
import { groupDigits, fmtCount } from './numbers.js';

const MAX_BINS = 16;
const TOP = 6;
const INTEGER = /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT)$/;
/** Types whose printed text sorts as their values do (ISO dates and times, UUIDs, text). */
const TEXT_ORDER = /^(VARCHAR|DATE|TIME|TIMESTAMP|TIMESTAMP_S|TIMESTAMP_MS|TIMESTAMP_NS|TIMESTAMP WITH TIME ZONE|TIME WITH TIME ZONE|UUID)$/;

/** UTF-8 byte order (DuckDB's for VARCHAR) is code point order. */
function cmpCodePoints(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(i);
    if (x !== y) return x < y ? -1 : 1;
    if (x > 0xffff) i++;
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

/** How values of `type` compare (null: no min and max shown). */
function comparator(type) {
  if (INTEGER.test(type)) {
    return (a, b) => {
      if (typeof a === 'number' && typeof b === 'number') return a - b;
      const x = BigInt(String(a));
      const y = BigInt(String(b));
      return x < y ? -1 : x > y ? 1 : 0;
    };
  }
  if (isNumericType(type)) return (a, b) => Number(a) - Number(b);
  if (type === 'BOOLEAN') return (a, b) => (a === b ? 0 : a ? 1 : -1);
  if (TEXT_ORDER.test(type)) return (a, b) => cmpCodePoints(String(a), String(b));
  return null;
}

/** A value's key for counting distinct values. */
function keyOf(v) {
  return typeof v === 'object' ? 'o' + JSON.stringify(v) : typeof v === 'number' ? 'n' + String(v) : 's' + String(v);
}

/** The profile of column `c` of `rows`. */
function profileColumn(col, rows, c) {
  const type = col.type;
  const cmp = comparator(type);
  const counts = new Map();
  let nulls = 0;
  let min;
  let max;
  let any = false;
  for (const row of rows) {
    const v = row[c];
    if (v === null || v === undefined) {
      nulls++;
      continue;
    }
    const k = keyOf(v);
    const e = counts.get(k);
    if (e) e.n++;
    else counts.set(k, { v, n: 1 });
    if (cmp) {
      if (!any) {
        min = v;
        max = v;
        any = true;
      } else {
        if (cmp(v, min) < 0) min = v;
        if (cmp(v, max) > 0) max = v;
      }
    }
  }
  const p = {
    name: col.name,
    type,
    rows: rows.length,
    nulls,
    distinct: counts.size,
    min: any ? cellText(min, type) : null,
    max: any ? cellText(max, type) : null,
  };
  if (isNumericType(type) && any) {
    const lo = Number(min);
    const hi = Number(max);
    if (Number.isFinite(lo) && Number.isFinite(hi)) {
      const n = hi > lo ? Math.min(MAX_BINS, counts.size) : 1;
      const bounds = [];
      for (let i = 1; i < n; i++) bounds.push(lo + ((hi - lo) * i) / n);
      bounds.push(hi);
      const bins = new Array(n).fill(0);
      for (const { v, n: times } of counts.values()) {
        const x = Number(v);
        if (!Number.isFinite(x)) continue;
        let k = hi > lo ? Math.min(n - 1, Math.max(0, Math.ceil(((x - lo) / (hi - lo)) * n) - 1)) : 0;
        while (k > 0 && x <= bounds[k - 1]) k--;
        while (k < n - 1 && x > bounds[k]) k++;
        bins[k] += times;
      }
      p.histogram = { lo, bounds, counts: bins };
    }
  }
  if (!p.histogram) {
    // The most frequent values, ties in the column's order (or by text).
    const order = cmp || ((a, b) => cmpCodePoints(keyOf(a), keyOf(b)));
    const top = [...counts.values()].sort((a, b) => b.n - a.n || order(a.v, b.v)).slice(0, TOP);
    p.top = top.map(({ v, n }) => [typeof v === 'object' ? JSON.stringify(v) : cellText(v, type), n]);
    p.other = rows.length - nulls - top.reduce((s, t) => s + t.n, 0);
  }
  return p;
}

/** The profile of every column of `result` (over the rows it holds). */
export function profile(result) {
  return result.columns.map((col, c) => profileColumn(col, result.rows, c));
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const pct = (n, of) => (of === 0 ? '0%' : `${groupDigits(((100 * n) / of).toFixed(n === 0 || n === of ? 0 : 1))}%`);

/** A small bar chart of `counts`; `labels[i]` says what bar i holds. */
function bars(counts, labels) {
  const box = el('div', 'prof-bars');
  const most = Math.max(1, ...counts);
  counts.forEach((n, i) => {
    const bar = el('div', 'prof-bar');
    const fill = el('div', 'prof-fill');
    fill.style.height = `${Math.max(n > 0 ? 4 : 0, Math.round((100 * n) / most))}%`;
    bar.title = `${labels[i]}: ${fmtCount(n)}`;
    bar.appendChild(fill);
    box.appendChild(bar);
  });
  return box;
}

/** Renders `prof` (of `result`) into `box`. */
export function renderProfile(box, result, prof) {
  box.replaceChildren();
  const note = el('p', 'muted prof-note');
  const held = result.rows.length;
  note.textContent = held < result.total
    ? `Profile of the ${fmtCount(held)} rows this page holds, of ${fmtCount(result.total)} (load all rows to profile the whole result).`
    : `Profile of all ${fmtCount(held)} rows, computed in this browser.`;
  note.dataset.rows = String(held);
  box.appendChild(note);
  const table = el('table', 'prof-table');
  const head = el('tr');
  for (const h of ['Column', 'Type', 'NULLs', 'Distinct', 'Min', 'Max', 'Distribution']) head.appendChild(el('th', null, h));
  table.appendChild(el('thead')).appendChild(head);
  const body = el('tbody');
  prof.forEach((p, i) => {
    const tr = el('tr', 'prof-row');
    tr.dataset.col = String(i);
    tr.dataset.nulls = String(p.nulls);
    tr.dataset.distinct = String(p.distinct);
    if (p.min !== null) tr.dataset.min = p.min;
    if (p.max !== null) tr.dataset.max = p.max;
    tr.appendChild(el('td', 'prof-name', p.name));
    tr.appendChild(el('td', 'mono muted', p.type));
    const nulls = el('td', 'num', fmtCount(p.nulls));
    nulls.appendChild(el('span', 'muted prof-pct', ` ${pct(p.nulls, p.rows)}`));
    tr.appendChild(nulls);
    tr.appendChild(el('td', 'num', fmtCount(p.distinct)));
    const shown = (t) => (t === null ? '—' : isNumericType(p.type) ? groupDigits(t) : t);
    tr.appendChild(el('td', isNumericType(p.type) ? 'num mono' : 'mono', shown(p.min)));
    tr.appendChild(el('td', isNumericType(p.type) ? 'num mono' : 'mono', shown(p.max)));
    const dist = el('td', 'prof-dist');
    if (p.histogram) {
      const { lo, bounds, counts } = p.histogram;
      tr.dataset.bounds = JSON.stringify(bounds);
      tr.dataset.counts = JSON.stringify(counts);
      const labels = bounds.map((b, k) => `${k === 0 ? `[${lo}` : `(${bounds[k - 1]}`}, ${b}]`);
      dist.appendChild(bars(counts, labels));
    } else if (p.top) {
      tr.dataset.top = JSON.stringify(p.top);
      const list = el('div', 'prof-top');
      const most = Math.max(1, ...p.top.map((t) => t[1]));
      for (const [text, n] of p.top) {
        const line = el('div', 'prof-top-row');
        const bar = el('span', 'prof-top-bar');
        bar.style.width = `${Math.max(2, Math.round((60 * n) / most))}px`;
        const label = el('span', 'prof-top-label', text.length > 40 ? text.slice(0, 39) + '…' : text);
        label.title = text;
        line.append(bar, label, el('span', 'muted', ` ${fmtCount(n)}`));
        list.appendChild(line);
      }
      if (p.other > 0) list.appendChild(el('div', 'muted', `other values: ${fmtCount(p.other)}`));
      dist.appendChild(list);
    }
    tr.appendChild(dist);
    body.appendChild(tr);
  });
  table.appendChild(body);
  box.appendChild(table);
}
