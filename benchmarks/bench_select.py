"""The timed select()'s own cost per call: the C selector, the Python reference and the bare
epoll selector under them, side by side in one process (issue 47).

32 registered socketpairs, k of them readable (k = 0, 1, 4, 16); ``select(0)`` (the loop
had callbacks ready), ``select(1.0)`` that finds bytes at once (the counters are read
before it: it may block), and two that block: one ended by its 1 ms timeout (nothing
ready) and one woken by another thread's write. Each call is timed alone (the median of
``perf_counter_ns`` brackets, the bracket's own cost taken off; the blocking ones by the
thread's CPU time): warm (calls back to back) and cold-ish (between calls a callback that
copies 8 MiB and encodes and decodes some JSON, evicting the caches as a loaded level's
other streams do). Then the parts: a clock read, the counters' ``pread`` (Python's
``os.pread`` and the C reader), their parse (`loopclock._woken`), and the rest, the
Python select's per-socket bookkeeping. Prints µs a call and each timed select ÷ epoll.

    .venv/bin/python benchmarks/bench_select.py [--calls 20000] [--cold-calls 1500]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from labkit.wire import loopclock

REGISTERED = 32
_JUNK = {"choices": [{"delta": {"content": "tok" * 20}, "index": i} for i in range(40)]}
_SPACE = bytearray(8 * 1024 * 1024)


def thrash() -> None:
    """A loaded level's other work between two selects, roughly: caches evicted."""
    bytes(_SPACE)
    json.loads(json.dumps(_JUNK))


def _bracket_ns(samples: int = 20000) -> float:
    clock = time.perf_counter_ns
    out = []
    for _ in range(samples):
        t0 = clock()
        out.append(clock() - t0)
    return statistics.median(out)


def per_call_us(
    call: Callable[[], Any], calls: int, cold: bool, bracket: float, cpu: bool = False
) -> float:
    """Median µs of one `call` (thread CPU time where `cpu`), after `thrash` where `cold`."""
    clock = time.thread_time_ns if cpu else time.perf_counter_ns
    out = []
    for _ in range(calls):
        if cold:
            thrash()
        t0 = clock()
        call()
        out.append(clock() - t0)
    return (statistics.median(out) - (0 if cpu else bracket)) / 1000


def _python_counters() -> Callable[[], bytes] | None:
    """The counters' reader the Python selector read before (os.pread through a partial)."""
    try:
        fd = os.open(loopclock.SCHEDSTAT_PATH, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    return loopclock._Schedstat(os.pread, fd, 64, 0)


def _c_counters() -> Callable[[], bytes] | None:
    module = loopclock.compiled_module()[0]
    if module is None:
        return None
    try:
        fd = os.open(loopclock.SCHEDSTAT_PATH, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    reader: Callable[[], bytes] = module.Schedstat(fd)
    return reader


def selectors_under_test() -> dict[str, Callable[[], Any]]:
    """Name -> a factory of a fresh selector."""
    out: dict[str, Callable[[], Any]] = {"epoll": selectors.EpollSelector}
    out["python"] = lambda: loopclock.PyTimedSelector(schedstat=_python_counters())
    c_class = loopclock.c_timed_selector()
    if c_class is not None:
        out["c"] = lambda: c_class(schedstat=_c_counters())
    return out


def main() -> None:
    """Print the table and the parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="warm calls per case")
    parser.add_argument("--cold-calls", type=int, default=1500, help="cold calls per case")
    args = parser.parse_args()
    pairs = [socket.socketpair() for _ in range(REGISTERED)]
    bracket = _bracket_ns()
    print(f"load average {os.getloadavg()[0]:.2f} (a shared host); bracket {bracket:.0f} ns")
    makers = selectors_under_test()
    results: dict[tuple[str, str], float] = {}
    cases: list[str] = []
    try:
        built = {name: make() for name, make in makers.items()}
        for sel in built.values():
            for a, _ in pairs:
                sel.register(a, selectors.EVENT_READ)
        for k in (0, 1, 4, 16):
            for a, _ in pairs:  # drain, then make k readable
                a.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    a.recv(65536)
            for _, b in pairs[:k]:
                b.send(b"x")
            timeouts = [0.0] if k == 0 else [0.0, 1.0]
            for timeout in timeouts:
                for temperature in ("warm", "cold"):
                    case = f"k={k:<2} select({timeout:g}) {temperature}"
                    if case not in cases:
                        cases.append(case)
                    for name, sel in built.items():
                        results[(case, name)] = per_call_us(
                            lambda sel=sel, timeout=timeout: sel.select(timeout),
                            args.calls if temperature == "warm" else args.cold_calls,
                            temperature == "cold",
                            bracket,
                        )
        for a, _ in pairs:
            with contextlib.suppress(BlockingIOError):
                a.recv(65536)
        case = "blocked 1 ms, timed out (CPU)"
        cases.append(case)
        for name, sel in built.items():
            results[(case, name)] = per_call_us(
                lambda sel=sel: sel.select(0.001), 400, False, bracket, cpu=True
            )
        case = "blocked, woken by a write (CPU)"
        cases.append(case)
        for name, sel in built.items():
            results[(case, name)] = _woken_us(sel, pairs[0])
        for sel in built.values():
            sel.close()
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    names = list(makers)
    width = max(len(c) for c in cases)
    header = "".join(f"{n:>10}" for n in names)
    ratios = "".join(f"{n + '/epoll':>14}" for n in names if n != "epoll")
    print(f"\n{'µs a call':<{width}}{header}{ratios}")
    for case in cases:
        row = "".join(f"{results[(case, n)]:>10.2f}" for n in names)
        row += "".join(
            f"{results[(case, n)] / max(results[(case, 'epoll')], 1e-9):>14.2f}"
            for n in names
            if n != "epoll"
        )
        print(f"{case:<{width}}{row}")
    _parts(bracket, args.calls, args.cold_calls)


def _woken_us(sel: Any, pair: tuple[socket.socket, socket.socket]) -> float:
    """Median thread CPU µs of a select() that blocks until another thread writes."""
    a, b = pair
    out = []
    go = threading.Event()
    stop = False

    def writer() -> None:
        while not stop:
            if go.wait(0.1):
                go.clear()
                time.sleep(0.0003)
                b.send(b"x")

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            go.set()
            t0 = time.thread_time_ns()
            sel.select(1.0)
            out.append(time.thread_time_ns() - t0)
            a.recv(65536)
    finally:
        stop = True
        thread.join()
    return statistics.median(out) / 1000


def _parts(bracket: float, calls: int, cold_calls: int) -> None:
    """Where a timed select's µs go, part by part (warm / cold)."""
    print("\nparts of a timed select(), µs a call (warm / cold)")
    python_reader = _python_counters()
    c_reader = _c_counters()
    line = python_reader() if python_reader is not None else b"1 2 3\n"
    parts: dict[str, Callable[[], Any]] = {"clock read (perf_counter_ns)": time.perf_counter_ns}
    if python_reader is not None:
        parts["counters, os.pread (Python selector)"] = python_reader
    if c_reader is not None:
        parts["counters, C Schedstat() call (pread)"] = c_reader
    parts["counters' parse (_woken, Python)"] = lambda: loopclock._woken(0, 10**6, line, line)
    for name, call in parts.items():
        warm = per_call_us(call, calls, False, bracket)
        cold = per_call_us(call, cold_calls, True, bracket)
        print(f"  {name:<42}{warm:>8.2f} /{cold:>8.2f}")


if __name__ == "__main__":
    main()
