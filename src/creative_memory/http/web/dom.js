// The page's elements: finding, making (text only, never HTML), the status line, the project
// selects, and keeping focus across redraws.

export const $ = (id) => document.getElementById(id);

export function show(msg) {
  $("error").textContent = "";
  $("status").textContent = msg;
}

// The problem type of a damaged stored log: failing with it also shows the Repair card.
export const LOG_DAMAGED = "urn:creative-memory:problem:log-damaged";

export function fail(err) {
  $("status").textContent = ""; // an earlier success must not read as this one's outcome
  $("error").textContent = err && err.message ? err.message : String(err);
  if (err && err.type === LOG_DAMAGED) document.dispatchEvent(new CustomEvent("log-damaged"));
}

export function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (attrs) for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// ``stay``: a chosen project that left the list stays chosen (listed as it was), so the
// select never changes under the person (Reset must erase what they chose, nothing else).
export function fillSelect(select, fixed, projects, prefix, stay) {
  const keep = select.value;
  select.replaceChildren();
  for (const [value, label] of fixed) select.append(el("option", label, { value }));
  for (const p of projects) select.append(el("option", `Project ${p}`, { value: prefix + p }));
  const values = Array.from(select.options).map((o) => o.value);
  if (stay && keep && !values.includes(keep) && keep.startsWith(prefix)) {
    select.append(el("option", `Project ${keep.slice(prefix.length)}`, { value: keep }));
    values.push(keep);
  }
  select.value = values.includes(keep) ? keep : fixed[0][0];
}

// -- focus ---------------------------------------------------------------------------------
// Redrawing replaces elements; the element that had focus is found again by its id or its
// data-focus key, so neither an action nor a poll drops focus to the page body.
export function focusKey(e) {
  if (!e || e === document.body) return null;
  return e.id ? { id: e.id } : e.dataset && e.dataset.focus ? { key: e.dataset.focus } : null;
}

export function findKey(k) {
  if (!k) return null;
  return k.id ? $(k.id) : document.querySelector(`[data-focus="${CSS.escape(k.key)}"]`);
}

export function keepingFocus(fn) {
  const had = focusKey(document.activeElement);
  fn();
  const now = document.activeElement;
  if (had && (!now || now === document.body || !now.isConnected)) focusOn(findKey(had));
}

export function focusOn(e, fallback) {
  const target = e && e.isConnected && !e.disabled && !e.closest("[hidden]") ? e : fallback;
  if (target) target.focus();
}
