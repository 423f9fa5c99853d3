"""Budget alerts: what happens once when a window's spend crosses its `alert_at` share.

Owns the three signs of a crossing: one warning log line (naming the key or group, never a key),
a count in `llm_proxy_budget_alerts_total{subject, window}` (through `on_alert`, the metrics'
hook; subjects are `key:<name>` / `group:<name>`, bounded by the config), and with
`alerts.webhook_url` one JSON POST:

  {"event": "budget_alert", "subject": "key:team-a", "kind": "key", "name": "team-a",
   "window": "usd_per_day", "period": "d20785", "limit_usd": 5.0, "spent_usd": 4.02,
   "alert_at": 0.8, "key": "team-a", "at": "2026-11-28T15:02:11Z"}

sent from a greenlet of its own — never on the request's — and tried again with backoff (1, 2, 4,
8, 16 s) until the receiver answers 2xx or five more tries failed. Which settlement crosses is
decided in the store's atomic step (the spend before and after it), so one crossing is one alert
across every worker and host. Uses `requests` and gevent.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import gevent

from proxy.budgets import windows
from proxy.budgets.windows import Line

log = logging.getLogger("proxy.budgets")

BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0)  # seconds before each retry of the webhook
TIMEOUT = 10.0


class Alerts:
    def __init__(self, on_alert: Callable[[str, str], None] | None = None,
                 post: Callable[[str, dict[str, Any]], int] | None = None) -> None:
        self.on_alert = on_alert  # (subject, window): the metric
        self._post = post or _post
        self.sending: list[gevent.Greenlet] = []

    def crossed(self, line: Line, spent: int, alert_at: float, key_name: str, now: float,
                webhook_url: str | None) -> None:
        kind, _, name = line.subject.partition(":")
        who = f"the key group {name!r}" if kind == windows.GROUP else f"the API key {name!r}"
        log.warning("budget alert: %s has spent %s of its %s budget of %s (alert_at %s)", who,
                    windows.usd(spent), line.window, windows.usd(line.limit), alert_at)
        if self.on_alert is not None:
            self.on_alert(line.subject, line.window)
        if webhook_url:
            payload = {"event": "budget_alert", "subject": line.subject, "kind": kind, "name": name,
                       "window": line.window, "period": line.period, "limit_usd": line.limit / 1e6,
                       "spent_usd": spent / 1e6, "alert_at": alert_at, "key": key_name,
                       "at": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            self.sending = [g for g in self.sending if not g.dead]
            self.sending.append(gevent.spawn(self._deliver, webhook_url, payload))

    def _deliver(self, url: str, payload: dict[str, Any]) -> None:
        for attempt, wait in enumerate((0.0, *BACKOFF)):
            if wait:
                gevent.sleep(wait)
            try:
                status = self._post(url, payload)
            except Exception as exc:
                problem = f"{type(exc).__name__}"
            else:
                if 200 <= status < 300:
                    return
                problem = f"HTTP {status}"
            log.warning("budget alert: the webhook did not take the alert for %s %s (try %d, %s)",
                        payload["subject"], payload["window"], attempt + 1, problem)
        log.warning("budget alert: gave up sending the alert for %s %s to the webhook", payload["subject"],
                    payload["window"])


def _post(url: str, payload: dict[str, Any]) -> int:
    import requests  # deferred: only a config with a webhook posts

    resp = requests.post(url, json=payload, timeout=TIMEOUT)
    resp.close()
    return resp.status_code
