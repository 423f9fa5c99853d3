// Upstreams and their accounts (GET /admin/accounts), with enable / disable buttons.

import { count, dash, el, span, when } from "./format.js";

function failures(map) {
  const entries = Object.entries(map || {}).filter(([, n]) => n > 0);
  if (!entries.length) return dash;
  return entries.sort((a, b) => b[1] - a[1]).map(([klass, n]) => `${klass} ${count(n)}`).join(", ");
}

function lastError(last) {
  if (!last) return dash;
  return el("span", { title: last.message || last.class }, `${last.class} · ${when(last.at)}`,
    last.message ? el("div", { class: "muted small", text: last.message }) : null);
}

function proxies(list) {
  if (!list || !list.length) return el("span", { class: "muted", text: "direct" });
  return el("ul", { class: "plain" }, list.map((p) => el("li", {},
    el("span", { class: `badge ${p.status}`, text: p.status }), " ", p.url,
    p.status === "cooling" ? el("div", { class: "muted small", text: `until ${when(p.until)}${p.reason ? ` · ${p.reason}` : ""}` }) : null,
    p.status !== "cooling" && p.consecutive_failures ? el("div", { class: "muted small", text: `${p.consecutive_failures} failures in a row` }) : null)));
}

function summary(accounts) {
  const by = {};
  for (const a of accounts) by[a.status] = (by[a.status] || 0) + 1;
  return Object.entries(by).map(([status, n]) => `${n} ${status}`).join(", ") || "no accounts";
}

function accountRow(upstream, a, act) {
  const disabled = a.status === "disabled";
  const action = disabled ? "enable" : "disable";
  const button = el("button", {
    type: "button", class: disabled ? "" : "danger", "aria-label": `${disabled ? "Enable" : "Disable"} ${a.id}`,
    onclick: (event) => act(upstream, a.id, action, event.currentTarget),
  }, disabled ? "Enable" : "Disable");
  const until = a.status === "cooling" && a.until ? when(a.until) : dash;
  const since = a.since ? el("div", { class: "muted small", text: `for ${span(Date.now() / 1000 - a.since)}` }) : null;
  return el("tr", { "data-account": `${upstream}/${a.id}`, "data-state": a.status },
    el("td", {}, el("b", { text: a.id }), el("div", { class: "muted small", text: a.key })),
    el("td", { class: "state" }, el("span", { class: `badge ${a.status}`, text: a.status }), since),
    el("td", { class: "reason", text: a.reason || dash }),
    el("td", { text: until }),
    el("td", { class: "num", text: a.max_concurrency ? `${a.in_flight} / ${a.max_concurrency}` : String(a.in_flight) }),
    el("td", { class: "num", text: count(a.requests) }),
    el("td", { text: failures(a.failures) }),
    el("td", {}, lastError(a.last_error)),
    el("td", { class: "num", text: a.balance === null || a.balance === undefined ? dash : count(a.balance) }),
    el("td", {}, proxies(a.proxies)),
    el("td", {}, button));
}

export function renderAccounts(container, doc, act) {
  const blocks = (doc.upstreams || []).map((u) => el("div", { class: "upstream", "data-upstream": u.name },
    el("h3", {}, u.name, el("span", { class: "muted", text: ` ${u.protocol} · policy ${u.policy} · ${summary(u.accounts)}` })),
    el("div", { class: "scroll" }, el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ["Account", "State", "Reason", "Cooling until", "In flight", "Requests",
        "Failures", "Last error", "Balance", "Outbound proxies", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, u.accounts.map((a) => accountRow(u.name, a, act)))))));
  container.replaceChildren(...(blocks.length ? blocks : [el("p", { class: "muted", text: "No upstreams configured." })]));
}
