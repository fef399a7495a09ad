// Digit grouping in the reader's locale, applied to the text DuckDB printed
// (never through a float, so a BIGINT or a DECIMAL keeps every digit): the
// locale gives the group and decimal separators and the group sizes
// (1,234,567 in en-US, 1.234.567 in de-DE, 12,34,567 in en-IN). What is
// copied is always DuckDB's own text (the grid keeps it in `data-raw`).

let seps = null;

/** The locale's separators and group sizes, read once from Intl. */
export function separators() {
  if (seps) return seps;
  const nf = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const parts = nf.formatToParts(1234567.5);
  const group = (parts.find((p) => p.type === 'group') || { value: '' }).value;
  const decimal = (parts.find((p) => p.type === 'decimal') || { value: '.' }).value;
  const ints = parts.filter((p) => p.type === 'integer').map((p) => p.value.length);
  const primary = ints.length > 1 ? ints[ints.length - 1] : 3;
  const secondary = ints.length > 2 ? ints[ints.length - 2] : primary;
  // Some locales (es, pl) leave four-digit numbers ungrouped.
  const four = new Intl.NumberFormat(undefined).formatToParts(1234).some((p) => p.type === 'group');
  seps = { group, decimal, primary, secondary, minDigits: four ? 4 : 5, locale: nf.resolvedOptions().locale };
  return seps;
}

const PLAIN = /^([+-]?)(\d+)(?:\.(\d+))?([eE][+-]?\d+)?$/;

/** `text` (a number as DuckDB printed it) with the locale's grouping; other text as it is. */
export function groupDigits(text) {
  if (typeof text !== 'string') return text;
  const m = PLAIN.exec(text);
  if (!m) return text;
  const s = separators();
  const [, sign, int, frac, exp] = m;
  let grouped = int;
  if (s.group && int.length >= s.minDigits) {
    const out = [];
    let end = int.length;
    let size = s.primary;
    while (end > size) {
      out.unshift(int.slice(end - size, end));
      end -= size;
      size = s.secondary;
    }
    out.unshift(int.slice(0, end));
    grouped = out.join(s.group);
  }
  return sign + grouped + (frac !== undefined ? s.decimal + frac : '') + (exp || '');
}

/** A count (a JS number) grouped as the locale groups it. */
export function fmtCount(n) {
  return groupDigits(String(Math.round(Number(n))));
}
