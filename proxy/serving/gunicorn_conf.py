"""gunicorn's config, shipped inside the package so it works from any directory:

    LLM_PROXY_CONFIG=config.yaml gunicorn -c python:proxy.serving.gunicorn_conf proxy.wsgi:app

The settings are `proxy.serving.settings`' — the same `llm-proxy serve` runs with — with their
environment overrides (LLM_PROXY_BIND, LLM_PROXY_WORKERS, LLM_PROXY_WORKER_CONNECTIONS,
LLM_PROXY_GRACEFUL_TIMEOUT, LLM_PROXY_WORKER_TIMEOUT, LLM_PROXY_HTTP_KEEPALIVE, LLM_PROXY_ACCESS_LOG);
gunicorn's command-line flags such as --bind win over them. gunicorn reads this module's globals in
its master, before any worker patches the standard library: it must not import the app.
"""

from proxy.serving.settings import settings as _settings

globals().update(_settings())
