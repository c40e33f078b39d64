// Live ops: the last minute's latency, errors, TTFT, tier mix, queue,
// breakers and fleet quota from the live stream (updated every second
// without reloading), the last 15 minutes as charts, and the stored history
// of the chosen range and versions from the event store.

import { get, message } from "../api.js";
import { h, clear, panel, table, bar, liveTile } from "../dom.js";
import { timeChart, secs, COLORS } from "../chart.js";
import { models } from "../models.js";
import { int, ms, pct, usd, clock, seconds } from "../format.js";

/** Tiers that are never a model: the answer came from a fallback store. */
const STORE_TIERS = new Set(["cache", "faq", "graceful"]);

export default {
  id: "ops",
  title: "Live ops",
  filters: ["graph", "prompt", "model", "tool"],
  filterNote: "Live figures are fleet-wide; the range and version filters apply to the stored history below.",
  refreshMs: 60e3,
  render(root, ctx) {
    const tiles = {
      turns: liveTile("Turns (last 60 s)", "live-turns"),
      p50: liveTile("Latency p50", "live-p50"),
      p95: liveTile("Latency p95", "live-p95"),
      p99: liveTile("Latency p99", "live-p99"),
      errors: liveTile("Error rate", "live-error-rate"),
      ttft: liveTile("TTFT p50", "live-ttft"),
      fallback: liveTile("Served by fallback", "live-fallbacks"),
      queue: liveTile("Queue depth", "live-queue"),
      saturation: liveTile("Fleet saturation (max)", "live-saturation"),
      cost: liveTile("Cost per minute", "live-cost"),
    };
    const asOf = h("span", { class: "note", dataset: { testid: "live-asof" } }, "waiting for the live stream…");
    const stateNote = h("p", { class: "error", role: "alert", hidden: true, dataset: { testid: "state-error" } });
    const tierPanel = panel("Tier mix (last 60 s)", { testid: "tier-mix" });
    const breakerPanel = panel("Breakers", { testid: "breakers" });
    const quotaPanel = panel("Quota saturation (fleet)", { testid: "quota" });
    const codePanel = panel("Errors by code (last 60 s)", { testid: "error-codes" });
    const charts = [
      ["Latency (ms)", [{ label: "p50" }, { label: "p95" }, { label: "p99" }], ms, (s) => [s.latencyMs?.p50, s.latencyMs?.p95, s.latencyMs?.p99]],
      ["Time to first token (ms)", [{ label: "p50" }, { label: "p95" }, { label: "p99" }], ms, (s) => [s.ttftMs?.p50, s.ttftMs?.p95, s.ttftMs?.p99]],
      ["Turns per second", [{ label: "turns/s" }], (v) => v.toFixed(2), (s) => [s.turnsPerSecond]],
      ["Error rate", [{ label: "errors", color: "#c92a2a" }], (v) => pct(v), (s) => [s.errorRate]],
      ["Queue depth", [{ label: "queued" }], int, (s) => [s.queue?.depth], true],
    ].map(([title, series, fmt, pickFn, integer]) => {
      const box = h("div", { class: "chart" });
      const p = panel(title + " · last 15 min", { testid: "chart" });
      p.show(box);
      return { p, box, series, fmt, pickFn, integer, chart: null };
    });
    const satBox = h("div", { class: "chart" });
    const satPanel = panel("Quota saturation · last 15 min", { testid: "chart" });
    satPanel.show(satBox);
    let satChart = null;
    let satModels = "";

    const stored = panel("Stored history · turns, failed spans, fallback turns", { testid: "series", wide: true, note: "(range and version filters apply)" });
    const storedBox = h("div", { class: "chart" });
    const latBox = h("div", { class: "chart" });
    let storedChart = null;
    let latChart = null;

    root.append(
      h("div", { class: "section-head" }, h("h2", null, "Live"), asOf),
      stateNote,
      h("div", { class: "tiles" }, Object.values(tiles).map((t) => t.el)),
      h("div", { class: "panels" }, tierPanel.el, breakerPanel.el, quotaPanel.el, codePanel.el),
      h("div", { class: "panels charts" }, charts.map((c) => c.p.el), satPanel.el),
      stored.el,
    );
    for (const c of charts) c.chart = timeChart(c.box, { series: c.series, fmt: c.fmt, integer: c.integer });

    let cat = null;
    models().then((c) => {
      cat = c;
      if (ctx.live.latest) update(ctx.live);
    });

    const update = (live) => {
      const s = live.latest;
      if (!s) return;
      asOf.textContent = `as of ${clock(s.t)} · window ${s.windowSeconds || 60} s · ${live.history.length} snapshots kept`;
      stateNote.textContent = s.stateError ? `Some figures could not be read: ${s.stateError}` : "";
      stateNote.hidden = !s.stateError;
      tiles.turns.set(int(s.turns), s.turns, `${(s.turnsPerSecond || 0).toFixed(2)} per second`);
      tiles.p50.set(ms(s.latencyMs?.p50), s.latencyMs?.p50);
      tiles.p95.set(ms(s.latencyMs?.p95), s.latencyMs?.p95);
      tiles.p99.set(ms(s.latencyMs?.p99), s.latencyMs?.p99);
      tiles.errors.set(pct(s.errorRate, 2), s.errorRate, `${int(s.errors)} failed turns`, s.errorRate > 0.05 ? "bad" : s.errorRate > 0.01 ? "warn" : "");
      tiles.ttft.set(ms(s.ttftMs?.p50), s.ttftMs?.p50, `p95 ${ms(s.ttftMs?.p95)} · p99 ${ms(s.ttftMs?.p99)}`);

      const quota = s.quota || [];
      const prim = cat?.primary || "";
      // Tiers come keyed by model name, model id or fallback tier: merge by name.
      const merged = new Map();
      for (const [k, n] of Object.entries(s.tiers || {})) {
        const name = cat ? cat.nameOf(k) : k;
        merged.set(name, (merged.get(name) || 0) + n);
      }
      const tiers = [...merged.entries()].sort((a, b) => b[1] - a[1]);
      const served = tiers.reduce((n, [, v]) => n + v, 0);
      const isFallback = (t) => (prim ? t !== prim : STORE_TIERS.has(t));
      const fb = tiers.filter(([t]) => isFallback(t)).reduce((n, [, v]) => n + v, 0);
      tiles.fallback.set(int(fb), fb, served ? `${pct(fb / served)} of ${int(served)} answered turns${prim ? " (not " + prim + ")" : ""}` : "no answered turns", fb > 0 ? "warn" : "");

      const q = s.queue || {};
      const prios = Object.entries(q.byPriority || {}).filter(([, n]) => n > 0).map(([p, n]) => `${p} ${n}`).join(" · ");
      tiles.queue.set(int(q.depth), q.depth, `${prios || "empty"}${q.oldestWaitMs ? " · oldest " + ms(q.oldestWaitMs) : ""}`, q.depth > 0 ? "warn" : "");
      const top = quota.reduce((m, x) => (x.saturation > (m?.saturation ?? -1) ? x : m), null);
      tiles.saturation.set(top ? pct(top.saturation) : "—", top?.saturation, top ? top.model : "no quota data", top && top.saturation >= 0.85 ? "bad" : top && top.saturation >= 0.7 ? "warn" : "");
      tiles.cost.set(usd(s.costUsdPerMinute, 4), s.costUsdPerMinute, "over the last minute");

      tierPanel.show(table({
        testid: "tiers",
        empty: "No answered turns in the last minute.",
        columns: [
          { label: "tier", cell: ([t]) => h("span", null, t, isFallback(t) ? h("span", { class: "badge warn" }, "fallback") : null) },
          { label: "turns", num: true, cell: ([, n]) => int(n) },
          { label: "share", cell: ([t, n]) => bar(served ? n / served : 0, isFallback(t) ? "warn" : "") },
        ],
        rows: tiers,
      }));
      breakerPanel.show(table({
        testid: "breaker-list",
        empty: "No breakers reported.",
        columns: [
          { label: "breaker", cell: (b) => b.name },
          { label: "state", cell: (b) => h("span", { class: "badge " + (b.state === "open" ? "bad" : b.state === "half_open" ? "warn" : "ok"), dataset: { state: b.state } }, b.state.replace("_", "-")) },
        ],
        rows: s.breakers || [],
      }));
      quotaPanel.show(table({
        testid: "quota-list",
        empty: "No quota ledger reported.",
        columns: [
          { label: "model", cell: (x) => x.model },
          { label: "TPM used / ceiling", num: true, cell: (x) => `${int(x.tpmUsed)} / ${int(x.tpmCeiling)}` },
          { label: "saturation", num: true, cell: (x) => pct(x.saturation) },
          { label: "", cell: (x) => bar(x.saturation, x.saturation >= 0.85 ? "bad" : x.saturation >= 0.7 ? "warn" : "") },
        ],
        rows: quota,
      }));
      const codes = Object.entries(s.errorsByCode || {}).sort((a, b) => b[1] - a[1]);
      codePanel.show(table({
        testid: "codes",
        empty: "No errors in the last minute.",
        columns: [{ label: "code", cell: ([c]) => c }, { label: "turns", num: true, cell: ([, n]) => int(n) }],
        rows: codes,
      }));

      const hist = live.history;
      const xs = hist.map((x) => secs(x.t));
      for (const c of charts) {
        const cols = c.series.map(() => []);
        for (const x of hist) c.pickFn(x).forEach((v, i) => cols[i].push(v ?? null));
        c.chart.set(xs, ...cols);
      }
      const models = [...new Set(hist.flatMap((x) => (x.quota || []).map((m) => m.model)))].sort();
      if (models.join() !== satModels) {
        satModels = models.join();
        if (satChart) satChart.destroy();
        clear(satBox);
        satChart = timeChart(satBox, { series: models.map((m) => ({ label: m })), fmt: (v) => pct(v, 0), min: 0 });
      }
      if (satChart) {
        satChart.set(xs, ...models.map((m) => hist.map((x) => (x.quota || []).find((q2) => q2.model === m)?.saturation ?? null)));
      }
    };
    ctx.onLive(update);

    return {
      async load(signal) {
        try {
          const r = await get("/admin/cost/series", { ...ctx.range(), ...ctx.filters() }, signal);
          const pts = r.points || [];
          const xs = pts.map((p) => secs(p.t));
          if (!storedChart) {
            stored.show(
              h("p", { class: "note" }, ""),
              h("div", { class: "pair" }, storedBox, latBox),
            );
            storedChart = timeChart(storedBox, { series: [{ label: "turns" }, { label: "failed spans", color: "#c92a2a" }, { label: "fallback turns", color: "#e8590c" }], fmt: int, integer: true, min: 0 });
            latChart = timeChart(latBox, { series: [{ label: "avg span latency", color: COLORS[3], sparse: true }], fmt: ms, min: 0 });
          }
          const sum = (k) => pts.reduce((n, p) => n + (p[k] || 0), 0);
          stored.body.querySelector(".note").textContent =
            `${int(sum("turns"))} turns, ${int(sum("errors"))} failed spans, ${int(sum("fallbacks"))} turns served by a fallback tier in ${int(pts.length)} steps of ${seconds(r.stepSeconds)}.`;
          stored.el.dataset.state = "ready";
          storedChart.set(xs, pts.map((p) => p.turns), pts.map((p) => p.errors), pts.map((p) => p.fallbacks));
          latChart.set(xs, pts.map((p) => (p.turns || p.spans ? p.avgLatencyMs : null)));
        } catch (e) {
          if (e.name === "AbortError") throw e;
          if (storedChart) { storedChart.destroy(); latChart.destroy(); storedChart = latChart = null; }
          stored.error(message(e));
        }
      },
      dispose() {
        for (const c of charts) c.chart.destroy();
        if (satChart) satChart.destroy();
        if (storedChart) { storedChart.destroy(); latChart.destroy(); }
      },
    };
  },
};
