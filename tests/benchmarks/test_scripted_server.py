"""The scripted server behind benchmarks/bench_load.py: TLS, per-request scripts, large
events and large request bodies, against its own send stamps."""

from __future__ import annotations

import json
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scripted_server import ScriptedServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ttft_ms=5, interval_ms=1, tokens=4, tls=True) as srv:
        yield srv


def _content_events(body: bytes) -> list[dict[str, object]]:
    events = []
    for block in body.split(b"\n\n"):
        _, _, data = block.partition(b"data: ")
        if data.startswith(b"{"):
            doc = json.loads(data)
            if doc["choices"] and doc["choices"][0]["delta"].get("content"):
                events.append(doc)
    return events


def _post(url: str, verify: ssl.SSLContext | bool, body: dict[str, object]) -> httpx.Response:
    with httpx.Client(verify=verify, timeout=30) as client:
        return client.post(url + "/chat/completions", json=body)


def _tls(srv: ScriptedServer) -> ssl.SSLContext:
    assert srv.ca_file is not None
    return ssl.create_default_context(cafile=str(srv.ca_file))


BODY: dict[str, object] = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
}


def test_https_serves_the_same_script_and_stamps_it(server: ScriptedServer) -> None:
    server.stamps()
    resp = _post(server.tls_base_url, _tls(server), {**BODY, "stream": True})
    assert resp.status_code == 200
    events = _content_events(resp.content)
    assert len(events) == 4
    stamps = server.stamps()["streams"]
    assert list(stamps) == [events[0]["id"]]
    truth = stamps[events[0]["id"]]
    assert len(truth["sends"]) == 4
    # first token scripted 5 ms after the request was read, then one per ms, absolute times
    assert truth["sends"][0] - truth["t_recv"] >= 5_000_000
    assert truth["sends"] == sorted(truth["sends"])


def test_a_client_that_distrusts_the_ca_does_not_stop_the_server(server: ScriptedServer) -> None:
    with pytest.raises(httpx.ConnectError):
        _post(server.tls_base_url, True, BODY)  # certifi's roots: the throw-away CA is unknown
    assert httpx.get(f"http://127.0.0.1:{server.port}/health").json() == {"status": "ok"}
    assert _post(server.tls_base_url, _tls(server), BODY).status_code == 200


def test_path_script_sets_tokens_interval_and_event_size(server: ScriptedServer) -> None:
    server.stamps()
    url = server.url(tokens=2, interval_ms=20, event_bytes=1_000_000)
    assert url.endswith("/event_bytes=1000000/token_interval_ms=20.0/tokens=2/v1")
    resp = _post(url, True, BODY)
    events = _content_events(resp.content)
    assert len(events) == 2
    for block in resp.content.split(b"\n\n")[1:3]:  # the two token events, each ~1 MB
        assert 990_000 <= len(block.split(b"data: ", 1)[1]) <= 1_000_000
    truth = next(iter(server.stamps()["streams"].values()))
    # due on absolute times: the second token 5 + 20 ms after the request (never early)
    assert truth["sends"][1] - truth["t_recv"] >= 25_000_000


def test_a_200_kb_prompt_is_read_without_parsing_it(server: ScriptedServer) -> None:
    prompt = "word " * 40_000  # 200 KB
    resp = _post(
        server.base_url, True, {**BODY, "messages": [{"content": prompt}], "max_tokens": 3}
    )
    assert len(_content_events(resp.content)) == 3  # max_tokens honoured
    usage_event = next(b for b in resp.content.split(b"\n\n") if b'"usage"' in b)
    usage = json.loads(usage_event.split(b"data: ", 1)[1])["usage"]
    assert usage["prompt_tokens"] >= 40_000  # the body's spaces
    assert usage["completion_tokens"] == 3


def test_url_refuses_unknown_keys_and_https_without_tls() -> None:
    srv = ScriptedServer()
    with pytest.raises(ValueError, match="unknown script keys"):
        srv.url(speed=3)
    with pytest.raises(RuntimeError, match="without tls"):
        srv.url(tls=True)
