// Time-series charts drawn with uPlot: one small wrapper so every view
// draws its lines the same way and charts follow their container's width.

import uPlot from "uplot";

/** Whole-number tick steps for counts: 1, 2, 5, 10, 20, 50, … */
const INT_STEPS = Array.from({ length: 30 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

export const COLORS = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#e8590c", "#1098ad", "#5c940d", "#c2255c"];

/**
 * timeChart(container, {series: [{label, color, dash, sparse}], fmt, height, min, integer})
 * returns {set(xsSeconds, ...ys), destroy()}. fmt formats the y axis and
 * the legend values; integer keeps the y ticks on whole numbers (counts).
 */
export function timeChart(container, { series, fmt = (v) => String(v), height = 170, min, integer = false }) {
  const opts = {
    width: Math.max(200, container.clientWidth || 600),
    height,
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [min ?? Math.min(0, lo ?? 0), hi > 0 ? hi * 1.1 : 1] } },
    series: [
      { value: (u, v) => (v == null ? "—" : new Date(v * 1000).toLocaleTimeString("en-GB", { hour12: false })) },
      ...series.map((s, i) => ({
        label: s.label,
        stroke: s.color || COLORS[i % COLORS.length],
        width: 1.6,
        dash: s.dash,
        // Sparse series (averages with empty steps) draw their points and
        // join them across the gaps, or a lone value would not show.
        spanGaps: !!s.sparse,
        ...(s.sparse ? { points: { show: true, size: 5 } } : {}),
        value: (u, v) => (v == null ? "—" : fmt(v)),
      })),
    ],
    axes: [
      { stroke: "#555", grid: { stroke: "#eee" }, space: 70, values: (u, splits) => tickLabels(u, splits) },
      { stroke: "#555", grid: { stroke: "#eee" }, size: 78, incrs: integer ? INT_STEPS : undefined, values: (u, vals) => vals.map((v) => fmt(v)) },
    ],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
  const empty = [[], ...series.map(() => [])];
  const plot = new uPlot(opts, empty, container);
  const ro = new ResizeObserver(() => {
    const w = container.clientWidth;
    if (w > 0 && Math.abs(w - plot.width) > 1) plot.setSize({ width: w, height });
  });
  ro.observe(container);
  return {
    set(xs, ...ys) {
      plot.setData([xs, ...ys]);
    },
    destroy() {
      ro.disconnect();
      plot.destroy();
    },
  };
}

/** Local time tick labels: hh:mm(:ss) within a day, MM-DD hh:mm beyond. */
function tickLabels(u, splits) {
  const span = (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0);
  const p = (n) => String(n).padStart(2, "0");
  return splits.map((s) => {
    const d = new Date(s * 1000);
    const hm = `${p(d.getHours())}:${p(d.getMinutes())}`;
    if (span <= 600) return `${hm}:${p(d.getSeconds())}`;
    if (span <= 86400) return hm;
    return `${p(d.getMonth() + 1)}-${p(d.getDate())} ${hm}`;
  });
}

/** Seconds since the epoch for an RFC 3339 time. */
export function secs(t) {
  return Date.parse(t) / 1000;
}
