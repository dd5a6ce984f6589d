"""The SDK path (`labkit.sdkpath`): the same requests through the official SDKs.

Against the fake schedule on real sockets (the openai SDK over httpx2), and against
`httpx2.MockTransport` for errors, for Anthropic and for the recorded streams that the wire
path's tests read too (respx does not patch httpx2).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import respx

from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.figures import AttributionKey
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder, sdk_supported
from labkit.providers import provider_class
from labkit.providers.base import ChatRequest, Provider
from labkit.providers.fake import FakeSchedule
from labkit.providers.sdk import model_view
from labkit.records import ErrorKind, RequestRecord, StopReason
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import (
    SSE_HEADERS,
    chat,
    load_sse,
    make_provider,
    split_every,
    sse_response,
)
from tests.support.truth import assert_agrees_with_truth


def _provider(kind: str, **data: object) -> Provider:
    cls = provider_class(kind)
    return cls(cls.settings_model.model_validate({"id": kind, "kind": kind, **data}), api_key="k-1")


def _request() -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "hello"}], {"max_tokens": 50}, "p0")


@pytest.mark.integration
def test_sdk_path_on_real_sockets_agrees_with_the_truth_like_the_wire_path(
    tmp_path: Path,
) -> None:
    log = tmp_path / "truth.jsonl"

    async def main(base_url: str) -> tuple[list[RequestRecord], list[RequestRecord]]:
        provider = _provider("openai_compatible", model="fake", base_url=base_url)
        sdk = SDKRecorder()
        wire = StreamRecorder()
        sdk_records, wire_records = [], []
        for i in range(4):
            ctx = RecordContext(run_id="r", experiment="t", trial=i)
            s = await sdk.record(provider, _request(), ctx)
            w = await wire.record(provider, _request(), ctx)
            assert s.error is None and w.error is None
            assert s.app.client_path == "sdk" and w.app.client_path == "wire"
            assert s.usage.output_tokens == 20 and s.stop_reason == StopReason.END
            assert s.output_text == w.output_text
            sdk_records.append(s)
            wire_records.append(w)
        await sdk.aclose()
        await provider.aclose()
        return sdk_records, wire_records

    with TruthServer(truth_log=log, ttft_ms=60, interval_ms=15, tokens=20) as srv:
        sdk_records, wire_records = asyncio.run(main(srv.base_url))
    truth = read_truth_log(log)
    # Both paths: every event stamped no earlier than the server sent it, on one clock.
    assert_agrees_with_truth(sdk_records, truth)
    assert_agrees_with_truth(wire_records, truth)
    for s, w in zip(sdk_records, wire_records, strict=True):
        assert len(s.client.event_offsets_ms) == len(w.client.event_offsets_ms) == 20
        assert (s.client.ttft_ms or 0) >= 60 and (w.client.ttft_ms or 0) >= 60
    sdk_p50 = statistics.median(r.client.ttft_ms or 0 for r in sdk_records[1:])
    wire_p50 = statistics.median(r.client.ttft_ms or 0 for r in wire_records[1:])
    print(f"median TTFT: sdk {sdk_p50:.2f} ms, wire {wire_p50:.2f} ms")


def _mock_sdk(handler) -> SDKRecorder:  # type: ignore[no-untyped-def]
    return SDKRecorder(
        http_client_factory=lambda timeout: httpx2.AsyncClient(
            transport=httpx2.MockTransport(handler)
        )
    )


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
def test_fake_provider_has_no_sdk_path() -> None:
    provider = _provider("fake")
    assert not sdk_supported(provider)
    asyncio.run(provider.aclose())


# --- the recorded streams of the wire path's tests, through the SDKs --------------------

RECORDED = [
    pytest.param(
        "openai",
        "openai_chat.sse",
        "https://api.openai.com/v1/chat/completions",
        {
            "x-request-id": "req_1",
            "openai-processing-ms": "7",
            "x-ratelimit-remaining-requests": "499",
        },
        {"model": "gpt-4.1-mini"},
        id="openai",
    ),
    pytest.param(
        "anthropic",
        "anthropic_messages.sse",
        "https://api.anthropic.com/v1/messages",
        {"request-id": "req_9", "anthropic-ratelimit-requests-remaining": "49"},
        {"model": "claude-haiku-4-5"},
        id="anthropic",
    ),
    pytest.param(
        "llamacpp",
        "llamacpp_chat.sse",
        "http://llama.test:8080/v1/chat/completions",
        {"x-request-id": "req_l"},
        {"base_url": "http://llama.test:8080", "transport": "httpx"},
        id="llamacpp",
    ),
    pytest.param(
        "openai_responses",
        "corpus/openai_responses_text.sse",
        "https://api.openai.com/v1/responses",
        {"x-request-id": "req_r", "openai-processing-ms": "9"},
        {"model": "gpt-5-mini"},
        id="openai_responses",
    ),
]


@pytest.mark.unit
@pytest.mark.parametrize(("kind", "fixture", "url", "headers", "settings"), RECORDED)
def test_wire_and_sdk_paths_read_the_same_stream_alike(
    kind: str, fixture: str, url: str, headers: dict[str, str], settings: dict[str, Any]
) -> None:
    raw = load_sse(fixture)
    sent_to: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent_to.append(str(request.url))
        return httpx2.Response(200, headers={**SSE_HEADERS, **headers}, content=raw)

    async def main() -> tuple[RequestRecord, RequestRecord]:
        provider = make_provider(kind, api_key="sk-test-key", **settings)
        ctx = RecordContext(run_id="r", experiment="t")
        sdk = _mock_sdk(handler)
        try:
            with respx.mock() as router:
                router.post(url).mock(
                    return_value=sse_response(split_every(raw, 37), headers=headers)
                )
                wire = await StreamRecorder().record(provider, chat(max_tokens=64), ctx)
            return wire, await sdk.record(provider, chat(max_tokens=64), ctx)
        finally:
            await sdk.aclose()
            await provider.aclose()

    wire, sdk = asyncio.run(main())
    assert sent_to == [url]
    assert wire.error is None and sdk.error is None, (wire.error, sdk.error)
    assert (wire.app.client_path, sdk.app.client_path) == ("wire", "sdk")
    # What the fixture says, on both paths.
    assert sdk.usage.input_tokens is not None and sdk.usage.output_tokens is not None
    assert sdk.usage.output_tokens_source == "provider"
    assert sdk.response_id is not None and sdk.stop_reason is not None
    assert sdk.request_id == next(v for k, v in headers.items() if k.endswith("request-id"))
    # Every count, reason and identifier agrees.
    assert sdk.usage == wire.usage
    assert (sdk.stop_reason, sdk.stop_reason_raw) == (wire.stop_reason, wire.stop_reason_raw)
    assert sdk.response_id == wire.response_id and sdk.request_id == wire.request_id
    assert sdk.system_fingerprint == wire.system_fingerprint
    assert sdk.rate_limits == wire.rate_limits
    assert sdk.provider_timings == wire.provider_timings
    assert sdk.output_text == wire.output_text and sdk.output_text
    assert len(sdk.client.event_offsets_ms) == len(wire.client.event_offsets_ms) > 0
    assert sdk.params == wire.params
    if kind == "openai":
        assert sdk.provider_timings.processing_ms == 7.0
        assert sdk.rate_limits == {"x-ratelimit-remaining-requests": "499"}
    if kind == "llamacpp":
        assert sdk.provider_timings.prefill_ms is not None
    # CPU time on both paths; decoding is separable only on the wire.
    assert wire.app.cpu_ms is not None and wire.app.cpu_ms > 0
    assert sdk.app.cpu_ms is not None and sdk.app.cpu_ms > 0
    assert wire.app.parse_cpu_ms is not None and sdk.app.parse_cpu_ms is None


@pytest.mark.unit
def test_sdk_http_error_keeps_request_id_and_retry_after() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        body = {"error": {"type": "overloaded_error", "message": "Overloaded"}}
        return httpx2.Response(529, json=body, headers={"request-id": "req_x", "retry-after": "2"})

    async def main() -> RequestRecord:
        provider = _provider("anthropic", model="claude-haiku-4-5")
        sdk = _mock_sdk(handler)
        try:
            return await sdk.record(provider, _request(), RecordContext(run_id="r", experiment="t"))
        finally:
            await sdk.aclose()
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert rec.error.status == 529 and rec.error.retry_after_s == 2.0
    assert rec.error.message == "HTTP 529: overloaded_error: Overloaded"
    assert rec.request_id == "req_x"


# --- connection phases over real sockets ---------------------------------------------------

SHORT = FakeSchedule(first_token_ms=20.0, token_interval_ms=2.0, tokens=8)


@pytest.mark.integration
def test_sdk_path_measures_connection_phases_on_real_sockets() -> None:
    async def main() -> list[RequestRecord]:
        with TruthServer.of(SHORT) as server:
            provider = _provider("openai_compatible", model="fake", base_url=server.base_url)
            sdk = SDKRecorder()
            closing = _request()
            closing.fresh_connection = True  # closes after itself: the next one connects anew
            records = []
            for request in (_request(), closing, _request()):
                ctx = RecordContext(run_id="r", experiment="t")
                records.append(await sdk.record(provider, request, ctx))
            await sdk.aclose()
            await provider.aclose()
            return records

    first, reused, reconnected = asyncio.run(main())
    for rec in (first, reused, reconnected):
        c = rec.client
        assert rec.error is None and rec.app.client_path == "sdk"
        assert c.request_sent_ms is not None and c.headers_ms is not None
        assert c.ttft_ms is not None and c.e2e_ms is not None
        assert 0 < c.request_sent_ms <= c.headers_ms <= c.ttft_ms <= c.e2e_ms
        assert rec.app.cpu_ms is not None and 0 < rec.app.cpu_ms < c.e2e_ms
    assert first.client.connect_ms is not None and reconnected.client.connect_ms is not None
    assert 0 < reconnected.client.connect_ms <= reconnected.client.request_sent_ms  # type: ignore[operator]
    assert reused.client.connect_ms is None  # the pooled connection of the first request


@pytest.mark.unit
def test_network_guard_stops_the_sdk_path_before_anything_is_sent() -> None:
    async def main() -> RequestRecord:
        provider = _provider("openai", model="gpt-4.1-mini")  # https://api.openai.com/v1
        sdk = SDKRecorder()  # the SDK's real HTTP stack, no mock transport
        try:
            return await sdk.record(provider, _request(), RecordContext(run_id="r", experiment="t"))
        finally:
            await sdk.aclose()
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert "tests may not" in rec.error.message and "api.openai.com" in rec.error.message
    c = rec.client
    assert c.connect_ms is None and c.request_sent_ms is None and c.headers_ms is None
    assert c.ttft_ms is None and rec.stop_reason == StopReason.ERROR
    assert "k-1" not in rec.model_dump_json()


# --- both paths through an experiment's plan, as the runner sends it -----------------------


@pytest.mark.integration
def test_attribution_pairs_paths_and_connections_on_real_sockets() -> None:
    exp = AttributionExperiment(AttributionSettings(repeats=4, warmup=1))

    async def main() -> list[RequestRecord]:
        with TruthServer.of(SHORT) as server:
            provider = _provider("openai_compatible", model="fake", base_url=server.base_url)
            plan = list(exp.requests_for(provider))
            wire, sdk = StreamRecorder(), SDKRecorder()
            records = []
            for planned in plan:
                ctx = RecordContext(
                    run_id="r",
                    experiment=exp.name,
                    trial=planned.trial,
                    warmup=planned.warmup,
                    tags=planned.tags,
                )
                recorder = sdk if planned.request.client_path == "sdk" else wire
                rec = await recorder.record(provider, planned.request, ctx)
                rec.plan_key = planned.key
                records.append(rec)
            await sdk.aclose()
            await provider.aclose()
            return records

    records = asyncio.run(main())
    assert [r.plan_key for r in records] == [
        "attribution/warmup/0",
        "attribution/warmup/0/sdk",
        *(k for t in range(4) for k in (f"attribution/{t}", f"attribution/{t}/sdk")),
    ]
    assert all(r.error is None for r in records)
    for r in records[2:]:
        assert r.app.client_path == r.tags["path"]
        # Each path has its own connection pool; "fresh" trials opened a new connection.
        fresh = r.tags["connection"] == "fresh"
        assert (r.client.connect_ms is not None) == fresh, (r.plan_key, r.client.connect_ms)
    answer = exp.analyze("fake-server", "fake", records)
    f = answer.figures
    assert answer.status == "ok" and f.sdk_measured is True
    assert f.n_sdk_pairs == 4 and f.n_event_delay_pairs == 4 and f.n_cpu_pairs == 4
    assert f.n_cpu_wire == 4 and f.n_cpu_sdk == 4
    assert f.cpu_us_per_event_wire > 0 and f.cpu_us_per_event_sdk > 0
    # The SDK's TTFT figure: the median over the 4 trials of the SDK's TTFT minus the wire
    # path's (what the SDK costs is a figure of the host: printed, not bounded).
    by_key = {r.plan_key: r for r in records}
    paired = [
        (by_key[f"attribution/{t}/sdk"].client.ttft_ms or 0)
        - (by_key[f"attribution/{t}"].client.ttft_ms or 0)
        for t in range(4)
    ]
    assert f.sdk_ttft_ms == pytest.approx(statistics.median(paired))
    assert f.sdk_event_delay_ms is not None
    print(f"SDK minus wire: TTFT {f.sdk_ttft_ms:.2f} ms, event delay {f.sdk_event_delay_ms:.2f} ms")
    assert "The official SDK on TTFT" in answer.answer and "n=4" in answer.answer
    rows = {r.key: r for r in f.rows}
    assert rows[AttributionKey.TCP_CONNECT].value_ms is not None
    assert rows[AttributionKey.SDK_EVENT_DELAY].value_ms == f.sdk_event_delay_ms


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kind", "fixture", "cut_at", "settings"),
    [
        ("openai", "openai_chat.sse", b'"finish_reason":"stop"', {"model": "gpt-4.1-mini"}),
        ("anthropic", "anthropic_messages.sse", b"event: message_delta", {"model": "m"}),
    ],
)
def test_sdk_path_flags_a_stream_cut_before_its_end(
    kind: str, fixture: str, cut_at: bytes, settings: dict[str, Any]
) -> None:
    """The openai SDK swallows `[DONE]` and ends quietly on a cut stream: labkit still says
    the stream was truncated, as the wire path does."""
    raw = load_sse(fixture)
    cut = raw[: raw.rindex(b"\n\n", 0, raw.index(cut_at)) + 2]

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=SSE_HEADERS, content=cut)

    async def main() -> RequestRecord:
        provider = make_provider(kind, api_key="sk-test-key", **settings)
        sdk = _mock_sdk(handler)
        try:
            return await sdk.record(provider, chat(), RecordContext(run_id="r", experiment="t"))
        finally:
            await sdk.aclose()
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "truncated" in rec.error.message
    assert rec.output_text and rec.client.ttft_ms is not None  # what arrived is kept
    assert rec.stop_reason == StopReason.ERROR


# --- reading what the SDK yields, where it lies ---------------------------------------------


def _record_stream(kind: str, body: bytes, **settings: Any) -> RequestRecord:
    """One SDK-path record of `body`, served by a mock transport."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=SSE_HEADERS, content=body)

    async def main() -> RequestRecord:
        provider = make_provider(kind, api_key="sk-test-key", **settings)
        sdk = _mock_sdk(handler)
        try:
            return await sdk.record(provider, chat(), RecordContext(run_id="r", experiment="t"))
        finally:
            await sdk.aclose()
            await provider.aclose()

    return asyncio.run(main())


