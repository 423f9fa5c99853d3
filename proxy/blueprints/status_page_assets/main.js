// The status page: sign in and out, and a refresh every few seconds of every view. A view whose
// call failed keeps its last data, dimmed, with the API's message and the time it was last good.

import { renderAccounts } from "./accounts.js";
import { call, session } from "./api.js";
import { AUDIT_PATH, renderAudit } from "./audit.js";
import { closeDetail, openDetail, setupDetail } from "./detail.js";
import { clearSecret, setupKeyForms } from "./keyforms.js";
import { renderKeys } from "./keys.js";
import { clock, el, when } from "./format.js";
import { REQUESTS_PATH, renderRequests } from "./requests.js";
import { GROUPS, renderUsage, usagePath } from "./usage.js";

const REFRESH_MS = 5000;
const $ = (selector) => document.querySelector(selector);
const view = { range: "hour", measure: "requests" };
const lastGood = {}; // view name → when its data last arrived (ms)
const usage = {}; // group → {doc, query}, redrawn when the measure changes
let timer = null;
let keyForms = null; // set up once the page is wired
let generation = 0; // a refresh that finishes after a newer one started (or a sign-out) is dropped

function section(name) {
  return document.querySelector(`[data-section="${name}"]`);
}

function settle(name, error) {
  const box = section(name);
  const message = box.querySelector(".section-error");
  if (error) {
    message.textContent = lastGood[name]
      ? `Could not refresh — showing data from ${clock(lastGood[name] / 1000)}: ${error.message}`
      : error.message;
  } else {
    lastGood[name] = Date.now();
  }
  message.hidden = !error;
  box.classList.toggle("stale", Boolean(error && lastGood[name]));
  box.querySelector(".updated").textContent = lastGood[name] ? `updated ${clock(lastGood[name] / 1000)}` : "";
}

function showStatus(result) {
  const pill = $("#streams");
  const problem = $("#status-error");
  pill.hidden = false;
  if (result.status === "fulfilled") {
    const s = result.value;
    $("#open-streams").textContent = String(s.open_streams);
    pill.classList.remove("stale");
    pill.title = "Streams open now, summed over this host's workers";
    const parts = [s.version && `v${s.version}`, s.workers && `${s.workers} worker${s.workers === 1 ? "" : "s"}`,
      s.reloaded_at && `config loaded ${when(s.reloaded_at)}`];
    $("#server").textContent = parts.filter(Boolean).join(" · ");
    $("#server").title = s.config ? `config: ${s.config}` : "";
    problem.hidden = true;
  } else {
    pill.classList.add("stale");
    problem.textContent = `Open streams and server status could not be read: ${result.reason.message}`;
    problem.hidden = false;
  }
}

async function refresh() {
  const mine = ++generation;
  clearTimeout(timer);
  if (!session.key()) return;
  const queries = GROUPS.map((group) => usagePath(view.range, group));
  const results = await Promise.allSettled([call("status"), call("accounts"), call(REQUESTS_PATH),
    call("whoami"), call("keys"), call(AUDIT_PATH), ...queries.map((q) => call(q.path))]);
  if (mine !== generation || !session.key()) return;
  const refused = results.find((r) => r.status === "rejected" && r.reason.status === 401);
  if (refused) {
    signOut(`Signed out: the proxy no longer accepts this key (${refused.reason.message})`);
    return;
  }
  const [status, accounts, requests, whoami, keys, audit, ...byGroup] = results;
  showStatus(status);
  if (accounts.status === "fulfilled") renderAccounts($("#accounts"), accounts.value, act);
  settle("accounts", accounts.status === "rejected" ? accounts.reason : null);
  if (requests.status === "fulfilled") renderRequests($("#requests tbody"), requests.value, openDetail);
  settle("requests", requests.status === "rejected" ? requests.reason : null);
  showKeys(whoami, keys);
  if (audit.status === "fulfilled") renderAudit($("#audit tbody"), audit.value);
  settle("audit", audit.status === "rejected" ? audit.reason : null);
  GROUPS.forEach((group, i) => {
    if (byGroup[i].status === "fulfilled") {
      usage[group] = { doc: byGroup[i].value, query: queries[i] };
      renderUsage($(`#usage-${group}`), usage[group].doc, usage[group].query, group, view.measure);
    }
  });
  const usageFailure = byGroup.find((r) => r.status === "rejected");
  settle("usage", usageFailure ? usageFailure.reason : null);

  const failed = results.filter((r) => r.status === "rejected").length;
  const freshness = $("#freshness");
  freshness.textContent = failed
    ? `${failed} of ${results.length} calls failed at ${clock(Date.now() / 1000)}: some data is stale`
    : `Updated ${clock(Date.now() / 1000)}`;
  freshness.classList.toggle("warn", failed > 0);
  timer = setTimeout(() => (document.hidden ? null : refresh()), REFRESH_MS);
}

