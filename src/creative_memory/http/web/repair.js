// A damaged log (a 500 of type log-damaged, dom.js): what a check finds, shown in the Repair
// card, and the repair itself, asked for in a dialog (docs/daemon.md, "The Settings → Memory
// page").

import { $, el } from "./dom.js";
import { api } from "./api.js";
import { act } from "./actions.js";
import { plural } from "./words.js";

const KIND = {
  unreadable: "not an event",
  altered: "edited outside creative-memory",
  out_of_order: "out of order",
  header: "bad header",
  settings: "settings do not load",
  version: "unknown derivation version",
};

// One check at a time: failures of several requests at once ask once.
let checking = null;
export function showDamage() {
  if (!checking) {
    checking = api("GET", "/api/v1/check").then(render, () => {}).finally(() => {
      checking = null;
    });
  }
  return checking;
}

// The card shows the problems a check found (text only), or hides when there are none.
function render(found) {
  const card = $("repair-card");
  if (found.healthy) {
    card.hidden = true;
    return;
  }
  // what a repair mends: everything but settings a newer release wrote (their version)
  const mends = found.problems.filter((p) => p.kind !== "version");
  const log = mends.filter((p) => p.kind !== "settings");
  const settings = mends.length > log.length;
  const more = found.problems_total - found.problems.length;
  $("repair-problems").replaceChildren(...found.problems.map((p) =>
    el("li", `${p.where}: ${KIND[p.kind] || p.kind} — ${p.detail}`)),
    ...(more > 0 ? [el("li", `… and ${more} more`)] : []));
  $("repair-summary").textContent = `${plural(found.events, "event", "events")} still ` +
    "read as they should. " + (log.length
    ? "Repair keeps them all and drops only what is not an event."
    : settings ? "Repair writes the settings anew; no event is touched."
      : "The settings name a derivation version this release does not know: choose one " +
        "under Derivation.");
  $("repair").hidden = !mends.length;
  const dropped = log.filter((p) => p.kind === "unreadable").length;
  $("repair-text").textContent = [
    dropped ? `This drops ${plural(dropped, "line", "lines")} that ` +
      `${dropped === 1 ? "is" : "are"} not an event, for good (the page cannot keep a copy: ` +
      "“creative-memory repair --confirm --save-dropped FILE” can)." : "",
    log.length ? "Edited events are kept as they read now, and the log is chained again." : "",
    settings ? "The settings are written anew with memory off: turn it on again under " +
      "Controls (a pause, project switches and the derivation version are back to their " +
      "defaults)." : "",
  ].filter(Boolean).join(" ");
  const was = card.hidden;
  card.hidden = false;
  if (was) $("h-repair").focus();
}

// What a repair did, as the CLI says it.
export function repairWords(res) {
  if (!res) return "";
  if (!res.repaired) return "Nothing to repair: the log is healthy.";
  const edited = res.problems.filter((p) => p.kind === "altered").length;
  const log = res.problems.some((p) => !["settings", "version"].includes(p.kind));
  return [
    log ? `Repaired the log: ${plural(res.events_dropped, "line", "lines")} dropped, ` +
      `${plural(edited, "edited event", "edited events")} kept as read, ` +
      `${plural(res.events_renumbered, "event", "events")} numbered anew; ` +
      `${plural(res.events_kept, "event", "events")} kept.` : "",
    res.settings_rewritten ? "Settings written anew: memory is off." : "",
  ].filter(Boolean).join(" ");
}

export function wireRepair() {
  // once the card shows what is wrong, a poll failing the same way does not ask again (a
  // check reads the whole log); the Check button and a repair refresh it
  document.addEventListener("log-damaged", () => {
    if ($("repair-card").hidden) showDamage();
  });
  // asked for: the answer is said either way (the card shows what is wrong)
  $("check").addEventListener("click", () => {
    let found;
    act(async () => {
      found = await api("GET", "/api/v1/check");
      render(found);
    }, () => (found.healthy
      ? `The stored memory is healthy: ${plural(found.events, "event", "events")}.`
      : `The stored memory has ${plural(found.problems_total, "problem", "problems")}: ` +
        "see above."), () => (found && !found.healthy ? $("h-repair") : $("check")), true);
  });
  const dialog = $("repair-dialog");
  $("repair").addEventListener("click", () => {
    dialog.showModal();
    $("repair-cancel").focus();
  });
  $("repair-cancel").addEventListener("click", () => dialog.close());
  $("repair-confirm").addEventListener("click", () => {
    dialog.close();
    let res;
    act(async () => {
      res = await api("POST", "/api/v1/repair", { confirm: true });
      render(await api("GET", "/api/v1/check"));
    }, () => repairWords(res), () => $("h-inspector"));
  });
}
