// Capacity: tokens per minute consumed against each model's ceiling, the
// queue's depth, and the projected time until a model's TPM runs out, all
// from the live stream; plus the tokens consumed over the chosen range.

import { get, message } from "../api.js";
import { h, clear, panel, table, bar, liveTile } from "../dom.js";
import { timeChart, secs } from "../chart.js";
import { models } from "../models.js";
import { int, pct, seconds, clock } from "../format.js";

export default {
  id: "capacity",
  title: "Capacity",
  filters: ["model"],
  filterNote: "Live figures are fleet-wide; the model filter applies to the stored tokens below.",
  refreshMs: 60e3,
  render(root, ctx) {
    const tiles = {
      exhaustion: liveTile("Soonest TPM exhaustion", "cap-exhaustion"),
      saturation: liveTile("Highest saturation", "cap-saturation"),
      queue: liveTile("Queue depth", "cap-queue"),
      tpm: liveTile("Tokens per minute (all models)", "cap-tpm"),
    };
    const asOf = h("span", { class: "note" }, "waiting for the live stream…");
    const modelPanel = panel("TPM consumed vs ceiling, per model", { testid: "cap-models", wide: true });
    const tpmPanel = panel("Tokens per minute vs ceiling · last 15 min", { testid: "chart" });
    const tpmBox = h("div", { class: "chart" });
    tpmPanel.show(tpmBox);
    const queuePanel = panel("Queue depth · last 15 min", { testid: "chart" });
    const queueBox = h("div", { class: "chart" });
    queuePanel.show(queueBox);
    const stored = panel("Tokens per minute over the range", { testid: "cap-series", wide: true, note: "(from the event store; model filter applies)" });
    const storedBox = h("div", { class: "chart" });
    let storedChart = null;
    let tpmChart = null;
    let tpmKey = "";
    const queueChart = timeChart(queueBox, {
      series: [{ label: "depth" }, { label: "P0", dash: [4, 3] }, { label: "P1", dash: [4, 3] }, { label: "P2", dash: [4, 3] }, { label: "P3", dash: [4, 3] }],
      fmt: int,
      min: 0,
      integer: true,
    });

    root.append(
      h("div", { class: "section-head" }, h("h2", null, "Live"), asOf),
      h("div", { class: "tiles" }, Object.values(tiles).map((t) => t.el)),
      modelPanel.el,
      h("div", { class: "panels charts" }, tpmPanel.el, queuePanel.el),
      stored.el,
    );

    let cat = null;
    models().then((c) => {
      cat = c;
      if (ctx.live.latest) update(ctx.live);
    });

    const update = (live) => {
      const s = live.latest;
      if (!s) return;
      asOf.textContent = `as of ${clock(s.t)}`;
      const quota = s.quota || [];
      // Tokens per minute may be keyed by model id; the quota by model name.
      const tpm = {};
      for (const [k, n] of Object.entries(s.tokensPerMinute || {})) {
        const name = cat ? cat.nameOf(k) : k;
        tpm[name] = (tpm[name] || 0) + (n || 0);
      }
      const proj = new Map((s.projections || []).map((p) => [p.model, p.secondsToExhaustion]));
      const names = [...new Set([...quota.map((q) => q.model), ...Object.keys(tpm)])].sort();
      const soonest = [...proj.entries()].filter(([, v]) => v != null).sort((a, b) => a[1] - b[1])[0];
      tiles.exhaustion.set(soonest ? seconds(soonest[1]) : "none", soonest?.[1], soonest ? soonest[0] : "every model's TPM use is flat or falling", soonest && soonest[1] < 600 ? "bad" : soonest ? "warn" : "");
      const top = quota.reduce((m, x) => (x.saturation > (m?.saturation ?? -1) ? x : m), null);
      tiles.saturation.set(top ? pct(top.saturation) : "—", top?.saturation, top ? `${top.model} · ${int(top.tpmUsed)} of ${int(top.tpmCeiling)} TPM` : "no quota data", top && top.saturation >= 0.85 ? "bad" : top && top.saturation >= 0.7 ? "warn" : "");
      const q = s.queue || {};
      tiles.queue.set(int(q.depth), q.depth, Object.entries(q.byPriority || {}).map(([p, n]) => `${p} ${n}`).join(" · ") || "empty", q.depth > 0 ? "warn" : "");
      const all = Object.values(tpm).reduce((n, v) => n + (v || 0), 0);
      tiles.tpm.set(int(all), all, "consumed over the last minute");

      modelPanel.show(table({
        testid: "cap-table",
        empty: "No model reported.",
        columns: [
          { label: "model", cell: (m) => m },
          { label: "tokens/min consumed", num: true, cell: (m) => int(tpm[m] ?? 0) },
          { label: "TPM reserved / ceiling", num: true, cell: (m) => { const x = quota.find((y) => y.model === m); return x ? `${int(x.tpmUsed)} / ${int(x.tpmCeiling)}` : "—"; } },
          { label: "saturation", num: true, cell: (m) => pct(quota.find((y) => y.model === m)?.saturation) },
          { label: "", cell: (m) => { const v = quota.find((y) => y.model === m)?.saturation || 0; return bar(v, v >= 0.85 ? "bad" : v >= 0.7 ? "warn" : ""); } },
          { label: "RPM used / ceiling", num: true, cell: (m) => { const x = quota.find((y) => y.model === m); return x ? `${int(x.rpmUsed)} / ${int(x.rpmCeiling)}` : "—"; } },
          { label: "projected exhaustion", num: true, cell: (m) => (proj.get(m) != null ? "in " + seconds(proj.get(m)) : "not projected (flat or falling)") },
        ],
        rows: names,
      }));

      const hist = live.history;
      const xs = hist.map((x) => secs(x.t));
      if (names.join() !== tpmKey) {
        tpmKey = names.join();
        if (tpmChart) tpmChart.destroy();
        clear(tpmBox);
        tpmChart = timeChart(tpmBox, {
          series: names.flatMap((m) => [{ label: `${m} used` }, { label: `${m} ceiling`, dash: [6, 4] }]),
          fmt: int,
          min: 0,
        });
      }
      const tokensOf = (x, m) => {
        let n = null;
        for (const [k, v] of Object.entries(x.tokensPerMinute || {})) if ((cat ? cat.nameOf(k) : k) === m) n = (n || 0) + (v || 0);
        return n;
      };
      const cols = names.flatMap((m) => [
        hist.map((x) => tokensOf(x, m)),
        hist.map((x) => (x.quota || []).find((y) => y.model === m)?.tpmCeiling ?? null),
      ]);
      tpmChart.set(xs, ...cols);
      queueChart.set(xs, hist.map((x) => x.queue?.depth ?? null), ...["P0", "P1", "P2", "P3"].map((p) => hist.map((x) => x.queue?.byPriority?.[p] ?? null)));
    };
    ctx.onLive(update);

    return {
      async load(signal) {
        try {
          const r = await get("/admin/cost/series", { ...ctx.range(), ...ctx.filters() }, signal);
          const pts = r.points || [];
          const perMin = (r.stepSeconds || 60) / 60;
          if (!storedChart) {
            stored.show(h("p", { class: "note" }), storedBox);
            storedChart = timeChart(storedBox, { series: [{ label: "tokens in /min" }, { label: "tokens out /min" }], fmt: int, min: 0 });
          }
          stored.el.dataset.state = "ready";
          const total = pts.reduce((n, p) => n + (p.tokensIn || 0) + (p.tokensOut || 0), 0);
          stored.body.querySelector(".note").textContent = `${int(total)} tokens in the range, steps of ${seconds(r.stepSeconds)}.`;
          storedChart.set(pts.map((p) => secs(p.t)), pts.map((p) => (p.tokensIn || 0) / perMin), pts.map((p) => (p.tokensOut || 0) / perMin));
        } catch (e) {
          if (e.name === "AbortError") throw e;
          if (storedChart) { storedChart.destroy(); storedChart = null; }
          stored.error(message(e));
        }
      },
      dispose() {
        queueChart.destroy();
        if (tpmChart) tpmChart.destroy();
        if (storedChart) storedChart.destroy();
      },
    };
  },
};
