// Cost: the total, cost per turn, per feature, per user segment, per
// locale, per model and per prompt version for the range and versions
// chosen, with what the vendors' prompt caches read, wrote and saved; the
// cost over time; a drill-down feature → users → turns → one turn's span
// waterfall; and the anomaly lists (top users, turns beyond 5σ, features
// getting dearer).

import { get, message } from "../api.js";
import { h, panel, table, tile, bar, MAX_ROWS } from "../dom.js";
import { timeChart, secs } from "../chart.js";
import { int, usd, usdTurn, ms, pct, datetime, short, score, seconds } from "../format.js";
import { waterfall, tallies, MAX_SPANS } from "./waterfall.js";
import { payloadPanel } from "./payload.js";
import { models } from "../models.js";
import { noKey, keyTitle } from "../keys.js";

/** The seed's anomaly ceiling: $0.18 per user per month. */
const USER_CEILING_PER_MONTH = 0.18;
const MONTH_MS = 30 * 24 * 3600e3;
/**
 * The shortest range over which a user's cost is compared with the monthly
 * ceiling: over a few hours the pro-rated ceiling is a fraction of a cent and
 * a single turn would put every user "over".
 */
const MIN_CEILING_RANGE_MS = 7 * 24 * 3600e3;

/** The ceiling pro-rated to a range of spanMs, and whether comparing makes sense. */
export function userCeiling(spanMs) {
  const ceiling = USER_CEILING_PER_MONTH * (spanMs / MONTH_MS);
  const days = spanMs / (24 * 3600e3);
  const how = `$${USER_CEILING_PER_MONTH.toFixed(2)} per user per month × ${days < 1 ? (days * 24).toFixed(1) + " h" : days.toFixed(1) + " days"} / 30 days = ${usdTurn(ceiling)}`;
  return { ceiling, meaningful: spanMs >= MIN_CEILING_RANGE_MS, how };
}

/** Whether a cost row's spans read, wrote or saved anything through a prompt cache. */
export function hasCache(r) {
  return !!(r && (r.cacheReadTokens || r.cacheWriteTokens || r.cacheSavedUsd));
}

/**
 * The prompt cache's columns of a cost table: tokens read and written, the
 * share of input tokens read, the money saved (negative when writes cost
 * more than reads saved). None when no row has any: a deployment without
 * prompt caching sees no empty columns.
 */
export function cacheCols(rows) {
  if (!rows.some(hasCache)) return [];
  return [
    { label: "cache read", num: true, cell: (x) => int(x.cacheReadTokens) },
    { label: "cache write", num: true, cell: (x) => int(x.cacheWriteTokens) },
    { label: "read %", num: true, cell: (x) => pct(x.cacheReadRatio), title: (x) => `${int(x.cacheReadTokens)} of ${int(x.tokensIn)} input tokens read from the prompt cache` },
    { label: "saved", num: true, cell: (x) => usd(x.cacheSavedUsd) },
  ];
}

