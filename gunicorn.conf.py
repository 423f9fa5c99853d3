"""`gunicorn -c gunicorn.conf.py proxy.wsgi:app` from a checkout reads the packaged settings, as
`gunicorn -c python:proxy.serving.gunicorn_conf proxy.wsgi:app` does from anywhere."""

from proxy.serving.gunicorn_conf import *  # noqa: F403
