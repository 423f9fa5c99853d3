"""The live server writes its access log through proxy/serving/access_log.py: one line per request, with
the name of the client's key (never the key), the request id and a client-chosen User-Agent whose
quotes cannot break the line apart."""

from __future__ import annotations

import uuid

from proxy.blueprints.auth import key_name
from tests.conftest import CLIENT_KEY, ProxyServer
from tests.integration.test_pool_shared_state import eventually
from tests.wire import request


def test_a_request_gets_one_access_line_with_its_id_and_escaped_user_agent(proxy: ProxyServer) -> None:
    request_id = "req-" + uuid.uuid4().hex
    resp = request(proxy.url, "POST", "/v1/chat/completions",
                   {"model": "demo-model", "messages": [{"role": "user", "content": "hi [demo:pace=0] [demo:words=2]"}]},
                   {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": request_id,
                    "User-Agent": 'probe "quoted" ua'})
    resp.body()
    resp.close()
    assert resp.status == 200

    def line() -> list[str]:
        # The relay's own attempt line carries the id too; the access line ends with it and the UA.
        return [entry for entry in proxy.log().splitlines() if f" rid={request_id} ua=" in entry]

    assert eventually(lambda: bool(line()))
    (entry,) = line()
    assert entry.startswith('127.0.0.1 "POST /v1/chat/completions HTTP/1.1" 200 ')
    assert entry.endswith(f'ms key={key_name(CLIENT_KEY)} rid={request_id} ua="probe \\"quoted\\" ua"')
