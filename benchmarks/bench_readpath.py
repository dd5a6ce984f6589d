"""The C read path against its Python twins, side by side, in one run of this tree.

Which C function earns its place: each one's cost against its Python twin, and the whole
in-loop CPU per token with and without the C path, beside an A/A comparison (the C path
against itself) that says how large a difference the run's noise makes.

- Micro: each C function of `labkit/wire/_readpath.c` and its Python twin on realistic
  inputs, in this process, interleaved: per round the C function, its twin and the C
  function again (the A/A) take turns in a rotating order, each timing `--calls` calls;
  the figure is the median over `--rounds` rounds, in µs per call. `recv_stamped`: one
  kernel-stamped read of one chat event off a loopback TCP socket
  (`tcp.Connection._on_readable` with ``RECV_STAMPED`` and without it; only the call is
  timed, the send before it is not). `whole_data_events`: a read of one chat event (about
  230 bytes, the common read at 32 streams) and one of four (a read that came late).
  `chunked_data_events`: the same reads as they come off a chunked body (one chunk an
  event), against its twin (`py_chunked_data_events`: the framing in Python, then the C
  split). The functions this bench found within the noise (`whole_chunks` alone,
  `timed_select`) are Python now: docs/accuracy.md keeps their figures.
- In the loop: a real ``labkit run`` of a 32-stream ``load`` level (``workers: 1``, so the
  process measured reads every stream) against the truth server
  (`benchmarks/scripted_server.py`), this tree in a child process per run; its CPU per
  output token within the level (`bench_cpu.RunOut.in_level`: the process tree's CPU read
  from /proc every 50 ms, from the level's first request to its last byte). Legs, in a
  rotating order each round: ``LABKIT_READPATH=c``, the same again (the A/A), ``=python``,
  and for each C function the C path with that function alone left out (its Python twin
  put in place of it before the run starts: the leg's prelude). Each run's manifest must
  name the read path its leg asked for. A function's in-loop gain is its leg's CPU per token
  less the C leg's; the noise is the A/A difference. A gain no larger than the noise is
  within it.

Run: ``make bench-readpath`` (about 8 minutes on 2 cores) = ``.venv/bin/python
benchmarks/bench_readpath.py``. Options: ``--rounds 5 --calls 20000`` (micro), ``--loop-rounds
8 --streams 32 --requests-scale 1 --without F,G`` (the loop; ``--without`` picks the
functions left out one at a time, default every one), ``--no-loop``, ``--json OUT``; the stream's
shape as bench_load's (``--tokens 100 --interval-ms 2 --ttft-ms 50``). A benchmark, not a
test: on 2 shared cores the figures are noisy; judge a gain against the A/A beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import select
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_cpu as bc
import bench_load as bl  # this tree's labkit and scripted_server first on sys.path
from scripted_server import ScriptedServer, raise_open_files_limit

from labkit.wire import readpath
from labkit.wire.lean import stamps, tcp
from labkit.wire.sse import MAX_EVENT_BYTES, SSEEvent

#: One chat event as the truth server and the OpenAI-compatible servers send it.
EVENT = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764633600,'
    b'"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":'
    b'" token"},"logprobs":null,"finish_reason":null}]}\n\n'
)
LIMIT = MAX_EVENT_BYTES + 6


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


#: The reads the SSE split is timed on: one event, and four a late read gathered.
READS = {"1 event": [EVENT], "4 events": [EVENT] * 4}

# --- micro ----------------------------------------------------------------------------------


@dataclass
class Case:
    """One C function against a twin: `time(side)` gives µs per call for side ``c`` or
    ``python`` (`twin` names which Python it is)."""

    function: str
    input: str
    twin: str
    time: Callable[[str], float]
    c_us: list[float] = field(default_factory=list)
    python_us: list[float] = field(default_factory=list)
    again_us: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """Medians over rounds, the gain and the A/A noise (µs per call)."""
        c, py, again = (statistics.median(v) for v in (self.c_us, self.python_us, self.again_us))
        return {
            "function": self.function,
            "input": self.input,
            "twin": self.twin,
            "c_us": c,
            "python_us": py,
            "gain_us": py - c,
            "ratio": c / py if py else None,
            "noise_us": abs(again - c),
        }


def _loop_timer(calls: int, c: Callable[[], Any], py: Callable[[], Any]) -> Callable[[str], float]:
    def run(side: str) -> float:
        fn = c if side == "c" else py
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - t0) / calls / 1e3

    return run


def sse_cases(compiled: Any, calls: int) -> list[Case]:
    """`whole_data_events` on `READS`."""
    out: list[Case] = []
    if not hasattr(compiled, "whole_data_events"):
        return out
    c_ev, py_ev = compiled.whole_data_events, readpath.py_whole_data_events
    for label, events in READS.items():
        payload = b"".join(events)
        assert c_ev(payload, LIMIT, 1, SSEEvent) == py_ev(payload, LIMIT, 1, SSEEvent)
        timer = _loop_timer(
            calls,
            lambda d=payload: c_ev(d, LIMIT, 1, SSEEvent),
            lambda d=payload: py_ev(d, LIMIT, 1, SSEEvent),
        )
        out.append(Case("whole_data_events", label, "Python", timer))
    return out


def chunked_cases(compiled: Any, calls: int) -> list[Case]:
    """`chunked_data_events` on `READS` as chunked reads, against the Python framing and the
    C split chained (its twin where labkit runs C)."""
    out: list[Case] = []
    if not hasattr(compiled, "chunked_data_events"):
        return out
    c_ev, py_ev = compiled.chunked_data_events, readpath.py_chunked_data_events
    for label, events in READS.items():
        read = b"".join(_chunk(e) for e in events)
        assert c_ev(read, LIMIT, 1, SSEEvent) == py_ev(read, LIMIT, 1, SSEEvent)
        timer = _loop_timer(
            calls,
            lambda d=read: c_ev(d, LIMIT, 1, SSEEvent),
            lambda d=read: py_ev(d, LIMIT, 1, SSEEvent),
        )
        out.append(Case("chunked_data_events", label, "Python framing + C split", timer))
    return out


@contextlib.contextmanager
def recv_case(compiled: Any, calls: int) -> Iterator[Case | None]:
    """`recv_stamped` against the Python read in `tcp.Connection._on_readable`, on a
    loopback TCP connection with kernel receive stamps where the host has them."""
    if not hasattr(compiled, "recv_stamped"):
        yield None
        return
    loop = asyncio.new_event_loop()
    read = _chunk(EVENT)
    try:
        with stamps.loopback_pair() as (sender, receiver):
            receiver.setblocking(False)
            conn = tcp.Connection(("http", "127.0.0.1", 0), receiver, loop)
            fd = receiver.fileno()

            def run(side: str) -> float:
                saved = tcp.RECV_STAMPED
                tcp.RECV_STAMPED = compiled.recv_stamped if side == "c" else None
                total = 0
                try:
                    for _ in range(calls):
                        sender.sendall(read)
                        select.select([fd], [], [], 1.0)
                        t0 = time.perf_counter_ns()
                        conn._on_readable()
                        total += time.perf_counter_ns() - t0
                        (data, _, _, _) = conn.inbox.popleft()
                        assert data == read, "one send, one read"
                finally:
                    tcp.RECV_STAMPED = saved
                return total / calls / 1e3

            yield Case("recv_stamped", "1 event, kernel-stamped", "Python", run)
            loop.remove_reader(fd)
    finally:
        loop.close()


def measure_micro(rounds: int, calls: int) -> list[dict[str, Any]]:
    """Every case, `rounds` rounds, the C function, its twin and the C function again in a
    rotating order per round."""
    compiled, why = readpath.compiled_module()
    if compiled is None:
        raise SystemExit(f"labkit is built without its C read path here ({why})")
    with recv_case(compiled, max(calls // 10, 500)) as recv:
        cases = [
            c
            for c in [recv, *sse_cases(compiled, calls), *chunked_cases(compiled, calls)]
            if c is not None
        ]
        sides = ["c", "python", "again"]
        for rnd in range(rounds):
            for case in cases:
                order = sides[rnd % 3 :] + sides[: rnd % 3]
                for side in order:
                    us = case.time("c" if side == "again" else side)
                    {"c": case.c_us, "python": case.python_us, "again": case.again_us}[side].append(
                        us
                    )
            print(f"   micro round {rnd + 1}/{rounds} done", flush=True)
        return [case.row() for case in cases]


def print_micro(rows: list[dict[str, Any]], rounds: int, calls: int) -> None:
    print(
        f"\n### each C function against its Python twin (µs per call, median of {rounds} rounds"
        f" of {calls:,} calls; the A/A is the C function against itself)\n"
    )
    print("| function | input | twin | C µs | Python µs | gain µs | C/Python | A/A noise µs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['function']} | {r['input']} | {r['twin']} | {r['c_us']:.3f} |"
            f" {r['python_us']:.3f} | {r['gain_us']:.3f} | {bl._f(r['ratio'], '.2f')} |"
            f" {r['noise_us']:.3f} |"
        )


# --- in the loop ----------------------------------------------------------------------------

#: Runs `labkit run` with one C step left out: its Python twin bound where the C one was,
#: before the run imports anything else (sse and tcp bind them at import).
_WITHOUT = """
import runpy, sys
step, sys.argv = STEP, ["labkit", *sys.argv[1:]]
from labkit.wire import readpath, sse
from labkit.wire.lean import tcp
if step == "recv_stamped":
    tcp.RECV_STAMPED = readpath.RECV_STAMPED = None
