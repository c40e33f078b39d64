// fmgate dashboards: the frame around the six views. It owns the hash
// route (#/view?range=…&graph=…), the time range and version filters, the
// live connection indicator, and the load/refresh cycle of the current view.

import "./style.css";
import { get, message, UNAUTHORIZED } from "./api.js";
import { clock } from "./format.js";
import { h, clear } from "./dom.js";
import { Live } from "./live.js";
import ops from "./views/ops.js";
import cost from "./views/cost.js";
import quality from "./views/quality.js";
import capacity from "./views/capacity.js";
import canary from "./views/canary.js";
import keys from "./views/apikeys.js";

const VIEWS = { ops, cost, quality, capacity, canary, keys };
const RANGES = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 24 * 3600e3, "7d": 7 * 24 * 3600e3 };
const DIMS = ["graph", "prompt", "model", "tool"];
const $ = (id) => document.getElementById(id);

const live = new Live();
let current = null; // {view, instance, controller, timer}
let state = parseHash();

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [name, query] = raw.split("?");
  const q = new URLSearchParams(query || "");
  const s = { view: VIEWS[name] ? name : "ops", range: q.get("range") || "1h", from: q.get("from") || "", to: q.get("to") || "" };
  if (!RANGES[s.range] && s.range !== "custom") s.range = "1h";
  for (const d of DIMS) s[d] = q.get(d) || "";
  for (const [k, v] of q) if (!(k in s)) s[k] = v; // view-specific (drill, dim, a, b…)
  return s;
}

function hashOf(s) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(s)) if (k !== "view" && v !== "" && v != null) q.set(k, v);
  const qs = q.toString();
  return `#/${s.view}${qs ? "?" + qs : ""}`;
}

/**
 * Change the state. With reset, view-specific keys (drill-down, canary
 * picks) are dropped and only the range and version filters carry over.
 */
function navigate(patch, { reset = false } = {}) {
  const next = { ...(reset ? pick(state, ["view", "range", "from", "to", ...DIMS]) : state), ...patch };
  for (const [k, v] of Object.entries(next)) if (v === "" || v == null) delete next[k];
  const target = hashOf({ range: "1h", ...next });
  if (target === location.hash) return render();
  location.hash = target;
}

function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

/** The current range as absolute RFC 3339 times. */
function range() {
  if (state.range === "custom" && state.from && state.to) {
    return { from: new Date(state.from).toISOString(), to: new Date(state.to).toISOString() };
  }
  const to = new Date();
  const d = RANGES[state.range] || RANGES["1h"];
  return { from: new Date(to.getTime() - d).toISOString(), to: to.toISOString() };
}

function filters(view) {
  const out = {};
  for (const d of view.filters || []) if (state[d]) out[d] = state[d];
  return out;
}

// ---- filter bar ----------------------------------------------------------

function syncFilterBar(view) {
  for (const b of document.querySelectorAll("[data-range]")) b.setAttribute("aria-pressed", String(b.dataset.range === state.range));
  // A view that reads no time range (noRange) shows no range buttons.
  document.querySelector(".ranges").hidden = !!view.noRange;
  $("custom").hidden = !!view.noRange || state.range !== "custom";
  if (state.range === "custom" && !view.noRange) {
    $("custom-from").value = localInput(state.from || new Date(Date.now() - 3600e3));
    $("custom-to").value = localInput(state.to || new Date());
  }
  for (const d of DIMS) {
    const label = document.querySelector(`[data-filter="${d}"]`);
    label.hidden = !(view.filters || []).includes(d);
    const sel = $("f-" + d);
    ensureOption(sel, state[d]);
    sel.value = state[d];
  }
  $("filter-note").textContent = view.filterNote || "";
  for (const a of document.querySelectorAll("#tabs a")) a.setAttribute("aria-current", a.dataset.view === state.view ? "page" : "false");
}

function localInput(t) {
  const d = new Date(t);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

function ensureOption(sel, v) {
  if (v && ![...sel.options].some((o) => o.value === v)) sel.append(h("option", { value: v }, v));
}

let versionsKey = "";
let versionsPromise = null;

/** The versions seen in the current range, fetched at most once a minute per range. */
function versions() {
  const key = state.range + "|" + state.from + "|" + state.to + "|" + Math.floor(Date.now() / 60e3);
  if (key !== versionsKey || !versionsPromise) {
    versionsKey = key;
    versionsPromise = get("/admin/cost/versions", range());
    versionsPromise.then(fillVersions, (e) => {
      $("filter-note").textContent = `Version filters unavailable: ${message(e)}`;
      versionsKey = "";
    });
  }
  return versionsPromise;
}

function fillVersions(v) {
  for (const d of DIMS) {
    const sel = $("f-" + d);
    const list = [...(v[d] || [])].sort((a, b) => Date.parse(b.lastSeen) - Date.parse(a.lastSeen)).slice(0, 100);
    clear(sel).append(h("option", { value: "" }, "all"), ...list.map((x) => h("option", { value: x.version }, x.version || "(none)")));
    ensureOption(sel, state[d]);
    sel.value = state[d];
  }
}

function wireFilterBar() {
  for (const b of document.querySelectorAll("[data-range]")) {
    b.addEventListener("click", () => {
      if (b.dataset.range === "custom") {
        const r = range();
        navigate({ range: "custom", from: r.from, to: r.to });
      } else navigate({ range: b.dataset.range, from: "", to: "" });
    });
  }
  $("custom").addEventListener("submit", (e) => {
    e.preventDefault();
    const from = new Date($("custom-from").value);
    const to = new Date($("custom-to").value);
    if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime()) || from >= to) {
      banner("Custom range: 'from' must be a time before 'to'.");
      return;
    }
    navigate({ range: "custom", from: from.toISOString(), to: to.toISOString() });
  });
  for (const d of DIMS) $("f-" + d).addEventListener("change", (e) => navigate({ [d]: e.target.value }));
  $("refresh").addEventListener("click", () => load());
  for (const a of document.querySelectorAll("#tabs a")) {
    a.addEventListener("click", (e) => {
      e.preventDefault();
      navigate({ view: a.dataset.view }, { reset: true });
    });
  }
}

