// A turn's payload — the request and answer the payload log kept, after
// the guardrails' redaction — under its waterfall. The page first asks
// only whether one was kept (GET /admin/payloads?trace=, no text); the
// text is read when the operator asks for it (GET /admin/payloads/{id}),
// and the gateway records each such read as an audit span.

import { get, message, APIError } from "../api.js";
import { h, clear } from "../dom.js";
import { datetime } from "../format.js";

/** The payload panel of trace: a note, or a button that reads it. */
export function payloadPanel(trace, signal) {
  const box = h("div", { class: "payload", dataset: { testid: "payload", state: "loading" } }, h("p", { class: "note" }, "Looking for this turn's payload…"));
  const show = (...nodes) => { clear(box); box.append(...nodes.filter(Boolean)); };
  (async () => {
    let rows;
    try {
      rows = (await get("/admin/payloads", { trace }, signal)).payloads || [];
    } catch (e) {
      if (e.name === "AbortError") return;
      if (e instanceof APIError && e.code === "payload_log_off") {
        show(h("p", { class: "note" }, "Payload logs are off on this gateway (payloadLog.enabled): no turn's request and answer are kept."));
        box.dataset.state = "off";
        return;
      }
      show(h("p", { class: "error", role: "alert" }, message(e)));
      box.dataset.state = "error";
      return;
    }
    if (!rows.length) {
      show(h("p", { class: "note" }, "No payload was logged for this turn: it was not chosen by payloadLog, or it expired or was deleted."));
      box.dataset.state = "none";
      return;
    }
    const read = async () => {
      button.disabled = true;
      try {
        render(await get(`/admin/payloads/${encodeURIComponent(trace)}`, {}, signal));
      } catch (e) {
        if (e.name === "AbortError") return;
        show(h("p", { class: "error", role: "alert" }, message(e)));
        box.dataset.state = "error";
      }
    };
    const button = h("button", { type: "button", class: "plain", dataset: { testid: "payload-show" }, on: { click: read } },
      "Show the request and answer");
    show(h("p", { class: "note" }, `A payload was logged for this turn (${datetime(rows[0].at)}). Reading it is recorded in the audit trail (feature ${"payload_admin"}).`), button);
    box.dataset.state = "available";
  })();

  function render(rec) {
    const p = rec.payload || {};
    const field = (label, value, testid) => h("div", { class: "payload-field" },
      h("div", { class: "payload-label" }, label),
      h("pre", { class: "payload-text", dataset: { testid } }, value || "—"));
    show(
      h("p", { class: "note", dataset: { testid: "payload-meta" } },
        `${p.source === "model" ? `model tier ${p.tier} (${p.modelId || "?"})` : `answered by ${p.tier}`}` +
        `${p.degraded ? " · degraded" : ""} · ${p.locale || "?"} · feature ${rec.feature || "—"}` +
        `${rec.keyId ? ` · key ${rec.keyId}` : ""}${p.history ? ` · after ${p.history} earlier messages` : ""}` +
        " · this read was recorded in the audit trail"),
      p.guardrail?.length ? h("p", { dataset: { testid: "payload-guardrail" } }, "Guardrails: ",
        p.guardrail.map((g) => h("span", { class: "badge " + (g.includes("blocked") ? "bad" : "warn") }, g))) : null,
      field("Request (as the model saw it)", p.question, "payload-question"),
      p.context ? field("Catalog context", p.context, "payload-context") : null,
      field("Answer (as the client received it)", p.answer, "payload-answer"),
      p.toolCalls?.length ? field("Tool calls", p.toolCalls.map((c) => `${c.name} ${JSON.stringify(c.input || {})}`).join("\n"), "payload-tools") : null,
    );
    box.dataset.state = "shown";
  }
  return box;
}