elif step == "whole_data_events":
    sse.whole_data_events = readpath.whole_data_events = readpath.py_whole_data_events
elif step == "chunked_data_events":
    sse.chunked_data_events = readpath.chunked_data_events = readpath.py_chunked_data_events
else:
    raise SystemExit("no such step: " + step)
runpy.run_module("labkit", run_name="__main__", alter_sys=True)
"""


def c_steps() -> list[str]:
    """The C functions this tree's extension has, in read order."""
    compiled, _ = readpath.compiled_module()
    steps = ("recv_stamped", "whole_data_events", "chunked_data_events")
    return [s for s in steps if hasattr(compiled, s)]


def loop_sides(work: Path, without: list[str]) -> list[bc.Side]:
    """The legs: C, C again, Python, and C with each function of `without` left out."""
    tree = bl._REPO

    def side(name: str, label: str, setting: str, prelude: str | None = None) -> bc.Side:
        return bc.Side(
            name,
            tree,
            work / f"cache-{name}",
            label,
            env={readpath.ENV_VAR: setting},
            prelude=prelude,
        )

    sides = [
        side("c", "C (LABKIT_READPATH=c)", "c"),
        side("c-again", "C again (the A/A)", "c"),
        side("python", "Python (LABKIT_READPATH=python)", "python"),
    ]
    for step in without:
        prelude = _WITHOUT.replace("STEP", repr(step))
        sides.append(side(f"no-{step}", f"C without {step}", "c", prelude))
    return sides


