// Usage over the last hour / day / 30 days, per client key, per model and per account
// (GET /admin/usage?since=&until=&group_by=…&bucket=…), as stacked bar charts of requests, tokens
// or spend, with a legend that gives each series' totals: tokens, spend (and requests of unknown
// cost), the cache hit rate (cached ÷ input tokens) and what the cache saved.

import { stackedBars } from "./charts.js";
import { count, dollars, el, percent } from "./format.js";

export const RANGES = {
  hour: { step: 60, buckets: 60, bucket: "minute" },
  day: { step: 3600, buckets: 24, bucket: "hour" },
  month: { step: 86400, buckets: 30, bucket: "day" },
};
export const GROUPS = ["client_key", "model", "account"];
const MAX_SERIES = 7; // the rest are drawn as one "other" series
const COUNTERS = ["requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens",
  "cost_usd", "cost_unknown_requests", "cache_saved_usd"];
const TITLES = { client_key: "Client key", model: "Model", account: "Account" };
const UNITS = { requests: "requests", tokens: "tokens", spend: "USD" };

// The query for one chart: whole buckets (UTC-aligned, as the API buckets them), the current one last.
export function usagePath(range, group, nowSeconds = Date.now() / 1000) {
  const { step, buckets, bucket } = RANGES[range];
  const current = Math.floor(nowSeconds / step) * step;
  const since = current - (buckets - 1) * step;
  const params = new URLSearchParams({ since, until: current + step, group_by: group, bucket });
  return { path: `usage?${params}`, since, step, buckets };
}

function label(date, step) {
  return step >= 86400
    ? date.toLocaleDateString([], { month: "short", day: "numeric" })
    : date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function measureOf(row, measure) {
  if (measure === "spend") return row.cost_usd || 0;
  return measure === "tokens" ? (row.input_tokens || 0) + (row.output_tokens || 0) : row.requests || 0;
}

// The legend's columns: [heading, value of a series' (or the window's) totals].
const COLUMNS = [
  ["Requests", (t) => count(t.requests)], ["Errors", (t) => count(t.errors)],
  ["Input tokens", (t) => count(t.input_tokens)], ["Output tokens", (t) => count(t.output_tokens)],
  ["Cached", (t) => count(t.cached_tokens)], ["Reasoning", (t) => count(t.reasoning_tokens)],
  ["Spend", (t) => dollars(t.cost_usd) + (t.cost_unknown_requests ? ` + ${count(t.cost_unknown_requests)} unpriced` : "")],
  ["Cache hit", (t) => (t.input_tokens ? percent(t.cached_tokens / t.input_tokens) : "–")],
  ["Cache saved", (t) => dollars(t.cache_saved_usd)],
];

export function renderUsage(figure, doc, query, group, measure) {
  const { since, step, buckets } = query;
  const times = Array.from({ length: buckets }, (_, i) => new Date((since + i * step) * 1000));
  const byName = new Map();
  for (const row of doc.rows || []) {
    const name = row[group] === null || row[group] === undefined || row[group] === "" ? "(none)" : String(row[group]);
    if (!byName.has(name)) byName.set(name, { name, values: new Array(buckets).fill(0), totals: Object.fromEntries(COUNTERS.map((c) => [c, 0])) });
    const series = byName.get(name);
    for (const c of COUNTERS) series.totals[c] += row[c] || 0;
    const at = typeof row.time === "number" ? row.time : Date.parse(row.time) / 1000;
    const index = Math.floor((at - since) / step);
    if (index >= 0 && index < buckets) series.values[index] += measureOf(row, measure);
  }
  let series = [...byName.values()].sort((a, b) => measureOf(b.totals, measure) - measureOf(a.totals, measure));
  if (series.length > MAX_SERIES + 1) {
    const rest = series.slice(MAX_SERIES);
    const other = { name: `${rest.length} others`, values: new Array(buckets).fill(0), totals: Object.fromEntries(COUNTERS.map((c) => [c, 0])) };
    for (const s of rest) {
      s.values.forEach((v, i) => { other.values[i] += v; });
      for (const c of COUNTERS) other.totals[c] += s.totals[c];
    }
    series = [...series.slice(0, MAX_SERIES), other];
  }
  stackedBars(figure.querySelector(".chart"), {
    buckets: times.map((time) => ({ time, label: label(time, step) })), series,
    unit: UNITS[measure] || "requests", empty: "No requests in this period",
  });
  const totals = doc.totals || {};
  figure.querySelector(".legend").replaceChildren(
    el("thead", {}, el("tr", {}, el("th"), el("th", { text: TITLES[group] || group }),
      COLUMNS.map(([h]) => el("th", { class: "num", text: h })))),
    el("tbody", {}, series.map((s, k) => el("tr", { "data-series": s.name },
      el("td", {}, el("span", { class: `swatch s${k % 8}` })), el("td", { text: s.name }),
      COLUMNS.map(([h, show]) => el("td", { class: "num", "data-column": h, text: show(s.totals) }))))),
    el("tfoot", {}, el("tr", {}, el("td"), el("th", { text: "Total" }),
      COLUMNS.map(([h, show]) => el("td", { class: "num", "data-column": h, text: show(totals) })))));
}
