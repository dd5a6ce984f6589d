"""What labkit's event loop alone adds to the floor: the floor's client on each loop, side by side.

Method. `bench_load.raw_leg` (bench_cpu's floor: a bare asyncio protocol client, no HTTP
library, JSON or record; a regex finds each event's text) reads the same replies from the
truth server (`scripted_server.py`, its own process) at ``--streams`` streams, once on each
loop per round, the order reversed every other round so a shared host's drift hits all:

- ``asyncio``: asyncio's own selector loop on the default (epoll) selector: the floor itself;
- ``labkit``: the loop labkit runs (`loopclock.new_event_loop`: the timed select() in C
  where built, reading the thread's scheduler counters);
- ``labkit, no counters``: the same timed select() without the counters (what they cost);
- ``labkit, Python select``: the Python reference of the timed select() (`PyTimedSelector`).

Printed: each loop's CPU per token (the process's user + system time over the run, over the
events read), and its ratio to ``asyncio`` measured in the same rounds: the part of
labkit ÷ floor (`bench_cpu.py`) that is the loop and not labkit's per-read or per-request
work. A benchmark, not a test: on a shared host the µs move with its load, so only ratios
from one run compare.

    .venv/bin/python benchmarks/bench_loop.py [--streams 32] [--requests 1000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import selectors
import sys
from collections.abc import Callable

import bench_load as bl  # this tree's labkit and scripted_server first on sys.path
from scripted_server import ScriptedServer, raise_open_files_limit

from labkit.wire import loopclock


def _loops() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loops compared, by name: a factory each (called in the thread that runs it)."""

    def without_counters() -> asyncio.AbstractEventLoop:
        return loopclock._Loop(loopclock.TimedSelector(schedstat=None))

    def python_select() -> asyncio.AbstractEventLoop:
        selector = loopclock.PyTimedSelector(schedstat=loopclock.thread_schedstat())
        return loopclock._Loop(selector)

    return {
        "asyncio": lambda: asyncio.SelectorEventLoop(selectors.DefaultSelector()),
        "labkit": loopclock.new_event_loop,
        "labkit, no counters": without_counters,
        "labkit, Python select": python_select,
    }


def floor_on(
    factory: Callable[[], asyncio.AbstractEventLoop], url: str, streams: int, requests: int
) -> tuple[float, int]:
    """One run of the floor's client on loops from `factory`: its CPU (s) and events read."""
    got = bl.raw_leg(url, streams, requests, loop_factory=factory)
    return got.cpu_s, sum(len(r.stamps_ns) for r in got.streams)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--requests", type=int, default=1000, help="requests per run")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    args = ap.parse_args(argv)
    raise_open_files_limit(4096)
    loops = _loops()
    if loopclock.SELECT_IMPLEMENTATION != "c":
        print("labkit's timed select() runs in Python here (LABKIT_READPATH or no C build)")
    totals = {name: [0.0, 0] for name in loops}
    with ScriptedServer(
        ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
    ) as server:
        url = server.url(interval_ms=args.interval_ms, tokens=args.tokens)
        floor_on(loops["asyncio"], url, args.streams, max(args.streams, args.requests // 2))
        server.stamps()  # a process's first run pays its page faults: not counted
        for round_ in range(args.rounds):
            names = list(loops) if round_ % 2 == 0 else list(reversed(loops))
            line = []
            for name in names:
                cpu_s, events = floor_on(loops[name], url, args.streams, args.requests)
                server.stamps()
                totals[name][0] += cpu_s
                totals[name][1] += events
                line.append(f"{name} {cpu_s * 1e6 / max(1, events):.2f}")
            print(f"round {round_ + 1}: " + "; ".join(line) + " µs/token", flush=True)
    base_cpu, base_events = totals["asyncio"]
    base = base_cpu * 1e6 / max(1, base_events)
    print(f"\n{args.streams} streams, {args.rounds} rounds of {args.requests} requests:")
    print(f"{'loop':<24} {'µs/token':>9} {'÷ asyncio':>10}")
    for name, (cpu_s, events) in totals.items():
        per_token = cpu_s * 1e6 / max(1, events)
        print(f"{name:<24} {per_token:>9.2f} {per_token / base:>9.2f}x")


if __name__ == "__main__":
    sys.exit(main())
