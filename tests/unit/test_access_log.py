"""The access log line (proxy/serving/access_log.py) is the one gunicorn's own logger would write, for our
format and for any other: only how its fields are computed differs."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn import glogging
from gunicorn.config import Config

from proxy.serving.access_log import ProxyLogger, _Atoms
from proxy.serving.settings import ACCESS_LOG_FORMAT

FORMATS = [
    ACCESS_LOG_FORMAT,
    Config().access_log_format,  # gunicorn's default (the time field differs by the clock only)
    '%(m)s %(U)s?%(q)s %(H)s %(b)s %(D)s %(L)s %(p)s %({content-type}i)s %({X-Missing}o)s %({raw_uri}e)s %(nope)s',
]


def exchange() -> tuple[Any, Any, dict[str, Any], datetime.timedelta]:
    resp = SimpleNamespace(status="200 OK", sent=1234,
                           headers=[("Content-Type", "text/event-stream"), ("x-request-id", "req_abc")])
    req = SimpleNamespace(headers=[("CONTENT-TYPE", "application/json"), ("USER-AGENT", 'sdk "quoted"')])
    environ = {"REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": "POST", "RAW_URI": "/v1/messages?beta=true",
               "SERVER_PROTOCOL": "HTTP/1.1", "PATH_INFO": "/v1/messages", "QUERY_STRING": "beta=true",
               "HTTP_USER_AGENT": 'sdk "quoted"', "llm_proxy.client_key": "alice"}
    return resp, req, environ, datetime.timedelta(seconds=2, microseconds=345678)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_gives_the_line_gunicorns_logger_gives(fmt: str) -> None:
    logger = ProxyLogger(Config())
    logger.now = lambda: "[22/Nov/2026:10:00:00 +0000]"  # type: ignore[method-assign]
    resp, req, environ, took = exchange()
    theirs = fmt % glogging.SafeAtoms(glogging.Logger.atoms(logger, resp, req, environ, took))
    ours = fmt % _Atoms(logger, resp, req, environ, took)
    assert ours == theirs


def test_our_format_reads_no_header_or_environ_dict() -> None:
    logger = ProxyLogger(Config())
    atoms = _Atoms(logger, *exchange())
    line = ACCESS_LOG_FORMAT % atoms
    assert atoms._all is None  # the full field set was never built
    assert line == '127.0.0.1 "POST /v1/messages?beta=true HTTP/1.1" 200 1234 2345ms key=alice rid=req_abc ua="sdk \\"quoted\\""'


def test_gunicorn_configured_by_proxy_serving_logs_through_it() -> None:
    from proxy.serving.settings import settings

    config = Config()
    for name, value in settings().items():
        config.set(name, value)
    assert config.logger_class is ProxyLogger


def test_the_access_lines_record_fields_name_the_endpoint_and_only_a_fallbacks_model() -> None:
    from proxy.ops.log_lines import request_fields
    from proxy.ops.records import RequestRecord

    plain = RequestRecord("r1", "alice", "responses", "gpt-5", False, endpoint="responses_compact")
    assert plain.finish(200, "ok")
    fields = request_fields(plain)
    assert (fields["endpoint"], fields["model"]) == ("responses_compact", "gpt-5") and "served_model" not in fields
    fell_back = RequestRecord("r2", "alice", "messages", "claude-opus-4-6", True, served_model="claude-sonnet-4-6")
    fields = request_fields(fell_back)
    assert (fields["endpoint"], fields["served_model"]) == ("messages", "claude-sonnet-4-6")  # the protocol's
