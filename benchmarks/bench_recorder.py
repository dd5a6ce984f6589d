"""The hot path, measured: per-event cost of labkit's stream reading, side by side.

1. Parsing: the same Chat Completions byte stream (one chunk per read, as servers send it)
   through labkit's SSE framing + chunk parser, and through the official openai SDK's SSE
   decoder followed by `json.loads` (what any client must do at least). Prints ns/event for
   both and their ratio.
2. The whole recorder: a 2,000-token stream from the in-process fake transport with no
   delays, so every microsecond is labkit's own: ns/event of `app.parse_cpu_ms` and of the
   end-to-end read.
3. The self-check's stamp-lateness estimate (`labkit.loopclock`): what `TimedSelector` adds
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

from labkit.loopclock import LatenessTracker, TimedSelector
from labkit.providers.base import ChatRequest
from labkit.providers.fake import FakeProvider, FakeSettings
from labkit.providers.openai import OpenAIChatParser
from labkit.recorder import RecordContext, StreamRecorder
from labkit.sse import SSEParser

N_EVENTS = 20_000


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
    plain = statistics.median(bench_select(selectors.DefaultSelector()) for _ in range(5))
    timed = statistics.median(bench_select(TimedSelector()) for _ in range(5))
    tracker = statistics.median(bench_tracker() for _ in range(5))
    print("self-check (labkit.loopclock), median of 5:")
    print(f"  select() reporting one socket     : {plain:8.0f} ns default, {timed:.0f} ns timed")
    print(f"  added per select()                : {timed - plain:8.0f} ns")
    print(f"  tracker per read (note + estimate): {tracker:8.0f} ns")


if __name__ == "__main__":
    main()
