"""What a `labkit run` spends per record outside its level: the phases after the last byte.

Issue 47's CPU mark is read two ways by `bench_cpu.py`: *marginal* (the whole ``labkit run``
process tree's CPU of a full run less a short run's, over the difference in output events)
and *in level* (the tree's CPU over the level's own span). The marginal figure also counts
every per-record cost paid after the level: the load experiment's figures, lab.json, the
summary, the columnar sidecar's converters, the worker processes' exit, the interpreter's
teardown. This bench says where that goes.

Method. The bench's own config (`bench_load.runner_config`, the truth server
`scripted_server.py` in its own process, as `bench_cpu.py` starts them) at one level, a
run of N requests and one of 5N (``--requests``), each a real ``labkit run --no-report``
in a child process (`bench_cpu.run_labkit`, its tree's CPU from ``getrusage`` and /proc
every 50 ms). A prelude in the child times each phase after the level in the runner's own
process (user + system of ``RUSAGE_SELF``, threads included, and of ``RUSAGE_CHILDREN``:
children reaped in that phase): the executor's close, the folder's close, the manifest,
the sidecar's last part (`SidecarWriter.finish`), traces, the experiments' figures
(`Runner.analyze`, of which the load experiment's ``judged`` and ``request_stats``),
lab.json, the summary (`labkit.cli.app._print_result`) and the rest until ``atexit``;
the teardown after ``atexit`` is the tree's total less what the prelude saw by then.
Beside them: the tree's CPU from the level's last byte to the end (the /proc samples
interpolated), and the manifest's ``host_cpu`` (``labkit_cpu_s``, ``sidecar_cpu_s``).
Each phase's cost per record is (5N run − N run) ÷ 4N; per token ÷ the tokens a record
carries; with ``--repeats R``, the median over R pairs (the sides alternating which runs
first): on a shared host one pair's phases swing by tens of µs a record.

``--before REV``: the same pair of runs by labkit of git revision REV first (`git archive`,
as `bench_cpu.py` runs its "before"), its table above this tree's.
``--profile``: the same two runs once more with ``workers: 1`` and cProfile from the
level's end to ``atexit``; the functions whose self time grows most per record are printed.

Run: ``.venv/bin/python benchmarks/bench_after_level.py [--level 32] [--requests 640]
[--workers auto] [--before main] [--repeats 1] [--profile]
[--tokens 100 --interval-ms 2 --ttft-ms 50]
[--json OUT]``.
A benchmark, not a test: on 2 shared cores the figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench_cpu as bc
import bench_load as bl
import numpy
from scripted_server import ScriptedServer, raise_open_files_limit

#: Runs ``labkit run ARGS`` with the phases after the level timed (the module docstring);
#: dumps JSON to OUT at exit. PROFILE (a path or "") : cProfile from the level's end.
_PHASES = """
import atexit, cProfile, functools, inspect, json, resource, runpy, sys
out, prof_out, sys.argv = sys.argv[1], sys.argv[2], ["labkit", *sys.argv[3:]]
acc = {}
prof = cProfile.Profile() if prof_out else None
def usage():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime, gc.get_stats()[2]["collections"]
import gc
def add(name, a, b):
    got = acc.setdefault(name, [0.0, 0.0, 0, 0])
    got[0] += b[0] - a[0]; got[1] += b[1] - a[1]; got[2] += 1; got[3] += b[2] - a[2]
def timed(name, fn, first=False):
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            if first and prof is not None and "level end" not in acc:
                prof.enable()
            if first and "level end" not in acc:
                acc["level end"] = list(usage())
            a = usage()
            try:
                return await fn(*args, **kwargs)
            finally:
                add(name, a, usage())
        return wrapper
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        a = usage()
        try:
            return fn(*args, **kwargs)
        finally:
            add(name, a, usage())
    return wrapper
from labkit.runner import run as rmod, results, sidecar, workers, executor
from labkit.experiments import base
import labkit.cli.app
app = sys.modules["labkit.cli.app"]
for cls in (workers.HostExecutor, executor.InProcessExecutor):
    cls.close = timed("executor close", cls.close, first=True)
results.RunFolder.close = timed("folder close", results.RunFolder.close)
results.RunFolder.write_manifest = timed("manifest", results.RunFolder.write_manifest)
results.RunFolder.write_lab = timed("lab.json", results.RunFolder.write_lab)
sidecar.SidecarWriter.finish = timed("sidecar finish", sidecar.SidecarWriter.finish)
rmod.Runner._export_traces = timed("traces", rmod.Runner._export_traces)
rmod.Runner.analyze = timed("analyze", rmod.Runner.analyze)
rmod.request_stats = timed("analyze: request_stats", rmod.request_stats)
base.Experiment.judged = timed("analyze: judged", base.Experiment.judged)
app._print_result = timed("summary", app._print_result)
def at_exit():
    if prof is not None:
        prof.disable()
        prof.dump_stats(prof_out)
    acc["at exit"] = list(usage())
    with open(out, "w") as f:
        json.dump(acc, f)
