"""A recorded request leaves no cyclic garbage: its objects are freed by reference counting.

Why it matters: while a level runs, what each young collection leaves alive is frozen
(`labkit.runner.gcpolicy`: the collector's scans stall the loop), so a request still in
flight at a collection and left in a reference cycle afterwards would stay until the level
ends. httpx's response holds its stream, which holds the response: the recorder breaks that
cycle once the response is closed. Real servers on 127.0.0.1, both transports: a complete
stream, an HTTP error, a stream cut short and one that is not JSON.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from labkit.measurement.recorder import StreamRecorder
from labkit.providers import Provider
from labkit.records import RequestRecord
from labkit.wire.lean.http11 import Body
from tests.providers.streams import make_provider, oa_usage, openai_events
from tests.support.misbehaving import MisbehavingServer, body_reply, record_requests, sse_reply

pytestmark = pytest.mark.integration

EVENTS = b"".join(openai_events(["Hel", "lo"], usage=oa_usage(3, 2)))
REPLIES = {
    "stream": sse_reply([EVENTS]),
    "http_error": body_reply(503, b'{"error": {"message": "busy"}}', "application/json"),
    "cut_mid_stream": sse_reply([EVENTS[: len(EVENTS) // 2]]),
    "malformed": sse_reply([b"data: {not json\n\n"]),
}


#: A request's own objects: its request, response, the lean body and the record.
REQUEST_OBJECTS = (httpx.Request, httpx.Response, Body, RequestRecord)


def _provider(base_url: str, transport: str) -> Provider:
    timeouts = {"connect": 2.0, "read": 5.0, "total": 30.0}
    return make_provider(
        "openai_compatible", "k-cycles", base_url=base_url, transport=transport, timeouts=timeouts
    )


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
    _assert_no_request_cycles(saved_garbage)


def _assert_no_request_cycles(saved_garbage: list[object]) -> None:
    gc.collect()
    # One run's provider and client end in cycles of their own (once, not per request); a
    # connection that fails mid-stream can leave its transport in one (collected by the
    # next young collection): what must never be there is a request's own objects.
    left = Counter(type(o).__qualname__ for o in saved_garbage if isinstance(o, REQUEST_OBJECTS))
    assert left == Counter(), f"left in reference cycles: {dict(left)}"