// Only an admin gets the buttons that change keys; a viewer — or a page that could not learn its
// role — gets none (the API would refuse them anyway: 403).
function showKeys(whoami, keys) {
  const me = whoami.status === "fulfilled" ? whoami.value : null;
  const admin = Boolean(me && me.role === "admin");
  $("#whoami").textContent = me ? `${me.name} (${me.role})` : "";
  $("#keys-toolbar").replaceChildren(...(admin
    ? [el("button", { type: "button", id: "new-key", onclick: () => keyForms.create() }, "New key")] : []));
  if (keys.status === "fulfilled") renderKeys($("#keys"), keys.value, admin ? keyForms.act : null);
  settle("keys", keys.status === "rejected" ? keys.reason : whoami.status === "rejected" ? whoami.reason : null);
}

async function act(upstream, id, action, button) {
  const problem = $("#action-error");
  problem.hidden = true;
  button.disabled = true;
  try {
    await call(`accounts/${encodeURIComponent(upstream)}/${encodeURIComponent(id)}/${action}`, {
      method: "POST", body: action === "disable" ? { reason: "disabled on the status page" } : undefined,
    });
  } catch (err) {
    problem.textContent = `Could not ${action} ${upstream}/${id}: ${err.message}`;
    problem.hidden = false;
    button.disabled = false;
  }
  await refresh();
}

function signOut(reason) {
  generation += 1;
  clearTimeout(timer);
  session.forget();
  for (const name of Object.keys(lastGood)) delete lastGood[name];
  clearSecret();
  closeDetail();
  for (const dialog of document.querySelectorAll("dialog[open]")) dialog.close();
  for (const node of [$("#accounts"), $("#requests tbody"), $("#keys"), $("#keys-toolbar"), $("#audit tbody"),
    ...document.querySelectorAll(".chart, .legend")]) {
    node.replaceChildren();
  }
  $("#dashboard").hidden = true;
  for (const id of ["#sign-out", "#refresh", "#streams"]) $(id).hidden = true;
  $("#server").textContent = "";
  $("#whoami").textContent = "";
  $("#freshness").textContent = "";
  $("#sign-in").hidden = false;
  const message = $("#sign-in-error");
  message.textContent = reason || "";
  message.hidden = !reason;
  $("#admin-key").focus();
}

function showDashboard() {
  $("#sign-in").hidden = true;
  $("#sign-in-error").hidden = true;
  $("#dashboard").hidden = false;
  $("#sign-out").hidden = false;
  $("#refresh").hidden = false;
  refresh();
}

async function signIn(event) {
  event.preventDefault();
  const input = $("#admin-key");
  const key = input.value.trim();
  const message = $("#sign-in-error");
  if (!key) return;
  const button = event.target.querySelector("button");
  button.disabled = true;
  try {
    await call("accounts", { key }); // the key is kept only once the proxy accepted it
    session.keep(key);
    input.value = "";
    showDashboard();
  } catch (err) {
    message.textContent = err.message;
    message.hidden = false;
  } finally {
    button.disabled = false;
  }
}

function choose(attribute, value) {
  for (const button of document.querySelectorAll(`[${attribute}]`)) {
    button.setAttribute("aria-pressed", String(button.getAttribute(attribute) === value));
  }
}

function wire() {
  keyForms = setupKeyForms(refresh);
  setupDetail();
  $("#sign-in-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", () => signOut(""));
  $("#refresh").addEventListener("click", () => refresh());
  for (const button of document.querySelectorAll("[data-range]")) {
    button.addEventListener("click", () => {
      view.range = button.dataset.range;
      choose("data-range", view.range);
      refresh();
    });
  }
  for (const button of document.querySelectorAll("[data-measure]")) {
    button.addEventListener("click", () => {
      view.measure = button.dataset.measure;
      choose("data-measure", view.measure);
      for (const group of GROUPS) {
        if (usage[group]) renderUsage($(`#usage-${group}`), usage[group].doc, usage[group].query, group, view.measure);
      }
    });
  }
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && session.key()) refresh();
  });
  if (session.key()) showDashboard();
  else signOut("");
}

wire();
