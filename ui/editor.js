// A small SQL editor: a textarea (which keeps typing, selection, undo and
// accessibility native) over a <pre> that shows the same text highlighted.
// The highlighter only colours; the gateway's guard (DuckDB's own parser)
// is the only reader of the SQL that matters.

import { Completer } from './complete.js';

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

/**
 * The tokens of `sql` but whitespace: `{type, text}`, type one of comment,
 * string, ident (a quoted name), number, word, param, punct.
 */
export function sqlTokens(sql) {
  const out = [];
  let m;
  const re = new RegExp(TOKEN.source, 'gi');
  while ((m = re.exec(sql)) !== null) {
    const [text, comment, str, ident, num, word, param] = m;
    const type = comment ? 'comment' : str ? 'string' : ident ? 'ident' : num ? 'number' : word ? 'word' : param ? 'param' : 'punct';
    if (type === 'punct' && /\s/.test(text)) continue;
    out.push({ type, text });
  }
  return out;
}

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
  /**
   * `onRun(newTab)`: Ctrl+Enter (Shift too: into a new result tab);
   * `complete`: the autocompletion's source (see complete.js), if any.
   */
  constructor(textarea, pre, onRun, complete) {
    this.ta = textarea;
    this.pre = pre;
    this.mark = null;
    this.completer = complete ? new Completer(textarea, complete) : null;
    this.ta.addEventListener('input', (e) => {
      this.mark = null;
      this.render();
      // Typing opens the list; text put in by a script does not.
      if (this.completer && e.inputType) {
        if (e.inputType.startsWith('insert') || this.completer.open) this.completer.update(false);
      }
    });
    this.ta.addEventListener('scroll', () => this.syncScroll());
    this.ta.addEventListener('keydown', (e) => {
      if (this.completer && this.completer.key(e)) return;
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        onRun(e.shiftKey);
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
    if (this.completer) this.completer.close();
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
 * The part of `sql` to mark for a problem: the token at the place DuckDB
 * gives (`line` and `column`, both from 1, the column in code points; lines
 * end at \n, \r\n or a lone \r), as [start, end) in the string's indexes;
 * null when the problem has no place in this SQL.
 */
export function errorRange(sql, problem) {
  if (!problem || !Number.isInteger(problem.line) || !Number.isInteger(problem.column)) return null;
  const start = indexAt(sql, problem.line, problem.column);
  if (start === null || sql.length === 0) return null;
  if (start >= sql.length) return [sql.length - 1, sql.length];
  const word = /[\p{L}\p{N}_$]/u;
  const first = String.fromCodePoint(sql.codePointAt(start));
  let end = start + first.length;
  if (word.test(first)) {
    while (end < sql.length) {
      const c = String.fromCodePoint(sql.codePointAt(end));
      if (!word.test(c)) break;
      end += c.length;
    }
  }
  return [start, end];
}

/** The string index of `line`, `column` in `sql`, or null past its end. */
function indexAt(sql, line, column) {
  let i = 0;
  for (let l = 1; l < line; l++) {
    while (i < sql.length && sql[i] !== '\n' && sql[i] !== '\r') i++;
    if (i >= sql.length) return null;
    i += sql[i] === '\r' && sql[i + 1] === '\n' ? 2 : 1;
  }
  for (let c = 1; c < column; c++) {
    if (i >= sql.length) return null;
    i += sql.codePointAt(i) > 0xffff ? 2 : 1;
  }
  return i;
}
