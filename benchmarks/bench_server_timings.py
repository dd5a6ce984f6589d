"""The per-event cost of reading server timings, measured (CPU time, best of 15).

1. llama.cpp with `timings_per_token`: cumulative `timings` on every chunk. Per token chunk
   the parser keeps the object by reference and reads it once, on the next chunk without
   output or at the end (`settle`); reading it on every chunk, as labkit did before, is
   emulated by calling the reader after each event. Both are shown beside the same chunk
   without `timings`.
2. The detection of server timing shapes (`server: auto`, one dict lookup per chunk key)
   against the plain OpenAI parser, on a chunk that carries none.

Run: `.venv/bin/python benchmarks/bench_server_timings.py`. Not a test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from labkit.providers.llamacpp import LlamaCppParser
from labkit.providers.openai import OpenAIChatParser
from labkit.wire.sse import SSEEvent

N_EVENTS = 20_000
TIMINGS = {
    "cache_n": 4,
    "prompt_n": 18,
    "prompt_ms": 41.2,
    "prompt_per_token_ms": 2.29,
    "prompt_per_second": 436.9,
    "predicted_n": 2,
    "predicted_ms": 6.0,
    "predicted_per_token_ms": 6.57,
    "predicted_per_second": 152.3,
}
PLAIN = {
    "choices": [{"finish_reason": None, "index": 0, "delta": {"content": "b"}}],
    "created": 1764581500,
    "id": "chatcmpl-llama3",
    "model": "m",
    "object": "chat.completion.chunk",
}
WITH_TIMINGS = SSEEvent(None, json.dumps({**PLAIN, "timings": TIMINGS}), 0)
WITHOUT = SSEEvent(None, json.dumps(PLAIN), 0)


def us_per_event(run: Callable[[], None]) -> float:
    """Best of 15 runs of `N_EVENTS` events, in µs of CPU time per event."""
    best = float("inf")
    for _ in range(15):
        t = time.process_time_ns()
        run()
        best = min(best, (time.process_time_ns() - t) / N_EVENTS / 1000)
    return best


def main() -> None:
    """Print the costs."""

    def events(parser: OpenAIChatParser, event: SSEEvent, eager: bool = False) -> None:
        for _ in range(N_EVENTS):
            parser.on_event(event)
            if eager:
                parser._read_timings(TIMINGS)

    none = us_per_event(lambda: events(LlamaCppParser(), WITHOUT))
    deferred = us_per_event(lambda: events(LlamaCppParser(), WITH_TIMINGS))
    eager = us_per_event(lambda: events(LlamaCppParser(), WITH_TIMINGS, eager=True))
    print(f"llama.cpp chunk without timings: {none:.2f} µs/event")
    print(f"  + per-token timings, deferred (now):    +{deferred - none:.2f} µs/event")
    print(f"  + per-token timings, read every chunk:  +{eager - none:.2f} µs/event")
    plain = us_per_event(lambda: events(OpenAIChatParser("openai"), WITHOUT))
    auto = us_per_event(lambda: events(OpenAIChatParser("auto"), WITHOUT))
    print(f"OpenAI chunk, no shape detection: {plain:.2f} µs/event; server: auto {auto:.2f}")


if __name__ == "__main__":
    main()
