// The live figures: one EventSource on /admin/live shared by every view.
// It keeps the snapshots of the last 15 minutes, says whether it is live,
// and reconnects with backoff when the stream breaks or goes quiet.

import { get, message } from "./api.js";

/** Most snapshots kept: 15 minutes at the default 1 s interval. */
export const MAX_HISTORY = 900;
const HISTORY_SPAN_MS = 15 * 60 * 1000;
/**
 * No snapshot for this long (or three snapshot intervals, if longer) while
 * "live" means the stream is stuck.
 */
const QUIET_MS = 5000;

export class Live extends EventTarget {
  constructor() {
    super();
    this.status = "connecting";
    this.error = "";
    this.history = [];
    this.latest = null;
    this.updates = 0;
    this.attempt = 0;
    this.es = null;
    this.timer = 0;
    this.lastBeat = 0;
    this.gapMs = 1000;
    this.watchdog = setInterval(() => this.check(), 1000);
  }

  start() {
    this.connect();
  }

  connect() {
    clearTimeout(this.timer);
    if (this.es) this.es.close();
    this.set("connecting");
    const es = new EventSource("/admin/live");
    this.es = es;
    es.addEventListener("open", () => {
      this.attempt = 0;
      this.lastBeat = Date.now();
      this.set("live");
    });
    es.addEventListener("history", (ev) => {
      const data = parse(ev.data);
      if (!data) return;
      this.history = (data.snapshots || []).slice(-MAX_HISTORY);
      this.latest = this.history[this.history.length - 1] || this.latest;
      this.beat();
    });
    es.addEventListener("snapshot", (ev) => {
      const snap = parse(ev.data);
      if (!snap) return;
      const prev = this.history[this.history.length - 1];
      const gap = prev ? Date.parse(snap.t) - Date.parse(prev.t) : NaN;
      if (gap > 0) this.gapMs = gap;
      this.history.push(snap);
      const cutoff = Date.parse(snap.t) - HISTORY_SPAN_MS;
      let drop = Math.max(0, this.history.length - MAX_HISTORY);
      while (drop < this.history.length && Date.parse(this.history[drop].t) < cutoff) drop++;
      if (drop) this.history.splice(0, drop);
      this.latest = snap;
      this.beat();
    });
    es.addEventListener("error", () => {
      if (es !== this.es) return;
      if (es.readyState === EventSource.CLOSED) {
        // The server refused the stream (e.g. 401): ask why, then retry later.
        this.diagnose();
        this.retry();
      } else {
        this.set("disconnected"); // the browser reconnects by itself
      }
    });
  }

  beat() {
    this.lastBeat = Date.now();
    this.updates++;
    if (this.status !== "live") this.set("live");
    this.dispatchEvent(new Event("update"));
  }

  check() {
    const quiet = Math.max(QUIET_MS, 3 * this.gapMs);
    if (this.status === "live" && Date.now() - this.lastBeat > quiet) {
      this.error = `No live figures for ${Math.round(quiet / 1000)} s.`;
      this.retry();
    }
  }

  retry() {
    if (this.es) this.es.close();
    this.es = null;
    this.set("disconnected");
    const delay = Math.min(30, 2 ** this.attempt) * 1000 * (0.5 + Math.random() / 2);
    this.attempt++;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  async diagnose() {
    try {
      await get("/admin/live/snapshot");
    } catch (e) {
      this.error = message(e);
      this.set(this.status);
    }
  }

  set(status) {
    if (status === "live") this.error = "";
    this.status = status;
    this.dispatchEvent(new Event("status"));
  }
}

function parse(s) {
  try {
    return JSON.parse(s);
  } catch {
    return null;
  }
}
