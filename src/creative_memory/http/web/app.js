// Settings → Memory: plain JavaScript, no build step (docs/daemon.md, "The Settings → Memory
// page"). Talks to /api/v1 with the session cookie; every write carries X-Requested-With
// (the daemon's CSRF check). Stored strings are written into the page with textContent only,
// never as HTML. Times are shown in the viewer's local time zone. Polling is conditional
// (If-None-Match → 304): nothing is redrawn or refetched while nothing changed. The derivation
// section previews a version switch before making it; the history control shows the records,
// Why? and the prompt preview as they were right after an event (docs/time-travel.md).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 5000;
  const TIMELINE_MAX = 12;
  const state = {
    memory: null, etag: "", busy: 0, opener: null, timelines: new Map(), pending: new Set(),
    past: null, asOf: null, hi: 0, projects: new Set(), derivation: null, change: null,
    switchTo: null, switchOpener: null, reset: null, why: null,
  };

  function show(msg) {
    $("error").textContent = "";
    $("status").textContent = msg;
  }

  function fail(err) {
    $("error").textContent = err && err.message ? err.message : String(err);
  }

  async function send(method, path, body, raw, headers) {
    const h = { "X-Requested-With": "creative-memory", ...(headers || {}) };
    let payload;
    if (body !== undefined) {
      h["Content-Type"] = "application/json";
      payload = raw ? body : JSON.stringify(body);
    }
    return fetch(path, { method, headers: h, body: payload, credentials: "same-origin",
      cache: "no-store" });
  }

  async function parse(res) {
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

  async function api(method, path, body, raw) {
    return parse(await send(method, path, body, raw));
  }

  const q = (params) => {
    const s = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v !== undefined && v !== null && v !== "") s.set(k, String(v));
    }
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

  // ``stay``: a chosen project that left the list stays chosen (listed as it was), so the
  // select never changes under the person (Reset must erase what they chose, nothing else).
  function fillSelect(select, fixed, projects, prefix, stay) {
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
  function focusKey(e) {
    if (!e || e === document.body) return null;
    return e.id ? { id: e.id } : e.dataset && e.dataset.focus ? { key: e.dataset.focus } : null;
  }

  function findKey(k) {
    if (!k) return null;
    return k.id ? $(k.id) : document.querySelector(`[data-focus="${CSS.escape(k.key)}"]`);
  }

  function keepingFocus(fn) {
    const had = focusKey(document.activeElement);
    fn();
    const now = document.activeElement;
    if (had && (!now || now === document.body || !now.isConnected)) focusOn(findKey(had));
  }

  function focusOn(e, fallback) {
    const target = e && e.isConnected && !e.disabled && !e.closest("[hidden]") ? e : fallback;
    if (target) target.focus();
  }

  // -- words, times --------------------------------------------------------------------------
  const TIME = { year: "numeric", month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit", timeZoneName: "short" };
  const localTime = (iso) => new Date(iso).toLocaleString(undefined, TIME);
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const human = (pattern) => pattern.replace(/[_-]+/g, " ").trim() || pattern;
  const fmt = (n) => (typeof n === "number" ? n.toFixed(3) : "");

  function ago(iso) {
    const s = (new Date(iso).getTime() - Date.now()) / 1000;
    const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
    const steps = [[60, "second"], [60, "minute"], [24, "hour"], [30, "day"], [12, "month"]];
    let v = s;
    for (const [size, unit] of steps) {
      if (Math.abs(v) < size) return rtf.format(Math.round(v), unit);
      v /= size;
    }
    return rtf.format(Math.round(v), "year");
  }

  function strengthWord(x) {
    if (x >= 0.75) return "strong";
    if (x >= 0.4) return "moderate";
    return "weak";
  }

  function evidenceWords(r) {
    const neg = plural(r.reject_count, "rejection", "rejections");
    const pos = plural(r.accept_count, "acceptance", "acceptances");
    if (!r.accept_count && !r.reject_count) {
      return plural(r.source_event_count, "signal", "signals");
    }
    const first = r.polarity === "negative" ? [neg, r.accept_count ? pos : ""]
      : [pos, r.reject_count ? neg : ""];
    return first.filter(Boolean).join(", ");
  }

  // -- rendering -----------------------------------------------------------------------------
  function renderSettings(m) {
    const s = m.settings;
    $("whoami").textContent = m.as_of
      ? `Signed in as ${m.user_id} · looking at the past: right after event #${m.as_of.at_seq} · ` +
        `derivation v${m.derivation_version} then`
      : `Signed in as ${m.user_id} · ${m.event_count} raw events · derivation v${m.derivation_version}`;
    $("memory-enabled").checked = s.memory_enabled;
    $("diagnostics-feed").checked = s.diagnostics_feed;
    let pause = "Learning is on.";
    if (!s.memory_enabled) pause = "Memory is off: nothing is learned or injected.";
    else if (s.paused_now && s.paused_until) {
      pause = `Learning paused until ${localTime(s.paused_until)}.`;
    } else if (s.paused_now) pause = "Learning paused until you resume.";
    $("pause-state").textContent = pause;
    $("resume").disabled = !s.paused_now;  // an expired timed pause is not in force
  }

  function renderProjects(m) {
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
      `${strengthWord(r.signal_strength)}, ${evidenceWords(r)}, last `, last);
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

    const more = el("details");
    more.append(el("summary", "Details", { "aria-label": `Details: ${label}` }));
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

  function renderRecords(m) {
    const injected = injectedIds(m);
    const rows = visibleRecords(m, injected);
    keepingFocus(() => {
      $("records").replaceChildren(...rows.map((r) => card(r, injected.has(r.id))));
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

  // -- loading, conditionally ----------------------------------------------------------------
  // The point in the past shown (at_seq or as_of), as query parameters; none: now.
  const pastQuery = () => (state.past ? { ...state.past } : {});

  async function load(force) {
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

  // true: redrawn, false: nothing changed (304), null: failed (the error is shown).
  async function refresh(force) {
    try {
      return await load(force);
    } catch (err) {
      fail(err);
      return null;
    }
  }

  // The preview shows the answer to the last question asked (an older one is dropped).
  let previewAsked = 0;
  async function preview() {
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

  // -- actions -------------------------------------------------------------------------------
  // Actions run one after another, in the order the person made them; none is dropped. After
  // each, focus goes to ``focus()`` (when given) or stays where it was.
  // ``done`` is the message (or a function giving it); ``quiet``: no refresh after it.
  let queue = Promise.resolve();
  function act(fn, done, focus, quiet) {
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
  function exportArchive() {
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
  async function confirmReplace(file) {
    // in the past, state.memory counts the events then: ask for today's count
    const m = state.asOf ? await api("GET", "/api/v1/memory") : state.memory;
    const now = m ? `your ${plural(m.event_count, "event", "events")}` : "your events";
    return window.confirm(`Replace your memory with “${file.name}”? This erases ${now} and ` +
      "your settings for real and puts the archive's events and settings in their place. " +
      "Export first if you may want them back.");
  }

  // What an import did and what is in memory now, as the CLI says it.
  function importWords(file, res) {
    if (!res) return "";
    const origin = res.archive_user_id !== res.user_id ? ` (archive of ${res.archive_user_id})` : "";
    return res.mode === "replace"
      ? `Replaced your memory with ${file.name}${origin}: ` +
        `${plural(res.events_total, "event", "events")} and the archive's settings.`
      : `Imported ${file.name}${origin}: ${plural(res.events_added, "event", "events")} added, ` +
        `${res.events_total} in memory.`;
  }

  // What a reset erased (events_removed) and what is left, as the CLI says it.
  function resetWords(chosen, res) {
    if (!res) return "";
    const what = chosen.scope === "all" ? "everything" : whereWords(chosen.scope);
    const left = `${res.events_remaining} left`;
    return res.events_removed
      ? `Memory erased (${what}): ${plural(res.events_removed, "event", "events")} ` +
        `erased, ${left}.`
      : `Nothing to erase in ${what}: it had no events; ${left}.`;
  }

  function setProject(p, ignore) {
    return act(() => api("POST", "/api/v1/settings", { project_ignore_global: { [p]: ignore } }),
      ignore ? `Project ${p} now ignores global memory.` : `Project ${p} uses global memory.`,
      () => $(`ignore-${p}`) || $("new-project"));
  }

  // GET /api/v1/explain/… ("Why?": the trace, derived) or /api/v1/timeline/… (the card's
  // evidence: the events, read from the log — cheap on a long history)
  function patternPath(r, what) {
    return `/api/v1/${what}/${encodeURIComponent(r.preference_type)}/` +
      `${encodeURIComponent(r.pattern)}${q({ project_id: projectOf(r.scope), ...pastQuery() })}`;
  }

  function forgetRow(r) {
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

  // Why? shows the answer to the last question asked: an older answer arriving later is
  // dropped. ``again``: the open panel is fetched anew (the point or the memory changed);
  // focus stays where it is.
  let whyAsked = 0;
  async function explain(r, opener, again) {
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
  function hideWhy() {
    whyAsked += 1;
    state.why = null;
    const inside = $("why").contains(document.activeElement);
    $("why").hidden = true;
    if (inside) focusOn($("h-inspector"));
  }

  function closeWhy() {
    hideWhy();
    focusOn(findKey(state.opener), $("h-inspector"));
  }

  // After a redraw: the open panel follows the point and the memory shown — fetched anew for
  // them (emptied meanwhile, never today's trace under a past note), or closed when the
  // record is not there (erased, or not yet at that point).
  function followWhy(m) {
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

  // -- looking back: a point in the past for the records, Why? and the prompt preview ---------
  // (GET /api/v1/memory, /explain and /prompt with at_seq; a date is sent as as_of once and
  // the event it resolves to is used from then on; docs/time-travel.md)
  function pastWords(a) {
    if (!a.events) return "before the first event";
    return `right after event #${a.at_seq} (${plural(a.events, "event", "events")} in, ` +
      `recorded ${localTime(a.recorded_at)})`;
  }

  let slideTimer = null;
  function renderHistory() {
    const a = state.asOf;
    const slider = $("history-seq");
    slider.max = String(state.hi);
    if (!slideTimer) slider.value = String(a ? a.at_seq : state.hi);
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

  function sliderLabel() {
    const v = Number($("history-seq").value);
    $("history-seq-value").textContent = v >= state.hi ? `#${v} (now)` : `#${v}`;
  }

  // ``point``: {at_seq} or {as_of}, null for now, or a function finding it (when it runs).
  function travel(point, focus) {
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
  // import leaves them). The daemon resolves at_seq to the last event at or before it, so
  // the next event after ``from`` is found by looking further ahead (doubling the step)
  // until an event answers, then narrowing down to the first one.
  async function resolveSeq(v) {
    const m = await api("GET", `/api/v1/memory${q({ at_seq: v })}`);
    return m.as_of ? m.as_of.at_seq : v;
  }

  async function nextEvent(from) {
    let lo = from; // no event in (from, lo]
    let hi = null; // an event after from, at or before hi
    for (let step = 1; hi === null; step *= 2) {
      const v = Math.min(from + step, state.hi);
      const r = await resolveSeq(v);
      if (r > from) hi = r;
      else if (v >= state.hi) return state.hi;
      else lo = v;
    }
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      const r = await resolveSeq(mid);
      if (r > from) hi = r;
      else lo = mid;
    }
    return hi;
  }

  function stepForward() {
    return travel(async () => {
      if (!state.asOf) return null; // now: nothing after it
      const n = await nextEvent(state.asOf.at_seq);
      return n >= state.hi ? null : { at_seq: n };
    }, () => $("history-seq"));
  }

  function slid() {
    clearTimeout(slideTimer);
    slideTimer = null;
    const v = Number($("history-seq").value);
    const now = v >= state.hi;
    if (now ? !state.past : state.past && state.past.at_seq === v) return Promise.resolve();
    return travel(now ? null : { at_seq: v });
  }

  // -- derivation: the version in force, a preview of a switch, the switch and switching back -
  // (GET/POST /api/v1/derivation, GET /api/v1/derivation/preview)
  async function loadDerivation() {
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

  function whereWords(scope) {
    return scope === "global" ? "global memory" : `project ${projectOf(scope) || scope}`;
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

  function previewSwitch() {
    const version = $("derivation-version").value;
    const project = $("preview-project").value;
    return act(async () => {
      const p = await api("GET", `/api/v1/derivation/preview${q({ version, project_id: project })}`);
      state.change = p;
      renderChange(p);
    }, () => (state.change ? `Preview of version ${state.change.to_version} ready.` : ""),
    () => $("h-derivation-result"), true);
  }

  function askSwitch(to, opener) {
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

  function doSwitch() {
    const version = state.switchTo;
    state.switchTo = null;
    $("derivation-dialog").close();
    return act(() => api("POST", "/api/v1/derivation", { version }),
      `Switched to derivation version ${version}.`,
      () => (!$("derivation-back").hidden ? $("derivation-back") : $("derivation-version")));
  }

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
    // Resume disables itself: focus goes to Pause, its counterpart.
    $("resume").addEventListener("click", () => act(
      () => api("POST", "/api/v1/settings", { paused: false }), "Learning resumed.",
      () => $("pause")));
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
      state.reset = { scope: opt.value, what: opt.textContent.toLowerCase() };
      $("reset-text").textContent = `This erases ${state.reset.what} for real: ` +
        "the raw events are deleted, not hidden. Export first if you may want them back.";
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
      clearTimeout(slideTimer);
      slideTimer = setTimeout(slid, 400);
    });
    $("history-seq").addEventListener("change", slid);
    $("history-seq").addEventListener("keydown", (ev) => {
      if ((ev.key !== "ArrowRight" && ev.key !== "ArrowUp") || ev.altKey || ev.ctrlKey ||
        ev.metaKey || ev.shiftKey) return;
      ev.preventDefault(); // not one number on: the next event
      clearTimeout(slideTimer);
      slideTimer = null;
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
    const idle = () => !document.hidden && !state.busy && !dialog.open && !switchDialog.open;
    document.addEventListener("visibilitychange", () => {
      if (idle()) refresh(false);
    });
    setInterval(() => {
      if (idle()) refresh(false);
    }, POLL_MS);
  }

  wire();
  refresh(true);
})();
