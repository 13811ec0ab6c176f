// Fetching the memory shown (conditionally) and the prompt preview, and redrawing the page.

import { state } from "./state.js";
import { $, fail, keepingFocus } from "./dom.js";
import { send, parse, api, q, pastQuery } from "./api.js";
import { renderSettings, renderProjects, renderRecords } from "./records.js";
import { followWhy } from "./why.js";
import { renderHistory } from "./history.js";
import { loadDerivation } from "./derivation.js";

// -- loading, conditionally ----------------------------------------------------------------
export async function load(force) {
  const project = $("preview-project").value;
  const path = `/api/v1/memory${q({ project_id: project, ...pastQuery() })}`;
  const headers = !force && state.etag && state.path === path ? { "If-None-Match": state.etag } : {};
  const res = await send("GET", path, undefined, false, headers);
  if (res.status === 304) return false;
  const m = await parse(res);
  state.memory = m;
  state.etag = res.headers.get("ETag") || "";
  state.path = path;
  state.asOf = m.as_of || null;
  // a date resolves to the event right before it: the rest of the page asks for that event
  if (state.asOf) state.past = { at_seq: state.asOf.at_seq };
  else state.hi = Math.max(m.event_count,
    ...m.preferences.map((r) => r.last_derived_event_seq || 0));
  keepingFocus(() => {
    renderSettings(m);
    renderProjects(m);
    renderHistory();
  });
  renderRecords(m);
  followWhy(m);
  await preview();
  await loadDerivation();
  return true;
}

// true: redrawn, false: nothing changed (304), null: failed (the error is shown). After a
// failure the next load is a full one: what the page shows may no longer be what the daemon
// holds (a switch the person flipped while the request failed), and a 304 would keep it so.
// The error a failed load showed goes once a load works again.
export async function refresh(force) {
  try {
    const drawn = await load(force);
    if (state.loadFailed) {
      state.loadFailed = false;
      $("error").textContent = "";
    }
    return drawn;
  } catch (err) {
    state.etag = "";
    state.loadFailed = true;
    if (!state.memory) $("whoami").textContent = "Your memory could not be shown: see why below.";
    fail(err);
    return null;
  }
}

// The preview shows the answer to the last question asked (an older one is dropped).
let previewAsked = 0;
export async function preview() {
  const ask = ++previewAsked;
  const project = $("preview-project").value;
  const variant = $("preview-variant").value;
  let text;
  try {
    text = await api("GET", `/api/v1/prompt${q({ project_id: project, variant, ...pastQuery() })}`);
  } catch (err) {
    if (ask === previewAsked) throw err;
    return;
  }
  if (ask !== previewAsked) return;
  $("preview").textContent = text || "(empty: nothing would be put into the prompt)";
}
