"""The `compaction:` section: the key that seals the summaries the proxy makes when it compacts a
conversation on an upstream that cannot (proxy.protocols.responses.compaction).

    compaction:
      key: ${LLM_PROXY_COMPACTION_KEY}   # any secret of at least 32 characters

Without a key, one is generated into the state directory (beside `state_path`), so every worker
and every restart uses the same one; with `state_path: null`, into memory (compaction items then
do not survive a restart, and with several workers each has its own). Changing the key makes the
compaction items clients still hold unreadable: they are refused with a 400.
Import-light (stdlib only), like the rest of the config package.
"""

from __future__ import annotations

from typing import Any

from proxy.config.model import CompactionConfig
from proxy.config.values import ConfigError, known, mapping, str_

MIN_KEY_CHARS = 32


def parse_compaction(raw: Any, path: str) -> CompactionConfig:
    c = mapping(raw, path)
    known(c, path, {"key"})
    key = c.get("key")
    if key is None:
        return CompactionConfig()
    key = str_(key, f"{path}.key")
    if len(key) < MIN_KEY_CHARS:
        raise ConfigError(f"{path}.key", f"must be at least {MIN_KEY_CHARS} characters (e.g. the output of "
                                         "`openssl rand -base64 32`); it is the secret that seals compaction items")
    return CompactionConfig(key=key)
