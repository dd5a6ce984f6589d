"""Every provider kind's stream parser, fed mutated streams read at any boundaries: nothing
but a malformed-stream error may come out of the SSE framing or the parser, and the parser's
summary (stop reason, text, streamed token count) can always be read afterwards."""

from __future__ import annotations

import json
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.errors import MalformedStream
from labkit.providers import Provider
from tests.providers.streams import make_provider
from tests.support.fuzz_streams import (
    KINDS,
    PLANTED_KEY,
    PROVIDER_SETTINGS,
    VALID_STREAMS,
    mutated_streams,
)

pytestmark = pytest.mark.unit

# What the recorder records as a malformed stream (error.kind = protocol). Anything else
# raised while framing or parsing is labkit's own bug (error.kind = internal).
PROTOCOL_EXCEPTIONS = (MalformedStream, json.JSONDecodeError, UnicodeDecodeError, RecursionError)


@cache
def provider(kind: str) -> Provider:
    """One provider per kind: only its `new_parser` is used, no request is sent."""
    return make_provider(kind, api_key=PLANTED_KEY, **PROVIDER_SETTINGS[kind])


def parse_all(kind: str, chunks: list[bytes]) -> None:
    """Frame and parse `chunks` as the recorder would; only malformed-stream errors may
    escape, and the parser's summary must be readable afterwards, whatever happened."""
    parser = provider(kind).new_parser()
    sse = provider(kind).new_framer()
    classes = []
    try:
        for i, chunk in enumerate(chunks):
            for event in sse.feed(chunk, i):
                classes.append(parser.on_event(event))
        for event in sse.close():
            classes.append(parser.on_event(event))
    except PROTOCOL_EXCEPTIONS:
        pass
    assert all(isinstance(c, int) for c in classes)
    parser.stop_reason()
    assert isinstance(parser.output_text, str)
    count = parser.streamed_output_tokens(len(classes))
    assert count is None or isinstance(count, int)


@pytest.mark.parametrize("kind", KINDS)
def test_a_valid_stream_cut_at_every_byte_parses_or_is_malformed(kind: str) -> None:
    for stream in VALID_STREAMS[kind]:
        for end in range(len(stream) + 1):
            parse_all(kind, [stream[:end]])


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_parser_raises_nothing_but_malformed_stream_errors(
    kind: str, data: st.DataObject
) -> None:
    stream = data.draw(mutated_streams(kind), label="stream")
    parse_all(kind, stream.chunks)
