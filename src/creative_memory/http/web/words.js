// Words and times: what the page says about records, counts and places, in the viewer's
// language and local time zone.

// -- words, times --------------------------------------------------------------------------
export function projectOf(scope) {
  return scope && scope.startsWith("project:") ? scope.slice("project:".length) : null;
}

const TIME = { year: "numeric", month: "short", day: "numeric", hour: "2-digit",
  minute: "2-digit", timeZoneName: "short" };
export const localTime = (iso) => new Date(iso).toLocaleString(undefined, TIME);
export const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
export const human = (pattern) => pattern.replace(/[_-]+/g, " ").trim() || pattern;
export const fmt = (n) => (typeof n === "number" ? n.toFixed(3) : "");

export function ago(iso) {
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

export function strengthWord(x) {
  if (x >= 0.75) return "strong";
  if (x >= 0.4) return "moderate";
  return "weak";
}

export function evidenceWords(r) {
  const neg = plural(r.reject_count, "rejection", "rejections");
  const pos = plural(r.accept_count, "acceptance", "acceptances");
  if (!r.accept_count && !r.reject_count) {
    return plural(r.source_event_count, "signal", "signals");
  }
  const first = r.polarity === "negative" ? [neg, r.accept_count ? pos : ""]
    : [pos, r.reject_count ? neg : ""];
  return first.filter(Boolean).join(", ");
}

export function whereWords(scope) {
  return scope === "global" ? "global memory" : `project ${projectOf(scope) || scope}`;
}
