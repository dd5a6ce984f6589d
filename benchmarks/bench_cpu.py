"""labkit's CPU per streamed token and its stamp/TTFT error, before and after, in one run.

Method. Every measured run is a real ``labkit run`` of a ``load`` experiment (one level,
``--no-report``; `bench_load.runner_config`) in a child process against the truth server
(`scripted_server.py`, its own process; it stamps each event's true send time). "Before" is
labkit from git ``--before`` (default ``b0ee92b``, main before issue 47's CPU work;
`bench_load.archive_labkit`), "after"
this tree: the child runs with that tree first on PYTHONPATH and as its working directory
(so the runner's worker processes import it too), each side with its own labkit cache
folder (``LABKIT_CACHE_DIR``: `workers: auto` calibrates each side's own capacity). Per
level and round the two sides alternate which goes first, so machine noise hits both.

- CPU per token: user + system time of the whole ``labkit run`` process tree (the runner,
  its worker processes, the record writes: `resource.getrusage(RUSAGE_CHILDREN)` around
  waiting for it; the runner waits its workers, so theirs is in it), *marginal*: a short
  run of the same level (same replies, a fifth of the requests, at least one wave) is
  subtracted, over the difference in output events (records' ``client.event_offsets_ms``,
  warm-ups included), so start-up and imports (about 2 s of CPU) are not counted per token
  while each request's own work (request, record, its write) is, spread over its tokens,
  as a user pays it. Summed over rounds; each round's is printed. Beside it, *in level*:
  the tree's CPU read from /proc every 50 ms, interpolated from the level's first request
  to its last byte, over the level's events (steadier on a shared host: no start-up in it,
  nor the figures computed after the level).
- The yardstick (issue 47): labkit's CPU per token as a multiple of the floor (below)
  measured in the same run, beside the same level: each level prints it for both sides
  (``labkit ÷ floor``) against ``FLOOR_RATIO_TARGET`` (1.25x at 32 and 256 streams), which
  passes only when both figures say so: the marginal one swings by tens of µs a round, so
  one lucky run could pass on it alone. A ratio to a floor measured beside it is what a
  shared host can compare; the absolute µs move with whatever else runs. Each round's
  ratio is also taken over that round's floor, and the rounds' mean printed with its 95%
  t-interval (`labkit.analysis.stats.mean`): PASS where both intervals lie at or under the
  target, MISS where either lies above it, UNSURE where one holds it (on this 2-core host an
  A/A run, one labkit on both sides, differed by 0.3x at 32 streams: 1.35 against 1.68,
  2026-12-07). Under two rounds the pooled figures decide, without an interval.
- One stream (level 1): the client-side part of TTFT per record, ``client.request_sent_ms``
  (the clock's start to the request's last byte handed to the kernel), beside the server's
  receipt of the request less ``t_start`` (the truth log's ``t_recv``), and the TTFT error,
  p50/p99/max, with PASS/MISS for p99 <= ``ONE_STREAM_TTFT_ERR_P99_MS`` (0.6 ms, a target
  for an idle host: the host's load average is printed with it).
- Each request asks for no ``max_tokens`` (`bench_load.runner_config`), so it carries the
  script's ``--tokens`` (before 2026-12-02 the load experiment's default 64 cut it short,
  whatever the header said: per-request work was then spread over 64 tokens).
- Floor, beside each level: CPU per token of `bench_load.raw_leg`, a bare asyncio protocol
  client in this process (no HTTP library, no JSON decoding, no record, no self-check; a
  regex finds each event's text), over the same replies, one run in each round, last in
  one round and first in the next, as the sides alternate (so a shared host's load moves
  the floor with the sides it divides): what one Python event loop spends reading these
  streams at all (`floor_us_per_token`, summed over rounds; each round's is printed). One
  full floor run, not counted, goes before the first level (`warm_floor`): a process's
  first one paid ~130,000 page faults more (40 against 25 µs/token), which would flatter
  labkit.
- Stamp error = client stamp − server send stamp per output event; TTFT error = client
  TTFT − true TTFT (first send − client t_start); matched by response id and position
  (`bench_load.Accum`), over the full runs' measured records.
- labkit's own flag: the level's ``client_bound`` in the run's ``lab.json`` (the load
  experiment's figures, computed by that side's labkit), and the workers it used.
- Hosted pace (``--hosted-streams 1000 --hosted-interval-ms 30``): the server pinned to
  ``--server-cpus`` (default CPU 0) and labkit to ``--labkit-cpus`` (default the others),
  `os.sched_setaffinity`; ``workers: auto`` chooses within labkit's CPUs (printed). Target:
  stamp p99 <= 2 ms and not flagged client-bound. Each side first runs one short wave (not
  measured) so its capacity calibration is not in the level. One truth server process on
  one core sends that on time: 1,000 streams at 30 ms (33,000 events/s), read by
  bench_load's raw client on the other core, woke late by p99 0.05 ms; at 15 ms (55,000
  events/s sent) by 0.04 ms. Each level prints the server's wake-up lateness.
- Where the CPU went (``--profile-level 32``): the level's full and short runs again
  under cProfile (``workers: 1``, so the runner's own process reads the streams; its own
  wall-clock timer, the loop's waits in epoll and sleep left out, so on a busy host time
  spent preempted counts where it fell), self time grouped by `COMPONENTS` (a builtin
  counts for its caller's component), marginal per token, each component's *profile
  share* scaled to the measured unprofiled CPU per token. Profiling slows Python calls
  more than C, so the split is approximate; the total is the measured one. Then the
  same full and short runs with each event-loop callback's thread CPU summed by what it
  was (`_STEPPED`: a reader callback by name, a task's step by the functions it resumed
  and suspended in, the loop's own time around them): no profiler's inflation, about a
  microsecond of overhead per callback, and the request's life cut where it awaits.
  Beside it, one event-loop wake-up's CPU measured apart (`wake_cost_us`: a sleep in
  ``epoll_wait`` ended by a loopback write), times the loop's iterations per token: the
  part of the loop's own time that is the kernel putting a thread to sleep and waking it,
  which every event loop pays, the floor's too (about 20-40 µs a wake-up on this host).
  The floor is split the same way (`_FLOOR_STEPPED`: its full and short runs in a fresh
  interpreter after one not counted; once before the sides and once after, the mean), and
  each side's three parts are printed over the
  floor's: the loop itself, the reader callbacks (one a read), and the rest (task steps: a
  request's own work, which the floor all but lacks).
  Last, one pushed read's Python work warm, by step, for each side (`readpath_warm.py`:
  the same reads through the lean body and the recorder in one process, no socket, the
  minimum over rounds): a change of a microsecond a read, lost in a loaded level's swings,
  shows there.

Run: ``make bench-cpu`` (about 10 minutes on 2 cores; ``BEFORE=REV``) = ``.venv/bin/python
benchmarks/bench_cpu.py --json results/bench-cpu.json``; smaller: ``--rounds 1
--requests-scale 0.5 --hosted-requests 1000``. Options: ``--before REV``, ``--after REV``
(default: this working tree), ``--levels 1,32,256``, ``--rounds 3``, ``--tokens 100
--interval-ms 2 --ttft-ms 50``, ``--hosted-streams/--hosted-interval-ms/--hosted-requests``
(0 streams: no hosted level), ``--server-cpus/--labkit-cpus``, ``--profile-level`` (0:
none), ``--json OUT``.
A benchmark, not a test: on 2 shared cores the figures are noisy; the ratios are the point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_load as bl  # this tree's labkit and scripted_server first on sys.path
import numpy
from scripted_server import ScriptedServer, raise_open_files_limit

from labkit.analysis.stats import Mean, mean
from labkit.records import RequestRecord

DEFAULT_BEFORE = "b0ee92b"
#: The targets (issue 47): labkit's CPU per token at `FLOOR_TARGET_LEVELS` at most this
#: multiple of the bare-loop floor measured in the same run; at one stream, the TTFT error's
#: p99 against the truth server (on an idle host); and (issue 30) the hosted-pace level's
#: stamp p99.
FLOOR_RATIO_TARGET = 1.25
FLOOR_TARGET_LEVELS = (32, 256)
ONE_STREAM_TTFT_ERR_P99_MS = 0.6
HOSTED_STAMP_P99_MS = 2.0

#: Where a profiled function's self time goes: the first component whose fragments occur in
#: its ``file:function`` key. A builtin (no file) counts for the component of its callers.
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("JSON encoding", ("dump_json", "to_json", "json/encoder.py", "labkit/scrub.py")),
    (
        "transport / socket reads",
        (
            "labkit/wire/lean/tcp.py",
            "labkit/wire/lean/stamps.py",
            "labkit/wire/lean/tls.py",
            "labkit/wire/lean/transport.py",
            "labkit/wire/connections.py",
            "labkit/wire/proxies.py",
            "httpx/",
            "httpcore/",
            "anyio/",
            "ssl.py",
            "socket.py",
            "_socket.socket",  # recv_into, send ... whoever calls them (asyncio's transports)
            "_ssl.",
        ),
    ),
    ("HTTP framing", ("labkit/wire/lean/http11.py", "labkit/wire/lean/", "h11/")),
    ("SSE split", ("labkit/wire/sse.py",)),
    (
        "provider parser + JSON decode",
        ("labkit/providers/", "labkit/wire/fastjson.py", "json/decoder.py", "json/__init__"),
    ),
    ("self-check / lateness", ("labkit/analysis/selfcheck.py", "labkit/measurement/lateness.py")),
    ("asyncio / selector", ("asyncio/", "selectors.py", "labkit/wire/loopclock.py")),
    (
        "recorder / measurement",
        (
            "labkit/measurement/",
            "labkit/wire/",
            "labkit/timing.py",
            "labkit/tracing/",
            "labkit/clocksync.py",
        ),
    ),
    ("record assembly (pydantic)", ("labkit/records.py", "pydantic/", "pydantic_core")),
    # (a builtin write counts for its caller: the record file's, or the progress display's)
    ("file write", ("labkit/runner/results.py", "labkit/safefiles.py")),
    (
        "worker hand-off",
        (
            "labkit/runner/jobs.py",
            "labkit/runner/workers.py",
            "labkit/runner/worker_body.py",
            "labkit/runner/worker_process.py",
            "labkit/runner/executor.py",
        ),
    ),
    (
        "run's figures (lab.json)",
        (
            "labkit/analysis/",
            "labkit/figures.py",
            "numpy/",
            "scipy/",
            "statsmodels/",
            "pandas/",
        ),
    ),
    (
        "runner, pacing, progress",
        (
            "labkit/runner/",
            "labkit/experiments/",
            "labkit/cli/",
            "rich/",
        ),
    ),
    # Start-up (imports, class creation): the short run's cancels it; what is left is noise.
    ("start-up left over", ("<frozen importlib", "importlib/", "__build_class__", "inspect.py")),
]
OTHER = "other"

#: Waiting, not working: left out of the profile (its timer is cProfile's own wall clock).
IDLE = ("of 'select.epoll' objects>", "of 'select.poll' objects>", "select.select>", "time.sleep>")

# Runs `labkit run ARGS` under cProfile (its own cheap wall-clock timer: a Python timer such
# as process_time costs a call per event and inflated the profile 8x), dumps stats to OUT.
_PROFILED = """
import cProfile, runpy, sys
out, sys.argv = sys.argv[1], ["labkit", *sys.argv[2:]]
prof = cProfile.Profile()
prof.enable()
try:
    runpy.run_module("labkit", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    prof.disable()
    prof.dump_stats(out)
"""

# Each event-loop callback's thread CPU summed by what it was: a reader callback by its
# name, a task's step by the functions it resumed in and suspended in (innermost awaiting
# frames; "done" when it ended), and the loop's own time around them (`_run_once` less its
# callbacks: the selector, timers, scheduling), in `acc`: key -> [ns, calls].
_STEP_TIMERS = """
import asyncio, json, sys, time
from asyncio import base_events, events
clock, acc = time.thread_time_ns, {}
def where(task):
    coro, name = task.get_coro(), None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        name = frame.f_code.co_qualname
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return name or "?"
def add(key, ns):
    got = acc.setdefault(key, [0, 0]); got[0] += ns; got[1] += 1
run_handle, run_once = events.Handle._run, base_events.BaseEventLoop._run_once
def timed_handle(self):
    task = getattr(self._callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        start = where(task); t = clock(); run_handle(self); ns = clock() - t
        add("step " + start + " -> " + ("done" if task.done() else where(task)), ns)
    else:
        # Named before it runs (a reader it replaces is cancelled: its callback then None);
        # a C callback object by its type's name.
        cb = self._callback; name = getattr(cb, "__qualname__", type(cb).__qualname__)
        t = clock(); run_handle(self)
        add("callback " + name, clock() - t)
    acc.setdefault("loop callbacks", [0, 0])[0] += clock() - t
def timed_once(self):
    t = clock(); run_once(self); add("loop iterations", clock() - t)
events.Handle._run, base_events.BaseEventLoop._run_once = timed_handle, timed_once
"""

# Runs `labkit run ARGS` under `_STEP_TIMERS`; dumps `acc` as JSON to OUT at exit.
_STEPPED = (
    _STEP_TIMERS
    + """
import atexit, runpy
out, sys.argv = sys.argv[1], ["labkit", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(acc)))
runpy.run_module("labkit", run_name="__main__", alter_sys=True)
"""
)

# The floor (`bench_load.raw_leg`) under `_STEP_TIMERS`: BENCH_DIR OUT URL LEVEL N...: one
# run of the first N not counted (a process's first paid ~130,000 page faults more,
# `warm_floor`), then a run of each N, each dumped to OUT as {"steps": acc, "events": n}.
_FLOOR_STEPPED = (
    _STEP_TIMERS
    + """
bench, out, url, level, *runs = sys.argv[1:]
sys.path.insert(0, bench)
import bench_load
bench_load.raw_leg(url, int(level), int(runs[0]))
got = []
for n in runs:
    acc.clear()
    res = bench_load.raw_leg(url, int(level), int(n))
    got.append({"steps": dict(acc), "events": sum(len(r.stamps_ns) for r in res.streams)})
open(out, "w").write(json.dumps(got))
"""
)


@dataclass
class Side:
    """One labkit under test: its tree, its cache folder, and what it measured; `env` is
    added to its runs' environment, and `prelude` (Python source, given labkit's arguments
    in ``sys.argv[1:]``) runs each ``labkit run`` in place of ``python -m labkit``."""

    name: str
    tree: Path
    cache: Path
    label: str
    env: dict[str, str] = field(default_factory=dict)
    prelude: str | None = None


@dataclass
class RunOut:
    """One finished `labkit run`: its process tree's CPU, its records and level figures."""

    cpu_s: float
    wall_s: float
    records: list[RequestRecord]
    levels: list[dict[str, Any]]
    log: str
    #: (perf_counter_ns, the tree's CPU s so far), every `SAMPLE_S` while it ran.
    samples: list[tuple[int, float]] = field(default_factory=list)
    #: The run's manifest.json `read_path` (None for a labkit that did not record it).
    read_path: dict[str, Any] | None = None

    @property
    def events(self) -> int:
        return sum(len(r.client.event_offsets_ms) for r in self.records)

    def in_level(self) -> tuple[float, int] | None:
        """The tree's CPU (s) from the level's first request to its last byte (the samples
        interpolated; set-up, warm-up and the figures after left out), and its events."""
        measured = [r for r in self.records if not r.warmup]
        if len(self.samples) < 2 or not measured:
            return None
        t0 = min(r.t_start_mono_ns for r in measured)
        t1 = t0 + bl.level_wall_s(measured) * 1e9
        times = [t for t, _ in self.samples]
        if t0 < times[0] or t1 > times[-1]:
            return None
        cpu = numpy.interp([t0, t1], times, [c for _, c in self.samples])
        return float(cpu[1] - cpu[0]), sum(len(r.client.event_offsets_ms) for r in measured)


