// The audit log's last 100 entries (GET /admin/audit?limit=100), newest first: when, who, what, to
// which target, and the change as "field: before → after" for the fields that changed. The API
// never puts a secret or digest in an entry, so there is none to show.

import { clock, dash, el } from "./format.js";

export const AUDIT_PATH = "audit?limit=100";
const LONGEST = 60; // characters of one value; the whole entry is in the row's title

function short(value) {
  if (value === undefined || value === null) return dash;
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > LONGEST ? `${text.slice(0, LONGEST - 1)}…` : text;
}

export function change(before, after) {
  if (!before && !after) return dash;
  if (!before) return "created";
  if (!after) return "removed";
  const fields = [...new Set([...Object.keys(before), ...Object.keys(after)])]
    .filter((f) => JSON.stringify(before[f]) !== JSON.stringify(after[f]));
  return fields.map((f) => `${f}: ${short(before[f])} → ${short(after[f])}`).join("; ") || "no change";
}

export function renderAudit(tbody, doc) {
  const rows = (doc.data || []).map((e) => el("tr", { "data-action": e.action, "data-target": e.target },
    el("td", { text: clock(e.at) }),
    el("td", { text: e.actor }),
    el("td", { text: e.action }),
    el("td", { text: e.target }),
    el("td", { class: "reason change", title: JSON.stringify({ before: e.before, after: e.after }), text: change(e.before, e.after) }),
    el("td", { class: "mono small", text: e.client ?? dash }),
    el("td", { class: "mono small", text: e.request_id ?? dash })));
  tbody.replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { colspan: 7, class: "muted", text: "No changes recorded yet." }))]));
}
