// Looking back: the history control and the past shown (docs/time-travel.md).

import { state } from "./state.js";
import { $ } from "./dom.js";
import { localTime, plural } from "./words.js";
import { load } from "./load.js";
import { act } from "./actions.js";

// -- looking back: a point in the past for the records, Why? and the prompt preview ---------
// (GET /api/v1/memory, /explain and /prompt with at_seq; a date is sent as as_of once and
// the event it resolves to is used from then on; docs/time-travel.md)
function pastWords(a) {
  if (!a.events) return "before the first event";
  return `right after event #${a.at_seq} (${plural(a.events, "event", "events")} in, ` +
    `recorded ${localTime(a.recorded_at)})`;
}

export function renderHistory() {
  const a = state.asOf;
  const slider = $("history-seq");
  slider.max = String(state.hi);
  if (!state.slideTimer) slider.value = String(a ? a.at_seq : state.hi);
  sliderLabel();
  document.body.classList.toggle("past", Boolean(a));
  $("history-state").textContent = a
    ? `Showing the past: memory ${pastWords(a)}, derived under version ${a.derivation_version}.`
    : "Showing memory now.";
  $("history-now").hidden = !a;
  $("past-banner").hidden = !a;
  if (a) {
    $("past-text").textContent = `The past: memory ${pastWords(a)}, derivation ` +
      `v${a.derivation_version}. Forget is not offered here: it acts on today's memory.`;
  }
  for (const [id, text] of [
    ["why-past", a && `As it was ${pastWords(a)}.`],
    ["preview-past", a && `The block as it was ${pastWords(a)}, derivation v${a.derivation_version}.`],
    ["reset-past", a && "You are looking at the past above: Reset acts on today's memory."],
  ]) {
    $(id).hidden = !a;
    if (a) $(id).textContent = text;
  }
}

export function sliderLabel() {
  const v = Number($("history-seq").value);
  $("history-seq-value").textContent = v >= state.hi ? `#${v} (now)` : `#${v}`;
}

// ``point``: {at_seq} or {as_of}, null for now, or a function finding it (when it runs).
export function travel(point, focus) {
  return act(async () => {
    const before = state.past;
    state.past = typeof point === "function" ? await point() : point;
    try {
      await load(true);
    } catch (err) {
      state.past = before;
      throw err;
    }
  }, () => (state.asOf ? `Showing memory ${pastWords(state.asOf)}.` : "Showing memory now."),
  focus, true);
}

// The arrow keys step to the next event, over gaps in the numbers (a forget, reset or
// import leaves them): the point shown names it (as_of.next_seq; null at the last event).
export function stepForward() {
  return travel(() => {
    const n = state.asOf ? state.asOf.next_seq : null; // now: nothing after it
    return n == null || n >= state.hi ? null : { at_seq: n };
  }, () => $("history-seq"));
}

export function slid() {
  clearTimeout(state.slideTimer);
  state.slideTimer = null;
  const v = Number($("history-seq").value);
  const now = v >= state.hi;
  if (now ? !state.past : state.past && state.past.at_seq === v) return Promise.resolve();
  return travel(now ? null : { at_seq: v });
}