@dataclass
class LevelSide:
    """One side at one level, pooled over rounds."""

    acc: bl.Accum = field(default_factory=bl.Accum)
    full_cpu: list[float] = field(default_factory=list)
    short_cpu: list[float] = field(default_factory=list)
    full_events: list[int] = field(default_factory=list)
    short_events: list[int] = field(default_factory=list)
    flags: list[bool] = field(default_factory=list)
    workers: list[int | None] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    #: Each round's (CPU s, events) within its full run's level; None: not sampled.
    in_level: list[tuple[float, int] | None] = field(default_factory=list)

    def in_level_us(self) -> float | None:
        """CPU µs per output event within the full runs' levels (sampled), over rounds."""
        sampled = [x for x in self.in_level if x is not None]
        events = sum(e for _, e in sampled)
        return 1e6 * sum(c for c, _ in sampled) / events if events else None

    def round_in_level_us(self) -> list[float | None]:
        """Each round's in-level µs per token, in round order (None: not sampled)."""
        return [1e6 * x[0] / x[1] if x is not None and x[1] else None for x in self.in_level]

    def marginal_us(self) -> float | None:
        """CPU µs per output event, full runs over short runs, summed over rounds."""
        d_events = sum(self.full_events) - sum(self.short_events)
        if d_events <= 0:
            return None
        return 1e6 * (sum(self.full_cpu) - sum(self.short_cpu)) / d_events

    def round_marginal_us(self) -> list[float | None]:
        """Each round's marginal µs per token, in round order (None: no events between)."""
        return [
            1e6 * (fc - oc) / (fe - oe) if fe > oe else None
            for fc, oc, fe, oe in zip(
                self.full_cpu, self.short_cpu, self.full_events, self.short_events, strict=False
            )
        ]

    def per_round_us(self) -> list[float]:
        """The rounds' marginal µs per token where a round has one (`round_marginal_us`)."""
        return [us for us in self.round_marginal_us() if us is not None]


