"""`/admin/` — the status page: one HTML page and its scripts and styles, served from package data
(`proxy/blueprints/status_page_assets/`, shipped by `pip install .` as declared in setup.cfg).

Owns serving those files, with the headers that keep a page operators sign in to safe: a strict
Content-Security-Policy (scripts and styles from this origin only, no inline script, no framing,
no form posting anywhere), `no-referrer`, `nosniff`, and no caching of the page (assets are
revalidated by ETag, so an upgraded proxy never runs yesterday's script).

The page holds no data and no secret, so it is served without a key — the one exemption from
the admin key check, in `proxy.blueprints.http` (`is_page`). It signs in with JavaScript: the
admin key lives in the tab's sessionStorage and goes only into the `Authorization` header of the
page's calls to the admin API (`/admin/accounts`, `/admin/usage`, `/admin/requests`,
`/admin/requests/{id}`, `/admin/status`, `/admin/whoami`, `/admin/keys`, `/admin/audit`), which
keep their key check. Must not read any proxy state or serve anything but the files in its folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from flask import Blueprint, Response, request

from proxy.errors import ProxyError

bp = Blueprint("status_page", __name__)

PAGE = "/admin/"
STATIC = "/admin/static/"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# Everything the page loads comes from this origin: no CDN, nothing inline, so it works offline
# and an injected string can never run. `form-action 'none'`: the sign-in form is handled by the
# script; were the script missing, the browser still would not submit it anywhere.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def is_page(path: str) -> bool:
    """The paths served without a key: the page (with and without its slash) and its assets."""
    return path in ("/admin", PAGE) or path.startswith(STATIC)


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@cache
def assets() -> dict[str, Asset]:
    """The page's files by name, read once per worker (a few kilobytes)."""
    folder = resources.files("proxy.blueprints") / "status_page_assets"
    out = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            out[entry.name] = Asset(body, _TYPES[suffix], hashlib.sha256(body).hexdigest()[:16])
    return out


def _serve(asset: Asset, cache_control: str) -> Response:
    fresh = request.if_none_match.contains(asset.etag)
    resp = Response(b"" if fresh else asset.body, status=304 if fresh else 200, content_type=asset.content_type,
                    headers=SECURITY_HEADERS)
    resp.headers["Cache-Control"] = cache_control
    resp.set_etag(asset.etag)
    return resp


@bp.get("/admin")
def page_without_slash() -> Response:
    # Relative, so a proxy mounted under a path prefix by a reverse proxy still lands on its own page.
    return Response(b"", status=308, headers={"Location": "admin/"})


@bp.get(PAGE)
def page() -> Response:
    return _serve(assets()["index.html"], "no-store")


@bp.get(STATIC + "<name>")
def static_file(name: str) -> Response:
    asset = assets().get(name)
    if asset is None or name == "index.html":
        raise ProxyError(404, f"The status page has no file {name!r}.", "not_found")
    return _serve(asset, "no-cache")
