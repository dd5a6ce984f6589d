"""The SDK path (`labkit.sdkpath`): the same requests through the official SDKs.

Against the fake schedule on real sockets (the openai SDK over httpx2), and against
`httpx2.MockTransport` for errors and for Anthropic (respx does not patch httpx2).
"""

from __future__ import annotations

import asyncio
import json
import statistics

import httpx2

from labkit.fakeserver import FakeServer
from labkit.providers import provider_class
from labkit.providers.base import ChatRequest, Provider
from labkit.providers.fake import FakeSchedule
from labkit.recorder import RecordContext, StreamRecorder
from labkit.records import ErrorKind, StopReason
from labkit.sdkpath import SDKRecorder, sdk_supported

SCHEDULE = FakeSchedule(first_token_ms=60.0, token_interval_ms=15.0, tokens=20)


def _provider(kind: str, **data: object) -> Provider:
    cls = provider_class(kind)
    return cls(cls.settings_model.model_validate({"id": kind, "kind": kind, **data}), api_key="k-1")


def _request() -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "hello"}], {"max_tokens": 50}, "p0")


def test_sdk_path_on_real_sockets_matches_the_schedule_and_the_wire_path() -> None:
    async def main() -> tuple[list[float], list[float], list[float]]:
        async with FakeServer(SCHEDULE) as server:
            provider = _provider("openai_compatible", model="fake", base_url=server.base_url)
            sdk = SDKRecorder()
            wire = StreamRecorder()
            sdk_ttft, wire_ttft, sdk_decode = [], [], []
            for i in range(4):
                ctx = RecordContext(run_id="r", experiment="t", trial=i)
                s = await sdk.record(provider, _request(), ctx)
                w = await wire.record(provider, _request(), ctx)
                assert s.error is None and w.error is None
                assert s.app.client_path == "sdk" and w.app.client_path == "wire"
                assert s.usage.output_tokens == 20 and s.stop_reason == StopReason.END
                assert s.output_text == w.output_text
                if i:  # the first SDK request pays for imports and client set-up
                    sdk_ttft.append(s.client.ttft_ms or 0)
                    wire_ttft.append(w.client.ttft_ms or 0)
                    sdk_decode.append(s.client.decode_ms_per_token or 0)
            await sdk.aclose()
            await provider.aclose()
            return sdk_ttft, wire_ttft, sdk_decode

    sdk_ttft, wire_ttft, sdk_decode = asyncio.run(main())
    sdk_p50, wire_p50 = statistics.median(sdk_ttft), statistics.median(wire_ttft)
    print(f"median TTFT: sdk {sdk_p50:.2f} ms, wire {wire_p50:.2f} ms")
    assert abs(statistics.median(sdk_ttft) - 60.0) < 15.0
    assert abs(statistics.median(sdk_decode) - 15.0) / 15.0 < 0.10


def _mock_sdk(handler) -> SDKRecorder:  # type: ignore[no-untyped-def]
    return SDKRecorder(
        http_client_factory=lambda timeout: httpx2.AsyncClient(
            transport=httpx2.MockTransport(handler)
        )
    )


def test_sdk_path_http_error_is_recorded_without_the_key() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.headers["authorization"] == "Bearer k-1"
        body = {"error": {"message": "Rate limit for key k-1", "type": "rate_limit"}}
        return httpx2.Response(429, json=body, headers={"retry-after": "3"})

    async def main():  # type: ignore[no-untyped-def]
        provider = _provider("openai", model="gpt-4o")
        sdk = _mock_sdk(handler)
        rec = await sdk.record(provider, _request(), RecordContext(run_id="r", experiment="t"))
        await sdk.aclose()
        await provider.aclose()
        return rec

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert rec.error.status == 429
    assert "k-1" not in rec.model_dump_json()
    assert rec.app.client_path == "sdk" and rec.stop_reason == StopReason.ERROR


def test_sdk_path_anthropic_events() -> None:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_9",
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "usage": {"input_tokens": 12, "output_tokens": 1},
                },
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " there"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)
    seen: dict[str, object] = {}

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.update(json.loads(request.read()))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async def main():  # type: ignore[no-untyped-def]
        provider = _provider("anthropic", model="claude-haiku-4-5")
        assert sdk_supported(provider)
        sdk = _mock_sdk(handler)
        request = ChatRequest(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            {"max_tokens": 20, "temperature": 0},
        )
        rec = await sdk.record(provider, request, RecordContext(run_id="r", experiment="t"))
        await sdk.aclose()
        await provider.aclose()
        return rec

    rec = asyncio.run(main())
    assert rec.error is None, rec.error
    assert rec.output_text == "Hi there"
    assert rec.usage.input_tokens == 12 and rec.usage.output_tokens == 2
    assert rec.stop_reason == StopReason.END and rec.response_id == "msg_9"
    assert len(rec.client.event_offsets_ms) == 2
    assert seen["system"] == "Be brief." and seen["temperature"] == 0 and seen["max_tokens"] == 20


def test_fake_provider_has_no_sdk_path() -> None:
    provider = _provider("fake")
    assert not sdk_supported(provider)
    asyncio.run(provider.aclose())
