// The result table: a header with DuckDB's type names and a body that
// renders only the rows in view (virtual scrolling), so 100,000 rows cost
// what 40 do. NULL is shown as a styled marker (class `cell-null`), never
// as text that could be mistaken for the string 'NULL'. Numbers show their
// digits grouped in the reader's locale (numbers.js); a cell keeps DuckDB's
// own text in `data-raw`, and a copy of selected cells copies that text.

import { groupDigits } from './numbers.js';

const ROW_HEIGHT = 24;
const OVERSCAN = 8;
const NUMERIC = /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT|FLOAT|DOUBLE|DECIMAL|BIGNUM)/;

export function isNumericType(t) {
  return NUMERIC.test(t || '');
}

/** The text a cell shows for a JSON value of a column of DuckDB type `type`. */
export function cellText(v, type) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') {
    // JSON carries timestamps in ISO 8601; DuckDB prints them with a space.
    if (/^TIMESTAMP/.test(type || '') && /^\d{4,}-\d\d-\d\dT/.test(v)) return v.replace('T', ' ');
    return v;
  }
  if (typeof v === 'object') return JSON.stringify(v);
  if (typeof v === 'number') {
    // As DuckDB prints them: a DECIMAL with its scale, a whole DOUBLE with `.0`.
    const dec = /^DECIMAL\(\d+,(\d+)\)$/.exec(type || '');
    if (dec) return v.toFixed(Number(dec[1]));
    if (/^(DOUBLE|FLOAT)$/.test(type || '') && Number.isInteger(v) && Math.abs(v) < 1e15) return v.toFixed(1);
  }
  return String(v);
}

/** What a cell shows: `cellText`, with digits grouped in numeric columns. */
export function displayText(v, type) {
  const t = cellText(v, type);
  return t !== null && isNumericType(type) ? groupDigits(t) : t;
}

export class Grid {
  /** `onCell(row, column)`: a cell was clicked (indexes from 0). */
  constructor(container, onCell) {
    this.container = container;
    this.onCell = onCell;
    this.columns = [];
    this.rows = [];
    this.widths = [];
    this.container.replaceChildren();
    this.viewport = document.createElement('div');
    this.viewport.className = 'grid-viewport';
    this.viewport.tabIndex = 0;
    this.head = document.createElement('div');
    this.head.className = 'grid-head';
    this.spacer = document.createElement('div');
    this.spacer.className = 'grid-spacer';
    this.body = document.createElement('div');
    this.body.className = 'grid-body';
    this.spacer.appendChild(this.body);
    this.viewport.append(this.head, this.spacer);
    this.container.appendChild(this.viewport);
    this.rendered = [-1, -1];
    this.viewport.addEventListener('scroll', () => this.schedule(), { passive: true });
    this.viewport.addEventListener('click', (e) => {
      const cell = e.target.closest('.cell[data-col]');
      if (!cell || !this.onCell) return;
      // Selecting text in a cell is not a click on it.
      if (String(window.getSelection()).length > 0) return;
      this.onCell(Number(cell.parentNode.dataset.row), Number(cell.dataset.col));
    });
    // Copying selected cells copies DuckDB's text (no grouping), a row a
    // line and a cell a tab, as a spreadsheet takes it.
    this.viewport.addEventListener('copy', (e) => {
      const text = this.selectedText();
      if (text === null || !e.clipboardData) return;
      e.clipboardData.setData('text/plain', text);
      e.preventDefault();
    });
    new ResizeObserver(() => this.schedule(true)).observe(this.viewport);
  }

