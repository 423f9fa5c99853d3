// The admin key and the calls to the admin API.
//
// The key lives in this tab's sessionStorage only: never in a URL, a cookie or localStorage, and
// it travels only in the Authorization header of calls to this proxy (same origin, no cookies, no
// referrer). Paths are relative to the page, so a proxy mounted under a prefix still works.

const STORAGE = "llm-proxy-admin-key";
const TIMEOUT_MS = 10000;

export const session = {
  key: () => sessionStorage.getItem(STORAGE),
  keep: (key) => sessionStorage.setItem(STORAGE, key),
  forget: () => sessionStorage.removeItem(STORAGE),
};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status; // 0 when the proxy did not answer
  }
}

// GET, POST, PATCH or DELETE `path` (relative to /admin/) with `key` (default: the signed-in one);
// the JSON answer, or an ApiError carrying the API's own message.
export async function call(path, { method = "GET", body, key = session.key(), headers: extra = {} } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  const headers = { ...extra, Authorization: `Bearer ${key}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer", signal: controller.signal,
    });
  } catch (err) {
    const why = controller.signal.aborted ? `no answer within ${TIMEOUT_MS / 1000} s` : "the proxy could not be reached";
    throw new ApiError(0, `${method} ${path}: ${why}.`);
  } finally {
    clearTimeout(timer);
  }
  let doc = null;
  try {
    doc = await resp.json();
  } catch {
    doc = null;
  }
  if (!resp.ok) {
    const message = doc && doc.error && doc.error.message;
    throw new ApiError(resp.status, message || `${method} ${path} answered HTTP ${resp.status}.`);
  }
  if (doc === null) throw new ApiError(resp.status, `${method} ${path} did not answer with JSON.`);
  return doc;
}