// ---- banner, live indicator, status ----------------------------------------

function banner(msg, link) {
  const b = $("banner");
  clear(b).append(msg || "");
  if (link) b.append(" ", h("a", { href: link.href }, link.text));
  b.hidden = !msg;
}

function showLive() {
  const el = $("live");
  el.dataset.state = live.status;
  el.textContent = { live: "● live", connecting: "connecting…", disconnected: "disconnected · reconnecting" }[live.status] || live.status;
  el.title = live.error ? `Live figures: ${live.error}` : "Live figures from /admin/live; click to reconnect";
}

// ---- the current view ------------------------------------------------------

function render() {
  const next = parseHash();
  // A change of the view's own keys only (a drill-down step) redraws just
  // the part that follows them, not every panel of the view.
  if (current && current.view.id === next.view && current.instance.follow && onlyChanged(state, next, current.view.localKeys || [])) {
    state = next;
    current.ctx.state = { ...next };
    run("follow", (signal) => current.instance.follow(current.ctx.state, signal));
    return;
  }
  state = next;
  const view = VIEWS[state.view];
  if (current) dispose();
  banner("");
  syncFilterBar(view);
  if ((view.filters || []).length || view.usesVersions) versions();
  const root = clear($("view"));
  root.dataset.view = view.id;
  document.title = `${view.title} · fmgate`;
  const listeners = [];
  const ctx = {
    state: { ...state },
    range,
    filters: () => filters(view),
    versions,
    live,
    navigate,
    reload: () => load(),
    onLive(fn) {
      const f = () => fn(live);
      live.addEventListener("update", f);
      listeners.push(f);
      if (live.latest) f();
    },
  };
  let instance = {};
  try {
    instance = view.render(root, ctx) || {};
  } catch (e) {
    banner(`The ${view.title} view could not start: ${e.message}`);
  }
  current = { view, instance, ctx, listeners, timer: 0, controllers: {}, pending: 0 };
  load();
}

/** Whether a and b differ in some of keys and in nothing else. */
function onlyChanged(a, b, keys) {
  const all = new Set([...Object.keys(a), ...Object.keys(b)]);
  let changed = false;
  for (const k of all) {
    if ((a[k] || "") === (b[k] || "")) continue;
    if (!keys.includes(k)) return false;
    changed = true;
  }
  return changed;
}

function dispose() {
  clearTimeout(current.timer);
  for (const c of Object.values(current.controllers)) c.abort();
  for (const f of current.listeners) live.removeEventListener("update", f);
  if (current.instance.dispose) current.instance.dispose();
  current = null;
}

/** Loads (or refreshes) the whole view. */
function load() {
  if (!current || !current.instance.load) {
    $("view").dataset.state = "ready";
    return;
  }
  clearTimeout(current.timer);
  run("load", (signal) => current.instance.load(signal));
}

/**
 * Runs one loading task of the current view; a task of the same slot still
 * running is cancelled. The view is "ready" when no task runs; the time of
 * the last task is shown and kept in data-load-ms.
 */
async function run(slot, task) {
  const cur = current;
  const root = $("view");
  if (cur.controllers[slot]) cur.controllers[slot].abort();
  const controller = new AbortController();
  cur.controllers[slot] = controller;
  cur.pending++;
  root.dataset.state = "loading";
  const t0 = performance.now();
  try {
    await task(controller.signal);
  } catch (e) {
    if (e.name !== "AbortError") banner(message(e));
  }
  cur.pending--;
  if (controller.signal.aborted || current !== cur) return;
  const took = Math.round(performance.now() - t0);
  if (cur.pending === 0) root.dataset.state = "ready";
  root.dataset.loadMs = String(took);
  const every = cur.view.refreshMs ? ` · refreshes every ${Math.round(cur.view.refreshMs / 60e3)} min` : "";
  $("status").textContent = `${cur.view.title} ${slot === "load" ? "loaded" : "updated"} in ${took} ms at ${clock(new Date())}${every}`;
  if (slot === "load" && cur.view.refreshMs) cur.timer = setTimeout(load, cur.view.refreshMs);
}

// ---- start -----------------------------------------------------------------

window.addEventListener(UNAUTHORIZED, () =>
  banner("The admin API refused the admin token: the session has ended or the token changed.", { href: "/dashboard/login", text: "Sign in again" }));
window.addEventListener("hashchange", render);
// A bug in a view must show, not leave a half-drawn page.
window.addEventListener("error", (e) => banner(`Page error: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => banner(`Page error: ${message(e.reason)}`));
live.addEventListener("status", showLive);
$("live").addEventListener("click", () => live.connect());
wireFilterBar();
showLive();
live.start();
render();
