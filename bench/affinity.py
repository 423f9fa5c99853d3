"""What conversation affinity is worth: the share of prompt tokens read from the upstream's prompt
cache over a 10-turn conversation on a pool of 4 accounts, with `pool.affinity` on and off.

    python bench/affinity.py [--turns 10] [--accounts 4] [--policy lru]

Starts the demo upstream (whose `[demo:cache]` models a prompt cache per account:
proxy/demo/prompt_cache.py) and a proxy in front of it for each setting, then runs the same kind of
conversation through the OpenAI SDK — a system prompt of about 2,000 tokens, each turn sending the
whole history again, the conversation named by `user` — and prints, per turn, the account that
served it and its prompt and cached tokens, then the cached share of all prompt tokens. Each run
gets a system prompt of its own, so no run reads another's cache. Not part of CI.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import CLIENT_KEY, DemoUpstream, start_demo_upstream, start_proxy, stop_proxy


def run(demo: DemoUpstream, affinity: bool, turns: int, accounts: int, policy: str) -> list[dict[str, Any]]:
    keys = [f"sk-bench-affinity-{i}-{uuid.uuid4().hex[:8]}" for i in range(accounts)]
    config = {"client_keys": [CLIENT_KEY], "upstreams": [{
        "name": "main", "protocol": "chat_completions", "base_url": demo.url,
        "pool": {"policy": policy, "affinity": "on" if affinity else "off", "probe": {"interval": 3600}},
        "accounts": [{"id": f"acct-{i}", "api_key": key} for i, key in enumerate(keys)]}]}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_proxy(config, Path(tmp))
        try:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30)
            system = f"{uuid.uuid4()} You are a careful coding agent. [demo:cache] " + "Project notes. " * 500
            messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
            rows = []
            for turn in range(1, turns + 1):
                messages.append({"role": "user", "content": f"Step {turn}: go on. [demo:pace=0] [demo:words=60]"})
                rid = f"bench-aff-{uuid.uuid4().hex}"
                answer = client.chat.completions.create(model="demo-model", messages=messages,  # type: ignore[arg-type]
                                                        user="bench-conversation",
                                                        extra_headers={"X-Request-Id": rid})
                messages.append({"role": "assistant", "content": answer.choices[0].message.content})
                usage = answer.usage
                assert usage is not None
                details = usage.prompt_tokens_details
                key = demo.requests(rid)[-1]["key"]
                rows.append({"turn": turn, "account": f"acct-{keys.index(key)}", "prompt": usage.prompt_tokens,
                             "cached": (details.cached_tokens if details else 0) or 0})
            return rows
        finally:
            stop_proxy(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--policy", default="lru", choices=("lru", "round_robin", "balance", "weighted"))
    args = parser.parse_args()
    demo = start_demo_upstream()
    try:
        for affinity in (True, False):
            rows = run(demo, affinity, args.turns, args.accounts, args.policy)
            prompt, cached = sum(r["prompt"] for r in rows), sum(r["cached"] for r in rows)
            print(f"\npool.affinity: {'on' if affinity else 'off'} (policy {args.policy}, {args.accounts} accounts)")
            print("turn  account  prompt_tokens  cached_tokens")
            for r in rows:
                print(f"{r['turn']:>4}  {r['account']:>7}  {r['prompt']:>13}  {r['cached']:>13}")
            print(f"cached share of prompt tokens: {cached}/{prompt} = {cached / prompt:.1%}; "
                  f"accounts used: {len({r['account'] for r in rows})}")
    finally:
        demo.process.terminate()
        demo.process.wait(timeout=10)


if __name__ == "__main__":
    main()
