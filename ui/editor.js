// A small SQL editor: a textarea (which keeps typing, selection, undo and
// accessibility native) over a <pre> that shows the same text highlighted.
// The highlighter only colours; the gateway's guard (DuckDB's own parser)
// is the only reader of the SQL that matters.

const KEYWORDS = new Set(`
select from where group by order having limit offset with as and or not in is null
like ilike between case when then else end join left right full outer inner cross on
using union all intersect except distinct insert into values update set delete create
table view or replace drop alter add column if exists primary key references default
cast try_cast true false asc desc nulls first last over partition window rows range
qualify pivot unpivot describe summarize show tables explain analyze copy to attach
detach use install load pragma call returning filter within lateral natural semi anti
asof positional struct map list array interval date time timestamp recursive materialized
`.trim().split(/\s+/));

const TYPES = new Set(`
integer int bigint smallint tinyint hugeint uhugeint ubigint uinteger usmallint utinyint
double float real decimal numeric varchar text string blob boolean bool uuid json
timestamptz bit bignum enum union
`.trim().split(/\s+/));

function escapeHtml(s) {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

const TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?)|(\b\d+(?:\.\d*)?(?:e[+-]?\d+)?\b|\.\d+\b)|([A-Za-z_][A-Za-z0-9_$]*)|(\$\d+|\?)|([\s\S])/gi;

/** `sql` as HTML with spans per token class. */
export function highlight(sql) {
  let out = '';
  let m;
  TOKEN.lastIndex = 0;
  while ((m = TOKEN.exec(sql)) !== null) {
    const [text, comment, str, ident, num, word, param] = m;
    let cls = null;
    if (comment) cls = 'tk-comment';
    else if (str) cls = 'tk-string';
    else if (ident) cls = 'tk-ident';
    else if (num) cls = 'tk-number';
    else if (param) cls = 'tk-param';
    else if (word) {
      const w = word.toLowerCase();
      if (KEYWORDS.has(w)) cls = 'tk-keyword';
      else if (TYPES.has(w)) cls = 'tk-type';
      else if (sql[TOKEN.lastIndex] === '(') cls = 'tk-function';
    }
    out += cls ? `<span class="${cls}">${escapeHtml(text)}</span>` : escapeHtml(text);
  }
  return out;
}

export class Editor {
  constructor(textarea, pre, onRun) {
    this.ta = textarea;
    this.pre = pre;
    this.mark = null;
    this.ta.addEventListener('input', () => { this.mark = null; this.render(); });
    this.ta.addEventListener('scroll', () => this.syncScroll());
    this.ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        onRun();
      } else if (e.key === 'Tab' && !e.ctrlKey && !e.metaKey && !e.altKey) {
        e.preventDefault();
        this.insert('  ');
      }
    });
    this.render();
  }

  get value() { return this.ta.value; }

  set value(v) {
    this.ta.value = v;
    this.mark = null;
    this.render();
  }

  insert(text) {
    const { selectionStart: a, selectionEnd: b, value } = this.ta;
    this.ta.value = value.slice(0, a) + text + value.slice(b);
    this.ta.selectionStart = this.ta.selectionEnd = a + text.length;
    this.ta.dispatchEvent(new Event('input'));
    this.ta.focus();
  }

  /** Marks [start, end) of the SQL as the error's place; null clears. */
  markError(range) {
    this.mark = range;
    this.render();
  }

  render() {
    const v = this.ta.value;
    let html;
    if (this.mark && this.mark[0] < v.length) {
      const [a, b] = this.mark;
      const end = Math.max(b, a + 1);
      html = highlight(v.slice(0, a))
        + '<mark class="sql-error" id="sql-error-mark">' + escapeHtml(v.slice(a, end)) + '</mark>'
        + highlight(v.slice(end));
    } else {
      html = highlight(v);
    }
    // A trailing newline needs a character after it to take up a line.
    this.pre.innerHTML = html + '\n ';
    this.syncScroll();
  }

  syncScroll() {
    this.pre.scrollTop = this.ta.scrollTop;
    this.pre.scrollLeft = this.ta.scrollLeft;
  }
}

/**
 * Where in `sql` a DuckDB error message points, or null. DuckDB names the
 * token it stopped at (`syntax error at or near "x"`) or the name it could
 * not bind (`Referenced column "x" not found`, `Table with name x does not
 * exist`); when the SQL holds that text once outside strings we mark it.
 */
export function errorRange(sql, detail, position) {
  if (Number.isInteger(position) && position >= 0 && position < sql.length) {
    let end = position + 1;
    while (end < sql.length && /[A-Za-z0-9_]/.test(sql[end])) end++;
    return [position, end];
  }
  if (!detail) return null;
  const patterns = [
    /syntax error at or near "((?:[^"]|"")*)"/,
    /syntax error at end of input/,
    /Referenced column "((?:[^"]|"")*)" not found/,
    /Table with name "?([^"!\s]+)"? does not exist/,
    /Table Function with name "?([^"!\s]+)"? does not exist/,
    /Scalar Function with name "?([^"!\s]+)"? does not exist/,
    /Aggregate Function with name "?([^"!\s]+)"? does not exist/,
    /Referenced table "((?:[^"]|"")*)" not found/,
    /column "((?:[^"]|"")*)" must appear in the GROUP BY/,
  ];
  for (const p of patterns) {
    const m = detail.match(p);
    if (!m) continue;
    if (m[1] === undefined) {
      const end = sql.trimEnd().length;
      return end > 0 ? [end - 1, end] : null;
    }
    const needle = m[1].replace(/""/g, '"');
    const hits = findOutsideStrings(sql, needle);
    if (hits.length >= 1) return [hits[0], hits[0] + needle.length];
  }
  return null;
}

function findOutsideStrings(sql, needle) {
  const hits = [];
  const lower = sql.toLowerCase();
  const n = needle.toLowerCase();
  let i = 0;
  while (i < sql.length) {
    const c = sql[i];
    if (c === "'") {
      const j = sql.indexOf("'", i + 1);
      i = j < 0 ? sql.length : j + 1;
      continue;
    }
    if (c === '-' && sql[i + 1] === '-') {
      const j = sql.indexOf('\n', i);
      i = j < 0 ? sql.length : j + 1;
      continue;
    }
    if (lower.startsWith(n, i)) {
      const before = i === 0 ? ' ' : sql[i - 1];
      const after = sql[i + n.length] || ' ';
      const word = /[A-Za-z0-9_]/;
      if (!(word.test(n[0]) && word.test(before)) && !(word.test(n[n.length - 1]) && word.test(after))) hits.push(i);
      i += n.length;
      continue;
    }
    i++;
  }
  return hits;
}