export default {
  id: "cost",
  title: "Cost",
  filters: ["graph", "prompt", "model", "tool"],
  filterNote: "With a prompt, model or tool filter, costs are those of the matching spans. The anomaly lists cover the range only.",
  refreshMs: 60e3,
  // The drill-down's keys: changing only these redraws only the drill-down.
  localKeys: ["feature", "user", "trace"],
  render(root, ctx) {
    let st = ctx.state;
    const tiles = panel("Totals", { testid: "cost-totals", wide: true });
    const series = panel("Cost over time", { testid: "cost-series", wide: true });
    const seriesBox = h("div", { class: "chart" });
    let chart = null;
    const drill = panel("Per feature, drill-down", { testid: "drill", wide: true, note: "(click a row to go one level down: feature → users → turns → spans)" });
    // Per model and per prompt version, with the prompt cache's columns:
    // each the page's width, for theirs.
    const breakdowns = [
      ["tier", "Per user segment (tier)", "by-tier"],
      ["locale", "Per locale", "by-locale"],
      ["model", "Per model", "by-model", true],
      ["prompt", "Per prompt version", "by-prompt", true],
    ].map(([by, title, testid, cache = false]) => ({ by, cache, p: panel(title, { testid, wide: cache }) }));
    const topUsers = panel("Top 100 users by cost", { testid: "top-users" });
    const anomalies = panel("Turns beyond 5σ of the median cost", { testid: "anomalies" });
    const rising = panel("Features getting dearer per turn", { testid: "rising" });

    root.append(
      tiles.el,
      series.el,
      drill.el,
      h("div", { class: "panels" }, breakdowns.filter((b) => !b.cache).map((b) => b.p.el)),
      ...breakdowns.filter((b) => b.cache).map((b) => b.p.el),
      h("div", { class: "section-head" }, h("h2", null, "Anomalies")),
      h("div", { class: "panels" }, topUsers.el, anomalies.el, rising.el),
    );

    const drillTo = (patch) => ctx.navigate({ feature: "", user: "", trace: "", ...patch });

    const costCols = (keyLabel, keyCell) => [
      { label: keyLabel, cell: keyCell, title: (r) => r.key },
      { label: "cost", num: true, cell: (r) => usd(r.costUsd) },
      { label: "turns", num: true, cell: (r) => int(r.turns) },
      { label: "$/turn", num: true, cell: (r) => usdTurn(r.costPerTurn) },
    ];

    async function loadTotals(signal, q) {
      try {
        const r = await get("/admin/cost", { by: "total", ...q }, signal);
        const t = r.total || {};
        tiles.show(h("div", { class: "tiles" },
          tile("Total cost", usd(t.costUsd), { testid: "cost-total", raw: t.costUsd }),
          tile("Turns", int(t.turns), { testid: "cost-turns", raw: t.turns }),
          tile("Cost per turn", usdTurn(t.costPerTurn), { testid: "cost-per-turn", raw: t.costPerTurn }),
          tile("Tokens", `${int(t.tokensIn)} in`, { testid: "cost-tokens", raw: (t.tokensIn || 0) + (t.tokensOut || 0), sub: `${int(t.tokensOut)} out` }),
          tile("Spans", int(t.spans), { testid: "cost-spans", raw: t.spans, sub: `${int(t.errors)} failed spans · ${int(t.fallbacks)} fallback turns` }),
          hasCache(t)
            ? tile("Prompt cache", `${pct(t.cacheReadRatio)} read`, { testid: "cost-cache", raw: t.cacheReadRatio,
              sub: `${int(t.cacheReadTokens)} read · ${int(t.cacheWriteTokens)} written · ${usd(t.cacheSavedUsd)} saved` })
            : null,
        ));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        tiles.error(message(e));
      }
    }

    async function loadSeries(signal, q) {
      try {
        const r = await get("/admin/cost/series", q, signal);
        const pts = r.points || [];
        if (!chart) {
          series.show(h("p", { class: "note" }), seriesBox);
          chart = timeChart(seriesBox, { series: [{ label: "cost per step" }], fmt: (v) => usd(v, 4), min: 0 });
        }
        series.el.dataset.state = "ready";
        series.body.querySelector(".note").textContent = `${int(pts.length)} steps of ${seconds(r.stepSeconds)}`;
        chart.set(pts.map((p) => secs(p.t)), pts.map((p) => p.costUsd));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        if (chart) { chart.destroy(); chart = null; }
        series.error(message(e));
      }
    }

    async function loadBreakdown(signal, q, b) {
      try {
        const [r, cat] = await Promise.all([get("/admin/cost", { by: b.by, limit: MAX_ROWS + 1, ...q }, signal), models()]);
        const total = r.total?.costUsd || 0;
        // Model ids are long: the row shows the configured name, the id on hover.
        const label = (x) => (!x.key ? noKey(b.by) : b.by === "model" ? cat.nameOf(x.key) : x.key);
        const cols = costCols(b.by, label);
        cols[0].title = (x) => keyTitle(b.by, x.key);
        const rows = r.rows || [];
        b.p.show(table({
          testid: b.p.el.dataset.testid + "-table",
          columns: [
            ...cols,
            { label: "share", num: true, cell: (x) => pct(total ? x.costUsd / total : 0, 0) },
            ...(b.cache ? cacheCols(rows) : []),
          ],
          rows,
        }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        b.p.error(message(e));
      }
    }

    function crumbs(s) {
      const items = [["All features", { feature: "", user: "", trace: "" }]];
      if (s.feature) items.push([`feature ${s.feature === "(none)" ? noKey("feature") : s.feature}`, { feature: s.feature, user: "", trace: "" }]);
      if (s.user) items.push([`user ${short(s.user)}`, { feature: s.feature || "", user: s.user, trace: "" }]);
      if (s.trace) items.push([`turn ${short(s.trace)}`, null]);
      return h("nav", { class: "crumbs", "aria-label": "Drill-down", dataset: { testid: "crumbs" } },
        items.map(([label, patch], i) => [
          i ? h("span", { class: "sep" }, " › ") : null,
          patch && i < items.length - 1
            ? h("a", { href: "#", dataset: { level: String(i) }, on: { click: (e) => { e.preventDefault(); drillTo(patch); } } }, label)
            : h("span", { class: "here", dataset: { level: String(i) } }, label),
        ]));
    }

    let drillGen = 0;

    /** Draws the drill-down level named by the state s; a newer call wins. */
    async function loadDrill(signal, q, s = st) {
      const gen = ++drillGen;
      const stale = () => gen !== drillGen;
      const feature = s.feature === "(none)" ? "" : s.feature;
      try {
        if (s.trace) {
          const r = await get(`/admin/cost/trace/${encodeURIComponent(s.trace)}`, {}, signal);
          if (stale()) return;
          let spans = r.spans || [];
          // A turn that was not sampled has the rest of its spans as tallies,
          // listed by by=node only: the waterfall draws them too.
          const turn = spans.find((x) => x.name === "turn" && x.sampled_out);
          if (turn) {
            const nodes = await get("/admin/cost", { by: "node", trace: s.trace, limit: MAX_SPANS }, signal);
            if (stale()) return;
            spans = spans.concat(tallies(nodes.rows || [], turn.span_id));
          }
          drill.show(crumbs(s), spans.length ? waterfall(spans) : h("p", { class: "empty" }, "This trace has no spans (it may have been pruned)."),
            h("h3", null, "Request and answer"), payloadPanel(s.trace, signal));
          drill.el.dataset.level = "turn";
        } else if (s.user) {
          const r = await get("/admin/cost", { by: "turn", user: s.user, feature, limit: MAX_ROWS + 1, ...q }, signal);
          if (stale()) return;
          drill.show(crumbs(s), table({
            testid: "drill-turns",
            columns: [
              { label: "started", cell: (x) => datetime(x.turn?.start) },
              { label: "turn", cell: (x) => short(x.key, 16), title: (x) => x.key },
              { label: "feature", cell: (x) => x.turn?.feature || "—" },
              { label: "locale", cell: (x) => x.turn?.locale || "—" },
              { label: "duration", num: true, cell: (x) => ms(x.turn?.durationMs) },
              { label: "spans", num: true, cell: (x) => int(x.spans) },
              { label: "cost", num: true, cell: (x) => usdTurn(x.costUsd) },
              { label: "eval", num: true, cell: (x) => score(x.turn?.evalScore) },
            ],
            rows: r.rows || [],
            onRow: (x) => drillTo({ feature: s.feature, user: s.user, trace: x.turn?.traceId || x.key }),
            rowLabel: (x) => `Show the spans of turn ${x.key}`,
          }));
          drill.el.dataset.level = "user";
        } else if (s.feature) {
          const r = await get("/admin/cost", { by: "user", feature, limit: MAX_ROWS + 1, ...q }, signal);
          if (stale()) return;
          drill.show(crumbs(s), table({
            testid: "drill-users",
            columns: costCols("user (hash)", (x) => short(x.key, 16)),
            rows: r.rows || [],
            onRow: (x) => drillTo({ feature: s.feature, user: x.key }),
            rowLabel: (x) => `Show the turns of user ${x.key}`,
          }));
          drill.el.dataset.level = "feature";
        } else {
          const r = await get("/admin/cost", { by: "feature", limit: MAX_ROWS + 1, ...q }, signal);
          if (stale()) return;
          const total = r.total?.costUsd || 0;
          const rows = r.rows || [];
          drill.show(crumbs(s), table({
            testid: "drill-features",
            columns: [...costCols("feature", (x) => x.key || noKey("feature")), { label: "share", cell: (x) => bar(total ? x.costUsd / total : 0) }, ...cacheCols(rows)],
            rows,
            onRow: (x) => drillTo({ feature: x.key || "(none)" }),
            rowLabel: (x) => `Show the users of feature ${x.key}`,
          }));
          drill.el.dataset.level = "all";
        }
      } catch (e) {
        if (e.name === "AbortError") throw e;
        if (stale()) return;
        drill.show(crumbs(s), h("p", { class: "error", role: "alert", dataset: { testid: "error" } }, message(e)));
        drill.el.dataset.state = "error";
      }
    }

    async function loadTopUsers(signal, r) {
      try {
        const rep = await get("/admin/cost/top-users", { ...r, limit: 100 }, signal);
        const { ceiling, meaningful, how } = userCeiling(Date.parse(r.to) - Date.parse(r.from));
        const note = meaningful
          ? `Ceiling $${USER_CEILING_PER_MONTH.toFixed(2)} per user per month, ${usdTurn(ceiling)} over this range.`
          : `Users are compared with the $${USER_CEILING_PER_MONTH.toFixed(2)}/month ceiling over ranges of 7 days or more; pick a longer range.`;
        topUsers.show(
          h("p", { class: "note", title: how, dataset: { testid: "ceiling-note" } }, note),
          table({
            testid: "top-users-table",
            columns: [
              { label: "user (hash)", cell: (x) => short(x.key, 10), title: (x) => x.key },
              { label: "cost", num: true, cell: (x) => usd(x.costUsd, 6) },
              { label: "turns", num: true, cell: (x) => int(x.turns) },
              { label: "$/turn", num: true, cell: (x) => usdTurn(x.costPerTurn) },
              { label: "", cell: (x) => (meaningful && x.costUsd > ceiling ? h("span", { class: "badge bad", title: `over the pro-rated ceiling: ${how}` }, "over") : "") },
            ],
            rows: rep.rows || [],
            onRow: (x) => drillTo({ user: x.key }),
            rowLabel: (x) => `Show the turns of user ${x.key}`,
          }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        topUsers.error(message(e));
      }
    }

    async function loadAnomalies(signal, r) {
      try {
        const rep = await get("/admin/cost/anomalies", r, signal);
        anomalies.show(
          h("p", { class: "note", dataset: { testid: "anomaly-stats" } },
            `${int(rep.turns)} turns · median ${usdTurn(rep.medianUsd)} · σ ${usdTurn(rep.stdDevUsd)} · threshold ${usdTurn(rep.thresholdUsd)}`),
          table({
            testid: "anomaly-table",
            empty: "No turn beyond the threshold.",
            columns: [
              { label: "turn", cell: (x) => short(x.key, 16), title: (x) => x.key },
              { label: "feature", cell: (x) => x.turn?.feature || "—" },
              { label: "cost", num: true, cell: (x) => usdTurn(x.costUsd) },
              { label: "× median", num: true, cell: (x) => (rep.medianUsd > 0 ? (x.costUsd / rep.medianUsd).toFixed(1) + "×" : "—") },
            ],
            rows: rep.rows || [],
            onRow: (x) => drillTo({ feature: x.turn?.feature || "", user: x.turn?.userIdHash || "", trace: x.turn?.traceId || x.key }),
            rowLabel: (x) => `Show the spans of turn ${x.key}`,
          }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        anomalies.error(message(e));
      }
    }

    async function loadRising(signal, r) {
      try {
        const rep = await get("/admin/cost/rising", r, signal);
        const rows = rep.features || [];
        rising.show(table({
          testid: "rising-table",
          empty: "No feature's cost per turn is climbing in this range.",
          columns: [
            { label: "feature", cell: (x) => x.feature },
            { label: "rise", num: true, cell: (x) => "+" + pct(x.rise) },
            { label: "$/turn first → last", num: true, cell: (x) => `${usdTurn(x.periods?.[0]?.costPerTurn)} → ${usdTurn(x.periods?.[x.periods.length - 1]?.costPerTurn)}` },
            { label: "turns first → last", num: true, cell: (x) => `${int(x.periods?.[0]?.turns)} → ${int(x.periods?.[x.periods.length - 1]?.turns)}` },
          ],
          rows,
          onRow: (x) => drillTo({ feature: x.feature }),
          rowLabel: (x) => `Show the users of feature ${x.feature}`,
        }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        rising.error(message(e));
      }
    }

    return {
      follow(state, signal) {
        st = state;
        drill.el.dataset.state = "loading";
        return loadDrill(signal, { ...ctx.range(), ...ctx.filters() });
      },
      async load(signal) {
        const r = ctx.range();
        const q = { ...r, ...ctx.filters() };
        await Promise.all([
          loadTotals(signal, q),
          loadSeries(signal, q),
          loadDrill(signal, q),
          ...breakdowns.map((b) => loadBreakdown(signal, q, b)),
          loadTopUsers(signal, r),
          loadAnomalies(signal, r),
          loadRising(signal, r),
        ]);
      },
      dispose() {
        if (chart) chart.destroy();
      },
    };
  },
};
