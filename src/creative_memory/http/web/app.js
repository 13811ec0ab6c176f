// Settings → Memory: plain JavaScript, no build step (docs/daemon.md, "The Settings → Memory
// page"). Talks to /api/v1 with the session cookie; every write carries X-Requested-With
// (the daemon's CSRF check). Stored strings are written into the page with textContent only,
// never as HTML. Times are shown in the viewer's local time zone. Polling is conditional
// (If-None-Match → 304): nothing is redrawn or refetched while nothing changed. The derivation
// section previews a version switch before making it; the history control shows the records,
// Why? and the prompt preview as they were right after an event (docs/time-travel.md).
//
// The entry point (loaded as a module, deferred): it wires the controls and loads the page;
// the rest is in the modules it imports (state, dom, words, api, records, load, actions,
// why, history, derivation).

import { state } from "./state.js";
import { $, show, fail, focusOn } from "./dom.js";
import { localTime, projectOf } from "./words.js";
import { api, q } from "./api.js";
import { renderRecords } from "./records.js";
import { refresh, preview } from "./load.js";
import { act, exportArchive, confirmReplace, importWords, resetWords } from "./actions.js";
import { closeWhy } from "./why.js";
import { sliderLabel, travel, stepForward, slid } from "./history.js";
import { previewSwitch, askSwitch, doSwitch } from "./derivation.js";
import { wireRepair } from "./repair.js";

const POLL_MS = 5000;