def _load_levels(lab: Any) -> Iterator[dict[str, Any]]:
    """Every load level's figures in a lab.json (any dict with `level` and `client_bound`)."""
    if isinstance(lab, dict):
        if "level" in lab and "client_bound" in lab:
            yield lab
        for value in lab.values():
            yield from _load_levels(value)
    elif isinstance(lab, list):
        for value in lab:
            yield from _load_levels(value)


def run_labkit(
    side: Side,
    config: dict[str, Any],
    work: Path,
    *,
    cpus: set[int] | None = None,
    profile: Path | None = None,
    steps: Path | None = None,
) -> RunOut:
    """`labkit run` of `config` by `side`'s labkit in a child process (on `cpus`, where
    given); its whole process tree's CPU, records and lab.json load levels."""
    work.mkdir(parents=True)
    cfg = work / "config.yaml"
    cfg.write_text(json.dumps(config))  # JSON is YAML
    args = ["run", str(cfg), "--out", str(work / "runs"), "--no-report"]
    command = [sys.executable, "-m", "labkit", *args]
    if side.prelude is not None:
        command = [sys.executable, "-c", side.prelude, *args]
    if profile is not None:
        command = [sys.executable, "-c", _PROFILED, str(profile), *args]
    if steps is not None:
        command = [sys.executable, "-c", _STEPPED, str(steps), *args]
    env = dict(os.environ, PYTHONPATH=str(side.tree), LABKIT_CACHE_DIR=str(side.cache))
    env.update(NO_COLOR="1", COLUMNS="200", **side.env)
    log = work / "labkit.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            command,
            cwd=side.tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        samples: list[tuple[int, float]] = []
        while proc.poll() is None:
            samples.append((time.perf_counter_ns(), tree_cpu_s(proc.pid)))
            time.sleep(SAMPLE_S)
        code = proc.wait()
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = log.read_text(errors="replace")
    if code != 0:
        raise SystemExit(f"{side.name}: labkit run failed ({code}):\n{text[-3000:]}")
    (folder,) = (work / "runs").iterdir()
    records = [
        RequestRecord.model_validate_json(line)
        for line in (folder / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    levels = list(_load_levels(json.loads((folder / "lab.json").read_text())))
    manifest = json.loads((folder / "manifest.json").read_text())
    return RunOut(cpu, wall, records, levels, text, samples, manifest.get("read_path"))


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.05  # how often the process tree's CPU is read while a run runs


def tree_cpu_s(pid: int) -> float:
    """CPU (user + system) of `pid`, its children that ended and its live descendants, from
    /proc (clock ticks); 0 for a process that has gone."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [
                    int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()
                ]
    return total * _TICK_S


def _measured(run: RunOut) -> list[RequestRecord]:
    return [r for r in run.records if not r.warmup]


def _leg(run: RunOut) -> bl.LegResult:
    """A run's measured records as `bench_load`'s leg result (stamps, TTFT, self-check)."""
    errors: list[str] = []
    measured = _measured(run)
    streams = [bl._from_record(r, errors) for r in measured]
    return bl.LegResult(streams, run.cpu_s, bl.level_wall_s(measured), errors, measured)


def auto_choice(run: RunOut) -> str | None:
    """What `workers: auto` said it chose and why (the runner's ``read by N processes``)."""
    found = re.search(r"read by (\d+ process(?:es)? \([^)]*\))", " ".join(run.log.split()))
    return found[1] if found else None


def _flag_and_workers(run: RunOut) -> tuple[bool, int | None]:
    level = run.levels[-1] if run.levels else {}
    return bool(level.get("client_bound")), level.get("workers")


# -- the profile ------------------------------------------------------------------------------


def _component(key: str) -> str | None:
    for name, fragments in COMPONENTS:
        if any(f in key for f in fragments):
            return name
    return None


def _func_key(func: tuple[str, int, str]) -> str:
    file, _, name = func
    return f"{file.replace(os.sep, '/')}:{name}"


def components_s(stats_file: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Self time (s) per component of one profile, and per function of what fell to
    `OTHER`; a builtin's goes to its callers' components in proportion to the time each
    caller spent in it."""
    stats: dict[Any, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    other: dict[str, float] = {}

    def owner(func: tuple[str, int, str], depth: int = 0) -> str:
        own = _component(_func_key(func))
        if own is not None:
            return own
        if func[0] != "~" or depth > 3:
            return OTHER
        callers = stats.get(func, (0, 0, 0, 0, {}))[4]
        if not callers:
            return OTHER
        top = max(callers.items(), key=lambda kv: kv[1][2])[0]
        return owner(top, depth + 1)

    def add(name: str, func: tuple[str, int, str], seconds: float) -> None:
        out[name] = out.get(name, 0.0) + seconds
        if name == OTHER:
            key = _func_key(func).rsplit("site-packages/", 1)[-1]
            other[key] = other.get(key, 0.0) + seconds

    for func, (_, _, tt, _, callers) in stats.items():
        if func[0] == "~" and func[2].endswith(IDLE):
            continue
        if _component(_func_key(func)) is None and func[0] == "~" and callers:
            for caller, (_, _, c_tt, _) in callers.items():
                add(owner(caller), func, c_tt)
            continue
        add(owner(func), func, tt)
    return out, other


# -- the bench --------------------------------------------------------------------------------


def _cpus(text: str | None, default: set[int]) -> set[int]:
    if text is None:
        return default
    return {int(c) for c in text.split(",") if c.strip()}


def _server_pinned(srv: ScriptedServer, cpus: set[int] | None) -> None:
    if cpus and srv.proc is not None:
        os.sched_setaffinity(srv.proc.pid, cpus)


def _check_tree(side: Side) -> str:
    """Where `side`'s child imports labkit from (it must be its tree), and which read path
    it runs (``c``, ``python``, or ``none`` before there was a choice)."""
    env = dict(os.environ, PYTHONPATH=str(side.tree), **side.env)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import labkit; print(labkit.__file__)\n"
            "try:\n from labkit.wire.readpath import IMPLEMENTATION as read_path\n"
            "except ImportError:\n read_path = 'none'\nprint(read_path)",
        ],
        cwd=side.tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    where, read_path = out[0], out[1]
    if not Path(where).resolve().is_relative_to(side.tree.resolve()):
        raise SystemExit(f"{side.name}: labkit imported from {where}, not {side.tree}")
    return f"{where} (read path: {read_path})"


def _late(server: dict[str, Any]) -> float | None:
    late = server.get("late_wakeups_ms") or {}
    p99 = late.get("p99")
    return float(p99) if p99 is not None else None


#: A full run's requests from 32 streams up (`requests_per_run`), rounded up to whole waves.
FULL_RUN_REQUESTS = 2000


def requests_per_run(level: int, args: argparse.Namespace) -> tuple[int, int]:
    """A level's requests in its full run and in its short run (at least one wave).

    From 32 streams up, whole waves of about 2,000 requests in all (200,000 events of 100
    tokens: 63 waves at 32 streams, 8 at 256) and at least 8 waves: the marginal figure
    divides the full run's CPU less the short run's by the events between them, and a short
    run's start-up swings by ~0.3 s; over the 25,600 events of the former 2-wave full run
    at 256 that was ±12 µs/token a round. Below 32 streams max(100, 20 x streams)."""
    waves = max(8, -(-FULL_RUN_REQUESTS // level))  # rounded up
    base = waves * level if level >= 32 else max(100, 20 * level)
    n = round(args.requests_scale * base)
    n = max(n, 2 * level)
    return n, max(level, n // 5)


def measure_level(
    sides: list[Side],
    srv: ScriptedServer,
    level: int,
    args: argparse.Namespace,
    work: Path,
) -> dict[str, Any]:
    """One level, every round, both sides alternating: full and short runs."""
    interval = bl._level_interval_ms(level, args)
    n, n_short = requests_per_run(level, args)
    url = srv.url(interval_ms=interval, tokens=args.tokens)
    per = {s.name: LevelSide() for s in sides}
    late: list[float] = []
    print(
        f"\n== {level} stream(s), a token every {interval:g} ms ({level * 1000 / interval:,.0f}"
        f" events/s if held), {args.tokens} tokens; {n} requests per full run, {n_short} per"
        f" short run; {args.rounds} round(s)",
        flush=True,
    )
    load = _host_load()
    floor_cpu: list[float] = []
    floor_events: list[int] = []
    for rnd in range(args.rounds):
        # The floor in the same round as both sides, last in one round and first in the
        # next (as the sides alternate): a shared host's load then moves all three alike.
        order: list[Side | None] = [*sides, None] if rnd % 2 == 0 else [None, *sides[::-1]]
        for side in order:
            if side is None:
                cpu, events = floor_run(srv, url, level, n)
                floor_cpu.append(cpu)
                floor_events.append(events)
                print(
                    f"   round {rnd + 1} floor  {cpu:6.2f} s CPU / {events} events:"
                    f" {_us(1e6 * cpu / events if events else None)} µs/token",
                    flush=True,
                )
                continue
            got = per[side.name]
            base = work / f"c{level}-r{rnd}-{side.name}"
            full = run_labkit(side, bl.runner_config(url, level, n, args.workers), base / "f")
            server = srv.stamps()
            got.acc.add(_leg(full), server["streams"], level)
            if (p99 := _late(server)) is not None:
                late.append(p99)
            short = run_labkit(
                side, bl.runner_config(url, level, n_short, args.workers), base / "s"
            )
            srv.stamps()
            got.full_cpu.append(full.cpu_s)
            got.short_cpu.append(short.cpu_s)
            got.full_events.append(full.events)
            got.short_events.append(short.events)
            flag, workers = _flag_and_workers(full)
            got.flags.append(flag)
            got.workers.append(workers)
            got.wall_s.append(full.wall_s)
            got.in_level.append(full.in_level())
            print(
                f"   round {rnd + 1} {side.name:<6} full {full.cpu_s:6.2f} s CPU /"
                f" {full.events} events, short {short.cpu_s:6.2f} s / {short.events}:"
                f" {_us(got.per_round_us()[-1] if got.per_round_us() else None)} µs/token;"
                f" workers {workers}, flagged {flag}",
                flush=True,
            )
    out: dict[str, Any] = {
        "interval_ms": interval,
        "requests": n,
        "short_requests": n_short,
        "server_late_p99_ms": late,
        "floor_us_per_token": 1e6 * sum(floor_cpu) / sum(floor_events)
        if sum(floor_events)
        else None,
        "floor_us_per_token_rounds": [
            1e6 * c / e if e else None for c, e in zip(floor_cpu, floor_events, strict=True)
        ],
        "host_load": load,
    }
    for side in sides:
        got = per[side.name]
        figs = got.acc.figures()
        out[side.name] = {
            "cpu_us_per_token": got.marginal_us(),
            "cpu_us_per_token_rounds": got.per_round_us(),
            "cpu_us_per_token_in_level": got.in_level_us(),
            "floor_ratio_rounds": {
                "marginal": _per_round_ratios(got.round_marginal_us(), out),
                "in_level": _per_round_ratios(got.round_in_level_us(), out),
            },
            "full_cpu_s": got.full_cpu,
            "short_cpu_s": got.short_cpu,
            "full_events": got.full_events,
            "short_events": got.short_events,
            "client_bound": got.flags,
            "workers": got.workers,
            "figures": figs,
        }
    print_level(level, out, sides)
    return out


def warm_floor(srv: ScriptedServer, level: int, args: argparse.Namespace) -> None:
    """One full floor run, not measured, before the first level's: a process's first one
    read through glibc's mmap for each of asyncio's 256 KiB receive buffers (an mmap, a
    mremap and a munmap a read, ~130,000 page faults in 640 requests: 40 µs/token against 25
    once glibc's threshold had risen, 2026-12-06), a yardstick that would flatter labkit,
    whose reads never take that path. A wave of `level` requests did not end it; a full run did."""
    interval = bl._level_interval_ms(level, args)
    n, _ = requests_per_run(level, args)
    cpu, events = floor_run(srv, srv.url(interval_ms=interval, tokens=args.tokens), level, n)
    per_token = _us(1e6 * cpu / events if events else None)
    print(f"floor warm-up (not counted), {level} stream(s): {per_token} µs/token", flush=True)


def floor_run(srv: ScriptedServer, url: str, level: int, n: int) -> tuple[float, int]:
    """One run of the floor beside a level (the module docstring): `bench_load.raw_leg`
    over the same replies, `n` requests; its CPU (s) and output events."""
    got = bl.raw_leg(url, level, n)
    srv.stamps()
    return got.cpu_s, sum(len(r.stamps_ns) for r in got.streams)


def _us(x: float | None) -> str:
    return bl._f(x, "6.1f")


def print_level(level: int, out: dict[str, Any], sides: list[Side]) -> None:
    late = out["server_late_p99_ms"]
    print(f"  server wake-up late p99 (worst run) {bl._f(max(late) if late else None, '.3f')} ms")
    print(
        f"  {'labkit':<22} | CPU µs/token, in level | tokens/s | stamp err ms p50   p99    max |"
        " TTFT err ms p50   p99 | flagged | workers"
    )
    for side in sides:
        s = out[side.name]
        f = s["figures"]
        ev, tt = f["event_err_ms"], f["ttft_err_ms"]
        print(
            f"  {side.label:<22} |    {_us(s['cpu_us_per_token'])}"
            f"  {_us(s['cpu_us_per_token_in_level'])}  |"
            f" {bl._f(f['events_per_s'], '8.0f')} |"
            f"   {bl._f(ev['p50'], '7.3f')} {bl._f(ev['p99'], '6.3f')} {bl._f(ev['max'], '6.2f')} |"
            f"     {bl._f(tt['p50'], '7.3f')} {bl._f(tt['p99'], '6.3f')} |"
            f" {'yes' if any(s['client_bound']) else 'no':>7} | {s['workers']}"
        )
        if f["unmatched_streams"] or f["errors"]:
            print(f"    ! {f['unmatched_streams']} unmatched streams; errors: {f['errors']}")
    print(
        f"  {'floor (bare asyncio)':<22} |    {'':>6}  {_us(out['floor_us_per_token'])}  |"
        " bench_load's raw leg, in this process: no HTTP library, JSON or record"
    )
    print_floor_ratios(level, out, sides)


def measure_hosted(
    sides: list[Side],
    srv: ScriptedServer,
    args: argparse.Namespace,
    work: Path,
    labkit_cpus: set[int],
) -> dict[str, Any]:
    """The hosted-pace level: many streams at a slow token rate, labkit on its own CPUs."""
    streams, interval = args.hosted_streams, args.hosted_interval_ms
    n = max(streams, args.hosted_requests)
    url = srv.url(interval_ms=interval, tokens=args.tokens)
    print(
        f"\n== hosted pace: {streams} streams, a token every {interval:g} ms ({args.tokens} "
        f"tokens, {n} requests, {streams * 1000 / interval:,.0f} events/s), labkit on CPUs "
        f"{sorted(labkit_cpus)}, workers: auto",
        flush=True,
    )
    out: dict[str, Any] = {"streams": streams, "interval_ms": interval, "requests": n}
    for side in sides:  # calibration and warm-up, not measured
        warm_url = srv.url(interval_ms=interval, tokens=5)
        warm = bl.runner_config(warm_url, streams, streams, "auto")
        run_labkit(side, warm, work / f"hosted-warm-{side.name}", cpus=labkit_cpus)
        srv.stamps()
    late: list[float] = []
    for rnd in range(args.hosted_rounds):
        order = sides if rnd % 2 == 0 else sides[::-1]
        for side in order:
            config = bl.runner_config(url, streams, n, "auto")
            run = run_labkit(side, config, work / f"hosted-r{rnd}-{side.name}", cpus=labkit_cpus)
            server = srv.stamps()
            if (p99 := _late(server)) is not None:
                late.append(p99)
            acc = bl.Accum()
            acc.add(_leg(run), server["streams"], streams)
            figs = acc.figures()
            flag, workers = _flag_and_workers(run)
            ev = figs["event_err_ms"]
            ok = ev["p99"] is not None and ev["p99"] <= HOSTED_STAMP_P99_MS and not flag
            entry = {
                "round": rnd,
                "figures": figs,
                "client_bound": flag,
                "workers": workers,
                "cpu_s": run.cpu_s,
                "wall_s": run.wall_s,
                "cpu_us_per_token_whole_run": 1e6 * run.cpu_s / run.events if run.events else None,
                "workers_auto_said": auto_choice(run),
                "pass": ok,
            }
            within = run.in_level()
            if within is not None and figs["events"]:
                level_s = bl.level_wall_s(_measured(run))
                entry["cpu_us_per_token_in_level"] = 1e6 * within[0] / within[1]
                entry["cpu_share_in_level"] = within[0] / level_s if level_s else None
            out.setdefault(side.name, []).append(entry)
            print(
                f"   round {rnd + 1} {side.label:<22} stamp err p50/p99/max"
                f" {bl._f(ev['p50'], '.3f')}/{bl._f(ev['p99'], '.3f')}/{bl._f(ev['max'], '.2f')}"
                f" ms, TTFT err p50/p99 {bl._f(figs['ttft_err_ms']['p50'], '.3f')}/"
                f"{bl._f(figs['ttft_err_ms']['p99'], '.3f')} ms, peak in flight "
                f"{figs['peak_in_flight']}, {bl._f(figs['events_per_s'], '.0f')} events/s, "
                f"flagged {flag}, workers {workers} (auto), CPU {run.cpu_s:.1f} s over "
                f"{run.wall_s:.1f} s: {'PASS' if ok else 'MISS'}",
                flush=True,
            )
            print(
                f"     workers: auto chose {auto_choice(run) or '(not said)'}; in the level"
                f" {_us(entry.get('cpu_us_per_token_in_level')).strip()} µs CPU per token,"
                f" {bl._f(entry.get('cpu_share_in_level'), '.2f')} of one core"
            )
            if figs["unmatched_streams"] or figs["errors"]:
                print(f"    ! {figs['unmatched_streams']} unmatched; errors: {figs['errors']}")
    out["server_late_p99_ms"] = late
    print(f"  server wake-up late p99 (worst run) {bl._f(max(late) if late else None, '.3f')} ms")
    return out


def measure_profile(
    sides: list[Side],
    srv: ScriptedServer,
    level: int,
    args: argparse.Namespace,
    work: Path,
    measured_us: dict[str, float | None],
) -> dict[str, Any]:
    """Where each µs per token went at `level`: profiled full and short runs per side."""
    interval = bl._level_interval_ms(level, args)
    url = srv.url(interval_ms=interval, tokens=args.tokens)
    out: dict[str, Any] = {}
    for side in sides:
        parts: dict[str, dict[str, float]] = {}
        others: dict[str, dict[str, float]] = {}
        events: dict[str, int] = {}
        for kind, n in zip(("full", "short"), requests_per_run(level, args), strict=True):
            prof = work / f"profile-{side.name}-{kind}.prof"
            run = run_labkit(
                side,
                bl.runner_config(url, level, n, 1),
                work / f"profile-{side.name}-{kind}",
                profile=prof,
            )
            srv.stamps()
            (parts[kind], others[kind]), events[kind] = components_s(prof), run.events
        d_events = events["full"] - events["short"]
        names = sorted(set(parts["full"]) | set(parts["short"]))
        raw = {
            k: 1e6 * (parts["full"].get(k, 0.0) - parts["short"].get(k, 0.0)) / d_events
            for k in names
        }
        total = sum(raw.values())
        measured = measured_us.get(side.name)
        scale = measured / total if measured and total > 0 else 1.0
        other = {
            k: 1e6 * (v - others["short"].get(k, 0.0)) * scale / d_events
            for k, v in others["full"].items()
        }
        out[side.name] = {
            "other_top_us_per_token": dict(sorted(other.items(), key=lambda kv: -kv[1])[:6]),
            "profiled_us_per_token": total,
            "measured_us_per_token": measured,
            "components_us_per_token": {k: v * scale for k, v in raw.items()},
        }
    return out


def measure_steps(
    sides: list[Side], srv: ScriptedServer, level: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Where each µs per token went at `level`, by event-loop callback and task step
    (`_STEPPED`: thread CPU, no profiler's inflation), marginal over a full and a short run;
    the floor's the same way (`_FLOOR_STEPPED`, under ``"floor"``), so each part of labkit's
    excess over it shows."""
    interval = bl._level_interval_ms(level, args)
    url = srv.url(interval_ms=interval, tokens=args.tokens)
    runs = requests_per_run(level, args)
    out: dict[str, Any] = {}
    floors = [_floor_steps(srv, url, level, runs, work)]  # before the sides and after them
    for side in sides:
        got: dict[str, dict[str, list[int]]] = {}
        events: dict[str, int] = {}
        for kind, n in zip(("full", "short"), runs, strict=True):
            dump = work / f"steps-{side.name}-{kind}.json"
            config = bl.runner_config(url, level, n, 1)
            run = run_labkit(side, config, work / f"steps-{side.name}-{kind}", steps=dump)
            srv.stamps()
            got[kind], events[kind] = json.loads(dump.read_text()), run.events
        out[side.name] = _marginal_steps(
            got["full"], got["short"], events["full"] - events["short"]
        )
    floors.append(_floor_steps(srv, url, level, runs, work))
    # A burst of the host's noise in one single run moves a part by ~10 µs: the mean of two.
    out["floor"] = {
        key: (
            sum(f[key] for f in floors) / len(floors)
            if isinstance(floors[0][key], float)
            else floors[-1][key]
        )
        for key in floors[0]
    }
    return out


def _floor_steps(
    srv: ScriptedServer, url: str, level: int, runs: tuple[int, int], work: Path
) -> dict[str, Any]:
    """The floor's `_marginal_steps` over a full and a short run (`_FLOOR_STEPPED`)."""
    dump = work / "steps-floor.json"
    bench_dir = str(Path(__file__).resolve().parent)
    subprocess.run(
        [sys.executable, "-c", _FLOOR_STEPPED, bench_dir, str(dump), url, str(level)]
        + [str(n) for n in runs],
        check=True,
        timeout=1800,
    )
    srv.stamps()
    full, short = json.loads(dump.read_text())
    return _marginal_steps(full["steps"], short["steps"], full["events"] - short["events"])


#: The reader callbacks: one per read, labkit's (`Connection._on_readable`, a pushed
#: stream's `readpath.CommonPush`, or the C `readpath.Reader` a connection registers for its
#: life, which calls either) and the floor's
#: (asyncio's `_SelectorSocketTransport._read_ready`, with the protocol's `data_received`).
_READ_CALLBACKS = (
    "callback Connection._on_readable",
    "callback CommonPush",
    "callback Reader",
    "callback _SelectorSocketTransport._read_ready",
)


def _marginal_steps(
    full: dict[str, list[int]], short: dict[str, list[int]], d_events: int
) -> dict[str, Any]:
    """One side's `_STEP_TIMERS` dumps of a full and a short run as µs per token between
    them: the loop's own, the reader callbacks', the rest (a request's own work), and the
    largest rows."""
    per_token = {k: (full[k][0] - short.get(k, [0, 0])[0]) / 1e3 / d_events for k in full}
    calls = {k: (full[k][1] - short.get(k, [0, 0])[1]) / d_events for k in full}
    loop = per_token.pop("loop iterations", 0.0) - per_token.pop("loop callbacks", 0.0)
    calls.pop("loop iterations", None)
    rows = sorted(per_token.items(), key=lambda kv: -kv[1])
    reads = sum(us for key, us in per_token.items() if key in _READ_CALLBACKS)
    return {
        "loop_own_us_per_token": loop,
        "loop_iterations_per_token": (
            full["loop iterations"][1] - short.get("loop iterations", [0, 0])[1]
        )
        / d_events,
        "read_callbacks_us_per_token": reads,
        "rest_us_per_token": sum(per_token.values()) - reads,
        "rows_us_per_token": dict(rows[:12]),
        "rows_calls_per_token": {k: calls[k] for k, _ in rows[:12]},
        "total_us_per_token": loop + sum(per_token.values()),
    }


#: One event-loop wake-up's CPU on this host, measured apart: a fresh interpreter forks a
#: writer that sends a byte over a socketpair every `_WAKE_GAP_S` (busy-waiting, so its own
#: sleeps do not disturb the reader's core), and sleeps in ``epoll_wait`` for each, reading
#: it when woken; its user + system CPU over the wake-ups it had.
_WAKE_PROBE = """
import os, resource, select, socket, sys, time
wakes, gap = int(sys.argv[1]), float(sys.argv[2])
reader, writer = socket.socketpair()
pid = os.fork()
if pid == 0:
    reader.close()
    for _ in range(wakes):
        until = time.perf_counter() + gap
        while time.perf_counter() < until:
            pass
        writer.send(b"x")
    os._exit(0)
writer.close()
poller = select.epoll()
poller.register(reader.fileno(), select.EPOLLIN)
before, got, polls = resource.getrusage(resource.RUSAGE_SELF), 0, 0
while got < wakes:
    polls += 1
    if poller.poll(-1):
        data = reader.recv(65536)
        if not data:
            break
        got += len(data)
after = resource.getrusage(resource.RUSAGE_SELF)
os.waitpid(pid, 0)
cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
print(1e6 * cpu / polls)
"""
_WAKE_GAP_S = 0.0003


def wake_cost_us(wakes: int = 20_000) -> float | None:
    """CPU (µs) of one event-loop wake-up on this host: a sleep in ``epoll_wait`` ended by a
    loopback write, and the read (`_WAKE_PROBE`); None where the probe cannot run."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WAKE_PROBE, str(wakes), str(_WAKE_GAP_S)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return float(done.stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def print_steps(level: int, steps: dict[str, Any], sides: list[Side]) -> None:
    print(
        f"\n### where the CPU per token went at {level} streams, by event-loop callback and"
        " task step (thread CPU, marginal, µs per token; calls per token)\n"
    )
    shown = [(side.name, side.label) for side in sides]
    if "floor" in steps:
        shown.append(("floor", "floor (bare asyncio)"))
    for name, label in shown:
        got = steps[name]
        print(f"{label}: {got['total_us_per_token']:.1f} µs per token in the loop")
        print(
            f"  {got['loop_own_us_per_token']:6.2f}  the loop itself (selector, timers,"
            f" scheduling; {got['loop_iterations_per_token']:.2f} iterations per token)"
        )
        wake = steps.get("wake_us")
        if wake is not None:
            print(
                f"          of which its wake-ups about"
                f" {wake * got['loop_iterations_per_token']:.2f}"
                f" ({wake:.1f} µs of CPU per epoll sleep and wake-up on this host, measured"
                " apart: the kernel's, paid by any event loop, the floor's too)"
            )
        for key, us in got["rows_us_per_token"].items():
            print(f"  {us:6.2f}  {key} ({got['rows_calls_per_token'][key]:.2f})")
    floor = steps.get("floor")
    if floor is None:
        return
    print("\nover the floor, µs per token (instrumented: each callback's timer adds ~1 µs):")
    print("| | the loop itself | reader callbacks | the rest (task steps: a request's own work) |")
    print("|---|---|---|---|")
    parts = ("loop_own_us_per_token", "read_callbacks_us_per_token", "rest_us_per_token")
    print("| floor | " + " | ".join(f"{floor[p]:.2f}" for p in parts) + " |")
    for side in sides:
        got = steps[side.name]
        print(
            f"| {side.label} | "
            + " | ".join(f"{got[p]:.2f} ({got[p] - floor[p]:+.2f})" for p in parts)
            + " |"
        )


#: One pushed read's Python work, warm, by step (`readpath_warm.py`), run in each side's tree.
_WARM_SCRIPT = Path(__file__).resolve().parent / "readpath_warm.py"


def measure_warm_read(sides: list[Side]) -> dict[str, dict[str, float] | None]:
    """Each side's `readpath_warm.py` figures (µs a read by step); None where its labkit
    lacks what the probe drives (an older revision's lean transport)."""
    out: dict[str, dict[str, float] | None] = {}
    for side in sides:
        env = dict(os.environ, PYTHONPATH=str(side.tree), **side.env)
        done = subprocess.run(
            [sys.executable, str(_WARM_SCRIPT)],
            cwd=side.tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            out[side.name] = json.loads(done.stdout) if done.returncode == 0 else None
        except ValueError:
            out[side.name] = None
    return out


def print_warm_read(warm: dict[str, dict[str, float] | None], sides: list[Side]) -> None:
    """The warm per-read split, side by side (steps as `readpath_warm.py` names them)."""
    print(
        "\n### one pushed read's Python work, warm, µs a read (readpath_warm.py: the same 101"
        " reads through the lean body and the recorder in one process; no recvmsg, no loop)\n"
    )
    print("| step | " + " | ".join(s.label for s in sides) + " |")
    print("|---|" + "---|" * len(sides))
    names = list(dict.fromkeys(name for w in warm.values() if w for name in w))
    for name in names:
        cells = [warm[s.name] for s in sides]
        print(
            f"| {name} | "
            + " | ".join("n/a" if c is None or name not in c else f"{c[name]:.2f}" for c in cells)
            + " |"
        )


def print_profile(level: int, prof: dict[str, Any], sides: list[Side]) -> None:
    print(
        f"\n### where the CPU per token went at {level} streams (profile share of the measured"
        " CPU per token, µs)\n"
    )
    print("| component | " + " | ".join(s.label for s in sides) + " |")
    print("|---|" + "---|" * len(sides))
    order = [name for name, _ in COMPONENTS] + [OTHER]
    for name in order:
        cells = [prof[s.name]["components_us_per_token"].get(name) for s in sides]
        if all(c is None for c in cells):
            continue
        print(f"| {name} | " + " | ".join(_us(c).strip() for c in cells) + " |")
    print(
        "| **total (measured, unprofiled)** | "
        + " | ".join(_us(prof[s.name]["measured_us_per_token"]).strip() for s in sides)
        + " |"
    )
    print(
        "| (profiled total, before scaling) | "
        + " | ".join(_us(prof[s.name]["profiled_us_per_token"]).strip() for s in sides)
        + " |"
    )
    for side in sides:
        top = prof[side.name]["other_top_us_per_token"]
        print(
            f"\n{side.label}, the most of {OTHER}: "
            + "; ".join(f"{k} {v:.1f}" for k, v in top.items())
        )


def floor_ratios(out: dict[str, Any], side: Side) -> tuple[float | None, float | None]:
    """`side`'s CPU per token at one level as a multiple of the floor measured beside it in
    the same run: (marginal, within the level); None where either is missing."""
    floor = out.get("floor_us_per_token")
    s = out[side.name]
    return (
        bl._ratio(s["cpu_us_per_token"], floor),
        bl._ratio(s["cpu_us_per_token_in_level"], floor),
    )


def _per_round_ratios(us: list[float | None], out: dict[str, Any]) -> list[float]:
    """Each round's µs per token over the floor measured in the same round (rounds where
    either is missing left out)."""
    floors = out["floor_us_per_token_rounds"]
    return [u / f for u, f in zip(us, floors, strict=False) if u is not None and f]


def floor_ratio_means(out: dict[str, Any], side: Side) -> tuple[Mean, Mean]:
    """`side`'s labkit ÷ floor at one level, each round's paired with the floor measured in
    that round, as a mean over the rounds with its 95% t-interval (`labkit.analysis.stats`):
    (marginal, within the level). No interval under two rounds."""
    rounds = out[side.name].get("floor_ratio_rounds", {})
    return mean(rounds.get("marginal", [])), mean(rounds.get("in_level", []))


def floor_verdict(out: dict[str, Any], side: Side) -> bool | None:
    """Whether `side` is within `FLOOR_RATIO_TARGET` of the floor at one level, both the
    marginal and the in-level figure (the marginal one alone swings by tens of µs a round
    with a short run's start-up, so one lucky run could pass on it), as far as the rounds
    can tell: True where the rounds' 95% intervals of both ratios lie at or under the
    target, False where either's lies above it, None where an interval holds the target
    (the rounds' spread cannot tell: an A/A run of one labkit on both sides has differed by
    0.3x) or a figure is missing. Under two rounds, the pooled figures as they are."""
    means = floor_ratio_means(out, side)
    if all(m.n >= 2 and m.lo is not None and m.hi is not None for m in means):
        if all(m.hi is not None and m.hi <= FLOOR_RATIO_TARGET for m in means):
            return True
        if any(m.lo is not None and m.lo > FLOOR_RATIO_TARGET for m in means):
            return False
        return None
    marginal, in_level = floor_ratios(out, side)
    ok_m, ok_i = bl._le(marginal, FLOOR_RATIO_TARGET), bl._le(in_level, FLOOR_RATIO_TARGET)
    return None if ok_m is None or ok_i is None else ok_m and ok_i


def _floor_word(ok: bool | None) -> str:
    """PASS, MISS, or UNSURE where the run cannot tell."""
    return "PASS" if ok else ("MISS" if ok is not None else "UNSURE")


def _rounds_cell(out: dict[str, Any], side: Side) -> str:
    """The rounds' mean ratios with their 95% intervals, where there are two rounds or more."""
    marginal, in_level = floor_ratio_means(out, side)

    def one(m: Mean) -> str:
        if m.lo is None or m.hi is None:
            return f"{bl._f(m.value, '.2f')}x"
        return f"{m.value:.2f}x [{m.lo:.2f}, {m.hi:.2f}]"

    return f"rounds {one(marginal)} / in level {one(in_level)}"


def print_floor_ratios(level: int, out: dict[str, Any], sides: list[Side]) -> None:
    """The level's yardstick line: labkit ÷ the floor measured in this run, each side."""
    floor = out.get("floor_us_per_token")
    cells = []
    for side in sides:
        marginal, in_level = floor_ratios(out, side)
        cells.append(
            f"{side.name} {bl._f(marginal, '.2f')}x (in level {bl._f(in_level, '.2f')}x;"
            f" {_rounds_cell(out, side)})"
        )
    word = _floor_word(floor_verdict(out, sides[-1]))
    goal = "" if level in FLOOR_TARGET_LEVELS else " (not a target level)"
    print(
        f"  {word}  {level} stream(s): labkit ÷ floor ({_us(floor).strip()} µs/token) <="
        f" {FLOOR_RATIO_TARGET:g}x{goal}: " + "; ".join(cells)
    )


def one_stream(out: dict[str, Any], sides: list[Side]) -> dict[str, Any]:
    """The one-stream figures of each side: the client-side part of TTFT per record (the
    request path: ``client.request_sent_ms``, t_start to the request's last byte handed to
    the kernel; and the server's receipt of it less t_start) and the TTFT error against the
    truth server's log, p50 and p99, with the TTFT error target."""
    got: dict[str, Any] = {}
    for side in sides:
        f = out[side.name]["figures"]
        p99 = f["ttft_err_ms"]["p99"]
        got[side.name] = {
            "request_sent_ms": f["request_sent_ms"],
            "request_path_ms": f["request_path_ms"],
            "ttft_err_ms": f["ttft_err_ms"],
            "pass": bl._le(p99, ONE_STREAM_TTFT_ERR_P99_MS),
        }
    return got


def print_one_stream(got: dict[str, Any], sides: list[Side], load: str) -> None:
    print(
        "\n### one stream: TTFT's client-side part (the request path) and TTFT error against"
        f" the truth server (host load when measured: {load})\n"
    )
    print(
        "| labkit | request sent (t_start → last byte to the kernel) p50 / p99 / max ms |"
        " server's receipt − t_start p50 / p99 ms | TTFT error p50 / p99 / max ms | n |"
    )
    print("|---|---|---|---|---|")
    for side in sides:
        g = got[side.name]
        sent, path, err = g["request_sent_ms"], g["request_path_ms"], g["ttft_err_ms"]
        print(
            f"| {side.label} | {bl._f(sent['p50'], '.3f')} / {bl._f(sent['p99'], '.3f')} /"
            f" {bl._f(sent['max'], '.3f')} | {bl._f(path['p50'], '.3f')} /"
            f" {bl._f(path['p99'], '.3f')} | {bl._f(err['p50'], '.3f')} /"
            f" {bl._f(err['p99'], '.3f')} / {bl._f(err['max'], '.3f')} | {err['n']} |"
        )


def _host_load() -> str:
    """The 1-minute load average and CPU count, to say how idle the host was."""
    try:
        return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    except OSError:
        return "load average unknown"


def print_summary(
    levels: dict[int, Any],
    hosted: dict[str, Any] | None,
    sides: list[Side],
    single: dict[str, Any] | None = None,
) -> list[tuple[str, bool | None, str]]:
    """The before → after table, labkit ÷ floor per level, and the targets."""
    b, a = sides
    print(f"\n### before ({b.label}) → after ({a.label})\n")
    print(
        "| streams | CPU µs/token | ratio | in level | floor | ÷ floor (marginal) |"
        " ÷ floor (in level) | stamp error p50 / p99 ms | TTFT error p50 / p99 ms | flagged |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for level, out in levels.items():
        bo, ao = out[b.name], out[a.name]
        bf, af = bo["figures"], ao["figures"]
        ratio = bl._ratio(ao["cpu_us_per_token"], bo["cpu_us_per_token"])
        (bm, bi), (am, ai) = floor_ratios(out, b), floor_ratios(out, a)
        print(
            f"| {level} | {bl._cell(bo['cpu_us_per_token'], ao['cpu_us_per_token'], '.1f')} |"
            f" {bl._f(ratio, '.2f')}x |"
            f" {bl._cell(bo['cpu_us_per_token_in_level'], ao['cpu_us_per_token_in_level'], '.1f')}"
            f" | {_us(out.get('floor_us_per_token')).strip()} |"
            f" {bl._cell(bm, am, '.2f')} | {bl._cell(bi, ai, '.2f')} |"
            f" {bl._cell(bf['event_err_ms']['p50'], af['event_err_ms']['p50'], '.3f')} /"
            f" {bl._cell(bf['event_err_ms']['p99'], af['event_err_ms']['p99'], '.3f')} |"
            f" {bl._cell(bf['ttft_err_ms']['p50'], af['ttft_err_ms']['p50'], '.3f')} /"
            f" {bl._cell(bf['ttft_err_ms']['p99'], af['ttft_err_ms']['p99'], '.3f')} |"
            f" {any(bo['client_bound'])} → {any(ao['client_bound'])} |"
        )
    targets: list[tuple[str, bool | None, str]] = []
    for level, out in levels.items():
        (bm, bi), (am, ai) = floor_ratios(out, b), floor_ratios(out, a)
        before_ok = floor_verdict(out, b)
        targets.append(
            (
                f"{level} stream(s): labkit CPU per token <= {FLOOR_RATIO_TARGET:g} x the floor"
                " measured in this run, marginal and within the level"
                + ("" if level in FLOOR_TARGET_LEVELS else " (shown, not a target level)"),
                floor_verdict(out, a),
                f"after {_us(out[a.name]['cpu_us_per_token']).strip()} µs"
                f" ({bl._f(am, '.2f')}x), in level"
                f" {_us(out[a.name]['cpu_us_per_token_in_level']).strip()} µs"
                f" ({bl._f(ai, '.2f')}x); floor {_us(out.get('floor_us_per_token')).strip()} µs;"
                f" ({_rounds_cell(out, a)}); before {bl._f(bm, '.2f')}x / {bl._f(bi, '.2f')}x"
                f" ({_floor_word(before_ok)})",
            )
        )
    if single is not None:
        g, gb = single[a.name], single[b.name]
        targets.append(
            (
                f"1 stream: TTFT error p99 <= {ONE_STREAM_TTFT_ERR_P99_MS:g} ms against the truth"
                " server (the target holds on an idle host; this one's load is printed above)",
                g["pass"],
                f"after p50 / p99 {bl._f(g['ttft_err_ms']['p50'], '.3f')} /"
                f" {bl._f(g['ttft_err_ms']['p99'], '.3f')} ms, request sent p50 / p99"
                f" {bl._f(g['request_sent_ms']['p50'], '.3f')} /"
                f" {bl._f(g['request_sent_ms']['p99'], '.3f')} ms; before"
                f" {bl._f(gb['ttft_err_ms']['p50'], '.3f')} /"
                f" {bl._f(gb['ttft_err_ms']['p99'], '.3f')} ms",
            )
        )
    if hosted:
        label = (
            f"{hosted['streams']} streams at {hosted['interval_ms']:g} ms: stamp p99 <= "
            f"{HOSTED_STAMP_P99_MS:g} ms and not flagged client-bound"
        )

        def said(side: Side) -> str:
            runs = hosted.get(side.name) or []
            return "; ".join(
                f"stamp p99 {bl._f(r['figures']['event_err_ms']['p99'], '.3f')} ms, "
                f"{'flagged' if r['client_bound'] else 'not flagged'}, workers {r['workers']}"
                for r in runs
            )

        runs = hosted.get(a.name) or []
        ok = bool(runs) and all(r["pass"] for r in runs)
        before_ok = all(r["pass"] for r in hosted.get(b.name) or [{"pass": False}])
        targets.append(
            (
                label,
                ok,
                f"after: {said(a)} | before ({'PASS' if before_ok else 'MISS'}): {said(b)}",
            )
        )
    print("\ntargets (issue 47; on a shared host: each ratio is to a floor measured beside it):")
    for text, ok, detail in targets:
        word = _floor_word(ok)  # None: this run cannot tell (a missing figure, or noise)
        print(f"  {word}  {text}: {detail}")
    return targets


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of 'before'")
    parser.add_argument(
        "--after", default=None, help="git revision of 'after' (default: this working tree)"
    )
    parser.add_argument("--levels", default="1,32,256")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--requests-scale",
        type=float,
        default=1.0,
        help="requests per full run: from 32 streams whole waves of about 2,000 requests "
        "(at least 8), below max(100, 20 x streams); times this (at least 2 waves; a "
        "short run has a fifth, at least 1 wave)",
    )
    bl.add_stream_shape(parser)
    parser.add_argument("--workers", default="auto", help="the levels' `workers` (auto or N)")
    parser.add_argument("--hosted-streams", type=int, default=1000)
    parser.add_argument("--hosted-interval-ms", type=float, default=30.0)
    parser.add_argument("--hosted-requests", type=int, default=2000)
    parser.add_argument("--hosted-rounds", type=int, default=1)
    parser.add_argument("--server-cpus", default=None, help="hosted level: default 0")
    parser.add_argument("--labkit-cpus", default=None, help="hosted level: default the others")
    parser.add_argument("--profile-level", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    return parser


def main() -> None:
    """Run every level, the hosted-pace level and the profile; print the tables."""
    args = _parser().parse_args()
    if args.workers != "auto":
        args.workers = int(args.workers)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    all_cpus = os.sched_getaffinity(0)
    server_cpus = _cpus(args.server_cpus, {min(all_cpus)})
    labkit_cpus = _cpus(args.labkit_cpus, (all_cpus - server_cpus) or all_cpus)
    nofile = raise_open_files_limit(4 * max([*levels, args.hosted_streams]) + 1024)
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        work = Path(tmp)
        before_tree = bl.archive_labkit(args.before, work / "before-tree")
        after_tree, after_name = bl._REPO, bl._tree_revision(bl._REPO)
        if args.after:
            after_tree, after_name = bl.archive_labkit(args.after, work / "after-tree"), args.after
        sides = [
            Side("before", before_tree, work / "cache-before", f"before {args.before}"),
            Side("after", after_tree, work / "cache-after", f"after {after_name}"),
        ]
        for side in sides:  # compiled once here, not in the first measured run
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(side.tree / "labkit")])
            print(f"{side.label}: labkit from {_check_tree(side)}")
        print(
            f"truth server (own process) on 127.0.0.1: first token {args.ttft_ms:g} ms; "
            f"labkit run as a child process per run, `workers: {args.workers}`; "
            f"{args.rounds} round(s) per level, order alternating; open files {nofile}; "
            f"CPUs here {sorted(all_cpus)} (shared with whatever else runs on this host)",
            flush=True,
        )
        results: dict[int, Any] = {}
        hosted: dict[str, Any] | None = None
        profile: dict[str, Any] | None = None
        with ScriptedServer(
            ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
        ) as srv:
            warm_floor(srv, levels[0], args)
            for level in levels:
                results[level] = measure_level(sides, srv, level, args, work)
            if args.profile_level:
                if args.profile_level in results:
                    measured = {
                        s.name: results[args.profile_level][s.name]["cpu_us_per_token"]
                        for s in sides
                    }
                else:
                    measured = {s.name: None for s in sides}
                profile = measure_profile(sides, srv, args.profile_level, args, work, measured)
                print_profile(args.profile_level, profile, sides)
                profile["steps"] = measure_steps(sides, srv, args.profile_level, args, work)
                profile["steps"]["wake_us"] = wake_cost_us()
                print_steps(args.profile_level, profile["steps"], sides)
                profile["warm_read_us"] = measure_warm_read(sides)
                print_warm_read(profile["warm_read_us"], sides)
            if args.hosted_streams:
                _server_pinned(srv, server_cpus)
                print(f"\nserver pinned to CPUs {sorted(server_cpus)}")
                hosted = measure_hosted(sides, srv, args, work, labkit_cpus)
        single = None
        if 1 in results:
            single = one_stream(results[1], sides)
            print_one_stream(single, sides, results[1].get("host_load", _host_load()))
        targets = print_summary(results, hosted, sides, single)
    if args.json:
        payload = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "sides": [{"name": s.name, "label": s.label} for s in sides],
            "levels": results,
            "profile": profile,
            "one_stream": single,
            "hosted": hosted,
            "targets": [{"target": t, "pass": ok, "detail": d} for t, ok, d in targets],
        }
        args.json.write_text(json.dumps(bl._strict_json(payload), indent=2, default=str))
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
