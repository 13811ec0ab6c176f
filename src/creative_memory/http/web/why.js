// The Why? panel: a record's trace, for the point shown.

import { state } from "./state.js";
import { $, fail, el, findKey, focusOn } from "./dom.js";
import { localTime, plural, fmt } from "./words.js";
import { api, patternPath } from "./api.js";

// Why? shows the answer to the last question asked: an older answer arriving later is
// dropped. ``again``: the open panel is fetched anew (the point or the memory changed);
// focus stays where it is.
let whyAsked = 0;
export async function explain(r, opener, again) {
  const ask = ++whyAsked;
  const view = `${state.path}|${state.etag}`;
  try {
    const e = await api("GET", patternPath(r, "explain"));
    if (ask !== whyAsked) return;
    state.why = { type: r.preference_type, pattern: r.pattern, scope: r.scope, view };
    state.opener = { key: `why:${r.id}` };
    $("h-why").textContent = `Why? ${r.preference_type} / ${r.pattern} (${r.scope})`;
    $("why-summary").textContent = `${plural(e.steps.length, "event", "events")} shaped this ` +
      `record (derivation v${e.derivation_version}); the trace ends at the ` +
      `${state.asOf ? `record as it was right after event #${state.asOf.at_seq}` : "current record"}. ` +
      "Times are in your time zone.";
    const list = $("why-steps");
    list.replaceChildren();
    for (const s of e.steps) {
      const effects = s.effects.map((x) => {
        const before = x.strength_before === null ? "new" : fmt(x.strength_before);
        return `${x.actions.join(", ")}: ${before} → ${fmt(x.strength_after)}, ` +
          `${x.confidence_after}, ${x.status_after} (${x.polarity})`;
      }).join("; ");
      const li = el("li");
      li.append(el("span", `#${s.seq}`, { class: "seq" }), " ",
        el("time", localTime(s.at), { datetime: s.at }), " · ",
        el("span", s.kind === "joint_fit"
          ? `moved by the joint fit: ${s.about ? s.about.join(", ")
            : `${plural(s.events, "event", "events")} about other patterns, #${s.seq_from}–#${s.seq}`}`
          : [s.kind, s.signal_type, s.polarity].filter(Boolean).join(" ")),
        el("span", effects, { class: "effects" }));
      list.append(li);
    }
    const evidence = $("why-evidence");
    evidence.replaceChildren();
    for (const why of e.why_listed || []) {
      if (why) evidence.append(el("li", why));
    }
    for (const v of e.evidence || []) {
      const level = v.type_level === null ? "" : `, type level ${fmt(v.type_level)}`;
      evidence.append(el("li", `Estimate ${fmt(v.estimate)} ± ${fmt(v.sd)}${level}, ` +
        `slab probability ${fmt(v.slab_probability)}` +
        (v.provisional ? " — provisional (unary evidence only)" : "")));
      for (const [kind, k] of Object.entries(v.kinds)) {
        evidence.append(el("li", `${kind}: ${k.for} for, ${k.against} against, ` +
          `weight ${k.weight}, contribution ${fmt(k.contribution)}`));
      }
      if (v.injection) evidence.append(el("li", `Prompt: ${v.injection.why}`));
    }
    $("why").hidden = false;
    if (!again) $("h-why").focus();
  } catch (err) {
    if (ask !== whyAsked) return;
    fail(err);
    if (again) hideWhy();
    else focusOn(opener);
  }
}

// Hide the panel and drop any answer still on its way; focus inside it goes to the inspector.
export function hideWhy() {
  whyAsked += 1;
  state.why = null;
  const inside = $("why").contains(document.activeElement);
  $("why").hidden = true;
  if (inside) focusOn($("h-inspector"));
}

export function closeWhy() {
  hideWhy();
  focusOn(findKey(state.opener), $("h-inspector"));
}

// After a redraw: the open panel follows the point and the memory shown — fetched anew for
// them (emptied meanwhile, never today's trace under a past note), or closed when the
// record is not there (erased, or not yet at that point).
export function followWhy(m) {
  const w = state.why;
  if (!w || $("why").hidden || w.view === `${state.path}|${state.etag}`) return;
  const r = m.preferences.find((x) => x.preference_type === w.type && x.pattern === w.pattern &&
    x.scope === w.scope);
  if (!r) {
    hideWhy();
    return;
  }
  w.view = `${state.path}|${state.etag}`;
  $("why-summary").textContent = "Updating: the trace for the memory shown…";
  $("why-steps").replaceChildren();
  $("why-evidence").replaceChildren();
  explain(r, null, true);
}
