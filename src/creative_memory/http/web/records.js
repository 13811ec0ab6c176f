// The records and the settings above them, and each card's evidence timeline.

import { state } from "./state.js";
import { $, el, fillSelect, keepingFocus } from "./dom.js";
import {
  projectOf, localTime, plural, human, fmt, ago, strengthWord, evidenceWords,
} from "./words.js";
import { api, patternPath } from "./api.js";
import { setProject, forgetRow } from "./actions.js";
import { explain } from "./why.js";

// -- rendering -----------------------------------------------------------------------------
export function renderSettings(m) {
  const s = m.settings;
  $("whoami").textContent = m.as_of
    ? `Signed in as ${m.user_id} · looking at the past: ${m.as_of.events
      ? `right after event #${m.as_of.at_seq}` : "before the first event"} · ` +
      `derivation v${m.derivation_version} then`
    : `Signed in as ${m.user_id} · ${m.event_count} raw events · derivation v${m.derivation_version}`;
  $("memory-enabled").checked = s.memory_enabled;
  $("diagnostics-feed").checked = s.diagnostics_feed;
  // disabled in the page as served: a switch says nothing until the settings are known
  for (const id of ["memory-enabled", "diagnostics-feed", "pause"]) $(id).disabled = false;
  let pause = "Learning is on.";
  if (!s.memory_enabled) pause = "Memory is off: nothing is learned or injected.";
  else if (s.paused_now && s.paused_until) {
    pause = `Learning paused until ${localTime(s.paused_until)}.`;
  } else if (s.paused_now) pause = "Learning paused until you resume.";
  $("pause-state").textContent = pause;
  $("resume").disabled = !s.paused_now;  // an expired timed pause is not in force
}

export function renderProjects(m) {
  const list = $("project-list");
  list.replaceChildren();
  const disabled = new Set(m.settings.disabled_projects);
  // in the past, projects seen since still appear (the selects keep their choice)
  for (const p of m.projects) state.projects.add(p);
  const projects = m.as_of ? [...state.projects].sort() : m.projects;
  for (const p of projects) {
    const li = el("li");
    const id = `ignore-${p}`;
    const box = el("input", null, { type: "checkbox", id });
    box.checked = disabled.has(p);
    box.addEventListener("change", () => setProject(p, box.checked));
    li.append(box, el("label", `${p}: ignore global memory`, { for: id }));
    list.append(li);
  }
  if (!projects.length) list.append(el("li", "No projects yet.", { class: "hint" }));
  fillSelect($("scope-filter"), [["all", "Everything"], ["global", "Global memory"]],
    projects, "project:");
  fillSelect($("preview-project"), [["", "(none: global memory)"]], projects, "");
  fillSelect($("reset-scope"), [["all", "Everything (and switch memory back on)"],
    ["global", "Global memory only"]], projects, "project:", true);
}

function injectedIds(m) {
  const r = m.retrieval || {};
  const all = [...(r.positives || []), ...(r.negatives || []), ...(r.project_overrides || [])];
  return new Set(all.map((x) => x.id));
}

function haystack(r) {
  return [r.preference_type, r.pattern, human(r.pattern), r.scope, r.polarity,
    r.polarity === "negative" ? "avoid" : "prefer", r.confidence, ...(r.sources || []),
    ...(r.explicit_tags || [])].join(" ").toLowerCase();
}

// What is put into prompts first, then the strongest.
function visibleRecords(m, injected) {
  const filter = $("scope-filter").value;
  const terms = $("search").value.toLowerCase().split(/\s+/).filter(Boolean);
  return m.preferences.filter((r) => (filter === "all" || r.scope === filter) &&
    terms.every((t) => haystack(r).includes(t)))
    .sort((a, b) => (injected.has(b.id) - injected.has(a.id)) ||
      (b.signal_strength - a.signal_strength));
}

function detail(dl, term, value) {
  dl.append(el("dt", term), el("dd", value));
}

