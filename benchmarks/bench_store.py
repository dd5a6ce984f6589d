"""Benchmark: `labkit store import` of one large run into DuckDB and into PostgreSQL (not a
test; run by hand).

    .venv/bin/python benchmarks/bench_store.py [--records 1000000] [--keep DIR] [--no-whole]

Records a run folder of realistic records as labkit records one (bench_report's `record`:
several providers, ~2% errors, 64 event offsets each, the columnar sidecar's parts
converted as it grows; reused with --keep DIR when it exists), then loads it into a new
DuckDB file and into a throwaway PostgreSQL server (tests/support/postgres.py), each in a
fresh process, and prints records per second and peak RSS for the first load and for a
second load of the same run (which adds nothing), with the host's load average: through
the sidecar's parts (a Parquet row group at a time: what a large run takes now), and, unless
--no-whole, with records.jsonl read whole (the path before: the whole frame held).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_report  # this folder is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]


def measure(url: str, run_dir: Path, how: str) -> None:
    """In this process: two loads of `run_dir` into `url` (`how`: "parts" through the
    sidecar, "whole": records.jsonl read whole); prints one JSON line."""
    from labkit.report import columnar
    from labkit.store import open_store

    if how == "whole":
        columnar.SIDECAR_MIN_BYTES = 1 << 62

    store = open_store(url)
    out: dict[str, float] = {}
    for name in ("first", "again"):
        start = time.perf_counter()
        result = store.load_run(run_dir)
        out[f"{name}_s"] = time.perf_counter() - start
        out[f"{name}_added"] = result.added
    store.close()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def _child(url: str, run_dir: Path, how: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", url, str(run_dir), how],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    """Build (or reuse) the run, load it into both stores, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--no-whole", action="store_true", help="skip the load read whole")
    ap.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(args.measure[0], Path(args.measure[1]), args.measure[2])
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="bench-store-"))
    run_dir = args.keep or scratch / "run"
    try:
        if not (run_dir / "records.jsonl").is_file():
            bench_report.record(run_dir, args.records)
        n = sum(1 for _ in (run_dir / "records.jsonl").open("rb"))
        size = (run_dir / "records.jsonl").stat().st_size / 2**20
        print(f"{n} records ({size:.0f} MiB); load average {os.getloadavg()[0]:.2f}")
        sys.path.insert(0, str(ROOT))
        from tests.support.postgres import PostgresServer

        server = PostgresServer()
        try:
            for how in ("parts", "whole")[: 1 if args.no_whole else 2]:
                for name, url in (
                    ("duckdb", str(scratch / f"store-{how}.duckdb")),
                    ("postgres", server.create_database()),
                ):
                    r = _child(url, run_dir, how)
                    print(
                        f"{name:9} {how:5} first load {r['first_s']:6.1f} s "
                        f"({n / r['first_s']:9.0f} records/s, {r['first_added']:.0f} added); "
                        f"again {r['again_s']:6.1f} s ({r['again_added']:.0f} added); "
                        f"peak RSS {r['peak_rss_mib']:.0f} MiB; load average "
                        f"{os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
        finally:
            server.destroy()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
