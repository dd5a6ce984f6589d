"""Benchmark: the report over 100,000 (or 10⁶) synthetic records (not a test; run by hand).

    .venv/bin/python benchmarks/bench_report.py [--records 100000] [--keep DIR] [--traced]

Builds a run folder of realistic records (several providers and experiments, ~2% errors,
warm-ups, 64 event offsets each, no lab.json: the report computes every statistic from the
records; reused with --keep DIR when it exists), then times `write_report` in a fresh
process and prints its peak RSS beside the bounds (10⁶ records: 20 s, 1 GiB; PASS or MISS)
and the host's load average;
--traced adds the tracemalloc peak (a second, traced pass, slower).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
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


def main() -> int:
    """Build the run, then measure write_report in a fresh process."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--traced", action="store_true", help="also the tracemalloc peak")
    ap.add_argument("--measure-only", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
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
