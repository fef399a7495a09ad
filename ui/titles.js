// A result tab's title says what the result is, not how the SQL starts:
// the first table (or file, or table function) the statement reads and the
// row count (`sales_daily · 10 rows`), the column names where it reads no
// table (`answer · 1 row`), the target of a statement that changes
// something (`CREATE TABLE sales_x`). The SQL itself is the tab's tooltip.
// Only a title: the gateway's guard (DuckDB's parser) reads the SQL.

import { sqlTokens } from './editor.js';
import { fmtCount } from './numbers.js';

const READS = new Set(['select', 'with', 'from', 'values', 'table', 'summarize', 'describe', 'pivot', 'unpivot', 'show', 'explain']);
const TARGET_AFTER = new Set(['table', 'view', 'into', 'update', 'from', 'schema', 'macro', 'sequence', 'index', 'type', 'copy', 'attach', 'detach']);

const unquote = (t) => (t.type === 'ident' ? t.text.slice(1, -1).replace(/""/g, '"') : t.text);

/** The last part of a path or URL in a string literal (`events.parquet`). */
function basename(literal) {
  const s = literal.slice(1, -1).replace(/''/g, "'");
  const parts = s.split(/[\\/]/).filter(Boolean);
  return parts.length ? parts[parts.length - 1] : s;
}

/** The name the tokens from `i` on read: a table, a file, a function, a subquery's. */
function readAt(toks, i) {
  const t = toks[i];
  if (!t) return null;
  if (t.type === 'string') return basename(t.text);
  if (t.text === '(') {
    // A subquery: what it reads.
    let depth = 0;
    let j = i;
    for (; j < toks.length; j++) {
      if (toks[j].text === '(') depth++;
      else if (toks[j].text === ')' && --depth === 0) break;
    }
    return subjectOfTokens(toks.slice(i + 1, j));
  }
  if (t.type !== 'word' && t.type !== 'ident') return null;
  let name = unquote(t);
  let j = i + 1;
  while (toks[j] && toks[j].text === '.' && toks[j + 1] && (toks[j + 1].type === 'word' || toks[j + 1].type === 'ident')) {
    name = unquote(toks[j + 1]);
    j += 2;
  }
  if (toks[j] && toks[j].text === '(') {
    // A table function: the file it reads, if its first argument names one.
    const arg = toks[j + 1];
    return arg && arg.type === 'string' ? basename(arg.text) : `${name}()`;
  }
  return name;
}

/** What the outermost query reads first (its first FROM at the least depth). */
function subjectOfTokens(toks) {
  let depth = 0;
  let best = null;
  toks.forEach((t, i) => {
    if (t.text === '(') depth++;
    else if (t.text === ')') depth--;
    else if (t.type === 'word' && t.text.toLowerCase() === 'from' && (best === null || depth < best.depth)) best = { i, depth };
  });
  return best ? readAt(toks, best.i + 1) : null;
}

/**
 * What a statement is about: `{reads}` (the first table it reads, or null)
 * for a query, `{changes}` (`CREATE TABLE name`) for a statement that
 * changes something.
 */
export function subjectOf(sql) {
  const toks = sqlTokens(sql).filter((t) => t.type !== 'comment');
  const first = toks.find((t) => t.text !== '(');
  if (first && first.type === 'word' && !READS.has(first.text.toLowerCase())) {
    const words = [];
    let target = null;
    let named = false; // past a word after which the target is named
    for (let i = 0; i < toks.length && i < 12; i++) {
      const t = toks[i];
      if (named && !/^(if|not|exists)$/i.test(t.text)) {
        target = readAt(toks, i);
        break;
      }
      if (t.type !== 'word') break;
      if (!/^(if|not|exists|or|replace|temp|temporary|persistent)$/i.test(t.text)) words.push(t.text.toUpperCase());
      if (TARGET_AFTER.has(t.text.toLowerCase())) named = true;
    }
    const kind = words.slice(0, 2).join(' ');
    return { changes: target ? `${kind} ${target}` : kind };
  }
  return { reads: subjectOfTokens(toks) };
}

const rows = (n) => `${fmtCount(n)} ${Number(n) === 1 ? 'row' : 'rows'}`;

/** A tab's title (`tab`: its SQL, state, result and problem). */
export function tabTitle(tab) {
  if (!tab.sql.trim()) return 'empty';
  const s = subjectOf(tab.sql);
  const columns = tab.result && tab.result.columns && tab.result.columns.length
    ? tab.result.columns.slice(0, 2).map((c) => c.name).join(', ') + (tab.result.columns.length > 2 ? ', …' : '')
    : null;
  const snippet = tab.sql.replace(/\s+/g, ' ').trim();
  const what = s.changes || s.reads || columns || (snippet.length > 24 ? snippet.slice(0, 23) + '…' : snippet);
  switch (tab.state) {
    case 'running':
      return `${what} · running`;
    case 'succeeded':
      if (s.changes) return what;
      return tab.result ? `${what} · ${rows(tab.result.total)}${tab.result.truncated ? ' (cut)' : ''}` : what;
    case 'failed': {
      const doc = tab.problem && tab.problem.doc;
      return `${what} · ${doc && doc.error_class ? `${doc.error_class} Error` : 'failed'}`;
    }
    case 'cancelled':
      return `${what} · cancelled`;
    case 'interrupted':
      return `${what} · interrupted`;
    default:
      return what;
  }
}