  /** The selected cells' raw text (tab and newline separated), or null. */
  selectedText() {
    const sel = window.getSelection();
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed) return null;
    const range = sel.getRangeAt(0);
    if (!this.viewport.contains(range.commonAncestorContainer)) return null;
    const lines = [];
    for (const row of this.body.querySelectorAll('.grid-row')) {
      if (!range.intersectsNode(row)) continue;
      const cells = [...row.querySelectorAll('.cell[data-col]')].filter((c) => range.intersectsNode(c));
      if (cells.length === 0) continue;
      const r = Number(row.dataset.row);
      lines.push(cells.map((c) => {
        const t = cellText(this.rows[r][Number(c.dataset.col)], this.columns[Number(c.dataset.col)].type);
        return t === null ? '' : t;
      }).join('\t'));
    }
    if (lines.length === 0) return null;
    // Within one cell: a text's selected part as it is; a number whole,
    // as DuckDB printed it.
    const at = (n) => (n.nodeType === 1 ? n : n.parentNode).closest('.cell');
    const cell = at(range.startContainer);
    if (cell && cell === at(range.endContainer) && cell.dataset.raw === undefined) return String(sel);
    return lines.join('\n');
  }

  /** New result: `columns` as the gateway names them ({name, type}). */
  setColumns(columns) {
    this.columns = columns;
    this.rows = [];
    this.widths = columns.map((c) => Math.min(360, Math.max(60, 8 * Math.max(c.name.length, (c.type || '').length) + 24)));
    this.sized = false;
    this.head.replaceChildren();
    const idx = document.createElement('div');
    idx.className = 'cell cell-index';
    idx.textContent = '#';
    this.head.appendChild(idx);
    columns.forEach((c, i) => {
      const h = document.createElement('div');
      h.className = 'cell';
      h.style.width = this.widths[i] + 'px';
      if (isNumericType(c.type)) h.classList.add('num');
      const n = document.createElement('div');
      n.className = 'col-name';
      n.textContent = c.name;
      const t = document.createElement('div');
      t.className = 'col-type';
      t.textContent = c.type;
      h.title = `${c.name} ${c.type}`;
      h.append(n, t);
      this.head.appendChild(h);
    });
    this.viewport.scrollTop = 0;
    this.schedule(true);
  }

  /** More rows (arrays in column order). */
  append(rows) {
    for (const r of rows) this.rows.push(r);
    if (!this.sized && this.rows.length > 0) this.fitWidths();
    this.schedule(true);
  }

  /** Column widths from the first rows' text, so a wide column is readable. */
  fitWidths() {
    this.sized = true;
    const sample = this.rows.slice(0, 200);
    this.widths = this.columns.map((c, i) => {
      let w = this.widths[i];
      for (const r of sample) {
        const t = displayText(r[i], c.type);
        w = Math.max(w, Math.min(360, 8 * (t === null ? 4 : t.length) + 20));
      }
      return w;
    });
    [...this.head.children].slice(1).forEach((h, i) => { h.style.width = this.widths[i] + 'px'; });
  }

  schedule(force) {
    if (force) this.rendered = [-1, -1];
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = null;
      this.render();
    });
  }

  // Render now rather than on the next frame, so whoever is told the
  // result is loaded finds its rows on the page.
  flush() {
    if (this.pending) {
      cancelAnimationFrame(this.pending);
      this.pending = null;
    }
    this.render();
  }

  render() {
    const total = this.rows.length;
    this.spacer.style.height = total * ROW_HEIGHT + 'px';
    const top = this.viewport.scrollTop;
    const height = this.viewport.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(total, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    if (first === this.rendered[0] && last === this.rendered[1]) return;
    this.rendered = [first, last];
    const frag = document.createDocumentFragment();
    const types = this.columns.map((c) => c.type);
    const numeric = types.map(isNumericType);
    for (let r = first; r < last; r++) {
      const row = this.rows[r];
      const el = document.createElement('div');
      el.className = 'grid-row';
      el.dataset.row = String(r);
      el.style.top = r * ROW_HEIGHT + 'px';
      const idx = document.createElement('div');
      idx.className = 'cell cell-index';
      idx.textContent = String(r + 1);
      el.appendChild(idx);
      for (let c = 0; c < this.columns.length; c++) {
        const cell = document.createElement('div');
        cell.className = numeric[c] ? 'cell num' : 'cell';
        cell.style.width = this.widths[c] + 'px';
        cell.dataset.col = String(c);
        const raw = cellText(row[c], types[c]);
        const t = raw !== null && numeric[c] ? groupDigits(raw) : raw;
        if (t === null) {
          cell.classList.add('cell-null');
          cell.dataset.null = 'true';
          cell.textContent = 'NULL';
        } else {
          cell.textContent = t;
          if (t !== raw) cell.dataset.raw = raw;
          if (t.length * 8 + 16 > this.widths[c]) {
            cell.classList.add('cell-long');
            cell.title = 'Click to open the whole value';
          }
        }
        el.appendChild(cell);
      }
      frag.appendChild(el);
    }
    this.body.replaceChildren(frag);
  }
}
