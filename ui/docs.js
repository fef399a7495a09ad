// Renders the OpenAPI document embedded in /docs: operations by tag, their
// parameters, bodies and answers with schemas (references resolved) and
// examples, and every schema at the end. Plain DOM, no HTML from the spec.

const spec = JSON.parse(document.getElementById('openapi').textContent);
const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete'];

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

/** One line of text with its `code` spans. */
function inline(tag, text) {
  const p = el(tag, tag === 'span' ? { class: 'summary' } : {});
  (text || '').replace(/\n/g, ' ').split(/(`[^`]*`)/).forEach((part) => {
    if (part.startsWith('`') && part.endsWith('`') && part.length > 1) p.append(el('code', {}, part.slice(1, -1)));
    else p.append(part);
  });
  return p;
}

/** Markdown enough for the spec's descriptions: paragraphs and `code`. */
function prose(text) {
  const box = el('div', { class: 'prose' });
  for (const para of (text || '').split(/\n\s*\n/)) {
    if (para.trim()) box.append(inline('p', para));
  }
  return box;
}

function refName(ref) {
  return ref.split('/').pop();
}

function resolve(schema) {
  let s = schema;
  const seen = new Set();
  while (s && s.$ref && !seen.has(s.$ref)) {
    seen.add(s.$ref);
    s = spec.components.schemas[refName(s.$ref)];
  }
  return s || {};
}

function typeLabel(schema) {
  if (!schema) return 'any';
  if (schema.$ref) return el('a', { href: '#schema-' + refName(schema.$ref) }, refName(schema.$ref));
  if (schema.oneOf || schema.anyOf) {
    const parts = (schema.oneOf || schema.anyOf).map(typeLabel);
    const span = el('span');
    parts.forEach((p, i) => { if (i) span.append(' | '); span.append(p); });
    return span;
  }
  let t = schema.type;
  if (Array.isArray(t)) t = t.join(' | ');
  if (t === 'array' || (Array.isArray(schema.type) && schema.type.includes('array'))) {
    return el('span', {}, 'array of ', typeLabel(schema.items));
  }
  return [t || 'object', schema.format ? ` (${schema.format})` : '', schema.enum ? ` one of ${schema.enum.join(', ')}` : ''].join('');
}

function constraints(s) {
  const c = [];
  if (s.minimum !== undefined) c.push(`≥ ${s.minimum}`);
  if (s.maximum !== undefined) c.push(`≤ ${s.maximum}`);
  if (s.default !== undefined) c.push(`default ${JSON.stringify(s.default)}`);
  return c.join(', ');
}

/** A table of an object schema's properties. */
function schemaView(schema, depth = 0) {
  const s = resolve(schema);
  const box = el('div', { class: 'schema' });
  if (schema.$ref) box.append(el('div', { class: 'muted' }, 'schema ', typeLabel(schema)));
  if (s.properties && depth < 1) {
    const req = new Set(s.required || []);
    const t = el('table', { class: 'props' }, el('tr', {}, el('th', {}, 'field'), el('th', {}, 'type'), el('th', {}, 'description')));
    for (const [name, p] of Object.entries(s.properties)) {
      t.append(el('tr', {},
        el('td', {}, el('code', {}, name), req.has(name) ? el('span', { class: 'req' }, ' required') : null),
        el('td', {}, typeLabel(p), el('div', { class: 'muted' }, constraints(p))),
        el('td', {}, prose(p.description))));
    }
    box.append(t);
  } else if (!schema.$ref) {
    box.append(el('div', {}, typeLabel(s)));
  }
  return box;
}

/** An example value for a schema: its own `example`, else one made from its types. */
function example(schema, depth = 0) {
  if (!schema || depth > 4) return null;
  if (schema.example !== undefined) return schema.example;
  if (schema.examples && schema.examples.length) return schema.examples[0];
  if (schema.$ref) return example(resolve(schema), depth + 1);
  if (schema.oneOf || schema.anyOf) return example((schema.oneOf || schema.anyOf)[0], depth + 1);
  if (schema.enum) return schema.enum[0];
  let t = schema.type;
  if (Array.isArray(t)) t = t.find((x) => x !== 'null') || 'null';
  switch (t) {
    case 'string': return schema.format === 'binary' ? '<bytes>' : 'string';
    case 'integer': return schema.minimum !== undefined ? schema.minimum : 0;
    case 'number': return 0.5;
    case 'boolean': return true;
    case 'null': return null;
    case 'array': return [example(schema.items, depth + 1)];
    default: {
      const o = {};
      for (const [k, p] of Object.entries(schema.properties || {})) o[k] = example(p, depth + 1);
      return o;
    }
  }
}

function codeBlock(text) {
  return el('pre', { class: 'code' }, text);
}

function content(media) {
  const box = el('div');
  for (const [type, m] of Object.entries(media || {})) {
    const item = el('div', { class: 'media' }, el('div', {}, el('code', { class: 'ctype' }, type)));
    if (m.schema) {
      item.append(schemaView(m.schema));
      const ex = m.example !== undefined ? m.example : example(m.schema);
      if (ex !== null && typeof ex === 'object') item.append(el('details', {}, el('summary', {}, 'example'), codeBlock(JSON.stringify(ex, null, 2))));
    }
    box.append(item);
  }
  return box;
}

function curl(method, path, op) {
  const url = `${location.origin}${path.replace(/\{([^}]+)\}/g, (_, n) => `<${n}>`)}`;
  const parts = ['curl -s'];
  if (method === 'head') parts.push('-I');
  else if (method !== 'get') parts.push(`-X ${method.toUpperCase()}`);
  parts.push(`'${url}'`);
  if (op.security && op.security.some((s) => s.bearer)) parts.push(`-H "authorization: Bearer $TOKEN"`);
  const body = op.requestBody && op.requestBody.content && op.requestBody.content['application/json'];
  if (body) parts.push(`-H 'content-type: application/json' -d '${JSON.stringify(example(body.schema))}'`);
  return parts.join(' \\\n  ');
}

function operation(method, path, op) {
  const id = `op-${op.operationId || method + path}`;
  const sec = el('section', { class: 'op', id });
  sec.append(el('h3', {}, el('span', { class: `method m-${method}` }, method.toUpperCase()), ' ', el('code', {}, path), ' ', inline('span', op.summary)));
  sec.append(prose(op.description));
  if (op.security) {
    const needs = op.security.some((s) => Object.keys(s).length === 0) ? 'token optional (anonymous where allowed)' : 'bearer token';
    sec.append(el('p', { class: 'muted' }, `Authorization: ${needs}`));
  }
  if (op.parameters && op.parameters.length) {
    const t = el('table', { class: 'props' }, el('tr', {}, el('th', {}, 'parameter'), el('th', {}, 'in'), el('th', {}, 'type'), el('th', {}, 'description')));
    for (const p of op.parameters) {
      t.append(el('tr', {}, el('td', {}, el('code', {}, p.name), p.required ? el('span', { class: 'req' }, ' required') : null),
        el('td', {}, p.in), el('td', {}, typeLabel(p.schema), el('div', { class: 'muted' }, constraints(p.schema || {}))), el('td', {}, prose(p.description))));
    }
    sec.append(el('h4', {}, 'Parameters'), t);
  }
  if (op.requestBody) {
    sec.append(el('h4', {}, 'Request body'), prose(op.requestBody.description), content(op.requestBody.content));
  }
  sec.append(el('h4', {}, 'Example'), codeBlock(curl(method, path, op)));
  const rs = el('div', { class: 'responses' });
  for (const [status, r] of Object.entries(op.responses || {})) {
    const d = el('details', { class: `resp s${status[0]}` }, el('summary', {}, el('strong', {}, status), ' ', r.description || ''));
    if (r.headers) {
      const t = el('table', { class: 'props' });
      for (const [h, v] of Object.entries(r.headers)) t.append(el('tr', {}, el('td', {}, el('code', {}, h)), el('td', {}, v.description || '')));
      d.append(t);
    }
    d.append(content(r.content));
    rs.append(d);
  }
  sec.append(el('h4', {}, 'Answers'), rs);
  return sec;
}

function render() {
  const doc = document.getElementById('doc');
  const nav = document.getElementById('nav');
  doc.querySelector('h1').textContent = `${spec.info.title} API ${spec.info.version || ''}`;
  doc.append(prose(spec.info.description));
  const byTag = new Map((spec.tags || []).map((t) => [t.name, { tag: t, ops: [] }]));
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const m of METHODS) {
      const op = item[m];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || 'other';
      if (!byTag.has(tag)) byTag.set(tag, { tag: { name: tag }, ops: [] });
      byTag.get(tag).ops.push([m, path, op]);
    }
  }
  for (const { tag, ops } of byTag.values()) {
    if (!ops.length) continue;
    doc.append(el('h2', { id: `tag-${tag.name}` }, tag.name), prose(tag.description));
    nav.append(el('div', { class: 'nav-tag' }, el('a', { href: `#tag-${tag.name}` }, tag.name)));
    for (const [m, path, op] of ops) {
      const sec = operation(m, path, op);
      doc.append(sec);
      nav.append(el('div', { class: 'nav-op' }, el('a', { href: '#' + sec.id }, el('span', { class: `method m-${m}` }, m.toUpperCase()), ' ', path)));
    }
  }
  doc.append(el('h2', { id: 'schemas' }, 'Schemas'));
  nav.append(el('div', { class: 'nav-tag' }, el('a', { href: '#schemas' }, 'schemas')));
  for (const [name, s] of Object.entries(spec.components.schemas || {})) {
    const sec = el('section', { class: 'op', id: 'schema-' + name }, el('h3', {}, el('code', {}, name)), prose(s.description));
    sec.append(schemaView(s));
    const ex = example(s);
    if (ex !== null && typeof ex === 'object') sec.append(el('details', {}, el('summary', {}, 'example'), codeBlock(JSON.stringify(ex, null, 2))));
    doc.append(sec);
  }
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

render();