function card(r, injected) {
  const neg = r.polarity === "negative";
  const li = el("li", null, { class: `record ${neg ? "neg" : "pos"}${injected ? " injected" : ""}` });
  li.dataset.pattern = r.pattern;
  li.dataset.type = r.preference_type;
  li.dataset.scope = r.scope;
  li.dataset.key = r.id;
  const label = `${r.preference_type} ${r.pattern} (${r.scope})`;
  const hid = `rec-${r.id}`;

  const main = el("div", null, { class: "record-main" });
  main.append(el("p", `${r.preference_type} · ${r.scope === "global" ? "global memory" :
    `project ${projectOf(r.scope)}`}`, { class: "record-kind" }));
  const head = el("h3", null, { class: "sentence", id: hid });
  const last = el("time", ago(r.last_seen), { datetime: r.last_seen, title: localTime(r.last_seen) });
  head.append(el("span", neg ? "Avoid" : "Prefer", { class: "verb" }), ` ${human(r.pattern)} — `,
    `${strengthWord(r.signal_strength)}, ${evidenceWords(r)}, last seen `, last);
  main.append(head);

  const measures = el("div", null, { class: "measures" });
  measures.append(el("span", neg ? "avoid (−)" : "prefer (+)", { class: `badge ${neg ? "neg" : "pos"}` }));
  const bar = el("span", null, { class: "strength" });
  const meter = el("meter", null, { min: "0", max: "1", value: String(r.signal_strength),
    "aria-label": `Strength ${fmt(r.signal_strength)} of 1` });
  bar.append(el("span", "Strength", { class: "hint", "aria-hidden": "true" }), meter,
    el("span", r.signal_strength.toFixed(2), { class: "num", "aria-hidden": "true" }));
  measures.append(bar, el("span", `${r.confidence} confidence`, { class: `badge conf-${r.confidence}` }));
  if (injected) measures.append(el("span", "In prompts", { class: "badge injected" }));
  if (r.polarity_status !== "stable" || r.shadow_of) {
    measures.append(el("span", r.polarity_status + (r.shadow_of ? " (shadow)" : ""),
      { class: "badge status" }));
  }
  main.append(measures);

  const timeline = el("div", null, { class: "timeline-wrap" });
  timeline.dataset.timeline = timelineKey(r);
  main.append(timeline);
  fillTimeline(timeline, r);

  const more = el("details", null, { "data-details": r.id });
  more.append(el("summary", "Details", { "aria-label": `Details: ${label}`,
    "data-focus": `details:${r.id}` }));
  const dl = el("dl");
  detail(dl, "Type", r.preference_type);
  detail(dl, "Pattern", r.pattern);
  detail(dl, "Scope", r.scope);
  detail(dl, "Status", r.polarity_status + (r.shadow_of ? " (shadow)" : ""));
  detail(dl, "Evidence sources", (r.sources || []).join(", "));
  if ((r.explicit_tags || []).length) detail(dl, "Tags", r.explicit_tags.join(", "));
  detail(dl, "Last seen", localTime(r.last_seen));
  detail(dl, "Decays", localTime(r.decay_at));
  detail(dl, "Provenance", `v${r.derivation_version} · ${r.source_event_count} events · ` +
    `seq ≤ ${r.last_derived_event_seq}`);
  more.append(dl);
  main.append(more);

  const actions = el("div", null, { class: "actions" });
  const why = el("button", "Why?", { type: "button", "aria-label": `Why: ${label}`,
    "data-focus": `why:${r.id}` });
  why.addEventListener("click", () => explain(r, why));
  actions.append(why);
  // Forget erases today's events: not offered on a record of the past (the banner says so)
  if (!state.asOf) {
    const forget = el("button", "Forget", { type: "button", class: "destructive",
      "aria-label": `Forget ${label}`, "data-focus": `forget:${r.id}` });
    forget.addEventListener("click", () => forgetRow(r));
    actions.append(forget);
  }
  li.append(main, actions);
  return li;
}

