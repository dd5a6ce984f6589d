"""A gateway's processing comments before the first event are told from a server's own
keep-alives by their text (issue 44): `: OPENROUTER PROCESSING` names OpenRouter in
`provider_timings.keepalive_gateway`; DeepSeek's `: keep-alive` names none. Fuzzed: any
comment bytes give a name or None, never an exception, and only a bounded piece is kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.providers.base import gateway_of_comment
from labkit.wire.sse import COMMENT_KEPT_BYTES, SSEParser

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "count", "gateway"),
    [
        (b": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\ndata: {}\n\n", 2, "openrouter"),
        (b": keep-alive\n\ndata: {}\n\n", 1, None),
        (b"data: {}\n\n: OPENROUTER PROCESSING\n\n", 0, None),  # after the first event
    ],
)
def test_the_first_comment_names_the_gateway(body: bytes, count: int, gateway: str | None) -> None:
    sse = SSEParser()
    events = sse.feed(body, 7)
    assert len(events) == 1
    assert sse.comments_before_first_event == count
    assert (gateway_of_comment(sse.first_comment) if count else None) == gateway


@given(st.binary(max_size=300))
def test_any_comment_gives_a_name_or_none(comment: bytes) -> None:
    line = b":" + comment.replace(b"\n", b" ").replace(b"\r", b" ")
    sse = SSEParser()
    sse.feed(line + b"\n\n", 1)
    assert len(sse.first_comment) <= COMMENT_KEPT_BYTES
    assert gateway_of_comment(sse.first_comment) in (None, "openrouter")
