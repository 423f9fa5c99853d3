// A stacked bar chart in SVG, drawn by hand: a few series over at most a few dozen time buckets
// need no chart library. Colours come from the stylesheet (classes s0…s7), nothing inline.

const SVG = "http://www.w3.org/2000/svg";
const W = 640, H = 200, LEFT = 64, RIGHT = 8, TOP = 10, BOTTOM = 24;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// The smallest 1, 2 or 5 × 10^n at or above `value`, so the axis reads in round numbers.
function niceCeil(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((f) => f * magnitude).find((v) => v >= value);
}

function compact(n) {
  if (n > 0 && n < 1) return String(+n.toPrecision(2)); // dollars: 0.000025
  if (n >= 1e9) return `${+(n / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return String(n);
}

// buckets: [{time: Date, label: string}]; series: [{name, values: [number per bucket]}];
// unit: what a value counts ("requests", "tokens").
export function stackedBars(container, { buckets, series, unit, empty }) {
  const totals = buckets.map((_, i) => series.reduce((sum, s) => sum + s.values[i], 0));
  const top = niceCeil(Math.max(0, ...totals));
  const plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
  const slot = plotW / Math.max(1, buckets.length);
  const barW = Math.max(1, slot * 0.8);
  const y = (v) => TOP + plotH - (v / top) * plotH;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "bars",
    "aria-label": `${unit} per ${buckets.length ? "bucket" : "period"}, stacked by series` });

  for (const tick of [0, top / 2, top]) {
    root.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: y(tick), y2: y(tick), class: "grid-line" }));
    root.append(svg("text", { x: LEFT - 6, y: y(tick) + 4, class: "axis", "text-anchor": "end" }, compact(tick)));
  }
  const labelEvery = Math.max(1, Math.ceil(buckets.length / 6));
  buckets.forEach((bucket, i) => {
    const x = LEFT + i * slot + (slot - barW) / 2;
    if (i % labelEvery === 0) {
      root.append(svg("text", { x: x + barW / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, bucket.label));
    }
    let base = 0;
    series.forEach((s, k) => {
      const value = s.values[i];
      if (!value) return;
      const rect = svg("rect", {
        x, width: barW, y: y(base + value), height: Math.max(1, y(base) - y(base + value)), class: `s${k % 8}`,
        "data-series": s.name, "data-time": bucket.time.toISOString(), "data-value": value,
      });
      rect.append(svg("title", {}, `${bucket.label} · ${s.name}: ${value.toLocaleString("en-US")} ${unit}`));
      root.append(rect);
      base += value;
    });
  });
  if (!totals.some((t) => t > 0)) {
    root.append(svg("text", { x: LEFT + plotW / 2, y: TOP + plotH / 2, class: "axis empty", "text-anchor": "middle" }, empty));
  }
  container.replaceChildren(root);
}
