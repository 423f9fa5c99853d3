"""Shared state across hosts: the connection to Redis and what every Redis-backed store shares
(key names under the configured prefix); and how stores with tables of their own open the
`state_path` SQLite file (`sqlite`). The stores themselves live beside the interface they
implement (the pool's state store, the usage store, …); this package is below them all and knows
none of them.
"""
