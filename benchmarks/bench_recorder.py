"""The hot path, measured: per-event cost of labkit's stream reading, side by side.

1. Parsing: the same Chat Completions byte stream (one chunk per read, as servers send it)
   through labkit's SSE framing + chunk parser, and through the official openai SDK's SSE
   decoder followed by `json.loads` (what any client must do at least). Prints ns/event for
   both and their ratio.
2. The whole recorder: a 2,000-token stream from the in-process fake transport with no
   delays, so every microsecond is labkit's own: ns/event of `app.parse_cpu_ms` and of the
   end-to-end read.
3. The SDK path against the bare SDK: the same 2,000-token Chat Completions stream, answered
   in-process by an `httpx2.MockTransport` one event per read, read by the bare openai SDK
   (stamp each chunk, keep the content ones) and by labkit's `SDKRecorder` (which does the
   same plus classifying each object and assembling the record). CPU ns per output event
   (`time.thread_time_ns` around each request, rounds alternating, medians) and their ratio:
   what labkit adds to the SDK it measures.
4. The self-check's stamp-lateness estimate (`labkit.loopclock`): what `TimedSelector` adds
   to a ``select()`` that reports one readable pipe (over the default selector's), and the
   per-read `LatenessTracker.note` plus the per-event share of `lateness_ns` at the end.

Run: `make bench` (or `.venv/bin/python benchmarks/bench_recorder.py`). Not a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.providers.fake import FakeProvider, FakeSettings
from labkit.providers.openai import OpenAIChatParser
from labkit.wire.loopclock import LatenessTracker, TimedSelector
from labkit.wire.sse import SSEParser

N_EVENTS = 20_000
N_SDK_EVENTS = 2_000
SDK_ROUNDS = 11


def _stream() -> list[bytes]:
    chunks = []
    for i in range(N_EVENTS):
        obj = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": f" token{i}"}, "finish_reason": None}],
        }
        chunks.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    chunks.append(b"data: [DONE]\n\n")
    return chunks


def bench_labkit(chunks: list[bytes]) -> float:
    t0 = time.perf_counter_ns()
    sse = SSEParser()
    parser = OpenAIChatParser()
    for c in chunks:
        for ev in sse.feed(c, 0):
            parser.on_event(ev)
    return (time.perf_counter_ns() - t0) / len(chunks)


def bench_openai_sdk(chunks: list[bytes]) -> float:
    from openai._streaming import SSEDecoder

    t0 = time.perf_counter_ns()
    for sse in SSEDecoder().iter_bytes(iter(chunks)):
        if sse.data != "[DONE]":
            json.loads(sse.data)
    return (time.perf_counter_ns() - t0) / len(chunks)


async def bench_recorder() -> tuple[float, float]:
    settings = FakeSettings(
        id="fake",
        kind="fake",
        schedule={"first_token_ms": 0, "token_interval_ms": 0, "tokens": 2000},
    )
    provider = FakeProvider(settings)
    recorder = StreamRecorder()
    request = ChatRequest([{"role": "user", "content": "hi"}])
    parse, total = [], []
    for _ in range(5):
        rec = await recorder.record(provider, request, RecordContext("bench", "bench"))
        n = len(rec.client.event_offsets_ms)
        parse.append((rec.app.parse_cpu_ms or 0) * 1e6 / n)
        total.append((rec.client.e2e_ms or 0) * 1e6 / n)
    await provider.aclose()
    return statistics.median(parse), statistics.median(total)


def _sdk_stream() -> list[bytes]:
    """An OpenAI-compatible stream as llama.cpp and vLLM send it: one token per chunk, then
    the finish chunk, the usage chunk and `[DONE]`, one event per read."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = []
    for i in range(N_SDK_EVENTS):
        delta = {"content": f" token{i}"}
        events.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": N_SDK_EVENTS,
        "total_tokens": N_SDK_EVENTS + 9,
    }
    events.append({**head, "choices": [], "usage": usage})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _mock_client(chunks: list[bytes]) -> Any:
    """An httpx2 client whose every request is answered in-process with `chunks`, one read
    each (no sockets, no delays: all the CPU is the client's)."""
    import httpx2

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def answer(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return httpx2.AsyncClient(transport=httpx2.MockTransport(answer))


async def bench_sdk_paths() -> tuple[float, float, float, float]:
    """CPU ns per output event, bare openai SDK and labkit's SDK path, on the same in-process
    stream (medians over alternating rounds), labkit's `app.cpu_ms` per event, and the median
    of the rounds' labkit / bare ratios."""
    import openai

    from labkit.measurement.sdkpath import SDKRecorder
    from labkit.providers.openai_compatible import OpenAICompatibleProvider

    chunks = _sdk_stream()
    bare_client = openai.AsyncOpenAI(
        api_key="none",
        base_url="http://bench.test/v1",
        max_retries=0,
        http_client=_mock_client(chunks),
    )
    settings = OpenAICompatibleProvider.settings_model.model_validate(
        {
            "id": "bench",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": "http://bench.test/v1",
        }
    )
    provider = OpenAICompatibleProvider(settings)
    recorder = SDKRecorder(http_client_factory=lambda timeout: _mock_client(chunks))
    request = ChatRequest([{"role": "user", "content": "hi"}], client_path="sdk")
    ctx = RecordContext("bench", "bench")
    cpu = time.thread_time_ns

    async def bare() -> int:
        clock = time.perf_counter_ns
        stamps: list[int] = []
        stream = await bare_client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            t = clock()
            if chunk.choices and chunk.choices[0].delta.content:
                stamps.append(t)
        return len(stamps)

    async def labkit() -> tuple[int, float]:
        rec = await recorder.record(provider, request, ctx)
        assert rec.error is None, rec.error
        return len(rec.client.event_offsets_ms), rec.app.cpu_ms or 0.0

    await bare(), await labkit()  # warm up: imports, clients, pools
    bare_ns, labkit_ns, app_ns = [], [], []
    for i in range(SDK_ROUNDS):
        for leg in ("bare", "labkit") if i % 2 == 0 else ("labkit", "bare"):
            c0 = cpu()
            if leg == "bare":
                n = await bare()
                bare_ns.append((cpu() - c0) / n)
            else:
                n, app_ms = await labkit()
                labkit_ns.append((cpu() - c0) / n)
                app_ns.append(app_ms * 1e6 / n)
    await recorder.aclose()
    await bare_client.close()
    await provider.aclose()
    # Each round's two legs ran back to back: their ratio cancels the machine's drift.
    ratio = statistics.median(lab / bare for lab, bare in zip(labkit_ns, bare_ns, strict=True))
    return (
        statistics.median(bare_ns),
        statistics.median(labkit_ns),
        statistics.median(app_ns),
        ratio,
    )


def bench_select(selector: selectors.BaseSelector, n: int = 50_000) -> float:
    """ns per select() that reports one readable pipe."""
    r, w = os.pipe()
    os.write(w, b"x")
    selector.register(r, selectors.EVENT_READ)
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            selector.select(0)
        return (time.perf_counter_ns() - t0) / n
    finally:
        selector.unregister(r)
        os.close(r)
        os.close(w)


def bench_tracker(n: int = 100_000) -> float:
    """ns per read of `note` (a new report each read) plus `lateness_ns` per event."""
    sel = TimedSelector()
    tracker = LatenessTracker(sel, 5)
    queue = sel.reports[5]
    stamps = list(range(1_000_000, 1_000_000 + n))
    t0 = time.perf_counter_ns()
    for t in stamps:
        queue.append((t - 500, t - 100, False))
        sel.selects += 1
        tracker.note(t)
    tracker.lateness_ns(stamps)
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    chunks = _stream()
    bench_labkit(chunks), bench_openai_sdk(chunks)  # warm up
    ours = statistics.median(bench_labkit(chunks) for _ in range(5))
    sdk = statistics.median(bench_openai_sdk(chunks) for _ in range(5))
    print(f"parse, {N_EVENTS} events, one per read (median of 5):")
    print(f"  labkit SSE framing + chunk parser : {ours:8.0f} ns/event")
    print(f"  openai SDK SSEDecoder + json.loads: {sdk:8.0f} ns/event")
    print(f"  ratio labkit / SDK                : {ours / sdk:8.2f}")
    parse, total = asyncio.run(bench_recorder())
    print("recorder, 2,000-token in-process stream with no delays (median of 5):")
    print(f"  app.parse_cpu_ms per event        : {parse:8.0f} ns/event")
    print(f"  whole read (e2e) per event        : {total:8.0f} ns/event")
    bare, labkit, app, ratio = asyncio.run(bench_sdk_paths())
    print(f"SDK path, {N_SDK_EVENTS}-token in-process stream, CPU (median of {SDK_ROUNDS}):")
    print(f"  bare openai SDK                   : {bare:8.0f} ns/event")
    print(f"  labkit SDK path (SDKRecorder)     : {labkit:8.0f} ns/event")
    print(f"  its app.cpu_ms per event          : {app:8.0f} ns/event")
    print(f"  ratio labkit SDK path / bare SDK  : {ratio:8.3f} (median of the rounds' ratios)")
    plain = statistics.median(bench_select(selectors.DefaultSelector()) for _ in range(5))
    timed = statistics.median(bench_select(TimedSelector()) for _ in range(5))
    tracker = statistics.median(bench_tracker() for _ in range(5))
    print("self-check (labkit.loopclock), median of 5:")
    print(f"  select() reporting one socket     : {plain:8.0f} ns default, {timed:.0f} ns timed")
    print(f"  added per select()                : {timed - plain:8.0f} ns")
    print(f"  tracker per read (note + estimate): {tracker:8.0f} ns")


if __name__ == "__main__":
    main()
