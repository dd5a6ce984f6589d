"""Benchmark: the report over 10⁵, 10⁶ and 10⁷ synthetic records (not a test; run by hand).

    .venv/bin/python benchmarks/bench_report.py --ladder [--sizes 100000,1000000,10000000]
    .venv/bin/python benchmarks/bench_report.py [--records 100000] [--keep DIR] [--traced]
    .venv/bin/python benchmarks/bench_report.py --compare-only [--compare 1000000]
    .venv/bin/python benchmarks/bench_report.py --priced 1000000   (a run with prices: `priced`)

`make bench-report` runs the ladder: for each size, a run folder of realistic records
(several providers and experiments, ~2% errors, warm-ups, 64 event offsets each, no
lab.json: the report computes every statistic from the records) is recorded as labkit
records a run: records.jsonl written from a template (`build_fast`, not timed) while the
runner's own `SidecarWriter` has the columnar sidecar's parts converted as it grows (child
processes at the lowest priority, the last part at the run's end: "recording's conversion",
printed apart, not the report's). Then, in a fresh process (its own peak RSS), the first
`write_report`; each line with its bound (10⁵ and 10⁶: 20 s; 10⁷: 60 s; 1 GiB), PASS or
MISS, and the host's load average. At 10⁶ the report as main read it (records.jsonl whole,
no sidecar) runs on the same run, and "a run with no sidecar (an old run)": the one-time
conversion its first reader does (at 10⁷ too with --foreign-10e7: minutes); `compare` of
two 10⁶ runs runs last, unpaired (both recorded so) and paired (`compare_pair`; their
sidecars built by a first reader, not timed; alone with --compare-only). Each run folder
is deleted after (10⁷ is about 34 GiB: check `df -h /tmp`; two are never kept at once).

With --records, one run (built record by record with pydantic; kept with --keep DIR),
`write_report` timed as its first report (a run of 64 MiB or more builds its sidecar inside
it, a kept run's later reports read it); --traced adds the tracemalloc peak.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from labkit.records import (
    AppTimings,
    ClientTimings,
    ProviderTimings,
    RecordError,
    RequestRecord,
    Usage,
)
from labkit.report import write_report

PROVIDERS = [
    # id, kind, model, base TTFT ms, decode ms/token, reports its own timings
    ("openai", "openai", "gpt-4o-mini", 350.0, 12.0, False),
    ("anthropic", "anthropic", "claude-haiku", 450.0, 14.0, False),
    ("local", "llamacpp", "qwen2.5-0.5b", 40.0, 6.0, True),
    ("ollama", "openai_compatible", "llama3.2:1b", 60.0, 9.0, True),
]
EXPERIMENTS = ["single", "token_ratio", "determinism", "prefill_decode", "attribution"]
EVENTS = 64
#: The priced case's table (`--priced`): an entry per synthetic provider × model, in force
#: before the records' start times (per 1M tokens; made-up figures).
PRICES = [
    {"provider": p[0], "model": p[2], "date": "2024-01-01", "input": inp, "output": out}
    for p, (inp, out) in zip(
        PROVIDERS, [(0.15, 0.60), (0.80, 4.00), (0.0, 0.0), (0.02, 0.05)], strict=True
    )
]


def build(run_dir: Path, n: int, seed: int = 7) -> None:
    """Write `n` records and a manifest into `run_dir`."""
    rng = random.Random(seed)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "records.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(n):
            pid, kind, model, base, step, reports = PROVIDERS[i % len(PROVIDERS)]
            exp = EXPERIMENTS[(i // len(PROVIDERS)) % len(EXPERIMENTS)]
            prompt_tokens = rng.choice([128, 256, 512, 1024, 2048])
            ttft = base + 0.05 * prompt_tokens + rng.lognormvariate(0, 0.4) * 20
            gaps = [max(0.1, rng.gauss(step, step / 4)) for _ in range(EVENTS - 1)]
            offsets = [ttft]
            for g in gaps:
                offsets.append(offsets[-1] + g)
            decode = (offsets[-1] - ttft) / (EVENTS - 1)
            failed = rng.random() < 0.02
            rec = RequestRecord(
                run_id="bench",
                record_id=f"r{i}",
                experiment=exp,
                trial=i,
                warmup=i < 40,
                provider=pid,
                provider_kind=kind,
                model=model,
                params={"temperature": 0.0, "max_tokens": EVENTS, "seed": 1},
                prompt_id=f"{exp}-{prompt_tokens}",
                prompt_chars=prompt_tokens * 4,
                prompt_bytes=prompt_tokens * 4,
                started_at=t0 + timedelta(milliseconds=10 * i),
                client=ClientTimings(
                    connect_ms=rng.uniform(1, 20) if i % 50 == 0 else None,
                    request_sent_ms=0.4,
                    headers_ms=ttft * 0.8,
                    first_event_ms=ttft,
                    ttft_ms=ttft,
                    last_token_ms=offsets[-1],
                    e2e_ms=offsets[-1] + 1.5,
                    decode_ms_per_token=decode,
                    output_tokens_per_s=1000 / decode,
                    event_offsets_ms=offsets,
                    itl_ms_p50=step,
                    itl_ms_p99=step * 2,
                    itl_ms_max=max(gaps),
                ),
                provider_timings=ProviderTimings(
                    prefill_ms=ttft * 0.85 if reports else None,
                    prefill_tokens=prompt_tokens if reports else None,
                    decode_ms=decode * (EVENTS - 1) * 0.95 if reports else None,
                    decode_ms_per_token=decode * 0.95 if reports else None,
                    raw={"prompt_ms": ttft * 0.85} if reports else None,
                ),
                app=AppTimings(
                    prepare_ms=rng.uniform(0.2, 2),
                    parse_cpu_ms=rng.uniform(0.5, 3),
                    client_path="sdk" if exp == "attribution" and i % 2 else "wire",
                ),
                usage=Usage(
                    input_tokens=prompt_tokens,
                    output_tokens=EVENTS,
                    output_tokens_source="provider",
                ),
                stop_reason="error" if failed else "length",
                tags={"target_prompt_tokens": prompt_tokens},
                output_text="lorem ipsum " * 20,
                error=RecordError(kind="http_status", message="HTTP 529 overloaded", status=529)
                if failed
                else None,
            )
            fh.write(rec.to_json_line() + "\n")
    manifest = {
        "run_id": "bench",
        "name": "bench",
        "status": "completed",
        "records": n,
        "providers": {p[0]: {"kind": p[1], "model": p[2], "status": "ok"} for p in PROVIDERS},
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


_RID = "__rid__"
_TRIAL = 987654321
_POOL = 4000  # a multiple of providers × experiments: each line keeps its provider's cycle


def build_fast(
    run_dir: Path,
    n: int,
    seed: int = 7,
    on_write: Callable[[int], None] | None = None,
    priced: bool = False,
) -> None:
    """`build`'s records, written from a template: `_POOL` records built with pydantic,
    each line then repeated with its own record_id and trial (the figures and start times
    repeat every `_POOL` records; the report reads every record). `on_write(bytes)` after
    each `_POOL` lines written (the runner's `SidecarWriter.grew`). `priced`: the manifest's
    config has `PRICES`, and the requests that did not fail ended on their own (``end``:
    successful answers, so the cost per successful answer has its interval)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    pool_dir = run_dir.parent / (run_dir.name + ".pool")
    build(pool_dir, _POOL, seed)
    templates: list[tuple[str, str, str]] = []
    for line in (pool_dir / "records.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec.update(record_id=_RID, trial=_TRIAL, warmup=False)
        if priced and rec["stop_reason"] == "length":
            rec["stop_reason"] = "end"
        text = json.dumps(rec, separators=(",", ":"))
        head, rest = text.split(f'"{_RID}"', 1)
        mid, tail = rest.split(str(_TRIAL), 1)
        templates.append((head + '"r', '"' + mid, tail + "\n"))
    shutil.rmtree(pool_dir)
    with (run_dir / "records.jsonl").open("w", encoding="utf-8", buffering=1 << 24) as fh:
        for start in range(0, n, _POOL):
            stop = min(n, start + _POOL)
            lines = [
                f"{h}{i}{m}{i}{t}"
                for (h, m, t), i in zip(templates, range(start, stop), strict=False)
            ]
            if start == 0:
                lines[:40] = [x.replace('"warmup":false', '"warmup":true', 1) for x in lines[:40]]
            data = "".join(lines)
            fh.write(data)
            if on_write is not None:
                on_write(len(data.encode("utf-8")))
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": "bench",
                "name": "bench",
                "status": "completed",
                "records": n,
                "providers": {
                    p[0]: {"kind": p[1], "model": p[2], "status": "ok"} for p in PROVIDERS
                },
                **({"config": {"prices": PRICES}} if priced else {}),
            }
        ),
        encoding="utf-8",
    )


