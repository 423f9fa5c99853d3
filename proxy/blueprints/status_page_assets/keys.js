// The client keys (GET /admin/keys): where each comes from, its hint, when it was made, last used
// and expires, whether it is disabled or rotating, its models and groups. For an admin, a row's
// buttons; for a viewer none are made at all, so the page cannot offer what the API would refuse.
// Never a secret: the API's rows carry only the hint ("sk-…a1b2").

import { dash, el, when } from "./format.js";

function state(k) {
  if (k.disabled) return el("span", { class: "badge disabled", text: "disabled" });
  const expired = k.expires_at && new Date(k.expires_at).getTime() <= Date.now();
  if (expired) return el("span", { class: "badge disabled", text: "expired" });
  return el("span", {}, el("span", { class: "badge active", text: "active" }),
    k.rotating_until ? el("div", { class: "muted small", text: `old secret until ${when(k.rotating_until)}` }) : null);
}

function buttons(k, act) {
  const button = (label, action, danger) => el("button", {
    type: "button", class: danger ? "danger" : "", "aria-label": `${label} ${k.name}`,
    onclick: (event) => act(action, k, event.currentTarget),
  }, label);
  const runtime = k.origin === "runtime"; // the config file decides everything but `disabled` of its keys
  return [
    runtime ? button("Edit", "edit") : null,
    runtime ? button("Rotate", "rotate") : null,
    k.disabled ? button("Enable", "enable") : button("Disable", "disable", true),
    runtime ? button("Revoke", "revoke", true) : null,
  ];
}

function keyRow(k, act) {
  const models = k.models == null ? "every model" : k.models.join(", ");
  return el("tr", { "data-key": k.name, "data-origin": k.origin, "data-state": k.disabled ? "disabled" : "active" },
    el("td", {}, el("b", { text: k.name })),
    el("td", { text: k.origin || "config" }),
    el("td", { class: "mono small hint", text: k.hint ?? dash }),
    el("td", { text: when(k.created_at) }),
    el("td", { class: "last-used", text: when(k.last_used_at) }),
    el("td", { class: "expires", text: k.expires_at ? when(k.expires_at) : "never" }),
    el("td", { class: "state" }, state(k)),
    el("td", { class: "reason models", text: models }),
    el("td", { text: (k.groups || []).join(", ") || dash }),
    act ? el("td", { class: "actions" }, buttons(k, act)) : null);
}

// `act(action, key, button)` for an admin; null for a viewer (no buttons, no column for them).
export function renderKeys(container, doc, act) {
  const keys = doc.data || [];
  if (!keys.length) {
    container.replaceChildren(el("p", { class: "muted", text: "No client keys yet." }));
    return;
  }
  const heads = ["Name", "Origin", "Hint", "Created", "Last used", "Expires", "State", "Models", "Groups"];
  container.replaceChildren(el("table", { class: "grid", id: "keys-table" },
    el("thead", {}, el("tr", {}, [...heads, ...(act ? [""] : [])].map((h) => el("th", { text: h })))),
    el("tbody", {}, keys.map((k) => keyRow(k, act)))));
}
