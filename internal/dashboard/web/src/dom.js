// Tiny DOM helpers: build elements, tables capped at 100 rows, panels with
// their own loading and error states, and a shared tooltip.

/**
 * h("div", {class: "x", dataset: {k: "v"}, on: {click: fn}}, child, ...)
 * Children may be strings, nodes, arrays or null.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === "style") Object.assign(el.style, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** Most rows any table renders; the APIs are asked for one more to know. */
export const MAX_ROWS = 100;

/**
 * A table of rows, at most MAX_ROWS of them, with a note when more exist.
 * columns: [{label, cell: row => string|Node, num: bool, title: row => string}]
 * onRow: optional click handler making each row a link-like button.
 */
export function table({ columns, rows, onRow, empty = "No data in this range.", testid, more = false, rowLabel }) {
  const shown = rows.slice(0, MAX_ROWS);
  const body = shown.map((row, i) => {
    const tr = h("tr", { dataset: { index: String(i) } },
      columns.map((c) => {
        const v = c.cell(row);
        return h("td", { class: c.num ? "num" : null, title: c.title ? c.title(row) : null }, v);
      }));
    if (onRow) {
      tr.classList.add("clickable");
      tr.tabIndex = 0;
      if (rowLabel) tr.setAttribute("aria-label", rowLabel(row));
      tr.addEventListener("click", () => onRow(row));
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onRow(row); } });
    }
    return tr;
  });
  const t = h("table", { class: "grid", dataset: { testid: testid || "", rows: String(shown.length) } },
    h("thead", null, h("tr", null, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.label)))),
    h("tbody", null, body));
  const wrap = h("div", { class: "table-wrap" }, t);
  if (!rows.length) wrap.append(h("p", { class: "empty" }, empty));
  if (rows.length > MAX_ROWS || more) {
    wrap.append(h("p", { class: "note", dataset: { testid: "capped" } },
      `Showing the first ${MAX_ROWS} rows; narrow the time range or filters to see the rest.`));
  }
  return wrap;
}

/**
 * A titled panel. body is where content goes; error(msg) and loading()
 * replace it; the panel tracks its own state in data-state.
 */
export function panel(title, { testid, wide = false, note } = {}) {
  const body = h("div", { class: "panel-body" });
  const el = h("section", { class: "panel" + (wide ? " wide" : ""), dataset: { testid: testid || "", state: "loading" } },
    h("h2", null, title, note ? h("span", { class: "note" }, " ", note) : null), body);
  return {
    el, body,
    loading() { el.dataset.state = "loading"; clear(body).append(h("p", { class: "muted" }, "Loading…")); },
    error(msg) { el.dataset.state = "error"; clear(body).append(h("p", { class: "error", role: "alert", dataset: { testid: "error" } }, msg)); },
    show(...nodes) { el.dataset.state = "ready"; clear(body); append(body, nodes); },
  };
}

/** A big-number tile; raw is the unformatted figure, kept in data-value. */
export function tile(label, value, { testid, sub, raw } = {}) {
  return h("div", { class: "tile", dataset: { testid: testid || "" } },
    h("div", { class: "tile-label" }, label),
    h("div", { class: "tile-value", dataset: { value: raw == null ? "" : String(raw) } }, value),
    sub ? h("div", { class: "tile-sub" }, sub) : null);
}

/** A horizontal bar for a share 0..1 (drawn with CSSOM, allowed by the CSP). */
export function bar(share, kind = "") {
  const fill = h("span", { class: "bar-fill " + kind });
  fill.style.width = Math.max(0, Math.min(1, share || 0)) * 100 + "%";
  return h("span", { class: "bar" }, fill);
}

/** The shared hover tooltip: lines of [label, value]. */
export function tooltip(target, lines) {
  const tip = document.getElementById("tooltip");
  const show = (e) => {
    clear(tip).append(...lines().map(([k, v]) => h("div", null, h("b", null, k + ": "), v)));
    tip.hidden = false;
    move(e);
  };
  const move = (e) => {
    if (!e || e.clientX == null) {
      const r = target.getBoundingClientRect();
      e = { clientX: r.left + 20, clientY: r.bottom };
    }
    const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(e.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  };
  const hide = () => { tip.hidden = true; };
  target.addEventListener("mouseenter", show);
  target.addEventListener("focus", show);
  target.addEventListener("mousemove", move);
  target.addEventListener("mouseleave", hide);
  target.addEventListener("blur", hide);
}

/** A tile whose figure changes in place: set(text, raw, sub). */
export function liveTile(label, testid) {
  const value = h("div", { class: "tile-value" }, "—");
  const sub = h("div", { class: "tile-sub" }, "");
  const el = h("div", { class: "tile", dataset: { testid } }, h("div", { class: "tile-label" }, label), value, sub);
  return {
    el,
    set(text, raw, subText = "", level = "") {
      value.textContent = text;
      value.dataset.value = raw == null ? "" : String(raw);
      sub.textContent = subText;
      el.dataset.level = level;
    },
  };
}
