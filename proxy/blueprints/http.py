"""The HTTP edge shared by every endpoint: request ids, auth, CORS, body parsing and errors.

Owns what happens to a request before a blueprint sees it and to every error after: a request
id on every response and log line; the client (or admin) key check; CORS preflight; reading a
JSON object body (413 beyond `max_body_bytes`, chunked or not) with 400s that say what is wrong;
rendering any error as JSON in the caller's protocol's envelope — never HTML, never a traceback.
Blueprints stay thin because of this.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from typing import Any

from flask import Flask, Response, current_app, g, request
from werkzeug.exceptions import HTTPException
from werkzeug.wsgi import get_input_stream

from proxy import logs
from proxy.blueprints import status_page
from proxy.blueprints.auth import presented_key
from proxy.blueprints.state import AppState, app_state
from proxy.config import Config
from proxy.config.keys import ClientKey
from proxy.errors import ProxyError, invalid, kind_for_status
from proxy.ops.log_lines import ENVIRON_KEY
from proxy.ops.records import RequestRecord
from proxy.protocols import registry
from proxy.relay.loop import RelayResult

log = logging.getLogger("proxy.http")

PUBLIC_PATHS = {"/", "/healthz", "/readyz"}
# Paths outside /admin/ that need an admin key too, with what else opens them (the config's public_paths).
ADMIN_PATHS = {"/metrics": "or set metrics.public: true to serve it without a key"}
KEY_NAME_ENVIRON = "llm_proxy.client_key"  # the key's name in the WSGI environ, for the access log line
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Allowed in CORS preflight whatever the protocol; each protocol adds the headers its browser clients send.
CORS_BASE_HEADERS = ("Content-Type", "Authorization", "X-API-Key")
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Expose-Headers": "x-request-id, request-id",
    "Access-Control-Max-Age": "86400",
}


def cors_allow_headers() -> str:
    names = [*CORS_BASE_HEADERS, *(h for p in registry.all_protocols() for h in p.client.cors_headers), "X-Request-Id"]
    return ", ".join(dict.fromkeys(names))


def served_endpoints(app: Flask) -> str:
    """The API paths this app serves, for a 404 that says where to go."""
    rules = (str(rule) for rule in app.url_map.iter_rules())
    paths = sorted({rule for rule in rules if rule.startswith("/v1/") and "<" not in rule})
    return ", ".join(paths[:-1]) + " and " + paths[-1] if len(paths) > 1 else "".join(paths)


def public_paths(config: Config) -> tuple[str, ...]:
    """Paths the config opens to anyone, besides PUBLIC_PATHS."""
    return ("/metrics",) if config.metrics.public else ()


def client_entry(state: AppState, key: str | None) -> ClientKey | None:
    """The client key `key` is — from the config file (as runtime left it: disabled or not), else one
    made at runtime (proxy.keys) while it may be used — or None. Disabled keys are returned."""
    entry = state.client_keys.match(key)
    if state.keys is None or key is None:
        return entry
    if entry is not None:
        state.keys.used(entry.name)
        return state.keys.overlaid(entry)
    return state.keys.match_client(key)


def admin_entry(state: AppState, key: str | None) -> ClientKey | None:
    """The admin key `key` is — from the config file, else one made at runtime — with its role."""
    entry = state.admin_keys.match(key)
    if entry is not None or state.keys is None or key is None:
        return entry
    made = state.keys.match_admin(key)
    return None if made is None else ClientKey(name=made.name, key="", role=made.role)


def install(app: Flask) -> None:
    """The edge's hooks. Keys and limits come from the app's state as it is when a request starts,
    so a config reload changes them for the next request (proxy.serving.reconfigure)."""
    app.config["MAX_CONTENT_LENGTH"] = app_state(app).config.max_body_bytes

    @app.before_request
    def _begin() -> Response | None:
        incoming = request.headers.get("x-request-id", "")
        g.request_id = incoming if _REQUEST_ID.match(incoming) else "req_" + secrets.token_hex(16)
        logs.request_id.set(g.request_id)
        if request.method == "OPTIONS":
            return _preflight()
        state = app_state()
        if request.path in PUBLIC_PATHS or request.path in public_paths(state.config):
            return None
        admin = request.path.startswith("/admin/") or request.path in ADMIN_PATHS
        admin_keys = state.admin_keys
        if admin and admin_keys.empty and not (state.keys is not None and state.keys.snapshot.admins):
            if request.path in ADMIN_PATHS:
                raise ProxyError(403, f"{request.path} needs an admin key and none is configured: list keys under "
                                      f"admin_keys in the config, {ADMIN_PATHS[request.path]}.", "permission")
            raise ProxyError(403, "The admin API is disabled: list keys under admin_keys in the config to use it.",
                             "permission")
        if status_page.is_page(request.path):
            return None  # the status page and its assets hold no data: the page signs in with the key itself
        key = presented()
        if key is None:
            which = " (this endpoint needs an admin key, from admin_keys)" if admin else ""
            raise _refused(ProxyError(401, f"Missing API key{which}: send it as 'Authorization: Bearer <key>' or "
                                           f"'x-api-key: <key>'{_protocol_key_ways()}.", "authentication"))
        entry = admin_entry(state, key) if admin else client_entry(state, key)
        if entry is None:
            which = "an admin key (admin_keys)" if admin else "a client key (client_keys)"
            where = "the proxy's config" if admin else ("the proxy's config or its key API (a revoked or expired "
                                                          "key is no longer one)")
            raise _refused(ProxyError(401, f"Invalid API key: this endpoint needs {which} from {where}.",
                                      "authentication"))
        request.environ[KEY_NAME_ENVIRON] = g.client_key_name = entry.name  # the access log shows it
        if entry.disabled:
            raise _refused(ProxyError(401, f"The API key {entry.name!r} is disabled (in the proxy's config, or "
                                           "through its admin API); ask the proxy's operator to enable it.",
                                      "authentication"))
        g.client_key = entry
        if admin and entry.role == "viewer" and request.method not in ("GET", "HEAD"):
            raise ProxyError(403, f"The admin key {entry.name!r} is a viewer: it may read /admin/ and /metrics, not "
                                  "change anything. Use a key with role admin.", "permission")
        return None

    @app.after_request
    def _finish(resp: Response) -> Response:
        rid = getattr(g, "request_id", None)
        if rid:
            resp.headers["x-request-id"] = rid
            protocol = registry.for_path(request.path)
            if protocol is not None:
                resp.headers.update(protocol.client.response_headers(rid))  # Anthropic's `request-id`
        # One pass over what the answer has: Headers.setdefault would scan the list and raise a
        # KeyError inside for each name it lacks, which is every name on nearly every answer.
        present = {name.lower() for name, _ in resp.headers.items()}
        for name, value in CORS_HEADERS.items():
            if name.lower() not in present:
                resp.headers.add(name, value)
        record = request.environ.get(ENVIRON_KEY)
        if record is not None and record.capture is not None:  # the request log keeps what the client got
            record.capture.client_answer(resp.status_code, resp.headers,
                                         None if resp.direct_passthrough else resp.get_data())
        return resp

    @app.errorhandler(ProxyError)
    def _proxy_error(err: ProxyError) -> Response:
        return render_error(err)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if status == 404:
            message = f"Unknown path {request.method} {request.path}. This proxy serves {served_endpoints(app)}."
        elif status == 405:
            allowed = ", ".join(sorted(m for m in (exc.valid_methods or []) if m not in ("HEAD", "OPTIONS")))  # type: ignore[attr-defined]
            message = f"Method {request.method} is not allowed on {request.path}; use {allowed or 'another method'}."
        elif status == 413:
            return render_error(body_too_large(current_app.config["MAX_CONTENT_LENGTH"]))
        else:
            message = exc.description or exc.name
        return render_error(ProxyError(status, message, kind_for_status(status)))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        rid = getattr(g, "request_id", "-")
        return render_error(ProxyError(500, f"Internal error in the proxy (request id {rid}); "
                                            "the proxy's log has the details.", "api_error"))


def _protocol_key() -> str | None:
    """The key where the path's protocol lets its clients send it besides the usual headers (Gemini's
    `x-goog-api-key` header and `?key=` query parameter)."""
    protocol = registry.for_path(request.path)
    # A path of no protocol (/v1/models, which google-genai lists at too) takes any protocol's ways.
    for client in [protocol.client] if protocol is not None else [p.client for p in registry.all_protocols()]:
        for value in (request.headers.get(client.key_header) if client.key_header else None,
                      request.args.get(client.key_query) if client.key_query else None):
            if value and value.strip():
                return value.strip()
    return None


def _protocol_key_ways() -> str:
    protocol = registry.for_path(request.path)
    client = protocol.client if protocol is not None else None
    ways = [f"'{client.key_header}: <key>'" if client and client.key_header else "",
            f"'?{client.key_query}=<key>'" if client and client.key_query else ""]
    return "".join(f" or {way}" for way in ways if way)


def _refused(err: ProxyError) -> ProxyError:
    """A completion request refused for its key still ends in one record for the hooks (usage,
    recent requests: proxy.ops) — under the key's name if it named one, else "-"."""
    embeddings = registry.embeddings_for_path(request.path) if request.method == "POST" else None
    protocol = embeddings or registry.for_path(request.path)
    if protocol is not None and request.method == "POST" and (embeddings or request.path == protocol.client.path
                                                               or protocol.client.url_routes):
        record = RequestRecord(g.request_id, client_key_name(), protocol.name, model="", stream=False,
                               client_address=request.remote_addr,
                               endpoint="embeddings" if embeddings else protocol.name)
        record.finish(err.info.status, err.info.kind)
        app_state().hooks.request_done(record)
    return err


