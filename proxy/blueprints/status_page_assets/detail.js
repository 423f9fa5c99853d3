// One request as the request log keeps it (GET /admin/requests/{id}): who and what, its attempts,
// and its four bodies side by side — a stream as the chunks it came in, each with its time since
// the request arrived. Bodies are what clients and upstreams sent: text only, never markup.

import { call } from "./api.js";
import { count, dash, el, ms } from "./format.js";

const $ = (selector) => document.querySelector(selector);
let shown = null; // the request on display: an answer for an earlier click is dropped

function note(text) {
  return el("p", { class: "muted", text });
}

function headers(map) {
  const lines = Object.entries(map || {}).map(([name, value]) => `${name}: ${value}`);
  return lines.length ? el("details", {}, el("summary", { text: "headers" }), el("pre", { text: lines.join("\n") })) : null;
}

function pretty(text) {
  if (!/^\s*[[{]/.test(text)) return text;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// A stream's chunks: `end` offsets are into the UTF-8 bytes; the decoder carries a character cut
// between two chunks over to the second.
function events(part) {
  const bytes = new TextEncoder().encode(part.data);
  const decoder = new TextDecoder();
  let start = 0;
  return el("ol", { class: "events" }, part.chunks.map(([t, end]) => {
    const text = decoder.decode(bytes.subarray(start, Math.max(start, end)), { stream: true });
    start = Math.max(start, end);
    return el("li", {}, el("span", { class: "t", text: `+${Math.round(t)} ms` }), el("pre", { text }));
  }));
}

function body(part) {
  if (!part) return note("no body");
  if (part.encoding === "base64") return note(`binary, ${count(part.size)} bytes`);
  if (part.chunks) return events(part);
  return el("pre", { text: pretty(part.data) });
}

function pane(name, title, part, ...about) {
  return el("section", { class: "pane", "data-part": name }, el("h3", { text: title }),
    el("div", { class: "muted small" }, ...about.filter(Boolean).map((line) => (line instanceof Node ? line : el("div", { text: line }))),
      part ? el("div", { text: `${count(part.size)} bytes · ${part.content_type || "no content type"}` }) : null),
    part && part.truncated ? el("p", { class: "warn small",
      text: `truncated (${count(part.stored)} of ${count(part.size)} bytes kept)` }) : null,
    body(part));
}

function attemptsTable(attempts, chosen) {
  return el("table", { class: "grid attempts" },
    el("thead", {}, el("tr", {}, ["#", "Upstream · account", "Model", "Status", "Class", "Action", "Started", "Elapsed"]
      .map((h) => el("th", { text: h })))),
    el("tbody", {}, attempts.map((a) => el("tr", { "data-attempt": a.number, class: a === chosen ? "chosen" : null },
      el("td", { text: a.number }), el("td", { text: `${a.upstream ?? dash} · ${a.account ?? dash}` }),
      el("td", { text: a.upstream_model ?? dash }), el("td", { class: "num", text: a.status ?? dash }),
      el("td", { text: a.class ?? dash }), el("td", { text: a.action ?? dash }),
      el("td", { class: "num", text: ms(a.started_ms) }), el("td", { class: "num", text: ms(a.elapsed_ms) })))));
}

function render(doc, chosenNumber) {
  const attempts = doc.attempts || [];
  const chosen = attempts.find((a) => a.number === chosenNumber) || attempts[attempts.length - 1];
  const model = doc.upstream_model && doc.upstream_model !== doc.model ? `${doc.model} → ${doc.upstream_model}` : doc.model;
  const facts = [["Key", doc.client_key], ["Model", model], ["Status", doc.status], ["Outcome", doc.outcome],
    ["Duration", ms(doc.duration_ms)], ["Stream", doc.stream ? "yes" : "no"], ["Kept because", doc.logged_because]];
  const out = [el("dl", { class: "facts" }, facts.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v ?? dash }))))];
  if (!doc.has_body) {
    out.push(note("The request log does not keep this request (request_log in the config)."));
    return out;
  }
  out.push(el("h3", { text: "Attempts" }), attempts.length ? el("div", { class: "scroll" }, attemptsTable(attempts, chosen)) : note("No upstream was tried."));
  if (doc.bodies_withheld) {
    out.push(el("p", { class: "notice", text: "The bodies are shown to admin keys only: this key is a viewer." }));
    return out;
  }
  if (attempts.length > 1) {
    out.push(el("div", { class: "tabs", role: "group", "aria-label": "Attempt shown" }, attempts.map((a) => el("button", {
      type: "button", "aria-pressed": String(a === chosen), onclick: () => choose(doc, a.number),
    }, `Attempt ${a.number} (${a.status ?? a.class ?? dash})`))));
  }
  const req = doc.client_request || {};
  const resp = doc.client_response || {};
  out.push(el("div", { class: "bodies" },
    pane("client_request", "Client request", req.body, `${req.method} ${req.path}${req.query ? `?${req.query}` : ""}`, headers(req.headers)),
    pane("upstream_request", "Upstream request", chosen && chosen.request, chosen && `attempt ${chosen.number}: ${chosen.url}`),
    pane("upstream_response", "Upstream response", chosen && chosen.response, chosen && `attempt ${chosen.number}: HTTP ${chosen.status ?? dash}`),
    pane("client_response", "Client response", resp.body, `HTTP ${resp.status ?? dash}`, headers(resp.headers))));
  return out;
}

function show(doc, attempt) {
  $("#detail-content").replaceChildren(...render(doc, attempt));
}

function choose(doc, attempt) { // the panel is drawn again: the chosen button keeps the focus
  show(doc, attempt);
  $('#detail-content .tabs [aria-pressed="true"]').focus();
}

export async function openDetail(id) {
  shown = id;
  const problem = $("#request-detail .error");
  problem.hidden = true;
  $("#detail-title").textContent = `Request ${id}`;
  $("#detail-content").replaceChildren(note("Loading…"));
  $("#request-detail").hidden = false;
  $("#detail-title").focus();
  try {
    const doc = await call(`requests/${encodeURIComponent(id)}`);
    if (shown === id) show(doc);
  } catch (err) {
    if (shown !== id) return;
    $("#detail-content").replaceChildren();
    problem.textContent = err.message;
    problem.hidden = false;
  }
}

export function closeDetail() {
  const was = shown;
  shown = null;
  $("#request-detail").hidden = true;
  $("#detail-content").replaceChildren();
  return was;
}

export function setupDetail() {
  const close = () => {
    const id = closeDetail();
    const button = id && document.querySelector(`#requests tr[data-request-id="${CSS.escape(id)}"] button`);
    if (button) button.focus();
  };
  $("#close-detail").addEventListener("click", close);
  $("#request-detail").addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
  });
}
