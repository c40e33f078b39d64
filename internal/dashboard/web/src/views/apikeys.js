// Keys: the API keys created at run time (GET /admin/keys), each with its
// budgets beside what it spent today and this month, a form to create one,
// and on each row the changes an operator makes to a key: its models (the
// chat tiers and the embedding tiers) and budgets (PATCH), a new secret
// (rotate), its end (revoke, after a confirmation); and its history, the
// changes made to it (GET /admin/keys/{id}/audit). A secret is shown once,
// in the answer that creates or rotates the key; the page keeps it only
// until the operator hides it or leaves the view.

import { get, post, patch, del, message, APIError } from "../api.js";
import { h, clear, panel, bar } from "../dom.js";
import { usd, int, datetime } from "../format.js";
import { models } from "../models.js";

/** Most keys drawn at once; the filter finds the others. */
const MAX_KEYS = 100;
/** The status of a key as a level of the page's colours. */
const LEVEL = { active: "ok", expired: "warn", revoked: "bad" };
/** The changes a key's history shows, newest first. */
const HISTORY = 20;
/** The grace a rotation asks for unless the operator changes it. */
const DEFAULT_GRACE_HOURS = 24;
const HEAD = ["name", "team / app", "prefix", "status", "models", "spent of budget", "requests / month", "expires", "created", ""];

/** Dollars: cents for budgets and sums from $1, four decimals below so that a few turns show. */
export function dollars(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "—";
  return usd(v, v === 0 || Math.abs(v) >= 1 ? 2 : 4);
}

/** The moment after the last day of a local date "2026-05-31" (its next midnight), in RFC 3339. */
function endOfDay(value) {
  const [y, m, d] = value.split("-").map(Number);
  return new Date(y, m - 1, d + 1).toISOString();
}

