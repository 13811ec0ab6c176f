// Talking to /api/v1: every request carries X-Requested-With (the daemon's CSRF check) and the
// session cookie; a refusal is thrown as an Error with the problem's detail (and its type).

import { state } from "./state.js";
import { $ } from "./dom.js";
import { projectOf } from "./words.js";

export async function send(method, path, body, raw, headers) {
  const h = { "X-Requested-With": "creative-memory", ...(headers || {}) };
  let payload;
  if (body !== undefined) {
    h["Content-Type"] = "application/json";
    payload = raw ? body : JSON.stringify(body);
  }
  try {
    return await fetch(path, { method, headers: h, body: payload, credentials: "same-origin",
      cache: "no-store" });
  } catch {
    // no answer at all (the browser says only "Failed to fetch")
    throw new Error("The memory daemon is not answering: is “creative-memory serve” still " +
      "running? What this page shows may be out of date; it tries again every few seconds.");
  }
}

const SIGNED_OUT = "Signed out (the daemon restarted, or the session ended): run " +
  "“creative-memory ui” for a new sign-in link.";

export async function parse(res) {
  const type = res.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await res.json() : await res.text();
  if (!res.ok) {
    if (res.status === 401) $("whoami").textContent = SIGNED_OUT;
    const detail = data && data.detail ? data.detail : res.statusText;
    const field = data && data.field ? ` (${data.field})` : "";
    const err = new Error(res.status === 401 ? SIGNED_OUT : `${detail}${field}`);
    err.type = data && data.type ? data.type : ""; // the problem type (dom.js, fail)
    throw err;
  }
  return data;
}

export async function api(method, path, body, raw) {
  return parse(await send(method, path, body, raw));
}

export const q = (params) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") s.set(k, String(v));
  }
  const t = s.toString();
  return t ? `?${t}` : "";
};

// The point in the past shown (at_seq or as_of), as query parameters; none: now.
export const pastQuery = () => (state.past ? { ...state.past } : {});

// GET /api/v1/explain/… ("Why?": the trace, derived) or /api/v1/timeline/… (the card's
// evidence: the events, read from the log — cheap on a long history)
export function patternPath(r, what) {
  return `/api/v1/${what}/${encodeURIComponent(r.preference_type)}/` +
    `${encodeURIComponent(r.pattern)}${q({ project_id: projectOf(r.scope), ...pastQuery() })}`;
}
