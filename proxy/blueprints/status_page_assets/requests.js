// The last requests on this host, newest first (GET /admin/requests?limit=100): who (key and
// address), what, where it went, how it ended, how long it took and what it cost (a dash: no
// price known, or no usage). A request the request log keeps (`has_body`) has a "details" button:
// its bodies and attempts (detail.js).

import { clock, count, dash, dollars, el, ms } from "./format.js";

export const REQUESTS_PATH = "requests?limit=100";

export function renderRequests(tbody, doc, open) {
  // A refresh replaces the rows: the details button that had the focus keeps it.
  const focused = tbody.contains(document.activeElement) && document.activeElement.closest("tr").dataset.requestId;
  const rows = (doc.data || []).map((r) => {
    const ok = r.outcome === "ok";
    const where = r.upstream ? `${r.upstream} · ${r.account || dash}` : dash;
    const tokens = r.input_tokens == null && r.output_tokens == null ? dash
      : `${count(r.input_tokens ?? 0)} / ${count(r.output_tokens ?? 0)}`;
    return el("tr", { "data-request-id": r.request_id, "data-outcome": r.outcome },
      el("td", { text: clock(r.time) }),
      el("td", { class: "mono small", text: r.request_id }),
      el("td", { text: r.client_key ?? dash }),
      el("td", { class: "mono small", text: r.client_address ?? dash }),
      el("td", { text: r.client_protocol ?? dash }),
      el("td", {}, r.model ?? dash, r.upstream_model && r.upstream_model !== r.model
        ? el("div", { class: "muted small", text: `upstream: ${r.upstream_model}` }) : null),
      el("td", {}, where, r.attempts > 1 ? el("div", { class: "muted small", text: `${r.attempts} attempts` }) : null),
      el("td", { text: r.stream ? "yes" : "no" }),
      el("td", { class: "num", text: r.status ?? dash }),
      el("td", {}, el("span", { class: `badge ${ok ? "active" : "disabled"}`, text: r.outcome ?? dash })),
      el("td", { class: "num", text: ms(r.first_byte_ms) }),
      el("td", { class: "num", text: ms(r.duration_ms) }),
      el("td", { class: "num", text: tokens }),
      el("td", { class: "num", "data-column": "cost", text: dollars(r.cost_usd) }),
      el("td", {}, r.has_body ? el("button", { type: "button", class: "details", title: `Bodies and attempts of ${r.request_id}`,
        onclick: () => open(r.request_id) }, "details") : null));
  });
  tbody.replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { colspan: 15, class: "muted", text: "No requests yet on this host." }))]));
  const again = focused && [...tbody.querySelectorAll("tr")].find((tr) => tr.dataset.requestId === focused);
  if (again && again.querySelector("button")) again.querySelector("button").focus();
}
