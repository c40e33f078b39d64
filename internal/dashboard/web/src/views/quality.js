// Quality: eval scores split by graph, prompt and model version (and by
// locale) for the range and versions chosen, and a form to record a judge's
// score for a turn (trace id) or a span (span id).

import { get, post, message } from "../api.js";
import { h, panel, table, tile, bar, MAX_ROWS } from "../dom.js";
import { int, score } from "../format.js";
import { noKey, keyTitle } from "../keys.js";

export default {
  id: "quality",
  title: "Quality",
  filters: ["graph", "prompt", "model", "tool"],
  filterNote: "A turn matches a version filter when any of its spans used that version.",
  refreshMs: 5 * 60e3,
  render(root, ctx) {
    const totals = panel("Eval scores", { testid: "eval-totals", wide: true });
    const splits = [
      ["graph", "By graph version"],
      ["prompt", "By prompt version"],
      ["model", "By model"],
      ["locale", "By locale"],
    ].map(([by, title]) => ({ by, p: panel(title, { testid: "eval-by-" + by }) }));

    const result = h("p", { class: "form-result", dataset: { testid: "eval-result" }, role: "status" });
    const idInput = h("input", { id: "eval-id", name: "id", required: true, placeholder: "32 hex digits (trace) or 16 (span)", autocomplete: "off", spellcheck: "false" });
    const kind = h("select", { id: "eval-kind", name: "kind" }, h("option", { value: "traceId" }, "trace id (the turn)"), h("option", { value: "spanId" }, "span id"));
    const scoreInput = h("input", { id: "eval-score", name: "score", required: true, inputmode: "decimal", placeholder: "e.g. 0.85", autocomplete: "off" });
    const submit = h("button", { type: "submit", id: "eval-submit" }, "Record score");
    const form = h("form", { class: "eval-form", dataset: { testid: "eval-form" } },
      h("label", null, "id of ", kind, idInput),
      h("label", null, "score ", scoreInput),
      submit, result);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const id = idInput.value.trim();
      const text = scoreInput.value.trim();
      const value = Number(text);
      result.className = "form-result";
      if (text === "" || !Number.isFinite(value)) {
        result.classList.add("error");
        result.textContent = "score: enter a number, e.g. 0.85.";
        return;
      }
      submit.disabled = true;
      result.textContent = "Saving…";
      try {
        const r = await post("/admin/eval", { [kind.value]: id, score: value });
        result.classList.add("ok");
        result.textContent = `Recorded score ${r.score ?? value} for ${r.id || id}.`;
        ctx.reload();
      } catch (err) {
        result.classList.add("error");
        result.textContent = message(err);
      } finally {
        submit.disabled = false;
      }
    });
    const formPanel = panel("Record an eval score", { testid: "eval-post" });
    formPanel.show(h("p", { class: "note" }, "POST /admin/eval: a judge's score for a whole turn (trace id) or one span (span id)."), form);

    root.append(totals.el, h("div", { class: "panels two" }, splits.map((s) => s.p.el)), formPanel.el);

    async function loadTotal(signal, q) {
      try {
        const r = await get("/admin/eval", { by: "total", ...q }, signal);
        const t = r.total || {};
        totals.show(h("div", { class: "tiles" },
          tile("Mean score", score(t.turns ? t.avgScore : NaN), { testid: "eval-mean", raw: t.turns ? t.avgScore : "" }),
          tile("Scored turns", int(t.turns), { testid: "eval-count", raw: t.turns }),
          tile("Lowest", score(t.turns ? t.minScore : NaN), { testid: "eval-min" }),
          tile("Highest", score(t.turns ? t.maxScore : NaN), { testid: "eval-max" }),
        ));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        totals.error(message(e));
      }
    }

    async function loadSplit(signal, q, s) {
      try {
        const r = await get("/admin/eval", { by: s.by, limit: MAX_ROWS + 1, ...q }, signal);
        s.p.show(table({
          testid: "eval-" + s.by,
          empty: "No scored turns in this range.",
          columns: [
            { label: s.by, cell: (x) => x.key || noKey(s.by), title: (x) => keyTitle(s.by, x.key) },
            { label: "scored turns", num: true, cell: (x) => int(x.turns) },
            { label: "mean", num: true, cell: (x) => score(x.avgScore) },
            { label: "", cell: (x) => bar(x.avgScore, x.avgScore < 0.5 ? "bad" : x.avgScore < 0.8 ? "warn" : "ok") },
            { label: "min", num: true, cell: (x) => score(x.minScore) },
            { label: "max", num: true, cell: (x) => score(x.maxScore) },
          ],
          rows: r.rows || [],
        }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        s.p.error(message(e));
      }
    }

    return {
      async load(signal) {
        const q = { ...ctx.range(), ...ctx.filters() };
        await Promise.all([loadTotal(signal, q), ...splits.map((s) => loadSplit(signal, q, s))]);
      },
    };
  },
};
