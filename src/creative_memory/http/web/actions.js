// What the person does: queued actions, export, import, reset, a project's setting, Forget.

import { state } from "./state.js";
import { $, show, fail, el, focusKey, findKey, focusOn } from "./dom.js";
import { projectOf, plural, whereWords } from "./words.js";
import { send, parse, api, q } from "./api.js";
import { refresh } from "./load.js";
import { hideWhy } from "./why.js";

// -- actions -------------------------------------------------------------------------------
// Actions run one after another, in the order the person made them; none is dropped. After
// each, focus goes to ``focus()`` (when given) or stays where it was.
// ``done`` is the message (or a function giving it); ``quiet``: no refresh after it.
let queue = Promise.resolve();
export function act(fn, done, focus, quiet) {
  state.busy += 1;
  const from = focusKey(document.activeElement);
  queue = queue.then(async () => {
    try {
      await fn();
      show(typeof done === "function" ? done() : done);
    } catch (err) {
      fail(err);
    }
    if (!quiet) await refresh(true);
    // only if the person has not moved on meanwhile (a slow answer must not steal focus)
    const now = document.activeElement;
    const moved = now && now !== document.body && now.isConnected &&
      JSON.stringify(focusKey(now)) !== JSON.stringify(from);
    if (focus && !moved) focusOn(focus(), $("h-inspector"));
    state.busy -= 1;
  });
  return queue;
}

// The archive is fetched, so a refusal (signed out, an altered log) is shown with its
// detail; then it is saved under the name the daemon gives (Content-Disposition).
export function exportArchive() {
  let name;
  return act(async () => {
    const res = await send("GET", "/api/v1/export");
    if (!res.ok) await parse(res); // throws the problem's detail
    const blob = await res.blob();
    const m = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "");
    name = m ? m[1] : "creative-memory-export.json";
    const url = URL.createObjectURL(blob);
    const a = el("a", null, { href: url, download: name, hidden: "" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }, () => `Export saved as ${name}.`, () => $("export"), true);
}

// Replacing erases the current memory: ask first, naming what goes (today's count).
export async function confirmReplace(file) {
  // in the past, state.memory counts the events then: ask for today's count
  const m = state.asOf ? await api("GET", "/api/v1/memory") : state.memory;
  const now = m ? `your ${plural(m.event_count, "event", "events")}` : "your events";
  return window.confirm(`Replace your memory with “${file.name}”? This erases ${now} and ` +
    "your settings for real and puts the archive's events and settings in their place. " +
    "Export first if you may want them back.");
}

// What an import did and what is in memory now, as the CLI says it.
export function importWords(file, res) {
  if (!res) return "";
  const origin = res.archive_user_id !== res.user_id ? ` (archive of ${res.archive_user_id})` : "";
  return res.mode === "replace"
    ? `Replaced your memory with ${file.name}${origin}: ` +
      `${plural(res.events_total, "event", "events")} and the archive's settings.`
    : `Imported ${file.name}${origin}: ${plural(res.events_added, "event", "events")} added, ` +
      `${res.events_total} in memory.`;
}

// What a reset erased (events_removed) and what is left, as the CLI says it.
export function resetWords(chosen, res) {
  if (!res) return "";
  const what = chosen.scope === "all" ? "everything" : whereWords(chosen.scope);
  const left = `${res.events_remaining} left`;
  return res.events_removed
    ? `Memory erased (${what}): ${plural(res.events_removed, "event", "events")} ` +
      `erased, ${left}.`
    : `Nothing to erase in ${what}: it had no events; ${left}.`;
}

export function setProject(p, ignore) {
  return act(() => api("POST", "/api/v1/settings", { project_ignore_global: { [p]: ignore } }),
    ignore ? `Project ${p} now ignores global memory.` : `Project ${p} uses global memory.`,
    () => $(`ignore-${p}`) || $("new-project"));
}

export function forgetRow(r) {
  const project = projectOf(r.scope);
  const where = project ? `project ${project}` : "global memory";
  if (!window.confirm(`Forget “${r.pattern}” (${r.preference_type}) in ${where}? ` +
    "Every raw event about it is erased for real.")) return Promise.resolve();
  // focus goes to the next record (else the previous one, else the inspector's heading)
  const cards = Array.from(document.querySelectorAll("#records li.record"));
  const at = cards.findIndex((c) => c.dataset.key === r.id);
  const next = cards[at + 1] || cards[at - 1];
  const nextKey = next ? `why:${next.dataset.key}` : null;
  const path = `/api/v1/preferences/${encodeURIComponent(r.preference_type)}/` +
    `${encodeURIComponent(r.pattern)}${q({ project_id: project })}`;
  let res;
  return act(async () => {
    res = await api("DELETE", path);
    hideWhy();
  }, () => forgetWords(r, where, res),
  () => (nextKey ? findKey({ key: nextKey }) : null) || $("h-inspector"));
}

// What a forget erased, as the CLI says it (nothing, when it was gone already).
function forgetWords(r, where, res) {
  if (!res) return "";
  const what = `${r.pattern} (${r.preference_type}) in ${where}`;
  if (res.events_removed) {
    return `Forgot ${what}: ${plural(res.events_removed, "event", "events")} erased.`;
  }
  const elsewhere = (res.elsewhere || []).map(whereWords).join(", ");
  return `Nothing to forget: no events about ${what}` +
    `${elsewhere ? ` (it is in ${elsewhere})` : ""}.`;
}
