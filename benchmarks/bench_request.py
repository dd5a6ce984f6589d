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

What no stage names (task steps, the turns, futures, httpx's objects, the collector) shows
in the second table: the level's CPU by event-loop callback and task step, in the level
only (`Steps`, bench_cpu's `_STEPPED` in this process: thread CPU per callback, a task's
step by the coroutines it resumed and suspended in), per request; the reader callbacks
(the per-read path) apart from the rest, which is a request's own work; and the cyclic
collector's young collections a request and their CPU (`gc.callbacks`). ``--profile-step
QUALNAME`` runs the steps that resume in one coroutine under cProfile (inflated) and prints
what they called.

Run: ``.venv/bin/python benchmarks/bench_request.py`` (``--streams 32 --requests 640
--tokens 100``; ``--labkit-src TREE``: that tree's labkit, for a before and after). A
benchmark, not a test: on a shared host the µs move with its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_load as bl  # this tree's labkit and scripted_server first on sys.path
from scripted_server import ScriptedServer, raise_open_files_limit

#: (stage, module, attribute path): what is timed. Nested stages are inclusive; a stage
#: named twice is timed at the first of its places that the tree under test has.
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
    ("record: self-check", "labkit.measurement.recorder", "self_check_fields"),
    ("record: self-check", "labkit.measurement.recorder", "stamp_self_check"),  # before
    ("record: assembly", "labkit.measurement.recorder", "assemble_record"),
    ("record context", "labkit.runner.executor", "request_trace"),
    ("write: all", "labkit.runner.results", "RunFolder.append"),
    ("write: JSON line", "labkit.records", "RequestRecord.to_json_bytes"),
    ("write: JSON line", "labkit.records", "RequestRecord.to_json_line"),  # before
    ("write: scrub", "labkit.runner.results", "scrub_json"),
    ("plan: the request", "labkit.experiments.load", "LoadExperiment.request"),
    ("measure: context", "labkit.runner.executor", "RecordContext"),
    ("httpx: Request()", "httpx", "Request.__init__"),
    ("httpx: Response()", "httpx", "Response.__init__"),
    ("httpx: release", "labkit.measurement.recorder", "release_response"),
    ("runner: keep", "labkit.runner.run", "_Level.keep"),
]

#: Reader callbacks: the per-read path (another part's), left out of the request's steps.
READ_CALLBACKS = ("_on_readable", "_read_ready", "deliver", "CommonPush", "callback Reader")


def _wrap(fn: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    clock = time.thread_time_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            calls.append(clock() - t)

    return timed


class Steps:
    """Each event-loop callback's thread CPU while a level runs, summed by what it was
    (bench_cpu's `_STEPPED`, in this process): a task's step by the coroutines it resumed
    and suspended in (innermost awaiting frame; "done" when it ended), any other callback
    by its name, the loop's own time around them; and each cyclic collection's CPU
    (`gc.callbacks`), by generation. Outside a level nothing is counted, nor the step in
    which the level ends (the gather's return and the collection after the level: once a
    level, not a request's)."""

    def __init__(self) -> None:
        self.acc: dict[str, list[int]] = {}
        self.gc: dict[int, list[int]] = {}
        self.on = False
        self._gc_t = 0
        #: `--profile-step`: the task steps starting in this coroutine, under cProfile.
        self.profile_from: str | None = None
        self.profiler: Any = None

    @staticmethod
    def _where(task: Any) -> str:
        coro, name = task.get_coro(), None
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is None:
                break
            name = frame.f_code.co_qualname
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        return name or "?"

    def _add(self, key: str, ns: int) -> None:
        got = self.acc.get(key)
        if got is None:
            got = self.acc[key] = [0, 0]
        got[0] += ns
        got[1] += 1

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._gc_t = time.thread_time_ns()
            return
        got = self.gc.setdefault(info["generation"], [0, 0])
        got[0] += time.thread_time_ns() - self._gc_t
        got[1] += 1

    def install(self) -> None:
        """Wrap the loop's handles and iterations, the level's collector policy, and add
        the collector callback."""
        import asyncio
        import contextlib
        import gc
        from asyncio import base_events, events

        import labkit.runner.run as run_module

        clock, where, add = time.thread_time_ns, self._where, self._add
        run_handle, run_once = events.Handle._run, base_events.BaseEventLoop._run_once
        steps = self

        def timed_handle(handle: Any) -> None:
            if not steps.on:
                run_handle(handle)
                return
            task = getattr(handle._callback, "__self__", None)
            if isinstance(task, asyncio.Task):
                start = where(task)
                profiled = start == steps.profile_from
                if profiled:
                    steps.profiler.enable()
                t = clock()
                run_handle(handle)
                ns = clock() - t
                if profiled:
                    steps.profiler.disable()
                if not steps.on:  # the level ended in this step (its end's collection)
                    return
                add("step " + start + " -> " + ("done" if task.done() else where(task)), ns)
            else:
                # Named before it runs (a reader it replaces is cancelled: its callback
                # then None); a C callback object by its type's name.
                cb = handle._callback
                name = getattr(cb, "__qualname__", type(cb).__qualname__)
                t = clock()
                run_handle(handle)
                ns = clock() - t
                add("callback " + name, ns)
            add("(loop callbacks)", ns)

        def timed_once(loop: Any) -> None:
            if not steps.on:
                run_once(loop)
                return
            t = clock()
            run_once(loop)
            add("(loop iterations)", clock() - t)

        events.Handle._run = timed_handle  # type: ignore[method-assign]
        base_events.BaseEventLoop._run_once = timed_once  # type: ignore[attr-defined]
        level_gc = run_module.level_gc

        @contextlib.contextmanager
        def counted_level() -> Any:
            with level_gc():
                steps.on = True
                try:
                    yield
                finally:
                    steps.on = False

        run_module.level_gc = counted_level  # type: ignore[assignment]
        gc.callbacks.append(self._on_gc)
        if self.profile_from is not None:
            import cProfile

            self.profiler = cProfile.Profile()

    def print(self, n: int, tokens: int) -> None:
        """The table: per request µs of each step, largest first (≥ 1 µs a request)."""
        print(f"\nby event-loop callback, in the level ({n} requests; thread CPU):")
        print(f"{'callback or task step':<72} {'calls/req':>9} {'µs/call':>8} {'µs/req':>8}")
        reads = sum(
            ns for key, (ns, _) in self.acc.items() if any(r in key for r in READ_CALLBACKS)
        )
        rows = sorted(self.acc.items(), key=lambda kv: -kv[1][0])
        for key, (ns, calls) in rows:
            per_req = ns / 1e3 / max(1, n)
            if per_req < 1.0:
                continue
            print(
                f"{key[:72]:<72} {calls / max(1, n):>9.2f} {ns / 1e3 / calls:>8.1f} {per_req:>8.1f}"
            )
        loop_ns = self.acc.get("(loop iterations)", [0, 0])[0]
        cb_ns = self.acc.get("(loop callbacks)", [0, 0])[0]
        per_request = (cb_ns - reads) / 1e3 / max(1, n)
        print(
            f"loop iterations {loop_ns / 1e3 / max(1, n):.1f} µs/req, of which callbacks "
            f"{cb_ns / 1e3 / max(1, n):.1f}: reader callbacks {reads / 1e3 / max(1, n):.1f}, "
            f"the rest (a request's own steps) {per_request:.1f} µs/req "
            f"({per_request / tokens:.2f} µs/token)"
        )
        for gen, (ns, calls) in sorted(self.gc.items()):
            print(
                f"gc generation {gen}: {calls / max(1, n):.3f} collections/req, "
                f"{ns / 1e3 / max(1, calls):.0f} µs each, {ns / 1e3 / max(1, n):.1f} µs/req"
            )


def _install() -> dict[str, list[int]]:
    import importlib

    found: dict[str, list[int]] = {}
    for i, (stage, module_name, path) in enumerate(STAGES):
        if stage in found:
            continue
        module = importlib.import_module(module_name)
        owner: Any = module
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            if not any(later == stage for later, _, _ in STAGES[i + 1 :]):
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
    ap.add_argument(
        "--profile-step",
        metavar="QUALNAME",
        help="profile (cProfile) the level's task steps that start in this coroutine, "
        "e.g. Connection.push; prints the top functions by cumulative time",
    )
    ap.add_argument(
        "--profile-sort",
        default="cumulative",
        help="--profile-step's order (pstats: cumulative, tottime, ncalls, ...)",
    )
    ap.add_argument("--profile-lines", type=int, default=40, help="--profile-step's rows")
    args = ap.parse_args(argv)
    from labkit.wire.readpath import IMPLEMENTATION

    if args.labkit_src and IMPLEMENTATION != "c" and "LABKIT_BENCH_REBUILT" not in os.environ:
        # An archived tree has no build of its C read path: build it, and start again (the
        # fallback's per-read cost would be counted against the tree).
        bl._build_read_path(bl.LABKIT_SRC)
        os.environ["LABKIT_BENCH_REBUILT"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    raise_open_files_limit(4096)
    from labkit.config import parse_config
    from labkit.runner import RunOptions, prepare_run

    timed = _install()
    steps = Steps()
    steps.profile_from = args.profile_step
    steps.install()
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
        f"{args.streams} streams, {n} records of {args.tokens} tokens, read path "
        f"{IMPLEMENTATION} "
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
    steps.print(n, args.tokens)
    if steps.profiler is not None:
        import pstats

        print(
            f"\nsteps from {args.profile_step}, under cProfile (inflated), by {args.profile_sort}:"
        )
        stats = pstats.Stats(steps.profiler).sort_stats(args.profile_sort)
        stats.print_stats(args.profile_lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
