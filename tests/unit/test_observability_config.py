"""The `metrics:` and `logging:` config sections (proxy/config/observability.py), and the JSON log
format they switch on (proxy/logs.py): one object per line, whatever the message holds."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import pytest

from proxy import logs
from proxy.config import ConfigError, parse
from tests.unit.test_config import MINIMAL, with_


def test_defaults_count_metrics_behind_the_admin_keys_and_log_text() -> None:
    config = parse(MINIMAL)
    assert (config.metrics.enabled, config.metrics.public, config.logging.format) == (True, False, "text")


def test_the_sections_take_their_documented_values() -> None:
    config = parse({**MINIMAL, "metrics": {"enabled": False, "public": True}, "logging": {"format": "json"}})
    assert (config.metrics.enabled, config.metrics.public, config.logging.format) == (False, True, "json")


@pytest.mark.parametrize(("path", "value", "message"), [
    ("metrics", {"publik": True}, "metrics.publik: unknown key; expected one of enabled, public"),
    ("metrics", {"public": "yes"}, "metrics.public: must be true or false (got 'yes')"),
    ("metrics", [], "metrics: must be a mapping (got list)"),
    ("logging", {"format": "xml"}, "logging.format: must be one of text, json (got 'xml')"),
    ("logging", {"level": "info"}, "logging.level: unknown key; expected one of format"),
])
def test_a_wrong_value_names_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(with_(path, value))
    assert str(err.value) == message


def _format(record: logging.LogRecord) -> dict[str, Any]:
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_json_line_is_one_object_with_an_iso_time_and_a_msg() -> None:
    record = logging.LogRecord("proxy.http", logging.WARNING, __file__, 1, "answering %d: %s", (502, 'bad\n"x"'), None)
    record.created = 1_800_000_000.25
    record.request_id = "req_1"
    assert _format(record) == {"time": "2027-01-15T08:00:00.250Z", "level": "warning", "logger": "proxy.http",
                               "request_id": "req_1", "msg": 'answering 502: bad\n"x"'}


def test_an_event_line_carries_its_fields_and_a_traceback_stays_on_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("proxy.relay", logging.ERROR, __file__, 1, "attempt rid=%s", ("r",), exc_info)
    record.event, record.fields = "attempt", {"upstream": "main", "status": None}
    out = _format(record)
    assert (out["event"], out["msg"], out["upstream"], out["status"]) == ("attempt", "attempt", "main", None)
    assert "ValueError: boom" in out["exc"] and "request_id" not in out
