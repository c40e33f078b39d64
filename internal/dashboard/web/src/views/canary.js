// Canary: two versions of a prompt, graph or model side by side (latency,
// error rate, cost per turn, eval mean, each with the counts behind it) and
// a plain verdict against visible, editable thresholds.

import { get, message } from "../api.js";
import { h, clear, panel } from "../dom.js";
import { int, ms, pct, usd, usdTurn, score } from "../format.js";

const DIMS = ["prompt", "graph", "model"];

/** Default limits B may move against A before it counts as a regression. */
const DEFAULTS = { latencyPct: 10, errorPp: 1, costPct: 10, evalDrop: 0.05, minTurns: 20 };

/** Judges B against A: one entry per figure, regressed or not. */
export function judge(a, b, t) {
  const rel = (x, y) => (x > 0 ? (y / x - 1) * 100 : y > 0 ? Infinity : 0);
  const out = [];
  for (const [key, label] of [["latencyP50Ms", "latency p50"], ["latencyP95Ms", "latency p95"], ["latencyP99Ms", "latency p99"]]) {
    const d = rel(a[key] || 0, b[key] || 0);
    out.push({ key, label, change: d, text: signed(d, "%"), limit: `+${t.latencyPct}%`, bad: d > t.latencyPct });
  }
  const de = ((b.errorRate || 0) - (a.errorRate || 0)) * 100;
  out.push({ key: "errorRate", label: "error rate", change: de, text: signed(de, " pp"), limit: `+${t.errorPp} pp`, bad: de > t.errorPp });
  const dc = rel(a.costPerTurn || 0, b.costPerTurn || 0);
  out.push({ key: "costPerTurn", label: "cost per turn", change: dc, text: signed(dc, "%"), limit: `+${t.costPct}%`, bad: dc > t.costPct });
  if (a.evalCount > 0 && b.evalCount > 0) {
    const dv = (b.evalMean || 0) - (a.evalMean || 0);
    out.push({ key: "evalMean", label: "eval mean", change: dv, text: (dv >= 0 ? "+" : "") + dv.toFixed(3), limit: `−${t.evalDrop}`, bad: -dv > t.evalDrop });
  } else {
    out.push({ key: "evalMean", label: "eval mean", change: null, text: "—", limit: `−${t.evalDrop}`, bad: false, skipped: "needs scores on both sides" });
  }
  return out;
}

function signed(v, unit) {
  if (!Number.isFinite(v)) return "new";
  return (v >= 0 ? "+" : "") + v.toFixed(1) + unit;
}

/**
 * The one verdict on B against A. "na" (not comparable) when A and B are the
 * same version or either side has fewer than t.minTurns turns: a comparison
 * then says nothing, and must not look like a green light.
 */
export function verdict(a, b, checks, t) {
  if ((a.version || "") === (b.version || "")) {
    return { level: "na", text: "Not comparable: A and B are the same version. Pick two different versions." };
  }
  if (!((a.turns || 0) >= t.minTurns && (b.turns || 0) >= t.minTurns)) {
    return { level: "na", text: `Not comparable: A has ${int(a.turns || 0)} turns, B has ${int(b.turns || 0)}; at least ${int(t.minTurns)} each are needed.` };
  }
  const bad = checks.filter((c) => c.bad);
  if (!bad.length) return { level: "ok", text: "B is within thresholds of A." };
  return { level: "bad", text: "B regresses against A: " + bad.map((c) => `${c.label} ${c.text} (limit ${c.limit})`).join("; ") + "." };
}

