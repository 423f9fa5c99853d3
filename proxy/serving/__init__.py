"""Serving the app: the Flask app factory (`app`) and what a config builds in it (`parts`), the
config reload (`reconfigure`), every store opened in one place (`state_backend`), the gunicorn
settings (`settings`), the gevent worker class (`worker`), the access log (`access_log`) and the
`llm-proxy` command (`cli`).

The top layer: it wires everything below and is imported by nothing in the proxy but the gunicorn
target `proxy.wsgi` (docs/architecture.md §13, §14). Deliberately empty here: `settings` is
imported by gunicorn's master before gevent patches the standard library, so importing this
package must not pull in Flask, requests or gevent.
"""
