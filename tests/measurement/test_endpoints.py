"""Both client paths of a provider reach the same endpoint, whichever URL form is given.

A provider accepts `base_url` with or without its version path (`http://host` and
`http://host/v1`: the SDKs' and the gateways' conventions differ); the wire path and the SDK
path must then post to one URL, or `sdk − wire` would compare two endpoints. Checked on a real
socket: the server keeps every request line it receives.
"""

from __future__ import annotations

import asyncio

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import provider_class
from tests.providers.streams import (
    anthropic_events,
    chat,
    oa_usage,
    openai_events,
    responses_events,
)
from tests.support.misbehaving import MisbehavingServer, sse_reply

pytestmark = pytest.mark.integration

CASES = [
    ("anthropic", "", "/v1/messages"),
    ("anthropic", "/v1", "/v1/messages"),
    ("openai_compatible", "", "/v1/chat/completions"),
    ("openai_compatible", "/v1", "/v1/chat/completions"),
    ("openai", "/v1", "/v1/chat/completions"),
    ("openai", "", "/v1/chat/completions"),
    ("llamacpp", "", "/v1/chat/completions"),
    ("llamacpp", "/v1", "/v1/chat/completions"),
    ("openai_responses", "", "/v1/responses"),
    ("openai_responses", "/v1", "/v1/responses"),
]


@pytest.mark.parametrize(("kind", "suffix", "path"), CASES)
def test_wire_and_sdk_post_to_the_same_url(kind: str, suffix: str, path: str) -> None:
    if kind == "anthropic":
        events = list(anthropic_events(["Hi", "!"]))
    elif kind == "openai_responses":
        events = list(responses_events(["Hi", "!"]))
    else:
        events = list(openai_events(["Hi", "!"], usage=oa_usage(3, 2)))

    async def main(base_url: str) -> list[str]:
        cls = provider_class(kind)
        data = {"id": "p", "kind": kind, "model": "m", "base_url": base_url}
        provider = cls(cls.settings_model.model_validate(data), api_key="k-endpoint")
        wire, sdk = StreamRecorder(), SDKRecorder()
        errors = []
        try:
            for recorder in (wire, sdk):
                rec = await recorder.record(provider, chat(), RecordContext("r", "t"))
                errors.append(rec.error.message if rec.error else None)
        finally:
            await sdk.aclose()
            await provider.aclose()
        return errors

    with MisbehavingServer(lambda _: sse_reply(events)) as server:
        errors = asyncio.run(main(server.base_url + suffix))
        lines = [r.split(b"\r\n", 1)[0].decode() for r in server.requests]
    assert errors == [None, None]
    assert lines == [f"POST {path} HTTP/1.1"] * 2
