// Autocompletion for the editor: a list under the caret of the names that
// start with the word being typed. Where the names come from is the
// console's business (`source`); this file only finds the word, shows the
// list and puts the chosen name in the text. Keys while the list is open:
// ↑/↓ move, Tab or Enter accept, Esc closes; Ctrl+Space opens it.

const MAX_SHOWN = 40;
/** A word, and the qualified names (`db.schema.ta`) a caret may end. */
const WORD_BEFORE = /(?<![A-Za-z0-9_$"])(?:(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")*")\.)*[A-Za-z_][A-Za-z0-9_$]*$|(?<![A-Za-z0-9_$"])(?:(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")*")\.)+$/;

/**
 * The word the caret ends in `text` (up to `caret`): `{parts}`,
 * `parts` the dotted path (quotes removed), its last element the part
 * being typed (may be empty after a dot); null when the caret ends none.
 */
export function wordAt(text, caret) {
  const before = text.slice(0, caret);
  const m = WORD_BEFORE.exec(before);
  if (!m) return null;
  const parts = [];
  const re = /"((?:[^"]|"")*)"|([A-Za-z_][A-Za-z0-9_$]*)/g;
  let p;
  let last = 0;
  while ((p = re.exec(m[0])) !== null) {
    parts.push(p[1] !== undefined ? p[1].replace(/""/g, '"') : p[2]);
    last = re.lastIndex;
  }
  if (m[0].endsWith('.') || last < m[0].length) parts.push('');
  return { parts };
}

export class Completer {
  /**
   * `ta`: the editor's textarea; `source(parts, text)`: the candidates
   * (`{label, insert, kind, detail}`) for a dotted path whose last part
   * is being typed.
   */
  constructor(ta, source) {
    this.ta = ta;
    this.source = source;
    this.items = [];
    this.index = 0;
    this.word = null;
    this.list = document.createElement('ul');
    this.list.id = 'complete';
    this.list.className = 'complete';
    this.list.setAttribute('role', 'listbox');
    this.list.hidden = true;
    document.body.appendChild(this.list);
    this.list.addEventListener('mousedown', (e) => {
      const li = e.target.closest('li');
      if (!li) return;
      e.preventDefault();
      this.index = Number(li.dataset.index);
      this.accept();
    });
    ta.addEventListener('blur', () => setTimeout(() => { if (document.activeElement !== ta) this.close(); }, 150));
    ta.addEventListener('scroll', () => this.close());
  }

  get open() { return !this.list.hidden; }

  /** Keys while open; true when the key was used. */
  key(e) {
    if (e.key === ' ' && e.ctrlKey) {
      e.preventDefault();
      this.update(true);
      return true;
    }
    if (!this.open) return false;
    if (e.ctrlKey || e.metaKey || e.altKey) return false;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const n = this.items.length;
      this.index = (this.index + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
      this.paint();
      return true;
    }
    if (e.key === 'Tab' || e.key === 'Enter') {
      e.preventDefault();
      this.accept();
      return true;
    }
    if (e.key === 'Escape') {
      e.preventDefault();
      this.close();
      return true;
    }
    return false;
  }

  /** After typing: the list for the word at the caret (`force`: even for an empty word). */
  update(force) {
    const ta = this.ta;
    if (ta.selectionStart !== ta.selectionEnd) return this.close();
    const caret = ta.selectionStart;
    const w = wordAt(ta.value, caret);
    if (!w || (!force && w.parts[w.parts.length - 1] === '' && w.parts.length === 1)) return this.close();
    // Inside a string or a comment nothing is offered.
    if (insideLiteral(ta.value, caret)) return this.close();
    const typed = w.parts[w.parts.length - 1];
    const items = this.source(w.parts, ta.value)
      .filter((c) => c.label.toLowerCase().startsWith(typed.toLowerCase()) && c.label !== typed)
      .slice(0, MAX_SHOWN);
    if (items.length === 0) return this.close();
    this.word = { start: caret - typed.length, end: caret };
    this.items = items;
    this.index = 0;
    this.paint();
    this.place();
  }

  paint() {
    this.list.replaceChildren();
    this.items.forEach((c, i) => {
      const li = document.createElement('li');
      li.dataset.index = String(i);
      li.dataset.kind = c.kind;
      li.setAttribute('role', 'option');
      li.setAttribute('aria-selected', String(i === this.index));
      const name = document.createElement('span');
      name.className = 'complete-name';
      name.textContent = c.label;
      const kind = document.createElement('span');
      kind.className = 'complete-kind';
      kind.textContent = c.detail || c.kind;
      li.append(name, kind);
      this.list.appendChild(li);
    });
    this.list.hidden = false;
    const sel = this.list.children[this.index];
    if (sel) sel.scrollIntoView({ block: 'nearest' });
  }

  /** Puts the list under the caret (a mirror of the textarea measures it). */
  place() {
    const ta = this.ta;
    const style = getComputedStyle(ta);
    const mirror = document.createElement('div');
    for (const p of ['fontFamily', 'fontSize', 'lineHeight', 'paddingTop', 'paddingLeft', 'paddingRight', 'whiteSpace', 'wordWrap', 'tabSize', 'letterSpacing']) {
      mirror.style[p] = style[p];
    }
    mirror.className = 'complete-mirror';
    mirror.style.width = ta.clientWidth + 'px';
    mirror.textContent = ta.value.slice(0, this.word.start);
    const mark = document.createElement('span');
    mark.textContent = '\u200b';
    mirror.appendChild(mark);
    document.body.appendChild(mirror);
    const top = mark.offsetTop - ta.scrollTop;
    const left = mark.offsetLeft - ta.scrollLeft;
    const lineHeight = parseFloat(style.lineHeight) || 20;
    mirror.remove();
    const r = ta.getBoundingClientRect();
    this.list.style.left = Math.min(r.left + left, window.innerWidth - 320) + 'px';
    this.list.style.top = Math.min(r.top + top + lineHeight, window.innerHeight - 40) + 'px';
  }

  accept() {
    const c = this.items[this.index];
    if (!c || !this.word) return this.close();
    const ta = this.ta;
    const { start, end } = this.word;
    const v = ta.value;
    // A function's `(` is not doubled when the text already has one.
    let insert = c.insert;
    if (insert.endsWith('(') && v[end] === '(') insert = insert.slice(0, -1);
    ta.value = v.slice(0, start) + insert + v.slice(end);
    ta.selectionStart = ta.selectionEnd = start + insert.length;
    this.close();
    ta.dispatchEvent(new Event('input'));
    ta.focus();
  }

  close() {
    this.list.hidden = true;
    this.items = [];
    this.word = null;
  }
}

/** Whether `caret` is inside a string literal or a comment of `sql`. */
function insideLiteral(sql, caret) {
  const re = /--[^\n]*|\/\*[\s\S]*?(?:\*\/|$)|'(?:[^']|'')*(?:'|$)/g;
  let m;
  while ((m = re.exec(sql)) !== null) {
    if (m.index >= caret) return false;
    if (caret < m.index + m[0].length || (caret === m.index + m[0].length && !/['\n]$|\*\/$/.test(m[0]))) return true;
  }
  return false;
}
