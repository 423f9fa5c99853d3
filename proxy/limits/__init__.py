"""Per-client-key limits (`client_keys[].limits`): requests and tokens per minute, tokens per UTC
day and month, requests in flight — checked and reserved when a request arrives, charged with the
upstream's reported usage when it ends, and shared by every worker (the `state_path` SQLite file)
or every host (`state: {backend: redis}`). `rules` is the arithmetic, `store` and `redis_store`
where the figures live, `limiter` the request's side of it (the 429, the charge at the end).
"""
