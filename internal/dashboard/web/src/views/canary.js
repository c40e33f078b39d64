// Canary: two versions of a prompt, graph or model side by side (latency,
// error and fallback rates, cost per turn, eval mean, each with the counts
// behind it) and the gateway's own verdict on B against A, with the
// thresholds it was reached under. The page reaches no verdict of its own:
// GET /admin/cost/compare carries the one a canary of these two versions
// would get (internal/canary), so the page and the canary never disagree.

import { get, message } from "../api.js";
import { h, clear, panel } from "../dom.js";
import { int, ms, pct, usd, usdTurn, score } from "../format.js";

const DIMS = ["prompt", "graph", "model"];

/** The verdict's status as a level of the page's colours. */
const LEVELS = { pass: "ok", fail: "bad", not_comparable: "na" };

/** The sentence the page shows for the gateway's verdict v. */
export function verdictText(v) {
  if (!v) return { level: "na", text: "Not comparable: this gateway sent no verdict with the comparison." };
  const reasons = (v.reasons || []).join("; ");
  switch (v.status) {
    case "pass":
      return { level: "ok", text: "Pass: B is within every threshold of A." };
    case "fail":
      return { level: "bad", text: `Fail: B regresses against A: ${reasons}.` };
    default:
      return { level: LEVELS[v.status] || "na", text: `Not comparable: ${reasons || v.status}.` };
  }
}

/** B against A for one of the verdict's checks, in the check's own terms. */
function change(c) {
  switch (c.name) {
    case "error rate":
    case "fallback rate": {
      const d = (c.b - c.a) * 100;
      return (d >= 0 ? "+" : "") + d.toFixed(1) + " pp";
    }
    case "eval mean": {
      const d = c.b - c.a;
      return (d >= 0 ? "+" : "") + d.toFixed(3);
    }
    default:
      if (!(c.a > 0)) return c.b > 0 ? "new" : "×1.00";
      return "×" + (c.b / c.a).toFixed(2);
  }
}

/** The thresholds of the verdict, in words. */
function thresholdLines(v) {
  const t = v.thresholds || {};
  return [
    ["minTurns", "turns needed on each side", int(v.minTurns)],
    ["latencyP95Ratio", "latency p95 may grow to", `${t.latencyP95Ratio}× A's`],
    ["errorRateDelta", "error rate may rise by", `${(t.errorRateDelta * 100).toFixed(1)} percentage points`],
    ["fallbackRateDelta", "fallback rate may rise by", `${(t.fallbackRateDelta * 100).toFixed(1)} percentage points`],
    ["costPerTurnRatio", "cost per turn may grow to", `${t.costPerTurnRatio}× A's`],
    ["evalDrop", "eval mean may drop by", `${t.evalDrop} (once each side has ${int(t.minEvals)} scored turns)`],
  ];
}

