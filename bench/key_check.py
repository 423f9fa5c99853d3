"""What checking a key made at runtime costs a request, beside today's check of a key from the
config file: `KeyChecker.match` (the config's keys) and `KeyDirectory.match_client` (runtime keys,
warm: the store's snapshot already taken), with 10 config keys and 1,000 runtime keys.

    python bench/key_check.py [--calls 200000]

Prints, per check, the median of 5 runs of CPU time: a config key, a runtime key, and a secret
that is neither (the miss path also asks the store at most every ASK_EVERY seconds; here the
store is in memory). Not part of CI.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.blueprints.auth import KeyChecker
from proxy.config.keys import ClientKey
from proxy.keys import secrets
from proxy.keys.directory import KeyDirectory
from proxy.keys.model import AuditEntry, Change, RuntimeKey, Secret
from proxy.keys.store import MemoryKeyStore

PEPPER = b"p" * 32


def per_call(check, calls: int) -> float:  # type: ignore[no-untyped-def]
    runs = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            check()
        runs.append((time.process_time() - start) / calls)
    return statistics.median(runs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    calls = parser.parse_args().calls
    config_keys = [ClientKey(name=f"team-{i}", key=f"sk-config-team-{i:04d}-0123456789") for i in range(10)]
    checker = KeyChecker(config_keys)
    store = MemoryKeyStore()
    runtime = [secrets.mint("sk-") for _ in range(1000)]
    keys = tuple(RuntimeKey(name=f"ci-{i}", secrets=(Secret(secrets.digest(s, PEPPER), secrets.hint(s, "sk-")),),
                            created_at=0.0, updated_at=0.0) for i, s in enumerate(runtime))
    store.commit(Change(put_keys=keys), AuditEntry(0.0, "bench", "key.create", "key:*", None, None))
    directory = KeyDirectory(store, PEPPER)
    directory.refresh()
    config_secret, runtime_secret = config_keys[5].key, runtime[500]
    assert checker.match(config_secret) is not None and directory.match_client(runtime_secret) is not None
    print(f"config key (KeyChecker.match, 10 keys):          "
          f"{per_call(lambda: checker.match(config_secret), calls):.2f} µs")
    print(f"runtime key (KeyDirectory.match_client, 1,000):  "
          f"{per_call(lambda: directory.match_client(runtime_secret), calls):.2f} µs")
    print(f"a secret that is neither (both checks, warm):    "
          f"{per_call(lambda: (checker.match('sk-nobody'), directory.match_client('sk-nobody')), calls):.2f} µs")


if __name__ == "__main__":
    main()
