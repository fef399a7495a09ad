// A quick chart of a result: one column on the x axis (as categories, in
// the result's order) and one or more numeric columns as series, bars or
// lines, drawn on a canvas by this file. The caller picks the axes
// (`spec`); `hit` answers which row a point of the canvas is over, for the
// tooltip.

import { isNumericType } from './grid.js';

const COLORS = ['#3b6fd8', '#e0892b', '#3a9d5d', '#c2425b', '#7a52c7', '#2a9ab0', '#8c6d31', '#d05fb0'];
const MAX_BARS = 60;
const MAX_POINTS = 5000;

/**
 * Which columns a chart can use: the first non-numeric column is the
 * category (x), every numeric column a series; null when there is none.
 */
export function chartable(columns) {
  const series = [];
  let category = -1;
  columns.forEach((c, i) => {
    if (isNumericType(c.type)) series.push(i);
    else if (category < 0) category = i;
  });
  if (series.length === 0) return null;
  if (category < 0 && series.length >= 2) category = series.shift();
  if (category < 0) return null;
  return { category, series };
}

function num(v) {
  if (v === null || v === undefined) return NaN;
  return typeof v === 'number' ? v : Number(v);
}

function label(v) {
  if (v === null || v === undefined) return 'NULL';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

function niceTicks(min, max, count) {
  if (min === max) { min -= 1; max += 1; }
  const span = max - min;
  const step0 = span / count;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step / 2; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toPrecision(3) + 'G';
  if (a >= 1e6) return (v / 1e6).toPrecision(3) + 'M';
  if (a >= 1e4) return (v / 1e3).toPrecision(3) + 'k';
  return String(Number(v.toPrecision(6)));
}

/** The columns that can be a series (numeric ones). */
export function numericColumns(columns) {
  return columns.map((c, i) => (isNumericType(c.type) ? i : -1)).filter((i) => i >= 0);
}

/**
 * Draws `rows` on `canvas` with `spec` ({category, series}; by default
 * chartable's); answers `{note, layout}`: a note on what was left out and
 * where the bands are (for `hit`).
 */
export function draw(canvas, columns, rows, kind, spec) {
  spec = spec || chartable(columns);
  if (spec && spec.series.length === 0) spec = null;
  const ctx = canvas.getContext('2d');
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 900;
  const cssH = canvas.clientHeight || 380;
  canvas.width = cssW * dpr;
  canvas.height = cssH * dpr;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  ctx.font = '12px system-ui, sans-serif';
  if (!spec) {
    ctx.fillStyle = '#666';
    ctx.fillText('A chart needs an x column and at least one numeric y column.', 20, 30);
    return { note: 'not chartable', layout: null };
  }
  const limit = kind === 'bar' ? MAX_BARS : MAX_POINTS;
  const data = rows.slice(0, limit);
  let note = rows.length > limit ? `first ${limit} of ${rows.length} rows` : `${rows.length} rows`;
  const values = [];
  for (const r of data) for (const s of spec.series) { const v = num(r[s]); if (Number.isFinite(v)) values.push(v); }
  let min = Math.min(0, ...values);
  let max = Math.max(0, ...values);
  if (values.length === 0) { min = 0; max = 1; }
  const ticks = niceTicks(min, max, 6);
  min = ticks[0];
  max = ticks[ticks.length - 1];
  const pad = { left: 64, right: 16, top: 28, bottom: 72 };
  const w = cssW - pad.left - pad.right;
  const h = cssH - pad.top - pad.bottom;
  const y = (v) => pad.top + h - ((v - min) / (max - min)) * h;

  ctx.strokeStyle = '#ddd';
  ctx.fillStyle = '#555';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const t of ticks) {
    ctx.beginPath();
    ctx.moveTo(pad.left, y(t));
    ctx.lineTo(pad.left + w, y(t));
    ctx.stroke();
    ctx.fillText(fmt(t), pad.left - 6, y(t));
  }

  const n = Math.max(1, data.length);
  const band = w / n;
  const labelEvery = Math.max(1, Math.ceil(n / Math.floor(w / 60)));
  ctx.save();
  ctx.textAlign = 'right';
  ctx.fillStyle = '#333';
  data.forEach((r, i) => {
    if (i % labelEvery) return;
    const x = pad.left + band * (i + 0.5);
    ctx.save();
    ctx.translate(x, pad.top + h + 8);
    ctx.rotate(-Math.PI / 5);
    const l = label(r[spec.category]);
    ctx.fillText(l.length > 18 ? l.slice(0, 17) + '…' : l, 0, 0);
    ctx.restore();
  });
  ctx.restore();

  const k = spec.series.length;
  spec.series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length];
    ctx.fillStyle = color;
    ctx.strokeStyle = color;
    if (kind === 'bar') {
      const bw = Math.max(1, (band * 0.8) / k);
      data.forEach((r, i) => {
        const v = num(r[s]);
        if (!Number.isFinite(v)) return;
        const x = pad.left + band * i + band * 0.1 + bw * si;
        const y0 = y(Math.max(0, min));
        ctx.fillRect(x, Math.min(y(v), y0), bw, Math.abs(y0 - y(v)));
      });
    } else {
      ctx.lineWidth = 2;
      ctx.beginPath();
      let started = false;
      data.forEach((r, i) => {
        const v = num(r[s]);
        if (!Number.isFinite(v)) { started = false; return; }
        const x = pad.left + band * (i + 0.5);
        if (started) ctx.lineTo(x, y(v)); else { ctx.moveTo(x, y(v)); started = true; }
      });
      ctx.stroke();
    }
  });

  // Legend.
  ctx.textAlign = 'left';
  ctx.textBaseline = 'middle';
  let lx = pad.left;
  spec.series.forEach((s, si) => {
    ctx.fillStyle = COLORS[si % COLORS.length];
    ctx.fillRect(lx, 8, 12, 12);
    ctx.fillStyle = '#333';
    const name = columns[s].name;
    ctx.fillText(name, lx + 16, 14);
    lx += 28 + ctx.measureText(name).width;
  });
  note += ` · x: ${columns[spec.category].name}`;
  return { note, layout: { left: pad.left, top: pad.top, width: w, height: h, band, count: data.length, spec } };
}

/** The row index under the canvas point (`x`, `y` in CSS pixels), or -1. */
export function hit(layout, x, y) {
  if (!layout || layout.count === 0) return -1;
  if (y < layout.top || y > layout.top + layout.height) return -1;
  const i = Math.floor((x - layout.left) / layout.band);
  return i >= 0 && i < layout.count ? i : -1;
}

export { COLORS };