atexit.register(at_exit)
runpy.run_module("labkit", run_name="__main__", alter_sys=True)
"""

#: The phases printed, in order (own: the runner's own CPU; kids: children reaped in it).
PHASES = (
    "executor close",
    "folder close",
    "manifest",
    "sidecar finish",
    "traces",
    "analyze",
    "analyze: judged",
    "analyze: request_stats",
    "lab.json",
    "summary",
)


def _one(
    side: bc.Side,
    url: str,
    level: int,
    n: int,
    workers: int | str,
    work: Path,
    profile: bool,
) -> dict[str, Any]:
    """One run of `n` requests; its phases' CPU (s) and the tree's."""
    work.mkdir(parents=True)
    phases_file, prof_file = work / "phases.json", work / "after.prof"
    # run_labkit passes labkit's arguments after the prelude: OUT and PROFILE go first.
    side_args = bc.Side(side.name, side.tree, side.cache, side.label)
    side_args.prelude = (
        f"import sys; sys.argv[1:1] = [{str(phases_file)!r}, "
        f"{str(prof_file) if profile else ''!r}]\n" + _PHASES
    )
    run = bc.run_labkit(side_args, bl.runner_config(url, level, n, workers), work / "run")
    phases = json.loads(phases_file.read_text())
    (folder,) = (work / "run" / "runs").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    measured = [r for r in run.records if not r.warmup]
    t_end = min(r.t_start_mono_ns for r in measured) + bl.level_wall_s(measured) * 1e9
    times = [t for t, _ in run.samples]
    t_start = min(r.t_start_mono_ns for r in measured)
    tree_at_start, tree_at_end = (
        float(x) for x in numpy.interp([t_start, t_end], times, [c for _, c in run.samples])
    )
    at_exit = phases["at exit"]
    out: dict[str, Any] = {
        "records": len(run.records),
        "events": run.events,
        "tree_cpu_s": run.cpu_s,
        "tree_before_level_s": tree_at_start,
        "tree_in_level_s": tree_at_end - tree_at_start,
        "tree_after_last_byte_s": run.cpu_s - tree_at_end,
        "teardown_s": run.cpu_s - at_exit[0] - at_exit[1],
        "host_cpu": manifest.get("host_cpu") or {},
        "workers": bc._flag_and_workers(run)[1],
        "records_bytes": (folder / "records.jsonl").stat().st_size,
        "phases": {k: v for k, v in phases.items() if k not in ("at exit", "level end")},
    }
    end = phases.get("level end")
    if end is not None:  # the runner's own CPU from the level's end to atexit
        out["own_after_level_s"] = at_exit[0] - end[0]
        out["kids_after_level_s"] = at_exit[1] - end[1]
        out["full_gcs_after_level"] = at_exit[2] - end[2]
    if profile:
        out["profile"] = str(prof_file)
    return out


def _per_record(small: dict[str, Any], big: dict[str, Any], key: Any) -> float:
    """µs per record of `key` (a function of a run's figures) between the two runs."""
    d = big["records"] - small["records"]
    return 1e6 * (key(big) - key(small)) / d if d > 0 else float("nan")


def _phase(name: str, which: int) -> Any:
    return lambda run: run["phases"].get(name, [0.0, 0.0, 0, 0])[which]


def print_table(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, float]:
    """The table: each phase's µs per record and per token, the runner's own and children's,
    the median over the pairs of runs (N, 5N); the full collections of the first pair."""
    small, big = pairs[0]
    tokens = statistics.median(
        (b["events"] - a["events"]) / (b["records"] - a["records"]) for a, b in pairs
    )
    rows: dict[str, float] = {}
    print(
        f"\n  {small['records']} and {big['records']} records"
        f" ({big['records_bytes'] / big['records']:,.0f} bytes each in records.jsonl),"
        f" workers {small['workers']}/{big['workers']}; µs per record (÷ {tokens:g} tokens:"
        f" per token), the median of {len(pairs)} pair(s)"
    )
    print(
        f"  {'phase':<34} {'own µs/rec':>11} {'kids µs/rec':>12} {'µs/token':>9}"
        f" {'full GCs (N, 5N)':>17}"
    )

    def row(name: str, own: Any, kids: Any | None = None, gcs: Any | None = None) -> None:
        o = statistics.median(_per_record(a, b, own) for a, b in pairs)
        k = statistics.median(_per_record(a, b, kids) for a, b in pairs) if kids else 0.0
        rows[name] = o + k
        kids_text = f"{k:12.1f}" if kids is not None else f"{'':>12}"
        gc_text = f"{gcs(small):>8} {gcs(big):>8}" if gcs is not None else ""
        print(f"  {name:<34} {o:11.1f} {kids_text} {(o + k) / tokens:9.2f} {gc_text}")

    for name in PHASES:
        row(name, _phase(name, 0), _phase(name, 1), _phase(name, 3))
    row(
        "runner after level, to atexit",
        lambda r: r.get("own_after_level_s", 0.0),
        lambda r: r.get("kids_after_level_s", 0.0),
        lambda r: r.get("full_gcs_after_level", 0),
    )
    row("teardown after atexit (tree)", lambda r: r["teardown_s"])
    row("tree: start to level (/proc)", lambda r: r["tree_before_level_s"])
    row("tree: in level (/proc)", lambda r: r["tree_in_level_s"])
    row("tree: last byte to exit (/proc)", lambda r: r["tree_after_last_byte_s"])
    row("tree: whole run", lambda r: r["tree_cpu_s"])
    row("manifest host_cpu.labkit_cpu_s", lambda r: r["host_cpu"].get("labkit_cpu_s") or 0.0)
    row("manifest host_cpu.sidecar_cpu_s", lambda r: r["host_cpu"].get("sidecar_cpu_s") or 0.0)
    return rows


def print_profile(small: dict[str, Any], big: dict[str, Any], top: int = 25) -> None:
    """Functions whose self time from the level's end grows most per record."""

    def selftimes(path: str) -> dict[str, float]:
        stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
        return {f"{Path(f).name}:{line}({fn})": v[2] for (f, line, fn), v in stats.items()}

    a, b = selftimes(small["profile"]), selftimes(big["profile"])
    d = big["records"] - small["records"]
    grown = sorted(((b[k] - a.get(k, 0.0), k) for k in b), reverse=True)[:top]
    print("\n  cProfile from the level's end (workers: 1), self time µs per record (inflated):")
    for s, k in grown:
        print(f"  {1e6 * s / d:9.1f}  {k}")


def main() -> None:
    """Run the two runs (and the profiled pair); print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    bl.add_stream_shape(parser)
    parser.add_argument("--level", type=int, default=32)
    parser.add_argument("--requests", type=int, default=640, help="N: runs of N and 5N")
    parser.add_argument("--workers", default="auto")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--before", default=None, help="also run labkit of this git revision")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs a side (median)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    workers: int | str = args.workers if args.workers == "auto" else int(args.workers)
    raise_open_files_limit(4 * args.level + 1024)
    tree = Path(__file__).resolve().parents[1]
    result: dict[str, Any] = {"host_load": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-after-") as tmp:
        work = Path(tmp)
        sides = [bc.Side("after", tree, work / "cache-after", "this tree")]
        if args.before:
            before = bl.archive_labkit(args.before, work / "before-tree")
            sides.insert(0, bc.Side("before", before, work / "cache-before", args.before))
        for side in sides:
            print(f"{side.name}: labkit from {bc._check_tree(side)}", flush=True)
        with ScriptedServer(
            ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
        ) as srv:
            url = srv.url(interval_ms=bl._level_interval_ms(args.level, args), tokens=args.tokens)
            print(
                f"{args.level} streams, {args.tokens} tokens a record; load average"
                f" {result['host_load'][0]:.2f} (a shared host)",
                flush=True,
            )
            pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
                side.name: [] for side in sides
            }
            for rnd in range(args.repeats):  # the sides alternate which goes first
                for side in sides if rnd % 2 == 0 else sides[::-1]:
                    base = work / f"{side.name}-{rnd}"
                    small = _one(side, url, args.level, args.requests, workers, base / "n", False)
                    srv.stamps()
                    n5 = 5 * args.requests
                    big = _one(side, url, args.level, n5, workers, base / "5n", False)
                    srv.stamps()
                    pairs[side.name].append((small, big))
                    print(f"  {side.name} pair {rnd + 1} done", flush=True)
            for side in sides:
                print(f"\n{side.name} ({side.label}):", end="")
                result[side.name] = {
                    "table": print_table(pairs[side.name]),
                    "runs": pairs[side.name],
                }
                if args.profile:
                    base = work / f"{side.name}-profile"
                    ps = _one(side, url, args.level, args.requests, 1, base / "pn", True)
                    srv.stamps()
                    pb = _one(side, url, args.level, 5 * args.requests, 1, base / "p5n", True)
                    srv.stamps()
                    print_profile(ps, pb)
    result["host_load_end"] = os.getloadavg()
    print(f"\n  load average at the end {result['host_load_end'][0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
