"""The config reference's entries for the sections operators look through — `request_log:` (and
the other observability sections as they grow) — described as `proxy.config.spec` describes the
rest, kept here so that module stays one screenful a concern. Import-light: stdlib only.
"""

from __future__ import annotations

from proxy.config.request_log import ERROR_MODES
from proxy.config.spec_parts import BOOLEAN, SIZE, Section, number, one_of
from proxy.config.spec_parts import key as _k

REQUEST_LOG = Section((
    _k("enabled", BOOLEAN, "Keep the chosen requests with their four bodies (the client's request, each attempt's "
                           "request and answer, what the client got) for `GET /admin/requests/{id}`. Cannot "
                           "change on a reload.", "false",
       applies=("request_log.enabled", False)),
    _k("keys", {"type": "array", "items": {"type": "string"}},
       "Client key names (globs) whose requests are chosen.", '`["*"]`', applies=("request_log.keys", ("*",))),
    _k("sample", {"type": "number", "minimum": 0, "maximum": 1},
       "The fraction of the chosen keys' requests kept, 0.0 to 1.0.", "1.0", applies=("request_log.sample", 1.0)),
    _k("errors", one_of(ERROR_MODES), "`always`: a failed request of a chosen key is kept whatever the sample; "
                                      "`sampled`: as any other.", "always",
       applies=("request_log.errors", "always")),
    _k("max_body_bytes", SIZE, "Each body is kept up to this many bytes; its full size is noted.", "256KiB",
       applies=("request_log.max_body_bytes", 262144)),
    _k("retention_hours", number(0.001), "Hours a request is kept. Cannot change on a reload.", "72",
       applies=("request_log.retention_hours", 72.0)),
    _k("max_total_mb", number(0.001), "The log's size bound in MiB: beyond it the oldest requests are dropped "
                                      "(and counted). Cannot change on a reload.", "256",
       applies=("request_log.max_total_mb", 256.0)),
    _k("redact", {"type": "array", "items": {"type": "string"}},
       "Replaced by `[redacted]` in every stored body: JSON paths (`$.messages[*].content`) or regular "
       "expressions. Keys and `Authorization`-type headers are never stored whatever this says.", "`[]`",
       applies=("request_log.redact", ())),

))
