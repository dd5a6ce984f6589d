"""Connections a request opens: `client.new_connection`, and a connect kept out of TTFT.

A warm load level opens each stream's connection before its clock starts; a request that
still needs one opens it just before its own `t_start` (`Provider.connect_ahead`), so
`client.connect_ms` holds the connect and TTFT only the request itself.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.timing import derive_client_timings
from tests.providers.streams import (
    ScriptedClock,
    chat,
    make_provider,
    oa_usage,
    openai_events,
    record_one,
    sse_response,
)

pytestmark = pytest.mark.unit

_MS = 1_000_000
_T0 = 5_000 * _MS
_URL = "http://vllm.test:8000/v1"


def _timings(phases: dict[str, int], **kw: Any) -> Any:
    return derive_client_timings(
        t_start_ns=_T0,
        phases_ns=phases,
        first_event_ns=_T0 + 40 * _MS,
        output_event_ns=[_T0 + 40 * _MS, _T0 + 42 * _MS],
        first_text_ns=_T0 + 40 * _MS,
        end_ns=_T0 + 43 * _MS,
        output_tokens=2,
        **kw,
    )


def test_a_connect_inside_the_request_marks_it_new() -> None:
    phases = {
        "connection.connect_tcp.complete": _T0 + 2 * _MS,
        "http11.send_request_headers.complete": _T0 + 3 * _MS,
    }
    client = _timings(phases)
    assert client.new_connection is True
    assert client.connect_ms == 2.0
    assert client.ttft_ms == 40.0  # a cold connection: the connect is inside TTFT


def test_a_reused_connection_is_marked_not_new() -> None:
    client = _timings({"http11.send_request_headers.complete": _T0 + _MS // 10})
    assert client.new_connection is False
    assert client.connect_ms is None


def test_a_transport_without_trace_events_leaves_it_unknown() -> None:
    client = _timings({"http11.receive_response_headers.complete": _T0 + 30 * _MS})
    assert client.new_connection is None


def test_a_connect_ahead_of_t_start_is_its_duration_and_not_in_ttft() -> None:
    phases = {"http11.send_request_body.complete": _T0 + _MS // 10}
    client = _timings(phases, connect_ahead_ns=3 * _MS)
    assert client.new_connection is True
    assert client.connect_ms == 3.0
    assert client.ttft_ms == 40.0  # from t_start, which came after the connect
    assert client.request_sent_ms == 0.1


def _stream_at(clock: ScriptedClock) -> httpx.Response:
    events = list(openai_events(["a", "b"], usage=oa_usage(5, 2)))
    times = [10.0 + i for i in range(len(events))]
    return sse_response(events, clock=clock, times_ms=times)


def _record(warm: bool, opens: bool) -> tuple[Any, list[bool]]:
    clock = ScriptedClock()
    provider = make_provider("openai_compatible", base_url=_URL, transport="httpx")
    asked: list[bool] = []

    async def connect_ahead(client: httpx.AsyncClient) -> bool:
        asked.append(True)
        if opens:
            clock.now += 3 * _MS  # the connect takes 3 ms, before the clock starts
        return opens

    provider.connections.connect_ahead = connect_ahead  # type: ignore[method-assign]
    request = chat()
    request.warm_connection = warm
    with respx.mock(assert_all_called=True) as router:
        router.post(f"{_URL}/chat/completions").mock(return_value=_stream_at(clock))
        rec = record_one(provider, request, clock=clock)
    assert rec.error is None
    return rec, asked


def test_the_recorder_opens_a_warm_requests_connection_before_t_start() -> None:
    rec, asked = _record(warm=True, opens=True)
    assert asked == [True]
    assert rec.client.new_connection is True
    assert rec.client.connect_ms == 3.0
    assert rec.tags["connected_before_start"] is True
    # The first token came 11 ms after the clock's origin, 8 ms after t_start.
    assert rec.client.ttft_ms == 8.0
    assert rec.app.prepare_ms == 0.0  # the connect is not labkit's preparation either


def test_a_warm_request_with_a_ready_connection_opens_none() -> None:
    rec, asked = _record(warm=True, opens=False)
    assert asked == [True]
    assert rec.client.connect_ms is None
    assert "connected_before_start" not in rec.tags
    assert rec.client.ttft_ms == 11.0


def test_a_request_not_asking_for_warm_connections_never_connects_ahead() -> None:
    rec, asked = _record(warm=False, opens=True)
    assert asked == []
    assert rec.client.connect_ms is None
    assert rec.client.ttft_ms == 11.0


@pytest.mark.parametrize(
    ("connections", "warm", "fresh"), [("warm", True, False), ("cold", False, True)]
)
def test_load_requests_carry_the_levels_connection_setting(
    connections: str, warm: bool, fresh: bool
) -> None:
    settings = LoadSettings.model_validate(
        {"kind": "load", "concurrency": [2], "requests": 4, "connections": connections}
    )
    exp = LoadExperiment(settings)
    planned = exp.request(exp.levels()[0], 0, "run")
    assert planned.request.warm_connection is warm
    assert planned.request.fresh_connection is fresh


def test_warm_is_the_default() -> None:
    settings = LoadSettings.model_validate({"kind": "load", "concurrency": [2], "requests": 4})
    assert settings.connections == "warm"