@pytest.mark.unit
def test_model_view_is_the_json_that_arrived_by_reference() -> None:
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk

    received = {
        "id": "c-1",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Hi", "reasoning": "r"}, "logprobs": None}],
        "usage": {"prompt_tokens": "3", "completion_tokens": 1, "total_tokens": 4, "x": [1]},
        "x_groq": {"id": "req_1", "usage": {"queue_time": 0.01}},
        "timings": {"prompt_ms": 1.5},
    }
    chunk = construct_type(type_=ChatCompletionChunk, value=json.loads(json.dumps(received)))
    view = model_view(chunk)
    # Fields that were not sent (object, created, finish_reason) stay absent; a null stays.
    assert set(view) == set(received)
    assert view["choices"] == [
        {"index": 0, "delta": {"content": "Hi", "reasoning": "r"}, "logprobs": None}
    ]
    # What the SDK coerced while validating (lax mode: "3" became 3) is read as coerced.
    assert view["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "total_tokens": 4,
        "x": [1],
    }
    assert view["x_groq"] == received["x_groq"] and view["timings"] == {"prompt_ms": 1.5}
    assert type(view["choices"][0]) is dict and type(view["choices"][0]["delta"]) is dict
    # By reference: the SDK's own values, not copies.
    assert view["choices"][0]["delta"]["content"] is chunk.choices[0].delta.content
    assert view["x_groq"] is chunk.model_extra["x_groq"]  # type: ignore[index]


