// Number formatting shared by every view. Figures are rendered as text so
// they can be read (and copied) from the page; "—" stands for "no data".

const NONE = "—";

function finite(v) {
  return typeof v === "number" && Number.isFinite(v);
}

/** US dollars with a fixed number of decimals: totals 4, per turn 6. */
export function usd(v, decimals = 4) {
  if (!finite(v)) return NONE;
  return (v < 0 ? "-$" : "$") + Math.abs(v).toFixed(decimals);
}

/** Cost of one turn (or per unit): six decimals. */
export function usdTurn(v) {
  return usd(v, 6);
}

/** Milliseconds, rounded, with thousands separators. */
export function ms(v) {
  if (!finite(v)) return NONE;
  return Math.round(v).toLocaleString("en-US") + " ms";
}

/** A ratio 0..1 as a percentage. */
export function pct(r, decimals = 1) {
  if (!finite(r)) return NONE;
  return (r * 100).toFixed(decimals) + "%";
}

/** An integer count with thousands separators. */
export function int(n) {
  if (!finite(n)) return NONE;
  return Math.round(n).toLocaleString("en-US");
}

/** A score (eval) with three decimals. */
export function score(v) {
  if (!finite(v)) return NONE;
  return v.toFixed(3);
}

/** A duration in seconds in words: "45 s", "12 min 5 s", "3 h 20 min". */
export function seconds(s) {
  if (!finite(s)) return NONE;
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A local wall-clock time, "14:02:13". */
export function clock(t) {
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) return NONE;
  return d.toLocaleTimeString("en-GB", { hour12: false });
}

/** A local date and time, "2026-04-29 14:02:13". */
export function datetime(t) {
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) return NONE;
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A long identifier shortened for a table cell; the full value goes in a title. */
export function short(id, n = 12) {
  if (!id) return NONE;
  return id.length > n ? id.slice(0, n) + "…" : id;
}
