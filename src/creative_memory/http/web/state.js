// The page's shared, mutable state: one object, imported by every module that reads or
// changes it.

export const state = {
  memory: null, etag: "", busy: 0, opener: null, timelines: new Map(), pending: new Set(),
  past: null, asOf: null, hi: 0, projects: new Set(), derivation: null, change: null,
  switchTo: null, switchOpener: null, reset: null, why: null,
  slideTimer: null, // the history slider's pending move (history.js, app.js)
  loadFailed: false, // the last load failed: the next one is full, and clears its error
};