def _preflight() -> Response:
    resp = Response(b"", status=200)
    requested = request.headers.get("Access-Control-Request-Headers")
    # Browsers SDKs send vendor headers (x-stainless-*); echoing the request keeps them allowed.
    resp.headers["Access-Control-Allow-Headers"] = requested or cors_allow_headers()
    return resp


def render_error(err: ProxyError) -> Response:
    """The error as JSON in the envelope the path's clients parse (the protocol whose endpoint it is;
    other paths — /v1/models, /admin/ — use the registry's default)."""
    headers = dict(err.headers)
    if err.raw_body is not None:
        return Response(err.raw_body, status=err.info.status, mimetype="application/json", headers=headers)
    body = registry.error_body_for_path(request.path, err.info)
    if err.info.status >= 500:
        log.warning("answering %d: %s", err.info.status, err.info.message)
    return Response(json.dumps(body), status=err.info.status, mimetype="application/json", headers=headers)


def body_too_large(limit: int) -> ProxyError:
    return ProxyError(413, f"Request body is larger than this proxy accepts ({limit} bytes; "
                           "the limit is the config key max_body_bytes).", "request_too_large")


def _read_body(limit: int) -> bytes:
    """The request body, read up to one byte past `limit` and refused (413) beyond it. A body
    announced by Content-Length is refused before it is read; a chunked one announces nothing, so
    it is counted as it arrives rather than cut off at the limit and parsed as truncated JSON."""
    length = request.content_length
    if length is not None:
        if length > limit:
            raise body_too_large(limit)
        return request.get_data(cache=False)  # exactly `length` bytes: the common case, one read
    stream = get_input_stream(request.environ, max_content_length=limit + 1)
    data = bytearray()
    while len(data) <= limit:
        chunk = stream.read(min(limit + 1 - len(data), 1 << 16))
        if not chunk:
            break
        data += chunk
    if len(data) > limit:
        raise body_too_large(limit)
    return bytes(data)


