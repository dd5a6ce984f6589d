"""The wire recorder over an `httpx.MockTransport`, for every provider kind, fed mutated
streams read at any boundaries: each request ends as exactly one valid record, nothing
escapes, a failure is a stream's failure (never labkit's `internal`), and the provider's key,
echoed by the stream, is in no record."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import Provider
from labkit.records import RequestRecord
from tests.providers.streams import SSE_HEADERS, ChunkStream, ScriptedClock, chat, make_provider
from tests.support.fuzz_checks import assert_one_valid_record
from tests.support.fuzz_streams import (
    KINDS,
    PLANTED_KEY,
    PROVIDER_SETTINGS,
    VALID_STREAMS,
    MutatedStream,
    mutated_streams,
)

pytestmark = pytest.mark.unit

_providers: dict[str, Provider] = {}


def provider_serving(kind: str, stream: MutatedStream) -> Provider:
    """The provider of `kind` (built once: a TLS context costs tens of ms), its client
    replaced by one whose transport answers with `stream`."""
    if kind not in _providers:
        _providers[kind] = make_provider(kind, api_key=PLANTED_KEY, **PROVIDER_SETTINGS[kind])
        asyncio.run(_providers[kind].client.aclose())  # its own client is never used
    provider = _providers[kind]

    def respond(request: httpx.Request) -> httpx.Response:
        drop = httpx.RemoteProtocolError("peer closed connection") if stream.drop else None
        return httpx.Response(
            200, headers=SSE_HEADERS, stream=ChunkStream(stream.chunks, raise_at_end=drop)
        )

    provider.client = provider.connections.client = httpx.AsyncClient(
        base_url=provider.settings.resolved_base_url(), transport=httpx.MockTransport(respond)
    )
    return provider


def record(provider: Provider) -> tuple[RequestRecord, list[RequestRecord]]:
    """One request through the recorder, on a scripted clock; also what `on_cancelled` got."""
    cancelled: list[RequestRecord] = []

    async def go() -> RequestRecord:
        recorder = StreamRecorder(clock=ScriptedClock(), on_cancelled=cancelled.append)
        try:
            return await recorder.record(
                provider, chat(), RecordContext(run_id="r", experiment="t")
            )
        finally:
            await provider.client.aclose()

    return asyncio.run(go()), cancelled


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_every_mutated_stream_is_one_valid_record_without_the_key(
    kind: str, data: st.DataObject
) -> None:
    stream = data.draw(mutated_streams(kind), label="stream")
    rec, cancelled = record(provider_serving(kind, stream))
    assert_one_valid_record(rec, cancelled, stream)


@pytest.mark.parametrize("kind", KINDS)
def test_a_built_stream_cut_at_every_byte_is_one_valid_record(kind: str) -> None:
    built = VALID_STREAMS[kind][-1]  # the short one from the builders: one request per byte
    for end in range(len(built) + 1):
        stream = MutatedStream(kind, [built[:end]], drop=False, steps=[f"cut at byte {end}"])
        rec, cancelled = record(provider_serving(kind, stream))
        assert_one_valid_record(rec, cancelled, stream)
