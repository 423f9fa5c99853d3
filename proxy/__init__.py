"""llm-proxy: one service that lets any LLM client talk to any LLM backend.

This module holds the version only; it must stay import-light because gunicorn's
master process imports it before the gevent worker monkey-patches the standard library.
"""

__version__ = "0.1.0"