def json_body() -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what is wrong with it."""
    mimetype = request.mimetype
    if not mimetype:
        raise invalid("", "Missing Content-Type header: send 'Content-Type: application/json'.")
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise invalid("", f"Content-Type is {mimetype!r}; this endpoint takes 'application/json'.")
    data = g.raw_body = _read_body(current_app.config["MAX_CONTENT_LENGTH"])
    if not data.strip():
        raise invalid("", "The request body is empty; send a JSON object.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid("", f"The request body is not valid UTF-8 (bad byte at offset {exc.start}).") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid("", f"The request body is not valid JSON: {exc.msg}: line {exc.lineno} "
                          f"column {exc.colno}.") from None
    except RecursionError:
        raise invalid("", "The request body nests JSON too deeply.") from None
    if not isinstance(doc, dict):
        raise invalid("", "The request body must be a JSON object.")
    return doc


def raw_body() -> bytes:
    """The request's body as it was read (b"" before `json_body` has read it)."""
    return getattr(g, "raw_body", b"")


def presented() -> str | None:
    """The key the client presented, wherever its protocol lets it send one."""
    return presented_key(request.headers.get("x-api-key"), request.headers.get("authorization")) or _protocol_key()


def relay_response(result: RelayResult) -> Response:
    if isinstance(result.body, bytes):
        return Response(result.body, status=result.status, headers=result.headers)
    return Response(result.body, status=result.status, headers=result.headers, direct_passthrough=True)


def client_key_name() -> str:
    """The name of the key this request was let in with (never the key itself)."""
    return str(getattr(g, "client_key_name", "-"))


def client_key() -> ClientKey | None:
    """The client key this request was let in with: its name, the models it may use."""
    return getattr(g, "client_key", None)


def client_socket() -> Any:
    """The client's socket when served by gunicorn (used to notice a client hanging up)."""
    return request.environ.get("gunicorn.socket")
