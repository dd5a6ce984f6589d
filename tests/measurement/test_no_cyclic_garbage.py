"""A recorded request leaves no cyclic garbage: its objects are freed by reference counting.

Why it matters: a level holds the cyclic collector off while streams are read
(`labkit.runner.gcpolicy`), since its scans stall the loop; whatever a request leaves in a
reference cycle would then stay until the level ends. httpx's response holds its stream,
which holds the response: the recorder breaks that cycle once the response is closed.
Real servers on 127.0.0.1, both transports, a complete stream and an HTTP error.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import httpx
import pytest

from labkit.measurement.recorder import StreamRecorder
from labkit.providers import Provider, provider_class
from tests.providers.streams import oa_usage, openai_events
from tests.support.misbehaving import MisbehavingServer, body_reply, record_requests, sse_reply

pytestmark = pytest.mark.integration

EVENTS = b"".join(openai_events(["Hel", "lo"], usage=oa_usage(3, 2)))
REPLIES = {
    "stream": sse_reply([EVENTS]),
    "http_error": body_reply(503, b'{"error": {"message": "busy"}}', "application/json"),
}


def _provider(base_url: str, transport: str) -> Provider:
    cls = provider_class("openai_compatible")
    data = {
        "id": "p",
        "kind": "openai_compatible",
        "model": "m",
        "base_url": base_url,
        "transport": transport,
        "timeouts": {"connect": 2.0, "read": 5.0, "total": 30.0},
    }
    return cls(cls.settings_model.model_validate(data), api_key="k-cycles")


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """The collector off, and what a collection finds unreachable kept for inspection."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("transport", ["lean", "httpx"])
@pytest.mark.parametrize("reply", sorted(REPLIES))
def test_a_request_leaves_no_cycles(
    transport: str, reply: str, saved_garbage: list[object]
) -> None:
    with MisbehavingServer(lambda _: REPLIES[reply]) as server:
        records = record_requests(
            lambda: _provider(server.base_url, transport), StreamRecorder(), 20
        )
    assert len(records) == 20
    assert all((r.error is None) == (reply == "stream") for r in records)
    gc.collect()
    left = [o for o in saved_garbage if isinstance(o, (httpx.Request, httpx.Response))]
    # One run's provider and client end in cycles of their own (once, not per request).
    assert left == [], f"{len(left)} request/response objects were left in cycles"