export default {
  id: "canary",
  title: "Canary",
  filters: [],
  usesVersions: true,
  filterNote: "Pick the dimension and the two versions below; the time range applies.",
  render(root, ctx) {
    const st = ctx.state;
    const dim = h("select", { id: "canary-dim" }, DIMS.map((d) => h("option", { value: d }, d)));
    dim.value = DIMS.includes(st.dim) ? st.dim : "prompt";
    const selA = h("select", { id: "canary-a" });
    const selB = h("select", { id: "canary-b" });
    const compare = h("button", { type: "submit", id: "canary-compare" }, "Compare");
    const pick = h("form", { class: "canary-pick" },
      h("label", null, "dimension ", dim),
      h("label", null, "A (baseline) ", selA),
      h("label", null, "B (canary) ", selB),
      compare);
    const limits = h("div", { class: "limit-grid", dataset: { testid: "thresholds" } }, h("span", { class: "muted" }, "The gateway's thresholds show with the first comparison."));
    const picker = panel("Compare two versions", { testid: "canary-picker", wide: true });
    picker.show(pick, h("details", { class: "limits", open: true },
      h("summary", null, "Thresholds"), limits,
      h("p", { class: "note" }, "The gateway's own, set by canary.minTurns and canary.thresholds in its configuration; a running canary is ramped or rolled back by the same.")));
    const out = panel("Side by side", { testid: "canary-result", wide: true });
    out.show(h("p", { class: "muted" }, "Pick two versions."));
    root.append(picker.el, out.el);

    let versions = null;

    function fill() {
      const list = [...((versions && versions[dim.value]) || [])].sort((x, y) => Date.parse(x.firstSeen) - Date.parse(y.firstSeen)).slice(-100);
      const opts = () => list.map((v) => h("option", { value: v.version }, `${v.version || "(none)"} · ${int(v.spans)} spans`));
      clear(selA).append(...opts());
      clear(selB).append(...opts());
      const has = (v) => list.some((x) => x.version === v);
      selA.value = st.dim === dim.value && has(st.a) ? st.a : list.length > 1 ? list[list.length - 2].version : list[0]?.version || "";
      selB.value = st.dim === dim.value && has(st.b) ? st.b : list[list.length - 1]?.version || "";
      compare.disabled = !list.length;
      return list.length;
    }

    dim.addEventListener("change", () => {
      fill();
      ctx.navigate({ dim: dim.value, a: selA.value, b: selB.value });
    });
    pick.addEventListener("submit", (e) => {
      e.preventDefault();
      ctx.navigate({ dim: dim.value, a: selA.value, b: selB.value });
    });

    function side(s, label) {
      return h("th", { class: "num", dataset: { side: label } }, `${label}: `, h("span", { class: "version" }, s.version || "(none)"));
    }

    function show(r) {
      const a = r.a || {}, b = r.b || {};
      const verdict = r.verdict;
      const v = verdictText(verdict);
      const byName = Object.fromEntries(((verdict && verdict.checks) || []).map((c) => [c.name, c]));
      if (verdict) {
        clear(limits).append(...thresholdLines(verdict).map(([k, label, value]) =>
          h("div", { class: "limit", dataset: { limit: k } }, h("span", null, label), " ", h("b", null, value))));
      }
      const row = (label, fa, check, testid) => {
        const c = check ? byName[check] : null;
        return h("tr", { dataset: { testid, check: c ? c.name : "" } },
          h("th", null, label),
          h("td", { class: "num", dataset: { side: "a" } }, fa(a)),
          h("td", { class: "num", dataset: { side: "b" } }, fa(b)),
          h("td", { class: "num" }, c ? (c.skipped ? "—" : change(c)) : ""),
          h("td", { class: "num" }, c ? c.limit : ""),
          h("td", null, c ? (c.skipped ? h("span", { class: "muted" }, c.skipped) : h("span", { class: "badge " + (c.ok ? "ok" : "bad") }, c.ok ? "ok" : "regressed")) : ""));
      };
      const n = (s) => h("span", { class: "count" }, ` (${int(s.turns)} turns)`);
      out.show(
        h("p", { class: "verdict " + v.level, dataset: { testid: "verdict", level: v.level, status: (verdict && verdict.status) || "" } }, v.text),
        h("div", { class: "table-wrap" }, h("table", { class: "grid canary", dataset: { testid: "canary-table" } },
          h("thead", null, h("tr", null, h("th", null, r.dim || dim.value), side(a, "A"), side(b, "B"), h("th", { class: "num" }, "B vs A"), h("th", { class: "num" }, "limit"), h("th", null, ""))),
          h("tbody", null,
            row("turns", (s) => h("span", { dataset: { testid: "turns" } }, int(s.turns)), null, "row-turns"),
            row("latency p50", (s) => [ms(s.latencyP50Ms), n(s)], null, "row-p50"),
            row("latency p95", (s) => [ms(s.latencyP95Ms), n(s)], "latency p95 ms", "row-p95"),
            row("latency p99", (s) => [ms(s.latencyP99Ms), n(s)], null, "row-p99"),
            row("error rate", (s) => [pct(s.errorRate, 2), h("span", { class: "count" }, ` (${int(s.errors)} of ${int(s.turns)})`)], "error rate", "row-errors"),
            row("fallback rate", (s) => [pct(s.fallbackRate, 2), h("span", { class: "count" }, ` (${int(s.fallbacks)} of ${int(s.turns)})`)], "fallback rate", "row-fallbacks"),
            row("cost per turn", (s) => [usdTurn(s.costPerTurn), h("span", { class: "count" }, ` (${usd(s.costUsd)} / ${int(s.turns)})`)], "cost per turn", "row-cost"),
            row("eval mean", (s) => [score(s.evalCount ? s.evalMean : NaN), h("span", { class: "count" }, ` (${int(s.evalCount)} scored)`)], "eval mean", "row-eval"),
          ))),
        h("p", { class: "note" }, "A turn counts for a version when any of its spans carries it; latency is the whole turn's duration. The gateway judges latency by its p95 only."),
      );
    }

    return {
      async load(signal) {
        try {
          versions = await ctx.versions();
        } catch (e) {
          if (e.name === "AbortError") throw e;
          out.error(`The versions to compare could not be listed: ${message(e)}`);
          return;
        }
        if (!fill()) {
          out.show(h("p", { class: "empty" }, `No ${dim.value} version seen in this range.`));
          return;
        }
        try {
          const r = await get("/admin/cost/compare", { dim: dim.value, a: selA.value, b: selB.value, ...ctx.range() }, signal);
          show(r);
        } catch (e) {
          if (e.name === "AbortError") throw e;
          out.error(message(e));
        }
      },
    };
  },
};