#: The paired compare case: the groups (provider, experiment) whose TTFT the second run
#: moves, and by how much (ms); every other group keeps its distribution.
PAIRED_SHIFT_MS = 25.0
PAIRED_SHIFTED = {("openai", "single"), ("local", "attribution")}


def build_paired(run_dir: Path, n: int, shift_ms: float = 0.0, rotate: int = 0) -> None:
    """Two runs of one config for a paired compare: `build_fast`'s records, each with the
    plan_key ``k<i>`` (the same planned requests in every run built so), the TTFT of the
    `PAIRED_SHIFTED` groups (and their later timings) moved by `shift_ms`. Record i takes
    the template of record i + `rotate` (a multiple of the 20 groups' cycle): each group
    keeps its values, re-paired, so a shift of `shift_ms` is the whole true change."""
    run_dir.mkdir(parents=True, exist_ok=True)
    pool_dir = run_dir.parent / (run_dir.name + ".pool")
    build(pool_dir, _POOL, 7)
    templates: list[str] = []
    for line in (pool_dir / "records.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec.update(record_id=_RID, plan_key="k" + _RID, trial=_TRIAL, warmup=False)
        if (rec["provider"], rec["experiment"]) in PAIRED_SHIFTED and rec["client"]["ttft_ms"]:
            c = rec["client"]
            for name in ("first_event_ms", "ttft_ms", "last_token_ms", "e2e_ms"):
                c[name] += shift_ms
            c["event_offsets_ms"] = [x + shift_ms for x in c["event_offsets_ms"]]
        text = json.dumps(rec, separators=(",", ":")).replace("%", "%%")
        text = text.replace(f'"{_RID}"', '"r%(i)d"').replace(f'"k{_RID}"', '"k%(i)d"')
        templates.append(text.replace(str(_TRIAL), "%(i)d") + "\n")
    shutil.rmtree(pool_dir)
    with (run_dir / "records.jsonl").open("w", encoding="utf-8", buffering=1 << 24) as fh:
        for start in range(0, n, _POOL):
            lines = range(start, min(n, start + _POOL))
            fh.write("".join(templates[(i + rotate) % _POOL] % {"i": i} for i in lines))
    (run_dir / "manifest.json").write_text(
        json.dumps({"run_id": "bench", "name": "bench", "status": "completed", "records": n}),
        encoding="utf-8",
    )


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_mib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: The bounds at 10⁶ records (issue 30): seconds and peak RSS (MiB) of `labkit report`.
BOUND_S = 20.0
BOUND_MIB = 1024.0


def _verdict(value: float, bound: float) -> str:
    return "PASS" if value <= bound else "MISS"


def _load() -> str:
    """The host's load average: the figures are only as quiet as the host was."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(run_dir: Path, traced: bool) -> None:
    """Time write_report in this (fresh) process; print time and peak RSS (and, traced,
    the tracemalloc peak)."""
    import labkit.report  # noqa: F401  (imports are not part of the measurement)
    from labkit.report.build import REPORT_COLUMNS
    from labkit.report.load import load_run

    rss_before = _rss_mib()
    cpu = _cpu_s()
    t = time.perf_counter()
    write_report(run_dir)
    elapsed = time.perf_counter() - t
    cpu = _cpu_s() - cpu
    rss = _rss_mib()
    print(
        f"write_report: {elapsed:.2f} s {_verdict(elapsed, BOUND_S)} "
        f"(bound at 10⁶ records: {BOUND_S:.0f} s), CPU {cpu:.2f} s (all threads; the reader's "
        "threads use more of it when they have the cores to themselves)"
    )
    print(
        f"peak RSS of the process: {rss:,.0f} MiB {_verdict(rss, BOUND_MIB)} "
        f"(bound at 10⁶ records: {BOUND_MIB:,.0f} MiB; interpreter + imports: "
        f"{rss_before:,.0f} MiB)"
    )
    print(f"load average (1, 5, 15 min) after the report: {_load()}")
    t, cpu = time.perf_counter(), _cpu_s()
    records = len(load_run(run_dir, REPORT_COLUMNS).records)
    print(
        f"reading the {records:,} records into the report's columns again, alone: "
        f"{time.perf_counter() - t:.2f} s, CPU {_cpu_s() - cpu:.2f} s"
    )
    if not traced:
        return
    tracemalloc.start()
    write_report(run_dir)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"tracemalloc peak during write_report: {peak / 2**20:,.0f} MiB")


#: The bounds of the ladder (issue 47): seconds per size, and peak RSS.
LADDER_BOUND_S = {100_000: 20.0, 1_000_000: 20.0, 10_000_000: 60.0}
COMPARE_BOUND_S = 20.0


def step(what: str, dirs: list[Path]) -> None:
    """One measured step, in this (fresh) process: print its seconds, CPU and peak RSS as
    a JSON line (`whole`: the report as main reads a run, records.jsonl whole)."""
    import labkit.report  # noqa: F401  (imports are not part of the measurement)
    from labkit.report import columnar, write_comparison

    rss_before = _rss_mib()
    cpu = _cpu_s()
    t = time.perf_counter()
    if what == "sidecar":
        built = columnar.sidecar(dirs[0], min_bytes=0)
        assert built is not None, "no sidecar was built"
    elif what == "report":
        write_report(dirs[0])
    elif what == "report-before":
        _cost_as_before()
        write_report(dirs[0])
    elif what == "whole":
        columnar.SIDECAR_MIN_BYTES = 1 << 62  # never a sidecar: the path main takes
        write_report(dirs[0])
    elif what == "compare":
        write_comparison(dirs, dirs[0].parent / "compare")
    else:
        raise SystemExit(f"unknown step {what!r}")
    out = {
        "s": time.perf_counter() - t,
        "cpu": _cpu_s() - cpu,
        "rss": _rss_mib(),
        "rss_imports": rss_before,
    }
    print("STEP " + json.dumps(out), flush=True)


#: The resident memory at which the priced case's "before" step is stopped (GiB): main's
#: cost interval asks numpy for 999 × n indices at once (8 GB at 10⁶) and the resampled
#: columns (16 GB more), which this host's 23 GiB would meet by swapping. (An address-space
#: limit would stop Arrow's allocator first, whatever scipy needs.)
BEFORE_STOP_GIB = 4
#: The seconds after which the "before" step is stopped.
BEFORE_STOP_S = 300


def _cost_as_before() -> None:
    """The cost per successful answer as main computed it (commit ca01476):
    `scipy.stats.bootstrap`, paired, vectorized=False, 999 resamples; the process stopped
    above `BEFORE_STOP_GIB` of resident memory."""
    import math

    import numpy as np

    from labkit.analysis import cost, stats
    from labkit.figures import Estimate

    def ratio_of_sums(numerator: list[float], denominator: list[float]) -> Estimate | None:
        x, y = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
        if x.size == 0 or float(y.sum()) <= 0:
            return None
        value = float(x.sum() / y.sum())
        if x.size < 2:
            return Estimate(value=value)

        def ratio(xs: np.ndarray, ys: np.ndarray) -> float:
            den = float(ys.sum())
            return float(xs.sum()) / den if den > 0 else math.inf

        return stats._percentile_bootstrap((x, y), ratio, value, 0.95, paired=True)

    cost.ratio_of_sums = ratio_of_sums  # type: ignore[assignment]
    threading.Thread(target=_stop_above, args=(BEFORE_STOP_GIB << 30,), daemon=True).start()


def _stop_above(limit: int) -> None:
    """Exit the process (status 3, a line on stderr) once its resident memory passes
    `limit` bytes: polled ten times a second."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    while True:
        with open("/proc/self/statm", encoding="ascii") as fh:
            rss = int(fh.read().split()[1]) * page
        if rss > limit:
            print(
                f"stopped at {time.perf_counter() - start:.1f} s: resident memory "
                f"{rss / 2**30:.1f} GiB > {limit / 2**30:.0f} GiB",
                file=sys.stderr,
                flush=True,
            )
            os._exit(3)
        time.sleep(0.1)


def _run_step(what: str, dirs: list[Path], timeout: float | None = None) -> dict[str, float]:
    command = [sys.executable, __file__, "--step", what, *map(str, dirs)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
    line = [x for x in done.stdout.splitlines() if x.startswith("STEP ")][-1]
    result: dict[str, float] = json.loads(line.removeprefix("STEP "))
    return result


def _line(label: str, m: dict[str, float], bound_s: float | None) -> str:
    verdict = ""
    if bound_s is not None:
        verdict = (
            f" {_verdict(m['s'], bound_s)} (≤ {bound_s:.0f} s), peak RSS {m['rss']:,.0f} MiB "
            f"{_verdict(m['rss'], BOUND_MIB)} (≤ {BOUND_MIB:,.0f} MiB)"
        )
    else:
        verdict = f", peak RSS {m['rss']:,.0f} MiB (no bound)"
    return f"{label}: {m['s']:.1f} s, CPU {m['cpu']:.1f} s{verdict}; load average {_load()}"


def record(run_dir: Path, n: int, seed: int = 7, priced: bool = False) -> dict[str, float]:
    """Write a run of `n` records as labkit records one: records.jsonl by the template
    generator, and the sidecar's parts converted as it grows by the runner's own
    `SidecarWriter` (child processes at the lowest priority; the last part at the end).
    Returns the seconds writing took, the seconds the end waited for the last part, the
    children's CPU seconds and how many there were."""
    from labkit.runner.sidecar import SidecarWriter

    writer = SidecarWriter(run_dir)
    children_cpu = _children_cpu_s()
    t = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    build_fast(run_dir, n, seed, on_write=writer.grew, priced=priced)
    written = time.perf_counter() - t
    asyncio.run(writer.finish())
    return {
        "write_s": written,
        "end_wait_s": time.perf_counter() - t - written,
        "cpu": _children_cpu_s() - children_cpu,
        "children": len(writer.started),
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _recorded(n: int, rec: dict[str, float], size_gib: float) -> str:
    return (
        f"-- {n:,} records: records.jsonl {size_gib:,.2f} GiB, written in {rec['write_s']:.0f} s "
        f"(not timed); recording's conversion (not the report's): {rec['children']:.0f} "
        f"child process(es) at nice 19, CPU {rec['cpu']:.1f} s, the run's end waited "
        f"{rec['end_wait_s']:.1f} s for the last part"
    )


def ladder(sizes: list[int], root: Path, compare: int, foreign_10e7: bool) -> None:
    """The ladder (see the module): each size recorded, measured, deleted; then compare of
    two runs of `compare` records (0: none)."""
    from labkit.report.columnar import SIDECAR_DIR

    print(f"host: {os.cpu_count()} CPUs; load average before: {_load()}")
    for n in sizes:
        run_dir = root / f"run-{n}"
        rec = record(run_dir, n)
        size = (run_dir / "records.jsonl").stat().st_size / 2**30
        print(_recorded(n, rec, size), flush=True)
        bound = LADDER_BOUND_S.get(n, 60.0)
        report = _run_step("report", [run_dir])
        print(_line(f"{n:,} first report (sidecar recorded with the run)", report, bound))
        if n == 1_000_000:
            whole = _run_step("whole", [run_dir])
            print(_line(f"{n:,} before: report, records.jsonl read whole", whole, bound))
        if n == 1_000_000 or (n >= 10_000_000 and foreign_10e7):
            shutil.rmtree(run_dir / SIDECAR_DIR)
            built = _run_step("sidecar", [run_dir])
            print(
                _line(
                    f"{n:,} a run with no sidecar (an old run): its one-time conversion",
                    built,
                    None,
                ),
                flush=True,
            )
        shutil.rmtree(run_dir)
    if compare:
        compare_pair(root, compare)


def compare_pair(root: Path, n: int) -> None:
    """`compare` of two `n`-record runs, each in a fresh process after both sidecars are
    built (not timed): unpaired (no plan_keys, the two seeds' records) and paired
    (`build_paired`: the same plan_keys and values, re-paired, TTFT moved by
    `PAIRED_SHIFT_MS` in `PAIRED_SHIFTED`); each run deleted after."""
    for what in ("unpaired", "paired"):
        runs = [root / "compare-base", root / "compare-other"]
        for seed, run in zip((7, 11), runs, strict=True):
            if what == "paired":
                build_paired(run, n, *((0.0, 0) if seed == 7 else (PAIRED_SHIFT_MS, 20 * 37)))
                _run_step("sidecar", [run])  # what the first reader does, once: not timed
            else:
                record(run, n, seed=seed)  # as labkit records it: parts converted as it grows
        both = _run_step("compare", runs)
        print(_line(f"compare of two {n:,}-record runs, {what}", both, COMPARE_BOUND_S))
        if what == "paired":
            _say_paired(root / "compare" / "compare.csv")
        for run in runs:
            shutil.rmtree(run)
        shutil.rmtree(root / "compare", ignore_errors=True)


def _say_paired(table: Path) -> None:
    """The paired case's TTFT p50 rows: the planted shift found where it was planted."""
    import pandas as pd

    df = pd.read_csv(table)
    rows = df[df["metric"] == "ttft_p50"]
    for r in rows.itertuples():
        planted = PAIRED_SHIFT_MS if (r.provider, r.experiment) in PAIRED_SHIFTED else 0.0
        print(
            f"  {r.provider}/{r.experiment}: paired={r.paired} planted {planted:+.0f} ms, "
            f"change {r.change:+.2f} ms [{r.change_low:+.2f}, {r.change_high:+.2f}] {r.verdict}"
        )


def priced(root: Path, n: int) -> None:
    """The priced case (`--priced`): a run of `n` records with a `prices:` table, recorded
    as `record` does; its first report in a fresh process (the cost section's intervals
    included), then the report as main computed the cost per successful answer
    (`_cost_as_before`; a failure's last line printed, not raised), then `compare` of two
    such runs (above 10⁶ records: the first report only, 10⁷ is ~34 GiB). Each run deleted
    after."""
    print(f"host: {os.cpu_count()} CPUs; load average before: {_load()}")
    runs = [root / "priced-base", root / "priced-other"]
    rec = record(runs[0], n, priced=True)
    size = (runs[0] / "records.jsonl").stat().st_size / 2**30
    print(_recorded(n, rec, size) + " (priced)", flush=True)
    bound = LADDER_BOUND_S.get(n, 60.0)
    after = _run_step("report", [runs[0]])
    print(_line(f"{n:,} priced, first report", after, bound), flush=True)
    _say_cost(runs[0] / "report.md")
    if n > 1_000_000:  # two such runs are never kept at once; main's interval takes minutes
        print(f"(at {n:,}: no 'before' step and no compare; the run is deleted)")
        shutil.rmtree(runs[0])
        return
    t = time.perf_counter()
    try:
        before = _run_step("report-before", [runs[0]], timeout=BEFORE_STOP_S)
        print(_line(f"{n:,} priced, before (main's cost interval)", before, bound))
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or "").strip().splitlines()[-1:] or ["(no message)"]
        print(
            f"{n:,} priced, before (main's cost interval): failed after "
            f"{time.perf_counter() - t:.1f} s: {last[0]}"
        )
    except subprocess.TimeoutExpired:
        print(f"{n:,} priced, before (main's cost interval): stopped at {BEFORE_STOP_S} s")
    record(runs[1], n, seed=11, priced=True)
    both = _run_step("compare", runs)
    print(_line(f"compare of two {n:,}-record priced runs", both, COMPARE_BOUND_S), flush=True)
    for run in runs:
        shutil.rmtree(run)
    shutil.rmtree(root / "compare", ignore_errors=True)


def _say_cost(report: Path) -> None:
    """The report's cost table rows, as it printed them."""
    lines = report.read_text(encoding="utf-8").splitlines()
    start = next((i for i, x in enumerate(lines) if x.strip("# ") == "Cost"), None)
    if start is None:
        print("  (no cost section)")
        return
    rows = [x for x in lines[start:] if x.startswith("|")]
    for x in rows[:6]:
        print("  " + x)


@contextlib.contextmanager
def _scratch(parent: Path | None) -> Iterator[Path]:
    """A temporary folder for generated runs (under `parent`, else the system's), deleted
    after, whatever happened."""
    root = Path(tempfile.mkdtemp(prefix="labkit-bench-", dir=parent))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    """Build the run, then measure write_report in a fresh process."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ladder", action="store_true", help="10⁵, 10⁶, 10⁷ and compare")
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--compare", type=int, default=1_000_000, help="records per compared run")
    ap.add_argument("--dir", type=Path, help="where the ladder writes its runs (a temp folder)")
    ap.add_argument(
        "--foreign-10e7",
        action="store_true",
        help="also time the one-time conversion of a 10⁷ run with no sidecar (minutes)",
    )
    ap.add_argument("--compare-only", action="store_true", help="only compare, unpaired and paired")
    ap.add_argument(
        "--priced",
        type=int,
        metavar="N",
        help="only the priced case: a run of N records with prices, its report before/after",
    )
    ap.add_argument("--step", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--traced", action="store_true", help="also the tracemalloc peak")
    ap.add_argument("--measure-only", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        step(args.step[0], [Path(p) for p in args.step[1:]])
        return 0
    if args.ladder:
        with _scratch(args.dir) as root:
            sizes = [int(x) for x in args.sizes.split(",") if x]
            ladder(sizes, root, args.compare, args.foreign_10e7)
        return 0
    if args.priced:
        with _scratch(args.dir) as root:
            priced(root, args.priced)
        return 0
    if args.compare_only:
        with _scratch(args.dir) as root:
            print(f"host: {os.cpu_count()} CPUs; load average before: {_load()}")
            compare_pair(root, args.compare)
        return 0
    if args.measure_only:
        measure(args.measure_only, args.traced)
        return 0
    tmp = None
    if args.keep:
        run_dir = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="labkit-bench-")
        run_dir = Path(tmp) / "run"
    try:
        if not (run_dir / "records.jsonl").is_file():
            t = time.perf_counter()
            build(run_dir, args.records)
            print(f"built {args.records:,} records in {time.perf_counter() - t:.1f} s")
        size = (run_dir / "records.jsonl").stat().st_size / 2**20
        print(f"records.jsonl: {size:,.0f} MiB; load average before the report: {_load()}")
        traced = ["--traced"] if args.traced else []
        command = [sys.executable, __file__, "--measure-only", str(run_dir), *traced]
        subprocess.run(command, check=True)
        html = (run_dir / "report.html").stat().st_size / 2**10
        print(f"report.html: {html:,.0f} KiB")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
