// A turn's span tree drawn as a waterfall: one row per span, indented under
// its parent, its bar placed by start time and sized by duration, details
// on hover (or keyboard focus).
//
// Of a turn that was not sampled the store keeps only the turn span and the
// cost and quota records whole; its other spans are tallies, whose figures
// (name, start, duration, status, model, tokens, cost) stay but whose ids
// and details go. /admin/cost/trace lists the whole spans only and
// /admin/cost?by=node every span, tallies included: the waterfall draws
// both, the tallies under the turn span and marked as such, so that it
// shows as many spans as the turn is counted with everywhere else.

import { h, tooltip } from "../dom.js";
import { int, ms, usdTurn } from "../format.js";

/** Most spans drawn; a turn has about a dozen. */
export const MAX_SPANS = 500;

/**
 * The spans of a sampled-out turn that the store kept as tallies, from the
 * by=node rows of its trace (those without a span id), as span events under
 * parent (the turn span's id), each with an id of its own for the layout.
 */
export function tallies(rows, parent) {
  return rows.filter((x) => x.span && !x.span.spanId).map((x, i) => ({
    span_id: `tally-${i}`,
    parent_span_id: parent || "",
    tally: true,
    name: x.span.name,
    ts_start: x.span.start,
    duration_ms: x.span.durationMs || 0,
    artifact: { model_id: x.span.modelId, prompt_version: x.span.promptVersion, tool_id: x.span.toolId },
    resource: { cost_usd: x.costUsd || 0, tokens_in: x.tokensIn || 0, tokens_out: x.tokensOut || 0 },
    outcome: { status: x.span.status || "ok", fallback_used: x.span.fallbackUsed, eval_score: x.span.evalScore ?? undefined },
  }));
}

/** Orders spans depth-first by start time and gives each its depth. */
export function layout(spans) {
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map();
  const roots = [];
  for (const s of spans) {
    if (s.parent_span_id && ids.has(s.parent_span_id) && s.parent_span_id !== s.span_id) {
      if (!children.has(s.parent_span_id)) children.set(s.parent_span_id, []);
      children.get(s.parent_span_id).push(s);
    } else roots.push(s);
  }
  const byStart = (a, b) => Date.parse(a.ts_start) - Date.parse(b.ts_start);
  const out = [];
  const seen = new Set();
  const walk = (s, depth) => {
    if (seen.has(s.span_id)) return;
    seen.add(s.span_id);
    out.push({ span: s, depth });
    for (const c of (children.get(s.span_id) || []).sort(byStart)) walk(c, depth + 1);
  };
  for (const r of roots.sort(byStart)) walk(r, 0);
  return out;
}

