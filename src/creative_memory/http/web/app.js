// Settings → Memory: plain JavaScript, no build step. Talks to /api/v1 with the session
// cookie; every write carries X-Requested-With (the daemon's CSRF check). Data is written
// into the page with textContent only, never as HTML.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { memory: null, memoryJson: "", busy: 0 };

  function show(msg) {
    $("error").textContent = "";
    $("status").textContent = msg;
  }

  function fail(err) {
    $("error").textContent = err && err.message ? err.message : String(err);
  }

  async function api(method, path, body, raw) {
    const headers = { "X-Requested-With": "creative-memory" };
    let payload;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = raw ? body : JSON.stringify(body);
    }
    const res = await fetch(path, {
      method, headers, body: payload, credentials: "same-origin", cache: "no-store",
    });
    const type = res.headers.get("Content-Type") || "";
    const data = type.includes("json") ? await res.json() : await res.text();
    if (!res.ok) {
      if (res.status === 401) {
        $("whoami").textContent = "Signed out: run “creative-memory ui” for a new login link.";
      }
      const detail = data && data.detail ? data.detail : res.statusText;
      const field = data && data.field ? ` (${data.field})` : "";
      throw new Error(`${detail}${field}`);
    }
    return data;
  }

  const q = (params) => {
    const s = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) s.set(k, v);
    const t = s.toString();
    return t ? `?${t}` : "";
  };

  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (attrs) for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  function projectOf(scope) {
    return scope && scope.startsWith("project:") ? scope.slice("project:".length) : null;
  }

  function fillSelect(select, fixed, projects, prefix) {
    const keep = select.value;
    select.replaceChildren();
    for (const [value, label] of fixed) select.append(el("option", label, { value }));
    for (const p of projects) select.append(el("option", `Project ${p}`, { value: prefix + p }));
    const values = Array.from(select.options).map((o) => o.value);
    select.value = values.includes(keep) ? keep : fixed[0][0];
  }

  // -- rendering -----------------------------------------------------------------------------
  function renderSettings(m) {
    const s = m.settings;
    $("whoami").textContent = `Signed in as ${m.user_id} · ${m.event_count} raw events · ` +
      `derivation v${m.derivation_version}`;
    $("memory-enabled").checked = s.memory_enabled;
    $("diagnostics-feed").checked = s.diagnostics_feed;
    let pause = "Learning is on.";
    if (!s.memory_enabled) pause = "Memory is off: nothing is learned or injected.";
    else if (s.paused_now && s.paused_until) {
      pause = `Learning paused until ${new Date(s.paused_until).toLocaleString()}.`;
    } else if (s.paused_now) pause = "Learning paused until you resume.";
    $("pause-state").textContent = pause;
    $("resume").disabled = !s.paused;
  }

  function renderProjects(m) {
    const list = $("project-list");
    list.replaceChildren();
    const disabled = new Set(m.settings.disabled_projects);
    for (const p of m.projects) {
      const li = el("li");
      const id = `ignore-${p}`;
      const box = el("input", null, { type: "checkbox", id });
      box.checked = disabled.has(p);
      box.addEventListener("change", () => setProject(p, box.checked));
      li.append(box, el("label", `${p}: ignore global memory`, { for: id }));
      list.append(li);
    }
    if (!m.projects.length) list.append(el("li", "No projects yet.", { class: "hint" }));
    fillSelect($("scope-filter"), [["all", "Everything"], ["global", "Global memory"]],
      m.projects, "project:");
    fillSelect($("preview-project"), [["", "(none: global memory)"]], m.projects, "");
    fillSelect($("reset-scope"), [["all", "Everything (and switch memory back on)"],
      ["global", "Global memory only"]], m.projects, "project:");
  }

  function fmt(n) {
    return typeof n === "number" ? n.toFixed(3) : "";
  }

  function renderTable(m) {
    const filter = $("scope-filter").value;
    const rows = m.preferences.filter((r) => filter === "all" || r.scope === filter);
    const body = $("prefs").querySelector("tbody");
    body.replaceChildren();
    for (const r of rows) {
      const tr = el("tr");
      tr.dataset.pattern = r.pattern;
      tr.dataset.type = r.preference_type;
      tr.dataset.scope = r.scope;
      tr.append(
        el("td", r.preference_type),
        el("th", r.pattern, { scope: "row" }),
        el("td", r.polarity === "negative" ? "avoid (−)" : "prefer (+)"),
        el("td", fmt(r.signal_strength)),
        el("td", r.confidence),
        el("td", r.polarity_status + (r.shadow_of ? " (shadow)" : "")),
        el("td", (r.sources || []).join(", ")),
        el("td", r.scope),
        el("td", `v${r.derivation_version} · ${r.source_event_count} events · ` +
          `seq ≤ ${r.last_derived_event_seq}`),
      );
      const actions = el("td", null, { class: "actions" });
      const label = `${r.preference_type} ${r.pattern} (${r.scope})`;
      const why = el("button", "Why?", { type: "button", "aria-label": `Why: ${label}` });
      why.addEventListener("click", () => explain(r));
      const forget = el("button", "Forget", {
        type: "button", class: "destructive", "aria-label": `Forget ${label}`,
      });
      forget.addEventListener("click", () => forgetRow(r));
      actions.append(why, forget);
      tr.append(actions);
      body.append(tr);
    }
    $("empty").hidden = rows.length > 0;
    const n = m.preferences.length;
    $("counts").textContent = `${rows.length} shown of ${n} record${n === 1 ? "" : "s"}`;
  }

  async function refresh(force) {
    try {
      const m = await api("GET", "/api/v1/memory");
      const json = JSON.stringify(m);
      if (force || json !== state.memoryJson) {
        state.memory = m;
        state.memoryJson = json;
        renderSettings(m);
        renderProjects(m);
        renderTable(m);
      }
      await preview();
    } catch (err) {
      fail(err);
    }
  }

  async function preview() {
    const project = $("preview-project").value;
    const variant = $("preview-variant").value;
    const text = await api("GET", `/api/v1/prompt${q({ project_id: project, variant })}`);
    $("preview").textContent = text || "(empty: nothing would be put into the prompt)";
  }

  // -- actions -------------------------------------------------------------------------------
  // Actions run one after another, in the order the person made them; none is dropped.
  let queue = Promise.resolve();
  function act(fn, done) {
    state.busy += 1;
    queue = queue.then(async () => {
      try {
        await fn();
        show(done);
        await refresh(true);
      } catch (err) {
        fail(err);
        await refresh(true);
      } finally {
        state.busy -= 1;
      }
    });
    return queue;
  }

  function setProject(p, ignore) {
    return act(() => api("POST", "/api/v1/settings", { project_ignore_global: { [p]: ignore } }),
      ignore ? `Project ${p} now ignores global memory.` : `Project ${p} uses global memory.`);
  }

  function forgetRow(r) {
    const project = projectOf(r.scope);
    const where = project ? `project ${project}` : "global memory";
    if (!window.confirm(`Forget “${r.pattern}” (${r.preference_type}) in ${where}? ` +
      "Every raw event about it is erased for real.")) return Promise.resolve();
    const path = `/api/v1/preferences/${encodeURIComponent(r.preference_type)}/` +
      `${encodeURIComponent(r.pattern)}${q({ project_id: project })}`;
    return act(async () => {
      const res = await api("DELETE", path);
      $("why").hidden = true;
      return res;
    }, `Forgot ${r.pattern} in ${where}.`);
  }

  async function explain(r) {
    const project = projectOf(r.scope);
    const path = `/api/v1/explain/${encodeURIComponent(r.preference_type)}/` +
      `${encodeURIComponent(r.pattern)}${q({ project_id: project })}`;
    try {
      const e = await api("GET", path);
      $("h-why").textContent = `Why? ${r.preference_type} / ${r.pattern} (${r.scope})`;
      $("why-summary").textContent = `${e.steps.length} event(s) shaped this record ` +
        `(derivation v${e.derivation_version}); the trace ends at the current record.`;
      const body = $("why-steps").querySelector("tbody");
      body.replaceChildren();
      for (const s of e.steps) {
        const effects = s.effects.map((x) => {
          const before = x.strength_before === null ? "new" : fmt(x.strength_before);
          return `${x.actions.join(", ")}: ${before} → ${fmt(x.strength_after)}, ` +
            `${x.confidence_after}, ${x.status_after} (${x.polarity})`;
        }).join("; ");
        const tr = el("tr");
        body.append(tr);
        tr.append(el("td", s.seq), el("td", s.at), el("td", s.kind),
          el("td", [s.signal_type, s.polarity].filter(Boolean).join(" ")), el("td", effects));
      }
      const evidence = $("why-evidence");
      evidence.replaceChildren();
      for (const v of e.evidence || []) {
        const level = v.type_level === null ? "" : `, type level ${fmt(v.type_level)}`;
        evidence.append(el("li", `Estimate ${fmt(v.estimate)} ± ${fmt(v.sd)}${level}, ` +
          `slab probability ${fmt(v.slab_probability)}` +
          (v.provisional ? " — provisional (unary evidence only)" : "")));
        for (const [kind, k] of Object.entries(v.kinds)) {
          evidence.append(el("li", `${kind}: ${k.for} for, ${k.against} against, ` +
            `weight ${k.weight}, contribution ${fmt(k.contribution)}`));
        }
      }
      $("why").hidden = false;
      $("h-why").focus();
    } catch (err) {
      fail(err);
    }
  }

  function wire() {
    // Values are read when the person acts, not when the queued request runs.
    $("memory-enabled").addEventListener("change", (ev) => {
      const on = ev.target.checked;
      act(() => api("POST", "/api/v1/settings", { memory_enabled: on }),
        on ? "Memory is on." : "Memory is off.");
    });
    $("diagnostics-feed").addEventListener("change", (ev) => {
      const on = ev.target.checked;
      act(() => api("POST", "/api/v1/settings", { diagnostics_feed: on }),
        on ? "Diagnostics feed on." : "Diagnostics feed off.");
    });
    $("pause").addEventListener("click", () => {
      const v = $("pause-until").value;
      const until = v ? new Date(v).toISOString() : null;
      return act(() => api("POST", "/api/v1/settings", { paused: true, paused_until: until }),
        until ? `Learning paused until ${new Date(until).toLocaleString()}.` : "Learning paused.");
    });
    $("resume").addEventListener("click", () => act(
      () => api("POST", "/api/v1/settings", { paused: false }), "Learning resumed."));
    $("add-project").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const p = $("new-project").value.trim();
      if (!p) return;
      $("new-project").value = "";
      setProject(p, true);
    });
    $("scope-filter").addEventListener("change", () => state.memory && renderTable(state.memory));
    $("refresh").addEventListener("click", () => refresh(true).then(() => show("Refreshed.")));
    $("preview-project").addEventListener("change", () => preview().catch(fail));
    $("preview-variant").addEventListener("change", () => preview().catch(fail));
    $("why-close").addEventListener("click", () => { $("why").hidden = true; });
    $("import-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const file = $("import-file").files[0];
      if (!file) return;
      const mode = $("import-mode").value;
      act(async () => {
        const text = await file.text();
        const res = await api("POST", `/api/v1/import${q({ mode })}`, text, true);
        state.lastImport = res.events_added;
      }, "Import done.").then(() => {
        if (state.lastImport !== undefined) {
          show(`Imported ${state.lastImport} event(s) (${mode}).`);
        }
      });
    });
    const dialog = $("reset-dialog");
    $("reset").addEventListener("click", () => {
      const opt = $("reset-scope").selectedOptions[0];
      $("reset-text").textContent = `This erases ${opt.textContent.toLowerCase()} for real: ` +
        "the raw events are deleted, not hidden. Export first if you may want them back.";
      dialog.showModal();
      $("reset-cancel").focus();
    });
    $("reset-cancel").addEventListener("click", () => dialog.close());
    $("reset-confirm").addEventListener("click", () => {
      const scope = $("reset-scope").value;
      dialog.close();
      act(() => api("POST", "/api/v1/reset", { confirm: true, scope }), "Memory erased.");
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh(false);
    });
    setInterval(() => {
      if (!document.hidden && !state.busy && !dialog.open) refresh(false);
    }, 5000);
  }

  wire();
  refresh(true);
})();
