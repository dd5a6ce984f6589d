"""labkit's per-request work, stage by stage: what a request costs once, beside its tokens.

Method. A real ``load`` run of labkit (`bench_load.runner_config`, ``workers: 1``, so the
runner's own process reads the streams) against the truth server (its own process), at
`--streams` concurrent streams of `--tokens` tokens each. Each stage a request pays once is
wrapped, in this process, by a timer of the thread's CPU clock (`time.thread_time_ns`,
inclusive of what it calls): building the request (its parameters, body and head, the
lean transport's send buffer), the response head's parse, building the record (client
timings, the stamp self-check, the record's assembly) and writing it (its JSON line and the
write). Printed per stage: calls per request and the median and mean µs per call, and the
mean µs per request ÷ ``--tokens`` (each stage's share of a token's CPU). The timer's own
cost (about 0.3 µs a call) is inside each figure.

Run: ``.venv/bin/python benchmarks/bench_request.py`` (``--streams 32 --requests 640
--tokens 100``; ``--labkit-src TREE``: that tree's labkit, for a before and after). A
benchmark, not a test: on a shared host the µs move with its load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_load as bl  # this tree's labkit and scripted_server first on sys.path
from scripted_server import ScriptedServer, raise_open_files_limit

#: (stage, module, attribute path): what is timed. Nested stages are inclusive.
STAGES: list[tuple[str, str, str]] = [
    ("request: params", "labkit.providers.base", "Provider.effective_params"),
    (
        "request: wire params",
        "labkit.providers.openai_compatible",
        "OpenAICompatibleProvider.wire_params",
    ),
    ("request: local count", "labkit.providers.openai", "OpenAIProvider.count_input_locally"),
    ("request: build", "labkit.providers.openai", "OpenAIProvider.build_request"),
    ("request: trace headers", "labkit.measurement.recorder", "add_headers"),
    ("request: send buffer", "labkit.wire.connections", "Connections.prepare_send"),
    ("head parse (set-up)", "labkit.wire.lean.http11", "HeadParser.__init__"),
    ("head parse (feed)", "labkit.wire.lean.http11", "HeadParser.feed"),
    ("body: chunked, general way", "labkit.wire.lean.http11", "_Chunked._decode"),
    ("record: all", "labkit.measurement.recorder", "BaseRecorder._finish"),
    ("record: client timings", "labkit.measurement.recorder", "derive_client_timings"),
    ("record: self-check", "labkit.measurement.recorder", "stamp_self_check"),
    ("record: assembly", "labkit.measurement.recorder", "assemble_record"),
    ("record context", "labkit.runner.executor", "request_trace"),
    ("write: all", "labkit.runner.results", "RunFolder.append"),
    ("write: JSON line", "labkit.records", "RequestRecord.to_json_line"),
    ("write: scrub", "labkit.runner.results", "scrub_json"),
]


def _wrap(fn: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    clock = time.thread_time_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            calls.append(clock() - t)

    return timed


def _install() -> dict[str, list[int]]:
    import importlib

    found: dict[str, list[int]] = {}
    for stage, module_name, path in STAGES:
        module = importlib.import_module(module_name)
        owner: Any = module
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            print(f"  ({stage}: {module_name}.{path} not found, not timed)")
            continue
        calls: list[int] = []
        found[stage] = calls
        setattr(owner, name, _wrap(getattr(owner, name), calls))
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the level once with every stage timed; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--requests", type=int, default=640)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--labkit-src", help="another tree's labkit (read by bench_load)")
    args = ap.parse_args(argv)
    raise_open_files_limit(4096)
    from labkit.config import parse_config
    from labkit.runner import RunOptions, prepare_run

    timed = _install()
    with ScriptedServer(
        ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
    ) as server:
        config = parse_config(bl.runner_config(server.base_url, args.streams, args.requests, 1))
        with tempfile.TemporaryDirectory() as out:
            runner = prepare_run(config, RunOptions(out_dir=Path(out)))
            cpu0 = time.process_time_ns()
            result = bl.run_like_labkit(runner.run())
            cpu_s = (time.process_time_ns() - cpu0) / 1e9
    n = len(result.records)
    print(
        f"{args.streams} streams, {n} records of {args.tokens} tokens "
        f"(the run's whole CPU {cpu_s:.2f} s, {cpu_s * 1e6 / max(1, n * args.tokens):.1f} "
        f"µs/token with start-up and figures)"
    )
    print(
        f"{'stage':<26} {'calls/req':>9} {'p50 µs':>8} {'mean µs':>8} {'µs/req':>8} {'µs/token':>8}"
    )
    for stage, calls in timed.items():
        if not calls:
            continue
        per_req = sum(calls) / 1e3 / max(1, n)
        print(
            f"{stage:<26} {len(calls) / max(1, n):>9.2f} {statistics.median(calls) / 1e3:>8.1f} "
            f"{statistics.fmean(calls) / 1e3:>8.1f} {per_req:>8.1f} {per_req / args.tokens:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
