"""The gunicorn target: `LLM_PROXY_CONFIG=FILE gunicorn -c python:proxy.serving.gunicorn_conf proxy.wsgi:app`.

Imported in each worker after gevent's monkey-patching (never preload it), so it is safe to
build sessions, locks and greenlets at import time here. Under any other worker class — gunicorn's
default sync worker, say, when `-c` is left out — the app refuses to start with one line: such a
worker serves one request at a time, so a stream would hold up every other request, health checks
included, for as long as it runs.
"""

import sys

from proxy.serving import worker

if not worker.running:
    print("llm-proxy: refusing to start: this is not the proxy's gevent worker; run "
          "'gunicorn -c python:proxy.serving.gunicorn_conf proxy.wsgi:app' (or llm-proxy serve)",
          file=sys.stderr, flush=True)
    sys.exit(3)  # gunicorn's "worker failed to boot": the master stops instead of forking again

from proxy.serving.app import create_app

app = create_app()