export default {
  id: "canary",
  title: "Canary",
  filters: [],
  usesVersions: true,
  filterNote: "Pick the dimension and the two versions below; the time range applies.",
  render(root, ctx) {
    const st = ctx.state;
    const thresholds = { ...DEFAULTS };
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
    const limitInputs = [
      ["latencyPct", "latency p50/p95/p99 may rise by (%)"],
      ["errorPp", "error rate may rise by (percentage points)"],
      ["costPct", "cost per turn may rise by (%)"],
      ["evalDrop", "eval mean may drop by"],
      ["minTurns", "turns needed on each side"],
    ].map(([k, label]) => {
      const input = h("input", { type: "number", step: "any", min: "0", value: String(thresholds[k]), id: "limit-" + k, dataset: { limit: k } });
      input.addEventListener("change", () => {
        const v = Number(input.value);
        if (Number.isFinite(v) && v >= 0) thresholds[k] = v;
        if (last) show(last);
      });
      return h("label", null, label, " ", input);
    });
    const picker = panel("Compare two versions", { testid: "canary-picker", wide: true });
    picker.show(pick, h("details", { class: "limits", open: true }, h("summary", null, "Thresholds"), h("div", { class: "limit-grid", dataset: { testid: "thresholds" } }, limitInputs)));
    const out = panel("Side by side", { testid: "canary-result", wide: true });
    out.show(h("p", { class: "muted" }, "Pick two versions."));
    root.append(picker.el, out.el);

    let versions = null;
    let last = null;

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
      const checks = judge(a, b, thresholds);
      const byKey = Object.fromEntries(checks.map((c) => [c.key, c]));
      const v = verdict(a, b, checks, thresholds);
      const row = (label, fa, fb, key, testid) => {
        const c = key ? byKey[key] : null;
        return h("tr", { dataset: { testid } },
          h("th", null, label),
          h("td", { class: "num", dataset: { side: "a" } }, fa(a)),
          h("td", { class: "num", dataset: { side: "b" } }, fb ? fb(b) : fa(b)),
          h("td", { class: "num" }, c ? c.text : ""),
          h("td", { class: "num" }, c ? c.limit : ""),
          h("td", null, c ? (c.skipped ? h("span", { class: "muted" }, c.skipped) : h("span", { class: "badge " + (c.bad ? "bad" : "ok") }, c.bad ? "regressed" : "ok")) : ""));
      };
      const n = (s) => h("span", { class: "count" }, ` (${int(s.turns)} turns)`);
      out.show(
        h("p", { class: "verdict " + v.level, dataset: { testid: "verdict", level: v.level } }, v.text),
        h("div", { class: "table-wrap" }, h("table", { class: "grid canary", dataset: { testid: "canary-table" } },
          h("thead", null, h("tr", null, h("th", null, r.dim || dim.value), side(a, "A"), side(b, "B"), h("th", { class: "num" }, "B vs A"), h("th", { class: "num" }, "limit"), h("th", null, ""))),
          h("tbody", null,
            row("turns", (s) => h("span", { dataset: { testid: "turns" } }, int(s.turns)), null, null, "row-turns"),
            row("latency p50", (s) => [ms(s.latencyP50Ms), n(s)], null, "latencyP50Ms", "row-p50"),
            row("latency p95", (s) => [ms(s.latencyP95Ms), n(s)], null, "latencyP95Ms", "row-p95"),
            row("latency p99", (s) => [ms(s.latencyP99Ms), n(s)], null, "latencyP99Ms", "row-p99"),
            row("error rate", (s) => [pct(s.errorRate, 2), h("span", { class: "count" }, ` (${int(s.errors)} of ${int(s.turns)})`)], null, "errorRate", "row-errors"),
            row("cost per turn", (s) => [usdTurn(s.costPerTurn), h("span", { class: "count" }, ` (${usd(s.costUsd)} / ${int(s.turns)})`)], null, "costPerTurn", "row-cost"),
            row("eval mean", (s) => [score(s.evalCount ? s.evalMean : NaN), h("span", { class: "count" }, ` (${int(s.evalCount)} scored)`)], null, "evalMean", "row-eval"),
          ))),
        h("p", { class: "note" }, "A turn counts for a version when any of its spans carries it; latency is the whole turn's duration."),
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
          last = r;
          show(r);
        } catch (e) {
          if (e.name === "AbortError") throw e;
          out.error(message(e));
        }
      },
    };
  },
};
