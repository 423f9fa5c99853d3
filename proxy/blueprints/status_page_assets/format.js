// Building DOM and formatting values. Every value from the API goes in as text (textContent),
// never as HTML: model names and request ids come from clients.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const dash = "–";

// Wall-clock seconds (the API's times) or an ISO string → a Date.
export function toDate(value) {
  if (value === null || value === undefined || value === "") return null;
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

export function clock(value) {
  const date = toDate(value);
  if (!date) return dash;
  const sameDay = date.toDateString() === new Date().toDateString();
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return sameDay ? time : `${date.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

export function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// "12:03:04 (in 1m 20s)" / "(3m ago)"
export function when(value) {
  const date = toDate(value);
  if (!date) return dash;
  const delta = (date.getTime() - Date.now()) / 1000;
  return `${clock(value)} (${delta >= 0 ? `in ${span(delta)}` : `${span(-delta)} ago`})`;
}

export function count(n) {
  if (n === null || n === undefined) return dash;
  return Number(n).toLocaleString("en-US");
}

// Dollars as the API gives them (exact to the micro-dollar): "$0.0113", "$12.40", "$1,234".
export function dollars(n) {
  if (n === null || n === undefined) return dash;
  const value = Number(n);
  if (value === 0) return "$0";
  const digits = value >= 100 ? 0 : value >= 1 ? 2 : value >= 0.01 ? 4 : 6;
  return `$${value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })}`;
}

export function percent(ratio) {
  return `${(ratio * 100).toFixed(ratio >= 0.995 || ratio === 0 ? 0 : 1)}%`;
}

export function ms(n) {
  if (n === null || n === undefined) return dash;
  return n >= 10000 ? `${(n / 1000).toFixed(1)} s` : `${Math.round(n)} ms`;
}