export function renderRecords(m) {
  const injected = injectedIds(m);
  const rows = visibleRecords(m, injected);
  // a redraw keeps the Details the person opened open (and focus on its summary)
  const open = new Set(Array.from($("records").querySelectorAll("details[open]"),
    (d) => d.dataset.details));
  keepingFocus(() => {
    $("records").replaceChildren(...rows.map((r) => card(r, injected.has(r.id))));
    for (const d of $("records").querySelectorAll("details")) d.open = open.has(d.dataset.details);
  });
  const n = m.preferences.length;
  $("empty").hidden = rows.length > 0;
  $("empty").textContent = n
    ? `No preferences match the search or the filter (${plural(n, "record", "records")} ` +
      "hidden)."
    : "No preferences yet. Feedback from your design tool will appear here.";
  const inPrompt = m.preferences.filter((r) => injected.has(r.id)).length;
  const where = m.project_id ? `project ${m.project_id}` : "global memory";
  $("counts").textContent = `${rows.length} shown of ${plural(n, "record", "records")}; ` +
    `${inPrompt} in prompts for ${where}${m.as_of ? " then" : ""}.`;
  observeTimelines();
}

// -- evidence timelines (GET /api/v1/timeline, fetched for the cards on screen) -------------
const TIMELINE_MAX = 12;

function timelineKey(r) {
  const at = state.past ? `@${state.past.at_seq}` : "";
  return `${r.id}:${r.last_derived_event_seq}:${r.source_event_count}${at}`;
}

function fillTimeline(box, r) {
  const steps = state.timelines.get(box.dataset.timeline);
  if (!steps) {
    box.replaceChildren(el("p", "Evidence: loading…", { class: "hint" }));
    return;
  }
  const shown = steps.slice(-TIMELINE_MAX);
  const first = steps[0];
  const last = steps[steps.length - 1];
  const list = el("ol", null, { class: "timeline", "aria-label": `Evidence for ${r.pattern}` });
  if (steps.length > shown.length) {
    list.append(el("li", `+${steps.length - shown.length}`, { class: "tick more",
      title: `${steps.length - shown.length} earlier` }));
  }
  for (const s of shown) {
    const side = s.polarity === "negative" ? "against" : s.polarity === "positive" ? "for" : "other";
    const what = [s.signal_type || s.kind, s.polarity === "negative" ? "avoid" :
      s.polarity === "positive" ? "prefer" : ""].filter(Boolean).join(", ");
    const li = el("li", null, { class: `tick ${side}`, title: `${localTime(s.at)}: ${what}` });
    li.append(el("span", side === "against" ? "−" : side === "for" ? "+" : "·", { "aria-hidden": "true" }),
      el("span", `${localTime(s.at)}: ${what}`, { class: "visually-hidden" }));
    list.append(li);
  }
  let span = "no events";
  if (first && last) {
    span = first.at === last.at ? localTime(first.at)
      : `${localTime(first.at)} → ${localTime(last.at)}`;
  }
  box.replaceChildren(list, el("p", `${plural(steps.length, "event", "events")} · ${span}`,
    { class: "hint timeline-span" }));
}

let observer = null;
function observeTimelines() {
  if (!observer) {
    observer = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) loadTimeline(e.target);
    }, { rootMargin: "600px" });
  }
  observer.disconnect();
  for (const box of document.querySelectorAll("#records .timeline-wrap")) {
    if (!state.timelines.has(box.dataset.timeline)) observer.observe(box);
  }
}

let timelineQueue = Promise.resolve();
function loadTimeline(box) {
  const key = box.dataset.timeline;
  observer.unobserve(box);
  if (state.timelines.has(key) || state.pending.has(key)) return;
  const r = state.memory && state.memory.preferences.find((x) => timelineKey(x) === key);
  if (!r) return;
  state.pending.add(key);
  const path = patternPath(r, "timeline"); // the point the card shows, even if the view moves on
  timelineQueue = timelineQueue.then(async () => {
    const wanted = [...document.querySelectorAll("#records .timeline-wrap")]
      .some((b) => b.dataset.timeline === key);
    if (!wanted) { // the view moved on (another point in time): nothing to fetch
      state.pending.delete(key);
      return;
    }
    try {
      state.timelines.set(key, (await api("GET", path)).events);
    } catch (err) {
      state.timelines.set(key, []);
    } finally {
      state.pending.delete(key);
    }
    for (const b of document.querySelectorAll("#records .timeline-wrap")) {
      if (b.dataset.timeline === key) fillTimeline(b, r);
    }
  });
}
