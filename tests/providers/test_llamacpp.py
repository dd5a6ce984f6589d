"""llama.cpp's llama-server on the wire, via respx: `timings`, /tokenize, /props, base_url."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import respx

from labkit.providers.llamacpp import LlamaCppSettings
from labkit.records import StopReason
from tests.providers.streams import (
    load_sse,
    make_provider,
    oa_chunk,
    oa_usage,
    openai_events,
    record_one,
    sse,
    sse_response,
)

pytestmark = pytest.mark.unit

ROOT = "http://127.0.0.1:8080"
CHAT = ROOT + "/v1/chat/completions"

TIMINGS = {
    "cache_n": 3,
    "prompt_n": 21,
    "prompt_ms": 38.5,
    "prompt_per_token_ms": 1.83,
    "prompt_per_second": 545.3,
    "predicted_n": 4,
    "predicted_ms": 22.1,
    "predicted_per_token_ms": 5.525,
    "predicted_per_second": 181.0,
}


def llama(base_url: str = ROOT + "/v1", **kw):
    # respx mocks httpx's transport: on a loopback URL `auto` would read through lean.
    kw.setdefault("transport", "httpx")
    return make_provider("llamacpp", base_url=base_url, **kw)


@pytest.mark.parametrize("base_url", [ROOT, ROOT + "/", ROOT + "/v1", ROOT + "/v1/"])
def test_base_url_is_the_server_root(base_url: str) -> None:
    settings = LlamaCppSettings(id="l", kind="llamacpp", base_url=base_url)
    assert settings.resolved_base_url() == ROOT
    assert settings.managed is False  # a base_url means an existing server


def test_managed_defaults() -> None:
    settings = LlamaCppSettings(id="l", kind="llamacpp")
    assert settings.managed is True
    with pytest.raises(ValueError, match="managed: false needs a base_url"):
        LlamaCppSettings(id="l", kind="llamacpp", managed=False)


def test_timings_on_last_chunk_become_provider_timings() -> None:
    events = [
        sse(oa_chunk(role="assistant", content=None)),
        sse(oa_chunk("a")),
        sse(oa_chunk("b")),
        sse(oa_chunk(finish="stop", timings=TIMINGS)),
        sse(oa_chunk(choices=False, usage=oa_usage(24, 2), timings=TIMINGS)),
        b"data: [DONE]\n\n",
    ]
    with respx.mock() as router:
        route = router.post(CHAT).mock(return_value=sse_response(events))
        rec = record_one(llama())
    assert rec.error is None
    pt = rec.provider_timings
    assert pt.prefill_ms == 38.5
    assert pt.prefill_tokens == 21
    assert pt.decode_ms == 22.1
    assert pt.decode_ms_per_token == 5.525
    assert pt.cached_tokens == 3
    assert pt.raw == TIMINGS
    assert rec.usage.input_tokens == 24 and rec.usage.output_tokens == 2
    assert rec.provider_kind == "llamacpp"
    body = json.loads(route.calls.last.request.content)
    assert body["stream_options"] == {"include_usage": True}


def test_cumulative_timings_per_token_are_replaced() -> None:
    def t(n: int, ms: float) -> dict:
        return {**TIMINGS, "predicted_n": n, "predicted_ms": ms}

    events = [
        sse(oa_chunk("a", timings=t(1, 0.0))),
        sse(oa_chunk("b", timings=t(2, 6.0))),
        sse(oa_chunk(finish="stop", timings=t(2, 6.5))),
        b"data: [DONE]\n\n",
    ]
    with respx.mock() as router:
        router.post(CHAT).mock(return_value=sse_response(events))
        rec = record_one(llama())
    assert rec.provider_timings.decode_ms == 6.5
    assert rec.provider_timings.raw["predicted_n"] == 2
    # No usage object: the counts come from the last timings (prompt_n + cache_n in).
    assert rec.usage.output_tokens_source == "provider" and rec.usage.output_tokens == 2
    assert rec.usage.input_tokens == 21 + 3 and rec.usage.cached_input_tokens == 3


def test_recorded_llamacpp_stream() -> None:
    raw = load_sse("llamacpp_chat.sse")
    chunks = [raw[i : i + 41] for i in range(0, len(raw), 41)]
    with respx.mock() as router:
        router.post(CHAT).mock(return_value=sse_response(chunks))
        rec = record_one(llama(ROOT))
    assert rec.error is None
    assert rec.output_text == "A token is a"
    assert rec.stop_reason == StopReason.LENGTH and rec.stop_reason_raw == "length"
    assert rec.system_fingerprint == "b1-0c1e570"
    assert rec.request_id is None  # llama-server sends no request id
    assert rec.usage.output_tokens == 4 and rec.usage.input_tokens == 21
    pt = rec.provider_timings
    assert (pt.prefill_ms, pt.prefill_tokens, pt.decode_ms, pt.cached_tokens) == (
        38.512,
        21,
        22.108,
        0,
    )
    assert pt.decode_ms_per_token == 5.527
    assert len(rec.client.event_offsets_ms) == 4


def test_tokenize_and_props() -> None:
    async def go():
        provider = llama()
        try:
            return (
                await provider.tokenize("Hello world"),
                await provider.count_tokens("Hello world"),
                await provider.describe(),
                provider.server_build,
            )
        finally:
            await provider.aclose()

    props = {
        "build_info": "b1-0c1e570",
        "total_slots": 2,
        "model_path": "/models/smollm2.gguf",
        "default_generation_settings": {"n_ctx": 4096},
    }
    with respx.mock() as router:
        tok = router.post(ROOT + "/tokenize").mock(
            side_effect=[
                httpx.Response(200, json={"tokens": [19556, 905]}),
                httpx.Response(
                    200,
                    json={
                        "tokens": [{"id": 19556, "piece": "Hello"}, {"id": 905, "piece": " world"}]
                    },
                ),
            ]
        )
        router.get(ROOT + "/props").mock(return_value=httpx.Response(200, json=props))
        tokens, count, described, build = asyncio.run(go())
    assert tokens == [19556, 905]
    assert count.tokens == 2 and count.source == "llamacpp:/tokenize"
    assert json.loads(tok.calls[0].request.content) == {"content": "Hello world"}
    assert described == {
        "build_info": "b1-0c1e570",
        "total_slots": 2,
        "n_ctx": 4096,
        "model_path": "/models/smollm2.gguf",
    }
    assert build == "b1-0c1e570"


def test_a_chat_prompt_is_counted_through_the_template_without_generating() -> None:
    messages = [{"role": "user", "content": "."}]
    templated = "<|im_start|>user\n.<|im_end|>\n<|im_start|>assistant\n"

    async def go():
        provider = llama()
        try:
            return await provider.count_chat_prompt(messages)
        finally:
            await provider.aclose()

    with respx.mock() as router:  # any other request (a generation) would fail: not mocked
        applied = router.post(ROOT + "/apply-template").mock(
            return_value=httpx.Response(200, json={"prompt": templated})
        )
        tok = router.post(ROOT + "/tokenize").mock(
            return_value=httpx.Response(200, json={"tokens": [1, 4093, 198, 30, 2, 198, 1, 520]})
        )
        count = asyncio.run(go())
    assert count is not None and count.tokens == 8
    assert count.source == "llamacpp:/apply-template + /tokenize"
    assert json.loads(applied.calls[0].request.content) == {"messages": messages}
    # Cut as the server cuts a chat prompt: its special tokens included.
    assert json.loads(tok.calls[0].request.content) == {"content": templated, "add_special": True}

    with respx.mock() as router:
        router.post(ROOT + "/apply-template").mock(return_value=httpx.Response(200, json={}))
        with pytest.raises(ValueError, match="no prompt text"):
            asyncio.run(go())


def test_server_build_lands_in_the_record() -> None:
    async def go():
        from labkit.measurement.recorder import RecordContext, StreamRecorder
        from tests.providers.streams import chat

        provider = llama()
        try:
            await provider.describe()
            return await StreamRecorder().record(
                provider, chat(), RecordContext(run_id="r", experiment="t")
            )
        finally:
            await provider.aclose()

    with respx.mock() as router:
        router.get(ROOT + "/props").mock(
            return_value=httpx.Response(200, json={"build_info": "b9999-abc"})
        )
        router.post(CHAT).mock(return_value=sse_response(openai_events(["x"])))
        rec = asyncio.run(go())
    assert rec.server_build == "b9999-abc"


def test_tokenize_error_raises() -> None:
    async def go():
        provider = llama()
        try:
            await provider.tokenize("x")
        finally:
            await provider.aclose()

    with respx.mock() as router:
        router.post(ROOT + "/tokenize").mock(return_value=httpx.Response(503))
        with pytest.raises(httpx.HTTPStatusError):
            asyncio.run(go())