function wire() {
  // Values are read when the person acts, not when the queued request runs.
  $("memory-enabled").addEventListener("change", (ev) => {
    const on = ev.target.checked;
    act(() => api("POST", "/api/v1/settings", { memory_enabled: on }),
      on ? "Memory is on." : "Memory is off.", () => $("memory-enabled"));
  });
  $("diagnostics-feed").addEventListener("change", (ev) => {
    const on = ev.target.checked;
    act(() => api("POST", "/api/v1/settings", { diagnostics_feed: on }),
      on ? "Diagnostics feed on." : "Diagnostics feed off.", () => $("diagnostics-feed"));
  });
  $("pause").addEventListener("click", () => {
    // a half-typed date reads as "" (no date): refused, not taken for "until you resume"
    if ($("pause-until").validity.badInput) {
      fail(new Error("“Pause until” is not a complete date and time: complete it, or clear " +
        "it to pause until you resume."));
      focusOn($("pause-until"));
      return undefined;
    }
    const v = $("pause-until").value;
    const until = v ? new Date(v).toISOString() : null;
    return act(() => api("POST", "/api/v1/settings", { paused: true, paused_until: until }),
      until ? `Learning paused until ${localTime(until)}.` : "Learning paused.",
      () => $("resume"));
  });
  // Resume disables itself: focus goes to Pause, its counterpart. The date of the pause it
  // ended is cleared, so the next Pause does not reuse it unseen.
  $("resume").addEventListener("click", () => act(async () => {
    await api("POST", "/api/v1/settings", { paused: false });
    $("pause-until").value = "";
  }, "Learning resumed.", () => $("pause")));
  // The id typed stays in the field until the daemon has taken it (a refused one is kept).
  $("add-project").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("new-project");
    const p = input.value.trim();
    if (!p) return;
    act(async () => {
      await api("POST", "/api/v1/settings", { project_ignore_global: { [p]: true } });
      if (input.value.trim() === p) input.value = "";
    }, `Project ${p} now ignores global memory.`, () => $(`ignore-${p}`) || input);
  });
  $("scope-filter").addEventListener("change", () => state.memory && renderRecords(state.memory));
  $("search").addEventListener("input", () => state.memory && renderRecords(state.memory));
  $("refresh").addEventListener("click", () => {
    $("status").textContent = "";
    return refresh(true).then((done) => {
      if (done !== null) show("Refreshed.");
      focusOn($("refresh"));
    });
  });
  $("preview-project").addEventListener("change", () => refresh(true));
  $("preview-variant").addEventListener("change", () => preview().catch(fail));
  $("why-close").addEventListener("click", closeWhy);
  $("why").addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") closeWhy();
  });
  $("export").addEventListener("click", (ev) => {
    ev.preventDefault();
    exportArchive();
  });
  $("import-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = $("import-file").files[0];
    if (!file) return;
    const mode = $("import-mode").value;
    try {
      if (mode === "replace" && !(await confirmReplace(file))) return;
    } catch (err) {
      fail(err);
      return;
    }
    let res;
    // the file's bytes as they are: the daemon judges what the CLI would read
    act(async () => {
      res = await api("POST", `/api/v1/import${q({ mode })}`, file, true);
    }, () => importWords(file, res), () => $("import"));
  });
  const dialog = $("reset-dialog");
  // The scope is fixed when the dialog opens: what it names is exactly what is sent.
  $("reset").addEventListener("click", () => {
    const opt = $("reset-scope").selectedOptions[0];
    if (!opt) return;
    state.reset = { scope: opt.value };
    const p = projectOf(opt.value);
    const what = opt.value === "all" ? "all your memory, and switches it back on"
      : p === null ? "your global memory" : `the memory of project ${p}`;
    $("reset-text").textContent = `This erases ${what}, for real: the raw events are ` +
      "deleted, not hidden. Export first if you may want them back.";
    dialog.showModal();
    $("reset-cancel").focus();
  });
  $("reset-cancel").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    state.reset = null;
  });
  $("reset-confirm").addEventListener("click", () => {
    const chosen = state.reset;
    dialog.close();
    if (!chosen) return;
    let res;
    act(async () => {
      res = await api("POST", "/api/v1/reset", { confirm: true, scope: chosen.scope });
    }, () => resetWords(chosen, res), () => $("reset"));
  });
  wireRepair();
  $("derivation-preview").addEventListener("click", previewSwitch);
  $("derivation-switch").addEventListener("click", (ev) => {
    if (state.change) askSwitch(state.change.to_version, ev.currentTarget);
  });
  $("derivation-back").addEventListener("click", (ev) => {
    const h = state.derivation && state.derivation.history;
    if (h && h.length) askSwitch(h[h.length - 1].previous, ev.currentTarget);
  });
  const switchDialog = $("derivation-dialog");
  $("derivation-confirm").addEventListener("click", doSwitch);
  $("derivation-cancel").addEventListener("click", () => switchDialog.close());
  switchDialog.addEventListener("close", () => {
    if (state.switchTo !== null) {  // cancelled (Cancel or Escape): back where it was opened
      state.switchTo = null;
      focusOn(state.switchOpener, $("derivation-version"));
    }
  });
  $("history-seq").addEventListener("input", () => {
    sliderLabel();
    clearTimeout(state.slideTimer);
    state.slideTimer = setTimeout(slid, 400);
  });
  $("history-seq").addEventListener("change", slid);
  $("history-seq").addEventListener("keydown", (ev) => {
    if ((ev.key !== "ArrowRight" && ev.key !== "ArrowUp") || ev.altKey || ev.ctrlKey ||
      ev.metaKey || ev.shiftKey) return;
    ev.preventDefault(); // not one number on: the next event
    clearTimeout(state.slideTimer);
    state.slideTimer = null;
    stepForward();
  });
  $("history-go").addEventListener("click", () => {
    const v = $("history-date").value;
    if (!v) {
      fail(new Error("Choose a date and time first."));
      return;
    }
    travel({ as_of: new Date(v).toISOString() }, () => $("history-go"));
  });
  $("history-now").addEventListener("click", () => travel(null, () => $("history-seq")));
  $("past-now").addEventListener("click", () => travel(null, () => $("h-inspector")));
  // Nothing is redrawn behind an open dialog or a queued action (they refresh after).
  const idle = () => !document.hidden && !state.busy && !dialog.open && !switchDialog.open &&
    !$("repair-dialog").open;
  document.addEventListener("visibilitychange", () => {
    if (idle()) refresh(false);
  });
  setInterval(() => {
    if (idle()) refresh(false);
  }, POLL_MS);
}

wire();
refresh(true);