export function waterfall(spans) {
  const shown = spans.slice(0, MAX_SPANS);
  const rows = layout(shown);
  const t0 = Math.min(...shown.map((s) => Date.parse(s.ts_start)));
  const t1 = Math.max(...shown.map((s) => Math.max(Date.parse(s.ts_end) || 0, Date.parse(s.ts_start) + (s.duration_ms || 0))));
  const total = Math.max(1, t1 - t0);
  const cost = shown.reduce((n, s) => n + (s.resource?.cost_usd || 0), 0);

  const axis = h("div", { class: "wf-row wf-axis" }, h("div", { class: "wf-label" }, "span"),
    h("div", { class: "wf-track" }, [0, 0.25, 0.5, 0.75, 1].map((f) => {
      const tick = h("span", { class: "wf-tick" }, ms(f * total));
      tick.style.left = f * 100 + "%";
      return tick;
    })),
    h("div", { class: "wf-num" }, "duration"), h("div", { class: "wf-num" }, "cost"));

  const body = rows.map(({ span: s, depth }) => {
    const start = Date.parse(s.ts_start) - t0;
    const dur = s.duration_ms || Math.max(0, Date.parse(s.ts_end) - Date.parse(s.ts_start)) || 0;
    const status = s.outcome?.status || "ok";
    const b = h("span", { class: "wf-bar " + status });
    b.style.left = (start / total) * 100 + "%";
    b.style.width = Math.max(0.3, (dur / total) * 100) + "%";
    const model = s.artifact?.model_id;
    const label = h("div", { class: "wf-label" },
      h("span", { class: "wf-name" }, s.name || s.node?.node_id || "span"),
      s.tally ? h("span", { class: "badge", title: "not sampled: its figures were kept, its ids and details were not" }, "figures only") : null,
      s.outcome?.fallback_used ? h("span", { class: "badge warn" }, s.outcome.fallback_used) : null,
      status === "failed" ? h("span", { class: "badge bad" }, s.outcome?.error_code || "failed") : null,
      status !== "failed" && verdict(s) ? h("span", { class: "badge " + verdict(s).cls, dataset: { testid: "verdict" } }, verdict(s).text) : null,
      model ? h("span", { class: "wf-model" }, model) : null);
    label.style.paddingLeft = 0.4 + depth * 1.1 + "rem";
    const row = h("div", {
      class: "wf-row", tabindex: "0",
      dataset: { testid: "span", span: s.tally ? "" : s.span_id, name: s.name || "", depth: String(depth), status, tally: s.tally ? "1" : "" },
    }, label, h("div", { class: "wf-track" }, b), h("div", { class: "wf-num" }, ms(dur)), h("div", { class: "wf-num" }, usdTurn(s.resource?.cost_usd || 0)));
    tooltip(row, () => details(s, start));
    return row;
  });

  const note = spans.length > MAX_SPANS ? h("p", { class: "note" }, `Showing the first ${MAX_SPANS} of ${int(spans.length)} spans.`) : null;
  const tallied = rows.filter((r) => r.span.tally).length;
  const sampling = tallied
    ? h("p", { class: "note", dataset: { testid: "tallied" } }, `This turn was not sampled: ${int(tallied)} of its spans were kept as figures only (name, start, duration, status, model, tokens, cost), without their ids and details. They are drawn under the turn span, marked “figures only”.`)
    : null;
  return h("div", { class: "waterfall", dataset: { testid: "waterfall", spans: String(rows.length), tallied: String(tallied) } },
    h("p", { class: "wf-summary" },
      `${int(rows.length)} spans · ${ms(total)} · ${usdTurn(cost)} in all`),
    sampling, axis, body, note);
}

/**
 * A guardrail check's verdict, from its span's error code
 * (guardrail_blocked:email, guardrail_checked:card, answer…), as a badge:
 * what was found and what was done, never the text.
 */
export function verdict(s) {
  const code = s.outcome?.error_code || "";
  const m = /^(guardrail|answer)_(blocked|checked|passed|skipped|unavailable)(?::(.*))?$/.exec(code);
  if (!m) return null;
  const what = m[3] ? ` ${m[3].replaceAll(",", ", ")}` : "";
  switch (m[2]) {
    case "blocked": return { cls: "bad", text: `blocked${what}` };
    case "checked": return { cls: "warn", text: `redacted or logged${what}` };
    case "passed": return { cls: "ok", text: "passed" };
    default: return { cls: "warn", text: `${m[2]}${what}` };
  }
}

function details(s, offset) {
  const a = s.artifact || {}, r = s.resource || {}, o = s.outcome || {}, n = s.node || {}, at = s.attribution || {};
  const lines = [
    ["span", s.tally ? `${s.name} (not sampled: figures only, no id)` : `${s.name || n.node_id} (${s.span_id})`],
    ["start", `+${ms(offset)}`],
    ["duration", ms(s.duration_ms)],
    ["status", o.status + (o.error_code ? ` · ${o.error_code}` : "")],
  ];
  if (a.model_id) lines.push(["model", a.model_id]);
  if (o.fallback_used) lines.push(["tier / fallback", o.fallback_used]);
  if (r.tokens_in || r.tokens_out) lines.push(["tokens", `${int(r.tokens_in)} in · ${int(r.tokens_out)} out`]);
  lines.push(["cost", usdTurn(r.cost_usd || 0)]);
  if (r.cache_hit) lines.push(["cache", r.cache_hit]);
  if (n.graph_version) lines.push(["graph", n.graph_version]);
  if (a.prompt_version) lines.push(["prompt", a.prompt_version]);
  if (a.tool_id) lines.push(["tool", `${a.tool_id}${a.tool_version ? "@" + a.tool_version : ""}`]);
  if (o.eval_score != null) lines.push(["eval", String(o.eval_score)]);
  if (at.feature) lines.push(["feature", `${at.feature} · ${at.locale || ""} · ${at.user_tier || ""}`]);
  return lines;
}