/** The local date of the last moment before t, for a date input ("" for none). */
function lastDay(t) {
  const ms = Date.parse(t || "");
  if (!Number.isFinite(ms)) return "";
  const d = new Date(ms - 1);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

/**
 * A figure typed in a field: empty is 0 (none); anything that is not a
 * number adds a problem and gives null. Signs and ranges are the
 * gateway's to judge.
 */
function figure(input, problems, whole = false) {
  const t = input.value.trim().replace(/^\$/, "").replace(/,/g, "");
  if (t === "") return 0;
  const v = Number(t);
  if (!Number.isFinite(v) || (whole && !Number.isInteger(v))) {
    const what = whole ? "a whole number" : "an amount in dollars, e.g. 20";
    problems.push(`${input.dataset.field}: "${input.value.trim()}" is not ${what}; leave it empty for none`);
    return null;
  }
  return v;
}

/** The field a problem names ("monthlyCostUsd: must be >= 0" → "monthlyCostUsd"). */
function fieldOf(problem) {
  const m = /^([A-Za-z]+)(\[\d+\])?:/.exec(problem);
  return m ? m[1] : "";
}

/**
 * Shows what went wrong with a form in box: the gateway's problems one per
 * line (their fields marked invalid), or its message; nothing clears it.
 */
function report(box, form, err) {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  clear(box);
  box.hidden = !err;
  if (!err) return;
  let problems = [];
  let lead;
  if (Array.isArray(err)) {
    problems = err;
    lead = "Check these fields:";
  } else if (err instanceof APIError && err.problems.length) {
    problems = [...new Set(err.problems)];
    lead = `The gateway refused it (HTTP ${err.status}):`;
  } else {
    lead = message(err);
  }
  box.append(h("p", null, lead));
  if (problems.length) box.append(h("ul", { dataset: { testid: "problems" } }, problems.map((p) => h("li", null, p))));
  for (const p of problems) {
    for (const el of form.querySelectorAll(`[data-field="${fieldOf(p)}"]`)) el.setAttribute("aria-invalid", "true");
  }
}

function problemBox(testid) {
  return h("div", { class: "error key-problems", role: "alert", hidden: true, dataset: { testid } });
}

/** A labelled field: the label's words above the input. */
function field(label, input, hint) {
  return h("label", { class: "key-field" }, h("span", null, label, hint ? h("span", { class: "note" }, " ", hint) : null), input);
}

function textInput(id, fieldName, attrs = {}) {
  return h("input", { id, name: fieldName, autocomplete: "off", spellcheck: "false", dataset: { field: fieldName }, ...attrs });
}

/**
 * The models a key may use, as checkboxes: the configured chat tiers (and
 * any the key has outside the known tiers), then the embedding tiers.
 * tiers is {chat, embed}.
 */
function modelChoices(fieldset, idPrefix, tiers, chosen) {
  const known = [...tiers.chat, ...tiers.embed];
  const chat = [...tiers.chat, ...chosen.filter((m) => !known.includes(m))];
  clear(fieldset).append(h("legend", null, "models ", h("span", { class: "note" }, "(none ticked: every tier)")));
  if (!chat.length && !tiers.embed.length) {
    fieldset.append(h("span", { class: "muted" }, "No model tier is known: the key may use every tier."));
    return;
  }
  const box = (name) => h("label", { class: "check" },
    h("input", { type: "checkbox", name: "models", value: name, id: `${idPrefix}-model-${name}`, checked: chosen.includes(name) }), " ", name);
  fieldset.append(...chat.map(box));
  if (tiers.embed.length) {
    fieldset.append(h("span", { class: "key-models-group", dataset: { testid: "embedding-tiers" } }, "embeddings (/v1/embeddings):"), ...tiers.embed.map(box));
  }
}

function ticked(fieldset) {
  return [...fieldset.querySelectorAll('input[name="models"]:checked')].map((b) => b.value);
}

/** Spend against a budget for one period: "$1.23 of $20.00 this month" with a bar. */
function spendCell(k, period) {
  const today = period === "today";
  const spent = k.spend ? (today ? k.spend.todayUsd : k.spend.monthUsd) : null;
  const budget = today ? k.dailyCostUsd : k.monthlyCostUsd;
  const words = today ? "today" : "this month";
  const testid = today ? "spend-today" : "spend-month";
  if (typeof spent !== "number") {
    return h("div", { class: "key-spend muted", dataset: { testid, value: "" }, title: "The budget counters did not answer: what the key spent is not known." },
      budget > 0 ? `? of ${dollars(budget)} ${words}` : "—");
  }
  if (!(budget > 0)) {
    return h("div", { class: "key-spend", dataset: { testid, value: String(spent) }, title: `No ${today ? "daily" : "monthly"} budget of its own` },
      `${dollars(spent)} ${words}`, h("span", { class: "note" }, " · no budget"));
  }
  const share = spent / budget;
  return h("div", { class: "key-spend", dataset: { testid, value: String(spent), budget: String(budget) }, title: `${(share * 100).toFixed(1)}% of the ${today ? "daily" : "monthly"} budget` },
    `${dollars(spent)} of ${dollars(budget)} ${words}`, bar(share, share >= 1 ? "bad" : share >= 0.8 ? "warn" : "ok"));
}

function expiry(k) {
  const now = Date.now();
  const prev = Date.parse(k.previousValidUntil || "");
  const prevNote = k.status === "active" && prev > now
    ? h("div", { class: "note", title: `The secret before the last rotation works until ${datetime(k.previousValidUntil)}` }, `old secret until ${datetime(k.previousValidUntil).slice(11)}`)
    : null;
  if (k.status === "revoked") return [h("span", null, `revoked ${datetime(k.revokedAt)}`)];
  if (k.expiresAt) return [h("span", null, datetime(k.expiresAt)), prevNote];
  return [h("span", { class: "muted" }, "never"), prevNote];
}

export default {
  id: "keys",
  title: "Keys",
  filters: [],
  noRange: true,
  filterNote: "API keys created at run time; spend is today and this month in the budget's time zone.",
  render(root, ctx) {
    let keys = [];
    let tiers = { chat: [], embed: [] };
    let tiersRead = false;
    let open = null; // the action row open under a key: {id, kind, el}

    // ---- the secret, shown once ------------------------------------------
    const secretSlot = h("div", { dataset: { testid: "secret-slot" } });

    function secretLine(label, value, testid) {
      const code = h("code", { dataset: { testid } }, value);
      const said = h("span", { class: "note", role: "status" });
      const copy = h("button", { type: "button", class: "plain", dataset: { testid: "copy-" + testid } }, "Copy");
      copy.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(value);
          said.textContent = "Copied to the clipboard.";
        } catch (e) {
          const range = document.createRange();
          range.selectNodeContents(code);
          const sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
          said.textContent = `The browser did not allow the copy (${e && e.message ? e.message : e}): the text is selected, press Ctrl+C (⌘C on a Mac).`;
        }
      });
      return h("div", { class: "secret-line" }, h("span", { class: "secret-label" }, label), code, copy, said);
    }

    /** Shows the secret of a key just created or rotated (r: the API's answer). */
    function showSecret(kind, r) {
      const k = r.key || {};
      const signs = !!k.accessKeyId;
      const rotated = kind === "rotated";
      const box = h("section", { class: "secret-box", role: "alert", dataset: { testid: "secret-box", kind, key: k.id || "" } },
        h("h2", null, rotated ? `New secret for “${k.name}”` : `The new key “${k.name}”`),
        h("p", { class: "secret-warning" }, "Copy it now: it will not be shown again."),
        h("p", { class: "note" }, r.note && !rotated ? r.note : "fmgate keeps only a hash of it.", " If it is lost, rotate the key."),
        signs ? secretLine("access key id", k.accessKeyId, "access-key-id") : null,
        secretLine(signs ? "secret access key" : "secret", r.secret || "", "secret"),
        rotated ? h("p", { dataset: { testid: "previous-until", value: k.previousValidUntil || "" } },
          Date.parse(k.previousValidUntil || "") > Date.now()
            ? `The previous secret keeps working until ${datetime(k.previousValidUntil)} (this browser's time); after that only this one does.`
            : "The previous secret stopped working at once.") : null,
        h("button", { type: "button", class: "plain", dataset: { testid: "hide-secret" }, on: { click: () => clear(secretSlot) } }, "I have copied it: hide the secret"));
      clear(secretSlot).append(box);
      box.scrollIntoView({ block: "nearest" });
    }

    // ---- the list ------------------------------------------------------------
    const listPanel = panel("API keys", { testid: "keys", wide: true, note: "newest first; keys in the config file (auth.keys) are not listed" });
    const filter = h("input", { type: "search", id: "keys-filter", placeholder: "filter: name, team, app, prefix, model", autocomplete: "off", "aria-label": "Filter the keys" });
    const count = h("span", { class: "note", dataset: { testid: "keys-count" } });
    const said = h("p", { class: "form-result", role: "status", dataset: { testid: "keys-result" } });
    const holder = h("div");
    filter.addEventListener("input", draw);

    function say(text, level = "ok") {
      said.className = "form-result " + level;
      said.textContent = text;
    }

    function close() {
      open = null;
      draw();
    }

    /** Opens (or closes, when it is open) the action row kind under key k. */
    function toggle(k, kind) {
      if (open && open.id === k.id && open.kind === kind) return close();
      const build = { edit: editRow, rotate: rotateRow, revoke: revokeRow, history: historyRow }[kind];
      open = { id: k.id, kind, el: h("tr", { class: "key-action-row", dataset: { testid: "key-action", kind, key: k.id } },
        h("td", { colspan: String(HEAD.length) }, build(k))) };
      draw();
      // Focus the first field; for a revocation, Cancel, so that Enter does not revoke.
      const first = open.el.querySelector(kind === "revoke" ? "button.plain" : "input, button");
      if (first) first.focus();
    }

    function actions(k) {
      const btn = (kind, label, cls = "plain") => h("button", {
        type: "button", class: cls, dataset: { action: kind }, "aria-label": `${label} ${k.name}`,
        "aria-expanded": String(!!open && open.id === k.id && open.kind === kind),
        on: { click: () => toggle(k, kind) },
      }, label);
      // A revoked key changes no more; its history stays.
      if (k.status === "revoked") return btn("history", "History");
      return [btn("edit", "Edit"), k.status === "active" ? btn("rotate", "Rotate") : null, btn("revoke", "Revoke", "plain danger"), btn("history", "History")];
    }

    function row(k) {
      const models = k.models || [];
      const owner = [k.team, k.app].filter(Boolean).join(" / ");
      return h("tr", { class: k.status === "active" ? null : "key-" + k.status, dataset: { testid: "key-row", id: k.id, name: k.name, status: k.status } },
        h("td", { title: `${k.name} (${k.id})` }, k.name),
        h("td", null, owner || h("span", { class: "muted" }, "—")),
        h("td", { title: k.accessKeyId ? "access key id: the key signs Bedrock requests" : "the first characters of the secret" },
          h("code", null, k.accessKeyId || (k.prefix ? k.prefix + "…" : "—"))),
        h("td", null, h("span", { class: "badge " + (LEVEL[k.status] || ""), dataset: { testid: "key-status" } }, k.status)),
        h("td", { dataset: { testid: "key-models" } }, models.length ? models.join(", ") : h("span", { class: "muted" }, "every tier")),
        h("td", null, spendCell(k, "today"), spendCell(k, "month")),
        h("td", { class: "num", dataset: { testid: "key-requests" } }, k.monthlyRequests ? int(k.monthlyRequests) : h("span", { class: "muted" }, "no quota")),
        h("td", null, expiry(k)),
        h("td", { title: `created ${datetime(k.createdAt)}` + (k.updatedAt ? `, last changed ${datetime(k.updatedAt)}` : "") },
          datetime(k.createdAt).slice(0, 10), h("div", { class: "note" }, k.createdBy || "")),
        h("td", null, h("div", { class: "key-actions" }, actions(k))));
    }

    function draw() {
      const q = filter.value.trim().toLowerCase();
      const match = q
        ? keys.filter((k) => [k.name, k.team, k.app, k.prefix, k.accessKeyId, k.id, k.status, ...(k.models || [])].some((v) => v && v.toLowerCase().includes(q)))
        : keys;
      const shown = match.slice(0, MAX_KEYS);
      const active = keys.filter((k) => k.status === "active").length;
      count.textContent = `${int(keys.length)} key${keys.length === 1 ? "" : "s"}, ${int(active)} active`;
      const body = [];
      for (const k of shown) {
        body.push(row(k));
        if (open && open.id === k.id) body.push(open.el);
      }
      const t = h("table", { class: "grid keys", dataset: { testid: "keys-table", rows: String(shown.length) } },
        h("thead", null, h("tr", null, HEAD.map((label) => h("th", null, label)))),
        h("tbody", null, body));
      const wrap = h("div", { class: "table-wrap" }, t);
      if (!keys.length) wrap.append(h("p", { class: "empty" }, "No key has been created yet: the form below makes one."));
      else if (!match.length) wrap.append(h("p", { class: "empty" }, "No key matches the filter."));
      if (match.length > MAX_KEYS) {
        wrap.append(h("p", { class: "note", dataset: { testid: "capped" } }, `Showing the first ${MAX_KEYS} of ${int(match.length)} keys; type in the filter to find the others.`));
      }
      clear(holder).append(wrap);
    }

    // ---- the changes to one key ------------------------------------------
    function editRow(k) {
      const daily = textInput(`edit-daily-${k.id}`, "dailyCostUsd", { inputmode: "decimal", placeholder: "none", class: "short", value: k.dailyCostUsd ? String(k.dailyCostUsd) : "" });
      const monthly = textInput(`edit-monthly-${k.id}`, "monthlyCostUsd", { inputmode: "decimal", placeholder: "none", class: "short", value: k.monthlyCostUsd ? String(k.monthlyCostUsd) : "" });
      const requests = textInput(`edit-requests-${k.id}`, "monthlyRequests", { inputmode: "numeric", placeholder: "no quota", class: "short", value: k.monthlyRequests ? String(k.monthlyRequests) : "" });
      const initialExpiry = lastDay(k.expiresAt);
      const expires = textInput(`edit-expires-${k.id}`, "expiresAt", { type: "date", value: initialExpiry });
      const choices = h("fieldset", { class: "key-models", dataset: { field: "models" } });
      modelChoices(choices, `edit-${k.id}`, tiers, k.models || []);
      const save = h("button", { type: "submit", dataset: { testid: "edit-save" } }, "Save changes");
      const box = problemBox("edit-problems");
      const form = h("form", { class: "key-form", novalidate: true },
        h("p", { class: "key-form-lead" }, `Change “${k.name}”: an empty budget or quota removes it; the change applies to its next request.`),
        choices,
        field("$ per day", daily), field("$ per month", monthly), field("requests per month", requests),
        field("expires", expires, "(after this day)"),
        h("div", { class: "key-buttons" }, save, h("button", { type: "button", class: "plain", on: { click: close } }, "Cancel")),
        box);
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        const problems = [];
        const body = {
          models: ticked(choices),
          dailyCostUsd: figure(daily, problems),
          monthlyCostUsd: figure(monthly, problems),
          monthlyRequests: figure(requests, problems, true),
        };
        if (problems.length) return report(box, form, problems);
        if (expires.value !== initialExpiry) body.expiresAt = expires.value ? endOfDay(expires.value) : "0001-01-01T00:00:00Z";
        save.disabled = true;
        try {
          const updated = await patch(`/admin/keys/${encodeURIComponent(k.id)}`, body);
          say(`Saved “${updated.name || k.name}”.`);
          close();
          ctx.reload();
        } catch (err) {
          report(box, form, err);
        } finally {
          save.disabled = false;
        }
      });
      return form;
    }

    function rotateRow(k) {
      const amount = textInput(`rotate-grace-${k.id}`, "graceSeconds", { inputmode: "decimal", value: String(DEFAULT_GRACE_HOURS), class: "short" });
      const unit = h("select", { id: `rotate-unit-${k.id}`, "aria-label": "unit of the grace" },
        [["1", "seconds"], ["60", "minutes"], ["3600", "hours"], ["86400", "days"]].map(([v, label]) => h("option", { value: v }, label)));
      unit.value = "3600";
      const go = h("button", { type: "submit", dataset: { testid: "rotate-confirm" } }, "Rotate now");
      const box = problemBox("rotate-problems");
      const form = h("form", { class: "key-form", novalidate: true },
        h("p", { class: "key-form-lead" }, `Give “${k.name}” a new secret. The current one keeps working for`),
        field("grace", amount), field("unit", unit),
        h("p", { class: "key-form-lead" }, "so that its clients can switch (0: it stops at once; at most 30 days)."),
        h("div", { class: "key-buttons" }, go, h("button", { type: "button", class: "plain", on: { click: close } }, "Cancel")),
        box);
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        const n = Number(amount.value.trim());
        if (amount.value.trim() === "" || !Number.isFinite(n) || n < 0) {
          return report(box, form, [`graceSeconds: "${amount.value.trim()}" is not a length of time; enter a number of ${unit.selectedOptions[0].text}, 0 or more`]);
        }
        go.disabled = true;
        try {
          const r = await post(`/admin/keys/${encodeURIComponent(k.id)}/rotate`, { graceSeconds: Math.round(n * Number(unit.value)) });
          showSecret("rotated", r);
          say(`Rotated “${k.name}”: its new secret is shown above, once.`);
          close();
          ctx.reload();
        } catch (err) {
          report(box, form, err);
        } finally {
          go.disabled = false;
        }
      });
      return form;
    }

    function revokeRow(k) {
      const go = h("button", { type: "submit", class: "danger", dataset: { testid: "revoke-confirm" } }, `Revoke “${k.name}”`);
      const box = problemBox("revoke-problems");
      const form = h("form", { class: "key-form", novalidate: true },
        h("p", { class: "key-form-lead" }, `Revoke “${k.name}”? Every request with its secret (and a previous one still in its grace) is refused at once, on every instance within a second. This cannot be undone: the key stays listed, revoked.`),
        h("div", { class: "key-buttons" }, go, h("button", { type: "button", class: "plain", on: { click: close } }, "Cancel")),
        box);
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        go.disabled = true;
        try {
          await del(`/admin/keys/${encodeURIComponent(k.id)}`);
          // A secret still shown for this key opens nothing any more.
          if (secretSlot.querySelector(`[data-key="${k.id}"]`)) clear(secretSlot);
          say(`Revoked “${k.name}”.`);
          close();
          ctx.reload();
        } catch (err) {
          report(box, form, err);
        } finally {
          go.disabled = false;
        }
      });
      return form;
    }

    /** The changes made to k, newest first, read when the row opens. */
    function historyRow(k) {
      const body = h("div", { dataset: { testid: "key-history", state: "loading" } }, h("p", { class: "muted" }, "Reading the changes made to this key…"));
      const wrap = h("div", { class: "key-form" },
        h("p", { class: "key-form-lead" }, `The changes made to “${k.name}”, newest first (the last ${HISTORY}; kept as long as the event store keeps spans).`),
        body,
        h("div", { class: "key-buttons" }, h("button", { type: "button", class: "plain", on: { click: close } }, "Close")));
      get(`/admin/keys/${encodeURIComponent(k.id)}/audit`, { limit: HISTORY }).then((r) => {
        const events = r.events || [];
        body.dataset.state = "ready";
        if (!events.length) {
          clear(body).append(h("p", { class: "empty" }, "No change to this key is in the event store."));
          return;
        }
        clear(body).append(h("table", { class: "grid key-history" },
          h("thead", null, h("tr", null, ["when", "what", "by", "fields sent"].map((label) => h("th", null, label)))),
          h("tbody", null, events.map((e) => h("tr", { dataset: { testid: "history-row", action: e.action } },
            h("td", null, datetime(e.at)),
            h("td", null, e.action),
            h("td", null, e.by || h("span", { class: "muted", title: e.note || "" }, "not recorded")),
            h("td", null, (e.changed || []).join(", ") || h("span", { class: "muted" }, "—")))))));
      }, (err) => {
        body.dataset.state = "error";
        clear(body).append(h("p", { class: "error" }, message(err)));
      });
      return wrap;
    }

    // ---- the form that creates a key ---------------------------------------
    const f = {
      name: textInput("key-name", "name", { placeholder: "e.g. gift finder" }),
      team: textInput("key-team", "team", { placeholder: "e.g. acme" }),
      app: textInput("key-app", "app", { placeholder: "e.g. shop" }),
      daily: textInput("key-daily", "dailyCostUsd", { inputmode: "decimal", placeholder: "none", class: "short" }),
      monthly: textInput("key-monthly", "monthlyCostUsd", { inputmode: "decimal", placeholder: "none", class: "short" }),
      requests: textInput("key-requests", "monthlyRequests", { inputmode: "numeric", placeholder: "no quota", class: "short" }),
      expires: textInput("key-expires", "expiresAt", { type: "date" }),
      bedrock: h("input", { type: "checkbox", id: "key-bedrock", name: "bedrock", dataset: { field: "bedrock" } }),
    };
    const choices = h("fieldset", { class: "key-models", dataset: { field: "models", testid: "key-models" } },
      h("legend", null, "models"), h("span", { class: "muted" }, "Reading the model tiers…"));
    const create = h("button", { type: "submit", id: "key-create" }, "Create key");
    const createBox = problemBox("create-problems");
    const form = h("form", { class: "key-form", id: "key-form", novalidate: true },
      field("name", f.name, "(required)"), field("team", f.team), field("app", f.app),
      choices,
      field("$ per day", f.daily), field("$ per month", f.monthly), field("requests per month", f.requests),
      field("expires", f.expires, "(after this day)"),
      h("label", { class: "check" }, f.bedrock, " signs Bedrock requests (an access key id and secret access key)"),
      h("div", { class: "key-buttons" }, create),
      createBox);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const problems = [];
      const spec = { name: f.name.value.trim() };
      for (const k of ["team", "app"]) if (f[k].value.trim()) spec[k] = f[k].value.trim();
      const models = ticked(choices);
      if (models.length) spec.models = models;
      const figures = { dailyCostUsd: figure(f.daily, problems), monthlyCostUsd: figure(f.monthly, problems), monthlyRequests: figure(f.requests, problems, true) };
      if (problems.length) return report(createBox, form, problems);
      for (const [k, v] of Object.entries(figures)) if (v) spec[k] = v;
      if (f.expires.value) spec.expiresAt = endOfDay(f.expires.value);
      if (f.bedrock.checked) spec.bedrock = true;
      create.disabled = true;
      try {
        const r = await post("/admin/keys", spec);
        report(createBox, form, null);
        form.reset();
        showSecret("created", r);
        say(`Created “${r.key?.name || spec.name}”: its secret is shown above, once.`);
        ctx.reload();
      } catch (err) {
        report(createBox, form, err);
      } finally {
        create.disabled = false;
      }
    });
    const createPanel = panel("Create a key", { testid: "key-create-panel" });
    createPanel.show(h("p", { class: "note" }, "Leave a budget or the quota empty for none, and every model unticked for every tier (chat and embeddings). The secret is shown once, above the list."), form);

    root.append(secretSlot, listPanel.el, createPanel.el);

    async function readTiers() {
      if (tiersRead) return;
      const m = await models();
      if (m.error) {
        clear(choices).append(h("legend", null, "models"),
          h("span", { class: "error" }, `The model tiers could not be read (${message(m.error)}); unticked, a key may use every tier.`));
        return;
      }
      tiers = { chat: m.names, embed: m.embeddings || [] };
      tiersRead = true;
      modelChoices(choices, "key", tiers, []);
    }

    return {
      async load(signal) {
        const [list] = await Promise.all([
          get("/admin/keys", null, signal).then((r) => r.keys || [], (e) => {
            if (e.name === "AbortError") throw e;
            listPanel.error(message(e));
            return null;
          }),
          readTiers(),
        ]);
        if (!list) return;
        keys = list;
        if (open && !keys.some((k) => k.id === open.id && k.status !== "revoked")) open = null;
        listPanel.show(h("div", { class: "key-toolbar" }, filter, count), said, holder);
        draw();
      },
    };
  },
};