def measure_loop(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every leg, `args.loop_rounds` rounds in a rotating order: CPU µs per token within
    the level, per round and pooled."""
    without = c_steps() if args.without is None else [s for s in args.without.split(",") if s]
    unknown = set(without) - set(c_steps())
    if unknown:
        raise SystemExit(f"--without: no such C function here: {', '.join(sorted(unknown))}")
    sides = loop_sides(work, without)
    for s in sides:
        print(f"{s.label}: labkit from {bc._check_tree(s)}", flush=True)
    streams = args.streams
    n = max(2 * streams, round(args.requests_scale * max(100, 20 * streams)))
    interval = bl._level_interval_ms(streams, args)
    got: dict[str, list[tuple[float, int]]] = {s.name: [] for s in sides}
    with ScriptedServer(ttft_ms=args.ttft_ms, interval_ms=interval, tokens=args.tokens) as srv:
        url = srv.url(interval_ms=interval, tokens=args.tokens)
        print(
            f"\n== {streams} streams, a token every {interval:g} ms, {args.tokens} tokens;"
            f" {n} requests per run, workers 1; {args.loop_rounds} round(s), order rotating",
            flush=True,
        )
        for rnd in range(args.loop_rounds):
            shift = rnd % len(sides)
            for s in sides[shift:] + sides[:shift]:
                config = bl.runner_config(url, streams, n, 1)
                run = bc.run_labkit(s, config, work / f"r{rnd}-{s.name}")
                srv.stamps()
                wanted = s.env[readpath.ENV_VAR]
                recorded = (run.read_path or {}).get("implementation")
                if recorded != wanted:
                    raise SystemExit(f"{s.label}: the run's manifest says {run.read_path}")
                within = run.in_level()
                if within is None:
                    print(f"   round {rnd + 1} {s.label}: no in-level figure", flush=True)
                    continue
                got[s.name].append(within)
                cpu, events = within
                print(
                    f"   round {rnd + 1} {s.label:<32} {1e6 * cpu / events:6.1f} µs/token"
                    f" ({events} events)",
                    flush=True,
                )
    out: dict[str, Any] = {"streams": streams, "requests": n, "interval_ms": interval, "legs": {}}
    for s in sides:
        rounds = got[s.name]
        events = sum(e for _, e in rounds)
        out["legs"][s.name] = {
            "label": s.label,
            "us_per_token": 1e6 * sum(c for c, _ in rounds) / events if events else None,
            "rounds_us": [1e6 * c / e for c, e in rounds],
        }
    return out


def print_loop(loop: dict[str, Any]) -> dict[str, Any]:
    """The legs' table and each function's in-loop gain against the A/A noise."""
    legs = loop["legs"]
    c = legs["c"]["us_per_token"]
    again = legs["c-again"]["us_per_token"]
    noise = abs(again - c) if c is not None and again is not None else None
    print(
        f"\n### in the loop: {loop['streams']} streams, CPU µs per output token within the"
        " level (pooled over rounds; each round's beside it)\n"
    )
    print("| leg | µs/token | against C | rounds |")
    print("|---|---|---|---|")
    for leg in legs.values():
        us = leg["us_per_token"]
        diff = us - c if us is not None and c is not None else None
        rounds = ", ".join(f"{x:.1f}" for x in leg["rounds_us"])
        print(f"| {leg['label']} | {bl._f(us, '.1f')} | {bl._f(diff, '+.1f')} | {rounds} |")
    print(f"\nA/A noise (C again against C): {bl._f(noise, '.1f')} µs per token")
    verdicts: dict[str, Any] = {}
    print("\n| C function | in-loop gain µs/token (leg without it − C) | against the noise |")
    print("|---|---|---|")
    for name, leg in legs.items():
        if not name.startswith("no-"):
            continue
        us = leg["us_per_token"]
        gain = us - c if us is not None and c is not None else None
        within = None if gain is None or noise is None else gain <= noise
        word = {None: "n/a", True: "within the noise", False: "beyond the noise"}[within]
        verdicts[name[3:]] = {"gain_us": gain, "within_noise": within}
        print(f"| {name[3:]} | {bl._f(gain, '+.1f')} | {word} |")
    py = legs["python"]["us_per_token"]
    whole = py - c if py is not None and c is not None else None
    print(f"\nthe whole C path: {bl._f(whole, '+.1f')} µs per token (Python − C)")
    return {"noise_us": noise, "functions": verdicts, "whole_gain_us": whole}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="micro rounds")
    parser.add_argument("--calls", type=int, default=20_000, help="micro calls per timing")
    parser.add_argument("--loop-rounds", type=int, default=8)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--requests-scale", type=float, default=1.0)
    parser.add_argument(
        "--without",
        default=None,
        help="the C functions to leave out one at a time in the loop, comma-separated "
        "(default: every one; empty: none)",
    )
    parser.add_argument("--no-loop", action="store_true", help="the micro figures only")
    parser.add_argument("--json", type=Path, default=None)
    bl.add_stream_shape(parser)
    return parser


def main() -> None:
    """The micro table, then the in-loop legs; the figures in `--json` where given."""
    args = _parser().parse_args()
    print(
        f"this tree: {bl._tree_revision(bl._REPO)}; read path here:"
        f" {readpath.READ_PATH.describe()}; C functions: {', '.join(c_steps())}",
        flush=True,
    )
    micro = measure_micro(args.rounds, args.calls)
    print_micro(micro, args.rounds, args.calls)
    loop: dict[str, Any] | None = None
    judged: dict[str, Any] | None = None
    if not args.no_loop:
        raise_open_files_limit(4 * args.streams + 1024)
        with tempfile.TemporaryDirectory(prefix="bench-readpath-") as tmp:
            loop = measure_loop(args, Path(tmp))
        judged = print_loop(loop)
    if args.json:
        payload = {"micro": micro, "loop": loop, "judged": judged, "args": vars(args)}
        args.json.write_text(json.dumps(bl._strict_json(payload), indent=2, default=str))
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
