"""Tracing's cost, measured: per-event cost of the recorder with trace context on and off,
side by side with a checkout from before tracing, and the cost of a record's span.

Each variant reads the same 2,000-token stream from the in-process fake transport with no
delays (every microsecond is labkit's own) `ROUNDS` times in a child process of its own, the
variants alternating `PASSES` times: `before` (a checkout without tracing, given with
`--before DIR`), `off` (this tree, `tracing.headers: false`: ids made, nothing sent) and
`on` (this tree, `traceparent` and `x-request-id` sent). Printed per variant: medians of
`app.parse_cpu_ms` per event (the per-event decoding), of the end-to-end read per event, of
`app.cpu_ms` per event and of `app.prepare_ms` (before t_start, where the ids are made).
Then the span cost: `record_spans` over those records, per record (built after the run's
requests ended, off the hot path).

Run: `.venv/bin/python benchmarks/bench_tracing.py [--before DIR]`. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROUNDS = 9
PASSES = 6
TOKENS = 2000
HERE = Path(__file__).resolve().parent.parent


async def _measure(variant: str) -> dict[str, list[float]]:
    from labkit.measurement.recorder import RecordContext, StreamRecorder
    from labkit.providers.base import ChatRequest
    from labkit.providers.fake import FakeProvider, FakeSettings

    settings = FakeSettings(
        id="fake",
        kind="fake",
        schedule={"first_token_ms": 0, "token_interval_ms": 0, "tokens": TOKENS},
    )
    provider = FakeProvider(settings)
    recorder = StreamRecorder()
    request = ChatRequest([{"role": "user", "content": "hi"}])
    out: dict[str, list[float]] = {"parse": [], "e2e": [], "cpu": [], "prepare": []}
    records = []
    for i in range(ROUNDS + 1):
        ctx = RecordContext("bench", "bench")
        if variant != "before":
            from labkit.tracing import request_trace, trace_headers

            record_id = f"r{i}"
            trace = request_trace(
                "bench", "fake", "bench", {}, record_id, propagate=variant == "on"
            )
            ctx = RecordContext(
                "bench",
                "bench",
                record_id=record_id,
                trace=trace,
                trace_headers=trace_headers(trace),
            )
        rec = await recorder.record(provider, request, ctx)
        if i == 0:
            continue  # the first request pays the connection and lazy imports
        n = len(rec.client.event_offsets_ms)
        out["parse"].append((rec.app.parse_cpu_ms or 0) * 1e6 / n)
        out["e2e"].append((rec.client.e2e_ms or 0) * 1e6 / n)
        out["cpu"].append((rec.app.cpu_ms or 0) * 1e6 / n)
        out["prepare"].append((rec.app.prepare_ms or 0) * 1e3)
        records.append(rec)
    await provider.aclose()
    if variant == "on":
        from labkit.tracing.spans import record_spans

        many = [
            r.model_copy(update={"record_id": f"{r.record_id}-{k}"})
            for k in range(50)
            for r in records
        ]
        t0 = time.perf_counter_ns()
        spans = record_spans("bench", many)
        out["span_us"] = [(time.perf_counter_ns() - t0) / 1e3 / len(many)]
        out["spans"] = [float(len(spans))]
    return out


def _child(variant: str, tree: Path) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        "import asyncio, json, sys; sys.path.insert(0, sys.argv[1]); "
        "from bench_tracing import _measure; "
        "print(json.dumps(asyncio.run(_measure(sys.argv[2]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(HERE / "benchmarks"), variant],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout from before tracing")
    args = parser.parse_args()
    variants: list[tuple[str, Path]] = [("off", HERE), ("on", HERE)]
    if args.before is not None:
        variants.insert(0, ("before", args.before.resolve()))
    pooled: dict[str, dict[str, list[float]]] = {v: {} for v, _ in variants}
    for k in range(PASSES):
        # A different variant goes first each pass: a loaded host's drift spreads evenly.
        for variant, tree in variants[k % len(variants) :] + variants[: k % len(variants)]:
            for key, values in _child(variant, tree).items():
                pooled[variant].setdefault(key, []).extend(values)
    print(f"{TOKENS}-token stream, {ROUNDS} requests x {PASSES} passes per variant (medians)")
    heads = ("parse ns/event", "e2e ns/event", "cpu ns/event", "prepare us")
    print(f"{'variant':8} " + " ".join(f"{h:>15}" for h in heads) + "   (min over requests)")
    for variant, _ in variants:
        m: dict[str, Any] = {k: statistics.median(v) for k, v in pooled[variant].items()}
        low = {k: min(v) for k, v in pooled[variant].items()}
        cells = [f"{m[k]:15.0f}" for k in ("parse", "e2e", "cpu")] + [f"{m['prepare']:15.1f}"]
        mins = "/".join(f"{low[k]:.0f}" for k in ("parse", "e2e", "cpu"))
        print(f"{variant:8} " + " ".join(cells) + f"   ({mins})")
    on = pooled["on"]
    print(
        f"span per record (record_spans, after the run's requests): "
        f"{statistics.median(on['span_us']):.1f} us ({on['spans'][0]:.0f} spans)"
    )


if __name__ == "__main__":
    main()
