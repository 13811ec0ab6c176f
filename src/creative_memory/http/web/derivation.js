// The derivation section: the version in force, a preview of a switch, the switch.

import { state } from "./state.js";
import { $, el, keepingFocus } from "./dom.js";
import { localTime, plural, human, fmt, whereWords } from "./words.js";
import { api, q } from "./api.js";
import { act } from "./actions.js";

// -- derivation: the version in force, a preview of a switch, the switch and switching back -
// (GET/POST /api/v1/derivation, GET /api/v1/derivation/preview)
export async function loadDerivation() {
  const d = await api("GET", "/api/v1/derivation");
  state.derivation = d;
  keepingFocus(() => renderDerivation(d));
}

function renderDerivation(d) {
  $("derivation-state").textContent = `Version ${d.in_force} is in force ` +
    (d.chosen ? `(you chose it; the default is version ${d.default}).`
      : "(the default: you have not chosen one).");
  const select = $("derivation-version");
  const keep = select.value;
  select.replaceChildren(...d.known.map((v) => el("option", `Version ${v}` +
    (v === d.in_force ? " (in force)" : "") + (v === d.default ? " (default)" : ""), { value: v })));
  const others = d.known.filter((v) => v !== d.in_force);
  select.value = d.known.includes(keep) && keep ? keep
    : others.includes(d.default) ? d.default : others[others.length - 1] || d.in_force;
  const last = d.history[d.history.length - 1];
  const back = $("derivation-back");
  back.hidden = !(last && last.version === d.in_force && last.previous !== d.in_force);
  if (!back.hidden) back.textContent = `Switch back to version ${last.previous}`;
  const list = $("derivation-history");
  list.replaceChildren(...d.history.map((c) => {
    const li = el("li");
    li.append(el("time", localTime(c.at), { datetime: c.at }),
      `: from version ${c.previous} to version ${c.version}`);
    return li;
  }));
  if (!d.history.length) list.append(el("li", "No switches yet.", { class: "none" }));
  // a preview made under another version in force is out of date
  if (state.change && state.change.from_version !== d.in_force) {
    state.change = null;
    $("derivation-result").hidden = true;
  }
}

const FIELDS = { signal_strength: "strength", confidence: "confidence", polarity: "polarity",
  polarity_status: "status", accept_count: "acceptances", reject_count: "rejections" };

function fieldValue(f, r) {
  if (f === "polarity") return r.polarity === "negative" ? "avoid" : "prefer";
  if (f === "signal_strength") return fmt(r.signal_strength);
  return String(r[f]);
}

function recordSentence(c) {
  const name = `${human(c.pattern)} (${c.preference_type}, ${whereWords(c.scope)}` +
    `${c.shadow ? ", shadow record" : ""})`;
  const side = (r) => `${fieldValue("polarity", r)}, strength ${fmt(r.signal_strength)}, ` +
    `${r.confidence} confidence`;
  if (c.change === "added") return ["Added:", ` ${name} — ${side(c.after)}.`];
  if (c.change === "removed") return ["Removed:", ` ${name} — was ${side(c.before)}.`];
  const what = c.fields.map((f) => `${FIELDS[f] || f} ${fieldValue(f, c.before)} → ` +
    `${fieldValue(f, c.after)}`).join("; ");
  return ["Changed:", ` ${name} — ${what}.`];
}

function injectionItem(x) {
  const li = el("li", null, { class: `change ${x.change}` });
  const verb = x.polarity === "negative" ? "avoid" : "prefer";
  li.append(el("span", x.change === "in" ? "In:" : "Out:", { class: "change-kind" }),
    ` ${human(x.pattern)} (${x.preference_type}, ${verb}) — ` +
    (x.change === "in" ? "would be put into generations." : "would no longer be put into generations."));
  if (x.reasons.length) li.append(el("span", `Why: ${x.reasons.join("; ")}`, { class: "reasons" }));
  return li;
}

// Each block's lines; a line missing from the other block is marked (− removed, + added).
function fillBlock(pre, text, other, mark) {
  const there = new Set(other.split("\n"));
  pre.replaceChildren();
  if (!text) {
    pre.textContent = "(empty: nothing would be put into the prompt)";
    return;
  }
  for (const line of text.split("\n")) {
    const differs = !there.has(line);
    pre.append(el("span", `${differs ? (mark === "del" ? "− " : "+ ") : "  "}${line}`,
      { class: differs ? `line ${mark}` : "line" }));
  }
}

function renderChange(p) {
  const c = p.change;
  const where = p.project_id ? `project ${p.project_id}` : "global memory";
  $("h-derivation-result").textContent = p.from_version === p.to_version
    ? `Version ${p.to_version} is already in force`
    : `From version ${p.from_version} to version ${p.to_version} (${where})`;
  const ins = c.injection.filter((x) => x.change === "in").length;
  $("derivation-summary").textContent = `${plural(c.records.length, "record changes",
    "records change")}, ${c.unchanged} stay the same; ${ins} would enter and ` +
    `${c.injection.length - ins} would leave what generations get; the block ` +
    `${c.block_changed ? "changes" : "stays the same"}.`;
  $("derivation-records").replaceChildren(...c.records.map((r) => {
    const [kind, rest] = recordSentence(r);
    const li = el("li", null, { class: `change ${r.change}` });
    li.append(el("span", kind, { class: "change-kind" }), rest);
    return li;
  }));
  if (!c.records.length) $("derivation-records").append(el("li", "No record changes."));
  $("derivation-injection").replaceChildren(...c.injection.map(injectionItem));
  if (!c.injection.length) {
    $("derivation-injection").append(el("li", "The same records are put into generations."));
  }
  $("h-block-before").textContent = `Now (version ${p.from_version})`;
  $("h-block-after").textContent = `After the switch (version ${p.to_version})`;
  fillBlock($("block-before"), c.block_before, c.block_after, "del");
  fillBlock($("block-after"), c.block_after, c.block_before, "add");
  $("derivation-block-note").textContent = c.block_changed
    ? "The block changes: lines only in the current block are marked −, lines only in the new one +."
    : "The block is the same under both versions.";
  const sw = $("derivation-switch");
  sw.hidden = p.from_version === p.to_version;
  sw.textContent = `Switch to version ${p.to_version}`;
  $("derivation-result").hidden = false;
}

export function previewSwitch() {
  const version = $("derivation-version").value;
  const project = $("preview-project").value;
  return act(async () => {
    const p = await api("GET", `/api/v1/derivation/preview${q({ version, project_id: project })}`);
    state.change = p;
    renderChange(p);
  }, () => (state.change ? `Preview of version ${state.change.to_version} ready.` : ""),
  () => $("h-derivation-result"), true);
}

export function askSwitch(to, opener) {
  const from = state.derivation ? state.derivation.in_force : "?";
  state.switchTo = to;
  state.switchOpener = opener;
  $("derivation-dialog-title").textContent = `Switch to version ${to}?`;
  $("derivation-dialog-text").textContent = `From now on every generation gets memory derived ` +
    `under version ${to} instead of version ${from}. No event is changed or deleted, and you ` +
    "can switch back at any time.";
  $("derivation-confirm").textContent = `Switch to version ${to}`;
  $("derivation-dialog").showModal();
  $("derivation-cancel").focus();
}

export function doSwitch() {
  const version = state.switchTo;
  state.switchTo = null;
  $("derivation-dialog").close();
  return act(() => api("POST", "/api/v1/derivation", { version }),
    `Switched to derivation version ${version}.`,
    () => (!$("derivation-back").hidden ? $("derivation-back") : $("derivation-version")));
}
