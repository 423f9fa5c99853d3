// What an admin does to client keys on the page: create and edit (one form), rotate with a grace,
// disable / enable, revoke after a confirmation — and the one place a secret is ever shown: the
// reveal box, emptied when dismissed (and on sign-out), so the secret leaves the DOM.

import { call } from "./api.js";

const $ = (selector) => document.querySelector(selector);
const path = (name) => `keys/${encodeURIComponent(name)}`;

class FieldError extends Error {}

// An Idempotency-Key per opened form: a submit retried after a lost answer gets the same key (and
// secret) back instead of a second key. getRandomValues works on plain http too, randomUUID not.
function idempotencyKey() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function list(id) {
  return $(id).value.split(",").map((s) => s.trim()).filter(Boolean);
}

function json(id, label) {
  const text = $(id).value.trim();
  if (!text) return null;
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new FieldError(`${label} is not valid JSON: ${err.message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new FieldError(`${label} must be a JSON object.`);
  return value;
}

// <input type="datetime-local"> speaks the browser's local time; the API, ISO 8601 in UTC.
function expiresIso() {
  const value = $("#key-expires").value;
  return value ? new Date(value).toISOString() : null;
}

function localInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

const pretty = (value) => (value == null ? "" : JSON.stringify(value, null, 2));

function fail(form, err) {
  const message = form.querySelector(".error");
  message.textContent = err.message;
  message.hidden = false;
}

function open(dialog) {
  const message = dialog.querySelector(".error");
  message.hidden = true;
  message.textContent = "";
  dialog.showModal();
}

export function setupKeyForms(refresh) {
  let editing = null; // the KeyView being edited; null: creating
  let idempotency = null;
  let target = null; // the key the rotate / revoke dialog is about

  function reveal(name, secret, what) {
    $("#key-reveal-what").textContent = `${what} ${name}.`;
    $("#key-secret").textContent = secret;
    $("#copy-result").textContent = "";
    $("#key-reveal").hidden = false;
  }

  function openKeyForm(key) {
    editing = key;
    idempotency = key ? null : idempotencyKey();
    $("#key-form-title").textContent = key ? `Edit ${key.name}` : "New client key";
    $("#key-submit").textContent = key ? "Save" : "Create";
    $("#key-name").value = key ? key.name : "";
    $("#key-name").readOnly = Boolean(key);
    $("#key-models").value = key && key.models ? key.models.join(", ") : "";
    $("#key-groups").value = key ? (key.groups || []).join(", ") : "";
    $("#key-expires").value = localInput(key && key.expires_at);
    $("#key-limits").value = pretty(key && key.limits);
    $("#key-budget").value = pretty(key && key.budget);
    $("#key-metadata").value = key && Object.keys(key.metadata || {}).length ? pretty(key.metadata) : "";
    open($("#key-dialog"));
  }

  function fields() {
    const models = list("#key-models");
    return {
      models: models.length ? models : null, groups: list("#key-groups"), expires_at: expiresIso(),
      limits: json("#key-limits", "Limits"), budget: json("#key-budget", "Budget"),
      metadata: json("#key-metadata", "Metadata") || {},
    };
  }

  async function submitKey(event) {
    event.preventDefault();
    const form = event.target;
    const button = $("#key-submit");
    button.disabled = true;
    try {
      const wanted = fields();
      if (editing) {
        // Only what changed: the audit log then records the change that was meant.
        const was = { ...editing, groups: editing.groups || [], metadata: editing.metadata || {} };
        const body = Object.fromEntries(Object.entries(wanted).filter(([field, value]) => (field === "expires_at"
          ? $("#key-expires").value !== localInput(editing.expires_at) // the input keeps minutes only
          : JSON.stringify(value) !== JSON.stringify(was[field] ?? null))));
        if (Object.keys(body).length) await call(path(editing.name), { method: "PATCH", body });
      } else {
        const body = { name: $("#key-name").value.trim() };
        for (const [field, value] of Object.entries(wanted)) {
          if (value !== null && !(Array.isArray(value) && !value.length) && !(field === "metadata" && !Object.keys(value).length)) body[field] = value;
        }
        const answer = await call("keys", { method: "POST", body, headers: { "Idempotency-Key": idempotency } });
        reveal(answer.key.name, answer.secret, "New key");
      }
      $("#key-dialog").close();
      refresh();
    } catch (err) {
      fail(form, err);
    } finally {
      button.disabled = false;
    }
  }

  async function submitRotate(event) {
    event.preventDefault();
    const form = event.target;
    const grace = Number($("#rotate-grace").value);
    try {
      const answer = await call(`${path(target.name)}/rotate`, {
        method: "POST", body: { grace_seconds: grace }, headers: { "Idempotency-Key": idempotency },
      });
      reveal(answer.key.name, answer.secret, "New secret for");
      $("#rotate-dialog").close();
      refresh();
    } catch (err) {
      fail(form, err);
    }
  }

  async function submitRevoke(event) {
    event.preventDefault();
    try {
      await call(path(target.name), { method: "DELETE" });
      $("#revoke-dialog").close();
      refresh();
    } catch (err) {
      fail(event.target, err);
    }
  }

  async function setDisabled(key, disabled, button) {
    const problem = $("#key-error");
    problem.hidden = true;
    button.disabled = true;
    try {
      await call(path(key.name), { method: "PATCH", body: { disabled } });
    } catch (err) {
      problem.textContent = `Could not ${disabled ? "disable" : "enable"} ${key.name}: ${err.message}`;
      problem.hidden = false;
      button.disabled = false;
    }
    refresh();
  }

  function about(dialog, key) {
    target = key;
    idempotency = idempotencyKey();
    for (const node of dialog.querySelectorAll(".target")) node.textContent = key.name;
    open(dialog);
  }

  async function copySecret() {
    const result = $("#copy-result");
    try {
      if (!navigator.clipboard) throw new Error("this browser allows the clipboard only over HTTPS or on localhost");
      await navigator.clipboard.writeText($("#key-secret").textContent);
      result.textContent = "Copied.";
    } catch (err) {
      result.textContent = `Could not copy (${err.message}): select the key and copy it by hand.`;
    }
  }

  $("#key-form").addEventListener("submit", submitKey);
  $("#rotate-form").addEventListener("submit", submitRotate);
  $("#revoke-form").addEventListener("submit", submitRevoke);
  $("#copy-key").addEventListener("click", copySecret);
  $("#dismiss-key").addEventListener("click", clearSecret);
  for (const button of document.querySelectorAll("dialog [data-cancel]")) {
    button.addEventListener("click", () => button.closest("dialog").close());
  }

  const act = (action, key, button) => {
    if (action === "edit") openKeyForm(key);
    else if (action === "rotate") about($("#rotate-dialog"), key);
    else if (action === "revoke") about($("#revoke-dialog"), key);
    else setDisabled(key, action === "disable", button);
  };
  return { act, create: () => openKeyForm(null) };
}

export function clearSecret() {
  $("#key-secret").textContent = "";
  $("#copy-result").textContent = "";
  $("#key-reveal").hidden = true;
}
