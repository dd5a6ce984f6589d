"""The SDK path reads what the SDKs yield where it lies (`model_view`, no serialisation), and
learns from it exactly what it learnt when it re-serialised each object to JSON for the wire
parser: for every corpus shape and for mutated streams, each object the SDK yields is read
both ways, into two parsers, and every fact they collect must agree.

The streams are served by an `httpx2.MockTransport` (no sockets), through each SDK adapter's
own client and request, so the objects are the SDK's own.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from labkit.errors import MalformedStream
from labkit.providers import Provider, sdk_available
from labkit.providers.base import StreamParser
from labkit.providers.sdk import model_view
from labkit.wire.sse import SSEEvent
from tests.providers.streams import SSE_HEADERS, chat, make_provider
from tests.providers.streams.corpus import load_corpus
from tests.support.fuzz_streams import KINDS, PLANTED_KEY, PROVIDER_SETTINGS, mutated_streams

pytestmark = pytest.mark.unit

SDK_KINDS = [kind for kind in KINDS if sdk_available(kind)]
SDK_CORPUS = [f for f in load_corpus() if sdk_available(f.kind)]


@cache
def provider(kind: str) -> Provider:
    """One provider per kind, as a config would give it."""
    return make_provider(kind, api_key=PLANTED_KEY, **PROVIDER_SETTINGS[kind])


def sdk_objects(prov: Provider, body: bytes, headers: dict[str, str] | None = None) -> list[Any]:
    """What the provider's SDK yields for a stream of `body`, up to the SDK's own error."""
    adapter = prov.sdk
    assert adapter is not None

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={**SSE_HEADERS, **(headers or {})}, content=body)

    async def go() -> list[Any]:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
        client = adapter.client(prov, api_key="sk-view", http_client=http)
        request = chat(max_tokens=8)
        params = prov.wire_params(prov.effective_params(request))
        items: list[Any] = []
        try:
            stream = await adapter.open_stream(client, prov, request, params)
            try:
                async for item in stream:
                    items.append(item)
            finally:
                await stream.close()
        except Exception:  # the SDK's own reaction to the stream: nothing more was yielded
            pass
        finally:
            await client.close()
        return items

    return asyncio.run(go())


def _reserialised(kind: str, item: Any) -> SSEEvent:
    """The event the SDK path used to hand the wire parser: the object dumped back to JSON,
    named by its `type` on the named-event protocols."""
    if not isinstance(item, BaseModel):  # JSON that is no object, yielded as it is
        return SSEEvent(None, json.dumps(item, default=_dump), 0)
    name = None if kind in ("openai", "openai_compatible", "llamacpp") else str(item.type)
    return SSEEvent(name, json.dumps(_dump(item)), 0)


def _dump(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_unset=True, warnings=False)


def _facts(parser: StreamParser, classes: list[int], raised: str | None) -> dict[str, Any]:
    """Everything the parser learnt, in comparable form (JSON for NaN-bearing models)."""
    parser.settle()
    return {
        "classes": classes,
        "raised": raised,
        "text": parser.output_text,
        "usage": parser.usage.model_dump_json(),
        "timings": parser.provider_timings.model_dump_json(),
        "stop_reason_raw": parser.stop_reason_raw,
        "stop_reason": parser.stop_reason(),
        "response_id": parser.response_id,
        "system_fingerprint": parser.system_fingerprint,
        "error": parser.error and parser.error.model_dump_json(),
        "streamed_output_tokens": parser.streamed_output_tokens(len(classes)),
    }


def read_both_ways(prov: Provider, items: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The facts from the adapter's `reader` and from the old JSON round trip, each read
    as the SDK path reads: until the parser's first malformed-stream error."""
    assert prov.sdk is not None
    new, old = prov.new_parser(), prov.new_parser()
    read = prov.sdk.reader(new)
    sides = []
    for parser, step in (
        (new, read),
        (old, lambda item: old.on_event(_reserialised(prov.kind, item))),
    ):
        classes: list[int] = []
        raised = None
        try:
            for item in items:
                classes.append(step(item))
        except MalformedStream as exc:
            raised = str(exc)
        sides.append(_facts(parser, classes, raised))
    return sides[0], sides[1]


def _same_json(view: Any, dumped: Any) -> bool:
    """Equal as JSON (NaN equals NaN there)."""
    return json.dumps(view, sort_keys=True) == json.dumps(dumped, sort_keys=True)


@pytest.mark.parametrize("fixture", SDK_CORPUS, ids=[f.name for f in SDK_CORPUS])
def test_every_corpus_shape_reads_the_same_from_the_view_as_from_its_json(fixture: Any) -> None:
    base = "http://view.test" if fixture.kind == "llamacpp" else "http://view.test/v1"
    prov = make_provider(fixture.kind, api_key="sk-view", base_url=base, model="corpus-model")
    items = sdk_objects(prov, fixture.body, fixture.headers)
    # Every shape gets as far as the SDK's first object, but a stream of only `[DONE]`,
    # which the SDK consumes itself (an empty stream, issue 44).
    assert items or fixture.body.strip() == b"data: [DONE]"
    for item in items:
        dumped = json.loads(_reserialised(fixture.kind, item).data)
        assert _same_json(model_view(item), dumped), item
    new, old = read_both_ways(prov, items)
    assert new == old
    asyncio.run(prov.aclose())


@pytest.mark.parametrize("kind", SDK_KINDS)
@given(data=st.data())
def test_mutated_streams_read_the_same_from_the_view_as_from_its_json(
    kind: str, data: st.DataObject
) -> None:
    stream = data.draw(mutated_streams(kind), label="stream")
    prov = provider(kind)
    items = sdk_objects(prov, stream.data)
    for item in items:
        if isinstance(item, BaseModel):
            dumped = json.loads(_reserialised(kind, item).data)
            assert _same_json(model_view(item), dumped), item
    new, old = read_both_ways(prov, items)
    assert new == old