@pytest.mark.unit
@pytest.mark.parametrize("data", ['"just a string"', "[1, 2]", "7"])
def test_an_event_that_is_no_object_is_a_malformed_stream_on_the_sdk_path(data: str) -> None:
    body = f"data: {data}\n\ndata: [DONE]\n\n".encode()
    rec = _record_stream("openai", body, model="gpt-4.1-mini")
    kind = type(json.loads(data)).__name__
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert rec.error.message == f"malformed stream: event data is a JSON {kind}, not an object"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kind", "fixture", "settings"),
    [
        ("openai", "openai_chat.sse", {"model": "gpt-4.1-mini"}),
        ("anthropic", "anthropic_messages.sse", {"model": "claude-haiku-4-5"}),
        ("openai_responses", "corpus/openai_responses_text.sse", {"model": "gpt-5-mini"}),
    ],
)
def test_sdk_path_never_serialises_what_the_sdk_yields(
    kind: str, fixture: str, settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import anthropic._models
    import openai._models

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an SDK object was serialised")

    for base in (openai._models.BaseModel, anthropic._models.BaseModel):
        monkeypatch.setattr(base, "model_dump", refuse)
        monkeypatch.setattr(base, "model_dump_json", refuse)
    rec = _record_stream(kind, load_sse(fixture), **settings)
    assert rec.error is None, rec.error
    assert rec.output_text and rec.usage.output_tokens is not None


@pytest.mark.unit
def test_sdk_path_cpu_ms_includes_labkits_reading_of_each_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`app.cpu_ms` is the thread's CPU over the stream, labkit's per-object reading
    included, as on the wire path: a reader that burns 2 ms of CPU per object shows up."""
    from labkit.providers.openai_sdk import OpenAISDK

    burn_ns = 2_000_000
    reads: list[int] = []
    plain_reader = OpenAISDK.reader

    def burning_reader(self: OpenAISDK, parser: Any) -> Any:
        read = plain_reader(self, parser)

        def burn(item: Any) -> int:
            until = time.thread_time_ns() + burn_ns
            while time.thread_time_ns() < until:
                pass
            reads.append(1)
            return read(item)

        return burn

    monkeypatch.setattr(OpenAISDK, "reader", burning_reader)
    rec = _record_stream("openai", load_sse("openai_chat.sse"), model="gpt-4.1-mini")
    assert rec.error is None, rec.error
    assert len(reads) >= 5
    assert rec.app.cpu_ms is not None and rec.app.cpu_ms >= len(reads) * burn_ns / 1e6


@pytest.mark.unit
def test_the_watched_decoder_maker_takes_what_each_sdk_version_passes() -> None:
    from types import SimpleNamespace

    from labkit.measurement.sdkpath import _watch_sse, _WatchedDecoder

    seen: list[tuple[Any, ...]] = []

    class Client:
        def _make_sse_decoder(self, options: Any = None) -> object:  # anthropic >= 2.16
            seen.append((options,))
            return object()

    client = Client()
    _watch_sse(client, SimpleNamespace(consumed_by_sdk=lambda event, data: False))  # type: ignore[arg-type]
    assert isinstance(client._make_sse_decoder(), _WatchedDecoder)  # earlier SDKs: no argument
    assert isinstance(client._make_sse_decoder("options"), _WatchedDecoder)
    assert seen == [(None,), ("options",)]
